#include <CLI/CLI.hpp>

#include "cli/cli.h"

namespace tessera::cli {

// Placeholder until the mig commands land.
void RegisterMigCommands(CLI::App& app, Context& ctx) {
  (void)app;
  (void)ctx;
}

}  // namespace tessera::cli
