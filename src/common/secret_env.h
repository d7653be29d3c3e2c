// Secrets a process is handed at start (the admin token, a node token), taken so that they do not
// stay where other processes can read them. A secret in argv is in /proc/PID/cmdline for every
// user of the machine, and in every fork's too; one in the environment stays in the bytes that
// /proc/PID/environ shows even after unsetenv, which only drops the pointer to them. So a secret
// comes from a private file or from the environment, and TakeSecretEnv wipes it from there.
// Thread-safety: TakeSecretEnv changes the environment (as setenv does): call it from main()
// before any thread starts. ReadSecretFile is safe from any thread.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"

namespace tessera {

// The value of environment variable `name`, or nullopt when it is unset. Before returning, it
// overwrites the value's bytes in the process's original environment block (every entry of
// that name, duplicates too) and wherever setenv put a later value, then unsetenv's `name`:
// from then on neither getenv nor /proc/PID/environ (of this process or of later forks) shows
// the secret. REQUIRES: `name` has no '='; no other thread reads or changes the environment.
std::optional<std::string> TakeSecretEnv(const char* name);

// The secret in file `path`, its trailing newlines stripped. Refuses, as ssh does for keys, a
// file that group or others may access (any of mode 077) and anything but a regular file (a FIFO
// is refused, not waited on); errors name the path, and the mode when it is too open. An empty
// secret is InvalidArgument.
Result<std::string> ReadSecretFile(const std::string& path);

}  // namespace tessera
