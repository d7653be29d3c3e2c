#include <CLI/CLI.hpp>

#include "cli/cli.h"

namespace tessera::cli {

// Placeholder until the sim commands land.
void RegisterSimCommands(CLI::App& app, Context& ctx) {
  (void)app;
  (void)ctx;
}

}  // namespace tessera::cli
