// Leadership on PostgreSQL (docs/ha.md): a lease row that replicas compare and set, timed by the
// database's clock, each on a connection of its own.
#include <fmt/format.h>
#include <libpq-fe.h>

#include <memory>
#include <utility>

#include "store/postgres.h"
#include "store/postgres_conn.h"

namespace tessera::store {
namespace {

using pg::Connection;
using pg::Int;
using pg::Params;
using pg::PgResult;
using pg::Text;

// Leadership on its own connection. Every statement is one compare-and-set on the lease row,
// timed by the database's clock.
class PgLeadership final : public Leadership {
 public:
  PgLeadership(PgUrl url, std::string holder, std::string advertise_url)
      : conn_(std::move(url)), holder_(std::move(holder)), url_(std::move(advertise_url)) {}

  Result<int64_t> TryAcquire(double ttl_s, int64_t* commits) override {
    Params p;
    p.Add(holder_).Add(fmt::format("{:.3f}", ttl_s)).Add(url_);
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r,
        conn_.Query("taking the leadership lease",
                    "UPDATE tessera_lease SET holder=$1, epoch=epoch+1, renew_until=now() + "
                    "make_interval(secs => $2::float8), url=$3 WHERE name='leader' AND "
                    "(renew_until < now() OR holder=$1) RETURNING epoch, commits",
                    std::move(p)));
    if (PQntuples(r.get()) != 1) return int64_t{0};
    if (commits) *commits = Int(r.get(), 0, 1);
    return Int(r.get(), 0, 0);
  }

  Result<bool> Renew(int64_t epoch, double ttl_s) override {
    Params p;
    p.Add(holder_).Add(epoch).Add(fmt::format("{:.3f}", ttl_s));
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r,
        conn_.Query("renewing the leadership lease",
                    "UPDATE tessera_lease SET renew_until=now() + make_interval(secs => "
                    "$3::float8) WHERE name='leader' AND holder=$1 AND epoch=$2 AND "
                    "renew_until >= now() RETURNING epoch",
                    std::move(p)));
    return PQntuples(r.get()) == 1;
  }

  Status Release(int64_t epoch) override {
    Params p;
    p.Add(holder_).Add(epoch);
    return conn_
        .Query("releasing the leadership lease",
               "UPDATE tessera_lease SET renew_until='epoch' WHERE name='leader' AND "
               "holder=$1 AND epoch=$2",
               std::move(p))
        .status();
  }

  Result<LeaseView> Read() override {
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r, conn_.Query("reading the leadership lease",
                                "SELECT holder, epoch, url, renew_until > now(), "
                                "COALESCE(EXTRACT(EPOCH FROM renew_until - now())::float8, "
                                "-1e9), commits FROM tessera_lease WHERE name='leader'"));
    if (PQntuples(r.get()) != 1) {
      return Status::DataLoss(conn_.display() + ": the leadership lease row is missing");
    }
    LeaseView v;
    v.holder = Text(r.get(), 0, 0);
    v.epoch = Int(r.get(), 0, 1);
    v.url = Text(r.get(), 0, 2);
    v.live = Text(r.get(), 0, 3) == "t";
    v.remaining_s = std::strtod(PQgetvalue(r.get(), 0, 4), nullptr);
    v.commits = Int(r.get(), 0, 5);
    return v;
  }

  Status Announce(const std::string& role, int64_t applied_commits, int64_t lag_ms) override {
    Params p;
    p.Add(holder_).Add(url_).Add(role).Add(applied_commits).Add(lag_ms);
    return conn_
        .Query("announcing this replica",
               "INSERT INTO tessera_replicas(id,url,role,seen_at,applied_commits,lag_ms) "
               "VALUES($1,$2,$3,now(),$4,$5) ON CONFLICT(id) DO UPDATE SET url=excluded.url, "
               "role=excluded.role, seen_at=excluded.seen_at, "
               "applied_commits=excluded.applied_commits, lag_ms=excluded.lag_ms",
               std::move(p))
        .status();
  }

  Result<std::vector<ReplicaView>> Replicas(double within_s) override {
    Params p;
    p.Add(fmt::format("{:.3f}", within_s));
    TESSERA_ASSIGN_OR_RETURN(
        PgResult r,
        conn_.Query("listing the replicas",
                    "SELECT id, url, role, EXTRACT(EPOCH FROM now() - seen_at)::float8, "
                    "applied_commits, lag_ms FROM tessera_replicas WHERE seen_at >= now() - "
                    "make_interval(secs => $1::float8) ORDER BY id",
                    std::move(p)));
    std::vector<ReplicaView> out;
    for (int i = 0; i < PQntuples(r.get()); ++i) {
      out.push_back({Text(r.get(), i, 0), Text(r.get(), i, 1), Text(r.get(), i, 2),
                     std::strtod(PQgetvalue(r.get(), i, 3), nullptr), Int(r.get(), i, 4),
                     Int(r.get(), i, 5)});
    }
    return out;
  }

  const std::string& holder() const override { return holder_; }

 private:
  Connection conn_;
  std::string holder_, url_;
};

}  // namespace

Result<std::unique_ptr<Leadership>> OpenLeadership(const std::string& url, std::string holder,
                                                   std::string advertise_url) {
  TESSERA_ASSIGN_OR_RETURN(PgUrl parsed, ParsePostgresUrl(url));
  // The lease's statements must answer quickly or not at all: a renewal stuck behind a dead
  // connection would outlive the lease it renews.
  parsed.options.emplace_back("options", "-c statement_timeout=2000");
  for (auto& [k, v] : parsed.options) {
    if (k == "connect_timeout") v = std::to_string(2);
  }
  return std::unique_ptr<Leadership>(std::make_unique<PgLeadership>(
      std::move(parsed), std::move(holder), std::move(advertise_url)));
}

}  // namespace tessera::store
