// Volumes (docs/volumes.md): a tenant's named storage that outlives its instances. A volume lives
// on one node, in a file system of its own that the node's agent makes under its volumes
// directory; an instance that mounts it is placed on that node (a volume made without a node
// takes the node of the first instance placed with it). It is billed per GiB-month from creation
// to deletion, a ledger line per UTC day, and counts against the tenant's volumes_gib quota.
// This file holds the records and their bookkeeping; State decides who may do what with them.
// Thread-safety: none; the core thread owns the live copies.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "billing/meter.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/money.h"
#include "common/result.h"
#include "store/store.h"

namespace tessera::core {

// Where an instance or a group's member mounts one of its tenant's volumes.
struct VolumeMount {
  std::string name;  // The volume's.
  std::string path;  // Absolute, normalized; in a container, where it is mounted.
  friend bool operator==(const VolumeMount&, const VolumeMount&) = default;
};
inline constexpr size_t kMaxVolumeMounts = 16;
// Reads the optional "volumes" field of a create request or template into `out`; errors go to
// `f`, naming the entry and its field (volumes[1].path).
void ReadVolumeMounts(JsonFields& f, std::vector<VolumeMount>& out);
nlohmann::json VolumeMountsJson(const std::vector<VolumeMount>& mounts);

// What a node's agent last said of a volume it holds. Not stored.
struct VolumeUse {
  int64_t used_bytes = 0;
  int64_t size_bytes = 0;
  // Whether the size is a hard limit (a file system of its own) or only watched.
  bool enforced = false;
};

struct Volume {
  std::string id;  // "vol-000042": the directory and image names on its node.
  std::string tenant;
  std::string name;
  int64_t size_gib = 0;
  std::string node;     // "" until the first instance that mounts it is placed.
  bool shared = false;  // Several instances may mount it read-write at once.
  // Deleted, waiting for its node's agent to remove its data (the name stays taken until then).
  bool deleting = false;
  Time created_at{};
  std::string created_by;
  // Billing: open from creation to deletion, at size x the GiB-month price / 730 per hour.
  billing::Meter meter;
  std::optional<VolumeUse> use;
};

// The API form; `attached_to` lists the instances that mount it now.
nlohmann::json ToJson(const Volume& v, const std::vector<std::string>& attached_to);

// Whom a volume's ledger lines bill: its tenant, its id as the line's instance, type "volume",
// billing "storage".
billing::Payer PayerOf(const Volume& v);

// A volume's hourly rate: size x the price of a GiB-month, over the 730 hours a month has on
// average, rounded to the micro-dollar.
Money VolumeRate(int64_t size_gib, Money per_gib_month);

class Volumes {
 public:
  static constexpr std::string_view kPrefix = "volume/";        // + "<tenant>/<name>".
  static constexpr std::string_view kNextKey = "volumes/next";  // The next id's number.
  static constexpr int64_t kMaxSizeGib = 64 * 1024;
  static constexpr size_t kMaxPerTenant = 1000;

  struct Request {
    std::string name;
    int64_t size_gib = 0;
    std::string node;  // "" = where its first instance goes.
    bool shared = false;
  };
  // Reads POST /v1/volumes' body; errors name the field.
  static Result<Request> Parse(const nlohmann::json& body);

  // A new volume of `tenant`, its meter open from `now` at `rate` per hour. AlreadyExists for a
  // name in use (also while the old volume is being deleted); ResourceExhausted past
  // kMaxPerTenant.
  Result<Volume*> Create(const std::string& tenant, const Request& r, const std::string& user,
                         Time now, Money rate, store::Batch& batch);
  Volume* Find(std::string_view tenant, std::string_view name);
  const Volume* Find(std::string_view tenant, std::string_view name) const;
  const Volume* FindById(std::string_view id) const;
  // `tenant`'s volumes by name ("" lists every tenant's).
  std::vector<const Volume*> List(std::string_view tenant) const;
  std::vector<Volume*> All();
  // The GiB `tenant`'s volumes hold, those being deleted included.
  int64_t GibOf(std::string_view tenant) const;

  void Save(const Volume& v, store::Batch& batch) const;
  // Marks `v` (one of these) as being deleted, and saves it.
  void MarkDeleting(Volume& v, store::Batch& batch);
  // The volumes being deleted, on every node: what agents are told to remove, without a walk
  // over every volume at each report.
  std::vector<const Volume*> Deleting() const;
  // Forgets the volume and deletes its record.
  void Erase(const std::string& tenant, const std::string& name, store::Batch& batch);

  // Rebuilds from the records under kPrefix and kNextKey. DataLoss naming the record when one is
  // malformed. REQUIRES: nothing was created or restored before.
  Status Restore(const std::vector<std::pair<std::string, std::string>>& records);

 private:
  static std::string Key(std::string_view tenant, std::string_view name);

  std::map<std::string, Volume, std::less<>> by_key_;  // By "<tenant>/<name>".
  std::map<std::string, std::string, std::less<>> key_by_id_;
  std::set<std::string, std::less<>> deleting_;  // Keys of the volumes being deleted.
  int64_t next_ = 1;
};

}  // namespace tessera::core
