#include "core/admission.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/ids.h"
#include "common/text.h"
#include "core/labels.h"
#include "mig/mig.h"

namespace tessera::core {

namespace {

using catalog::SharingMode;

std::string Mode(SharingMode m) { return std::string(catalog::SharingModeName(m)); }

// The most GPUs on one NVLink island of `n` that may be whole GPUs of a shape (sched::WholeGpuMode;
// any GPU when `any`).
int LargestIsland(const fleet::Node& n, bool exclusive_mode, bool any) {
  std::map<int, int> islands;
  for (const fleet::Gpu& g : n.gpus) {
    if (g.island >= 0 && (any || sched::WholeGpuMode(g.mode, exclusive_mode))) ++islands[g.island];
  }
  int best = 0;
  for (const auto& [island, count] : islands) best = std::max(best, count);
  return best;
}

int GpusInMode(const fleet::Node& n, SharingMode mode) {
  return static_cast<int>(std::count_if(n.gpus.begin(), n.gpus.end(),
                                        [&](const fleet::Gpu& g) { return g.mode == mode; }));
}

// Whether `n` could host `s` by its GPUs alone: with its GPUs in their modes now (`now`), or in
// any mode an operator could set. `exclusive_mode` as sched::Request's.
bool GpusCouldHost(const fleet::Node& n, const Shape& s, bool now, bool exclusive_mode) {
  switch (s.mode) {
    case SharingMode::kExclusive: {
      if (s.nvlink && s.gpus > 1) return LargestIsland(n, exclusive_mode, !now) >= s.gpus;
      const auto whole = std::count_if(n.gpus.begin(), n.gpus.end(), [&](const fleet::Gpu& g) {
        return !now || sched::WholeGpuMode(g.mode, exclusive_mode);
      });
      return whole >= s.gpus;
    }
    case SharingMode::kShared:
      return now ? GpusInMode(n, SharingMode::kShared) > 0 : !n.gpus.empty();
    case SharingMode::kMig:
      return now ? GpusInMode(n, SharingMode::kMig) > 0 : !n.gpus.empty();
  }
  return false;
}

}  // namespace

bool UnitCovers(const catalog::InstanceType& t, const Shape& shape) {
  if (!shape.instance_type.empty()) return shape.instance_type == t.id;
  if (shape.gpu_model != t.gpu_model || shape.mode != t.sharing || shape.vcpus > t.vcpus ||
      shape.memory_mib > t.memory_mib) {
    return false;
  }
  switch (t.sharing) {
    case SharingMode::kExclusive:
      return shape.gpus >= 1 && shape.gpus <= t.gpus && (!shape.nvlink || t.nvlink);
    case SharingMode::kMig:
      return shape.mig_profile == t.mig_profile;
    case SharingMode::kShared:
      return shape.milli_gpu <= t.milli_gpu;
  }
  return false;
}

sched::Request Admission::RequestFor(const Shape& s, Billing billing) const {
  sched::Request r;
  r.cpu_milli = s.vcpus * 1000;
  r.memory_mib = s.memory_mib;
  if (auto idx = catalog_->FindGpuIndex(s.gpu_model)) r.allowed_models = uint64_t{1} << idx->value;
  switch (s.mode) {
    case SharingMode::kExclusive:
      r.gpu_count = s.gpus;
      r.gpu_milli = s.gpus > 0 ? fleet::kMilliPerGpu : 0;
      r.nvlink = s.nvlink;
      r.exclusive_mode = !whole_on_shared_;  // As CheckShape counts them.
      break;
    case SharingMode::kShared:
      r.gpu_count = 1;
      r.gpu_milli = s.milli_gpu;
      r.gpu_memory_mib = s.gpu_memory_mib;
      break;
    case SharingMode::kMig:
      r.gpu_count = 1;
      r.gpu_milli = fleet::kMilliPerGpu;
      r.mig_profile = s.mig_profile;
      break;
  }
  r.priority = Priority(billing);
  return r;
}

Result<Shape> Admission::Resolve(const CreateInstanceRequest& req) const {
  Shape shape = req.shape;
  if (!req.instance_type.empty()) {
    const catalog::InstanceType* it = catalog_->FindInstanceType(req.instance_type);
    if (!it) {
      return Status::InvalidArgument(fmt::format(
          "field 'instance_type': unknown instance type '{}'", Quote(req.instance_type)));
    }
    return Shape{it->id,        it->gpu_model,      it->sharing, it->gpus,       it->mig_profile,
                 it->milli_gpu, it->gpu_memory_mib, it->vcpus,   it->memory_mib, it->nvlink};
  }
  const catalog::GpuModel* model = catalog_->FindGpu(shape.gpu_model);
  if (!model) {
    return Status::InvalidArgument(
        fmt::format("field 'gpu_model': unknown GPU model '{}'", Quote(shape.gpu_model)));
  }
  shape.gpu_model = model->id;
  if (shape.mode == SharingMode::kMig) {
    if (!model->mig) {
      return Status::InvalidArgument(
          fmt::format("field 'mig_profile': {} does not support MIG", model->id));
    }
    if (!model->mig->Find(shape.mig_profile)) {
      std::vector<std::string> names;
      for (const auto& p : model->mig->profiles) names.push_back(p.name);
      return Status::InvalidArgument(
          fmt::format("field 'mig_profile': '{}' is not a MIG profile of {} (valid: {})",
                      Quote(shape.mig_profile), model->id, fmt::join(names, ", ")));
    }
  }
  if (shape.mode == SharingMode::kShared && shape.gpu_memory_mib > model->memory_mib) {
    return Status::InvalidArgument(
        fmt::format("field 'gpu_memory_mib': {} exceeds the {} MiB of a {}", shape.gpu_memory_mib,
                    model->memory_mib, model->id));
  }
  return shape;
}

Result<Money> Admission::PriceOf(const Shape& shape, Billing billing) const {
  auto pick = [&](const catalog::Price& p) {
    switch (billing) {
      case Billing::kReserved:
        return p.reserved_1y_per_hour;
      case Billing::kOnDemand:
        return p.on_demand_per_hour;
      case Billing::kSpot:
        return p.spot_per_hour;
    }
    return p.on_demand_per_hour;
  };
  if (!shape.instance_type.empty()) {
    const catalog::Price* p = catalog_->FindPrice(shape.instance_type);
    if (!p) return Status::Internal("no price for instance type " + shape.instance_type);
    return pick(*p);
  }
  // A custom shape costs its share of the cheapest whole-GPU price for the model.
  std::optional<Money> per_gpu;
  for (const auto& it : catalog_->instance_types()) {
    if (it.gpu_model != shape.gpu_model || it.sharing != SharingMode::kExclusive || it.gpus < 1) {
      continue;
    }
    const catalog::Price* p = catalog_->FindPrice(it.id);
    if (!p) continue;
    const Money m = pick(*p).MulDiv(1, it.gpus);
    if (!per_gpu || m < *per_gpu) per_gpu = m;
  }
  if (!per_gpu) {
    return Status::InvalidArgument(fmt::format(
        "field 'gpu_model': the price book has no whole-GPU price for {}", shape.gpu_model));
  }
  return per_gpu->MulDiv(shape.GpuMilli(*catalog_), fleet::kMilliPerGpu);
}

Status Admission::Check(const Shape& s) const {
  const int64_t cpu = s.vcpus * 1000;
  const bool gpu = !(s.mode == SharingMode::kExclusive && s.gpus == 0);
  const auto model = gpu ? catalog_->FindGpuIndex(s.gpu_model) : std::nullopt;
  int nodes_with_model = 0, most_gpus = 0, largest_island = 0;
  int64_t most_cpu = 0, most_memory = 0;
  bool fits_any_mode = false;
  for (const fleet::Node& n : fleet_->nodes()) {
    if (n.removed || (gpu && (!model || n.model != *model))) continue;
    ++nodes_with_model;
    most_gpus = std::max(most_gpus, static_cast<int>(n.gpus.size()));
    largest_island = std::max(largest_island, LargestIsland(n, true, /*any=*/true));
    if (gpu && !GpusCouldHost(n, s, /*now=*/false, !whole_on_shared_)) continue;
    most_cpu = std::max(most_cpu, n.cpu_milli);
    most_memory = std::max(most_memory, n.memory_mib);
    if (n.cpu_milli < cpu || n.memory_mib < s.memory_mib) continue;
    if (!gpu || GpusCouldHost(n, s, /*now=*/true, !whole_on_shared_)) return Status::Ok();
    fits_any_mode = true;
  }
  if (fits_any_mode) {
    return Status::FailedPrecondition(fmt::format(
        "no {} GPU is in {} mode now; the fleet's {} nodes could host this shape once an "
        "operator switches idle GPUs to {} mode",
        s.gpu_model, Mode(s.mode), s.gpu_model, Mode(s.mode)));
  }
  const std::string what = gpu ? fmt::format("{} node", s.gpu_model) : std::string("node");
  if (gpu && nodes_with_model == 0) {
    return Status::InvalidArgument(
        fmt::format("field 'gpu_model': the fleet has no {} GPUs", s.gpu_model));
  }
  if (s.mode == SharingMode::kExclusive && gpu && most_gpus < s.gpus) {
    return Status::InvalidArgument(
        fmt::format("field 'gpus': the largest {} has {} GPUs; {} asked", what, most_gpus, s.gpus));
  }
  if (s.mode == SharingMode::kExclusive && gpu && s.nvlink && s.gpus > 1 &&
      largest_island < s.gpus) {
    return Status::InvalidArgument(
        fmt::format("field 'nvlink': no {} has an NVLink island of {} GPUs (the largest has {})",
                    what, s.gpus, largest_island));
  }
  if (most_cpu < cpu) {
    return Status::InvalidArgument(
        fmt::format("field 'vcpus': no {} that could host the GPUs has {} vCPUs (the most is {})",
                    what, s.vcpus, most_cpu / 1000));
  }
  return Status::InvalidArgument(fmt::format(
      "field 'memory_mib': no {} that could host the rest has {} MiB of memory (the most is {})",
      what, s.memory_mib, most_memory));
}

Status Admission::CheckShape(const Shape& shape) {
  const std::string key =
      fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}", shape.gpu_model, Mode(shape.mode), shape.gpus,
                  shape.mig_profile, shape.milli_gpu, shape.gpu_memory_mib, shape.vcpus,
                  shape.memory_mib, shape.nvlink);
  auto it = verdicts_.find(key);
  if (it == verdicts_.end()) it = verdicts_.emplace(key, Check(shape)).first;
  return it->second;
}

Result<Admitted> Admission::Admit(const CreateInstanceRequest& req) {
  TESSERA_ASSIGN_OR_RETURN(Shape shape, Resolve(req));
  TESSERA_ASSIGN_OR_RETURN(Money price, PriceOf(shape, req.billing));
  TESSERA_RETURN_IF_ERROR(CheckShape(shape));
  return Admitted{std::move(shape), price};
}

std::string Admission::PendingReason(const Instance& inst, size_t preemptible) const {
  const Shape& s = inst.shape;
  const int64_t cpu = s.vcpus * 1000;
  const bool gpu = !(s.mode == SharingMode::kExclusive && s.gpus == 0);
  const auto model = gpu ? catalog_->FindGpuIndex(s.gpu_model) : std::nullopt;
  std::string want;
  switch (gpu ? s.mode : SharingMode::kExclusive) {
    case SharingMode::kExclusive:
      want = gpu ? fmt::format("{} x {}{} with ", s.gpus, s.gpu_model, s.nvlink ? " on NVLink" : "")
                 : "";
      break;
    case SharingMode::kShared:
      want = fmt::format("{} milli of a shared {} with ", s.milli_gpu, s.gpu_model);
      break;
    case SharingMode::kMig:
      want = fmt::format("a {} slice of a {} with ", s.mig_profile, s.gpu_model);
      break;
  }
  int best_free = 0, unready = 0;
  bool roomy = false;  // A ready node with the CPU and memory free.
  for (const fleet::Node& n : fleet_->nodes()) {
    if (n.removed || (gpu && (!model || n.model != *model))) continue;
    if (n.state != fleet::NodeState::kReady) {
      ++unready;
      continue;
    }
    if (n.cpu_milli_free < cpu || n.memory_mib_free < s.memory_mib) continue;
    roomy = true;
    int free = 0;
    for (const fleet::Gpu& g : n.gpus) {
      const bool whole = gpu && s.mode == SharingMode::kExclusive;
      if (whole ? !sched::WholeGpuMode(g.mode, !whole_on_shared_)
                : g.mode != (gpu ? s.mode : SharingMode::kExclusive)) {
        continue;
      }
      switch (s.mode) {
        case SharingMode::kExclusive:
          free += g.free_milli == fleet::kMilliPerGpu ? 1 : 0;
          break;
        case SharingMode::kShared:
          free += g.free_milli >= s.milli_gpu && g.free_memory_mib >= s.gpu_memory_mib ? 1 : 0;
          break;
        case SharingMode::kMig: {
          const int total = catalog_->gpu(n.model).mig->compute_slices;
          const mig::Profile* p = catalog_->gpu(n.model).mig->Find(s.mig_profile);
          free += p && total - fleet::UsedComputeSlices(g) >= p->compute_slices ? 1 : 0;
          break;
        }
      }
    }
    best_free = std::max(best_free, free);
  }
  std::string out =
      fmt::format("waiting for {}{} vCPUs and {} MiB on one node; ", want, s.vcpus, s.memory_mib);
  if (!roomy) {
    out += gpu ? fmt::format("no ready {} node has those vCPUs and memory free", s.gpu_model)
               : "no ready node has them free";
  } else if (s.mode == SharingMode::kExclusive && gpu) {
    out += fmt::format("the best node has {} free", best_free);
  } else {
    out += "no GPU has room";
  }
  if (unready > 0) out += fmt::format("; {} such node(s) draining or down", unready);
  if (preemptible > 0 && inst.billing != Billing::kSpot) {
    out += fmt::format("; {} spot instance(s) preemptible", preemptible);
  }
  return out;
}

Result<CreateInstanceRequest> ReadCreateInstance(JsonFields& f, const nlohmann::json& body,
                                                 Secrets form) {
  f.RejectUnknown(
      {"billing",     "name",        "command",        "restart",       "stop_grace_seconds",
       "labels",      "annotations", "instance_type",  "gpu_model",     "gpus",
       "mig_profile", "milli_gpu",   "gpu_memory_mib", "vcpus",         "memory_mib",
       "nvlink",      "image",       "pull_policy",    "registry_auth", "env",
       "volumes",     "ports",       "migratable"});
  CreateInstanceRequest r;
  const std::string billing = f.String("billing");
  if (f.ok()) {
    if (auto b = ParseBilling(billing)) {
      r.billing = *b;
    } else {
      f.Fail("billing", fmt::format("'{}' is not on_demand, reserved or spot", Quote(billing)));
    }
  }
  r.name = f.String("name", false);
  if (!r.name.empty() && !IsValidIdBody(r.name)) f.Fail("name", kNameRule);
  r.command = f.String("command", false);
  if (r.command.size() > kMaxCommandBytes) {
    f.Fail("command", fmt::format("is {} bytes; at most {}", r.command.size(), kMaxCommandBytes));
  }
  ReadImageSpec(f, body, r.image, form);
  if (form == Secrets::kStored) {
    if (const nlohmann::json* env = f.Get("env", false)) {
      auto stored = EnvFromStoredJson(*env, f.where());
      if (!stored.ok()) return stored.status();
      r.env = std::move(*stored);
    }
  } else {
    ReadEnv(f, r.env);
  }
  ReadVolumeMounts(f, r.volumes);
  ReadPorts(f, r.ports);
  r.restart = f.Bool("restart", false, true);
  r.migratable = f.Bool("migratable", false, false);
  r.stop_grace_seconds = static_cast<int>(f.Int("stop_grace_seconds", 0, 3600, false, 10));
  r.labels = f.StringMap("labels", false);
  r.annotations = f.StringMap("annotations", false);
  if (f.ok()) {
    for (const Status& s : {ValidateLabels(r.labels), ValidateAnnotations(r.annotations)}) {
      if (!s.ok()) return s;
    }
  }
  r.instance_type = f.String("instance_type", false);
  const bool custom = body.is_object() && body.contains("gpu_model");
  if (!r.instance_type.empty() && custom) {
    f.Fail("instance_type", "give either instance_type or gpu_model, not both");
  } else if (r.instance_type.empty() && !custom && f.ok()) {
    f.Fail("instance_type", "is required unless the shape is given with gpu_model");
  } else if (custom) {
    Shape& s = r.shape;
    s.gpu_model = f.String("gpu_model");
    s.vcpus = f.Int("vcpus", 1, 4096);
    s.memory_mib = f.Int("memory_mib", 1, int64_t{64} << 20);
    s.nvlink = f.Bool("nvlink", false);
    const int kinds = int(body.contains("gpus")) + int(body.contains("mig_profile")) +
                      int(body.contains("milli_gpu"));
    if (kinds != 1) {
      f.Fail("gpus", "give exactly one of gpus, mig_profile or milli_gpu");
    } else if (body.contains("gpus")) {
      s.mode = catalog::SharingMode::kExclusive;
      s.gpus = static_cast<int>(f.Int("gpus", 1, fleet::kMaxGpusPerNode));
    } else if (body.contains("mig_profile")) {
      s.mode = catalog::SharingMode::kMig;
      s.mig_profile = f.String("mig_profile");
    } else {
      s.mode = catalog::SharingMode::kShared;
      s.milli_gpu = static_cast<int>(f.Int("milli_gpu", 1, 999));
      s.gpu_memory_mib = f.Int("gpu_memory_mib", 0, int64_t{1} << 30, false);
    }
    if (s.mode != catalog::SharingMode::kShared && body.contains("gpu_memory_mib")) {
      f.Fail("gpu_memory_mib", "applies only to milli_gpu shares");
    }
  }
  TESSERA_RETURN_IF_ERROR(f.status());
  return r;
}

nlohmann::json ToJson(const CreateInstanceRequest& r, Secrets secrets) {
  nlohmann::json j = {{"billing", BillingName(r.billing)},
                      {"command", r.command},
                      {"restart", r.restart},
                      {"stop_grace_seconds", r.stop_grace_seconds},
                      {"labels", r.labels},
                      {"annotations", r.annotations}};
  if (!r.name.empty()) j["name"] = r.name;
  AddImageJson(r.image, secrets, j);
  if (!r.env.empty())
    j["env"] = secrets == Secrets::kStored ? StoredEnvJson(r.env) : EnvJson(r.env);
  if (!r.volumes.empty()) j["volumes"] = VolumeMountsJson(r.volumes);
  if (!r.ports.empty()) j["ports"] = r.ports;
  if (r.migratable) j["migratable"] = true;
  if (!r.instance_type.empty()) {
    j["instance_type"] = r.instance_type;
    return j;
  }
  const Shape& s = r.shape;
  j["gpu_model"] = s.gpu_model;
  j["vcpus"] = s.vcpus;
  j["memory_mib"] = s.memory_mib;
  if (s.nvlink) j["nvlink"] = true;
  switch (s.mode) {
    case SharingMode::kExclusive:
      j["gpus"] = s.gpus;
      break;
    case SharingMode::kMig:
      j["mig_profile"] = s.mig_profile;
      break;
    case SharingMode::kShared:
      j["milli_gpu"] = s.milli_gpu;
      if (s.gpu_memory_mib > 0) j["gpu_memory_mib"] = s.gpu_memory_mib;
      break;
  }
  return j;
}

}  // namespace tessera::core
