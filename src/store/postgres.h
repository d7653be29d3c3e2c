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

// Leadership of the replicas sharing one database (docs/ha.md): a lease row (holder, epoch,
// renew_until) taken and renewed by compare-and-set on the database's clock. Taking it raises
// the epoch; the holder's store, fenced with that epoch (Store::SetFence), commits only while
// the row still carries it, so a holder that paused past its lease and was replaced can never
// write again. Not a session advisory lock: a dropped connection does not end a lease, only its
// time does. One thread at a time; it keeps a connection of its own.
struct LeaseView {
  std::string holder;      // The replica holding it ("" when never taken).
  int64_t epoch = 0;       // Raised by every acquisition.
  std::string url;         // The holder's advertised URL.
  bool live = false;       // renew_until is still ahead on the database's clock.
  double remaining_s = 0;  // Seconds until renew_until (negative once past).
  int64_t commits = 0;     // Commits made under the lease so far (followers poll it).
};

struct ReplicaView {
  std::string id;
  std::string url;
  std::string role;             // "leader" or "follower".
  double seen_ago_s = 0;        // Seconds since its last heartbeat, on the database's clock.
  int64_t applied_commits = 0;  // The commit count its state reflects.
  int64_t lag_ms = 0;           // How far behind the leader's commits its state was, as it said.
};

class Leadership {
 public:
  virtual ~Leadership() = default;
  // Takes the lease for `ttl` when it is free, expired or already ours; returns the new epoch,
  // or 0 when another replica holds a live lease. `commits`, when given, gets the lease's commit
  // count as the lease was taken.
  virtual Result<int64_t> TryAcquire(double ttl_s, int64_t* commits = nullptr) = 0;
  // Extends the lease held under `epoch` by `ttl` from now; false when it is no longer ours
  // (expired or taken).
  virtual Result<bool> Renew(int64_t epoch, double ttl_s) = 0;
  // Ends the lease held under `epoch` at once, so a follower takes over without waiting.
  virtual Status Release(int64_t epoch) = 0;
  virtual Result<LeaseView> Read() = 0;
  // This replica's heartbeat row, for GET /v1/cluster.
  virtual Status Announce(const std::string& role, int64_t applied_commits, int64_t lag_ms) = 0;
  // Replicas heard from in the last `within_s` seconds, by id.
  virtual Result<std::vector<ReplicaView>> Replicas(double within_s) = 0;
  virtual const std::string& holder() const = 0;
};

// Opens leadership on the database at `url` for replica `holder` (unique per process) that
// serves at `advertise_url`. The schema must exist (OpenPostgresStore made it).
Result<std::unique_ptr<Leadership>> OpenLeadership(const std::string& url, std::string holder,
                                                   std::string advertise_url);

}  // namespace tessera::store
