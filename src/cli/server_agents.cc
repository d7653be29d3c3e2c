// The server's own agents and the demo's load (server_agents.h).
#include "cli/server_agents.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "agent/sim_backend.h"
#include "agent/workload_uids.h"
#include "api/api.h"
#include "common/auth.h"
#include "common/files.h"

namespace tessera::cli {

namespace {

// A GPU backend for a CPU-only node: no GPUs, the host's size as the fleet file gives it.
class NoGpus final : public agent::GpuBackend {
 public:
  NoGpus(int64_t cpu_milli, int64_t memory_mib) : cpu_milli_(cpu_milli), memory_mib_(memory_mib) {}
  Result<agent::Inventory> ReadInventory() override {
    agent::Inventory inv;
    inv.backend = "sim";
    inv.cpu_milli = cpu_milli_;
    inv.memory_mib = memory_mib_;
    return inv;
  }
  Result<agent::Telemetry> Sample() override { return agent::Telemetry{}; }

 private:
  int64_t cpu_milli_, memory_mib_;
};

// A transport into this process's own API: ApiServer::Dispatch runs the same routes, token
// checks and codecs as a request from the network, without a socket.
agent::Transport InProcessTransport(api::ApiServer& server, std::string token) {
  return [&server, token = std::move(token)](
             const std::string& path, const std::string& body,
             std::chrono::milliseconds timeout) -> Result<agent::HttpAnswer> {
    auto promise = std::make_shared<std::promise<agent::HttpAnswer>>();
    auto answer = promise->get_future();
    server.Dispatch("POST", path, token, body, [promise](api::HttpResponse r) {
      promise->set_value({r.status, std::move(r.body)});
    });
    if (answer.wait_for(timeout) != std::future_status::ready) {
      return Status::Unavailable("no answer in time");
    }
    return answer.get();
  };
}

// The workload supervisor of an agent inside the server's process, working in DATA/<sub>. The
// tenants' commands it runs must not reach the server's files (DATA/tessera.db is every tenant's
// data, and the server's memory holds the admin token): they run as workload uids of their own,
// which needs root, or not at all (Start refuses them, and the instance fails saying why). When
// DATA lies below a directory other users may not traverse (/root, say), workload uids could not
// reach DATA/<sub>/<id>: their directories are made in /var/lib/tessera/workspaces/ instead,
// under a name fixed by DATA's path so a restarted server adopts them.
Result<agent::WorkloadSupervisor::Options> InProcessWorkloads(const std::string& data_dir,
                                                              const std::string& sub) {
  namespace fs = std::filesystem;
  agent::WorkloadSupervisor::Options w;
  w.work_dir = data_dir + "/" + sub;
  w.refuse_unisolated = true;
  if (geteuid() != 0) return w;
  TESSERA_ASSIGN_OR_RETURN(agent::UidRange uids, agent::ParseUidRange(agent::kDefaultWorkloadUids));
  w.first_uid = uids.first;
  w.last_uid = uids.last;
  std::error_code ec;
  const std::string parent = fs::path(w.work_dir).parent_path().string();
  fs::create_directories(parent, ec);
  if (parent != data_dir) chmod(parent.c_str(), 0711);
  if (!agent::FirstUntraversable(parent).empty()) {
    const std::string abs = fs::absolute(data_dir, ec).lexically_normal().string();
    w.workspace_dir =
        fmt::format("/var/lib/tessera/workspaces/{}/{}", HashToken(abs).substr(0, 16), sub);
    // Each level traversable, none listable: /var/lib/tessera down to the node's own.
    std::string dir;
    for (const auto& part : fs::path(w.workspace_dir).parent_path().relative_path()) {
      dir += "/" + part.string();
      if (dir.size() <= std::string("/var/lib").size()) continue;
      mkdir(dir.c_str(), 0711);
      chmod(dir.c_str(), 0711);
    }
  }
  return w;
}

}  // namespace

InProcessAgents::~InProcessAgents() { StopAll(); }

void InProcessAgents::StopAll() {
  for (auto& a : agents_) a->Stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  agents_.clear();
}

void InProcessAgents::Run(std::unique_ptr<agent::Agent> a, std::string what) {
  agent::Agent* p = a.get();
  agents_.push_back(std::move(a));
  threads_.emplace_back([p, what = std::move(what)] {
    if (Status s = p->Run(); !s.ok()) spdlog::error("{} stopped: {}", what, s.message());
  });
}

void InProcessAgents::AwaitRegistered(std::chrono::seconds limit) const {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (const auto& a : agents_) {
    while (!a->registered() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (!a->registered()) spdlog::warn("an in-process agent has not registered in time");
  }
}

// --sim-agents: every node of the fleet file is served by an agent in this process, the same
// agent code as `tessera agent --backend sim`, through InProcessTransport. Instances with a
// command run as real processes under DATA/sim-agents/NODE. Returns once every agent has
// registered: a node without one ends deleted work at once, which a simulated agent's does not.
Status StartSimAgents(InProcessAgents& agents, core::Core& core, api::ApiServer& server,
                      const catalog::Catalog& catalog, const std::string& data_dir) {
  auto nodes = core.Run<std::vector<fleet::NodeSpec>>(
      [](core::State& s, store::Batch&) -> Result<std::vector<fleet::NodeSpec>> {
        std::vector<fleet::NodeSpec> out;
        for (const fleet::Node& n : s.fleet().nodes()) {
          if (s.agents().Find(n.name)) continue;  // Joined: its own agent serves it.
          std::vector<catalog::SharingMode> modes;
          for (const fleet::Gpu& g : n.gpus) modes.push_back(g.mode);
          out.push_back({.name = n.name,
                         .gpu_model = n.model.valid() ? s.catalog().gpu(n.model).id : "",
                         .gpus = static_cast<int>(n.gpus.size()),
                         .cpu_milli = n.cpu_milli,
                         .memory_mib = n.memory_mib,
                         .gpu_modes = std::move(modes)});
        }
        return out;
      });
  if (!nodes.ok()) return nodes.status();
  for (const fleet::NodeSpec& n : *nodes) {
    TESSERA_ASSIGN_OR_RETURN(auto token, api::NewToken());
    auto attached = core.Run<bool>(
        [name = n.name, hash = token.second](core::State& s, store::Batch&) -> Result<bool> {
          Status st = s.agent_hub().AttachSimulated(name, hash);
          if (!st.ok()) return st;
          return true;
        });
    if (!attached.ok()) return attached.status();
    std::unique_ptr<agent::GpuBackend> gpus;
    if (n.gpus > 0) {
      // The simulator puts its first GPUs in MIG mode: those the fleet file has in MIG mode
      // (a fleet file gives one mode a shape).
      int mig = 0;
      while (mig < n.gpus && n.gpu_modes[static_cast<size_t>(mig)] == catalog::SharingMode::kMig) {
        ++mig;
      }
      // The UUIDs the server gives a fleet file's GPUs: what its workloads are told they hold.
      std::vector<std::string> uuids;
      for (int g = 0; g < n.gpus; ++g) uuids.push_back(core::GpuUuid(n.name, g));
      TESSERA_ASSIGN_OR_RETURN(
          gpus, agent::SimBackend::Create(catalog, fmt::format("{}:{}", n.gpu_model, n.gpus),
                                          n.name, 42, {n.cpu_milli, n.memory_mib, mig, uuids}));
    } else {
      gpus = std::make_unique<NoGpus>(n.cpu_milli, n.memory_mib);
    }
    TESSERA_ASSIGN_OR_RETURN(agent::WorkloadSupervisor::Options w,
                             InProcessWorkloads(data_dir, "sim-agents/" + n.name));
    w.cgroup_root = "none";  // One process: limits are a real agent's business.
    TESSERA_ASSIGN_OR_RETURN(auto workloads, agent::WorkloadSupervisor::Open(w));
    agents.Run(std::make_unique<agent::Agent>(agent::AgentOptions{},
                                              InProcessTransport(server, token.first),
                                              std::move(gpus), std::move(workloads)),
               "the simulated agent of " + n.name);
  }
  agents.AwaitRegistered(std::chrono::seconds(30));
  spdlog::info("{} simulated agents serve the fleet file's nodes", nodes->size());
  return Status::Ok();
}

// The demo's own node: a `tessera agent` in process (the sim backend, 8 H100s) whose instances
// run as real processes under DATA/agent-demo-local, joined over HTTP like any other node.
Status StartDemoAgent(InProcessAgents& agents, core::Core& core, const catalog::Catalog& catalog,
                      const std::string& url, const std::string& data_dir) {
  static constexpr const char* kNode = "demo-local";
  // A fresh token each start: only its hash is stored, so the last one cannot be read back.
  TESSERA_ASSIGN_OR_RETURN(auto token, api::NewToken());
  auto joined =
      core.Run<bool>([hash = token.second](core::State& s, store::Batch& b) -> Result<bool> {
        if (s.agents().Find(kNode)) {
          TESSERA_RETURN_IF_ERROR(s.agent_hub().RotateToken(kNode, hash, b));
          return true;
        }
        auto created = s.agent_hub().CreateNode(kNode, {{"demo", "true"}},
                                                catalog::SharingMode::kExclusive, hash, b);
        if (!created.ok()) return created.status();
        return true;
      });
  if (!joined.ok()) return joined.status();
  TESSERA_ASSIGN_OR_RETURN(auto gpus, agent::SimBackend::Create(catalog, "H100-80GB:8", kNode, 42));
  TESSERA_ASSIGN_OR_RETURN(agent::WorkloadSupervisor::Options wopts,
                           InProcessWorkloads(data_dir, std::string("agent-") + kNode));
  TESSERA_ASSIGN_OR_RETURN(auto workloads, agent::WorkloadSupervisor::Open(wopts));
  TESSERA_ASSIGN_OR_RETURN(agent::Transport transport, agent::HttpTransport(url, token.first));
  agents.Run(std::make_unique<agent::Agent>(agent::AgentOptions{}, std::move(transport),
                                            std::move(gpus), std::move(workloads)),
             "the demo's agent");
  return Status::Ok();
}

Result<std::string> DemoLoad::SetUp(core::Core& core) {
  return core.Run<std::string>([](core::State& s, store::Batch& b) -> Result<std::string> {
    for (const auto& [id, g] : s.groups().all()) {
      if (g.spec.name == "demo-inference" && g.state != core::GroupState::kDeleted) return id;
    }
    const core::Tenant* demo = nullptr;
    for (const core::Tenant* t : s.tenants().List()) {
      if (t->name == "demo") demo = t;
    }
    if (!demo) {
      TESSERA_ASSIGN_OR_RETURN(auto token, api::NewToken());
      TESSERA_RETURN_IF_ERROR(s.tenants().Create("demo", 16'000, token.second, b).status());
      for (const core::Tenant* t : s.tenants().List()) {
        if (t->name == "demo") demo = t;
      }
    }
    core::GroupRequest g;
    g.name = "demo-inference";
    g.member.billing = core::Billing::kOnDemand;
    g.member.instance_type = "gpu.1xh100";
    g.member.command = "sleep 86400";
    // A sleep leaves a simulated GPU idle; a replica serving the day's load keeps it busy.
    g.member.env["TESSERA_SIM_LOAD"].value = "65";
    g.size = 1;
    g.min_available = 1;
    g.placement = core::Placement::kSpread;
    core::Autoscale a;
    a.min = 1;
    a.max = 6;
    a.metric = core::AutoscaleMetric::kPending;
    a.target = 10;
    a.scale_down_stabilization_seconds = 60;
    g.autoscale = a;
    g.elastic = core::Elastic{a.min, a.max};  // Replicas: a resize restarts none.
    TESSERA_ASSIGN_OR_RETURN(core::GroupStatus made, s.groups().Create(*demo, g, b));
    return made.group.id;
  });
}

int64_t DemoLoad::Backlog(double hour) {
  const double peak = std::exp(-std::pow((hour - 14) / 3.0, 2));
  return std::llround(5 + 50 * peak);
}

DemoLoad::DemoLoad(core::Core* core, std::string group) : core_(core), group_(std::move(group)) {
  thread_ = std::thread([this] { Loop(); });
}

DemoLoad::~DemoLoad() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DemoLoad::Loop() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::seconds(5), [this] { return stop_; })) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The day starts at 08:00, so the peak comes three minutes after the start.
    const double hour =
        std::fmod(seconds + kSecondsPerDay / 3.0, kSecondsPerDay) * 24 / kSecondsPerDay;
    const int64_t backlog = Backlog(hour);
    core::Tenant admin;
    admin.admin = true;
    auto set = core_->Run<core::GroupStatus>([&](core::State& s, store::Batch&) {
      return s.groups().SetBacklog(admin, group_, backlog);
    });
    if (!set.ok()) spdlog::warn("demo load: {}", set.status().message());
  }
}

}  // namespace tessera::cli
