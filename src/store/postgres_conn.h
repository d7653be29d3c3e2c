// What the PostgreSQL store and its leadership share (postgres_store.cc, postgres_lease.cc): a
// connection that re-opens after a drop and names the database in its errors, statements'
// parameters, and libpq's results and messages. Internal to src/store/.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "common/text.h"
#include "store/postgres.h"

namespace tessera::store::pg {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, ConnDeleter>;

// `s` as PostgreSQL's text can hold it: it takes neither NUL nor invalid UTF-8, which SQLite
// stores as given, so both become U+FFFD.
inline std::string StorableText(const std::string& s) {
  if (IsValidUtf8(s) && s.find('\0') == std::string::npos) return s;
  std::string fixed;
  for (const char c : ToValidUtf8(s)) {
    if (c == '\0') {
      fixed += "\xEF\xBF\xBD";
    } else {
      fixed += c;
    }
  }
  return fixed;
}

// A statement's parameters in text form.
class Params {
 public:
  Params& Add(const std::string& s) {
    values_.push_back(StorableText(s));
    return *this;
  }
  Params& Add(int64_t v) {
    values_.push_back(std::to_string(v));
    return *this;
  }
  int size() const { return static_cast<int>(values_.size()); }
  const char* const* data() {
    pointers_.clear();
    for (const std::string& v : values_) pointers_.push_back(v.c_str());
    return pointers_.data();
  }

 private:
  std::vector<std::string> values_;
  std::vector<const char*> pointers_;
};

inline int64_t Int(const PGresult* r, int row, int col) {
  return std::strtoll(PQgetvalue(r, row, col), nullptr, 10);
}
inline std::string Text(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<size_t>(PQgetlength(r, row, col)));
}

// libpq's message on one line: its line breaks and indents as single spaces, none at the end.
inline std::string OneLine(std::string_view message) {
  std::string e;
  for (const char ch : message) {
    const bool space = ch == '\n' || ch == '\t' || ch == ' ';
    if (space && (e.empty() || e.back() == ' ')) continue;
    e += space ? ' ' : ch;
  }
  while (!e.empty() && e.back() == ' ') e.pop_back();
  return e;
}
inline std::string ErrorOf(const PGconn* c) {
  return OneLine(c ? PQerrorMessage(c) : "out of memory");
}
inline std::string ErrorOf(const PGresult* r) {
  return OneLine(r ? PQresultErrorMessage(r) : "no result");
}

// A connection to the database with what every use of it needs: opened from the parsed
// connection options, re-opened after a drop, and errors that name the database (never its
// password).
class Connection {
 public:
  explicit Connection(PgUrl url) : url_(std::move(url)) {}

  // Connects, or reconnects after a drop (a new session(): prepared statements are gone).
  Status Ready() {
    if (conn_ && !broken_ && PQstatus(conn_.get()) == CONNECTION_OK) return Status::Ok();
    broken_ = false;
    std::vector<const char*> keys, values;
    for (const auto& [k, v] : url_.options) {
      keys.push_back(k.c_str());
      values.push_back(v.c_str());
    }
    keys.push_back(nullptr);
    values.push_back(nullptr);
    conn_.reset(PQconnectdbParams(keys.data(), values.data(), 0));
    if (!conn_ || PQstatus(conn_.get()) != CONNECTION_OK) {
      const std::string why = ErrorOf(conn_.get());
      conn_.reset();
      return Status::Unavailable(fmt::format("{}: cannot connect: {}", url_.display, why));
    }
    // Writes must be durable at COMMIT whatever the database's default, and the session's
    // strings are UTF-8.
    ++session_;
    // The server's notices ("already exists, skipping") are not the operator's business.
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);
    for (const char* sql :
         {"SET synchronous_commit = on", "SET client_encoding = 'UTF8'", "SET TIME ZONE 'UTC'"}) {
      TESSERA_RETURN_IF_ERROR(Exec(sql));
    }
    return Status::Ok();
  }

  PGconn* get() const { return conn_.get(); }
  // Counts the sessions opened: a new one has none of the old one's prepared statements.
  uint64_t session() const { return session_; }
  // Whether the session is gone (or going): the next Ready() opens a new one.
  bool broken() const { return broken_ || !conn_ || PQstatus(conn_.get()) != CONNECTION_OK; }
  const std::string& display() const { return url_.display; }

  // A failure of `what`: Unavailable when the connection is gone or the server is going away
  // (the session is dropped, and the next call reconnects), DataLoss when the database refused
  // the statement. `r` is the statement's result, when there is one.
  Status Failed(const std::string& what, const PGresult* r = nullptr) {
    const std::string why = r ? ErrorOf(r) : ErrorOf(conn_.get());
    const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    const std::string_view sqlstate = state ? state : "";
    // Class 08: connection exceptions; 57P0x: the server is shutting down or restarting.
    if (!conn_ || PQstatus(conn_.get()) != CONNECTION_OK || sqlstate.starts_with("08") ||
        sqlstate.starts_with("57P")) {
      broken_ = true;
      return Status::Unavailable(
          fmt::format("{}: {}: the connection was lost: {}", url_.display, what, why));
    }
    return Status::DataLoss(fmt::format("{}: {}: {}", url_.display, what, why));
  }

  Status Exec(const char* sql) {
    PgResult r(PQexec(conn_.get(), sql));
    const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return Status::Ok();
    return Failed(fmt::format("running '{}'", CutUtf8(sql, 60)), r.get());
  }

  // Runs `sql` with `params` and returns its rows.
  Result<PgResult> Query(const std::string& what, const char* sql, Params params = {}) {
    TESSERA_RETURN_IF_ERROR(Ready());
    PgResult r(
        PQexecParams(conn_.get(), sql, params.size(), nullptr, params.data(), nullptr, nullptr, 0));
    const ExecStatusType st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    return Failed(what, r.get());
  }

  // Runs `sql` and calls `fn` with each row as it arrives (single-row mode), so a large read
  // (a month of ledger lines, every instance) never sits whole in memory twice.
  Status Stream(const std::string& what, const char* sql, Params params,
                const std::function<void(const PGresult*)>& fn) {
    TESSERA_RETURN_IF_ERROR(Ready());
    PGconn* c = conn_.get();
    if (!PQsendQueryParams(c, sql, params.size(), nullptr, params.data(), nullptr, nullptr, 0) ||
        !PQsetSingleRowMode(c)) {
      return Failed(what);
    }
    Status status = Status::Ok();
    while (PGresult* raw = PQgetResult(c)) {
      PgResult r(raw);
      const ExecStatusType st = PQresultStatus(raw);
      if (st == PGRES_SINGLE_TUPLE) {
        if (status.ok()) fn(raw);
      } else if (st != PGRES_TUPLES_OK && status.ok()) {
        status = Failed(what, raw);
      }
    }
    return status;
  }

 private:
  PgUrl url_;
  PgConn conn_;
  bool broken_ = false;
  uint64_t session_ = 0;
};

}  // namespace tessera::store::pg
