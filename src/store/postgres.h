// The Store on PostgreSQL (libpq), for a control plane of several replicas (docs/ha.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace tessera::store {

// A PostgreSQL URL taken apart: libpq's connection options (the URL's own, then Tessera's
// defaults for what it leaves unset: a 5 s connect timeout, TCP keepalives and a 10 s
// tcp_user_timeout so a dead database is noticed in seconds), and the URL as errors show it,
// without the password.
struct PgUrl {
  std::vector<std::pair<std::string, std::string>> options;
  std::string display;
};

// Whether `spec` names a PostgreSQL database (postgres:// or postgresql://) rather than a
// directory.
bool IsPostgresUrl(std::string_view spec);

// Parses `url` (postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=...&...], any option libpq
// takes); an error names what libpq found wrong.
Result<PgUrl> ParsePostgresUrl(const std::string& url);

// Connects to the database at `url`, creates or migrates its tables (each migration once, in one
// transaction, whichever replica runs it first), and returns the store. Every commit is
// synchronous_commit=on: durable on the database's disk when Commit returns OK. Errors name the
// database without its password.
Result<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url);

// What CopyIntoPostgres moved.
struct CopyCounts {
  int64_t tenants = 0, instances = 0, settings = 0, audit = 0, ledger = 0;
};

// Copies everything `from` holds (tenants, every instance however long ago it ended, settings,
// the audit log and the ledger, with their seqs) into the PostgreSQL database at `url`, in one
// transaction: all of it or nothing. Refuses a target that already holds any record. Checks the
// counts in the target before it returns.
Result<CopyCounts> CopyIntoPostgres(Store& from, const std::string& url);

}  // namespace tessera::store
