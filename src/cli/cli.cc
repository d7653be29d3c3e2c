#include "cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <map>

#include "common/log.h"

namespace tessera::cli {

Result<std::pair<std::string, int>> ParseListen(const std::string& text, const std::string& flag) {
  const size_t colon = text.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    const std::string p = text.substr(colon + 1);
    if (!p.empty() && p.size() <= 5 && p.find_first_not_of("0123456789") == std::string::npos) {
      port = std::stoi(p);
    }
  }
  if (colon == std::string::npos || colon == 0 || port < 0 || port > 65535) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not HOST:PORT (e.g. 127.0.0.1:8080)", flag, text));
  }
  return std::pair{text.substr(0, colon), port};
}

Result<Duration> ParseDuration(const std::string& text, const std::string& flag) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  int64_t n = -1;
  if (digits > 0 && digits <= 9) n = std::stoll(text.substr(0, digits));
  const std::map<std::string, int64_t> millis = {
      {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}};
  auto u = millis.find(unit);
  if (n < 0 || (u == millis.end() && !(n == 0 && unit.empty()))) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a duration such as 500ms, 90s, 15m, 1h or 90d", flag, text));
  }
  return std::chrono::duration_cast<Duration>(
      std::chrono::milliseconds(n * (u == millis.end() ? 0 : u->second)));
}

std::string VersionLine() { return fmt::format("tessera {}", TESSERA_VERSION); }

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

int Run(int argc, char** argv) {
  InitLogging();
  CLI::App app(
      "Tessera: a GPU cloud in one binary. Pools GPU servers, rents them as whole GPUs,\n"
      "MIG slices or shares, schedules them against fragmentation, and replays cluster\n"
      "traces through the same scheduler.",
      "tessera");
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  app.set_version_flag("--version", VersionLine(), "Print the version and exit");
  Context ctx;
  app.add_subcommand("version", "Print the version")->callback([] {
    std::cout << VersionLine() << "\n";
  });
  RegisterCatalogCommands(app, ctx);
  RegisterMigCommands(app, ctx);
  RegisterSimCommands(app, ctx);
  RegisterServerCommands(app, ctx);
  RegisterClientCommands(app, ctx);
  RegisterAgentCommands(app, ctx);
  RegisterStoreCommands(app, ctx);
  auto known = [&](const std::string& name) {
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      if (sub->check_name(name)) return true;
    }
    return false;
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::cerr << "tessera: unknown command '" << argv[1]
              << "'; run 'tessera --help' for the list\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's own codes are large numbers; every usage error here exits 2.
    app.exit(e);
    return kExitUsage;
  }
  return ctx.exit_code;
}

}  // namespace tessera::cli
