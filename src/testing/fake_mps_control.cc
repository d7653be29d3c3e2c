// A fake nvidia-cuda-mps-control for tests, built as an executable of that name in a folder of
// its own. It keeps the real tool's interface and rules, with made-up MPS servers:
//   -d      checks $CUDA_MPS_PIPE_DIRECTORY is set and is a directory (the fake never falls back
//           to the real default, /tmp/nvidia-mps), refuses when a daemon already runs there, then
//           forks a daemon (setsid, stdio on /dev/null) that writes
//           PIPE/nvidia-cuda-mps-control.pid (the real daemon's file), appends "daemon started
//           CUDA_VISIBLE_DEVICES=<value>" to PIPE/commands.log and stays until killed. It returns
//           once the daemon is ready.
//   (none)  with no live daemon in $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps): prints
//           "Cannot find MPS control daemon process" to stderr and exits 1. Else it reads commands
//           from stdin, one a line, appends each verbatim to PIPE/commands.log, and answers them:
//             get_server_list                          the servers' PIDs, one a line
//             start_server -uid UID                    a server for UID, unless one runs
//             set_default_active_thread_percentage P   P in 1..100
//             set_default_device_pinned_mem_limit DEV VALUE
//             set_active_thread_percentage PID P
//             set_device_pinned_mem_limit PID DEV VALUE
//             shutdown_server PID [-f]
//             quit                                     SIGTERM to the daemon, its pid file removed
//           DEV must be below the number of GPUs the daemon was given (CUDA_VISIBLE_DEVICES, any
//           when unset), VALUE digits with an optional K, M or G, PID a server's. A command that
//           breaks a rule, or an unknown one, prints an error line and the exit status is 1.
// The servers live in PIPE/servers ("PID UID" lines) with PIDs above Linux's PID_MAX_LIMIT, so no
// real process ever has one. Plain C++ and POSIX; invocations on one pipe directory take turns
// (flock).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr char kPidFile[] = "nvidia-cuda-mps-control.pid";
constexpr int64_t kFirstServerPid = 4194304 + 1;  // PID_MAX_LIMIT + 1.

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp, std::ios::trunc) << text;
  std::rename(tmp.c_str(), path.c_str());
}

void Append(const std::string& path, const std::string& line) {
  std::ofstream(path, std::ios::app) << line << "\n";
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// A non-negative decimal integer, or -1.
int64_t Number(const std::string& s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoll(s);
}

// Alive and not a zombie (an exited daemon whose parent, init, has not reaped it yet).
bool Alive(pid_t pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

std::string FirstWord(const std::string& path) {
  const std::vector<std::string> words = Words(ReadFile(path));
  return words.empty() ? "" : words.front();
}

pid_t DaemonPid(const std::string& dir) {
  const int64_t pid = Number(FirstWord(dir + "/" + kPidFile));
  return pid > 0 && Alive(static_cast<pid_t>(pid)) ? static_cast<pid_t>(pid) : 0;
}

int StartDaemon() {
  const char* dir_env = getenv("CUDA_MPS_PIPE_DIRECTORY");
  struct stat st {};
  if (dir_env == nullptr || *dir_env == '\0') {
    std::cerr << "fake nvidia-cuda-mps-control: CUDA_MPS_PIPE_DIRECTORY is not set\n";
    return 1;
  }
  const std::string dir = dir_env;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::cerr << "fake nvidia-cuda-mps-control: " << dir << " is not a directory\n";
    return 1;
  }
  if (DaemonPid(dir) != 0) {
    std::cerr << "An instance of this daemon is already running\n";
    return 1;
  }
  int ready[2];
  if (pipe(ready) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid > 0) {
    close(ready[1]);
    char c = 0;
    return read(ready[0], &c, 1) == 1 ? 0 : 1;
  }
  close(ready[0]);
  setsid();
  const char* visible = getenv("CUDA_VISIBLE_DEVICES");
  WriteFile(dir + "/" + kPidFile, std::to_string(getpid()) + "\n");
  if (visible != nullptr) {
    WriteFile(dir + "/visible", visible);
  } else {
    unlink((dir + "/visible").c_str());
  }
  WriteFile(dir + "/servers", "");  // A new daemon has no servers.
  Append(dir + "/commands.log",
         std::string("daemon started CUDA_VISIBLE_DEVICES=") + (visible ? visible : "(unset)"));
  if (chdir("/") != 0) _exit(1);
  const int null_fd = open("/dev/null", O_RDWR);
  dup2(null_fd, 0);
  dup2(null_fd, 1);
  dup2(null_fd, 2);
  if (write(ready[1], "1", 1) != 1) _exit(1);
  close(ready[1]);
  while (true) pause();
}

struct Server {
  int64_t pid;
  int64_t uid;
};

class Session {
 public:
  explicit Session(std::string dir) : dir_(std::move(dir)) {
    std::istringstream in(ReadFile(dir_ + "/servers"));
    for (Server s{}; in >> s.pid >> s.uid;) servers_.push_back(s);
    // The daemon leaves this file only when it was given CUDA_VISIBLE_DEVICES.
    if (std::ifstream visible(dir_ + "/visible"); visible) {
      devices_ = 0;
      for (std::string entry; std::getline(visible, entry, ',');) devices_ += !entry.empty();
    }
  }

  // Answers one command line; false after quit.
  bool Run(const std::string& line) {
    Append(dir_ + "/commands.log", line);
    const std::vector<std::string> w = Words(line);
    if (w.empty()) return true;
    const std::string& cmd = w[0];
    if (cmd == "get_server_list" && w.size() == 1) {
      for (const Server& s : servers_) std::cout << s.pid << "\n";
    } else if (cmd == "start_server" && w.size() == 3 && w[1] == "-uid" && Number(w[2]) >= 0) {
      StartServer(Number(w[2]));
    } else if (cmd == "set_default_active_thread_percentage" && w.size() == 2) {
      Percentage(w[1]);
    } else if (cmd == "set_default_device_pinned_mem_limit" && w.size() == 3) {
      Device(w[1]) && Memory(w[2]);
    } else if (cmd == "set_active_thread_percentage" && w.size() == 3) {
      Find(w[1]) && Percentage(w[2]);
    } else if (cmd == "set_device_pinned_mem_limit" && w.size() == 4) {
      Find(w[1]) && Device(w[2]) && Memory(w[3]);
    } else if (cmd == "shutdown_server" && (w.size() == 2 || (w.size() == 3 && w[2] == "-f"))) {
      if (Find(w[1]))
        std::erase_if(servers_, [&](const Server& s) { return s.pid == Number(w[1]); });
    } else if (cmd == "quit" && w.size() == 1) {
      Quit();
      return false;
    } else {
      Error("Unrecognized command: " + line);
    }
    return true;
  }

  void Save() const {
    std::string text;
    for (const Server& s : servers_)
      text += std::to_string(s.pid) + " " + std::to_string(s.uid) + "\n";
    WriteFile(dir_ + "/servers", text);
  }
  int status() const { return status_; }

 private:
  bool Error(const std::string& message) {
    std::cout << message << "\n";
    status_ = 1;
    return false;
  }
  bool Percentage(const std::string& s) {
    const int64_t p = Number(s);
    return (p >= 1 && p <= 100) || Error("Invalid active thread percentage: " + s);
  }
  bool Device(const std::string& s) {
    const int64_t dev = Number(s);
    return (dev >= 0 && (devices_ < 0 || dev < devices_)) || Error("Invalid device: " + s);
  }
  bool Memory(const std::string& s) {
    const std::string digits = !s.empty() && std::string("KMG").find(s.back()) != std::string::npos
                                   ? s.substr(0, s.size() - 1)
                                   : s;
    return Number(digits) > 0 || Error("Invalid memory limit: " + s);
  }
  bool Find(const std::string& s) {
    for (const Server& server : servers_) {
      if (server.pid == Number(s)) return true;
    }
    return Error("Server " + s + " not found");
  }
  void StartServer(int64_t uid) {
    for (const Server& s : servers_) {
      if (s.uid == uid) return;
    }
    const int64_t serial = std::max<int64_t>(0, Number(FirstWord(dir_ + "/serial")));
    WriteFile(dir_ + "/serial", std::to_string(serial + 1) + "\n");
    servers_.push_back({kFirstServerPid + serial, uid});
  }
  void Quit() {
    const pid_t pid = DaemonPid(dir_);
    kill(pid, SIGTERM);
    for (int i = 0; i < 500 && Alive(pid); ++i) usleep(10000);
    unlink((dir_ + "/" + kPidFile).c_str());
    servers_.clear();  // The servers end with their daemon.
  }

  std::string dir_;
  std::vector<Server> servers_;
  int devices_ = -1;  // How many GPUs the daemon sees; -1: all (CUDA_VISIBLE_DEVICES unset).
  int status_ = 0;
};

int RunClient() {
  const char* dir_env = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string dir = dir_env != nullptr && *dir_env != '\0' ? dir_env : "/tmp/nvidia-mps";
  if (DaemonPid(dir) == 0) {
    std::cerr << "Cannot find MPS control daemon process\n";
    return 1;
  }
  const int lock = open((dir + "/fake.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) return 1;
  Session session(dir);
  for (std::string line; std::getline(std::cin, line);) {
    if (!session.Run(line)) break;
  }
  session.Save();
  std::cout.flush();
  return session.status();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "-d") return StartDaemon();
  if (argc == 1) return RunClient();
  std::cerr << "usage: nvidia-cuda-mps-control [-d]\n";
  return 1;
}
