#include <CLI/CLI.hpp>

#include "cli/cli.h"

namespace tessera::cli {

// Placeholder until the catalog commands land.
void RegisterCatalogCommands(CLI::App& app, Context& ctx) {
  (void)app;
  (void)ctx;
}

}  // namespace tessera::cli
