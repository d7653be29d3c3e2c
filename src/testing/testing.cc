#include "testing/testing.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace tessera::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::random_device rd;
  const fs::path base = fs::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path p = base / ("tessera-test-" + std::to_string(rd()));
    if (fs::create_directory(p)) {
      path_ = p.string();
      return;
    }
  }
  std::abort();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string p = File(name);
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

std::string WritePrivateFile(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  // fchmod too: an existing file keeps its mode through O_CREAT.
  if (fd < 0 || fchmod(fd, 0600) != 0 ||
      write(fd, content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    std::abort();
  }
  close(fd);
  return path;
}

TcpListener::TcpListener(int port) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof addr;
  if (fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      listen(fd_, 1) == 0 && getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port_ = ntohs(addr.sin_port);
  }
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) close(fd_);
}

std::string SourceDir() {
  if (const char* env = std::getenv("TESSERA_SOURCE_DIR"); env && *env) return env;
  return TESSERA_SOURCE_DIR;
}

std::optional<std::string> DatasetsDir() {
  if (const char* env = std::getenv("TESSERA_DATASETS"); env && *env) {
    if (fs::is_directory(env)) return std::string(env);
    return std::nullopt;
  }
  const fs::path p = fs::path(SourceDir()) / ".." / "shared" / "datasets";
  if (fs::is_directory(p)) return fs::canonical(p).string();
  return std::nullopt;
}

std::string DatasetsMissingMessage() {
  return "public traces not found: put them in ../shared/datasets or set TESSERA_DATASETS "
         "(see README.md, 'Public traces')";
}

std::string TesseraBinary() {
  if (const char* env = std::getenv("TESSERA_BIN"); env && *env) return env;
  return (fs::path(SourceDir()) / "build" / "release" / "tessera").string();
}

CommandResult RunProgram(const std::vector<std::string>& argv, const std::string& stdin_text,
                         const std::vector<std::pair<std::string, std::string>>& env) {
  TempDir io;
  const std::string in_path = io.Write("stdin", stdin_text);
  const std::string out_path = io.File("stdout");
  const std::string err_path = io.File("stderr");
  CommandResult result;
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(in_path.c_str(), "r", stdin) || !freopen(out_path.c_str(), "w", stdout) ||
        !freopen(err_path.c_str(), "w", stderr)) {
      _exit(127);
    }
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  return result;
}

CommandResult RunTessera(const std::vector<std::string>& args, const std::string& stdin_text) {
  std::vector<std::string> argv = {TesseraBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv, stdin_text);
}

bool MakeSelfSignedCert(const TempDir& dir, std::string& cert, std::string& key) {
  cert = dir.File("cert.pem");
  key = dir.File("key.pem");
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
      "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
      key + "' -out '" + cert + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop(SIGKILL);
}

bool ServerProcess::Start(const std::vector<std::string>& args, const std::string& admin_token) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const std::string bin = binary_.empty() ? TesseraBinary() : binary_;
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    if (!admin_token.empty()) setenv("TESSERA_ADMIN_TOKEN", admin_token.c_str(), 1);
    std::vector<std::string> all = {bin, "server", "--listen",
                                    listen_host_ + ":" + std::to_string(listen_port_)};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const std::string marker = "listening on ";
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return false;  // Exited before it was ready.
    output_.append(buf, static_cast<size_t>(n));
    const size_t at = output_.find(marker);
    if (at == std::string::npos) continue;
    // "listening on http://HOST:PORT " or "https://...".
    const std::string host = "://" + listen_host_ + ":";
    const size_t h = output_.find(host, at);
    if (h == std::string::npos) continue;
    const size_t start = h + host.size();
    const size_t end = output_.find_first_not_of("0123456789", start);
    if (end == std::string::npos) continue;
    port_ = std::stoi(output_.substr(start, end - start));
    url_ = output_.substr(at + marker.size(), h - at - marker.size()) +
           "://127.0.0.1:" + std::to_string(port_);
    return true;
  }
  return false;
}

void ServerProcess::DiscardOutput() {
  if (drain_.joinable() || out_fd_ < 0) return;
  drain_ = std::thread([fd = out_fd_] {
    char buf[4096];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
  });
}

int ServerProcess::Stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  if (drain_.joinable()) {
    drain_.join();
  } else {
    char buf[4096];
    ssize_t n;
    while ((n = read(out_fd_, buf, sizeof(buf))) > 0) output_.append(buf, static_cast<size_t>(n));
  }
  close(out_fd_);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The CPU seconds (user + system) process `pid` has used.
double Percentile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(samples.size())));
  return samples[std::clamp<size_t>(rank, 1, samples.size()) - 1];
}

double BootSeconds() {
  timespec t{};
  clock_gettime(CLOCK_BOOTTIME, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

double CpuSeconds(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 1; i <= 13 && rest >> field; ++i) {
    if (i >= 12) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace tessera::testing

namespace tessera::testing {

std::string FakeKmsScript(const std::string& current_key_file) {
  return "#!/bin/sh\n"
         "case \"$1\" in\n"
         "  wrap) read -r dek; printf '%s %s\\n' \"$(cat " +
         current_key_file +
         ")\" \"$(printf 'w:%s' \"$dek\" | base64 -w0)\" ;;\n"
         "  unwrap) read -r w; printf '%s' \"$w\" | base64 -d | sed 's/^w://'; echo ;;\n"
         "esac\n";
}

int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log,
                           const std::vector<std::pair<std::string, std::string>>& env, int uid) {
  pid_ = fork();
  if (pid_ != 0) return;
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  dup2(fd, STDOUT_FILENO);
  dup2(fd, STDERR_FILENO);
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  if (uid >= 0) {
    const auto id = static_cast<uid_t>(uid);
    if (setgroups(0, nullptr) != 0 || setgid(id) != 0 || setuid(id) != 0) _exit(126);
  }
  ExecArgv(argv);
}

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

void ExecArgv(const std::vector<std::string>& argv) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

int ChildProcess::Stop(int signal) {
  if (pid_ <= 0) return -1;
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::optional<std::string> PromtoolProblems(const std::string& exposition) {
  if (access("/usr/bin/promtool", X_OK) != 0) return std::nullopt;
  TempDir dir;
  const std::string file = dir.Write("metrics.txt", exposition);
  const std::string cmd = "/usr/bin/promtool check metrics < " + file + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "cannot run promtool";
  std::string report;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) report.append(buf, n);
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // Exit 3 is lint only; anything else but 0 is a failure to parse.
  if (code != 0 && code != 3) return "promtool exit " + std::to_string(code) + ": " + report;
  std::string problems;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    const bool dcgm = line.rfind("DCGM_", 0) == 0 || line.rfind("tessera_gpu_", 0) == 0 ||
                      line.rfind("tessera_node_ready", 0) == 0;
    const bool naming =
        line.find("label names should be written in 'snake_case'") != std::string::npos ||
        line.find("counter metrics should have \"_total\" suffix") != std::string::npos ||
        line.find("metric names should be written in 'snake_case'") != std::string::npos;
    if (line.empty() || (dcgm && naming)) continue;
    problems += line + "\n";
  }
  return problems;
}

}  // namespace tessera::testing
