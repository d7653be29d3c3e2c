// Shared by the client commands (client_cmd.cc, node_cmd.cc, alert_cmd.cc, billing_cmd.cc,
// group_cmd.cc): each family's registration, and the helpers more than one family uses.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "cli/client.h"
#include "common/result.h"

namespace tessera::cli {

struct CreateFlags {
  std::string billing = "on_demand", type, gpu_model, mig_profile, name, command;
  std::string image, pull_policy, registry_username, registry_password_file;
  int gpus = 0, milli_gpu = 0;
  int64_t vcpus = 0, memory_mib = 0, gpu_memory_mib = 0;
  bool no_restart = false;
  bool migratable = false;
  std::vector<std::string> labels, annotations;
  std::vector<std::string> env, env_secrets, volumes;
  std::vector<int> ports;
  std::string registry_password_secret;
};

// A tenant's name from `names` (TenantNamesForAdmin's), else its id.
std::string TenantName(const std::map<std::string, std::string>& names, const std::string& id);
// The tenants' names by id when `f`'s token is the admin's (its listings span tenants); empty
// otherwise.
std::map<std::string, std::string> TenantNamesForAdmin(const ClientFlags& f);
// The options of an instance's shape and workload (instances create, groups create).
void AddCreateOptions(CLI::App* create, CreateFlags& c);
// An instance's create body from the flags, with the labels, annotations and registry
// credentials; nullopt (after saying why) for a malformed one.
std::optional<nlohmann::json> CreateBodyWithLabels(const CreateFlags& c);
// A duration flag in whole seconds: "90s", "5m", "1h", or a bare number of seconds.
Result<int64_t> WholeSeconds(const std::string& text, const std::string& flag);

void RegisterNodes(CLI::App& app, Context& ctx);
void RegisterAlerts(CLI::App& app, Context& ctx);
void RegisterBilling(CLI::App& app, Context& ctx);
void RegisterRecommend(CLI::App& app, Context& ctx);
void RegisterGroups(CLI::App& app, Context& ctx);
// plan, apply, destroy and stacks (stack_cmd.cc).
void RegisterStacks(CLI::App& app, Context& ctx);

}  // namespace tessera::cli
