// A real PostgreSQL server for tests, from Debian's postgresql package: `initdb` into a temporary
// directory and `postgres` on a free loopback port with a private socket directory, both run as
// the `postgres` user when this process is root (the server refuses root). Nothing outside its
// directory is touched; the server is shut down (fast) and the directory removed with the object.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "testing/testing.h"

namespace tessera::testing {

// The directory holding initdb and postgres: $TESSERA_PG_BINDIR, else the newest
// /usr/lib/postgresql/N/bin; nullopt when PostgreSQL is not installed.
std::optional<std::string> PostgresBinDir();

class PostgresServer {
 public:
  // Initializes and starts a server; nullptr with `error` set when it cannot (PostgreSQL missing,
  // initdb or start-up failed: the error quotes the server's log). With `durable` false the
  // server skips fsync (unit tests); benchmarks keep it.
  static std::unique_ptr<PostgresServer> Start(std::string* error, bool durable = false);
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // Creates a fresh, empty UTF-8 database and returns its URL (postgres://tessera@127.0.0.1:PORT/
  // NAME). Aborts the test process when it cannot.
  std::string CreateDatabase();
  // The URL of the database `tcp_url` (as CreateDatabase returned it) reached through the
  // server's UNIX socket instead: postgres://tessera@/NAME?host=SOCKET_DIR&port=PORT.
  std::string SocketUrl(const std::string& tcp_url) const;
  // Runs `sql` on database `db` through psql and returns what it printed (unaligned, tuples
  // only), or nullopt when psql failed.
  std::optional<std::string> Psql(const std::string& db, const std::string& sql) const;
  // Shuts the server down (fast) and starts it again on the same directory and port.
  bool Stop();
  bool Restart();
  int port() const { return port_; }

 private:
  PostgresServer() = default;
  bool Launch();

  std::unique_ptr<TempDir> dir_;
  std::string bin_, data_, socket_dir_, log_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool durable_ = false;
  int next_db_ = 0;
};

// One server shared by the test binary, started on first use and stopped at exit; nullptr with
// `error` set when it cannot start.
PostgresServer* SharedPostgres(std::string* error);

}  // namespace tessera::testing

// Skips the test when PostgreSQL is not installed (saying how to get it), fails it when the
// shared server cannot start, and binds `var` (a PostgresServer&) to it otherwise.
#define TESSERA_POSTGRES_OR_SKIP(var)                                                      \
  if (!::tessera::testing::PostgresBinDir()) {                                             \
    GTEST_SKIP() << "PostgreSQL is not installed: scripts/bootstrap.sh installs Debian's " \
                    "postgresql package (or set TESSERA_PG_BINDIR)";                       \
  }                                                                                        \
  std::string var##_error;                                                                 \
  ::tessera::testing::PostgresServer* var##_ptr =                                          \
      ::tessera::testing::SharedPostgres(&var##_error);                                    \
  ASSERT_NE(var##_ptr, nullptr) << var##_error;                                            \
  ::tessera::testing::PostgresServer& var = *var##_ptr
