// Helpers for the container tests (header-only, so no test code reaches the agent's library):
// whether podman and docker-registry are installed, a busybox-static image built through
// `podman import` under a unique name, and Debian's docker-registry on a free loopback port with
// or without htpasswd auth. Every helper cleans up what it made when it goes out of scope.
// Thread-safety: for one test thread.
#pragma once

#include <fmt/format.h>
#include <httplib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/container_exec.h"
#include "testing/testing.h"

namespace tessera::agent::testing_support {

inline constexpr char kInstallHint[] =
    "needs podman, runc, catatonit, uidmap, busybox-static and docker-registry (run "
    "scripts/bootstrap.sh as root)";

// Runs a command for a test; its result, or exit code -1 when it could not start.
inline ExecResult RunTool(const std::vector<std::string>& argv, int deadline_s = 120) {
  ExecOptions options;
  options.deadline = std::chrono::seconds(deadline_s);
  auto r = RunCommand(argv, options);
  if (!r.ok()) return ExecResult{-1, false, "", r.status().ToString()};
  return *r;
}

// Why the podman tests cannot run here, or "" when they can: podman, runc, busybox-static and
// root (the tests use rootful podman, as the agent does).
inline std::string PodmanMissing() {
  if (geteuid() != 0)
    return std::string("runs rootful podman as the agent does: run as root; ") + kInstallHint;
  for (const char* path : {"/usr/bin/podman", "/usr/sbin/runc", "/bin/busybox"}) {
    if (access(path, X_OK) != 0) return fmt::format("{} is missing: {}", path, kInstallHint);
  }
  return "";
}

inline std::string RegistryMissing() {
  for (const char* path : {"/usr/bin/docker-registry", "/usr/bin/htpasswd"}) {
    if (access(path, X_OK) != 0) return fmt::format("{} is missing: {}", path, kInstallHint);
  }
  return "";
}

// A character-device major no driver of this host has, from the ranges Linux keeps for local
// and experimental use, so stand-in nodes can reach no real device; -1 when none is free.
inline int UnusedCharMajor() {
  std::set<int> used;
  std::ifstream in("/proc/devices");
  std::string line;
  while (std::getline(in, line) && line.rfind("Block", 0) != 0) {
    int major = 0;
    if (sscanf(line.c_str(), "%d", &major) == 1) used.insert(major);
  }
  for (int m : {60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127}) {
    if (used.count(m) == 0) return m;
  }
  return -1;
}

// Makes stand-in GPU nodes nvidia0 .. nvidia<count-1> (minor = index) and nvidiactl (minor 255)
// in the new directory `dev`, with an unused major; that major, or -1 (errno says why).
inline int MakeStandInGpuNodes(const std::string& dev, int count) {
  const int major = UnusedCharMajor();
  if (major < 0 || mkdir(dev.c_str(), 0755) != 0) return -1;
  for (int i = 0; i <= count; ++i) {
    const bool ctl = i == count;
    const std::string path = dev + (ctl ? std::string("/nvidiactl") : fmt::format("/nvidia{}", i));
    const unsigned minor = ctl ? 255u : static_cast<unsigned>(i);
    if (mknod(path.c_str(), S_IFCHR | 0666, makedev(static_cast<unsigned>(major), minor)) != 0) {
      return -1;
    }
  }
  return major;
}

// A name no other test run uses at the same time: "<prefix>-<pid>-<n>".
inline std::string UniqueName(const std::string& prefix) {
  static int counter = 0;
  return fmt::format("{}-{}-{}", prefix, getpid(), ++counter);
}

// A busybox-static image imported as `reference`, with `payload_bytes` of random data in /payload
// (so images can differ in size); removed (with every tag) when the object dies.
class BusyboxImage {
 public:
  BusyboxImage(std::string reference, size_t payload_bytes = 0) : reference_(std::move(reference)) {
    const std::string root = dir_.path() + "/root";
    RunTool({"mkdir", "-p", root + "/bin", root + "/dev", root + "/proc", root + "/sys",
             root + "/tmp", root + "/etc", root + "/workspace"});
    RunTool({"cp", "/bin/busybox", root + "/bin/busybox"});
    for (const char* applet : {"sh", "ls", "cat", "sleep", "true", "echo", "id", "env", "grep",
                               "touch", "head", "wc", "date"}) {
      symlink("busybox", (root + "/bin/" + applet).c_str());
    }
    std::ofstream(root + "/etc/passwd") << "root:x:0:0:root:/root:/bin/sh\n";
    // Content of its own, so no other test's image can share its id.
    std::ofstream(root + "/etc/tessera-test-image") << reference_ << "\n";
    if (payload_bytes > 0) {
      RunTool(
          {"sh", "-c", fmt::format("head -c {} /dev/urandom > {}/payload", payload_bytes, root)});
    }
    const std::string tar = dir_.path() + "/rootfs.tar";
    RunTool({"tar", "-C", root, "-cf", tar, "."});
    const ExecResult imported = RunTool({"podman", "import", "-q", tar, reference_});
    ok_ = imported.exit_code == 0;
    error_ = imported.err;
    if (ok_) {
      const ExecResult id =
          RunTool({"podman", "image", "inspect", "--format", "{{.Id}}", reference_});
      id_ = id.out.substr(0, id.out.find('\n'));
    }
  }
  ~BusyboxImage() {
    if (ok_) RunTool({"podman", "rmi", "--force", "--ignore", reference_});
  }
  BusyboxImage(const BusyboxImage&) = delete;
  BusyboxImage& operator=(const BusyboxImage&) = delete;

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& reference() const { return reference_; }
  const std::string& id() const { return id_; }

 private:
  tessera::testing::TempDir dir_;
  std::string reference_;
  std::string id_;
  bool ok_ = false;
  std::string error_;
};

// Debian's docker-registry serving a temporary directory on 127.0.0.1:<free port>, with htpasswd
// auth for `user` when `user` is not empty; stopped when the object dies.
class LocalRegistry {
 public:
  explicit LocalRegistry(const std::string& user = "", const std::string& password = "") {
    port_ = tessera::testing::FreeTcpPort();
    std::string config = fmt::format(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}/data\n"
        "http:\n  addr: 127.0.0.1:{}\n",
        dir_.path(), port_);
    if (!user.empty()) {
      const ExecResult h = RunTool({"htpasswd", "-Bbn", user, password});
      dir_.Write("htpasswd", h.out);
      config += fmt::format("auth:\n  htpasswd:\n    realm: tessera-test\n    path: {}\n",
                            dir_.File("htpasswd"));
    }
    const std::string config_path = dir_.Write("config.yml", config);
    process_ = std::make_unique<tessera::testing::ChildProcess>(
        std::vector<std::string>{"/usr/bin/docker-registry", "serve", config_path},
        dir_.File("registry.log"));
    httplib::Client client("127.0.0.1", port_);
    client.set_connection_timeout(std::chrono::milliseconds(200));
    for (int i = 0; i < 100 && !ready_; ++i) {
      const auto res = client.Get("/v2/");
      ready_ = res && (res->status == 200 || res->status == 401);
      if (!ready_) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~LocalRegistry() {
    if (process_) process_->Stop(SIGKILL);
  }
  LocalRegistry(const LocalRegistry&) = delete;
  LocalRegistry& operator=(const LocalRegistry&) = delete;

  bool ready() const { return ready_; }
  // "127.0.0.1:PORT".
  std::string host() const { return fmt::format("127.0.0.1:{}", port_); }
  std::string log() const {
    std::ifstream in(dir_.File("registry.log"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Pushes local image `local` as host()/`path`, with `user`:`password` when given; the push's
  // stderr on failure, "" on success.
  std::string Push(const std::string& local, const std::string& path, const std::string& user = "",
                   const std::string& password = "") const {
    std::vector<std::string> argv = {"podman", "push", "-q", "--tls-verify=false"};
    if (!user.empty()) argv.push_back("--creds=" + user + ":" + password);
    argv.push_back(local);
    argv.push_back(host() + "/" + path);
    const ExecResult r = RunTool(argv);
    return r.exit_code == 0 ? "" : r.err + r.out;
  }

 private:
  tessera::testing::TempDir dir_;
  int port_ = 0;
  bool ready_ = false;
  std::unique_ptr<tessera::testing::ChildProcess> process_;
};

}  // namespace tessera::agent::testing_support
