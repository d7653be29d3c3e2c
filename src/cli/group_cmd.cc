// `tessera groups ...`: instance groups, their gangs, scaling and autoscale (docs/groups.md).
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

void PrintGroups(const json& list) {
  Table t({"ID", "NAME", "STATE", "SIZE", "ELASTIC", "PLACED", "TOPOLOGY", "RESTARTS", "REASON"});
  for (const json& g : list) {
    const json elastic = g.value("elastic", json(false));
    t.AddRow({Str(g, "id"), Str(g, "name"), Str(g, "state"), std::to_string(g["size"].get<int>()),
              elastic.is_object()
                  ? fmt::format("{}:{}", elastic.value("min", 0), elastic.value("max", 0))
                  : "no",
              std::to_string(g["placed"].get<int>()),
              Str(g, "topology") + "/" + Str(g, "placement"),
              std::to_string(g["restarts"].get<int>()), Str(g, "reason")});
  }
  t.Print(std::cout);
}

void PrintMembers(const json& g) {
  PrintGroups(json::array({g}));
  if (const json a = g.value("autoscale", json()); a.is_object()) {
    const json st = g.value("autoscale_status", json::object());
    std::cout << fmt::format("autoscale: {} target {} within [{}, {}], scale-down window {} s",
                             Str(a, "metric"), a.value("target", 0.0), a.value("min", 0),
                             a.value("max", 0), a.value("scale_down_stabilization_seconds", 0));
    if (st.contains("value")) std::cout << fmt::format("; now {:.4g}", st.value("value", 0.0));
    if (st.contains("last_decision")) std::cout << "; last: " << Str(st, "last_decision");
    std::cout << "\n";
  }
  Table t({"RANK", "INSTANCE", "STATE", "NODE"});
  for (const json& m : g["members"]) {
    t.AddRow(
        {std::to_string(m.value("rank", 0)), Str(m, "instance"), Str(m, "state"), Str(m, "node")});
  }
  t.Print(std::cout);
}

}  // namespace

void RegisterGroups(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* groups = app.add_subcommand("groups", "Gangs of instances placed together");
  groups->require_subcommand(1);
  struct GroupFlags {
    CreateFlags member;
    int size = 1, min_available = 0;
    std::string placement = "pack", topology = "any", elastic;
  };
  auto g = std::make_shared<GroupFlags>();
  CLI::App* create = groups->add_subcommand("create", "Create a group from an instance template");
  AddCommon(create, *f);
  AddCreateOptions(create, g->member);
  create->add_option("--size", g->size, "Members")->required();
  create->add_option("--min-available", g->min_available, "Members placed at once (default: all)");
  create->add_option("--placement", g->placement, "pack or spread")
      ->check(CLI::IsMember({"pack", "spread"}));
  create->add_option("--topology", g->topology, "nvlink, node or any")
      ->check(CLI::IsMember({"nvlink", "node", "any"}));
  create->add_option("--elastic", g->elastic,
                     "MIN:MAX: resize within it without a restart, members getting torchrun's "
                     "elastic rendezvous (default: a resize restarts the gang whole)");
  create->callback([f, g, &ctx] {
    std::optional<json> member = CreateBodyWithLabels(g->member);
    if (!member) {
      ctx.exit_code = kExitUsage;
      return;
    }
    json body = {{"template", *member},
                 {"size", g->size},
                 {"placement", g->placement},
                 {"topology", g->topology},
                 {"restart", !g->member.no_restart}};
    if (member->contains("name")) {
      body["name"] = (*member)["name"];
      body["template"].erase("name");
    }
    if (g->min_available > 0) body["min_available"] = g->min_available;
    if (!g->elastic.empty()) {
      const auto colon = g->elastic.find(':');
      int lo = 0, hi = 0;
      const char* text = g->elastic.c_str();
      if (colon == std::string::npos ||
          std::from_chars(text, text + colon, lo).ptr != text + colon ||
          std::from_chars(text + colon + 1, text + g->elastic.size(), hi).ptr !=
              text + g->elastic.size()) {
        std::cerr << "--elastic: " << EscapeForTerminal(g->elastic)
                  << " is not MIN:MAX (e.g. 2:8)\n";
        ctx.exit_code = kExitUsage;
        return;
      }
      body["elastic"] = {{"min", lo}, {"max", hi}};
    }
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/groups", &body), PrintMembers);
  });
  CLI::App* list = groups->add_subcommand("list", "List groups (an admin sees all)");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/groups"), [](const json& j) { PrintGroups(j["groups"]); });
  });
  auto id = std::make_shared<std::string>();
  CLI::App* get = groups->add_subcommand("get", "Show a group and its members");
  AddCommon(get, *f);
  get->add_option("ID", *id, "The group's id")->required();
  get->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/groups/" + Encode(*id)), PrintMembers);
  });
  auto size = std::make_shared<int>(1);
  CLI::App* scale = groups->add_subcommand("scale", "Change a group's size");
  AddCommon(scale, *f);
  scale->add_option("ID", *id, "The group's id")->required();
  scale->add_option("SIZE", *size, "The new size")->required();
  scale->callback([f, id, size, &ctx] {
    json body = {{"size", *size}};
    ctx.exit_code = Show(*f, Call(*f, "PATCH", "/v1/groups/" + Encode(*id), &body), PrintMembers);
  });
  struct AutoscaleFlags {
    int min = 0, max = 0;
    std::string metric = "gpu_util", window = "5m";
    double target = 0;
    std::vector<std::string> schedule;
    bool off = false;
  };
  auto as = std::make_shared<AutoscaleFlags>();
  CLI::App* autoscale = groups->add_subcommand(
      "autoscale",
      "Set, change or (--off) remove a group's autoscale; the autoscaler sets its size");
  AddCommon(autoscale, *f);
  autoscale->add_option("ID", *id, "The group's id")->required();
  autoscale->add_option("--min", as->min, "Fewest members")->check(CLI::PositiveNumber);
  autoscale->add_option("--max", as->max, "Most members")->check(CLI::PositiveNumber);
  autoscale
      ->add_option("--metric", as->metric,
                   "gpu_util or fb_used (mean % over the members' GPUs), pending (backlog per "
                   "member) or rps (service requests per second per member)")
      ->check(CLI::IsMember({"gpu_util", "fb_used", "pending", "rps"}));
  autoscale->add_option("--target", as->target, "The metric's target per member (e.g. 70)");
  autoscale->add_option("--scale-down-window", as->window,
                        "Scale down only to the highest size wanted over this window (e.g. 5m)");
  autoscale->add_option("--schedule", as->schedule,
                        "'CRON=MIN': a floor of MIN members from each time CRON fires (e.g. "
                        "'0 8 * * 1-5=4'); repeat for more");
  autoscale->add_flag("--off", as->off, "Remove the autoscale; the group keeps its size");
  autoscale->callback([f, id, as, &ctx] {
    json body;
    if (as->off) {
      if (as->min || as->max || as->target != 0 || !as->schedule.empty()) {
        std::cerr << "--off: takes no other autoscale flag\n";
        ctx.exit_code = kExitUsage;
        return;
      }
      body = {{"autoscale", nullptr}};
    } else {
      auto window = WholeSeconds(as->window, "--scale-down-window");
      std::string missing = !as->min          ? "--min"
                            : !as->max        ? "--max"
                            : as->target == 0 ? "--target"
                                              : "";
      if (!window.ok() || !missing.empty()) {
        std::cerr << (window.ok() ? missing + ": is required (or --off)"
                                  : window.status().message())
                  << "\n";
        ctx.exit_code = kExitUsage;
        return;
      }
      json schedule = json::array();
      for (const std::string& e : as->schedule) {
        const size_t eq = e.rfind('=');
        int min = 0;
        if (eq == std::string::npos ||
            std::from_chars(e.data() + eq + 1, e.data() + e.size(), min).ptr !=
                e.data() + e.size()) {
          std::cerr << "--schedule: " << EscapeForTerminal(e)
                    << " is not 'CRON=MIN' (e.g. '0 8 * * 1-5=4')\n";
          ctx.exit_code = kExitUsage;
          return;
        }
        schedule.push_back({{"cron", e.substr(0, eq)}, {"min", min}});
      }
      body = {{"autoscale",
               {{"min", as->min},
                {"max", as->max},
                {"metric", as->metric},
                {"target", as->target},
                {"scale_down_stabilization_seconds", *window},
                {"schedule", std::move(schedule)}}}};
    }
    ctx.exit_code = Show(*f, Call(*f, "PATCH", "/v1/groups/" + Encode(*id), &body), PrintMembers);
  });
  CLI::App* del = groups->add_subcommand("delete", "Delete a group, stopping every member");
  AddCommon(del, *f);
  del->add_option("ID", *id, "The group's id")->required();
  del->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "DELETE", "/v1/groups/" + Encode(*id)), PrintMembers);
  });
}

}  // namespace tessera::cli
