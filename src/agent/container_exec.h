// The two system chores of the container code: running the short-lived podman commands it needs
// (pull, image ls, rm, inspect) as child processes with a deadline, so that a registry that never
// answers or a wedged podman can never hang the agent (at the deadline the child's whole process
// group gets SIGKILL); and writing the private files handed to podman (env files, auth files)
// with their mode set before any byte of content is in them.
// Thread-safety: any thread may call these; RunCommand's child, forked from a possibly
// multithreaded agent, only makes async-signal-safe calls before execve.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace tessera::agent {

struct ExecOptions {
  // Added to (or replacing) the agent's own environment for the child, e.g. TMPDIR.
  std::vector<std::pair<std::string, std::string>> env;
  // From the start; when it passes, the process group is killed and timed_out is set.
  std::chrono::milliseconds deadline{std::chrono::seconds(60)};
  // Called about every `tick` while the child runs (a pull's progress poll); may be empty.
  std::function<void()> on_tick;
  std::chrono::milliseconds tick{std::chrono::milliseconds(250)};
  // Each of stdout and stderr keeps at most this many bytes (the last ones); the rest is read
  // and dropped, so a chatty child never blocks on a full pipe.
  size_t max_output_bytes = 1 << 20;
};

struct ExecResult {
  int exit_code = -1;  // The exit status; 128+N when signal N ended it.
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv (argv[0] looked up in PATH) with stdin from /dev/null, in a process group of its own,
// and waits for it. An error only when it could not be started (the message names argv[0]); a
// command that fails is an ExecResult with its exit code.
Result<ExecResult> RunCommand(const std::vector<std::string>& argv,
                              const ExecOptions& options = {});

// The whole contents of a small file, or nullopt when it cannot be read.
std::optional<std::string> ReadSmallFile(const std::string& path);

}  // namespace tessera::agent
