#include "core/instance.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <array>

#include "common/json.h"

namespace tessera::core {

namespace {

constexpr std::array<std::string_view, 9> kStateNames = {"pending",  "scheduled",  "running",
                                                         "stopping", "terminated", "succeeded",
                                                         "failed",   "preempted",  "preempting"};
constexpr std::array<std::string_view, 3> kBillingNames = {"reserved", "on_demand", "spot"};

// An RFC 4122-shaped UUID (version 5 bits set) from the SHA-256 of `key`.
std::string UuidFrom(std::string_view key) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> d{};
  unsigned int len = 0;
  EVP_Digest(key.data(), key.size(), d.data(), &len, EVP_sha256(), nullptr);
  d[6] = static_cast<unsigned char>((d[6] & 0x0f) | 0x50);
  d[8] = static_cast<unsigned char>((d[8] & 0x3f) | 0x80);
  std::string s;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += fmt::format("{:02x}", d[static_cast<size_t>(i)]);
  }
  return s;
}

nlohmann::json AssignmentJson(const fleet::Assignment& a, const fleet::Fleet& fleet) {
  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < a.gpu_count; ++i) {
    const fleet::GpuGrant& g = a.gpus[static_cast<size_t>(i)];
    nlohmann::json gj = {{"gpu", g.gpu}, {"milli", g.milli}, {"memory_mib", g.memory_mib}};
    if (g.mig_profile) {
      gj["mig_profile"] = g.mig_profile->name;
      gj["mig_start"] = g.mig_start;
    }
    gpus.push_back(std::move(gj));
  }
  return {{"node", fleet.node(a.node).name},
          {"cpu_milli", a.cpu_milli},
          {"memory_mib", a.memory_mib},
          {"gpus", std::move(gpus)}};
}

// The assignment a stored record holds, bound to today's fleet. DataLoss when the record is
// malformed; FailedPrecondition, saying what changed, when it names a node, GPU or MIG profile
// the fleet no longer has (`binding` gets that; the result is then empty).
Result<std::optional<fleet::Assignment>> AssignmentFromJson(const nlohmann::json& j,
                                                            const fleet::Fleet& fleet,
                                                            const std::string& where,
                                                            Status& binding) {
  JsonFields f(j, where + ": assignment");
  const std::string node_name = f.String("node");
  fleet::Assignment a;
  a.cpu_milli = f.Int("cpu_milli", 0, INT64_MAX);
  a.memory_mib = f.Int("memory_mib", 0, INT64_MAX);
  const nlohmann::json* gpus = f.Get("gpus");
  if (!f.ok()) return Status::DataLoss(f.status().message());
  if (!gpus->is_array() || gpus->size() > fleet::kMaxGpusPerNode) {
    return Status::DataLoss(where + ": assignment: field 'gpus': expected an array of grants");
  }
  struct Grant {
    fleet::GpuGrant grant;
    std::string profile;
  };
  std::vector<Grant> grants;
  for (const auto& gj : *gpus) {
    JsonFields g(gj, where + ": assignment: gpus");
    Grant grant;
    grant.grant.gpu = static_cast<int>(g.Int("gpu", 0, fleet::kMaxGpusPerNode - 1));
    grant.grant.milli = static_cast<int>(g.Int("milli", 0, fleet::kMilliPerGpu));
    grant.grant.memory_mib = g.Int("memory_mib", 0, INT64_MAX);
    grant.profile = g.String("mig_profile", false);
    grant.grant.mig_start = static_cast<int>(g.Int("mig_start", 0, 7, false));
    if (!g.ok()) return Status::DataLoss(g.status().message());
    grants.push_back(std::move(grant));
  }
  auto node = fleet.Find(node_name);
  if (!node.ok()) {
    binding = Status::FailedPrecondition(fmt::format("node '{}' left the fleet", node_name));
    return std::optional<fleet::Assignment>();
  }
  a.node = *node;
  const fleet::Node& n = fleet.node(a.node);
  for (Grant& grant : grants) {
    if (static_cast<size_t>(grant.grant.gpu) >= n.gpus.size()) {
      binding = Status::FailedPrecondition(
          fmt::format("node '{}' has {} GPU(s) now; the instance held GPU {}", node_name,
                      n.gpus.size(), grant.grant.gpu));
      return std::optional<fleet::Assignment>();
    }
    if (!grant.profile.empty()) {
      const auto* model = n.model.valid() ? &fleet.catalog().gpu(n.model) : nullptr;
      grant.grant.mig_profile = model && model->mig ? model->mig->Find(grant.profile) : nullptr;
      if (!grant.grant.mig_profile) {
        binding = Status::FailedPrecondition(
            fmt::format("MIG profile '{}' is not in the table of node '{}' any more", grant.profile,
                        node_name));
        return std::optional<fleet::Assignment>();
      }
    }
    a.gpus[static_cast<size_t>(a.gpu_count++)] = grant.grant;
  }
  return std::optional<fleet::Assignment>(a);
}

}  // namespace

std::string_view StateName(InstanceState s) { return kStateNames[static_cast<size_t>(s)]; }

std::optional<InstanceState> ParseState(std::string_view s) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (kStateNames[i] == s) return static_cast<InstanceState>(i);
  }
  return std::nullopt;
}

bool IsActive(InstanceState s) {
  return s == InstanceState::kPending || s == InstanceState::kScheduled ||
         s == InstanceState::kRunning || s == InstanceState::kStopping ||
         s == InstanceState::kPreempting;
}

std::string_view BillingName(Billing b) { return kBillingNames[static_cast<size_t>(b)]; }

std::optional<Billing> ParseBilling(std::string_view s) {
  for (size_t i = 0; i < kBillingNames.size(); ++i) {
    if (kBillingNames[i] == s) return static_cast<Billing>(i);
  }
  return std::nullopt;
}

int Priority(Billing b) {
  switch (b) {
    case Billing::kReserved:
      return 2;
    case Billing::kOnDemand:
      return 1;
    case Billing::kSpot:
      return 0;
  }
  return 0;
}

int64_t Shape::GpuMilli(const catalog::Catalog& catalog) const {
  switch (mode) {
    case catalog::SharingMode::kExclusive:
      return int64_t{gpus} * fleet::kMilliPerGpu;
    case catalog::SharingMode::kShared:
      return milli_gpu;
    case catalog::SharingMode::kMig: {
      const catalog::GpuModel* m = catalog.FindGpu(gpu_model);
      const mig::Profile* p = m && m->mig ? m->mig->Find(mig_profile) : nullptr;
      if (!p) return fleet::kMilliPerGpu;
      return int64_t{p->compute_slices} * fleet::kMilliPerGpu / m->mig->compute_slices;
    }
  }
  return 0;
}

std::string GpuUuid(std::string_view node, int gpu) {
  return "GPU-" + UuidFrom(fmt::format("{}/gpu/{}", node, gpu));
}

std::string MigUuid(std::string_view node, int gpu, int start) {
  return "MIG-" + UuidFrom(fmt::format("{}/gpu/{}/mig/{}", node, gpu, start));
}

std::vector<GpuRef> DescribeGpus(const fleet::Assignment& a, const fleet::Fleet& fleet) {
  std::vector<GpuRef> out;
  const fleet::Node& node = fleet.node(a.node);
  const std::string model = node.model.valid() ? fleet.catalog().gpu(node.model).id : "";
  for (int i = 0; i < a.gpu_count; ++i) {
    const fleet::GpuGrant& g = a.gpus[static_cast<size_t>(i)];
    GpuRef ref;
    ref.model = model;
    ref.index = g.gpu;
    if (g.mig_profile) {
      ref.uuid = MigUuid(node.name, g.gpu, g.mig_start);
      ref.mig_profile = g.mig_profile->name;
      ref.mig_start = g.mig_start;
    } else {
      const std::string& reported = node.gpus[static_cast<size_t>(g.gpu)].uuid;
      ref.uuid = reported.empty() ? GpuUuid(node.name, g.gpu) : reported;
      if (g.milli < fleet::kMilliPerGpu) ref.milli_gpu = g.milli;
    }
    out.push_back(std::move(ref));
  }
  return out;
}

namespace {

// The `gpus` of a stored instance, as far as they read (a display, not a booking).
std::vector<GpuRef> GpuRefsFromJson(const nlohmann::json& list) {
  std::vector<GpuRef> out;
  if (!list.is_array()) return out;
  for (const nlohmann::json& g : list) {
    if (!g.is_object()) continue;
    auto text = [&g](const char* key) {
      return g.contains(key) && g[key].is_string() ? g[key].get<std::string>() : std::string();
    };
    auto number = [&g](const char* key) {
      return g.contains(key) && g[key].is_number_integer() ? g[key].get<int>() : 0;
    };
    GpuRef r;
    r.uuid = text("uuid");
    r.model = text("model");
    r.index = number("index");
    r.mig_profile = text("mig_profile");
    r.mig_start = number("mig_start");
    r.milli_gpu = number("milli_gpu");
    out.push_back(std::move(r));
  }
  return out;
}

// What the API and the store share of an instance: everything but the pull in progress, with
// the registry password as `secrets` says.
nlohmann::json BaseJson(const Instance& inst, Secrets secrets) {
  nlohmann::json shape = {{"gpu_model", inst.shape.gpu_model},
                          {"sharing", catalog::SharingModeName(inst.shape.mode)},
                          {"vcpus", inst.shape.vcpus},
                          {"memory_mib", inst.shape.memory_mib}};
  if (!inst.shape.instance_type.empty()) shape["instance_type"] = inst.shape.instance_type;
  switch (inst.shape.mode) {
    case catalog::SharingMode::kExclusive:
      shape["gpus"] = inst.shape.gpus;
      break;
    case catalog::SharingMode::kMig:
      shape["mig_profile"] = inst.shape.mig_profile;
      break;
    case catalog::SharingMode::kShared:
      shape["milli_gpu"] = inst.shape.milli_gpu;
      shape["gpu_memory_mib"] = inst.shape.gpu_memory_mib;
      break;
  }
  if (inst.shape.nvlink) shape["nvlink"] = true;
  // An ended instance shows where it ran.
  const bool ended = !IsActive(inst.state);
  const std::string& node = ended && inst.node.empty() ? inst.ran_on : inst.node;
  const std::vector<GpuRef>& refs = ended && inst.gpus.empty() ? inst.ran_gpus : inst.gpus;
  nlohmann::json gpus = nlohmann::json::array();
  for (const GpuRef& g : refs) {
    nlohmann::json gj = {{"uuid", g.uuid}, {"model", g.model}, {"index", g.index}};
    if (!g.mig_profile.empty()) {
      gj["mig_profile"] = g.mig_profile;
      gj["mig_start"] = g.mig_start;  // The memory slice its device starts at.
    }
    if (g.milli_gpu > 0) gj["milli_gpu"] = g.milli_gpu;
    gpus.push_back(std::move(gj));
  }
  nlohmann::json j = {{"id", inst.id.str()},
                      {"tenant", inst.tenant.str()},
                      {"name", inst.name},
                      {"state", StateName(inst.state)},
                      {"billing", BillingName(inst.billing)},
                      {"shape", std::move(shape)},
                      {"command", inst.command},
                      {"restart", inst.restart},
                      {"migratable", inst.migratable},
                      {"stop_grace_seconds", inst.stop_grace_seconds},
                      {"price_per_hour_usd", inst.price_per_hour.ToString()},
                      {"created_at", FormatRfc3339(inst.created_at)},
                      {"updated_at", FormatRfc3339(inst.updated_at)},
                      {"restarts", inst.restarts},
                      {"node", node.empty() ? nlohmann::json() : nlohmann::json(node)},
                      {"gpus", std::move(gpus)}};
  AddImageJson(inst.image, secrets, j);
  if (!inst.env.empty()) {
    j["env"] = secrets == Secrets::kStored ? StoredEnvJson(inst.env) : EnvJson(inst.env);
  }
  if (!inst.volumes.empty()) j["volumes"] = VolumeMountsJson(inst.volumes);
  if (!inst.ports.empty()) j["ports"] = inst.ports;
  if (!inst.endpoints.empty()) {
    nlohmann::json eps = nlohmann::json::array();
    for (const Endpoint& e : inst.endpoints) {
      eps.push_back(
          {{"port", e.port}, {"node_address", e.node_address}, {"host_port", e.host_port}});
    }
    j["endpoints"] = std::move(eps);
  }
  if (!inst.created_by.empty()) j["created_by"] = inst.created_by;
  j["labels"] = inst.labels;
  j["annotations"] = inst.annotations;
  if (!inst.reason.empty()) j["reason"] = inst.reason;
  if (inst.preempted_at) j["preempted_at"] = FormatRfc3339(*inst.preempted_at);
  if (inst.preempt_at) j["preempt_at"] = FormatRfc3339(*inst.preempt_at);
  if (inst.moved_at) j["moved_at"] = FormatRfc3339(*inst.moved_at);
  if (inst.started_at) {
    j["started_at"] = FormatRfc3339(*inst.started_at);
    j["start_latency_seconds"] =
        std::chrono::duration<double>(*inst.started_at - inst.enqueued_at).count();
  }
  if (ended) {
    // Its last transition ended it; its run time is its last attempt's, start to end.
    const Time end = !inst.history.empty() && inst.history.back().state == inst.state
                         ? inst.history.back().at
                         : inst.updated_at;
    j["ended_at"] = FormatRfc3339(end);
    if (inst.started_at) {
      j["run_seconds"] = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::seconds>(end - *inst.started_at).count());
    }
  }
  if (inst.exit_code) j["exit_code"] = *inst.exit_code;
  if (!inst.reservation.empty()) j["reservation"] = inst.reservation;
  if (!inst.group.empty()) {
    j["group"] = inst.group;
    j["rank"] = inst.rank;
    if (!inst.group_env.empty()) j["group_env"] = inst.group_env;
  }
  nlohmann::json history = nlohmann::json::array();
  for (const StateChange& c : inst.history) {
    nlohmann::json e = {{"at", FormatRfc3339(c.at)}, {"state", StateName(c.state)}};
    if (!c.reason.empty()) e["reason"] = c.reason;
    history.push_back(std::move(e));
  }
  j["history"] = std::move(history);
  return j;
}

}  // namespace

void ReadPorts(JsonFields& f, std::vector<int>& out) {
  const nlohmann::json* list = f.Get("ports", false);
  if (!list) return;
  if (!list->is_array() || list->size() > kMaxPorts) {
    f.Fail("ports", fmt::format("expected a list of at most {} port numbers", kMaxPorts));
    return;
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& p = (*list)[i];
    const std::string at = fmt::format("ports[{}]", i);
    if (!p.is_number_integer() || p.get<int64_t>() < 1 || p.get<int64_t>() > 65535) {
      f.Fail(at, fmt::format("{} is not a port number 1..65535", p.dump()));
    } else if (std::find(out.begin(), out.end(), p.get<int>()) != out.end()) {
      f.Fail(at, fmt::format("{} is given twice", p.get<int>()));
    } else {
      out.push_back(p.get<int>());
    }
  }
}

nlohmann::json ToJson(const Instance& inst) {
  nlohmann::json j = BaseJson(inst, Secrets::kHidden);
  if (inst.pull && inst.state == InstanceState::kScheduled) {
    // A presentation, not a state of its own: the state machine, billing and the store know a
    // scheduled instance whose agent has not started it yet.
    j["state"] = "pulling";
    j["pull"] = PullJson(*inst.pull, inst.image.ref);
  }
  return j;
}

store::InstanceRecord StoredRecord(const Instance& inst, const fleet::Fleet& fleet, bool document) {
  return {inst.id.str(), inst.tenant.str(), std::string(StateName(inst.state)),
          document ? DumpJson(ToStoredJson(inst, fleet)) : std::string(),
          IsActive(inst.state) ? "" : FormatRfc3339(inst.updated_at)};
}

nlohmann::json ToStoredJson(const Instance& inst, const fleet::Fleet& fleet) {
  nlohmann::json j = BaseJson(inst, Secrets::kStored);
  j["seq"] = inst.seq;
  j["enqueued_at"] = FormatRfc3339(inst.enqueued_at);
  if (inst.assignment) j["assignment"] = AssignmentJson(*inst.assignment, fleet);
  if (inst.moving) j["moving"] = true;
  if (inst.move_to) j["move_to"] = AssignmentJson(*inst.move_to, fleet);
  if (inst.meter) {
    j["meter"] = {{"since", inst.meter->since},
                  {"billed", inst.meter->billed},
                  {"rate_usd_per_hour", inst.meter->rate.ToString(6)},
                  {"util_pct_seconds", inst.meter->util_pct_seconds},
                  {"util_observed", inst.meter->util_observed},
                  {"util_at", inst.meter->util_at}};
  }
  return j;
}

namespace {

Status ParseShape(const nlohmann::json& j, const std::string& where, Shape& shape) {
  JsonFields f(j, where + ": shape");
  shape.instance_type = f.String("instance_type", false);
  shape.gpu_model = f.String("gpu_model");
  const auto mode = catalog::ParseSharingMode(f.String("sharing"));
  shape.vcpus = f.Int("vcpus", 0, INT64_MAX);
  shape.memory_mib = f.Int("memory_mib", 0, INT64_MAX);
  shape.gpus = static_cast<int>(f.Int("gpus", 0, fleet::kMaxGpusPerNode, false));
  shape.mig_profile = f.String("mig_profile", false);
  shape.milli_gpu = static_cast<int>(f.Int("milli_gpu", 0, fleet::kMilliPerGpu, false));
  shape.gpu_memory_mib = f.Int("gpu_memory_mib", 0, INT64_MAX, false);
  shape.nvlink = f.Bool("nvlink", false);
  if (!mode) f.Fail("sharing", "is not exclusive, mig or shared");
  TESSERA_RETURN_IF_ERROR(f.status());
  shape.mode = *mode;
  return Status::Ok();
}

Result<Time> TimeField(JsonFields& f, std::string_view key) {
  const std::string text = f.String(key);
  if (!f.ok()) return f.status();
  auto t = ParseRfc3339(text);
  if (!t.ok()) return t.status().WithPrefix(fmt::format("{}: field '{}'", f.where(), key));
  return t;
}

}  // namespace

Result<StoredInstance> FromStoredJson(const nlohmann::json& j, const fleet::Fleet& fleet) {
  const std::string where =
      fmt::format("stored instance '{}'", j.is_object() ? j.value("id", "?") : "?");
  JsonFields f(j, where);
  StoredInstance out;
  Instance& inst = out.instance;
  auto id = InstanceId::Parse(f.String("id"));
  auto tenant = TenantId::Parse(f.String("tenant"));
  inst.name = f.String("name");
  const auto state = ParseState(f.String("state"));
  const auto billing = ParseBilling(f.String("billing"));
  inst.command = f.String("command");
  ReadImageSpec(f, j, inst.image, Secrets::kStored);
  inst.created_by = f.String("created_by", false);
  ReadVolumeMounts(f, inst.volumes);
  ReadPorts(f, inst.ports);
  if (const nlohmann::json* eps = f.Get("endpoints", false); eps && eps->is_array()) {
    for (const nlohmann::json& e : *eps) {
      if (!e.is_object()) continue;
      inst.endpoints.push_back(
          {e.value("port", 0), e.value("node_address", ""), e.value("host_port", 0)});
    }
  }
  if (j.is_object() && j.contains("env")) {
    auto env = EnvFromStoredJson(j["env"], where);
    if (!env.ok()) return env.status();
    inst.env = std::move(*env);
  }
  inst.restart = f.Bool("restart");
  inst.migratable = f.Bool("migratable", false, false);
  inst.moving = f.Bool("moving", false, false);
  inst.stop_grace_seconds = static_cast<int>(f.Int("stop_grace_seconds", 0, 3600, false, 10));
  auto price = Money::Parse(f.String("price_per_hour_usd"));
  inst.restarts = static_cast<int>(f.Int("restarts", 0, INT32_MAX));
  inst.seq = f.Int("seq", 0, INT64_MAX);
  inst.reason = f.String("reason", false);
  inst.labels = f.StringMap("labels", false);
  inst.annotations = f.StringMap("annotations", false);
  const nlohmann::json* shape = f.Get("shape");
  if (!state) f.Fail("state", "is not a known state");
  if (!billing) f.Fail("billing", "is not a known billing mode");
  if (!f.ok()) return Status::DataLoss(f.status().message());
  for (const Status& s : {id.status(), tenant.status(), price.status()}) {
    if (!s.ok()) return Status::DataLoss(s.WithPrefix(where).message());
  }
  inst.id = *id;
  inst.tenant = *tenant;
  inst.state = *state;
  inst.billing = *billing;
  inst.price_per_hour = *price;
  if (Status s = ParseShape(*shape, where, inst.shape); !s.ok()) {
    return Status::DataLoss(s.message());
  }
  for (auto [key, field] :
       {std::pair{"created_at", &inst.created_at}, {"updated_at", &inst.updated_at}}) {
    auto t = TimeField(f, key);
    if (!t.ok()) return Status::DataLoss(t.status().message());
    *field = *t;
  }
  for (auto [key, field] : {std::pair{"preempted_at", &inst.preempted_at},
                            {"preempt_at", &inst.preempt_at},
                            {"moved_at", &inst.moved_at},
                            {"started_at", &inst.started_at}}) {
    if (!j.contains(key)) continue;
    auto t = TimeField(f, key);
    if (!t.ok()) return Status::DataLoss(t.status().message());
    *field = *t;
  }
  inst.reservation = f.String("reservation", false);
  inst.group = f.String("group", false);
  inst.rank = static_cast<int>(f.Int("rank", 0, INT32_MAX, false));
  inst.group_env = f.StringMap("group_env", false);
  if (j.contains("history")) {
    // Records written before it was kept have none.
    const nlohmann::json& list = j["history"];
    if (!list.is_array() || list.size() > kHistoryKept) {
      return Status::DataLoss(where + ": field 'history': expected at most " +
                              std::to_string(kHistoryKept) + " transitions");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      JsonFields e(list[i], where + ": history[" + std::to_string(i) + "]");
      StateChange c;
      auto at = ParseRfc3339(e.String("at"));
      auto to = ParseState(e.String("state"));
      c.reason = e.String("reason", false);
      if (!e.ok()) return Status::DataLoss(e.status().message());
      if (!at.ok() || !to) {
        return Status::DataLoss(where + ": history[" + std::to_string(i) +
                                "]: not an RFC 3339 time and a state");
      }
      c.at = *at;
      c.state = *to;
      inst.history.push_back(std::move(c));
    }
  }
  if (j.contains("meter")) {
    JsonFields m = f.Object("meter");
    billing::Meter meter;
    meter.since = m.Int("since", 0, INT64_MAX);
    meter.billed = m.Int("billed", 0, INT64_MAX);
    meter.util_pct_seconds = m.Int("util_pct_seconds", 0, INT64_MAX, false);
    meter.util_observed = m.Int("util_observed", 0, INT64_MAX, false);
    meter.util_at = m.Int("util_at", 0, INT64_MAX, false);
    auto rate = Money::Parse(m.String("rate_usd_per_hour"));
    if (!f.ok()) return Status::DataLoss(f.status().message());
    if (!rate.ok()) return Status::DataLoss(rate.status().WithPrefix(where + ": meter").message());
    meter.rate = *rate;
    inst.meter = meter;
  }
  inst.enqueued_at = inst.created_at;  // Records written before the field held no other.
  if (j.contains("enqueued_at")) {
    auto t = TimeField(f, "enqueued_at");
    if (!t.ok()) return Status::DataLoss(t.status().message());
    inst.enqueued_at = *t;
  }
  if (j.contains("exit_code")) {
    inst.exit_code = static_cast<int>(f.Int("exit_code", -1, 1024));
    if (!f.ok()) return Status::DataLoss(f.status().message());
  }
  if (!IsActive(inst.state) && j.contains("node") && j["node"].is_string()) {
    // Where an ended instance ran: shown, never booked.
    inst.ran_on = j["node"].get<std::string>();
    inst.ran_gpus = GpuRefsFromJson(j.value("gpus", nlohmann::json::array()));
  }
  if (j.contains("assignment")) {
    TESSERA_ASSIGN_OR_RETURN(inst.assignment,
                             AssignmentFromJson(j["assignment"], fleet, where, out.binding));
    if (inst.assignment) {
      inst.node = fleet.node(inst.assignment->node).name;
      inst.gpus = DescribeGpus(*inst.assignment, fleet);
    }
  }
  if (j.contains("move_to")) {
    // A destination the fleet no longer has: it restarts wherever the queue places it.
    Status gone;
    TESSERA_ASSIGN_OR_RETURN(inst.move_to,
                             AssignmentFromJson(j["move_to"], fleet, where + ": move_to", gone));
  }
  return out;
}

}  // namespace tessera::core
