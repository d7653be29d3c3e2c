// File helpers for the workload supervisor (see workload_files.h).
// Thread-safety: no shared state; safe from any thread.
#include "agent/workload_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "agent/workload_shim.h"

namespace tessera::agent {
namespace {

// Closes a descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status WriteAllTo(int fd, const std::string& content, const std::string& path) {
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t w = write(fd, content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::Internal(fmt::format("cannot write {}: {}", path, strerror(errno)));
    done += static_cast<size_t>(w);
  }
  return Status::Ok();
}

// The log's segment offsets in `dir`, oldest first.
Result<std::vector<int64_t>> ListSegments(const std::string& dir) {
  std::vector<int64_t> bases;
  std::error_code ec;
  const size_t prefix = std::strlen(shim::kSegmentPrefix);
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != prefix + shim::kSegmentDigits || name.rfind(shim::kSegmentPrefix, 0) != 0 ||
        !std::all_of(name.begin() + static_cast<ptrdiff_t>(prefix), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    int64_t base = 0;
    const char* digits = name.data() + prefix;
    const auto [stop, err] = std::from_chars(digits, name.data() + name.size(), base);
    if (err == std::errc() && stop == name.data() + name.size()) bases.push_back(base);
  }
  if (ec) return Status::Internal(fmt::format("cannot list {}: {}", dir, ec.message()));
  std::sort(bases.begin(), bases.end());
  return bases;
}

}  // namespace

Result<std::string> ReadTextFile(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("{} does not exist", path));
    return Status::Internal(fmt::format("cannot open {}: {}", path, strerror(errno)));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t r = read(fd.get(), buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::Internal(fmt::format("cannot read {}: {}", path, strerror(errno)));
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  return out;
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) {
      return Status::Internal(fmt::format("cannot create {}: {}", tmp, strerror(errno)));
    }
    TESSERA_RETURN_IF_ERROR(WriteAllTo(fd.get(), content, tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return Status::Internal(fmt::format("cannot rename {} to {}: {}", tmp, path, strerror(err)));
  }
  return Status::Ok();
}

Status WriteTextFile(const std::string& path, const std::string& content) {
  Fd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0)
    return Status::Internal(fmt::format("cannot open {}: {}", path, strerror(errno)));
  return WriteAllTo(fd.get(), content, path);
}

Result<std::string> ReadLogSegments(const std::string& dir, int64_t offset, size_t max_bytes,
                                    int64_t* next) {
  // The shim may remove a segment between the listing and the open: then list again. An open
  // segment stays readable even once removed, and bytes never move between segments.
  for (int attempt = 0; attempt < 5; ++attempt) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<int64_t> bases, ListSegments(dir));
    std::vector<Fd> fds;
    std::vector<int64_t> ends;
    for (int64_t base : bases) {
      char name[32];
      shim::SegmentName(base, name);
      Fd fd(open((dir + "/" + name).c_str(), O_RDONLY | O_CLOEXEC));
      struct stat st {};
      if (fd.get() < 0 || fstat(fd.get(), &st) != 0) break;
      ends.push_back(base + st.st_size);
      fds.push_back(std::move(fd));
    }
    if (fds.size() != bases.size()) continue;
    if (bases.empty()) {
      *next = 0;
      return std::string();
    }
    const int64_t start = std::clamp(offset, bases.front(), ends.back());
    const size_t want = std::min(max_bytes, static_cast<size_t>(ends.back() - start));
    std::string out;
    out.reserve(want);
    int64_t pos = start;
    for (size_t i = 0; i < fds.size() && out.size() < want; ++i) {
      if (pos >= ends[i]) continue;
      char buf[64 * 1024];
      while (pos < ends[i] && out.size() < want) {
        const size_t n =
            std::min({sizeof buf, want - out.size(), static_cast<size_t>(ends[i] - pos)});
        const ssize_t r = pread(fds[i].get(), buf, n, pos - bases[i]);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
          return Status::Internal(
              fmt::format("cannot read the log in {}: {}", dir, strerror(errno)));
        }
        if (r == 0) break;  // Shorter than it was: take what there is.
        out.append(buf, static_cast<size_t>(r));
        pos += r;
      }
      if (pos < ends[i]) break;  // Stopped early in this segment: the rest would leave a gap.
    }
    *next = start + static_cast<int64_t>(out.size());
    return out;
  }
  return Status::Unavailable(fmt::format("the log in {} kept rotating while read; try again", dir));
}

}  // namespace tessera::agent
