// The Store persists the control plane's state: tenants, instances, the audit log and a few
// settings. Its contract is durability: when Commit returns OK, the batch is on disk and survives
// kill -9 and power loss, and a batch is applied whole or not at all. The core writes one batch
// per round of commands (group commit) and rebuilds memory from Load* at start-up.
// Records hold typed columns for lookups plus a JSON document for the rest, so fields can be
// added without a schema migration.
// The core receives its Store as this interface, so tests can hand it one that fails on demand.
// Thread-safety: a Store is used by one thread at a time (the core); implementations need not
// lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace tessera::store {

struct TenantRecord {
  std::string id;          // "tenant-000001".
  std::string name;        // Unique, human-chosen.
  std::string token_hash;  // Hex SHA-256 of the tenant's bearer token; never the token.
  std::string doc;         // JSON: quota, created_at, ...
};

struct InstanceRecord {
  std::string id;        // "inst-000042".
  std::string tenant;    // Owning tenant id.
  std::string state;     // "pending", "running", ... (indexed for the restart queue).
  std::string doc;       // JSON: the whole instance, assignment included.
  std::string ended_at;  // RFC 3339 once the instance has ended (a terminal state); "" before.
};

struct AuditRecord {
  int64_t seq = 0;        // Assigned by the store on append, increasing.
  std::string at;         // RFC 3339.
  std::string actor;      // "admin" or a tenant id.
  std::string action;     // e.g. "POST /v1/instances".
  std::string target;     // The id acted upon, if any.
  int status = 0;         // The HTTP status answered.
  std::string detail;     // A short JSON or text detail (the error message on failure).
  std::string user = "";  // The tenant's user who acted ("user-000042"); "" for the admin.
};

// One line of the billing ledger (docs/billing.md): a billed stretch of one instance's run, or
// of nothing but a reservation's term. Lines are only ever appended. Money is micro-USD.
struct LedgerRecord {
  int64_t seq = 0;            // Assigned by the store on append, increasing.
  std::string tenant;         // Tenant id.
  std::string instance;       // Instance id.
  std::string instance_type;  // Catalog instance type, or "custom:<gpu model>".
  std::string billing;        // "on_demand", "reserved", "spot".
  std::string reservation;    // The reservation a reserved instance drew on; "" otherwise.
  int64_t start = 0;          // Unix seconds; [start, end) lies within one UTC day.
  int64_t end = 0;
  int64_t seconds = 0;        // Billed: end - start, or more under the one-minute minimum.
  int64_t rate_micros = 0;    // Per hour.
  int64_t amount_micros = 0;  // rate x seconds / 3600, rounded half to even.
  std::string note;           // "minimum", "ended by the platform", or "".
  int64_t gpu_milli = 0;      // GPUs held, in milli-GPU (a whole GPU is 1000).
  // Measured GPU utilization over the stretch: the integral of the percent over the seconds that
  // had readings, and those seconds (the mean is their ratio; 0 observed: no readings).
  int64_t util_pct_seconds = 0;
  int64_t util_observed_seconds = 0;
  std::string user = "";  // The user who made the instance; "" when not known.
};

// One atomic unit of change.
struct Batch {
  std::vector<TenantRecord> tenants;      // Upserted by id.
  std::vector<InstanceRecord> instances;  // Upserted by id.
  std::vector<AuditRecord> audit;         // Appended; seq is ignored and assigned.
  std::vector<std::pair<std::string, std::string>> settings;  // Upserted by key.
  std::vector<std::string> deleted_settings;                  // After the upserts.
  std::vector<LedgerRecord> ledger;                           // Appended; seq is assigned.
  bool empty() const {
    return tenants.empty() && instances.empty() && audit.empty() && settings.empty() &&
           deleted_settings.empty() && ledger.empty();
  }
};

// Reads the ledger on a thread other than the store's own (billing reads, off the core thread),
// through a connection of its own: each scan sees what was committed before it began. One thread
// at a time.
class LedgerReader {
 public:
  virtual ~LedgerReader() = default;
  // As Store::ScanLedger, of the lines with seq <= max_seq only, so that a scan sees the ledger
  // as it was when max_seq was its last line (what the core's snapshot of open lines matches).
  virtual Status Scan(const std::string& tenant, int64_t from, int64_t to, int64_t max_seq,
                      const std::function<void(const LedgerRecord&)>& fn) = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Applies `batch` atomically and durably. On error nothing of the batch is applied.
  virtual Status Commit(const Batch& batch) = 0;

  // What memory is rebuilt from at start-up. Order: by id.
  virtual Result<std::vector<TenantRecord>> LoadTenants() = 0;
  // The instances that have not ended, and those that ended at or after `ended_since` (RFC 3339
  // UTC as FormatRfc3339 writes it; "" loads every instance).
  virtual Result<std::vector<InstanceRecord>> LoadInstances(const std::string& ended_since) = 0;
  // One instance by id, however long ago it ended; nullopt when unknown.
  virtual Result<std::optional<InstanceRecord>> GetInstance(const std::string& id) = 0;

  // Audit entries with seq > after_seq, oldest first, at most `limit`.
  virtual Result<std::vector<AuditRecord>> ListAudit(int64_t after_seq, int limit) = 0;
  // Deletes the audit entries recorded before `before` (RFC 3339 UTC); returns how many.
  virtual Result<int64_t> PruneAudit(const std::string& before) = 0;

  // Calls `fn` with every ledger line of `tenant` ("" = every tenant) whose start is in
  // [from, to) (Unix seconds), in no particular order.
  virtual Status ScanLedger(const std::string& tenant, int64_t from, int64_t to,
                            const std::function<void(const LedgerRecord&)>& fn) = 0;
  // The seq of the last ledger line committed; 0 when none was.
  virtual int64_t LastLedgerSeq() const = 0;
  // A reader of this store's ledger for another thread; it may outlive nothing of the store's
  // but must be destroyed before it.
  virtual Result<std::unique_ptr<LedgerReader>> OpenLedgerReader() = 0;

  // Fencing, for a store that several replicas share (store/postgres.h): from now on every
  // Commit checks, in its own transaction, that the leadership lease still carries `epoch`, and
  // fails with FailedPrecondition ("fenced: ...") when another replica has taken it since; then
  // Fenced() is true. 0 turns the check off. A store only one server can open ignores it.
  virtual void SetFence(int64_t epoch) { (void)epoch; }
  // Re-reads what another replica may have appended since this store opened (the ledger's last
  // seq), before memory is rebuilt from it. A store only one server can open has nothing to do.
  virtual Status Reload() { return Status::Ok(); }
  virtual bool Fenced() const { return false; }

  // A setting's value, or nullopt when unset.
  virtual Result<std::optional<std::string>> GetSetting(const std::string& key) = 0;
  // Every setting whose key starts with `prefix`, by key.
  virtual Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) = 0;
};

// Opens (creating when missing) the SQLite store in directory `dir`, itself created when missing,
// with WAL journaling (checked, not assumed: a file system that cannot do WAL is an error) and
// synchronous=FULL so a committed batch survives power loss. The store holds an exclusive lock on
// `dir` (dir/LOCK, flock) until it is destroyed, so a second server on the same directory fails
// here, naming the directory and the holder's pid. The database and its -wal and -shm files are
// made 0600, whatever mode they had. Errors name the path.
Result<std::unique_ptr<Store>> OpenSqliteStore(const std::string& dir);

// The store `spec` names: a PostgreSQL URL (postgres://..., store/postgres.h), else the SQLite
// store in that directory.
Result<std::unique_ptr<Store>> OpenStore(const std::string& spec);

}  // namespace tessera::store
