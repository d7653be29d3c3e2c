// The agent's MIG manager: makes the MIG device each granted slice needs, at the start slice the
// server granted, and destroys it once its instance has ended and nothing runs on it.
//
// Every MIG device on the node's GPUs is one of three kinds:
//   held       made (or adopted) by Tessera and used by an instance;
//   idle       Tessera's and used by no instance: free capacity, destroyed when a grant needs its
//              slices (a repartition);
//   unmanaged  made by someone else (an operator): never touched, and reported so the server
//              never places over it. With `adopt_foreign` such devices are taken over as idle.
// Which devices are Tessera's survives an agent restart in a small record file beside the
// agent's work: devices in the record that still exist are Tessera's again, with their instance;
// the record's devices that are gone are forgotten. The driver itself keeps the devices.
// Before it makes a device the manager records the placement it is making: an agent that dies
// between the driver's two create calls leaves a GPU instance without its compute instance (a
// bare one), which the next run finds at that placement and destroys; one that dies after them
// finds the whole device there and takes it as the instance's. A bare GPU instance nobody
// recorded is an operator's, unmanaged like any other.
// The layout is reported to the server with every sync (LayoutJson), and read from the driver
// again at every telemetry turn (Rescan) as well as around each change, so the server's view of a
// MIG GPU is what exists: a device an operator made meanwhile is booked within one turn.
// Thread-safety: not thread-safe; the agent loop owns it.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/gpu_backend.h"
#include "catalog/catalog.h"
#include "common/result.h"

namespace tessera::agent {

struct MigManagerOptions {
  std::string record_path;     // The record of Tessera's devices; written atomically.
  bool adopt_foreign = false;  // Devices Tessera did not make become idle ones of its own.
};

class MigManager {
 public:
  // `gpus` and `catalog` must outlive the manager.
  MigManager(GpuBackend& gpus, const catalog::Catalog& catalog, MigManagerOptions options);

  // Reads the record and the MIG devices of `inventory`'s GPUs in MIG mode. A record that
  // cannot be read is an error naming the file (the devices it names would be taken for an
  // operator's otherwise).
  Status Load(const Inventory& inventory);

  // The MIG device for `instance`'s slice of `profile` at memory slice `start` on `gpu`: the one
  // it holds already, an idle one at that placement, or a new one, made after destroying the idle
  // devices in the way. The failure, named, when the placement overlaps an unmanaged device or
  // another instance's, or when the driver refuses; the GPU's layout is read again then.
  Result<MigDevice> Acquire(const std::string& instance, int gpu, const std::string& profile,
                            int start);

  // Destroys the devices held by instances not in `live`; one still in use is kept and tried
  // again at the next call.
  void Release(const std::set<std::string>& live);

  // Reads every MIG GPU's devices from the driver again (an operator may have made or destroyed
  // some). A GPU the driver would not list keeps what was known of it.
  void Rescan();

  // The layout as the server takes it: [{"gpu", "uuid", "profile", "start", "owner"}], owner
  // being the instance's id, "" for an idle device or "unmanaged".
  nlohmann::json LayoutJson() const;
  // Layout changes that destroyed idle devices to make a granted one.
  int64_t repartitions() const { return repartitions_; }

 private:
  struct Entry {
    MigDevice device;
    bool managed = false;  // Tessera's.
    std::string instance;  // Its holder; "" while idle or unmanaged.
  };

  // A placement being made: recorded before the driver's first create call, dropped once the
  // device is recorded or the attempt undone.
  struct Making {
    int gpu = 0;
    std::string profile;
    int start = 0;
    std::string instance;
  };

  // Reads `gpu`'s devices from the driver, keeping what is known of each by UUID.
  Status Refresh(int gpu);
  // `devices` as the layout of `gpu`: what the record names is Tessera's; what lies at a
  // placement being made is the half-made (bare: destroyed) or whole device of that attempt.
  // True when the record changed.
  bool TakeLayout(int gpu, const std::vector<MigDevice>& devices);
  // The memory slices a device spans on `gpu`'s model; 0 when its profile is unknown.
  int MemorySlices(int gpu, const std::string& profile) const;
  Status SaveRecord() const;

  GpuBackend& gpus_;
  const catalog::Catalog& catalog_;
  MigManagerOptions options_;
  std::map<int, std::string> models_;            // GPUs in MIG mode, with their catalog model.
  std::map<int, std::vector<Entry>> layout_;     // By GPU.
  std::map<std::string, std::string> recorded_;  // Tessera's devices: UUID -> instance.
  std::vector<Making> making_;                   // As recorded; at most one at a time.
  int64_t repartitions_ = 0;
  std::set<std::string> stuck_;  // Devices of ended instances that could not be destroyed yet.
};

}  // namespace tessera::agent
