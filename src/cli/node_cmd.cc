// `tessera nodes ...`: the fleet's nodes, joining and removing them, draining, GPU modes and
// health, and faults to inject (docs/fleet.md, docs/agent.md).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/client_cmd.h"
#include "cli/table.h"
#include "common/json.h"
#include "common/server_list.h"
#include "common/text.h"

namespace tessera::cli {

namespace {

using nlohmann::json;

void PrintModeChange(const std::string& node, int gpu, const json& change) {
  const std::string state = Str(change, "state");
  const std::string mode = Str(change, "mode");
  const std::string reason = change.value("reason", "");
  std::cout << EscapeForTerminal(node) << " GPU " << gpu << ": " << EscapeForTerminal(mode)
            << " mode ";
  if (state == "requested") {
    std::cout << "requested (request " << Str(change, "id") << "), waiting for its agent\n";
  } else if (state == "pending_reset") {
    std::cout << "waits for a reset of the GPU" << (reason.empty() ? "" : ": ")
              << EscapeForTerminal(reason) << "\nRerun with --allow-reset to let its agent reset "
              << "it: tessera nodes set-gpu-mode " << EscapeForTerminal(node) << " " << gpu << " "
              << EscapeForTerminal(mode) << " --allow-reset\n";
  } else {
    std::cout << EscapeForTerminal(state) << (reason.empty() ? "" : ": ")
              << EscapeForTerminal(reason) << "\n";
  }
}

// Polls GET /v1/nodes/{node} until mode change `id` of GPU `gpu` leaves `requested`, for at most
// `timeout`. Prints it; 0 once applied, 1 otherwise.
int AwaitModeChange(const ClientFlags& f, const std::string& node, int gpu, int64_t id,
                    std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto r = Call(f, "GET", "/v1/nodes/" + Encode(node));
    if (!r) return kExitFailure;
    const json& gpus = r->body.value("gpus", json::array());
    const json change = static_cast<size_t>(gpu) < gpus.size()
                            ? gpus[static_cast<size_t>(gpu)].value("mode_change", json())
                            : json();
    if (!change.is_object() || change.value("id", int64_t{0}) != id) {
      std::cerr << "tessera: node " << EscapeForTerminal(node) << " GPU " << gpu
                << " shows no mode change " << id << "\n";
      return kExitFailure;
    }
    const bool done = change.value("state", "") != "requested";
    if (done || std::chrono::steady_clock::now() >= deadline) {
      if (!PrintDocument(f, change)) PrintModeChange(node, gpu, change);
      if (!done) {
        std::cerr << "tessera: its agent has not answered in " << timeout.count() << " s\n";
      }
      return change.value("state", "") == "applied" ? kExitOk : kExitFailure;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// tessera nodes set-gpu-mode NODE GPU MODE [--allow-reset] [--wait].
void RegisterSetGpuMode(CLI::App* group, std::shared_ptr<ClientFlags> f, Context& ctx) {
  struct Flags {
    std::string node;
    int gpu = 0;
    std::string mode;
    bool allow_reset = false;
    bool wait = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = group->add_subcommand(
      "set-gpu-mode",
      "Change a GPU's sharing mode: exclusive and shared at once, into or out of MIG through the "
      "node's agent (the GPU must hold no work)");
  AddCommon(cmd, *f);
  cmd->add_option("node", flags->node, "Node id")->required();
  cmd->add_option("gpu", flags->gpu, "GPU index on the node")->required();
  cmd->add_option("mode", flags->mode, "mig, exclusive or shared")
      ->required()
      ->check(CLI::IsMember({"mig", "exclusive", "shared"}));
  cmd->add_flag("--allow-reset", flags->allow_reset,
                "Let the agent reset the GPU if the driver needs it to change MIG mode");
  cmd->add_flag("--wait", flags->wait,
                "Wait (at most 60 s) for the agent's result; exit 0 only once applied");
  cmd->callback([f, flags, &ctx] {
    const json body = {{"mode", flags->mode}, {"allow_reset", flags->allow_reset}};
    auto r = Call(*f, "POST",
                  fmt::format("/v1/nodes/{}/gpus/{}/mode", Encode(flags->node), flags->gpu), &body);
    if (!r) {
      ctx.exit_code = kExitFailure;
      return;
    }
    const json request = r->body.value("request", json());
    if (flags->wait && request.is_object() && request.value("state", "") == "requested") {
      ctx.exit_code = AwaitModeChange(*f, flags->node, flags->gpu, request.value("id", int64_t{0}),
                                      std::chrono::seconds(60));
      return;
    }
    ctx.exit_code = Show(*f, r, [&](const json& j) {
      PrintModeChange(flags->node, flags->gpu, request.is_object() ? request : j);
    });
    if (flags->wait && Str(r->body, "state") != "applied") ctx.exit_code = kExitFailure;
  });
}

}  // namespace

void RegisterNodes(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  auto id = std::make_shared<std::string>();
  CLI::App* group = app.add_subcommand("nodes",
                                       "List, add, remove, drain and undrain nodes, mark their "
                                       "GPUs' health and set their GPUs' modes "
                                       "(admin token)");
  group->require_subcommand(1);
  CLI::App* list = group->add_subcommand("list", "List nodes with capacity and allocations");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code = Show(*f, CallAll(*f, "/v1/nodes", "nodes"), [](const json& j) {
      Table t({"NODE", "STATE", "GPU MODEL", "GPUS", "GPU FREE", "UNHEALTHY", "VCPU FREE",
               "MEM FREE MIB", "WORKLOADS"});
      for (const auto& n : j["nodes"]) {
        double free = 0;
        std::vector<std::string> unhealthy;
        for (const auto& g : n["gpus"]) {
          if (g.value("health", "ok") == "ok") {
            free += g.value("free_milli", 0) / 1000.0;
          } else {
            unhealthy.push_back(Str(g, "index"));
          }
        }
        t.AddRow({Str(n, "id"), Str(n, "state"), Str(n, "gpu_model"),
                  std::to_string(n["gpus"].size()), fmt::format("{:g}", free),
                  unhealthy.empty() ? "-" : fmt::format("{}", fmt::join(unhealthy, ",")),
                  fmt::format("{:g}", n.value("vcpus_free", 0.0)), Str(n, "memory_mib_free"),
                  Str(n, "workloads")});
      }
      // Added, their agent not joined yet: nothing known of their hardware.
      for (const auto& n : j.value("waiting_for_agent", json::array())) {
        t.AddRow({Str(n, "id"), "waiting_for_agent", "-", "-", "-", "-", "-", "-", "-"});
      }
      t.Print(std::cout);
    });
  });
  auto labels = std::make_shared<std::vector<std::string>>();
  auto sharing = std::make_shared<std::string>("exclusive");
  CLI::App* add = group->add_subcommand(
      "add", "Add a node for an agent to join; prints the node token (shown once)");
  AddCommon(add, *f);
  add->add_option("name", *id, "Node name, e.g. gpu-07")->required();
  add->add_option("--label", *labels, "KEY=VALUE, repeatable");
  add->add_option("--sharing", *sharing, "GPUs not in MIG mode: exclusive or shared")
      ->capture_default_str();
  add->callback([f, id, labels, sharing, &ctx] {
    auto l = KeyValues(*labels, "--label");
    if (!l) {
      ctx.exit_code = kExitUsage;
      return;
    }
    const json body = {{"name", *id}, {"labels", *l}, {"sharing", *sharing}};
    // The token goes in a file, never in the agent's argv: that is in /proc/PID/cmdline for
    // every user of the node (docs/agent.md).
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/nodes", &body), [](const json& j) {
      std::cout << "node " << EscapeForTerminal(Str(j, "id"))
                << " added; its token (shown once, stored only as a hash):\n"
                << EscapeForTerminal(Str(j, "token")) << "\n"
                << "On the node, save it in a file only the agent's user can read, and run:\n"
                << "  (umask 077; mkdir -p /etc/tessera; cat > /etc/tessera/node-token)   "
                   "# paste the token, then Ctrl-D\n"
                << "  tessera agent --server $TESSERA_URL --token-file /etc/tessera/node-token\n";
    });
  });
  auto gpu = std::make_shared<int>(0);
  auto health = std::make_shared<std::string>();
  auto reason = std::make_shared<std::string>();
  CLI::App* gpu_health = group->add_subcommand(
      "gpu-health", "Put a GPU back in service (ok) or take it out (unhealthy)");
  AddCommon(gpu_health, *f);
  gpu_health->add_option("node", *id, "Node id")->required();
  gpu_health->add_option("gpu", *gpu, "GPU index on the node")->required();
  gpu_health->add_option("state", *health, "ok or unhealthy")
      ->required()
      ->check(CLI::IsMember({"ok", "unhealthy"}));
  gpu_health->add_option("--reason", *reason, "Why it is out of service (with unhealthy)");
  gpu_health->callback([f, id, gpu, health, reason, &ctx] {
    json body = {{"state", *health}};
    if (!reason->empty()) body["reason"] = *reason;
    ctx.exit_code = Show(
        *f, Call(*f, "POST", fmt::format("/v1/nodes/{}/gpus/{}/health", Encode(*id), *gpu), &body),
        [](const json& j) {
          std::cout << EscapeForTerminal(Str(j, "id")) << " GPU " << Str(j, "gpu") << ": "
                    << EscapeForTerminal(Str(j, "state")) << "\n";
        });
  });
  auto fault = std::make_shared<std::string>();
  CLI::App* inject =
      group->add_subcommand("fault",
                            "Make a node's (simulated) GPUs show a fault: xid:GPU:CODE, lost:GPU, "
                            "found:GPU, overheat:GPU or cool:GPU");
  AddCommon(inject, *f);
  inject->add_option("node", *id, "Node id")->required();
  inject->add_option("fault", *fault, "xid:GPU:CODE, lost:GPU, found:GPU, overheat:GPU or cool:GPU")
      ->required();
  inject->callback([f, id, fault, &ctx] {
    const json body = {{"fault", *fault}};
    ctx.exit_code = Show(
        *f, Call(*f, "POST", "/v1/nodes/" + Encode(*id) + "/faults", &body), [](const json& j) {
          std::cout << EscapeForTerminal(Str(j, "id")) << ": fault "
                    << EscapeForTerminal(Str(j, "fault")) << " queued for its agent\n";
        });
  });
  RegisterSetGpuMode(group, f, ctx);
  auto force = std::make_shared<bool>(false);
  CLI::App* remove = group->add_subcommand(
      "remove", "Take a node out of the fleet (its token revoked, its name free)");
  AddCommon(remove, *f);
  remove->add_option("node", *id, "Node id")->required();
  remove->add_flag("--force", *force,
                   "Also when instances run there: they move elsewhere, as for a GPU fault");
  remove->callback([f, id, force, &ctx] {
    const std::string path =
        "/v1/nodes/" + Encode(*id) + (*force ? std::string("?force=true") : std::string());
    ctx.exit_code = Show(*f, Call(*f, "DELETE", path), [](const json& j) {
      std::cout << EscapeForTerminal(Str(j, "id")) << ": " << EscapeForTerminal(Str(j, "state"));
      if (j.contains("reason")) std::cout << " (" << EscapeForTerminal(Str(j, "reason")) << ")";
      std::cout << "\n";
    });
  });
  for (const char* verb : {"drain", "undrain"}) {
    CLI::App* one =
        group->add_subcommand(verb, verb == std::string("drain") ? "Stop placing new work on a node"
                                                                 : "Place work on a node again");
    AddCommon(one, *f);
    one->add_option("node", *id, "Node id")->required();
    const std::string v = verb;
    one->callback([f, id, v, &ctx] {
      ctx.exit_code =
          Show(*f, Call(*f, "POST", "/v1/nodes/" + Encode(*id) + "/" + v), [](const json& j) {
            std::cout << EscapeForTerminal(Str(j, "id")) << ": "
                      << EscapeForTerminal(Str(j, "state")) << "\n";
          });
    });
  }
}

}  // namespace tessera::cli
