#include "common/secret_env.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

namespace tessera {

namespace {

// A token is 68 bytes; anything this large is the wrong file, not a secret.
constexpr size_t kMaxSecretFileBytes = 64 * 1024;

// [start, end) of the environment block the kernel shows as /proc/self/environ: fields 50 and 51
// (env_start, env_end) of /proc/self/stat, which a process may always read of itself. nullopt
// when they cannot be read (a kernel before 3.5).
std::optional<std::pair<uintptr_t, uintptr_t>> EnvironmentBlock() {
  std::ifstream in("/proc/self/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(paren + 1));
  std::string field;
  uintptr_t start = 0, end = 0;
  for (int n = 3; n <= 51 && rest >> field; ++n) {
    if (n == 50) start = static_cast<uintptr_t>(std::strtoull(field.c_str(), nullptr, 10));
    if (n == 51) end = static_cast<uintptr_t>(std::strtoull(field.c_str(), nullptr, 10));
  }
  if (start == 0 || end <= start) return std::nullopt;
  return std::make_pair(start, end);
}

}  // namespace

std::optional<std::string> TakeSecretEnv(const char* name) {
  char* found = std::getenv(name);
  if (found == nullptr) return std::nullopt;
  std::string value = found;
  // The value getenv sees: in the original block or, if setenv replaced it, on the heap.
  explicit_bzero(found, value.size());
  // Every entry of that name in the original block: a duplicate that getenv never returns, or
  // the value a setenv replaced, is still there for /proc/PID/environ to show.
  if (auto block = EnvironmentBlock()) {
    const size_t name_size = std::strlen(name);
    char* p = reinterpret_cast<char*>(block->first);
    char* const end = reinterpret_cast<char*>(block->second);
    while (p < end) {
      const size_t size = strnlen(p, static_cast<size_t>(end - p));
      if (size > name_size && std::memcmp(p, name, name_size) == 0 && p[name_size] == '=') {
        explicit_bzero(p + name_size + 1, size - name_size - 1);
      }
      p += size + 1;
    }
  }
  unsetenv(name);
  return value;
}

Result<std::string> ReadSecretFile(const std::string& path) {
  // O_NONBLOCK so a FIFO put in the file's place is refused below rather than waited on.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    return Status::NotFound(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  // Checked on the open descriptor, so the file checked is the file read.
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Status::InvalidArgument(fmt::format("{} is not a regular file", path));
  }
  const unsigned mode = st.st_mode & 07777;
  if ((mode & 077) != 0) {
    close(fd);
    return Status::PermissionDenied(fmt::format(
        "{}: permissions {:04o} are too open: group or others may access it, and a secret file "
        "must be private to its owner (chmod 600 {})",
        path, mode, path));
  }
  std::string secret;
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fd, buf, sizeof(buf))) > 0 && secret.size() <= kMaxSecretFileBytes) {
    secret.append(buf, static_cast<size_t>(n));
  }
  const int err = errno;
  explicit_bzero(buf, sizeof(buf));
  close(fd);
  if (n < 0) return Status::Unavailable(fmt::format("{}: cannot read: {}", path, strerror(err)));
  if (secret.size() > kMaxSecretFileBytes) {
    return Status::InvalidArgument(
        fmt::format("{} is larger than {} bytes: not a secret", path, kMaxSecretFileBytes));
  }
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.empty()) return Status::InvalidArgument(fmt::format("{} is empty", path));
  return secret;
}

}  // namespace tessera
