#include "agent/mig_manager.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

#include "agent/workload_files.h"
#include "common/csv.h"
#include "common/json.h"

namespace tessera::agent {

using nlohmann::json;

MigManager::MigManager(GpuBackend& gpus, const catalog::Catalog& catalog, MigManagerOptions options)
    : gpus_(gpus), catalog_(catalog), options_(std::move(options)) {}

Status MigManager::Load(const Inventory& inventory) {
  struct stat st {};
  if (lstat(options_.record_path.c_str(), &st) == 0) {
    TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(options_.record_path));
    auto j = ParseJson(text, options_.record_path);
    if (!j.ok()) return j.status();
    const json* devices = j->is_object() && j->contains("devices") ? &(*j)["devices"] : nullptr;
    if (devices == nullptr || !devices->is_array()) {
      return Status::DataLoss(options_.record_path + ": expected {\"devices\": [...]}");
    }
    for (const json& d : *devices) {
      if (!d.is_object() || !d.contains("uuid") || !d["uuid"].is_string()) {
        return Status::DataLoss(options_.record_path + ": a device without its 'uuid'");
      }
      recorded_[d["uuid"].get<std::string>()] = d.value("instance", "");
    }
    for (const json& m : j->value("making", json::array())) {
      if (!m.is_object() || !m.contains("gpu") || !m["gpu"].is_number_integer() ||
          !m.contains("start") || !m["start"].is_number_integer()) {
        return Status::DataLoss(options_.record_path +
                                ": a placement being made without its 'gpu' and 'start'");
      }
      making_.push_back({m["gpu"].get<int>(), m.value("profile", ""), m["start"].get<int>(),
                         m.value("instance", "")});
    }
  }
  models_.clear();
  layout_.clear();
  for (const GpuInfo& g : inventory.gpus) {
    if (!g.mig_enabled) continue;
    models_[g.index] = g.model;
    TakeLayout(g.index, g.mig_devices);
  }
  // What the record names that no longer exists is forgotten, and so is what an earlier run was
  // making: its device, whole or half-made, was found above or never came to be.
  std::map<std::string, std::string> kept;
  for (const auto& [gpu, entries] : layout_) {
    for (const Entry& e : entries) {
      if (e.managed) kept[e.device.uuid] = e.instance;
    }
  }
  recorded_ = std::move(kept);
  making_.clear();
  return SaveRecord();
}

bool MigManager::TakeLayout(int gpu, const std::vector<MigDevice>& devices) {
  bool changed = false;
  std::vector<Entry> fresh;
  for (const MigDevice& m : devices) {
    Entry e;
    e.device = m;
    auto it = recorded_.find(m.uuid);
    auto made = std::find_if(making_.begin(), making_.end(), [&](const Making& k) {
      return k.gpu == gpu && k.start == m.start && (m.profile.empty() || k.profile == m.profile);
    });
    if (it != recorded_.end()) {
      e.managed = true;
      e.instance = it->second;
    } else if (made != making_.end() && m.bare) {
      // Half-made by Tessera: its compute instance was never made. Nothing may be left so.
      Status s = gpus_.DestroyMigDevice(gpu, m);
      if (s.ok() || s.code() == StatusCode::kNotFound) {
        spdlog::warn(
            "MIG: destroyed a half-made device (GPU instance {} without its compute "
            "instance, {}@{}) on GPU {} that making one for {} left",
            m.gpu_instance, m.profile, m.start, gpu, made->instance);
        continue;
      }
      spdlog::warn("MIG: a half-made device on GPU {} ({}@{}) could not be destroyed yet: {}", gpu,
                   m.profile, m.start, s.message());
      e.managed = true;  // Idle and Tessera's: destroyed when a grant needs its slices.
      recorded_[m.uuid] = "";
      changed = true;
    } else if (made != making_.end()) {
      // Made whole by an attempt whose record did not follow: the instance's.
      e.managed = true;
      e.instance = made->instance;
      recorded_[m.uuid] = e.instance;
      changed = true;
      spdlog::info("MIG: {} ({}@{}) on GPU {} is the device made for {}", m.uuid, m.profile,
                   m.start, gpu, e.instance);
    } else if (options_.adopt_foreign) {
      e.managed = true;
      recorded_[m.uuid] = "";
      changed = true;
      spdlog::info("MIG: adopted {} ({}@{}) on GPU {} as a free slice", m.uuid, m.profile, m.start,
                   gpu);
    }
    fresh.push_back(std::move(e));
  }
  layout_[gpu] = std::move(fresh);
  return changed;
}

int MigManager::MemorySlices(int gpu, const std::string& profile) const {
  auto model = models_.find(gpu);
  if (model == models_.end()) return 0;
  const catalog::GpuModel* m = catalog_.FindGpu(model->second);
  const mig::Profile* p = m && m->mig ? m->mig->Find(profile) : nullptr;
  return p ? p->memory_slices : 0;
}

Status MigManager::Refresh(int gpu) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<MigDevice> devices, gpus_.ReadMigDevices(gpu));
  if (TakeLayout(gpu, devices)) TESSERA_RETURN_IF_ERROR(SaveRecord());
  return Status::Ok();
}

void MigManager::Rescan() {
  for (const auto& [gpu, model] : models_) {
    if (Status s = Refresh(gpu); !s.ok()) {
      spdlog::warn("MIG: reading GPU {}'s devices again: {}", gpu, s.message());
    }
  }
}

Result<MigDevice> MigManager::Acquire(const std::string& instance, int gpu,
                                      const std::string& profile, int start) {
  const std::string what = fmt::format("MIG {}@{} on GPU {}", profile, start, gpu);
  if (!models_.contains(gpu)) {
    return Status::FailedPrecondition(what + ": the GPU is not in MIG mode");
  }
  TESSERA_RETURN_IF_ERROR(Refresh(gpu));
  std::vector<Entry>& entries = layout_[gpu];
  for (Entry& e : entries) {
    if (e.device.profile != profile || e.device.start != start || e.device.bare) continue;
    if (e.managed && (e.instance == instance || e.instance.empty())) {
      e.instance = instance;
      recorded_[e.device.uuid] = instance;
      TESSERA_RETURN_IF_ERROR(SaveRecord());
      return e.device;
    }
  }
  const int size = MemorySlices(gpu, profile);
  if (size == 0) return Status::NotFound(what + ": the profile is not one of this GPU model's");
  // What lies on the slices the grant needs: idle devices of Tessera's go, anything else stops it.
  std::vector<MigDevice> in_the_way;
  for (const Entry& e : entries) {
    const int other = MemorySlices(gpu, e.device.profile);
    const bool unknown = e.device.start < 0 || other == 0;
    if (!unknown && (e.device.start >= start + size || start >= e.device.start + other)) continue;
    if (!e.managed || unknown) {
      return Status::FailedPrecondition(
          fmt::format("{}: the placement overlaps MIG device {} ({}@{}), which Tessera did not "
                      "make",
                      what, e.device.uuid, e.device.profile, e.device.start));
    }
    if (!e.instance.empty()) {
      return Status::FailedPrecondition(
          fmt::format("{}: the placement overlaps MIG device {} of instance {}", what,
                      e.device.uuid, e.instance));
    }
    in_the_way.push_back(e.device);
  }
  for (const MigDevice& m : in_the_way) {
    if (Status s = gpus_.DestroyMigDevice(gpu, m); !s.ok() && s.code() != StatusCode::kNotFound) {
      (void)Refresh(gpu);
      return s.WithPrefix(what + ": making room");
    }
    recorded_.erase(m.uuid);
    std::erase_if(entries, [&](const Entry& e) { return e.device.uuid == m.uuid; });
    spdlog::info("MIG: destroyed idle {} ({}@{}) on GPU {} to make {}", m.uuid, m.profile, m.start,
                 gpu, what);
  }
  if (!in_the_way.empty()) ++repartitions_;
  // Recorded before the driver's first call: a run that dies between its two create calls leaves
  // a bare GPU instance here, which the next run destroys (TakeLayout).
  making_ = {{gpu, profile, start, instance}};
  TESSERA_RETURN_IF_ERROR(SaveRecord());
  Result<MigDevice> made = gpus_.CreateMigDevice(gpu, profile, start);
  if (!made.ok()) {
    (void)Refresh(gpu);  // The driver's word on what is there now; a bare leftover goes.
    making_.clear();
    (void)SaveRecord();
    return made.status();
  }
  making_.clear();
  recorded_[made->uuid] = instance;
  Entry e;
  e.device = *made;
  e.managed = true;
  e.instance = instance;
  entries.push_back(std::move(e));
  spdlog::info("MIG: made {} for {}: {}", what, instance, made->uuid);
  TESSERA_RETURN_IF_ERROR(SaveRecord());
  return made;
}

void MigManager::Release(const std::set<std::string>& live) {
  bool changed = false;
  for (auto& [gpu, entries] : layout_) {
    for (auto it = entries.begin(); it != entries.end();) {
      if (!it->managed || it->instance.empty() || live.contains(it->instance)) {
        ++it;
        continue;
      }
      Status s = gpus_.DestroyMigDevice(gpu, it->device);
      if (!s.ok() && s.code() != StatusCode::kNotFound) {
        // Said once per device; it is tried again at every report.
        if (stuck_.insert(it->device.uuid).second) {
          spdlog::warn("MIG: {} of ended instance {}: {}; trying again at every report",
                       it->device.uuid, it->instance, s.message());
        }
        ++it;
        continue;
      }
      stuck_.erase(it->device.uuid);
      spdlog::info("MIG: destroyed {} of ended instance {}", it->device.uuid, it->instance);
      recorded_.erase(it->device.uuid);
      it = entries.erase(it);
      changed = true;
    }
  }
  if (changed) {
    if (Status s = SaveRecord(); !s.ok()) spdlog::warn("MIG: {}", s.message());
  }
}

json MigManager::LayoutJson() const {
  json out = json::array();
  for (const auto& [gpu, entries] : layout_) {
    for (const Entry& e : entries) {
      out.push_back({{"gpu", gpu},
                     {"uuid", e.device.uuid},
                     {"profile", e.device.profile},
                     {"start", e.device.start},
                     {"owner", e.managed ? e.instance : "unmanaged"}});
    }
  }
  return out;
}

Status MigManager::SaveRecord() const {
  json devices = json::array();
  for (const auto& [uuid, instance] : recorded_) {
    devices.push_back({{"uuid", uuid}, {"instance", instance}});
  }
  json record = {{"devices", devices}};
  for (const Making& m : making_) {
    record["making"].push_back(
        {{"gpu", m.gpu}, {"profile", m.profile}, {"start", m.start}, {"instance", m.instance}});
  }
  return WriteFileAtomic(options_.record_path, DumpJson(record, 1));
}

}  // namespace tessera::agent
