// Helpers shared by the test binaries: temporary directories, the datasets folder, the source
// tree. Tests that need the public traces call DatasetsDirOrSkip() and skip with a message saying
// how to get them when they are absent.
#pragma once

#include <csignal>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tessera::testing {

// A fresh directory under $TMPDIR, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // path()/name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes `content` to path()/name and returns the full path.
  std::string Write(const std::string& name, const std::string& content) const;

 private:
  std::string path_;
};

// A TCP listener on every IPv4 address, on `port` or, with 0, one the kernel picks; closed with
// the object. port() is 0 when the port could not be bound (something else holds it).
class TcpListener {
 public:
  explicit TcpListener(int port = 0);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Writes `content` to `path`, mode 0600 from the start (a secret, such as a node token for
// --token-file), and returns `path`. Aborts when it cannot.
std::string WritePrivateFile(const std::string& path, const std::string& content);

// The repository root ($TESSERA_SOURCE_DIR, else the directory the build was configured from).
std::string SourceDir();

// The public traces: $TESSERA_DATASETS, else ../shared/datasets beside the repository. Empty when
// neither exists.
std::optional<std::string> DatasetsDir();

// The message tests print when they skip for want of the traces.
std::string DatasetsMissingMessage();

// The built `tessera` binary ($TESSERA_BIN, set by ctest for end-to-end tests).
std::string TesseraBinary();

struct CommandResult {
  int exit_code = -1;  // The process's exit status; 128+N when killed by signal N.
  std::string out;     // Everything written to stdout.
  std::string err;     // Everything written to stderr.
};

// Runs `argv` (argv[0] a path; no shell, arguments passed as is) with `env` added to its
// environment and `stdin_text` as its standard input, and waits for it. Its input and output are
// files, so a program that exits without reading its input, or leaves a daemon holding its
// output, is run all the same.
CommandResult RunProgram(const std::vector<std::string>& argv, const std::string& stdin_text = "",
                         const std::vector<std::pair<std::string, std::string>>& env = {});

// Runs the tessera binary with `args` (RunProgram).
CommandResult RunTessera(const std::vector<std::string>& args, const std::string& stdin_text = "");

// Writes a self-signed certificate for 127.0.0.1 (and localhost) and its key into `dir`, with
// the openssl command, and sets their paths. False when openssl fails.
bool MakeSelfSignedCert(const TempDir& dir, std::string& cert, std::string& key);

// A KMS plugin (docs/secrets.md, --kms-command) as a shell script: it wraps a data key under the
// key id held in the file `current_key_file` (change the file to move the plugin to a new key)
// and unwraps what it wrapped, whatever the id. Reversible encoding, no secrecy: a test's fake.
std::string FakeKmsScript(const std::string& current_key_file);

// A free TCP port on 127.0.0.1 (bound and released: another process could take it first, which
// tests accept).
int FreeTcpPort();

// Everything readable from `fd` until its end (a pipe's other side closed).
std::string ReadAll(int fd);

// In a forked child: runs argv (argv[0] a path); exits 127 when it cannot.
[[noreturn]] void ExecArgv(const std::vector<std::string>& argv);

// A child process (argv[0] a path) whose stdout and stderr go to `log` (appended); killed with
// SIGKILL when the object dies, unless stopped before. With `uid` >= 0 it runs as that uid and
// gid, with no supplementary groups (exit 126 when it cannot switch).
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log,
               const std::vector<std::pair<std::string, std::string>>& env = {}, int uid = -1);
  ~ChildProcess() { Stop(SIGKILL); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Sends `signal` and waits; returns the exit status (128+N for signal N), -1 if not running.
  int Stop(int signal);
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
};

// Runs `promtool check metrics` (Debian's prometheus package) on `exposition`. Returns the
// problems promtool reports that are not dcgm-exporter's own naming (camelCase labels such as
// modelName, counters without _total): empty when the text parses and lints clean apart from
// those. nullopt when promtool is not installed.
std::optional<std::string> PromtoolProblems(const std::string& exposition);

// The CPU seconds (user + system) process `pid` has used, from /proc.
double CpuSeconds(int pid);

// The nearest-rank percentile of `samples` (q in 0..1): the smallest sample with at least a
// fraction q of all at or below it; q = 1 is the maximum. 0 when there are none. How every
// benchmark reports p50, p95 and p99.
double Percentile(std::vector<double> samples, double q);

// CLOCK_BOOTTIME in seconds: the clock of /proc/uptime, which the host and its containers share
// (there is no time namespace), so a time a container reads there compares with the host's.
double BootSeconds();

// A `tessera server` child process on a free loopback port, for end-to-end tests. Start waits
// until the server prints its URL; the destructor kills it (SIGKILL) if it still runs.
class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Runs `tessera server --listen HOST:PORT <args>` with TESSERA_ADMIN_TOKEN=admin_token (when
  // not empty). Returns false, with the output so far in output(), when it exits or does not
  // print its URL within 20 seconds. url() is http:// or https:// 127.0.0.1 and the port.
  bool Start(const std::vector<std::string>& args, const std::string& admin_token);
  // The host and port to listen on (default 127.0.0.1, a free port); call before Start.
  void SetListenHost(std::string host) { listen_host_ = std::move(host); }
  void SetListenPort(int port) { listen_port_ = port; }
  // The binary to run (default TesseraBinary()); call before Start.
  void SetBinary(std::string path) { binary_ = std::move(path); }
  int pid() const { return pid_; }
  // Sends `signal` and waits for the process; returns its exit status (128+N for signal N).
  int Stop(int signal);
  const std::string& url() const { return url_; }
  int port() const { return port_; }
  // Everything the process printed so far.
  const std::string& output() const { return output_; }
  // From now on what the process prints is read and dropped, so a server that logs much (a
  // benchmark's thousands of nodes) never blocks on a full pipe. output() stops growing.
  void DiscardOutput();

 private:
  int pid_ = -1;
  int out_fd_ = -1;
  std::string listen_host_ = "127.0.0.1";
  int listen_port_ = 0;
  std::string binary_;
  std::string url_;
  int port_ = 0;
  std::string output_;
  std::thread drain_;
};

}  // namespace tessera::testing

// Skips the current test when the datasets are absent; binds `var` to their directory otherwise.
#define TESSERA_DATASETS_OR_SKIP(var)                                           \
  const auto var##_opt = ::tessera::testing::DatasetsDir();                     \
  if (!var##_opt) GTEST_SKIP() << ::tessera::testing::DatasetsMissingMessage(); \
  const std::string var = *var##_opt
