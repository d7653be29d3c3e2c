#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "store/store.h"

namespace tessera::store {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS tenants (
  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, token_hash TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS instances (
  id TEXT PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS instances_by_tenant ON instances(tenant);
CREATE TABLE IF NOT EXISTS audit (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, actor TEXT NOT NULL,
  action TEXT NOT NULL, target TEXT NOT NULL, status INTEGER NOT NULL, detail TEXT NOT NULL,
  user_id TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_by_time ON audit(at);
)sql";

// The ledger, in (tenant, start) order, so a tenant's month is one sequential read rather than
// an index walk with a table lookup per line. `name` may start with IF NOT EXISTS.
std::string LedgerTable(std::string_view name) {
  return fmt::format(R"sql(
CREATE TABLE {} (
  seq INTEGER NOT NULL, tenant TEXT NOT NULL, instance TEXT NOT NULL,
  instance_type TEXT NOT NULL, billing TEXT NOT NULL, reservation TEXT NOT NULL,
  start INTEGER NOT NULL, end INTEGER NOT NULL, seconds INTEGER NOT NULL,
  rate_micros INTEGER NOT NULL, amount_micros INTEGER NOT NULL, note TEXT NOT NULL,
  gpu_milli INTEGER NOT NULL, util_pct_seconds INTEGER NOT NULL,
  util_observed_seconds INTEGER NOT NULL, user_id TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (tenant, start, seq)) WITHOUT ROWID;
)sql",
                     name);
}

// Stores written before kept the ledger by seq with an index: move the lines over, seqs
// unchanged.
constexpr const char* kClusterLedger = R"sql(
INSERT INTO ledger_by_start(seq,tenant,instance,instance_type,billing,reservation,start,end,
  seconds,rate_micros,amount_micros,note,gpu_milli,util_pct_seconds,util_observed_seconds)
  SELECT seq,tenant,instance,instance_type,billing,reservation,start,end,seconds,rate_micros,
  amount_micros,note,gpu_milli,util_pct_seconds,util_observed_seconds FROM ledger;
DROP TABLE ledger;
ALTER TABLE ledger_by_start RENAME TO ledger;
)sql";

// Instances gained ended_at after the first release: add it, fill it for the instances that had
// ended, and index it, so start-up loads only what is active or recent.
constexpr const char* kAddEndedAt = R"sql(
ALTER TABLE instances ADD COLUMN ended_at TEXT NOT NULL DEFAULT '';
UPDATE instances SET ended_at = COALESCE(json_extract(doc, '$.updated_at'), '')
  WHERE state IN ('terminated', 'succeeded', 'failed', 'preempted');
)sql";
constexpr const char* kIndexEndedAt =
    "CREATE INDEX IF NOT EXISTS instances_by_end ON instances(ended_at);";

// Audit rows and ledger lines name the user who acted (docs/users.md) since users exist.
constexpr const char* kAddAuditUser =
    "ALTER TABLE audit ADD COLUMN user_id TEXT NOT NULL DEFAULT '';";
constexpr const char* kAddLedgerUser =
    "ALTER TABLE ledger ADD COLUMN user_id TEXT NOT NULL DEFAULT '';";

// A prepared statement, finalized on destruction.
class Stmt {
 public:
  Stmt() = default;
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  sqlite3_stmt** addr() { return &s_; }
  sqlite3_stmt* get() const { return s_; }

  void Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  std::string Text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s_, col));
    return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s_, col))) : "";
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
};

// Owns the connection. Declared before the statements in SqliteStore, so it is destroyed after
// them: SQLite requires statements to be finalized before the connection closes.
class Connection {
 public:
  explicit Connection(sqlite3* db) : db_(db) {}
  ~Connection() { sqlite3_close(db_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  sqlite3* get() const { return db_; }

 private:
  sqlite3* db_;
};

// Every ledger line of `tenant` ("" every tenant) starting in [from, to), up to seq `max_seq`,
// through `db`. Errors name `path`.
Status ScanLedgerRows(sqlite3* db, const std::string& path, const std::string& tenant, int64_t from,
                      int64_t to, int64_t max_seq,
                      const std::function<void(const LedgerRecord&)>& fn) {
  constexpr const char* kColumns =
      "SELECT seq,tenant,instance,instance_type,billing,reservation,start,end,seconds,"
      "rate_micros,amount_micros,note,gpu_milli,util_pct_seconds,util_observed_seconds,user_id "
      "FROM ledger ";
  // No ORDER BY: sums need no order, and sorting a month of lines costs more than reading them.
  const std::string sql =
      std::string(kColumns) + (tenant.empty() ? "WHERE start>=?2 AND start<?3 AND seq<=?4"
                                              : "WHERE tenant=?1 AND start>=?2 AND start<?3 AND "
                                                "seq<=?4");
  auto failed = [&](const char* what) {
    return Status::DataLoss(fmt::format("{}: {}: {}", path, what, sqlite3_errmsg(db)));
  };
  Stmt q;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, q.addr(), nullptr) != SQLITE_OK) {
    return failed("preparing a statement");
  }
  if (!tenant.empty()) q.Bind(1, tenant);
  q.Bind(2, from);
  q.Bind(3, to);
  q.Bind(4, max_seq);
  LedgerRecord l;
  int rc = SQLITE_ROW;
  while ((rc = sqlite3_step(q.get())) == SQLITE_ROW) {
    l.seq = q.Int(0);
    l.tenant = q.Text(1);
    l.instance = q.Text(2);
    l.instance_type = q.Text(3);
    l.billing = q.Text(4);
    l.reservation = q.Text(5);
    l.start = q.Int(6);
    l.end = q.Int(7);
    l.seconds = q.Int(8);
    l.rate_micros = q.Int(9);
    l.amount_micros = q.Int(10);
    l.note = q.Text(11);
    l.gpu_milli = q.Int(12);
    l.util_pct_seconds = q.Int(13);
    l.util_observed_seconds = q.Int(14);
    l.user = q.Text(15);
    fn(l);
  }
  return rc == SQLITE_DONE ? Status::Ok() : failed("reading the ledger");
}

// A read-only connection of its own, for billing reads on another thread. WAL lets it read while
// the store's connection commits.
class SqliteLedgerReader final : public LedgerReader {
 public:
  SqliteLedgerReader(sqlite3* db, std::string path) : conn_(db), path_(std::move(path)) {}
  Status Scan(const std::string& tenant, int64_t from, int64_t to, int64_t max_seq,
              const std::function<void(const LedgerRecord&)>& fn) override {
    return ScanLedgerRows(conn_.get(), path_, tenant, from, to, max_seq, fn);
  }

 private:
  Connection conn_;
  std::string path_;
};

class SqliteStore final : public Store {
 public:
  SqliteStore(sqlite3* db, std::string path, int lock_fd)
      : lock_(lock_fd), conn_(db), db_(db), path_(std::move(path)) {}

  Status Prepare() {
    TESSERA_RETURN_IF_ERROR(Exec(kSchema));
    TESSERA_RETURN_IF_ERROR(Exec(LedgerTable("IF NOT EXISTS ledger").c_str()));
    TESSERA_ASSIGN_OR_RETURN(bool has_ended_at, HasColumn("instances", "ended_at"));
    if (!has_ended_at) TESSERA_RETURN_IF_ERROR(Migrate(kAddEndedAt));
    TESSERA_RETURN_IF_ERROR(Exec(kIndexEndedAt));
    TESSERA_ASSIGN_OR_RETURN(bool clustered, LedgerClustered());
    if (!clustered) {
      TESSERA_RETURN_IF_ERROR(Migrate(LedgerTable("ledger_by_start") + kClusterLedger));
    }
    for (const auto& [table, sql] :
         {std::pair{"audit", kAddAuditUser}, {"ledger", kAddLedgerUser}}) {
      TESSERA_ASSIGN_OR_RETURN(bool has_user, HasColumn(table, "user_id"));
      if (!has_user) TESSERA_RETURN_IF_ERROR(Migrate(sql));
    }
    {
      Stmt q;
      TESSERA_RETURN_IF_ERROR(PrepareOne("SELECT COALESCE(MAX(seq), 0) FROM ledger", q));
      if (sqlite3_step(q.get()) != SQLITE_ROW) {
        return Status::DataLoss(fmt::format("{}: cannot read the ledger's last seq", path_));
      }
      next_ledger_seq_ = q.Int(0) + 1;
    }
    TESSERA_RETURN_IF_ERROR(PrepareOne(
        "INSERT INTO tenants(id,name,token_hash,doc) VALUES(?1,?2,?3,?4) ON CONFLICT(id) DO "
        "UPDATE SET name=excluded.name, token_hash=excluded.token_hash, doc=excluded.doc",
        put_tenant_));
    TESSERA_RETURN_IF_ERROR(
        PrepareOne("INSERT INTO instances(id,tenant,state,doc,ended_at) VALUES(?1,?2,?3,?4,?5) ON "
                   "CONFLICT(id) DO UPDATE SET tenant=excluded.tenant, state=excluded.state, "
                   "doc=excluded.doc, ended_at=excluded.ended_at",
                   put_instance_));
    TESSERA_RETURN_IF_ERROR(
        PrepareOne("INSERT INTO audit(at,actor,action,target,status,detail,user_id) "
                   "VALUES(?1,?2,?3,?4,?5,?6,?7)",
                   put_audit_));
    TESSERA_RETURN_IF_ERROR(PrepareOne("DELETE FROM settings WHERE key=?1", delete_setting_));
    TESSERA_RETURN_IF_ERROR(
        PrepareOne("INSERT INTO ledger(tenant,instance,instance_type,billing,reservation,start,end,"
                   "seconds,rate_micros,amount_micros,note,gpu_milli,util_pct_seconds,"
                   "util_observed_seconds,seq,user_id) VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,"
                   "?12,?13,?14,?15,?16)",
                   put_ledger_));
    return PrepareOne(
        "INSERT INTO settings(key,value) VALUES(?1,?2) ON CONFLICT(key) DO UPDATE SET "
        "value=excluded.value",
        put_setting_);
  }

  Status Commit(const Batch& batch) override {
    if (batch.empty()) return Status::Ok();
    TESSERA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    const int64_t first_seq = next_ledger_seq_;
    Status s = Apply(batch);
    if (s.ok()) s = Exec("COMMIT");
    if (!s.ok()) {
      (void)Exec("ROLLBACK");
      next_ledger_seq_ = first_seq;  // The lines were not appended: their seqs are free again.
    }
    return s;
  }

  Result<std::vector<TenantRecord>> LoadTenants() override {
    std::vector<TenantRecord> out;
    Stmt q;
    TESSERA_RETURN_IF_ERROR(
        PrepareOne("SELECT id,name,token_hash,doc FROM tenants ORDER BY id", q));
    while (sqlite3_step(q.get()) == SQLITE_ROW) {
      out.push_back({q.Text(0), q.Text(1), q.Text(2), q.Text(3)});
    }
    TESSERA_RETURN_IF_ERROR(Check(sqlite3_errcode(db_), "reading tenants"));
    return out;
  }

  Result<std::vector<InstanceRecord>> LoadInstances(const std::string& ended_since) override {
    std::vector<InstanceRecord> out;
    Stmt q;
    TESSERA_RETURN_IF_ERROR(PrepareOne(
        "SELECT id,tenant,state,doc,ended_at FROM instances WHERE ended_at='' OR ended_at>=?1 "
        "ORDER BY id",
        q));
    q.Bind(1, ended_since);
    while (sqlite3_step(q.get()) == SQLITE_ROW) {
      out.push_back({q.Text(0), q.Text(1), q.Text(2), q.Text(3), q.Text(4)});
    }
    TESSERA_RETURN_IF_ERROR(Check(sqlite3_errcode(db_), "reading instances"));
    return out;
  }

  Result<std::optional<InstanceRecord>> GetInstance(const std::string& id) override {
    Stmt q;
    TESSERA_RETURN_IF_ERROR(
        PrepareOne("SELECT id,tenant,state,doc,ended_at FROM instances WHERE id=?1", q));
    q.Bind(1, id);
    const int rc = sqlite3_step(q.get());
    if (rc == SQLITE_ROW) {
      return std::optional<InstanceRecord>(
          InstanceRecord{q.Text(0), q.Text(1), q.Text(2), q.Text(3), q.Text(4)});
    }
    if (rc == SQLITE_DONE) return std::optional<InstanceRecord>();
    return Check(rc, "reading instance " + id);
  }

  Result<std::vector<AuditRecord>> ListAudit(int64_t after_seq, int limit) override {
    std::vector<AuditRecord> out;
    Stmt q;
    TESSERA_RETURN_IF_ERROR(PrepareOne(
        "SELECT seq,at,actor,action,target,status,detail,user_id FROM audit WHERE seq>?1 ORDER "
        "BY seq LIMIT ?2",
        q));
    q.Bind(1, after_seq);
    q.Bind(2, int64_t{limit});
    while (sqlite3_step(q.get()) == SQLITE_ROW) {
      out.push_back({q.Int(0), q.Text(1), q.Text(2), q.Text(3), q.Text(4),
                     static_cast<int>(q.Int(5)), q.Text(6), q.Text(7)});
    }
    TESSERA_RETURN_IF_ERROR(Check(sqlite3_errcode(db_), "reading the audit log"));
    return out;
  }

  Result<int64_t> PruneAudit(const std::string& before) override {
    Stmt q;
    TESSERA_RETURN_IF_ERROR(PrepareOne("DELETE FROM audit WHERE at<?1", q));
    q.Bind(1, before);
    TESSERA_RETURN_IF_ERROR(StepDone(q, "pruning the audit log"));
    return static_cast<int64_t>(sqlite3_changes(db_));
  }

  Status ScanLedger(const std::string& tenant, int64_t from, int64_t to,
                    const std::function<void(const LedgerRecord&)>& fn) override {
    return ScanLedgerRows(db_, path_, tenant, from, to, INT64_MAX, fn);
  }

  int64_t LastLedgerSeq() const override { return next_ledger_seq_ - 1; }

  Result<std::unique_ptr<LedgerReader>> OpenLedgerReader() override;

  Result<std::optional<std::string>> GetSetting(const std::string& key) override {
    Stmt q;
    TESSERA_RETURN_IF_ERROR(PrepareOne("SELECT value FROM settings WHERE key=?1", q));
    q.Bind(1, key);
    const int rc = sqlite3_step(q.get());
    if (rc == SQLITE_ROW) return std::optional<std::string>(q.Text(0));
    if (rc == SQLITE_DONE) return std::optional<std::string>();
    return Check(rc, "reading a setting");
  }

  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) override {
    std::vector<std::pair<std::string, std::string>> out;
    Stmt q;
    TESSERA_RETURN_IF_ERROR(PrepareOne(
        "SELECT key,value FROM settings WHERE substr(key,1,length(?1))=?1 ORDER BY key", q));
    q.Bind(1, prefix);
    while (sqlite3_step(q.get()) == SQLITE_ROW) out.emplace_back(q.Text(0), q.Text(1));
    TESSERA_RETURN_IF_ERROR(Check(sqlite3_errcode(db_), "reading settings"));
    return out;
  }

 private:
  Status Apply(const Batch& b) {
    for (const auto& t : b.tenants) {
      put_tenant_.Reset();
      put_tenant_.Bind(1, t.id);
      put_tenant_.Bind(2, t.name);
      put_tenant_.Bind(3, t.token_hash);
      put_tenant_.Bind(4, t.doc);
      TESSERA_RETURN_IF_ERROR(StepDone(put_tenant_, "writing tenant " + t.id));
    }
    for (const auto& i : b.instances) {
      put_instance_.Reset();
      put_instance_.Bind(1, i.id);
      put_instance_.Bind(2, i.tenant);
      put_instance_.Bind(3, i.state);
      put_instance_.Bind(4, i.doc);
      put_instance_.Bind(5, i.ended_at);
      TESSERA_RETURN_IF_ERROR(StepDone(put_instance_, "writing instance " + i.id));
    }
    for (const auto& a : b.audit) {
      put_audit_.Reset();
      put_audit_.Bind(1, a.at);
      put_audit_.Bind(2, a.actor);
      put_audit_.Bind(3, a.action);
      put_audit_.Bind(4, a.target);
      put_audit_.Bind(5, int64_t{a.status});
      put_audit_.Bind(6, a.detail);
      put_audit_.Bind(7, a.user);
      TESSERA_RETURN_IF_ERROR(StepDone(put_audit_, "appending to the audit log"));
    }
    for (const auto& [k, v] : b.settings) {
      put_setting_.Reset();
      put_setting_.Bind(1, k);
      put_setting_.Bind(2, v);
      TESSERA_RETURN_IF_ERROR(StepDone(put_setting_, "writing setting " + k));
    }
    for (const std::string& k : b.deleted_settings) {
      delete_setting_.Reset();
      delete_setting_.Bind(1, k);
      TESSERA_RETURN_IF_ERROR(StepDone(delete_setting_, "deleting setting " + k));
    }
    for (const LedgerRecord& l : b.ledger) {
      put_ledger_.Reset();
      put_ledger_.Bind(1, l.tenant);
      put_ledger_.Bind(2, l.instance);
      put_ledger_.Bind(3, l.instance_type);
      put_ledger_.Bind(4, l.billing);
      put_ledger_.Bind(5, l.reservation);
      put_ledger_.Bind(6, l.start);
      put_ledger_.Bind(7, l.end);
      put_ledger_.Bind(8, l.seconds);
      put_ledger_.Bind(9, l.rate_micros);
      put_ledger_.Bind(10, l.amount_micros);
      put_ledger_.Bind(11, l.note);
      put_ledger_.Bind(12, l.gpu_milli);
      put_ledger_.Bind(13, l.util_pct_seconds);
      put_ledger_.Bind(14, l.util_observed_seconds);
      put_ledger_.Bind(15, next_ledger_seq_++);
      put_ledger_.Bind(16, l.user);
      TESSERA_RETURN_IF_ERROR(StepDone(put_ledger_, "appending to the ledger"));
    }
    return Status::Ok();
  }

  Status StepDone(Stmt& s, const std::string& what) {
    const int rc = sqlite3_step(s.get());
    return rc == SQLITE_DONE ? Status::Ok() : Check(rc, what);
  }

  Status PrepareOne(const char* sql, Stmt& s) {
    return Check(sqlite3_prepare_v2(db_, sql, -1, s.addr(), nullptr), "preparing a statement");
  }

  Status Exec(const char* sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
    if (rc == SQLITE_OK) return Status::Ok();
    std::string msg = fmt::format("{}: {}", path_, err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return Status::DataLoss(std::move(msg));
  }

  // Runs a migration's statements in one transaction: all of them, or none.
  Status Migrate(const std::string& sql) {
    TESSERA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status s = Exec(sql.c_str());
    if (s.ok()) s = Exec("COMMIT");
    if (!s.ok()) (void)Exec("ROLLBACK");
    return s;
  }

  // Whether the ledger is kept in (tenant, start) order (kClusterLedger).
  Result<bool> LedgerClustered() {
    Stmt q;
    TESSERA_RETURN_IF_ERROR(
        PrepareOne("SELECT sql FROM sqlite_master WHERE type='table' AND name='ledger'", q));
    if (sqlite3_step(q.get()) != SQLITE_ROW) {
      return Status::DataLoss(fmt::format("{}: the ledger table is missing", path_));
    }
    return q.Text(0).find("WITHOUT ROWID") != std::string::npos;
  }

  Result<bool> HasColumn(const char* table, const char* column) {
    Stmt q;
    TESSERA_RETURN_IF_ERROR(PrepareOne(
        fmt::format("SELECT 1 FROM pragma_table_info('{}') WHERE name='{}'", table, column).c_str(),
        q));
    const int rc = sqlite3_step(q.get());
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Check(rc, "reading the schema");
  }

  Status Check(int rc, const std::string& what) const {
    if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return Status::Ok();
    return Status::DataLoss(fmt::format("{}: {}: {}", path_, what, sqlite3_errmsg(db_)));
  }

  // Released last, after the connection closes: the directory stays ours until then.
  class Lock {
   public:
    explicit Lock(int fd) : fd_(fd) {}
    ~Lock() {
      if (fd_ >= 0) close(fd_);
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  } lock_;
  Connection conn_;
  sqlite3* db_;
  std::string path_;
  Stmt put_tenant_, put_instance_, put_audit_, put_setting_, delete_setting_, put_ledger_;
  int64_t next_ledger_seq_ = 1;  // The seq the next appended ledger line gets.
};

}  // namespace

namespace {

// Takes dir/LOCK for this process: one writer per data directory. The lock is an flock, so it
// goes with the process however it dies, and a stale file never blocks a restart.
Result<int> LockDirectory(const std::string& dir) {
  const std::string path = dir + "/LOCK";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Status::Unavailable(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[32] = {};
    const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
    close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return Status::FailedPrecondition(fmt::format(
          "data directory {} is in use by another tessera server{}; one server per data "
          "directory",
          dir, pid.empty() ? "" : fmt::format(" (pid {})", pid)));
    }
    return Status::Unavailable(fmt::format("{}: cannot lock: {}", path, std::strerror(err)));
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for the message a second server prints; the lock is what matters.
  }
  return fd;
}

// Makes the database and its WAL and shared-memory files 0600: they hold every tenant's token
// hash and ledger, and a file made by an older version, or copied in, may be wider. SQLite makes
// a new -wal or -shm with the database's own mode, so this holds after a checkpoint too.
Status MakePrivate(const std::string& path) {
  for (const std::string& file : {path, path + "-wal", path + "-shm"}) {
    if (chmod(file.c_str(), 0600) != 0 && errno != ENOENT) {
      return Status::FailedPrecondition(
          fmt::format("{}: cannot make it private (chmod 600): {}", file, std::strerror(errno)));
    }
  }
  return Status::Ok();
}

// Runs `pragma` and returns the first column of its first row ("" when it returns none).
Result<std::string> PragmaValue(sqlite3* db, const std::string& path, const char* pragma) {
  std::string value;
  char* err = nullptr;
  const int rc = sqlite3_exec(
      db, pragma,
      [](void* out, int cols, char** vals, char**) {
        if (cols > 0 && vals[0] && static_cast<std::string*>(out)->empty()) {
          *static_cast<std::string*>(out) = vals[0];
        }
        return 0;
      },
      &value, &err);
  if (rc != SQLITE_OK) {
    std::string msg = fmt::format("{}: {}: {}", path, pragma, err ? err : sqlite3_errstr(rc));
    sqlite3_free(err);
    return Status::DataLoss(std::move(msg));
  }
  return value;
}

}  // namespace

Result<std::unique_ptr<LedgerReader>> SqliteStore::OpenLedgerReader() {
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr);
  auto reader = std::make_unique<SqliteLedgerReader>(db, path_);  // Owns db, even on error.
  if (rc != SQLITE_OK) {
    return Status::DataLoss(
        fmt::format("{}: cannot open for reading: {}", path_, db ? sqlite3_errmsg(db) : ""));
  }
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma : {"PRAGMA mmap_size=4294967296", "PRAGMA cache_size=-65536"}) {
    TESSERA_RETURN_IF_ERROR(PragmaValue(db, path_, pragma).status());
  }
  return std::unique_ptr<LedgerReader>(std::move(reader));
}

Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::NotFound(fmt::format("{}: cannot create directory: {}", dir, ec.message()));
  TESSERA_ASSIGN_OR_RETURN(const int lock_fd, LockDirectory(dir));
  const std::string path = dir + "/tessera.db";
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  // Owns db and the lock from here on, even on error.
  auto store = std::make_unique<SqliteStore>(db, path, lock_fd);
  if (rc != SQLITE_OK) {
    return Status::DataLoss(fmt::format("{}: cannot open: {}", path, db ? sqlite3_errmsg(db) : ""));
  }
  sqlite3_busy_timeout(db, 5000);
  TESSERA_ASSIGN_OR_RETURN(const std::string mode,
                           PragmaValue(db, path, "PRAGMA journal_mode=WAL"));
  if (mode != "wal") {
    return Status::FailedPrecondition(fmt::format(
        "{}: the journal mode is '{}', not WAL; a committed batch would not be durable as "
        "documented (is the directory on a file system without shared memory, such as NFS?)",
        path, mode));
  }
  // Reads through a memory map and a 64 MiB page cache: a month's ledger scan then walks pages
  // in place instead of a read system call for each page the small default cache misses.
  for (const char* pragma : {"PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON",
                             "PRAGMA mmap_size=4294967296", "PRAGMA cache_size=-65536"}) {
    TESSERA_RETURN_IF_ERROR(PragmaValue(db, path, pragma).status());
  }
  TESSERA_ASSIGN_OR_RETURN(const std::string sync, PragmaValue(db, path, "PRAGMA synchronous"));
  if (sync != "2") {
    return Status::FailedPrecondition(
        fmt::format("{}: synchronous is {}, not FULL (2)", path, sync));
  }
  TESSERA_RETURN_IF_ERROR(store->Prepare());
  TESSERA_RETURN_IF_ERROR(MakePrivate(path));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace tessera::store
