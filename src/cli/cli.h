// The `tessera` command line: one binary, one subcommand per job. Each command family lives in
// its own file and registers itself here. Commands print to stdout, errors to stderr, and set an
// exit code: 0 success, 1 a negative answer or a failed operation, 2 bad usage or unknown names.
// Thread-safety: used from main() only.
#pragma once

#include <string>
#include <utility>

#include "common/clock.h"
#include "common/result.h"

namespace CLI {
class App;
}

namespace tessera::cli {

// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// What a command's callback reports back to main().
struct Context {
  int exit_code = kExitOk;
};

void RegisterCatalogCommands(CLI::App& app, Context& ctx);
void RegisterMigCommands(CLI::App& app, Context& ctx);
void RegisterSimCommands(CLI::App& app, Context& ctx);
void RegisterServerCommands(CLI::App& app, Context& ctx);
void RegisterClientCommands(CLI::App& app, Context& ctx);
// users, tokens, secrets, keys (identity_cmd.cc).
void RegisterIdentityCommands(CLI::App& app, Context& ctx);
// volumes (volume_cmd.cc).
void RegisterVolumeCommands(CLI::App& app, Context& ctx);
void RegisterAgentCommands(CLI::App& app, Context& ctx);
// instances exec and instances shell (exec_cmd.cc), under the `instances` command.
void AddExecCommands(CLI::App* instances, Context& ctx);
void RegisterStoreCommands(CLI::App& app, Context& ctx);

// The environment variable `name`, or `fallback` when it is unset or empty (TESSERA_URL, ...).
std::string EnvOr(const char* name, const std::string& fallback);

// Splits "HOST:PORT" (the port 0..65535); InvalidArgument naming `flag` otherwise.
Result<std::pair<std::string, int>> ParseListen(const std::string& text, const std::string& flag);

// "90s", "15m", "1h", "90d" (or "0": for ever, where allowed) as a Duration; the error names
// `flag`.
Result<Duration> ParseDuration(const std::string& text, const std::string& flag);

// The version this binary was built as ("tessera 0.1.0").
std::string VersionLine();

// Parses argv, runs the chosen command and returns the process exit code.
int Run(int argc, char** argv);

}  // namespace tessera::cli
