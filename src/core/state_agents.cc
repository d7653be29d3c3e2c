// State's operations for nodes joined by agents: joining, registration, reports and long polls,
// and what each agent is told (docs/agent.md). What the reports say about instances is applied in
// state_reports.cc; a node's loss, removal and GPU faults in state_node_loss.cc.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json.h"
#include "common/text.h"
#include "core/state.h"
#include "sched/plugins/sole_tenant.h"

namespace tessera::core {

namespace {

// The longest a report may carry in uuids and names.
constexpr size_t kMaxUuid = 96;

// The node a registration describes, checked field by field against the catalog.
Result<fleet::NodeSpec> SpecFromInventory(const catalog::Catalog& catalog, const AgentNode& node,
                                          const nlohmann::json& inventory) {
  JsonFields f(inventory, "inventory");
  f.RejectUnknown({"backend", "driver_version", "cpu_milli", "memory_mib", "gpus", "nvlink_islands",
                   "hostname"});
  // Words of the inventory become series' labels and API fields: short and printable.
  auto text = [](JsonFields& on, const char* key, size_t max) {
    const std::string v = on.String(key, false);
    if (on.ok() && (v.size() > max || !IsPrintableText(v))) {
      on.Fail(key, fmt::format("must be at most {} printable ASCII characters", max));
    }
  };
  text(f, "backend", 32);
  text(f, "driver_version", 64);
  text(f, "hostname", 253);
  fleet::NodeSpec spec;
  spec.name = node.name;
  spec.cpu_milli = f.Int("cpu_milli", 1000, int64_t{100'000} * 1000);
  spec.memory_mib = f.Int("memory_mib", 1, int64_t{1} << 34);
  const nlohmann::json* gpus = f.Get("gpus");
  if (gpus && !gpus->is_array()) f.Fail("gpus", "expected a list");
  if (gpus && gpus->is_array()) {
    if (gpus->size() > fleet::kMaxGpusPerNode) {
      f.Fail("gpus",
             fmt::format("{} GPUs; a node holds at most {}", gpus->size(), fleet::kMaxGpusPerNode));
    }
    std::string model_of_first;
    for (size_t i = 0; i < gpus->size() && i < fleet::kMaxGpusPerNode; ++i) {
      JsonFields g((*gpus)[i], fmt::format("inventory: gpus[{}]", i));
      g.RejectUnknown({"index", "uuid", "name", "model", "memory_mib", "mig_enabled", "mig_devices",
                       "nvlink_peers", "pci_bus_id"});
      const int64_t index = g.Int("index", 0, fleet::kMaxGpusPerNode - 1);
      const std::string uuid = g.String("uuid");
      const std::string name = g.String("name", false);
      if (g.ok() && (name.size() > 256 || !IsPrintableText(name))) {
        g.Fail("name", "must be at most 256 printable ASCII characters");
      }
      const std::string model = g.String("model");
      g.Int("memory_mib", 0, int64_t{1} << 24, false);
      const bool mig = g.Bool("mig_enabled", false);
      if (const nlohmann::json* devices = g.Get("mig_devices", false)) {
        if (!devices->is_array() || devices->size() > 64) {
          g.Fail("mig_devices", "expected a list of at most 64 MIG devices");
        }
        for (size_t d = 0; devices->is_array() && d < devices->size() && d < 64; ++d) {
          JsonFields m((*devices)[d], fmt::format("inventory: gpus[{}].mig_devices[{}]", i, d));
          m.RejectUnknown({"uuid", "profile", "start"});
          const std::string mig_uuid = m.String("uuid");
          m.String("profile");
          m.Int("start", -1, 7);
          if (m.ok() &&
              (mig_uuid.empty() || mig_uuid.size() > kMaxUuid || !IsPrintableAscii(mig_uuid))) {
            m.Fail("uuid", "must be 1-96 printable ASCII characters");
          }
          if (!m.ok()) return m.first_error();
        }
      }
      g.Get("nvlink_peers", false);
      text(g, "pci_bus_id", 32);
      if (!g.ok()) return g.first_error();
      if (index != static_cast<int64_t>(i)) g.Fail("index", fmt::format("is {}, not {}", index, i));
      if (uuid.empty() || uuid.size() > kMaxUuid || !IsPrintableAscii(uuid)) {
        g.Fail("uuid", "must be 1-96 printable ASCII characters");
      } else if (std::find(spec.gpu_uuids.begin(), spec.gpu_uuids.end(), uuid) !=
                 spec.gpu_uuids.end()) {
        g.Fail("uuid", fmt::format("'{}' is given twice", Quote(uuid)));
      }
      const catalog::GpuModel* known = catalog.FindGpu(model);
      if (!known) {
        g.Fail("model",
               fmt::format("unknown GPU model '{}'{} (not in the catalog; tessera "
                           "catalog list shows the models)",
                           Quote(model), name.empty() ? "" : fmt::format(" ('{}')", Quote(name))));
      } else if (model_of_first.empty()) {
        model_of_first = known->id;
      } else if (known->id != model_of_first) {
        g.Fail("model", fmt::format("'{}' differs from gpus[0]'s '{}': a node has one GPU model",
                                    known->id, model_of_first));
      }
      if (!g.ok()) return g.first_error();
      spec.gpu_model = model_of_first;
      spec.gpu_uuids.push_back(uuid);
      spec.gpu_modes.push_back(mig ? catalog::SharingMode::kMig
                                   : node.SharingOf(static_cast<int>(i)));
    }
  }
  if (const nlohmann::json* islands = f.Get("nvlink_islands", false)) {
    bool ok = islands->is_array();
    for (size_t i = 0; ok && i < islands->size(); ++i) {
      const nlohmann::json& island = (*islands)[i];
      ok = island.is_array();
      std::vector<int> members;
      for (size_t k = 0; ok && k < island.size(); ++k) {
        ok = island[k].is_number_integer() && island[k].get<int64_t>() >= 0 &&
             island[k].get<int64_t>() < fleet::kMaxGpusPerNode;
        if (ok) members.push_back(island[k].get<int>());
      }
      if (ok) spec.nvlink_islands.push_back(std::move(members));
    }
    if (!ok) f.Fail("nvlink_islands", "expected lists of GPU indices");
  }
  TESSERA_RETURN_IF_ERROR(f.first_error());
  spec.gpus = static_cast<int>(spec.gpu_uuids.size());
  if (spec.gpus == 0) {
    spec.gpu_modes.clear();
    spec.gpu_uuids.clear();
  }
  return spec;
}

bool SameNode(const fleet::NodeSpec& spec, const fleet::Node& n, const catalog::Catalog& catalog) {
  if (n.cpu_milli != spec.cpu_milli || n.memory_mib != spec.memory_mib ||
      n.gpus.size() != static_cast<size_t>(spec.gpus)) {
    return false;
  }
  const std::string model = n.model.valid() ? catalog.gpu(n.model).id : "";
  if (model != spec.gpu_model) return false;
  for (size_t g = 0; g < n.gpus.size(); ++g) {
    if (n.gpus[g].uuid != spec.gpu_uuids[g]) return false;
  }
  return true;
}

std::string Describe(const fleet::NodeSpec& spec) {
  return fmt::format("{} x {}, {} vCPUs, {} MiB", spec.gpus,
                     spec.gpu_model.empty() ? "no GPU" : spec.gpu_model, spec.cpu_milli / 1000,
                     spec.memory_mib);
}

// The environment a workload sees: its GPUs and who it is.
std::map<std::string, std::string> WorkloadEnv(const Instance& inst) {
  std::vector<std::string> uuids;
  std::vector<std::string> mem_limits;
  int thread_percentage = 0;
  for (const GpuRef& g : inst.gpus) {
    uuids.push_back(g.uuid);
    if (g.milli_gpu > 0) {
      thread_percentage = std::max(thread_percentage, std::max(1, g.milli_gpu / 10));
      // MPS names a device by its ordinal among the visible ones, as CUDA numbers them.
      mem_limits.push_back(fmt::format("{}={}M", uuids.size() - 1, inst.shape.gpu_memory_mib));
    }
  }
  const std::string visible = uuids.empty() ? "void" : fmt::format("{}", fmt::join(uuids, ","));
  std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", uuids.empty() ? "" : visible},
                                            {"NVIDIA_VISIBLE_DEVICES", visible},
                                            {"TESSERA_INSTANCE_ID", inst.id.str()},
                                            {"TESSERA_INSTANCE_NAME", inst.name},
                                            {"TESSERA_TENANT", inst.tenant.str()}};
  for (const auto& [name, value] : inst.group_env) env[name] = value;
  if (thread_percentage > 0) {
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(thread_percentage);
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = fmt::format("{}", fmt::join(mem_limits, ","));
  }
  return env;
}

}  // namespace

Result<AgentNode> State::CreateAgentNode(const std::string& name,
                                         std::map<std::string, std::string> labels,
                                         catalog::SharingMode sharing,
                                         const std::string& token_hash, store::Batch& batch) {
  if (!IsValidIdBody(name)) {
    return Status::InvalidArgument(fmt::format(
        "field 'name': '{}' must be 1-63 characters of [a-z0-9._-], starting with a letter or "
        "digit",
        Quote(name)));
  }
  if (sharing == catalog::SharingMode::kMig) {
    return Status::InvalidArgument(
        "field 'sharing': GPUs in MIG mode are found by the agent; give exclusive or shared");
  }
  if (agents_.Find(name) || fleet_->Find(name).ok()) {
    return Status::AlreadyExists(fmt::format("a node named '{}' exists", name));
  }
  AgentNode node;
  node.name = name;
  node.labels = std::move(labels);
  node.sharing = sharing;
  node.token_hash = token_hash;
  node.created_at = clock_->Now();
  node.last_seen = node.created_at;
  AgentNode& stored = agents_.nodes().emplace(name, std::move(node)).first->second;
  SaveNode(stored, batch);
  tenants_.SetNodeToken(name, token_hash);
  return stored;
}

Result<int64_t> State::InjectFault(const std::string& name, const std::string& fault) {
  AgentNode* node = agents_.Find(name);
  if (!node || !node->registered()) {
    return Status::NotFound(fmt::format("node '{}' has no agent", name));
  }
  constexpr size_t kKept = 16;
  const int64_t id = node->next_fault++;
  node->faults.push_back({id, fault});
  if (node->faults.size() > kKept) node->faults.erase(node->faults.begin());
  agents_.Changed(*node);
  return id;
}

Status State::AttachSimulatedAgent(const std::string& name, const std::string& token_hash) {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex index, fleet_->Find(name));
  AgentNode node;
  node.name = name;
  node.simulated = true;
  node.token_hash = token_hash;
  node.created_at = node.last_seen = clock_->Now();
  AgentNode& attached = agents_.nodes().insert_or_assign(name, std::move(node)).first->second;
  attached.drained = fleet_->node(index).state == fleet::NodeState::kDraining;
  // What recovery booked on the node is its agent's to run.
  instances_.ForEach([&](Instance& inst) {
    if (inst.node != name || !IsActive(inst.state)) return;
    attached.assigned.insert(inst.id.str());
    // Its billing stopped when the node went silent before the restart: it resumes with a report.
    if (inst.state == InstanceState::kRunning && !inst.meter) attached.lost = true;
  });
  ApplyNodeState(attached);  // Its agent runs real processes: one tenant until it says more.
  tenants_.SetNodeToken(name, token_hash);
  return Status::Ok();
}

Status State::RotateAgentNodeToken(const std::string& name, const std::string& token_hash,
                                   store::Batch& batch) {
  AgentNode* node = agents_.Find(name);
  if (!node) return Status::NotFound(fmt::format("node '{}' not found", name));
  node->token_hash = token_hash;
  SaveNode(*node, batch);
  tenants_.SetNodeToken(name, token_hash);  // The previous token stops at once.
  return Status::Ok();
}

Status State::RegisterAgent(const std::string& name, const AgentRegistration& reg,
                            store::Batch& batch) {
  AgentNode* node = agents_.Find(name);
  if (!node) return Status::NotFound(fmt::format("node '{}' not found", name));
  if (reg.agent_id.empty() || reg.agent_id.size() > 64 || !IsPrintableAscii(reg.agent_id)) {
    return Status::InvalidArgument("field 'agent_id': must be 1-64 printable ASCII characters");
  }
  if (!reg.address.empty() && !IsHostAddress(reg.address)) {
    return Status::InvalidArgument(fmt::format(
        "field 'advertise_address': {} is not an IP address or a DNS name", Quote(reg.address)));
  }
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeSpec spec,
                           SpecFromInventory(*catalog_, *node, reg.inventory));
  // A GPU is in one node: a UUID another node holds is a copied inventory or a lying agent.
  for (size_t n = 0; n < fleet_->size(); ++n) {
    const fleet::Node& other = fleet_->node(fleet::NodeIndex(static_cast<uint32_t>(n)));
    if (other.name == name) continue;
    for (const fleet::Gpu& g : other.gpus) {
      if (g.uuid.empty()) continue;
      if (auto it = std::find(spec.gpu_uuids.begin(), spec.gpu_uuids.end(), g.uuid);
          it != spec.gpu_uuids.end()) {
        return Status::FailedPrecondition(fmt::format(
            "field 'inventory.gpus[{}].uuid': '{}' is a GPU of node '{}'; a GPU is in one node",
            it - spec.gpu_uuids.begin(), Quote(g.uuid), other.name));
      }
    }
  }
  if (auto existing = fleet_->Find(name); existing.ok()) {
    const fleet::Node& n = fleet_->node(*existing);
    const bool same = node->simulated
                          ? spec.gpus == static_cast<int>(n.gpus.size()) &&
                                spec.gpu_model == (n.model.valid() ? catalog_->gpu(n.model).id : "")
                          : SameNode(spec, n, *catalog_);
    if (!same && node->simulated) {
      return Status::FailedPrecondition(
          fmt::format("node '{}' of the fleet file has {} GPUs; its simulated agent reports {}",
                      name, n.gpus.size(), Describe(spec)));
    }
    if (!same) {
      return Status::FailedPrecondition(fmt::format(
          "node '{}' joined with {}; its agent now reports {} (GPU uuids or sizes changed): a "
          "node's hardware cannot change while it is in the fleet",
          name, Describe(SpecFromInventory(*catalog_, *node, node->inventory).value()),
          Describe(spec)));
    }
    // The operator's MIG devices are booked again from this registration's report, after the
    // GPUs took their modes.
    ReleaseMigHolds(*node);
    node->mig.clear();
    FollowInventoryModes(*node, spec);  // A GPU whose MIG mode changed.
  } else {
    auto added = fleet_->AddNode(spec);
    if (!added.ok()) return added.status().WithPrefix("inventory");
    admission_.FleetChanged();
    CapacityFreed();
    spdlog::info("node {} joined: {}", name, Describe(spec));
  }
  node->inventory = reg.inventory;
  node->mig.clear();  // The inventory's devices are the registration's until the report's.
  if (reg.mig) {
    ApplyMigLayout(*node, *reg.mig, -1, batch);
  } else {
    ReleaseMigHolds(*node);  // An agent that does not report them.
  }
  node->info = node->SeriesInfo();
  node->address = reg.address;
  if (node->agent_id != reg.agent_id) {
    spdlog::info("node {}: agent run {} registered", name, Quote(reg.agent_id));
    // A new run may have lost its powers (restarted as another user): what the last one said
    // about isolation holds for it only once it says so too.
    node->isolation.reset();
    node->isolation_note.clear();
  }
  node->agent_id = reg.agent_id;
  node->report_seq = -1;
  node->last_seen = clock_->Now();
  if (node->lost) NodeHeardAgain(*node, batch);
  ApplyNodeState(*node);
  agents_.Changed(*node);
  SaveNode(*node, batch);
  return Status::Ok();
}

Result<bool> State::SyncAgent(const std::string& name, const AgentSync& sync, store::Batch& batch) {
  AgentNode* node = agents_.Find(name);
  if (!node) return Status::NotFound(fmt::format("node '{}' not found", name));
  if (!node->registered() || node->agent_id.empty()) {
    ++counters_.agent_reports_refused;
    return Status::FailedPrecondition(
        "this agent has not registered since the server started: POST /v1/agent/register first");
  }
  if (sync.agent_id != node->agent_id) {
    ++counters_.agent_reports_refused;
    return Status::FailedPrecondition(fmt::format(
        "agent run '{}' was superseded by '{}', which registered this node since; register "
        "again",
        Quote(sync.agent_id), Quote(node->agent_id)));
  }
  if (sync.seq <= node->report_seq) {
    ++counters_.agent_reports_refused;
    return Status::FailedPrecondition(fmt::format(
        "report {} replayed: reports up to {} were applied already", sync.seq, node->report_seq));
  }
  node->acked_generation = std::max(node->acked_generation, sync.generation);
  if (sync.telemetry) {
    // Readings of GPUs the node does not have would become series of GPUs nobody has.
    const size_t gpus = node->gpu_count();
    for (size_t i = 0; i < sync.telemetry->gpus.size(); ++i) {
      if (static_cast<size_t>(sync.telemetry->gpus[i].index) >= gpus) {
        ++counters_.agent_reports_refused;
        return Status::InvalidArgument(
            fmt::format("field 'telemetry.gpus[{}].index': {} is not a GPU of node '{}' ({} GPUs)",
                        i, sync.telemetry->gpus[i].index, name, gpus));
      }
    }
    for (size_t i = 0; i < sync.telemetry->xids.size(); ++i) {
      if (sync.telemetry->xids[i].gpu >= static_cast<int>(gpus)) {
        ++counters_.agent_reports_refused;
        return Status::InvalidArgument(
            fmt::format("field 'telemetry.xids[{}].gpu': {} is not a GPU of node '{}' ({} GPUs)", i,
                        sync.telemetry->xids[i].gpu, name, gpus));
      }
    }
  }
  if (Status bad = CheckModeResults(*node, sync.gpu_mode_results); !bad.ok()) {
    ++counters_.agent_reports_refused;
    return bad;
  }
  ++counters_.agent_reports;
  node->report_seq = sync.seq;
  node->last_seen = clock_->Now();
  if (node->lost) NodeHeardAgain(*node, batch);
  if (sync.limits_enforced) {
    node->limits_enforced = sync.limits_enforced;
    node->limits_note = sync.limits_note;
  }
  if (sync.shares_mps) {
    node->shares_mps = sync.shares_mps;
    node->shares_note = sync.shares_note;
  }
  if (sync.volumes) {
    node->volumes_enforced = sync.volumes->enforced;
    node->volumes_note = sync.volumes->note;
    ApplyVolumeReport(name, sync, batch);
  }
  if (sync.isolation) {
    const bool opened = sync.isolation != node->isolation && *sync.isolation == Isolation::kUid;
    node->isolation = sync.isolation;
    node->isolation_note = sync.isolation_note;
    ApplyNodeState(*node);
    if (opened) CapacityFreed();  // Other tenants' queued work may now share it.
  }
  if (sync.telemetry) {
    node->telemetry = sync.telemetry;
    node->telemetry_at = clock_->Now();
    monitoring_.history().Record(name, node->telemetry_at, *sync.telemetry);
    accounts_.Observe(*node);
    CheckGpuHealth(*node, batch);
  }
  // Logs first: an exit report comes with the workload's last bytes.
  for (const WorkloadLog& log : sync.logs) {
    const Instance* inst = instances_.Find(log.instance);
    if (inst && inst->restarts == log.attempt && node->assigned.count(log.instance)) {
      logs_.Append(inst->id.str(), log);
    }
  }
  // Before the reports: an instance that starts in this one shows the UUID its device has.
  if (sync.mig) ApplyMigLayout(*node, *sync.mig, sync.mig_repartitions, batch);
  for (const AgentReport& report : sync.reports) {
    Instance* inst = instances_.Find(report.instance);
    // Work the node no longer holds (moved while it was lost, or ended) is not its to report:
    // the desired state leaves it out, so its agent stops it.
    if (!inst || inst->node != name || !node->assigned.count(report.instance)) {
      spdlog::debug("node {}: ignored a report on {}: not assigned to it", name,
                    Quote(report.instance));
      continue;
    }
    if (ApplyReport(*inst, report, batch)) Save(*inst, batch);
  }
  // After the reports, so a workload that started in this one shows no stale pull. A pull moves
  // nothing else: the instance stays scheduled, and billing starts with its running report. It
  // is not stored: it changes with every report.
  for (const PullReport& pull : sync.pulls) {
    Instance* inst = instances_.Find(pull.instance);
    if (inst && inst->node == name && node->assigned.count(pull.instance) &&
        inst->restarts == pull.attempt && inst->state == InstanceState::kScheduled) {
      inst->pull = pull.progress;
    }
  }
  ApplyModeResults(*node, sync.gpu_mode_results, batch);
  return sync.generation != node->generation || sync.wait <= Duration::zero();
}

DesiredState State::DesiredState(const std::string& name) const {
  const AgentNode* node = agents_.Find(name);
  core::DesiredState out;
  out.node = name;
  const AgentTiming t = timing();
  out.lease = t.lease();
  out.heartbeat = t.report_period;
  out.volumes_to_delete = VolumesToDelete(name);
  if (!node) return out;
  out.faults = node->faults;
  out.generation = node->generation;
  for (const std::string& id : node->assigned) {
    const Instance* inst = instances_.Find(id);
    if (!inst) continue;
    DesiredWorkload w;
    w.action = inst->state == InstanceState::kStopping     ? DesiredWorkload::Action::kStop
               : inst->state == InstanceState::kPreempting ? DesiredWorkload::Action::kPreempt
                                                           : DesiredWorkload::Action::kRun;
    if (w.action == DesiredWorkload::Action::kRun && AwaitsRendezvous(*inst)) {
      // Rank 0 reserves the group's port as it starts; the others start once it has.
      if (inst->rank != 0) continue;
      w.reserve_port = "MASTER_PORT";
      // An elastic gang's endpoint names the port too: the agent writes it in.
      if (inst->group_env.count("PET_RDZV_ENDPOINT")) w.port_env = {"PET_RDZV_ENDPOINT"};
    }
    if (w.action == DesiredWorkload::Action::kPreempt) {
      w.deadline = inst->preempt_at.value_or(clock_->Now());
      w.reason = "spot preemption";
    }
    w.id = id;
    w.attempt = inst->restarts;
    w.name = inst->name;
    w.tenant = inst->tenant.str();
    w.command = inst->command;
    w.env = WorkloadEnv(*inst);
    // Only this node's agent, authenticated by its node token, is sent the workload's secret
    // values and registry password.
    secrets_.Resolve(inst->tenant.str(), inst->env, w.env);
    w.cpu_milli = inst->shape.vcpus * 1000;
    w.memory_mib = inst->shape.memory_mib;
    w.stop_grace_ms = inst->stop_grace_seconds * 1000;
    w.image = inst->image;
    secrets_.ResolvePassword(inst->tenant.str(), w.image);
    w.volumes = WorkloadVolumes(*inst);
    w.ports = inst->ports;
    for (const GpuRef& g : inst->gpus) {
      DesiredGpu d;
      d.index = g.index;
      d.milli = g.milli_gpu > 0          ? g.milli_gpu
                : !g.mig_profile.empty() ? fleet::kMilliPerGpu / 2
                                         : fleet::kMilliPerGpu;
      if (!g.mig_profile.empty()) {
        d.mig_profile = g.mig_profile;
        d.mig_start = g.mig_start;
        d.uuid = g.uuid;  // The agent puts the UUID its device has in its place.
      }
      if (g.milli_gpu > 0) d.memory_mib = inst->shape.gpu_memory_mib;  // Its MPS limit.
      w.gpus.push_back(std::move(d));
    }
    w.log_offset = logs_.ResumeAt(id, inst->restarts);
    out.workloads.push_back(std::move(w));
  }
  // Outstanding GPU mode changes (docs/agent.md, "Changing a GPU's mode").
  for (const auto& [_, c] : node->mode_changes) {
    if (c.outstanding()) out.mode_requests.push_back(c);
  }
  for (const ExecSession& e : node->exec) {
    if (e.expires > clock_->Now()) out.exec.push_back(e);
  }
  return out;
}

Result<const AgentNode*> State::AuthenticateNode(std::string_view token_hash) const {
  TESSERA_ASSIGN_OR_RETURN(Principal p,
                           core::Authenticate(*tenants_.index(), token_hash, clock_->Now()));
  if (p.node.empty()) {
    return Status::PermissionDenied("the agent routes take a node token (POST /v1/nodes)");
  }
  const AgentNode* node = agents_.Find(p.node);
  if (!node) return Status::Unauthenticated("invalid token");
  return node;
}

Status State::RestoreAgentNodes(const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    TESSERA_ASSIGN_OR_RETURN(AgentNode node, AgentSupervisor::FromRecord(key, value));
    node.last_seen = clock_->Now();  // Its agent gets a whole timeout to report again.
    if (node.registered()) {
      auto spec = SpecFromInventory(*catalog_, node, node.inventory);
      Status added = spec.ok() ? fleet_->AddNode(*spec).status() : spec.status();
      if (!added.ok()) {
        // The catalog changed under it: the node waits for its agent to register again, and the
        // work it held fails closed at recovery (its node left the fleet).
        spdlog::warn("node {} cannot rejoin the fleet as stored: {}", node.name, added.message());
        node.inventory = nullptr;
      }
    }
    if (node.registered()) node.info = node.SeriesInfo();
    const std::string name = node.name;
    const AgentNode& restored = agents_.nodes().emplace(name, std::move(node)).first->second;
    ApplyNodeState(restored);
    tenants_.SetNodeToken(name, restored.token_hash);
  }
  return Status::Ok();
}

void State::SaveNode(const AgentNode& node, store::Batch& batch) {
  if (node.simulated) return;  // Made afresh from the fleet file at every start.
  batch.settings.push_back(AgentSupervisor::Record(node));
}

void State::ApplyNodeState(const AgentNode& node) {
  auto n = fleet_->Find(node.name);
  if (!n.ok()) return;
  const fleet::NodeState s = node.lost || node.all_gpus_unhealthy() ? fleet::NodeState::kDown
                             : node.drained                         ? fleet::NodeState::kDraining
                                                                    : fleet::NodeState::kReady;
  if (fleet_->node(*n).state != s) (void)fleet_->SetNodeState(*n, s);
  for (size_t g = 0; g < fleet_->node(*n).gpus.size(); ++g) {
    (void)fleet_->SetGpuHealthy(*n, static_cast<int>(g),
                                !node.unhealthy.contains(static_cast<int>(g)));
    (void)fleet_->SetGpuHeld(*n, static_cast<int>(g), node.mode_held(static_cast<int>(g)));
  }
  // A joined node's agent runs real processes, and unless it runs each tenant's under a uid of
  // their own, one tenant's workload could read or signal another's: such a node is shared, and
  // hosts one tenant at a time. The nodes of the in-core simulated agents (StateOptions::
  // sim_agents: the what-if simulator) and fleet-file nodes without an agent run nothing, so
  // they are never shared and the filter never refuses them.
  sole_tenant_->SetShared(*n, !node.isolated());
  queue_.KeepTenantsApart(sole_tenant_->shared_nodes() > 0);
}

}  // namespace tessera::core
