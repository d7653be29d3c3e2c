// `tessera agent`: the node agent, run on every GPU server (docs/agent.md).
#include <fmt/format.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <charconv>
#include <csignal>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>

#include "agent/agent.h"
#include "agent/container_cdi.h"
#include "agent/container_image.h"
#include "agent/gpu_devices.h"
#include "agent/nvml_backend.h"
#include "agent/sim_backend.h"
#include "agent/workload_uids.h"
#include "catalog/catalog.h"
#include "cli/cli.h"
#include "common/auth.h"
#include "common/exec_frames.h"
#include "common/secret_env.h"
#include "common/text.h"
#include "common/tunnel.h"
#include "telemetry/series.h"

namespace tessera::cli {

namespace {

struct AgentFlags {
  std::string server;
  std::string token_file;
  std::string refused_token;  // --token, only to refuse it (RefuseTokenFlag).
  std::string ca;
  std::string client_cert, client_key;
  std::string backend = "nvml";
  std::string sim_gpus = "H100-80GB:8";
  std::string work_dir = "./tessera-agent";
  std::string catalog_dir;
  int heartbeat_ms = 2000;
  int sim_mig_gpus = 0;
  std::vector<std::string> sim_faults;
  std::string cgroup_root;
  std::string metrics_listen;
  std::string rendezvous_ports = "29500-29999";
  std::string endpoint_ports = "30000-32767";
  std::string workload_uids = std::string(agent::kDefaultWorkloadUids);
  int64_t workload_pids = 4096;
  double image_cache_gib = 100;
  std::vector<std::string> insecure_registries;
  std::string cdi_kind = "nvidia.com/gpu";
  std::string advertise_address;
  bool manage_mig = true;
  bool mig_adopt = false;
  std::string nvidia_smi = "nvidia-smi";
  std::string mps_control = "nvidia-cuda-mps-control";
  std::string volumes_dir;  // "" = WORK_DIR/volumes.
  bool volume_images = true;
};

int Fail(const std::string& message) {
  std::cerr << "tessera agent: " << EscapeForTerminal(message) << "\n";
  return kExitFailure;
}

// --token is refused, not ignored: an agent's argv is in /proc/PID/cmdline, and so in every
// shim forked from it, for every user of the node (tenants' workloads included) to read.
int RefuseTokenFlag() {
  std::cerr << "tessera agent: --token is not accepted: the node token would be visible in "
               "/proc/PID/cmdline (of the agent and of every workload's shim) to every user of "
               "the node. Give it in a file only its owner can read, --token-file PATH, or in "
               "the environment, TESSERA_NODE_TOKEN\n";
  return kExitUsage;
}

// The node token: --token-file, else TESSERA_NODE_TOKEN. The variable is taken either way, so
// its bytes leave this process's environment block before any shim is forked from it.
Result<std::string> NodeToken(const AgentFlags& flags) {
  const std::optional<std::string> env = TakeSecretEnv("TESSERA_NODE_TOKEN");
  if (flags.token_file.empty()) return env.value_or("");
  auto token = ReadSecretFile(flags.token_file);
  if (!token.ok()) return token.status().WithPrefix("--token-file");
  return token;
}

Result<std::map<std::string, std::string>> GpuCdiDevices(const AgentFlags& flags,
                                                         agent::GpuBackend& gpus);

// Workloads with an image: the image store (when podman is here and the agent is root), and
// each GPU's and MIG device's CDI device (the node's own specs, or one the agent writes from its
// inventory). Simulated GPUs have no device nodes: their containers get only what a node's own
// spec names.
Status SetUpContainers(const AgentFlags& flags, agent::GpuBackend& gpus,
                       agent::AgentOptions& options) {
  const char* why = geteuid() != 0                         ? "the agent is not root"
                    : flags.workload_uids == "none"        ? "--workload-uids none"
                    : access("/usr/bin/podman", X_OK) != 0 ? "no /usr/bin/podman"
                                                           : nullptr;
  if (why != nullptr) {
    spdlog::warn("this node runs no containers: {}", why);
    return Status::Ok();
  }
  agent::ImageStore::Options io;
  io.state_dir = flags.work_dir + "/.images";
  io.cache_limit_bytes = static_cast<int64_t>(flags.image_cache_gib * (int64_t{1} << 30));
  io.insecure_registries = flags.insecure_registries;
  auto images = agent::ImageStore::Open(io);
  if (!images.ok()) return images.status();
  options.images = std::shared_ptr<agent::ImageStore>(std::move(*images));
  options.gpu_cdi_required = flags.backend == "nvml";
  auto devices = GpuCdiDevices(flags, gpus);
  if (!devices.ok()) return devices.status();
  options.gpu_cdi_devices = std::move(*devices);
  // MIG devices made later get CDI devices of their own: the spec is written again.
  options.refresh_gpu_cdi = [&flags, &gpus, before = options.gpu_cdi_devices]() mutable {
    auto again = GpuCdiDevices(flags, gpus);
    if (!again.ok()) {
      spdlog::warn("CDI: {}", again.status().message());
      return before;
    }
    before = *again;
    return before;
  };
  return Status::Ok();
}

// Each GPU's and MIG device's CDI device by GpuDeviceKey, from the node's own specs or one the
// agent writes from its inventory.
Result<std::map<std::string, std::string>> GpuCdiDevices(const AgentFlags& flags,
                                                         agent::GpuBackend& gpus) {
  std::map<std::string, std::string> out;
  agent::GpuCdiOptions co;
  co.kind = flags.cdi_kind;
  auto inventory = gpus.ReadInventory();
  if (!inventory.ok()) return inventory.status();
  // Which /dev/nvidia-caps node grants each MIG instance (absent without MIG or the driver).
  std::stringstream mig_minors;
  if (flags.backend == "nvml")
    mig_minors << std::ifstream("/proc/driver/nvidia-caps/mig-minors").rdbuf();
  const agent::GpuDeviceList list =
      agent::ListGpuDevices(*inventory, agent::ParseMigMinors(mig_minors.str()));
  for (const std::string& note : list.notes) spdlog::warn("CDI: {}", note);
  agent::GpuCdiSetup setup;
  if (flags.backend == "nvml") {
    co.driver_files = agent::FindNvidiaDriverFiles();
    auto made = agent::EnsureGpuCdiSpec(list.devices, co);
    if (!made.ok()) return made.status();
    setup = std::move(*made);
  } else {
    // Simulated GPUs have no nodes of their own; a spec of the node's that names them (by uuid or
    // index) gives their containers its devices, else they get none.
    agent::CdiScan scan = agent::ScanCdiSpecs(co.spec_dirs, co.kind, co.write_path);
    setup.notes = std::move(scan.notes);
    for (const auto& f : scan.usable) {
      if (setup.spec_path.empty()) setup.spec_path = f.path;
      setup.device_names.insert(setup.device_names.end(), f.device_names.begin(),
                                f.device_names.end());
    }
  }
  for (const std::string& note : setup.notes) spdlog::warn("CDI: {}", note);
  if (setup.spec_path.empty()) {
    spdlog::info("containers: no CDI spec of kind {}: containers get no GPU devices", co.kind);
    return out;
  }
  for (size_t i = 0; i < list.devices.size(); ++i) {
    auto name = agent::CdiDeviceFor(setup, co.kind, list.devices[i]);
    if (name.ok()) out[list.keys[i]] = *name;
  }
  spdlog::info("containers: GPUs by CDI from {} ({} of {} GPUs and MIG devices)", setup.spec_path,
               out.size(), list.devices.size());
  return out;
}

int RunAgent(const AgentFlags& flags) {
  // The agent holds the node token, and without workload uids tenants' commands run as its
  // user: not dumpable, no process of that user may ptrace it or read its /proc/PID/environ,
  // mem or fds. Its shims are forks, and inherit this.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // What the agent writes (workload state, logs, the lock) is private unless it says otherwise.
  umask(077);
  auto token_or = NodeToken(flags);
  if (!token_or.ok()) return Fail(token_or.status().message());
  const std::string token = std::move(*token_or);
  const std::string server = flags.server.empty() ? EnvOr("TESSERA_URL", "") : flags.server;
  if (server.empty() || token.empty()) {
    std::cerr << "tessera agent: give --server URL and the node token (POST /v1/nodes or "
                 "`tessera nodes add NAME` printed it) in a file only you can read, "
                 "--token-file PATH, or in TESSERA_NODE_TOKEN\n";
    return kExitUsage;
  }
  auto catalog = flags.catalog_dir.empty() ? catalog::Catalog::LoadEmbedded()
                                           : catalog::Catalog::LoadDir(flags.catalog_dir);
  if (!catalog.ok()) return Fail(catalog.status().message());
  std::unique_ptr<agent::GpuBackend> gpus;
  if (flags.backend == "nvml") {
    auto b = agent::OpenNvmlBackend(*catalog, "libnvidia-ml.so.1", flags.manage_mig);
    if (!b.ok()) return Fail(b.status().message());
    gpus = std::move(*b);
  } else if (flags.backend == "sim") {
    // Simulated GPUs are named after the node's token, so they keep their UUIDs across restarts.
    auto b = agent::SimBackend::Create(*catalog, flags.sim_gpus, HashToken(token).substr(0, 12), 42,
                                       agent::SimHost{0, 0, flags.sim_mig_gpus});
    if (!b.ok()) return Fail(b.status().message());
    for (const std::string& fault : flags.sim_faults) {
      if (Status s = agent::InjectFault(**b, fault); !s.ok()) {
        std::cerr << "tessera agent: --sim-fault: " << EscapeForTerminal(s.message()) << "\n";
        return kExitUsage;
      }
    }
    gpus = std::move(*b);
  } else {
    std::cerr << "tessera agent: --backend: '" << EscapeForTerminal(flags.backend)
              << "' is not nvml or sim\n";
    return kExitUsage;
  }
  agent::WorkloadSupervisor::Options wopts;
  wopts.work_dir = flags.work_dir;
  wopts.cgroup_root = flags.cgroup_root;
  wopts.nproc_limit = flags.workload_pids;
  if (flags.workload_uids != "none") {
    auto uids = agent::ParseUidRange(flags.workload_uids);
    if (!uids.ok()) {
      std::cerr << "tessera agent: " << EscapeForTerminal(uids.status().message()) << "\n";
      return kExitUsage;
    }
    wopts.first_uid = uids->first;
    wopts.last_uid = uids->last;
  }
  for (auto [flag, text, first, last] :
       {std::tuple{"--rendezvous-ports", &flags.rendezvous_ports, &wopts.first_port,
                   &wopts.last_port},
        std::tuple{"--endpoint-ports", &flags.endpoint_ports, &wopts.first_endpoint_port,
                   &wopts.last_endpoint_port}}) {
    const std::string& r = *text;
    const size_t dash = r.find('-');
    const char* end = r.data() + r.size();
    const bool ok = dash != std::string::npos &&
                    std::from_chars(r.data(), r.data() + dash, *first).ptr == r.data() + dash &&
                    std::from_chars(r.data() + dash + 1, end, *last).ptr == end && *first >= 1 &&
                    *last <= 65535 && *first <= *last;
    if (!ok) {
      std::cerr << "tessera agent: " << flag << ": '" << EscapeForTerminal(r)
                << "' is not FIRST-LAST within 1-65535\n";
      return kExitUsage;
    }
  }
  auto workloads = agent::WorkloadSupervisor::Open(wopts);
  if (!workloads.ok()) return Fail(workloads.status().message());
  if (!(*workloads)->limits_enforced()) {
    spdlog::warn("CPU and memory limits are not enforced on this node: {}",
                 (*workloads)->limits_note());
  }
  const std::string ca = flags.ca.empty() ? EnvOr("TESSERA_CA", "") : flags.ca;
  auto transport = agent::HttpTransport(server, token, ca, flags.client_cert, flags.client_key);
  if (!transport.ok()) return Fail(transport.status().message());
  agent::AgentOptions options;
  // Exec sessions connect as the agent's calls do: the same servers, token, CA and certificate.
  TunnelRequest dial;
  dial.urls = server;
  dial.token = token;
  dial.protocol = exec::kProtocol;
  dial.ca_file = ca;
  dial.client_cert = flags.client_cert;
  dial.client_key = flags.client_key;
  options.exec_dialer = [dial](const std::string& id) {
    TunnelRequest r = dial;
    r.path = fmt::format("/v1/agent/exec/{}", id);
    return Tunnel::Open(r);
  };
  options.heartbeat = std::chrono::milliseconds(flags.heartbeat_ms);
  options.advertise_address = flags.advertise_address;
  options.mig_record = flags.work_dir + "/mig-devices.json";
  options.mig_adopt = flags.mig_adopt;
  options.catalog = &*catalog;
  options.nvidia_smi = flags.nvidia_smi;
  options.mps_control = flags.mps_control;
  options.mps_root = flags.work_dir + "/mps";
  auto volumes = agent::VolumeHost::Open(
      {flags.volumes_dir.empty() ? flags.work_dir + "/volumes" : flags.volumes_dir,
       flags.volume_images});
  if (!volumes.ok()) return Fail(volumes.status().message());
  if (!(*volumes)->enforced()) spdlog::warn("volumes: {}", (*volumes)->note());
  options.volumes = std::move(*volumes);
  if (Status s = SetUpContainers(flags, *gpus, options); !s.ok()) return Fail(s.message());
  agent::Agent agent(options, std::move(*transport), std::move(gpus), std::move(*workloads));

  // SIGINT and SIGTERM end the agent; its workloads keep running under their shims until the
  // lease lapses or a new agent run adopts them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread waiter([&agent, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != 0) agent.Stop();
  });
  waiter.detach();
  // This node's GPU series for a Prometheus that scrapes nodes, as dcgm-exporter serves them.
  httplib::Server metrics;
  std::thread metrics_thread;
  if (!flags.metrics_listen.empty()) {
    auto addr = ParseListen(flags.metrics_listen, "--metrics-listen");
    if (!addr.ok()) return Fail(addr.status().message());
    metrics.Get("/metrics", [&agent](const httplib::Request&, httplib::Response& res) {
      res.set_content(agent.MetricsText(), std::string(telemetry::kExpositionContentType));
    });
    if (!metrics.bind_to_port(addr->first, addr->second)) {
      return Fail(fmt::format("--metrics-listen: cannot listen on {}", flags.metrics_listen));
    }
    metrics_thread = std::thread([&metrics] { metrics.listen_after_bind(); });
    // A stop() before the accept loop runs would be lost, and the join would wait for ever.
    for (int i = 0; i < 5000 && !metrics.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::cout << "tessera agent: serving " << EscapeForTerminal(server) << " with the "
            << flags.backend << " backend (work in " << flags.work_dir << ")" << std::endl;
  Status s = agent.Run();
  if (metrics_thread.joinable()) {
    metrics.stop();
    metrics_thread.join();
  }
  if (!s.ok()) return Fail(s.message());
  return kExitOk;
}

}  // namespace

void RegisterAgentCommands(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<AgentFlags>();
  CLI::App* cmd = app.add_subcommand(
      "agent", "Run the node agent: join this GPU server to a Tessera server (docs/agent.md)");
  cmd->add_option("--server", flags->server,
                  "The server's URL, or its replicas' separated by commas (or TESSERA_URL)");
  cmd->add_option("--token-file", flags->token_file,
                  "File holding this node's token, from `tessera nodes add`; mode 0600 or "
                  "stricter (or TESSERA_NODE_TOKEN)");
  // Hidden, and refused when given: see RefuseTokenFlag.
  CLI::Option* token_flag = cmd->add_option("--token", flags->refused_token)->group("");
  cmd->add_option("--ca", flags->ca, "CA certificate for an https server (or TESSERA_CA)");
  cmd->add_option("--client-cert", flags->client_cert,
                  "PEM client certificate naming this node (CN or DNS name), for a server with "
                  "--client-ca (mutual TLS)");
  cmd->add_option("--client-key", flags->client_key, "PEM private key of --client-cert");
  cmd->add_option("--backend", flags->backend, "GPU backend: nvml (the driver) or sim")
      ->capture_default_str();
  cmd->add_option("--sim-gpus", flags->sim_gpus, "Simulated GPUs, MODEL:COUNT (--backend sim)")
      ->capture_default_str();
  cmd->add_option("--sim-mig-gpus", flags->sim_mig_gpus,
                  "With --backend sim: the first N GPUs are in MIG mode")
      ->check(CLI::Range(0, 16));
  cmd->add_option("--sim-fault", flags->sim_faults,
                  "With --backend sim, a fault at start: xid:GPU:CODE, overheat:GPU or lost:GPU "
                  "(repeatable; an admin injects more with POST /v1/nodes/{id}/faults)");
  cmd->add_option("--work-dir", flags->work_dir,
                  "Where workloads run and keep their logs and state")
      ->capture_default_str();
  cmd->add_option("--catalog", flags->catalog_dir, "Catalog directory (default: built in)");
  cmd->add_option("--workload-uids", flags->workload_uids,
                  "Unprivileged uids FROM-TO for workloads (processes and containers), one per "
                  "tenant on the node (needs root; no account may use them), or none: processes "
                  "then run as the agent's user, the node runs no containers and takes one "
                  "tenant at a time")
      ->capture_default_str();
  cmd->add_option("--workload-pids", flags->workload_pids,
                  "The most processes a tenant's workloads on this node may have at once (its "
                  "uid's RLIMIT_NPROC; a container's pids limit)")
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 22))
      ->capture_default_str();
  cmd->add_option("--cdi-kind", flags->cdi_kind,
                  "The CDI kind of this node's GPUs in /etc/cdi or /var/run/cdi (with --backend "
                  "nvml the agent writes a spec of it when the node has none)")
      ->capture_default_str();
  cmd->add_option("--manage-mig", flags->manage_mig,
                  "With --backend nvml: make each granted MIG slice's device at its granted "
                  "start slice and destroy it when its instance ends, and change a GPU's MIG "
                  "mode when the server asks (needs root or the mig/config capability); false "
                  "uses only the MIG devices that exist")
      ->capture_default_str();
  cmd->add_flag("--mig-adopt", flags->mig_adopt,
                "Take over MIG devices Tessera did not make as free slices it may use and "
                "destroy; without it they are an operator's, never placed over");
  cmd->add_option("--nvidia-smi", flags->nvidia_smi,
                  "The program that resets a GPU when an operator allowed it "
                  "(set-gpu-mode --allow-reset)")
      ->capture_default_str();
  cmd->add_option("--mps-control", flags->mps_control,
                  "NVIDIA's MPS control program: shares of a GPU run under an MPS daemon per GPU "
                  "and tenant, with their thread and memory limits set through it; where it is "
                  "not found, shares are time-sliced without limits (and the node says so); "
                  "\"\" turns MPS off")
      ->capture_default_str();
  cmd->add_option("--volumes-dir", flags->volumes_dir,
                  "Where the node keeps its volumes (default: WORK_DIR/volumes)");
  cmd->add_option("--volume-images", flags->volume_images,
                  "Make each volume a file system of its own (a loop-mounted ext4 image), so its "
                  "size is a hard limit; needs root and loop devices. false: plain directories, "
                  "sizes only watched (the node says so)")
      ->capture_default_str();
  cmd->add_option("--heartbeat-ms", flags->heartbeat_ms,
                  "The longest between two reports, in milliseconds; the server's report "
                  "period governs when shorter")
      ->check(CLI::Range(100, 30'000))
      ->capture_default_str();
  cmd->add_option("--metrics-listen", flags->metrics_listen,
                  "Serve this node's GPU series (dcgm-exporter's format) at "
                  "http://HOST:PORT/metrics; unauthenticated, as dcgm-exporter, so bind it to "
                  "the node's private address");
  cmd->add_option("--image-cache-gib", flags->image_cache_gib,
                  "Images this agent pulled are evicted, least recently used first, past this "
                  "size (GiB; 0 = no cap)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--insecure-registry", flags->insecure_registries,
                  "HOST[:PORT] of a registry reached without TLS verification (repeatable)");
  cmd->add_option("--cgroup-root", flags->cgroup_root,
                  "cgroup v2 directory for workloads' limits (default: beside the agent's own; "
                  "'none' to not try)");
  cmd->add_option("--advertise-address", flags->advertise_address,
                  "The IP address or DNS name other nodes reach this one at (a group's "
                  "MASTER_ADDR); default: the address the server sees the agent's calls come from")
      ->check([](const std::string& v) {
        return IsHostAddress(v)
                   ? std::string()
                   : "--advertise-address: " + Quote(v) + " is not an IP address or a DNS name";
      });
  cmd->add_option("--rendezvous-ports", flags->rendezvous_ports,
                  "TCP ports the agent reserves for groups' rank 0 (MASTER_PORT), FIRST-LAST; "
                  "keep them outside the kernel's ephemeral range")
      ->capture_default_str();
  cmd->add_option("--endpoint-ports", flags->endpoint_ports,
                  "TCP ports the agent maps instances' ports to (their endpoints), FIRST-LAST")
      ->capture_default_str();
  cmd->callback([flags, token_flag, &ctx] {
    ctx.exit_code = token_flag->count() > 0 ? RefuseTokenFlag() : RunAgent(*flags);
  });
}

}  // namespace tessera::cli
