#include "testing/postgres.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// Who the server runs as: the postgres account when we are root, ourselves otherwise.
struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
  bool switch_to = false;
};

std::optional<Account> ServerAccount(std::string* error) {
  Account a;
  a.uid = getuid();
  a.gid = getgid();
  if (geteuid() != 0) return a;
  const passwd* pw = getpwnam("postgres");
  if (!pw) {
    *error = "running as root, and there is no postgres account to run the server as";
    return std::nullopt;
  }
  a.uid = pw->pw_uid;
  a.gid = pw->pw_gid;
  a.switch_to = true;
  return a;
}

// Runs argv (argv[0] a path) as `who`, output appended to `log`; returns its pid, or -1.
pid_t Spawn(const std::vector<std::string>& argv, const Account& who, const std::string& log) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (who.switch_to &&
      (setgroups(0, nullptr) != 0 || setgid(who.gid) != 0 || setuid(who.uid) != 0)) {
    _exit(126);
  }
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd >= 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
  }
  const int null = ::open("/dev/null", O_RDONLY);
  if (null >= 0) dup2(null, STDIN_FILENO);
  setsid();  // Out of the test's process group: a terminal's ^C stops the test, not this first.
  ExecArgv(argv);
}

int WaitFor(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > 4000) s.erase(0, s.size() - 4000);  // The end says why it stopped.
  return s;
}

}  // namespace

std::optional<std::string> PostgresBinDir() {
  if (const char* env = std::getenv("TESSERA_PG_BINDIR"); env && *env) {
    if (fs::exists(fs::path(env) / "postgres")) return std::string(env);
    return std::nullopt;
  }
  std::error_code ec;
  int best = -1;
  std::string found;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string name = entry.path().filename().string();
    const int version = std::atoi(name.c_str());
    if (version > best && fs::exists(entry.path() / "bin" / "postgres") &&
        fs::exists(entry.path() / "bin" / "initdb")) {
      best = version;
      found = (entry.path() / "bin").string();
    }
  }
  if (best < 0) return std::nullopt;
  return found;
}

std::unique_ptr<PostgresServer> PostgresServer::Start(std::string* error, bool durable) {
  const auto bin = PostgresBinDir();
  if (!bin) {
    *error = "PostgreSQL is not installed (scripts/bootstrap.sh installs Debian's postgresql)";
    return nullptr;
  }
  const auto who = ServerAccount(error);
  if (!who) return nullptr;
  std::unique_ptr<PostgresServer> s(new PostgresServer());
  s->bin_ = *bin;
  s->durable_ = durable;
  s->dir_ = std::make_unique<TempDir>();
  const std::string root = s->dir_->path();
  s->data_ = root + "/data";
  s->socket_dir_ = root + "/socket";
  s->log_ = root + "/postgres.log";
  mkdir(s->socket_dir_.c_str(), 0700);
  for (const std::string& path : {root, s->socket_dir_}) {
    if (chown(path.c_str(), who->uid, who->gid) != 0) {
      *error = "cannot give " + path + " to the server's account";
      return nullptr;
    }
  }
  const int init = WaitFor(Spawn({s->bin_ + "/initdb", "-D", s->data_, "-U", "tessera", "-A",
                                  "trust", "-E", "UTF8", "--locale=C", "--no-sync"},
                                 *who, s->log_));
  if (init != 0) {
    *error = "initdb failed (exit " + std::to_string(init) + "): " + Slurp(s->log_);
    return nullptr;
  }
  if (!s->Launch()) {
    *error = "PostgreSQL did not start: " + Slurp(s->log_);
    return nullptr;
  }
  return s;
}

bool PostgresServer::Launch() {
  std::string ignored;
  const auto who = ServerAccount(&ignored);
  if (!who) return false;
  if (port_ == 0) port_ = FreeTcpPort();
  std::vector<std::string> argv = {bin_ + "/postgres",
                                   "-D",
                                   data_,
                                   "-p",
                                   std::to_string(port_),
                                   "-k",
                                   socket_dir_,
                                   "-c",
                                   "listen_addresses=127.0.0.1",
                                   "-c",
                                   "max_connections=300",
                                   "-c",
                                   "shared_buffers=64MB"};
  if (!durable_) {
    for (const char* setting : {"fsync=off", "full_page_writes=off", "synchronous_commit=off"}) {
      argv.insert(argv.end(), {"-c", setting});
    }
  }
  pid_ = Spawn(argv, *who, log_);
  if (pid_ <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    if (Psql("postgres", "SELECT 1").value_or("") == "1\n") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

PostgresServer::~PostgresServer() { Stop(); }

bool PostgresServer::Stop() {
  if (pid_ <= 0) return false;
  kill(pid_, SIGINT);  // Fast shutdown: ends the sessions, checkpoints, exits.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int status = 0;
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGQUIT);  // Immediate shutdown.
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
  return true;
}

bool PostgresServer::Restart() {
  Stop();
  return Launch();
}

std::string PostgresServer::CreateDatabase() {
  const std::string name = fmt::format("t{}_{}", getpid(), ++next_db_);
  if (!Psql("postgres", "CREATE DATABASE " + name + " ENCODING 'UTF8'")) {
    std::fprintf(stderr, "cannot create database %s: %s\n", name.c_str(), Slurp(log_).c_str());
    std::abort();
  }
  return fmt::format("postgres://tessera@127.0.0.1:{}/{}", port_, name);
}

std::string PostgresServer::SocketUrl(const std::string& tcp_url) const {
  const std::string name = tcp_url.substr(tcp_url.rfind('/') + 1);
  return fmt::format("postgres://tessera@/{}?host={}&port={}", name, socket_dir_, port_);
}

std::optional<std::string> PostgresServer::Psql(const std::string& db,
                                                const std::string& sql) const {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  const std::string psql = bin_ + "/psql";
  const std::string port = std::to_string(port_);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, STDERR_FILENO);
    execl(psql.c_str(), psql.c_str(), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
          "127.0.0.1", "-p", port.c_str(), "-U", "tessera", "-d", db.c_str(), "-c", sql.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  std::string out = ReadAll(fds[0]);
  close(fds[0]);
  if (WaitFor(pid) != 0) return std::nullopt;
  return out;
}

PostgresServer* SharedPostgres(std::string* error) {
  static std::string start_error;
  static std::unique_ptr<PostgresServer> server = PostgresServer::Start(&start_error);
  if (!server) *error = start_error;
  return server.get();
}

}  // namespace tessera::testing
