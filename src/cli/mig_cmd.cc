// `tessera mig check` and `tessera mig plan`: the MIG rules and planner on the command line, with
// the profile tables taken from the catalog. A verdict (`valid`, `invalid: ...`) goes to stdout;
// errors, including "no room", go to stderr.
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "mig/mig.h"

namespace tessera::cli {
namespace {

constexpr const char* kTermsHelp =
    "MODEL is a catalog GPU model id, e.g. H100-80GB (an unknown one gets the list of\n"
    "MIG-capable models). PROFILE is NVIDIA's profile name on that model (e.g. 3g.40gb,\n"
    "1g.10gb+me). START is the first memory slice an instance occupies, as in\n"
    "`nvidia-smi mig -lgipp` ({0,4}:4 means a 3g may start at slice 0 or 4).";

struct MigArgs {
  std::string gpu;
  std::string catalog_dir;
  std::vector<std::string> tokens;
  bool existing = false;  // plan: `--existing` was given.
};

std::string MigModels(const catalog::Catalog& c) {
  std::string out;
  for (const catalog::GpuModel& g : c.gpus()) {
    if (g.mig == nullptr) continue;
    if (!out.empty()) out += ", ";
    out += g.id;
  }
  return out;
}

// Loads the catalog, finds the model's MIG table and runs `body` on it. Prints the error and
// returns the exit code when the catalog does not load or the model has no MIG table.
template <typename Body>
int WithTable(const char* command, const MigArgs& a, Body body) {
  Result<catalog::Catalog> c = a.catalog_dir.empty() ? catalog::Catalog::LoadEmbedded()
                                                     : catalog::Catalog::LoadDir(a.catalog_dir);
  if (!c.ok()) {
    std::cerr << command << ": cannot load the catalog:\n" << c.status().message() << "\n";
    return kExitFailure;
  }
  const catalog::GpuModel* g = c->FindGpu(a.gpu);
  if (g == nullptr || g->mig == nullptr) {
    std::cerr << command << ": "
              << (g == nullptr ? "unknown GPU model '" + a.gpu + "'"
                               : "GPU model '" + g->id + "' does not support MIG")
              << "; MIG-capable models: " << MigModels(*c) << "\n";
    return kExitUsage;
  }
  return body(*g->mig);
}

int RunCheck(const MigArgs& a, const mig::Table& t) {
  std::vector<mig::Placement> layout;
  for (const std::string& token : a.tokens) {
    Result<mig::Placement> p = mig::ParsePlacement(t, token);
    if (!p.ok()) {
      std::cerr << "tessera mig check: " << p.status().message() << "\n";
      return kExitUsage;
    }
    layout.push_back(*p);
  }
  const Status s = mig::CheckLayout(t, layout);
  if (s.ok()) {
    std::cout << "valid\n";
    return kExitOk;
  }
  std::cout << "invalid: " << s.message() << "\n";
  return kExitFailure;
}

int RunPlan(const MigArgs& a, const mig::Table& t) {
  Result<mig::PlanRequest> request = mig::ParsePlanTokens(t, a.tokens, a.existing);
  if (!request.ok()) {
    std::cerr << "tessera mig plan: " << request.status().message() << "\n";
    return kExitUsage;
  }
  Result<std::vector<mig::Placement>> plan = mig::Plan(t, request->existing, request->add);
  if (!plan.ok()) {
    std::cerr << "tessera mig plan: " << plan.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << mig::FormatLayout(*plan) << "\n";
  return kExitOk;
}

void AddCommonOptions(CLI::App& cmd, MigArgs& a) {
  cmd.add_option("--gpu", a.gpu, "The GPU model, a catalog id such as H100-80GB")
      ->type_name("MODEL")
      ->required();
  cmd.add_option("--catalog", a.catalog_dir,
                 "Read the catalog from this directory instead of the built-in one")
      ->type_name("DIR");
}

}  // namespace

void RegisterMigCommands(CLI::App& app, Context& ctx) {
  CLI::App* mig =
      app.add_subcommand("mig", "Check MIG layouts and plan where new MIG instances go on a GPU");
  mig->require_subcommand(1);
  mig->footer(kTermsHelp);

  // The options live as long as the App, which main() keeps until the callbacks have run.
  auto check_args = std::make_shared<MigArgs>();
  CLI::App* check = mig->add_subcommand(
      "check", "Say whether the instances PROFILE@START ... form a valid layout on one GPU");
  AddCommonOptions(*check, *check_args);
  check->add_option("instances", check_args->tokens, "The layout's instances")
      ->type_name("PROFILE@START")
      ->required();
  check->footer(std::string("Prints `valid` and exits 0, or `invalid: ` with the rule broken and\n"
                            "the instances involved and exits 1.\n") +
                kTermsHelp);
  check->callback([&ctx, check_args] {
    ctx.exit_code = WithTable("tessera mig check", *check_args,
                              [&](const mig::Table& t) { return RunCheck(*check_args, t); });
  });

  auto plan_args = std::make_shared<MigArgs>();
  CLI::App* plan = mig->add_subcommand(
      "plan", "Choose starts for new instances next to existing ones, keeping the most room free");
  AddCommonOptions(*plan, *plan_args);
  plan->add_flag("--existing", plan_args->existing,
                 "Marks the PROFILE@START tokens as instances already on the GPU; they stay put")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  plan->add_option("profiles", plan_args->tokens,
                   "The profiles to add, one instance each, and after --existing the instances "
                   "already there")
      ->type_name("PROFILE|PROFILE@START")
      ->required();
  plan->footer(
      std::string("Prints the whole layout as PROFILE@START tokens, the existing instances first\n"
                  "and then the new ones in the order given, and exits 0; when they do not fit,\n"
                  "exits 1 with the reason. Tokens with @START are existing instances, the others\n"
                  "profiles to add, e.g.\n"
                  "  tessera mig plan --gpu H100-80GB --existing 3g.40gb@4 1g.10gb 2g.20gb\n") +
      kTermsHelp);
  plan->callback([&ctx, plan_args] {
    ctx.exit_code = WithTable("tessera mig plan", *plan_args,
                              [&](const mig::Table& t) { return RunPlan(*plan_args, t); });
  });
}

}  // namespace tessera::cli
