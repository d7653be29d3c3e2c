// The Store on PostgreSQL through libpq. The same tables as the SQLite store, every text column
// in the "C" collation so ids and RFC 3339 times order by byte as they do there. A batch is one
// transaction sent as one pipeline (one round trip, one fsync at COMMIT). A dropped connection is
// re-established on the next call; a commit whose outcome was lost with its connection is
// reported as failed, and the core rebuilds from what the database holds.
#include <fmt/format.h>
#include <libpq-fe.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "common/text.h"
#include "store/postgres.h"
#include "store/postgres_conn.h"

namespace tessera::store {
namespace {

using pg::Connection;
using pg::ErrorOf;
using pg::Int;
using pg::OneLine;
using pg::Params;
using pg::PgResult;
using pg::StorableText;
using pg::Text;

// Schema migrations, applied in order, each once, in one transaction per step under a
// transaction-scoped advisory lock (so replicas starting together apply each once). The
// version applied is kept in tessera_schema.
constexpr const char* kMigrations[] = {
    R"sql(
CREATE TABLE tenants (
  id TEXT COLLATE "C" PRIMARY KEY, name TEXT COLLATE "C" NOT NULL UNIQUE,
  token_hash TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE instances (
  id TEXT COLLATE "C" PRIMARY KEY, tenant TEXT COLLATE "C" NOT NULL, state TEXT NOT NULL,
  doc TEXT NOT NULL, ended_at TEXT COLLATE "C" NOT NULL DEFAULT '');
CREATE INDEX instances_by_tenant ON instances(tenant);
CREATE INDEX instances_by_end ON instances(ended_at);
CREATE TABLE audit (
  seq BIGSERIAL PRIMARY KEY, at TEXT COLLATE "C" NOT NULL, actor TEXT NOT NULL,
  action TEXT NOT NULL, target TEXT NOT NULL, status INTEGER NOT NULL, detail TEXT NOT NULL);
CREATE INDEX audit_by_time ON audit(at);
CREATE TABLE settings (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ledger (
  seq BIGINT NOT NULL, tenant TEXT COLLATE "C" NOT NULL, instance TEXT NOT NULL,
  instance_type TEXT NOT NULL, billing TEXT NOT NULL, reservation TEXT NOT NULL,
  start BIGINT NOT NULL, "end" BIGINT NOT NULL, seconds BIGINT NOT NULL,
  rate_micros BIGINT NOT NULL, amount_micros BIGINT NOT NULL, note TEXT NOT NULL,
  gpu_milli BIGINT NOT NULL, util_pct_seconds BIGINT NOT NULL,
  util_observed_seconds BIGINT NOT NULL, PRIMARY KEY (tenant, start, seq));
CREATE INDEX ledger_by_start ON ledger(start);
)sql",
    // Leadership (docs/ha.md): the lease row, the replicas' heartbeats, and the fence every
    // leader's commit runs first. The fence's UPDATE takes the lease row's lock until the commit
    // ends, so a takeover (which raises the epoch) waits for a commit in flight, and a commit
    // after the takeover finds another epoch and fails.
    R"sql(
CREATE TABLE tessera_lease (
  name TEXT PRIMARY KEY, holder TEXT NOT NULL, epoch BIGINT NOT NULL,
  renew_until TIMESTAMPTZ NOT NULL, url TEXT NOT NULL, commits BIGINT NOT NULL);
INSERT INTO tessera_lease VALUES ('leader', '', 0, 'epoch', '', 0);
CREATE TABLE tessera_replicas (
  id TEXT PRIMARY KEY, url TEXT NOT NULL, role TEXT NOT NULL, seen_at TIMESTAMPTZ NOT NULL,
  applied_commits BIGINT NOT NULL, lag_ms BIGINT NOT NULL);
CREATE FUNCTION tessera_fence(e BIGINT) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  UPDATE tessera_lease SET commits = commits + 1 WHERE name = 'leader' AND epoch = e;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'fenced: epoch % no longer leads; another replica took the lease', e
      USING ERRCODE = 'TS001';
  END IF;
END $$;
)sql",
    // Audit rows and ledger lines name the user who acted (docs/users.md).
    R"sql(
ALTER TABLE audit ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
ALTER TABLE ledger ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
)sql",
};

// The SQLSTATE tessera_fence raises.
constexpr std::string_view kFencedState = "TS001";

constexpr int64_t kMigrationLock = 0x7465737365726131;  // "tessera1": the migrations' lock.

constexpr const char* kLedgerColumns =
    "seq,tenant,instance,instance_type,billing,reservation,start,\"end\",seconds,rate_micros,"
    "amount_micros,note,gpu_milli,util_pct_seconds,util_observed_seconds,user_id";

// The statements a commit sends, prepared once per connection.
struct Prepared {
  const char* name;
  const char* sql;
};
constexpr Prepared kPutTenant = {
    "put_tenant",
    "INSERT INTO tenants(id,name,token_hash,doc) VALUES($1,$2,$3,$4) ON CONFLICT(id) DO UPDATE "
    "SET name=excluded.name, token_hash=excluded.token_hash, doc=excluded.doc"};
constexpr Prepared kPutInstance = {
    "put_instance",
    "INSERT INTO instances(id,tenant,state,doc,ended_at) VALUES($1,$2,$3,$4,$5) ON CONFLICT(id) "
    "DO UPDATE SET tenant=excluded.tenant, state=excluded.state, doc=excluded.doc, "
    "ended_at=excluded.ended_at"};
constexpr Prepared kPutAudit = {"put_audit",
                                "INSERT INTO audit(at,actor,action,target,status,detail,user_id) "
                                "VALUES($1,$2,$3,$4,$5,$6,$7)"};
constexpr Prepared kPutSetting = {
    "put_setting",
    "INSERT INTO settings(key,value) VALUES($1,$2) ON CONFLICT(key) DO UPDATE SET "
    "value=excluded.value"};
constexpr Prepared kDeleteSetting = {"delete_setting", "DELETE FROM settings WHERE key=$1"};
constexpr Prepared kPutLedger = {
    "put_ledger",
    "INSERT INTO ledger(seq,tenant,instance,instance_type,billing,reservation,start,\"end\","
    "seconds,rate_micros,amount_micros,note,gpu_milli,util_pct_seconds,util_observed_seconds,"
    "user_id) VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16)"};
constexpr Prepared kFence = {"fence", "SELECT tessera_fence($1)"};
constexpr const Prepared* kPrepared[] = {&kPutTenant,     &kPutInstance, &kPutAudit, &kPutSetting,
                                         &kDeleteSetting, &kPutLedger,   &kFence};

void ForEachLedgerRow(const PGresult* r, const std::function<void(const LedgerRecord&)>& fn) {
  LedgerRecord l;
  for (int row = 0; row < PQntuples(r); ++row) {
    l.seq = Int(r, row, 0);
    l.tenant = Text(r, row, 1);
    l.instance = Text(r, row, 2);
    l.instance_type = Text(r, row, 3);
    l.billing = Text(r, row, 4);
    l.reservation = Text(r, row, 5);
    l.start = Int(r, row, 6);
    l.end = Int(r, row, 7);
    l.seconds = Int(r, row, 8);
    l.rate_micros = Int(r, row, 9);
    l.amount_micros = Int(r, row, 10);
    l.note = Text(r, row, 11);
    l.gpu_milli = Int(r, row, 12);
    l.util_pct_seconds = Int(r, row, 13);
    l.util_observed_seconds = Int(r, row, 14);
    l.user = Text(r, row, 15);
    fn(l);
  }
}

Status ScanLedgerRows(Connection& conn, const std::string& tenant, int64_t from, int64_t to,
                      int64_t max_seq, const std::function<void(const LedgerRecord&)>& fn) {
  Params p;
  p.Add(from).Add(to).Add(max_seq);
  std::string sql =
      fmt::format("SELECT {} FROM ledger WHERE start>=$1 AND start<$2 AND seq<=$3", kLedgerColumns);
  if (!tenant.empty()) {
    sql += " AND tenant=$4";
    p.Add(tenant);
  }
  return conn.Stream("reading the ledger", sql.c_str(), std::move(p),
                     [&](const PGresult* r) { ForEachLedgerRow(r, fn); });
}

class PostgresLedgerReader final : public LedgerReader {
 public:
  explicit PostgresLedgerReader(PgUrl url) : conn_(std::move(url)) {}
  Status Scan(const std::string& tenant, int64_t from, int64_t to, int64_t max_seq,
              const std::function<void(const LedgerRecord&)>& fn) override {
    return ScanLedgerRows(conn_, tenant, from, to, max_seq, fn);
  }

 private:
  Connection conn_;
};

// Rows for COPY ... FROM STDIN in text format: fields separated by tabs, rows by newlines, and
// those characters and the backslash escaped within a field.
class CopyRows {
 public:
  CopyRows& Field(const std::string& s) {
    if (!row_.empty()) row_ += '\t';
    for (const char c : StorableText(s)) {
      switch (c) {
        case '\\':
          row_ += "\\\\";
          break;
        case '\n':
          row_ += "\\n";
          break;
        case '\r':
          row_ += "\\r";
          break;
        case '\t':
          row_ += "\\t";
          break;
        default:
          row_ += c;
      }
    }
    return *this;
  }
  CopyRows& Field(int64_t v) {
    if (!row_.empty()) row_ += '\t';
    row_ += std::to_string(v);
    return *this;
  }
  // Ends the row; true when the buffer is worth sending.
  bool EndRow() {
    row_ += '\n';
    data_ += row_;
    row_.clear();
    ++rows_;
    return data_.size() >= (1 << 20);
  }
  std::string TakeData() { return std::exchange(data_, {}); }
  int64_t rows() const { return rows_; }

 private:
  std::string row_, data_;
  int64_t rows_ = 0;
};

class PostgresStore final : public Store {
 public:
  explicit PostgresStore(PgUrl url) : url_(url), conn_(std::move(url)) {}

  // Connects, migrates and learns the ledger's last seq.
  Status Open() {
    TESSERA_RETURN_IF_ERROR(Ready());
    return Migrate();
  }

  Status Commit(const Batch& batch) override {
    if (batch.empty()) return Status::Ok();
    TESSERA_RETURN_IF_ERROR(Ready());
    const int64_t first_seq = next_ledger_seq_;
    Status s = Pipeline(batch);
    if (!s.ok()) {
      next_ledger_seq_ = first_seq;
      // The session is usable again only outside a transaction; a lost connection is re-made
      // by the next call, which re-reads the ledger's last seq (the commit may have landed).
      if (!conn_.broken() && PQtransactionStatus(conn_.get()) != PQTRANS_IDLE) {
        (void)conn_.Exec("ROLLBACK");
      }
    }
    return s;
  }

  Result<std::vector<TenantRecord>> LoadTenants() override {
    std::vector<TenantRecord> out;
    TESSERA_RETURN_IF_ERROR(
        conn_.Stream("reading tenants", "SELECT id,name,token_hash,doc FROM tenants ORDER BY id",
                     {}, [&](const PGresult* r) {
                       out.push_back({Text(r, 0, 0), Text(r, 0, 1), Text(r, 0, 2), Text(r, 0, 3)});
                     }));
    return out;
  }

  Result<std::vector<InstanceRecord>> LoadInstances(const std::string& ended_since) override {
    std::vector<InstanceRecord> out;
    Params p;
    p.Add(ended_since);
    TESSERA_RETURN_IF_ERROR(conn_.Stream(
        "reading instances",
        "SELECT id,tenant,state,doc,ended_at FROM instances WHERE ended_at='' OR ended_at>=$1 "
        "ORDER BY id",
        std::move(p), [&](const PGresult* r) { out.push_back(Instance(r, 0)); }));
    return out;
  }

  Result<std::optional<InstanceRecord>> GetInstance(const std::string& id) override {
    Params p;
    p.Add(id);
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r, conn_.Query("reading instance " + id,
                                "SELECT id,tenant,state,doc,ended_at FROM instances WHERE id=$1",
                                std::move(p)));
    if (PQntuples(r.get()) == 0) return std::optional<InstanceRecord>();
    return std::optional<InstanceRecord>(Instance(r.get(), 0));
  }

  Result<std::vector<AuditRecord>> ListAudit(int64_t after_seq, int limit) override {
    Params p;
    p.Add(after_seq).Add(int64_t{limit});
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r, conn_.Query("reading the audit log",
                                "SELECT seq,at,actor,action,target,status,detail,user_id FROM "
                                "audit WHERE seq>$1 ORDER BY seq LIMIT $2",
                                std::move(p)));
    std::vector<AuditRecord> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      out.push_back({Int(r.get(), i, 0), Text(r.get(), i, 1), Text(r.get(), i, 2),
                     Text(r.get(), i, 3), Text(r.get(), i, 4), static_cast<int>(Int(r.get(), i, 5)),
                     Text(r.get(), i, 6), Text(r.get(), i, 7)});
    }
    return out;
  }

  Result<int64_t> PruneAudit(const std::string& before) override {
    Params p;
    p.Add(before);
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r,
        conn_.Query("pruning the audit log", "DELETE FROM audit WHERE at<$1", std::move(p)));
    return std::strtoll(PQcmdTuples(r.get()), nullptr, 10);
  }

  Status ScanLedger(const std::string& tenant, int64_t from, int64_t to,
                    const std::function<void(const LedgerRecord&)>& fn) override {
    return ScanLedgerRows(conn_, tenant, from, to, INT64_MAX, fn);
  }

  int64_t LastLedgerSeq() const override { return next_ledger_seq_ - 1; }

  void SetFence(int64_t epoch) override {
    fence_ = epoch;
    fenced_ = false;
  }
  bool Fenced() const override { return fenced_; }
  Status Reload() override {
    TESSERA_RETURN_IF_ERROR(Ready());
    return ReadLastSeq();
  }

  Result<std::unique_ptr<LedgerReader>> OpenLedgerReader() override {
    auto reader = std::make_unique<PostgresLedgerReader>(url_);
    return std::unique_ptr<LedgerReader>(std::move(reader));
  }

  // CopyIntoPostgres, on this (opened) store.
  Result<CopyCounts> CopyFrom(Store& from) {
    TESSERA_ASSIGN_OR_RETURN(CopyCounts held, Count());
    if (held.tenants + held.instances + held.settings + held.audit + held.ledger > 0) {
      return Status::FailedPrecondition(fmt::format(
          "{}: the target already holds {} tenants, {} instances, {} settings, {} audit entries "
          "and {} ledger lines; store migrate copies only into an empty database",
          conn_.display(), held.tenants, held.instances, held.settings, held.audit, held.ledger));
    }
    TESSERA_RETURN_IF_ERROR(conn_.Exec("BEGIN"));
    CopyCounts copied;
    Status s = CopyAll(from, copied);
    if (s.ok()) s = conn_.Exec("COMMIT");
    if (!s.ok()) {
      if (!conn_.broken()) (void)conn_.Exec("ROLLBACK");
      return s;
    }
    TESSERA_ASSIGN_OR_RETURN(CopyCounts now, Count());
    if (now.tenants != copied.tenants || now.instances != copied.instances ||
        now.settings != copied.settings || now.audit != copied.audit ||
        now.ledger != copied.ledger) {
      return Status::DataLoss(
          fmt::format("{}: after the copy the target holds other counts than "
                      "were copied; do not use it",
                      conn_.display()));
    }
    return copied;
  }

  Result<std::optional<std::string>> GetSetting(const std::string& key) override {
    Params p;
    p.Add(key);
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r, conn_.Query("reading setting " + key, "SELECT value FROM settings WHERE key=$1",
                                std::move(p)));
    if (PQntuples(r.get()) == 0) return std::optional<std::string>();
    return std::optional<std::string>(Text(r.get(), 0, 0));
  }

  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) override {
    Params p;
    p.Add(prefix);
    std::vector<std::pair<std::string, std::string>> out;
    TESSERA_RETURN_IF_ERROR(conn_.Stream(
        "reading settings",
        "SELECT key,value FROM settings WHERE left(key, length($1))=$1 ORDER BY key", std::move(p),
        [&](const PGresult* r) { out.emplace_back(Text(r, 0, 0), Text(r, 0, 1)); }));
    return out;
  }

 private:
  static InstanceRecord Instance(const PGresult* r, int row) {
    return {Text(r, row, 0), Text(r, row, 1), Text(r, row, 2), Text(r, row, 3), Text(r, row, 4)};
  }

  // Connects when needed; a new session (however it was opened: any read reconnects too), once
  // the schema is there, gets its statements prepared and re-reads the ledger's last seq (what a
  // commit lost with the old session may or may not have added).
  Status Ready() {
    TESSERA_RETURN_IF_ERROR(conn_.Ready());
    return migrated_ && conn_.session() != prepared_session_ ? PrepareSession() : Status::Ok();
  }

  Status PrepareSession() {
    prepared_session_ = 0;
    TESSERA_RETURN_IF_ERROR(conn_.Exec("DEALLOCATE ALL"));  // What a failed attempt left.
    for (const Prepared* p : kPrepared) {
      PgResult r(PQprepare(conn_.get(), p->name, p->sql, 0, nullptr));
      if (!r || PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
        return conn_.Failed(fmt::format("preparing {}", p->name), r.get());
      }
    }
    prepared_session_ = conn_.session();
    return ReadLastSeq();
  }

  Result<CopyCounts> Count() {
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r, conn_.Query("counting records",
                                "SELECT (SELECT count(*) FROM tenants), (SELECT count(*) FROM "
                                "instances), (SELECT count(*) FROM settings), (SELECT count(*) "
                                "FROM audit), (SELECT count(*) FROM ledger)"));
    return CopyCounts{Int(r.get(), 0, 0), Int(r.get(), 0, 1), Int(r.get(), 0, 2),
                      Int(r.get(), 0, 3), Int(r.get(), 0, 4)};
  }

  // Runs `copy` (a COPY ... FROM STDIN) with the rows `fill` writes; fill calls its argument
  // whenever CopyRows::EndRow says the buffer is worth sending. Returns the rows copied.
  Result<int64_t> Copy(
      const std::string& what, const char* copy,
      const std::function<Status(CopyRows&, const std::function<Status()>&)>& fill) {
    PGconn* c = conn_.get();
    PgResult started(PQexec(c, copy));
    if (!started || PQresultStatus(started.get()) != PGRES_COPY_IN) {
      return conn_.Failed(what, started.get());
    }
    CopyRows rows;
    auto send = [&]() -> Status {
      const std::string data = rows.TakeData();
      if (PQputCopyData(c, data.data(), static_cast<int>(data.size())) != 1) {
        return conn_.Failed(what);
      }
      return Status::Ok();
    };
    Status s = fill(rows, send);
    if (s.ok()) s = send();
    if (PQputCopyEnd(c, s.ok() ? nullptr : "the source could not be read") != 1 && s.ok()) {
      s = conn_.Failed(what);
    }
    while (PGresult* raw = PQgetResult(c)) {
      PgResult r(raw);
      if (PQresultStatus(raw) != PGRES_COMMAND_OK && s.ok()) s = conn_.Failed(what, raw);
    }
    if (!s.ok()) return s;
    return rows.rows();
  }

  Status CopyAll(Store& from, CopyCounts& copied) {
    TESSERA_ASSIGN_OR_RETURN(auto tenants, from.LoadTenants());
    TESSERA_ASSIGN_OR_RETURN(
        copied.tenants, Copy("copying tenants", "COPY tenants(id,name,token_hash,doc) FROM STDIN",
                             [&](CopyRows& rows, const std::function<Status()>& flush) {
                               for (const TenantRecord& t : tenants) {
                                 rows.Field(t.id).Field(t.name).Field(t.token_hash).Field(t.doc);
                                 if (rows.EndRow()) TESSERA_RETURN_IF_ERROR(flush());
                               }
                               return Status::Ok();
                             }));
    TESSERA_ASSIGN_OR_RETURN(auto instances, from.LoadInstances(""));
    TESSERA_ASSIGN_OR_RETURN(
        copied.instances,
        Copy("copying instances", "COPY instances(id,tenant,state,doc,ended_at) FROM STDIN",
             [&](CopyRows& rows, const std::function<Status()>& flush) {
               for (const InstanceRecord& i : instances) {
                 rows.Field(i.id).Field(i.tenant).Field(i.state).Field(i.doc).Field(i.ended_at);
                 if (rows.EndRow()) TESSERA_RETURN_IF_ERROR(flush());
               }
               return Status::Ok();
             }));
    instances.clear();
    TESSERA_ASSIGN_OR_RETURN(auto settings, from.ListSettings(""));
    TESSERA_ASSIGN_OR_RETURN(copied.settings,
                             Copy("copying settings", "COPY settings(key,value) FROM STDIN",
                                  [&](CopyRows& rows, const std::function<Status()>& flush) {
                                    for (const auto& [k, v] : settings) {
                                      rows.Field(k).Field(v);
                                      if (rows.EndRow()) TESSERA_RETURN_IF_ERROR(flush());
                                    }
                                    return Status::Ok();
                                  }));
    TESSERA_ASSIGN_OR_RETURN(
        copied.audit,
        Copy("copying the audit log",
             "COPY audit(seq,at,actor,action,target,status,detail,user_id) FROM STDIN",
             [&](CopyRows& rows, const std::function<Status()>& flush) {
               for (int64_t after = 0;;) {
                 TESSERA_ASSIGN_OR_RETURN(auto page, from.ListAudit(after, 10'000));
                 if (page.empty()) return Status::Ok();
                 for (const AuditRecord& a : page) {
                   rows.Field(a.seq).Field(a.at).Field(a.actor).Field(a.action).Field(a.target);
                   rows.Field(int64_t{a.status}).Field(a.detail).Field(a.user);
                   if (rows.EndRow()) TESSERA_RETURN_IF_ERROR(flush());
                   after = a.seq;
                 }
               }
             }));
    // The audit log's own counter goes on from the last entry copied.
    TESSERA_RETURN_IF_ERROR(
        conn_.Exec("SELECT setval(pg_get_serial_sequence('audit', 'seq'), COALESCE(MAX(seq), 1), "
                   "MAX(seq) IS NOT NULL) FROM audit"));
    TESSERA_ASSIGN_OR_RETURN(
        copied.ledger,
        Copy("copying the ledger",
             (std::string("COPY ledger(") + kLedgerColumns + ") FROM STDIN").c_str(),
             [&](CopyRows& rows, const std::function<Status()>& flush) {
               Status sent = Status::Ok();
               TESSERA_RETURN_IF_ERROR(
                   from.ScanLedger("", INT64_MIN, INT64_MAX, [&](const LedgerRecord& l) {
                     rows.Field(l.seq).Field(l.tenant).Field(l.instance).Field(l.instance_type);
                     rows.Field(l.billing).Field(l.reservation).Field(l.start).Field(l.end);
                     rows.Field(l.seconds).Field(l.rate_micros).Field(l.amount_micros);
                     rows.Field(l.note).Field(l.gpu_milli).Field(l.util_pct_seconds);
                     rows.Field(l.util_observed_seconds).Field(l.user);
                     if (rows.EndRow() && sent.ok()) sent = flush();
                   }));
               return sent;
             }));
    return Status::Ok();
  }

  Status ReadLastSeq() {
    TESSERA_ASSIGN_OR_RETURN(PgResult r, conn_.Query("reading the ledger's last seq",
                                                     "SELECT COALESCE(MAX(seq), 0) FROM ledger"));
    next_ledger_seq_ = Int(r.get(), 0, 0) + 1;
    return Status::Ok();
  }

  Status Migrate() {
    const int latest = static_cast<int>(std::size(kMigrations));
    for (;;) {
      TESSERA_RETURN_IF_ERROR(conn_.Exec("BEGIN"));
      Status s =
          conn_.Exec(fmt::format("SELECT pg_advisory_xact_lock({})", kMigrationLock).c_str());
      if (s.ok()) {
        s = conn_.Exec(
            "CREATE TABLE IF NOT EXISTS tessera_schema (version INTEGER NOT NULL, applied_at "
            "TIMESTAMPTZ NOT NULL DEFAULT now())");
      }
      int version = 0;
      if (s.ok()) {
        auto r = conn_.Query("reading the schema version",
                             "SELECT COALESCE(MAX(version), 0) FROM tessera_schema");
        if (r.ok()) {
          version = static_cast<int>(Int(r->get(), 0, 0));
        } else {
          s = r.status();
        }
      }
      if (s.ok() && version > latest) {
        s = Status::FailedPrecondition(fmt::format(
            "{}: the database's schema is version {}, newer than this server's {}: run the "
            "newer server",
            conn_.display(), version, latest));
      }
      if (s.ok() && version < latest) {
        s = conn_.Exec(kMigrations[version]);
        if (s.ok()) {
          s = conn_.Exec(
              fmt::format("INSERT INTO tessera_schema(version) VALUES({})", version + 1).c_str());
        }
      }
      if (s.ok()) s = conn_.Exec("COMMIT");
      if (!s.ok()) {
        (void)conn_.Exec("ROLLBACK");
        return s;
      }
      if (version >= latest) break;
    }
    migrated_ = true;
    return PrepareSession();
  }

  // The batch as one transaction in one pipeline: every statement is sent, then the results
  // read; the first error aborts the transaction and names what failed.
  Status Pipeline(const Batch& b) {
    PGconn* c = conn_.get();
    if (!PQenterPipelineMode(c)) return conn_.Failed("starting a commit");
    std::vector<std::string> what;
    bool sent = true;
    auto send = [&](const char* sql, std::string label) {
      sent = sent && PQsendQueryParams(c, sql, 0, nullptr, nullptr, nullptr, nullptr, 0);
      what.push_back(std::move(label));
    };
    auto send_prepared = [&](const Prepared& p, Params params, std::string label) {
      sent =
          sent && PQsendQueryPrepared(c, p.name, params.size(), params.data(), nullptr, nullptr, 0);
      what.push_back(std::move(label));
    };
    send("BEGIN", "starting a commit");
    if (fence_ > 0) {
      Params p;
      p.Add(fence_);
      send_prepared(kFence, std::move(p), "checking the leadership fence");
    }
    for (const auto& t : b.tenants) {
      Params p;
      p.Add(t.id).Add(t.name).Add(t.token_hash).Add(t.doc);
      send_prepared(kPutTenant, std::move(p), "writing tenant " + t.id);
    }
    for (const auto& i : b.instances) {
      Params p;
      p.Add(i.id).Add(i.tenant).Add(i.state).Add(i.doc).Add(i.ended_at);
      send_prepared(kPutInstance, std::move(p), "writing instance " + i.id);
    }
    for (const auto& a : b.audit) {
      Params p;
      p.Add(a.at).Add(a.actor).Add(a.action).Add(a.target).Add(int64_t{a.status}).Add(a.detail);
      p.Add(a.user);
      send_prepared(kPutAudit, std::move(p), "appending to the audit log");
    }
    for (const auto& [k, v] : b.settings) {
      Params p;
      p.Add(k).Add(v);
      send_prepared(kPutSetting, std::move(p), "writing setting " + k);
    }
    for (const std::string& k : b.deleted_settings) {
      Params p;
      p.Add(k);
      send_prepared(kDeleteSetting, std::move(p), "deleting setting " + k);
    }
    for (const LedgerRecord& l : b.ledger) {
      Params p;
      p.Add(next_ledger_seq_++).Add(l.tenant).Add(l.instance).Add(l.instance_type).Add(l.billing);
      p.Add(l.reservation).Add(l.start).Add(l.end).Add(l.seconds).Add(l.rate_micros);
      p.Add(l.amount_micros).Add(l.note).Add(l.gpu_milli).Add(l.util_pct_seconds);
      p.Add(l.util_observed_seconds).Add(l.user);
      send_prepared(kPutLedger, std::move(p), "appending to the ledger");
    }
    send("COMMIT", "committing");
    sent = sent && PQpipelineSync(c);
    Status status = sent ? Status::Ok() : conn_.Failed("sending a commit");
    // Read every result up to the sync, keeping the first error.
    size_t i = 0;
    bool synced = false;
    while (sent && !synced) {
      PGresult* raw = PQgetResult(c);
      if (!raw) {
        if (PQstatus(c) != CONNECTION_OK) {
          if (status.ok()) status = conn_.Failed("committing");
          break;
        }
        ++i;  // The end of one statement's results.
        continue;
      }
      PgResult r(raw);
      switch (PQresultStatus(raw)) {
        case PGRES_PIPELINE_SYNC:
          synced = true;
          break;
        case PGRES_COMMAND_OK:
        case PGRES_TUPLES_OK:
        case PGRES_PIPELINE_ABORTED:
          break;
        default:
          if (!status.ok()) break;
          if (const char* state = PQresultErrorField(raw, PG_DIAG_SQLSTATE);
              state && std::string_view(state) == kFencedState) {
            fenced_ = true;
            status = Status::FailedPrecondition(fmt::format(
                "{}: {}", conn_.display(), PQresultErrorField(raw, PG_DIAG_MESSAGE_PRIMARY)));
          } else {
            status = conn_.Failed(i < what.size() ? what[i] : "committing", raw);
          }
      }
    }
    if (!conn_.broken() && PQpipelineStatus(c) != PQ_PIPELINE_OFF && !PQexitPipelineMode(c) &&
        status.ok()) {
      status = conn_.Failed("ending a commit");
    }
    return status;
  }

  PgUrl url_;
  Connection conn_;
  bool migrated_ = false;
  uint64_t prepared_session_ = 0;  // The session the statements were prepared in.
  int64_t fence_ = 0;
  bool fenced_ = false;
  int64_t next_ledger_seq_ = 1;
};

}  // namespace

bool IsPostgresUrl(std::string_view spec) {
  return spec.starts_with("postgres://") || spec.starts_with("postgresql://");
}

Result<PgUrl> ParsePostgresUrl(const std::string& url) {
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &err);
  if (!parsed) {
    std::string why = err ? err : "out of memory";
    PQfreemem(err);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return Status::InvalidArgument(fmt::format("--store: not a PostgreSQL URL: {}", why));
  }
  PgUrl out;
  std::string user, host = "localhost", port = "5432", db;
  for (PQconninfoOption* o = parsed; o->keyword; ++o) {
    if (!o->val || !*o->val) continue;
    const std::string_view k = o->keyword;
    out.options.emplace_back(o->keyword, o->val);
    if (k == "user") user = o->val;
    if (k == "host" || (k == "hostaddr" && host == "localhost")) host = o->val;
    if (k == "port") port = o->val;
    if (k == "dbname") db = o->val;
  }
  PQconninfoFree(parsed);
  // Bounded waits and a dead peer noticed in seconds, not at TCP's default of two hours
  // (docs/ha.md): each only where the URL does not set it.
  const std::pair<const char*, const char*> defaults[] = {
      {"connect_timeout", "5"},       {"keepalives", "1"},       {"keepalives_idle", "5"},
      {"keepalives_interval", "2"},   {"keepalives_count", "3"}, {"tcp_user_timeout", "10000"},
      {"application_name", "tessera"}};
  for (const auto& [k, v] : defaults) {
    bool set = false;
    for (const auto& [key, value] : out.options) set = set || key == k;
    if (!set) out.options.emplace_back(k, v);
  }
  out.display = fmt::format("postgres://{}{}{}:{}/{}", user, user.empty() ? "" : "@", host, port,
                            db.empty() ? user : db);
  return out;
}

Result<std::unique_ptr<Store>> OpenPostgresStore(const std::string& url) {
  TESSERA_ASSIGN_OR_RETURN(PgUrl parsed, ParsePostgresUrl(url));
  auto store = std::make_unique<PostgresStore>(std::move(parsed));
  TESSERA_RETURN_IF_ERROR(store->Open());
  return std::unique_ptr<Store>(std::move(store));
}

Result<CopyCounts> CopyIntoPostgres(Store& from, const std::string& url) {
  TESSERA_ASSIGN_OR_RETURN(PgUrl parsed, ParsePostgresUrl(url));
  PostgresStore target(std::move(parsed));
  TESSERA_RETURN_IF_ERROR(target.Open());
  return target.CopyFrom(from);
}

Result<std::unique_ptr<Store>> OpenStore(const std::string& spec) {
  if (IsPostgresUrl(spec)) return OpenPostgresStore(spec);
  return OpenSqliteStore(spec);
}

}  // namespace tessera::store
