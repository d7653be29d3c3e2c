#include "common/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera {

Status WritePrivateFile(const std::string& path, const std::string& content, unsigned mode,
                        bool sync) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, getpid());
  unlink(tmp.c_str());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Status::Internal(fmt::format("{}: cannot create: {}", tmp, strerror(errno)));
  // The umask may have narrowed the mode; a wider one is never asked for here.
  fchmod(fd, mode);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return Status::Internal(fmt::format("{}: cannot write: {}", tmp, strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if ((sync && fsync(fd) != 0) || close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Status::Internal(fmt::format("{}: cannot write: {}", path, strerror(err)));
  }
  return Status::Ok();
}

}  // namespace tessera
