// Client commands: `tessera instances|tenants|nodes ...` speak to a running server's REST API.
// They take --url or TESSERA_URL, --token or TESSERA_TOKEN and, for an https URL whose
// certificate no system authority signed, --ca or TESSERA_CA; they print aligned tables or, with
// -o json, the server's JSON. An error is printed as the server's message, with exit code 1
// (2 for bad usage). Whatever the server sent is escaped before it reaches the terminal, so a
// name or command cannot move the cursor, change colours or hide text.
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

// A tenant's name from `names` (TenantNamesForAdmin's), else its id.
std::string TenantName(const std::map<std::string, std::string>& names, const std::string& id) {
  auto it = names.find(id);
  return it != names.end() && !it->second.empty() ? it->second : id;
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

struct CreateFlags {
  std::string billing = "on_demand", type, gpu_model, mig_profile, name, command;
  std::string image, pull_policy, registry_username, registry_password_file;
  int gpus = 0, milli_gpu = 0;
  int64_t vcpus = 0, memory_mib = 0, gpu_memory_mib = 0;
  bool no_restart = false;
  std::vector<std::string> labels, annotations;
  std::vector<std::string> env, env_secrets, volumes;
  std::vector<int> ports;
  std::string registry_password_secret;
};

json CreateBody(const CreateFlags& c) {
  json body = {{"billing", c.billing}};
  if (!c.name.empty()) body["name"] = c.name;
  if (!c.command.empty()) body["command"] = c.command;
  if (!c.image.empty()) body["image"] = c.image;
  if (!c.pull_policy.empty()) body["pull_policy"] = c.pull_policy;
  if (c.no_restart) body["restart"] = false;
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

}  // namespace

void PrintAlerts(const json& alerts) {
  Table t({"STATE", "ALERT", "SEVERITY", "NODE", "GPU", "INSTANCE", "VALUE", "SINCE", "SUMMARY"});
  for (const json& a : alerts) {
    const json& l = a["labels"];
    t.AddRow({Str(a, "state"), Str(l, "alertname"), Str(l, "severity"), Str(l, "Hostname"),
              Str(l, "gpu"), Str(l, "tessera_instance"),
              a["value"].is_number() ? fmt::format("{:g}", a["value"].get<double>()) : "-",
              a["fired_at"].is_string() ? Str(a, "fired_at") : Str(a, "active_at"),
              Str(a["annotations"], "summary")});
  }
  t.Print(std::cout);
}

void PrintRules(const json& rules) {
  Table t({"ID", "NAME", "CONDITION", "FOR", "SEVERITY", "MATCHERS", "NOTIFY"});
  for (const json& r : rules) {
    std::vector<std::string> matchers, notify;
    for (const auto& [k, v] : r["matchers"].items())
      matchers.push_back(k + "=" + v.get<std::string>());
    for (const json& n : r["notify"])
      notify.push_back(n.begin().key() + ":" + n.begin()->get<std::string>());
    t.AddRow(
        {Str(r, "id"), Str(r, "name"),
         fmt::format("{} {} {:g}", Str(r, "metric"), Str(r, "op"), r["threshold"].get<double>()),
         fmt::format("{}s", r["for_seconds"].get<int64_t>()), Str(r, "severity"),
         matchers.empty() ? "-" : fmt::format("{}", fmt::join(matchers, ",")),
         notify.empty() ? "-" : fmt::format("{}", fmt::join(notify, " "))});
  }
  t.Print(std::cout);
}

// A duration flag in whole seconds: "90s", "5m", "1h", or a bare number of seconds (as these
// flags always took).
Result<int64_t> WholeSeconds(const std::string& text, const std::string& flag) {
  if (!text.empty() && text.size() <= 9 &&
      text.find_first_not_of("0123456789") == std::string::npos) {
    return std::stoll(text);
  }
  TESSERA_ASSIGN_OR_RETURN(Duration d, ParseDuration(text, flag));
  if (d % std::chrono::seconds(1) != Duration::zero()) {
    return Status::InvalidArgument(
        fmt::format("{}: '{}' is not a whole number of seconds", flag, text));
  }
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

void RegisterAlerts(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* group = app.add_subcommand("alerts", "Alerts and alert rules (docs/alerts.md)");
  group->require_subcommand(1);
  CLI::App* list = group->add_subcommand("list", "List alerts (a tenant sees its own)");
  AddCommon(list, *f);
  auto state = std::make_shared<std::string>();
  list->add_option("--state", *state, "pending, firing or resolved");
  list->callback([f, state, &ctx] {
    const std::string path = "/v1/alerts" + (state->empty() ? "" : "?state=" + Encode(*state));
    ctx.exit_code =
        Show(*f, Call(*f, "GET", path), [](const json& j) { PrintAlerts(j["alerts"]); });
  });

  CLI::App* rules = group->add_subcommand("rules", "Create, list and delete alert rules");
  rules->require_subcommand(1);
  CLI::App* rlist = rules->add_subcommand("list", "List alert rules");
  AddCommon(rlist, *f);
  rlist->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/alert-rules"), [](const json& j) { PrintRules(j["rules"]); });
  });
  struct RuleFlags {
    std::string name, metric, op, severity = "warning", summary;
    double threshold = 0;
    std::string for_text = "0", keep_firing_for_text = "0";
    std::vector<std::string> matchers, webhooks, emails;
  };
  auto r = std::make_shared<RuleFlags>();
  CLI::App* create = rules->add_subcommand("create", "Create an alert rule");
  AddCommon(create, *f);
  create->add_option("--name", r->name, "The alertname")->required();
  create->add_option("--metric", r->metric, "A series name, e.g. DCGM_FI_DEV_GPU_TEMP")->required();
  create->add_option("--op", r->op, "> >= < <= == !=")->required();
  create->add_option("--threshold", r->threshold, "The value compared with")->required();
  create->add_option("--for", r->for_text,
                     "How long the condition must hold before firing: 90s, 5m, 1h (a bare number "
                     "is seconds)");
  create->add_option("--keep-firing-for", r->keep_firing_for_text,
                     "How long an alert keeps firing after the condition stops holding (90s, 5m)");
  create->add_option("--severity", r->severity, "critical, warning or info");
  create->add_option("--summary", r->summary,
                     "Annotation; may use {{ $value }}, {{ $labels.gpu }}");
  create->add_option("-m,--match", r->matchers, "LABEL=VALUE the series must carry (repeatable)");
  create->add_option("--webhook", r->webhooks, "Webhook URL to notify (repeatable)");
  create->add_option("--email", r->emails, "Address to email (repeatable; needs server --smtp)");
  create->callback([f, r, &ctx] {
    auto matchers = KeyValues(r->matchers, "--match");
    auto for_s = WholeSeconds(r->for_text, "--for");
    auto keep_s = WholeSeconds(r->keep_firing_for_text, "--keep-firing-for");
    for (const Status& s : {for_s.status(), keep_s.status()}) {
      if (!s.ok()) std::cerr << "tessera: " << EscapeForTerminal(s.message()) << "\n";
    }
    if (!matchers || !for_s.ok() || !keep_s.ok()) {
      ctx.exit_code = kExitUsage;
      return;
    }
    json notify = json::array();
    for (const std::string& w : r->webhooks) notify.push_back({{"webhook", w}});
    for (const std::string& e : r->emails) notify.push_back({{"email", e}});
    json body = {
        {"name", r->name},           {"metric", r->metric},   {"op", r->op},
        {"threshold", r->threshold}, {"for_seconds", *for_s}, {"keep_firing_for_seconds", *keep_s},
        {"severity", r->severity},   {"matchers", *matchers}, {"notify", notify}};
    if (!r->summary.empty()) body["annotations"] = {{"summary", r->summary}};
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/alert-rules", &body),
                         [](const json& j) { PrintRules(json::array({j})); });
  });
  auto id = std::make_shared<std::string>();
  CLI::App* del = rules->add_subcommand("delete", "Delete an alert rule (its alerts resolve)");
  AddCommon(del, *f);
  del->add_option("ID", *id, "The rule's id")->required();
  del->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "DELETE", "/v1/alert-rules/" + Encode(*id)),
                         [](const json& j) { std::cout << "deleted " << Str(j, "id") << "\n"; });
  });
}

// A billing report's items as a table: the columns its grouping gave.
void PrintReport(const json& body) {
  static const std::vector<std::pair<const char*, const char*>> kColumns = {
      {"instance", "INSTANCE"},       {"instance_type", "TYPE"}, {"billing", "BILLING"},
      {"reservation", "RESERVATION"}, {"user", "USER"},          {"day", "DAY"},
      {"rate_usd_per_hour", "RATE/H"}};
  const json& items = body["items"];
  if (items.empty()) {
    // An empty table with a total of 0 reads as a broken report: say what it means.
    std::cout << "nothing was billed"
              << (body.contains("month")  ? " in " + Str(body, "month")
                  : body.contains("from") ? " from " + Str(body, "from") + " to " + Str(body, "to")
                                          : std::string())
              << " (total " << Str(body, "total_usd") << " USD)\n";
    return;
  }
  std::vector<std::string> header;
  std::vector<const char*> keys;
  for (const auto& [key, title] : kColumns) {
    if (!items.empty() && items[0].contains(key)) {
      header.emplace_back(title);
      keys.push_back(key);
    }
  }
  // Seconds of use; a reservation's term, used or not, in a column of its own where there is one.
  const bool reserved = std::any_of(items.begin(), items.end(), [](const json& i) {
    return i.contains("reserved_unit_seconds");
  });
  header.emplace_back("SECONDS USED");
  if (reserved) header.emplace_back("RESERVED UNIT-SECONDS");
  header.emplace_back("AMOUNT (USD)");
  Table t(header);
  for (const json& i : items) {
    std::vector<std::string> row;
    for (const char* key : keys) row.push_back(Str(i, key));
    row.push_back(std::to_string(i["seconds"].get<int64_t>()));
    if (reserved) row.push_back(std::to_string(i.value("reserved_unit_seconds", int64_t{0})));
    row.push_back(Str(i, "amount_usd") + (i.value("open", false) ? " (running)" : ""));
    t.AddRow(std::move(row));
  }
  std::vector<std::string> total(header.size(), "");
  total[0] = "TOTAL";
  total.back() = Str(body, "total_usd");
  t.AddRow(std::move(total));
  t.Print(std::cout);
}

// A billing report: a table, the JSON, or the server's CSV as it is.
int ShowReport(const ClientFlags& f, const std::string& path) {
  if (f.output == "csv") {
    auto r = Call(f, "GET", path, nullptr, "text/csv");
    if (!r) return kExitFailure;
    std::cout << r->text;
    return kExitOk;
  }
  return Show(f, Call(f, "GET", path), PrintReport);
}

void PrintReservations(const json& list) {
  Table t({"ID", "TYPE", "COUNT", "USED", "TERM", "START", "END", "RATE/H", "COMMITMENT (USD)",
           "CANCELLABLE UNTIL"});
  for (const json& r : list) {
    t.AddRow({r.value("dry_run", false) ? "(dry run)" : Str(r, "id"), Str(r, "instance_type"),
              std::to_string(r.value("count", 0)), std::to_string(r.value("used", 0)),
              Str(r, "term"), Str(r, "start"), Str(r, "end"), Str(r, "rate_usd_per_hour"),
              Str(r, "commitment_usd"), Str(r, "cancellable_until")});
  }
  t.Print(std::cout);
}

void PrintBudgets(const json& list) {
  Table t({"TENANT", "MONTH", "BUDGET (USD)", "SPENT (USD)", "USED", "HARD STOP"});
  for (const json& b : list) {
    t.AddRow({Str(b, "tenant"), Str(b, "month"), Str(b, "monthly_usd"), Str(b, "spent_usd"),
              fmt::format("{:.2f}%", b["used_percent"].get<double>()),
              b["hard_stop"].get<bool>() ? "yes" : "no"});
  }
  t.Print(std::cout);
}

// GET /v1/reports/cost as tables: per tenant (by name, for the admin), per instance type with the
// reservation that would have paid, and the admin's idle capacity per GPU model.
void PrintCostReport(const json& r, const std::map<std::string, std::string>& names) {
  std::cout << fmt::format(
      "cost report from {} to {}{}\n", Str(r, "from"), Str(r, "to"),
      r.value("clamped_start", false) ? " (from the fleet's first start)" : "");
  auto util = [](const json& row) {
    const json& v = row.value("mean_gpu_util_percent", json());
    return v.is_number() ? fmt::format("{:.1f}%", v.get<double>()) : std::string("-");
  };
  const json tenants = r.value("tenants", json::array()),
             types = r.value("instance_types", json::array());
  if (tenants.empty()) {
    std::cout << "nothing was billed in this period\n";
  } else {
    std::cout << "\nby tenant\n";
    Table t({"TENANT", "GPU-HOURS", "COST (USD)", "MEAN UTIL", "USD/UTILIZED GPU-H",
             "SPOT WOULD SAVE"});
    for (const json& row : tenants) {
      t.AddRow({TenantName(names, Str(row, "tenant")), Str(row, "gpu_hours"), Str(row, "cost_usd"),
                util(row), Str(row, "cost_per_utilized_gpu_hour_usd"),
                Str(row, "spot_would_save_usd")});
    }
    t.Print(std::cout);
    std::cout << "\nby instance type\n";
    Table k({"TYPE", "GPU-HOURS", "COST (USD)", "MEAN UTIL", "USD/UTILIZED GPU-H",
             "SPOT WOULD SAVE", "1Y RESERVATION"});
    for (const json& row : types) {
      const json& resv = row.value("reservation_1y", json());
      k.AddRow({Str(row, "instance_type"), Str(row, "gpu_hours"), Str(row, "cost_usd"), util(row),
                Str(row, "cost_per_utilized_gpu_hour_usd"), Str(row, "spot_would_save_usd"),
                resv.is_object() ? fmt::format("{} units: {} USD, saves {}", resv.value("units", 0),
                                               Str(resv, "cost_usd"), Str(resv, "saves_usd"))
                                 : "-"});
    }
    k.Print(std::cout);
  }
  if (r.contains("idle")) {
    std::cout << "\nidle capacity\n";
    Table i({"GPU MODEL", "GPUS", "IDLE GPU-HOURS", "IDLE COST (USD)"});
    for (const json& row : r["idle"]) {
      i.AddRow({Str(row, "gpu_model"), Gpus(row.value("gpus", json())), Str(row, "idle_gpu_hours"),
                Str(row, "idle_cost_usd")});
    }
    i.Print(std::cout);
  }
}

void RegisterBilling(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct UsageFlags {
    std::string from, to, group_by = "instance", tenant;
  };
  auto u = std::make_shared<UsageFlags>();
  CLI::App* usage = app.add_subcommand("usage", "What was billed over a period (docs/billing.md)");
  AddCommon(usage, *f, /*csv=*/true);
  usage->add_option("--from", u->from, "YYYY-MM-DD or RFC 3339 (default: this month's start)");
  usage->add_option("--to", u->to, "YYYY-MM-DD or RFC 3339, excluded (default: now)");
  usage->add_option("--group-by", u->group_by, "instance, type, billing, day or user")
      ->check(CLI::IsMember({"instance", "type", "billing", "day", "user"}));
  usage->add_option("--tenant", u->tenant, "The tenant's id (admin; default: every tenant)");
  usage->callback([f, u, &ctx] {
    std::string path = "/v1/usage?group_by=" + Encode(u->group_by);
    if (!u->from.empty()) path += "&from=" + Encode(u->from);
    if (!u->to.empty()) path += "&to=" + Encode(u->to);
    if (!u->tenant.empty()) path += "&tenant=" + Encode(u->tenant);
    ctx.exit_code = ShowReport(*f, path);
  });

  auto period = std::make_shared<UsageFlags>();
  CLI::App* reports = app.add_subcommand("reports", "Reports over a period (docs/billing.md)");
  reports->require_subcommand(1);
  CLI::App* cost = reports->add_subcommand(
      "cost",
      "Cost, utilization and savings per tenant and instance type (the admin's: idle GPUs)");
  AddCommon(cost, *f);
  cost->add_option("--from", period->from, "YYYY-MM-DD or RFC 3339 (default: this month's start)");
  cost->add_option("--to", period->to, "YYYY-MM-DD or RFC 3339, excluded (default: now)");
  cost->callback([f, period, &ctx] {
    std::string path = "/v1/reports/cost";
    std::string sep = "?";
    for (const auto& [key, value] : {std::pair{"from", period->from}, {"to", period->to}}) {
      if (value.empty()) continue;
      path += sep + key + "=" + Encode(value);
      sep = "&";
    }
    const auto answer = Call(*f, "GET", path);
    const auto names = answer && f->output == "table" ? TenantNamesForAdmin(*f)
                                                      : std::map<std::string, std::string>{};
    ctx.exit_code = Show(*f, answer, [&names](const json& j) { PrintCostReport(j, names); });
  });

  CLI::App* invoices = app.add_subcommand("invoices", "Monthly invoices");
  invoices->require_subcommand(1);
  auto month = std::make_shared<std::string>();
  auto tenant = std::make_shared<std::string>();
  CLI::App* show = invoices->add_subcommand("show", "Show a month's invoice");
  AddCommon(show, *f, /*csv=*/true);
  show->add_option("MONTH", *month, "YYYY-MM")->required();
  show->add_option("--tenant", *tenant, "The tenant's id (admin)");
  show->callback([f, month, tenant, &ctx] {
    ctx.exit_code = ShowReport(*f, "/v1/invoices/" + Encode(*month) +
                                       (tenant->empty() ? "" : "?tenant=" + Encode(*tenant)));
  });

  CLI::App* resv = app.add_subcommand("reservations", "Reserve capacity for 1 or 3 years");
  resv->require_subcommand(1);
  struct ReserveFlags {
    std::string type, term, start;
    int count = 0;
    bool dry_run = false;
  };
  auto r = std::make_shared<ReserveFlags>();
  CLI::App* create = resv->add_subcommand("create", "Reserve units of an instance type");
  AddCommon(create, *f);
  create->add_option("--type", r->type, "Instance type, e.g. gpu.1xh100")->required();
  create->add_option("--count", r->count, "Units")->required()->check(CLI::Range(1, 10'000));
  create->add_option("--term", r->term, "1y or 3y")->required()->check(CLI::IsMember({"1y", "3y"}));
  create->add_option("--start", r->start, "RFC 3339 (default: now)");
  create->add_flag("--dry-run", r->dry_run,
                   "Show the price and the whole term's commitment; reserve nothing");
  create->callback([f, r, &ctx] {
    json body = {{"instance_type", r->type}, {"count", r->count}, {"term", r->term}};
    if (!r->start.empty()) body["start"] = r->start;
    if (r->dry_run) body["dry_run"] = true;
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/reservations", &body),
                         [](const json& j) { PrintReservations(json::array({j})); });
  });
  CLI::App* list = resv->add_subcommand("list", "List reservations");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/reservations"),
                         [](const json& j) { PrintReservations(j["reservations"]); });
  });
  auto id = std::make_shared<std::string>();
  CLI::App* del = resv->add_subcommand("delete", "Cancel a reservation before its start");
  AddCommon(del, *f);
  del->add_option("ID", *id, "The reservation's id")->required();
  del->callback([f, id, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "DELETE", "/v1/reservations/" + Encode(*id)),
                         [](const json& j) { std::cout << "cancelled " << Str(j, "id") << "\n"; });
  });

  CLI::App* budget = app.add_subcommand("budgets", "Monthly budgets and their spend");
  budget->require_subcommand(1);
  CLI::App* blist = budget->add_subcommand("list", "Budgets and this month's spend");
  AddCommon(blist, *f);
  blist->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/budgets"), [](const json& j) { PrintBudgets(j["budgets"]); });
  });
  struct BudgetFlags {
    std::string tenant, monthly;
    bool hard_stop = false;
  };
  auto b = std::make_shared<BudgetFlags>();
  CLI::App* set = budget->add_subcommand("set", "Set a tenant's monthly budget");
  AddCommon(set, *f);
  set->add_option("TENANT", b->tenant, "The tenant's id")->required();
  set->add_option("--monthly-usd", b->monthly, "e.g. 250 or 250.50")->required();
  set->add_flag("--hard-stop", b->hard_stop, "Refuse new on-demand and spot work once spent");
  set->callback([f, b, &ctx] {
    json body = {{"monthly_usd", b->monthly}, {"hard_stop", b->hard_stop}};
    ctx.exit_code = Show(*f, Call(*f, "PUT", "/v1/tenants/" + Encode(b->tenant) + "/budget", &body),
                         [](const json& j) { PrintBudgets(json::array({j})); });
  });
  CLI::App* unset = budget->add_subcommand("delete", "Remove a tenant's monthly budget");
  AddCommon(unset, *f);
  unset->add_option("TENANT", b->tenant, "The tenant's id")->required();
  unset->callback([f, b, &ctx] {
    ctx.exit_code = Show(
        *f, Call(*f, "DELETE", "/v1/tenants/" + Encode(b->tenant) + "/budget"), [&b](const json&) {
          std::cout << "budget of " << EscapeForTerminal(b->tenant) << " removed\n";
        });
  });
}

void RegisterRecommend(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct Flags {
    std::string workload = "training", memory, params, gpus, hours, months, budget;
    bool interruptible = false, nvlink = false;
  };
  auto r = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "recommend", "Which instance type and billing mode to rent for a workload (docs/billing.md)");
  AddCommon(cmd, *f);
  cmd->add_option("--workload", r->workload, "training, fine-tuning, inference, rendering or hpc")
      ->check(CLI::IsMember({"training", "fine-tuning", "inference", "rendering", "hpc"}));
  cmd->add_option("--gpu-memory-gib", r->memory, "Memory a GPU needs, in GiB");
  cmd->add_option("--model-params-b", r->params, "The model's size, in billions of parameters");
  cmd->add_option("--gpus", r->gpus, "GPUs (default: as many as the memory needs)");
  cmd->add_option("--hours-per-month", r->hours, "Hours of use a month (default 730)");
  cmd->add_option("--months", r->months, "The horizon, in months (default 1)");
  cmd->add_option("--budget-usd", r->budget, "The most to pay a month");
  cmd->add_flag("--interruptible", r->interruptible, "The work survives preemption (spot)");
  cmd->add_flag("--nvlink", r->nvlink, "All GPUs on one NVLink island");
  cmd->callback([f, r, &ctx] {
    std::string path = "/v1/recommend?workload=" + Encode(r->workload);
    for (const auto& [name, value] : {std::pair{"gpu_memory_gib", r->memory},
                                      {"model_params_b", r->params},
                                      {"gpus", r->gpus},
                                      {"hours_per_month", r->hours},
                                      {"months", r->months},
                                      {"budget_usd", r->budget}}) {
      if (!value.empty()) path += fmt::format("&{}={}", name, Encode(value));
    }
    if (r->interruptible) path += "&interruptible=true";
    if (r->nvlink) path += "&nvlink=true";
    auto answer = Call(*f, "GET", path);
    if (!answer) {
      ctx.exit_code = kExitFailure;
      return;
    }
    const json& offers = answer->body["offers"];
    if (offers.empty()) {
      std::cerr << "tessera: nothing fits: " << EscapeForTerminal(Str(answer->body, "why_none"))
                << "\n";
      ctx.exit_code = kExitFailure;
      return;
    }
    ctx.exit_code = Show(*f, answer, [](const json& j) {
      Table t({"TYPE", "BILLING", "GPUS", "MONTHLY (USD)", "PER TFLOPS-H", "NOW", "WHY"});
      for (const json& o : j["offers"]) {
        t.AddRow({Str(o, "instance_type"), Str(o, "billing"), std::to_string(o["gpus"].get<int>()),
                  Str(o, "monthly_usd"), Str(o, "per_tflops_hour_usd"),
                  !o.value("offered_here", true)   ? "not here"
                  : o["placeable_now"].get<bool>() ? "yes"
                                                   : "waits",
                  Str(o, "reason")});
      }
      t.Print(std::cout);
    });
  });
}

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

void RegisterClientCommands(CLI::App& app, Context& ctx) {
  RegisterInstances(app, ctx);
  RegisterTenants(app, ctx);
  RegisterNodes(app, ctx);
  RegisterAlerts(app, ctx);
  RegisterBilling(app, ctx);
  RegisterGroups(app, ctx);
  RegisterRecommend(app, ctx);
  RegisterIdentityCommands(app, ctx);
  RegisterVolumeCommands(app, ctx);
}

}  // namespace tessera::cli
