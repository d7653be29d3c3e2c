// Client commands for volumes (docs/volumes.md):
//   tessera volumes create|list|get|delete
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "cli/cli.h"
#include "cli/client.h"
#include "cli/table.h"

namespace tessera::cli {

namespace {

using nlohmann::json;

// Bytes as people read them: 1.5 GiB, 12 MiB.
std::string Bytes(const json& v) {
  if (!v.is_number_integer()) return "-";
  const double b = v.get<double>();
  if (b >= double(1 << 30)) return fmt::format("{:.1f} GiB", b / double(1 << 30));
  if (b >= double(1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  return fmt::format("{} B", v.get<int64_t>());
}

void PrintVolumes(const json& list) {
  Table t({"NAME", "ID", "SIZE", "USED", "NODE", "SHARED", "STATE", "ATTACHED TO"});
  for (const json& v : list) {
    std::string attached;
    for (const json& id : v.value("attached_to", json::array())) {
      if (!attached.empty()) attached += ',';
      attached += id.get<std::string>();
    }
    std::string used = v.contains("used_bytes") ? Bytes(v["used_bytes"]) : "-";
    if (v.contains("size_enforced") && !v["size_enforced"].get<bool>()) used += " (not enforced)";
    t.AddRow({Str(v, "name"), Str(v, "id"), Str(v, "size_gib") + " GiB", used, Str(v, "node"),
              Str(v, "shared"), Str(v, "state"), attached.empty() ? "-" : attached});
  }
  t.Print(std::cout);
}

}  // namespace

void RegisterVolumeCommands(CLI::App& app, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  struct VolumeFlags {
    std::string name, node;
    int64_t size_gib = 0;
    bool shared = false;
  };
  auto v = std::make_shared<VolumeFlags>();
  CLI::App* group =
      app.add_subcommand("volumes", "A tenant's volumes: storage that outlives its instances");
  group->require_subcommand(1);
  CLI::App* create = group->add_subcommand("create", "Create a volume (billed until deleted)");
  AddCommon(create, *f);
  create->add_option("NAME", v->name, "The volume's name")->required();
  create->add_option("--size-gib", v->size_gib, "Its size in GiB")->required();
  create->add_option("--node", v->node,
                     "The node it lives on (default: the node of the first instance placed "
                     "with it)");
  create->add_flag("--shared", v->shared,
                   "Several instances on its node may mount it at once, read-write");
  create->callback([f, v, &ctx] {
    json body = {{"name", v->name}, {"size_gib", v->size_gib}};
    if (!v->node.empty()) body["node"] = v->node;
    if (v->shared) body["shared"] = true;
    ctx.exit_code = Show(*f, Call(*f, "POST", "/v1/volumes", &body),
                         [](const json& j) { PrintVolumes(json::array({j})); });
  });
  CLI::App* list = group->add_subcommand("list", "List volumes (an admin sees all)");
  AddCommon(list, *f);
  list->callback([f, &ctx] {
    ctx.exit_code =
        Show(*f, Call(*f, "GET", "/v1/volumes"), [](const json& j) { PrintVolumes(j["volumes"]); });
  });
  CLI::App* get = group->add_subcommand("get", "Show a volume");
  AddCommon(get, *f);
  get->add_option("NAME", v->name, "The volume's name")->required();
  get->callback([f, v, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "GET", "/v1/volumes/" + Encode(v->name)),
                         [](const json& j) { PrintVolumes(json::array({j})); });
  });
  CLI::App* del = group->add_subcommand(
      "delete", "Delete a volume and its data (refused while an instance mounts it)");
  AddCommon(del, *f);
  del->add_option("NAME", v->name, "The volume's name")->required();
  del->callback([f, v, &ctx] {
    ctx.exit_code = Show(*f, Call(*f, "DELETE", "/v1/volumes/" + Encode(v->name)),
                         [](const json& j) { PrintVolumes(json::array({j})); });
  });
}

}  // namespace tessera::cli
