// `tessera store migrate`: moves a deployment's state from the SQLite store to PostgreSQL
// (docs/ha.md), all of it in one transaction, into an empty database only.
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/cli.h"
#include "store/postgres.h"
#include "store/store.h"

namespace tessera::cli {
namespace {

struct MigrateArgs {
  std::string from;
  std::string to;
};

// The SQLite store's directory from --from: the directory itself, or its tessera.db file.
Result<std::string> SqliteDirectory(const std::string& from) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = from;
  if (fs::is_regular_file(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_regular_file(dir / "tessera.db", ec)) {
    return Status::NotFound(
        "--from " + from +
        ": no SQLite store there (give the server's --data directory or its tessera.db)");
  }
  return dir.string();
}

int Migrate(const MigrateArgs& a) {
  auto fail = [](const Status& s) {
    std::cerr << "store migrate: " << s.message() << "\n";
    return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound
               ? kExitUsage
               : kExitFailure;
  };
  if (!store::IsPostgresUrl(a.to)) {
    return fail(Status::InvalidArgument("--to " + a.to + ": not a postgres:// URL"));
  }
  auto dir = SqliteDirectory(a.from);
  if (!dir.ok()) return fail(dir.status());
  // Opening takes the directory's lock: a server still running on it is named, not raced.
  auto source = store::OpenSqliteStore(*dir);
  if (!source.ok()) return fail(source.status());
  auto copied = store::CopyIntoPostgres(**source, a.to);
  if (!copied.ok()) return fail(copied.status());
  auto shown = store::ParsePostgresUrl(a.to);
  std::cout << "moved " << copied->tenants << " tenants, " << copied->instances << " instances, "
            << copied->settings << " settings, " << copied->audit << " audit entries and "
            << copied->ledger << " ledger lines from " << *dir << " to "
            << (shown.ok() ? shown->display : std::string("the database")) << "\n"
            << "start the servers with --store and that URL; " << *dir
            << " is left as it was (keep it until the new store has served)\n";
  return kExitOk;
}

}  // namespace

void RegisterStoreCommands(CLI::App& app, Context& ctx) {
  CLI::App* cmd = app.add_subcommand("store", "Move the control plane's state between stores");
  cmd->require_subcommand(1);
  auto args = std::make_shared<MigrateArgs>();
  CLI::App* migrate = cmd->add_subcommand(
      "migrate",
      "Copy a stopped server's SQLite store into an empty PostgreSQL database, in one "
      "transaction");
  migrate->add_option("--from", args->from, "The server's --data directory, or its tessera.db")
      ->required();
  migrate->add_option("--to", args->to, "postgres://USER@HOST/DB of an empty database")->required();
  migrate->callback([args, &ctx] { ctx.exit_code = Migrate(*args); });
}

}  // namespace tessera::cli
