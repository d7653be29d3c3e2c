// Client commands: `tessera instances|tenants|nodes ...` speak to a running server's REST API.
// They take --url or TESSERA_URL, --token or TESSERA_TOKEN and, for an https URL whose
// certificate no system authority signed, --ca or TESSERA_CA; they print aligned tables or, with
// -o json, the server's JSON. An error is printed as the server's message, with exit code 1
// (2 for bad usage). Whatever the server sent is escaped before it reaches the terminal, so a
// name or command cannot move the cursor, change colours or hide text.
#include "cli/client_cmd.h"

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
#include "cli/table.h"
#include "common/json.h"
#include "common/server_list.h"
#include "common/text.h"

namespace tessera::cli {

namespace {

using nlohmann::json;

// An instance's state as a person reads it: "pulling 42%" while its image is being pulled.
std::string StateText(const json& i) {
  const std::string state = Str(i, "state");
  if (state != "pulling" || !i.contains("pull") || !i["pull"].is_object()) return state;
  const json& pull = i["pull"];
  return pull.contains("percent") && pull["percent"].is_number()
             ? fmt::format("pulling {}%", pull["percent"].get<int>())
             : state;
}

// What an instance holds, as people count it: whole GPUs ("2"), a MIG profile ("1g.10gb") or a
// share ("0.5"); from its shape, so a pending one shows what it asked for.
std::string GpuText(const json& i) {
  const json& s = i.contains("shape") && i["shape"].is_object() ? i["shape"] : json::object();
  if (s.contains("mig_profile") && s["mig_profile"].is_string()) {
    return s["mig_profile"].get<std::string>();
  }
  if (s.value("milli_gpu", 0) > 0) return fmt::format("{:g}", s.value("milli_gpu", 0) / 1000.0);
  if (s.contains("gpus") && s["gpus"].is_number_integer())
    return std::to_string(s["gpus"].get<int>());
  return "-";
}

// `tenants`: the tenants' names by id, for an admin's listing (a TENANT column); empty: none.
void PrintInstances(const json& list, const std::map<std::string, std::string>& tenants = {}) {
  std::vector<std::string> head = {"ID",   "NAME", "STATE",   "BILLING", "SHAPE",
                                   "NODE", "GPUS", "PRICE/H", "RESTARTS"};
  if (!tenants.empty()) head.insert(head.begin() + 1, "TENANT");
  Table t(head);
  for (const auto& i : list) {
    const json& s = i["shape"];
    // As people say it: 2 x H100-80GB, 3g.40gb of A100-80GB, 0.5 x L40S-48GB.
    std::string shape = s.value("instance_type", "");
    if (shape.empty()) {
      const std::string model = s.value("gpu_model", "");
      shape = s.contains("mig_profile") ? fmt::format("{} of {}", Str(s, "mig_profile"), model)
              : s.contains("milli_gpu")
                  ? fmt::format("{:g} x {}", s.value("milli_gpu", 0) / 1000.0, model)
                  : fmt::format("{} x {}", s.value("gpus", 0), model);
      if (model.empty()) shape = "CPU only";
    }
    std::vector<std::string> row = {Str(i, "id"),
                                    Str(i, "name"),
                                    StateText(i),
                                    Str(i, "billing"),
                                    shape,
                                    Str(i, "node"),
                                    GpuText(i),
                                    Str(i, "price_per_hour_usd"),
                                    Str(i, "restarts")};
    if (!tenants.empty()) {
      row.insert(row.begin() + 1, TenantName(tenants, Str(i, "tenant")));
    }
    t.AddRow(row);
  }
  t.Print(std::cout);
}

// One instance as "Field: value" lines, as `kubectl describe` shows an object: what the table
// leaves out (command, labels, annotations, reason) included, every value escaped.
void PrintInstanceDetail(const json& i) {
  std::vector<std::pair<std::string, std::string>> rows = {
      {"ID", Str(i, "id")},
      {"Name", Str(i, "name")},
      {"Tenant", Str(i, "tenant")},
      {"State", StateText(i)},
      {"Reason", Str(i, "reason")},
      {"Billing", Str(i, "billing")},
      {"Node", Str(i, "node")},
      {"Price/h (USD)", Str(i, "price_per_hour_usd")},
      {"Restarts", Str(i, "restarts")},
      {"Created", Str(i, "created_at")},
      {"Command", Str(i, "command")}};
  if (i.contains("image")) {
    rows.emplace_back("Image", Str(i, "image") + " (pull " + Str(i, "pull_policy") + ")");
    // The API shows a registry's username only; its password is never sent back.
    if (i.contains("registry_auth"))
      rows.emplace_back("Registry user", Str(i["registry_auth"], "username"));
  }
  if (i.contains("pull") && i["pull"].is_object()) {
    const json& pull = i["pull"];
    const int64_t total = pull.value("total_bytes", int64_t{0});
    rows.emplace_back("Pull", fmt::format("{}% ({} of {} bytes)", pull.value("percent", 0),
                                          pull.value("bytes", int64_t{0}),
                                          total > 0 ? std::to_string(total) : "unknown"));
  }
  for (const char* map : {"labels", "annotations"}) {
    std::vector<std::string> pairs;
    if (i.contains(map) && i[map].is_object()) {
      for (const auto& [k, v] : i[map].items()) {
        pairs.push_back(k + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
      }
    }
    rows.emplace_back(map == std::string("labels") ? "Labels" : "Annotations",
                      pairs.empty() ? "-" : fmt::format("{}", fmt::join(pairs, ", ")));
  }
  std::vector<std::string> gpus;
  for (const auto& g : i["gpus"]) gpus.push_back(Str(g, "uuid"));
  rows.emplace_back("GPUs", gpus.empty() ? "-" : fmt::format("{}", fmt::join(gpus, ", ")));
  for (const auto& [field, value] : rows) {
    std::cout << fmt::format("{:<15}{}\n", field + ":", EscapeForTerminal(value));
  }
}

// Prints `r` as JSON or through `table`; returns the exit code.
// `instances top`: one row per GPU (or MIG instance, or share) of each instance.
void PrintTop(const json& body) {
  const bool tenants = !body["instances"].empty() && body["instances"][0].contains("tenant");
  std::vector<std::string> header = {"ID",       "NAME",       "STATE",   "NODE",  "GPU",
                                     "GPU UTIL", "MEMORY MIB", "POWER W", "TEMP C"};
  if (tenants) header.insert(header.begin() + 1, "TENANT");
  Table t(header);
  for (const json& inst : body["instances"]) {
    for (const json& g : inst["gpus"]) {
      std::string gpu = Str(g, "index");
      if (g.contains("mig_profile")) gpu += " " + Str(g, "mig_profile");
      if (g.contains("milli_gpu"))
        gpu += fmt::format(" ({:g})", g["milli_gpu"].get<int>() / 1000.0);
      const json& l = g["latest"];
      const bool have = l.is_object() && !l.contains("lost");
      auto num = [&](const char* key, const char* fmt_spec) -> std::string {
        if (!have || !l.contains(key) || !l[key].is_number())
          return l.contains("lost") ? "lost" : "-";
        return fmt::format(fmt::runtime(fmt_spec), l[key].get<double>());
      };
      std::string memory = num("fb_used_mib", "{:.0f}");
      if (have && l.contains("fb_total_mib")) memory += " / " + Str(l, "fb_total_mib");
      std::vector<std::string> row = {Str(inst, "id"),
                                      Str(inst, "name"),
                                      Str(inst, "state"),
                                      Str(inst, "node"),
                                      gpu,
                                      num("gpu_util", "{:.0f}%"),
                                      memory,
                                      num("power_w", "{:.0f}"),
                                      num("temperature_c", "{:.0f}")};
      if (tenants) row.insert(row.begin() + 1, Str(inst, "tenant"));
      t.AddRow(std::move(row));
    }
  }
  t.Print(std::cout);
}

json CreateBody(const CreateFlags& c) {
  json body = {{"billing", c.billing}};
  if (!c.name.empty()) body["name"] = c.name;
  if (!c.command.empty()) body["command"] = c.command;
  if (!c.image.empty()) body["image"] = c.image;
  if (!c.pull_policy.empty()) body["pull_policy"] = c.pull_policy;
  if (c.no_restart) body["restart"] = false;
  if (c.migratable) body["migratable"] = true;
  if (!c.ports.empty()) body["ports"] = c.ports;
  if (!c.type.empty()) body["instance_type"] = c.type;
  if (!c.gpu_model.empty()) {
    body["gpu_model"] = c.gpu_model;
    body["vcpus"] = c.vcpus;
    body["memory_mib"] = c.memory_mib;
    if (c.gpus > 0) body["gpus"] = c.gpus;
    if (!c.mig_profile.empty()) body["mig_profile"] = c.mig_profile;
    if (c.milli_gpu > 0) body["milli_gpu"] = c.milli_gpu;
    if (c.gpu_memory_mib > 0) body["gpu_memory_mib"] = c.gpu_memory_mib;
  }
  return body;
}

// The registry credentials of --registry-username and --registry-password-file into `body`;
// false (after saying why) when only one is given or the file cannot be read.
bool AddRegistryAuth(const CreateFlags& c, json& body) {
  if (c.registry_username.empty() && c.registry_password_file.empty() &&
      c.registry_password_secret.empty()) {
    return true;
  }
  if (!c.registry_password_secret.empty() && !c.registry_username.empty() &&
      c.registry_password_file.empty()) {
    body["registry_auth"] = {{"username", c.registry_username},
                             {"password", {{"secret", c.registry_password_secret}}}};
    return true;
  }
  if (c.registry_username.empty() || c.registry_password_file.empty() ||
      !c.registry_password_secret.empty()) {
    std::cerr << "tessera: give --registry-username with one of --registry-password-file or "
                 "--registry-password-secret\n";
    return false;
  }
  std::ifstream in(c.registry_password_file, std::ios::binary);
  std::string password;
  if (!in || !std::getline(in, password)) {
    std::cerr << "tessera: --registry-password-file: cannot read '"
              << EscapeForTerminal(c.registry_password_file) << "'\n";
    return false;
  }
  if (!password.empty() && password.back() == '\r') password.pop_back();
  body["registry_auth"] = {{"username", c.registry_username}, {"password", password}};
  return true;
}

void RegisterInstances(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  auto c = std::make_shared<CreateFlags>();
  auto id = std::make_shared<std::string>();
  auto state = std::make_shared<std::string>();
  CLI::App* group = app.add_subcommand("instances", "Create, list, show and delete instances");
  group->require_subcommand(1);
  CLI::App* create = group->add_subcommand("create", "Rent an instance");
  AddCommon(create, *f);
  AddCreateOptions(create, *c);
  create->callback([f, c, &ctx] {
    std::optional<json> body = CreateBodyWithLabels(*c);
    if (!body) {
      ctx.exit_code = kExitUsage;
      return;
    }
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/instances", &*body),
                         [](const json& j) { PrintInstances(json::array({j})); });
  });
  CLI::App* list = group->add_subcommand("list", "List instances (an admin sees all)");
  AddCommon(list, *f);
  auto selector = std::make_shared<std::string>();
  list->add_option("--state", *state, "Only instances in this state");
  list->add_option("-l,--label-selector", *selector,
                   "Only instances whose labels match, e.g. team=ml,env!=prod");
  list->callback([f, state, selector, &ctx] {
    std::vector<std::string> query;
    if (!state->empty()) query.push_back("state=" + Encode(*state));
    if (!selector->empty()) query.push_back("label_selector=" + Encode(*selector));
    const std::string path =
        "/v1/instances" + (query.empty() ? "" : fmt::format("?{}", fmt::join(query, "&")));
    ctx.exit_code = Show(*f, CallAll(*f, path, "instances"), [f](const json& j) {
      PrintInstances(j["instances"], TenantNamesForAdmin(*f));
    });
  });
  CLI::App* top = group->add_subcommand(
      "top", "Show instances with their GPUs' current utilization and memory (an admin sees all)");
  AddCommon(top, *f);
  top->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/metrics/instances"), [](const json& j) { PrintTop(j); });
  });
  auto tail = std::make_shared<int>(100);
  auto follow = std::make_shared<bool>(false);
  CLI::App* logs = group->add_subcommand("logs", "Print an instance's output (stdout and stderr)");
  AddCommon(logs, *f);
  logs->add_option("id", *id, "Instance id or name")->required();
  logs->add_option("--tail", *tail, "Lines from the end")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  logs->add_flag("-f,--follow", *follow,
                 "Keep printing new output until the instance ends, then exit with its workload's "
                 "exit code");
  logs->callback([f, id, tail, follow, &ctx] {
    const auto found = ResolveInstance(*f, *id);
    if (!found) {
      ctx.exit_code = kExitFailure;
      return;
    }
    std::string path = fmt::format("/v1/instances/{}/logs?tail={}", Encode(*found), *tail);
    for (;;) {
      auto r = Call(*f, "GET", path);
      if (!r) {
        ctx.exit_code = kExitFailure;
        return;
      }
      // Output is the workload's own: shown as it is, but nothing in it may drive the terminal.
      std::string_view text = r->text;
      while (!text.empty()) {
        const size_t nl = text.find('\n');
        std::cout << EscapeForTerminal(text.substr(0, nl));
        if (nl == std::string_view::npos) break;
        std::cout << '\n';
        text.remove_prefix(nl + 1);
      }
      std::cout << std::flush;
      const std::string now =
          r->headers.count("X-Instance-State") ? r->headers.find("X-Instance-State")->second : "";
      const bool active = IsActiveState(now);
      if (*follow && !active) {
        // Followed to its end: exit as its workload did (1 when it has no exit code: stopped,
        // preempted or failed before it ran).
        auto inst = Call(*f, "GET", "/v1/instances/" + Encode(*found));
        const json code = inst ? inst->body.value("exit_code", json()) : json();
        ctx.exit_code =
            code.is_number_integer() ? std::clamp(code.get<int>(), 0, 255) : kExitFailure;
        return;
      }
      if (!*follow) return;
      const std::string offset =
          r->headers.count("X-Log-Offset") ? r->headers.find("X-Log-Offset")->second : "0";
      path = fmt::format("/v1/instances/{}/logs?after={}", Encode(*found), offset);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  AddExecCommands(group, ctx);
  CLI::App* get = group->add_subcommand("get", "Show one instance");
  AddCommon(get, *f);
  get->add_option("id", *id, "Instance id or name")->required();
  get->callback([f, id, &ctx] {
    const auto found = ResolveInstance(*f, *id);
    ctx.exit_code = !found ? kExitFailure
                           : Show(*f, Call(*f, "GET", "/v1/instances/" + Encode(*found)),
                                  [](const json& j) { PrintInstanceDetail(j); });
  });
  auto ids = std::make_shared<std::vector<std::string>>();
  CLI::App* del = group->add_subcommand("delete", "Stop instances and free them");
  AddCommon(del, *f);
  del->add_option("ids", *ids, "Instance ids or names")->required();
  del->callback([f, ids, &ctx] {
    // Each in turn; one that fails is said and the rest still go. Exit 1 when any failed.
    json deleted = json::array();
    bool failed = false;
    for (const std::string& one : *ids) {
      const auto found = ResolveInstance(*f, one);
      auto r = found ? Call(*f, "DELETE", "/v1/instances/" + Encode(*found)) : std::nullopt;
      if (r) {
        deleted.push_back(r->body);
      } else {
        failed = true;
      }
    }
    if (!deleted.empty()) {
      Response all;
      all.status = 200;
      all.body = deleted.size() == 1 ? deleted[0] : deleted;  // One: as `delete ID` always was.
      Show(*f, all, [](const json& j) { PrintInstances(j.is_array() ? j : json::array({j})); });
    }
    ctx.exit_code = failed ? kExitFailure : kExitOk;
  });
}

struct TenantUpdateFlags {
  std::optional<double> quota;
  std::optional<int64_t> max_pending, volumes_gib;
  bool disable = false, enable = false;
};

struct RotateFlags {
  std::optional<int64_t> grace_seconds;
  bool revoke = false;
};

void PrintTenants(const json& list) {
  Table t({"ID", "NAME", "QUOTA GPUS", "USED GPUS", "DISABLED", "CREATED"});
  for (const auto& x : list) {
    t.AddRow({Str(x, "id"), Str(x, "name"), Gpus(x["quota"]["gpus"]),
              x.contains("usage") ? Gpus(x["usage"]["gpus"]) : "-", Str(x, "disabled"),
              Str(x, "created_at")});
  }
  t.Print(std::cout);
}

void RegisterTenants(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  auto name = std::make_shared<std::string>();
  auto quota = std::make_shared<double>(0);
  auto max_pending = std::make_shared<std::optional<int64_t>>();
  auto volumes_gib = std::make_shared<std::optional<int64_t>>();
  CLI::App* group =
      app.add_subcommand("tenants", "Create, list, update tenants and rotate their tokens");
  group->require_subcommand(1);
  CLI::App* create = group->add_subcommand("create", "Create a tenant and print its token");
  AddCommon(create, *f);
  create->add_option("name", *name, "Tenant name")->required();
  create->add_option("--quota-gpus", *quota, "GPU quota (whole GPUs; shares count fractions)")
      ->required();
  create->add_option("--max-pending", *max_pending,
                     "The most instances it may have pending (default: the server's)");
  create->add_option("--quota-volumes-gib", *volumes_gib,
                     "The most GiB its volumes may hold (default: no limit)");
  create->callback([f, name, quota, max_pending, volumes_gib, &ctx] {
    json body = {{"name", *name}, {"quota", {{"gpus", *quota}}}};
    if (*max_pending) body["quota"]["max_pending"] = **max_pending;
    if (*volumes_gib) body["quota"]["volumes_gib"] = **volumes_gib;
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/tenants", &body), [](const json& j) {
      Table t({"ID", "NAME", "QUOTA GPUS", "TOKEN (shown once)"});
      t.AddRow({Str(j, "id"), Str(j, "name"), Gpus(j["quota"]["gpus"]), Str(j, "token")});
      t.Print(std::cout);
    });
  });
  CLI::App* list = group->add_subcommand("list", "List tenants");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code = Show(*f, CallAll(*f, "/v1/tenants", "tenants"),
                         [](const json& j) { PrintTenants(j["tenants"]); });
  });
  auto id = std::make_shared<std::string>();
  CLI::App* get = group->add_subcommand("get", "Show a tenant (a tenant may show itself)");
  AddCommon(get, *f);
  get->add_option("id", *id, "Tenant id")->required();
  get->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/tenants/" + Encode(*id)),
                         [](const json& j) { PrintTenants(json::array({j})); });
  });
  auto update = std::make_shared<TenantUpdateFlags>();
  CLI::App* patch = group->add_subcommand("update", "Change a tenant's quota, or disable it");
  AddCommon(patch, *f);
  patch->add_option("id", *id, "Tenant id")->required();
  patch->add_option("--quota-gpus", update->quota, "New GPU quota");
  patch->add_option("--max-pending", update->max_pending,
                    "The most instances it may have pending, members of waiting groups included");
  patch->add_option("--quota-volumes-gib", update->volumes_gib,
                    "The most GiB its volumes may hold");
  patch->add_flag("--disable", update->disable,
                  "Refuse the tenant's tokens (403) and end its pending instances");
  patch->add_flag("--enable", update->enable, "Accept the tenant's tokens again");
  patch->callback([f, id, update, &ctx] {
    json body = json::object();
    if (update->quota) body["quota"] = {{"gpus", *update->quota}};
    if (update->max_pending) body["quota"]["max_pending"] = *update->max_pending;
    if (update->volumes_gib) body["quota"]["volumes_gib"] = *update->volumes_gib;
    if (update->disable && update->enable) {
      std::cerr << "tessera: give --disable or --enable, not both\n";
      ctx.exit_code = kExitUsage;
      return;
    }
    if (update->disable || update->enable) body["disabled"] = update->disable;
    ctx.exit_code = Show(*f, Call(*f, "PATCH", "/v1/tenants/" + Encode(*id), &body),
                         [](const json& j) { PrintTenants(json::array({j})); });
  });
  auto rotate = std::make_shared<RotateFlags>();
  CLI::App* tokens = group->add_subcommand(
      "rotate-token", "Give a tenant a new token; the old one works for a grace period");
  AddCommon(tokens, *f);
  tokens->add_option("id", *id, "Tenant id")->required();
  tokens->add_option("--grace-seconds", rotate->grace_seconds,
                     "How long the replaced token keeps working (default 3600)");
  tokens->add_flag("--revoke-previous", rotate->revoke,
                   "Revoke the replaced token at once instead");
  tokens->callback([f, id, rotate, &ctx] {
    json body = json::object();
    if (rotate->grace_seconds) body["grace_seconds"] = *rotate->grace_seconds;
    if (rotate->revoke) body["revoke_previous"] = true;
    ctx.exit_code = Show(
        *f, Call(*f, "POST", "/v1/tenants/" + Encode(*id) + "/tokens", &body), [](const json& j) {
          Table t({"ID", "NAME", "TOKEN (shown once)", "PREVIOUS TOKENS EXPIRE"});
          std::vector<std::string> expiries;
          for (const auto& k : j["tokens"]) {
            if (k.contains("expires_at")) expiries.push_back(Str(k, "expires_at"));
          }
          t.AddRow({Str(j, "id"), Str(j, "name"), Str(j, "token"),
                    expiries.empty() ? "-" : fmt::format("{}", fmt::join(expiries, ", "))});
          t.Print(std::cout);
        });
  });
}

// Says where a GPU's mode change stands (docs/agent.md, "Changing a GPU's mode"): `change` is the
// POST's answer, or a GPU's mode_change as GET /v1/nodes/{id} shows it.

}  // namespace

// A tenant's name from `names` (TenantNamesForAdmin's), else its id.
std::string TenantName(const std::map<std::string, std::string>& names, const std::string& id) {
  auto it = names.find(id);
  return it != names.end() && !it->second.empty() ? it->second : id;
}

// The tenants' names by id when `f`'s token is the admin's (its listings span tenants); empty
// otherwise.
std::map<std::string, std::string> TenantNamesForAdmin(const ClientFlags& f) {
  std::map<std::string, std::string> names;
  auto who = Call(f, "GET", "/v1/whoami");
  if (!who || !who->body.value("admin", false)) return names;
  if (auto all = CallAll(f, "/v1/tenants", "tenants")) {
    for (const json& t : all->body.value("tenants", json::array())) {
      names[t.value("id", "")] = t.value("name", "");
    }
  }
  names.emplace("", "");  // Not empty, even with no tenant: the column is shown.
  return names;
}

// The options of an instance's shape and workload (instances create, groups create).
void AddCreateOptions(CLI::App* create, CreateFlags& c) {
  create->add_option("--billing", c.billing, "on_demand, reserved or spot")
      ->check(CLI::IsMember({"on_demand", "reserved", "spot"}))
      ->capture_default_str();
  create->add_option("--type", c.type, "Instance type id (see GET /v1/instance-types)");
  create->add_option("--gpu-model", c.gpu_model, "Custom shape: catalog GPU model");
  create->add_option("--gpus", c.gpus, "Custom shape: whole GPUs");
  create->add_option("--mig-profile", c.mig_profile, "Custom shape: one MIG slice");
  create->add_option("--milli-gpu", c.milli_gpu, "Custom shape: a share, 1..999");
  create->add_option("--gpu-memory-mib", c.gpu_memory_mib, "Custom shape: a share's memory cap");
  create->add_option("--vcpus", c.vcpus, "Custom shape: vCPUs");
  create->add_option("--memory-mib", c.memory_mib, "Custom shape: host memory in MiB");
  create->add_option("--name", c.name, "A name");
  create->add_option("--command", c.command,
                     "The command the workload runs (with --image: in the container; without "
                     "it, the image's own entrypoint runs)");
  create->add_option(
      "--image", c.image,
      "An OCI image to run the workload in, e.g. registry.example.com/team/train:1.4");
  create->add_option("--pull-policy", c.pull_policy, "if_not_present (default), always or never")
      ->check(CLI::IsMember({"if_not_present", "always", "never"}));
  create->add_option("--registry-username", c.registry_username,
                     "The image registry's username (with --registry-password-file)");
  // A file, never a flag's value: argv is in /proc/PID/cmdline for every user of the machine.
  create->add_option("--registry-password-file", c.registry_password_file,
                     "A file holding the image registry's password or token (one line)");
  create->add_flag("--no-restart", c.no_restart,
                   "Leave it ended when it is preempted (by higher-priority work, or a spot "
                   "instance whose node was lost); by default it is queued again and starts "
                   "afresh");
  create->add_flag("--migratable", c.migratable,
                   "A share the server may stop, with notice, and restart on another GPU to make "
                   "room for waiting work (a server run with --repack)");
  create->add_option("--label", c.labels, "A label KEY=VALUE (repeatable)");
  create->add_option("--env", c.env,
                     "An environment variable NAME=VALUE (repeatable; argv is visible to other "
                     "users of this machine: put secret values in a secret, --env-secret)");
  create->add_option("--env-secret", c.env_secrets,
                     "An environment variable NAME=SECRET from the tenant's secret SECRET "
                     "(repeatable; `tessera secrets create`)");
  create->add_option("--registry-password-secret", c.registry_password_secret,
                     "The tenant's secret that holds the image registry's password (with "
                     "--registry-username)");
  create->add_option("--annotation", c.annotations, "An annotation KEY=VALUE (repeatable)");
  create
      ->add_option("--port", c.ports,
                   "A port the workload serves on (repeatable): its node maps it to a port of "
                   "its own, shown in the instance's endpoints")
      ->check(CLI::Range(1, 65535));
  create->add_option("--volume", c.volumes,
                     "Mount the tenant's volume NAME at PATH, as NAME:PATH (repeatable; "
                     "`tessera volumes create`)");
}

// CreateBody with the labels, annotations and registry credentials; nullopt (after saying why)
// for a malformed one.
std::optional<json> CreateBodyWithLabels(const CreateFlags& c) {
  json body = CreateBody(c);
  if (!AddRegistryAuth(c, body)) return std::nullopt;
  const auto labels = KeyValues(c.labels, "--label");
  const auto annotations = KeyValues(c.annotations, "--annotation");
  if (!labels || !annotations) return std::nullopt;
  if (!labels->empty()) body["labels"] = *labels;
  if (!annotations->empty()) body["annotations"] = *annotations;
  const auto env = KeyValues(c.env, "--env");
  const auto refs = KeyValues(c.env_secrets, "--env-secret");
  if (!env || !refs) return std::nullopt;
  json all = *env;
  for (const auto& [name, secret] : refs->items()) all[name] = {{"secret", secret}};
  if (!all.empty()) body["env"] = std::move(all);
  for (const std::string& v : c.volumes) {
    const size_t colon = v.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == v.size()) {
      std::cerr << "tessera: --volume: '" << EscapeForTerminal(v) << "' is not NAME:PATH\n";
      return std::nullopt;
    }
    body["volumes"].push_back({{"name", v.substr(0, colon)}, {"path", v.substr(colon + 1)}});
  }
  return body;
}

void RegisterClientCommands(CLI::App& app, Context& ctx) {
  RegisterInstances(app, ctx);
  RegisterTenants(app, ctx);
  RegisterNodes(app, ctx);
  RegisterAlerts(app, ctx);
  RegisterBilling(app, ctx);
  RegisterGroups(app, ctx);
  RegisterStacks(app, ctx);
  RegisterRecommend(app, ctx);
  RegisterIdentityCommands(app, ctx);
  RegisterVolumeCommands(app, ctx);
}

}  // namespace tessera::cli
