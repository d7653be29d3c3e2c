// `tessera catalog list` and `tessera catalog validate`: show the product catalog and check a
// catalog directory before an operator deploys it.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "cli/cli.h"
#include "cli/table.h"

namespace tessera::cli {
namespace {

using catalog::Catalog;

constexpr std::string_view kKinds[] = {"gpus", "instance-types", "prices"};

// A figure, or "-" where the model has no such path or the figure is unknown.
std::string Figure(double x) { return x > 0 ? fmt::format("{}", x) : "-"; }

std::string GiB(int64_t mib) {
  return mib > 0 ? fmt::format("{}", static_cast<double>(mib) / 1024.0) : "-";
}

void ListGpus(const Catalog& c, std::ostream& out) {
  Table t({"ID", "ALIASES", "VENDOR", "ARCHITECTURE", "MEM_GIB", "BW_GB/S", "FP32", "TF32", "FP16",
           "FP8", "INT8", "TDP_W", "NVLINK_GB/S", "MIG"});
  for (const catalog::GpuModel& g : c.gpus()) {
    t.AddRow({g.id, g.aliases.empty() ? "-" : fmt::format("{}", fmt::join(g.aliases, ",")),
              g.vendor, g.architecture, GiB(g.memory_mib), Figure(g.memory_bandwidth_gbps),
              Figure(g.fp32_tflops), Figure(g.tf32_tflops), Figure(g.fp16_tflops),
              Figure(g.fp8_tflops), Figure(g.int8_tops), Figure(g.tdp_watts), Figure(g.nvlink_gbps),
              g.mig ? fmt::format("yes ({} profiles)", g.mig->profiles.size()) : "no"});
  }
  t.Print(out);
}

// What one instance of the type holds of its GPU model.
std::string GpuShare(const catalog::InstanceType& it) {
  switch (it.sharing) {
    case catalog::SharingMode::kExclusive:
      return fmt::format("{}", it.gpus);
    case catalog::SharingMode::kMig:
      return it.mig_profile;
    case catalog::SharingMode::kShared:
      return it.gpu_memory_mib > 0
                 ? fmt::format("{}m, {} GiB cap", it.milli_gpu, GiB(it.gpu_memory_mib))
                 : fmt::format("{}m", it.milli_gpu);
  }
  return "?";
}

void ListInstanceTypes(const Catalog& c, std::ostream& out) {
  Table t({"ID", "FAMILY", "MODE", "GPU_MODEL", "GPU", "NVLINK", "VCPUS", "MEM_GIB"});
  for (const catalog::InstanceType& it : c.instance_types()) {
    t.AddRow({it.id, it.family, std::string(catalog::SharingModeName(it.sharing)), it.gpu_model,
              GpuShare(it), it.nvlink ? "yes" : "no", std::to_string(it.vcpus),
              GiB(it.memory_mib)});
  }
  t.Print(out);
}

void ListPrices(const Catalog& c, std::ostream& out) {
  Table t(
      {"INSTANCE_TYPE", "ON_DEMAND_USD/H", "RESERVED_1Y_USD/H", "RESERVED_3Y_USD/H", "SPOT_USD/H"});
  for (const catalog::Price& p : c.prices()) {
    t.AddRow({p.instance_type, p.on_demand_per_hour.ToString(), p.reserved_1y_per_hour.ToString(),
              p.reserved_3y_per_hour.ToString(), p.spot_per_hour.ToString()});
  }
  t.Print(out);
}

struct ListOptions {
  std::string kind = "gpus";
  std::string dir;  // Empty: the catalog embedded in the binary.
};

int RunList(const ListOptions& o) {
  if (std::find(std::begin(kKinds), std::end(kKinds), o.kind) == std::end(kKinds)) {
    std::cerr << fmt::format("tessera catalog list: unknown kind '{}' (valid kinds: {})\n", o.kind,
                             fmt::join(kKinds, ", "));
    return kExitUsage;
  }
  Result<Catalog> c = o.dir.empty() ? Catalog::LoadEmbedded() : Catalog::LoadDir(o.dir);
  if (!c.ok()) {
    std::cerr << c.status().message() << "\n";
    return kExitFailure;
  }
  if (o.kind == "gpus") ListGpus(*c, std::cout);
  if (o.kind == "instance-types") ListInstanceTypes(*c, std::cout);
  if (o.kind == "prices") ListPrices(*c, std::cout);
  return kExitOk;
}

int RunValidate(const std::string& dir) {
  const std::vector<std::string> errors = Catalog::ValidateDir(dir);
  if (!errors.empty()) {
    for (const std::string& e : errors) std::cerr << e << "\n";
    std::cerr << fmt::format("catalog {} is invalid: {} error{}\n", dir, errors.size(),
                             errors.size() == 1 ? "" : "s");
    return kExitFailure;
  }
  Result<Catalog> c = Catalog::LoadDir(dir);
  if (!c.ok()) {  // Not expected after a clean validation, but never print counts of nothing.
    std::cerr << c.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << fmt::format(
      "catalog {} is valid: {} GPU models, {} MIG tables, {} instance types, {} prices\n", dir,
      c->gpus().size(), c->mig_table_count(), c->instance_types().size(), c->prices().size());
  return kExitOk;
}

}  // namespace

void RegisterCatalogCommands(CLI::App& app, Context& ctx) {
  CLI::App* cmd = app.add_subcommand(
      "catalog", "Show or check the catalog: GPU models, MIG tables, instance types and prices");
  cmd->require_subcommand(1);

  auto list_opts = std::make_shared<ListOptions>();
  CLI::App* list = cmd->add_subcommand("list",
                                       "Print the catalog's GPU models, instance types or "
                                       "prices as an aligned table");
  list->add_option("--kind", list_opts->kind, "What to list: gpus, instance-types or prices")
      ->capture_default_str();
  list->add_option("--catalog", list_opts->dir,
                   "Read the catalog from this directory instead of the copy built into tessera");
  list->footer("Prices are USD per hour. See docs/catalog.md for every field.");
  list->callback([&ctx, list_opts] { ctx.exit_code = RunList(*list_opts); });

  auto dir = std::make_shared<std::string>("catalog");
  CLI::App* validate = cmd->add_subcommand(
      "validate", "Check a catalog directory and print every problem found, one per line");
  validate->add_option("dir", *dir, "The catalog directory")->capture_default_str();
  validate->footer(
      "Exit status: 0 when valid, 1 when the directory is missing or has errors (on stderr).");
  validate->callback([&ctx, dir] { ctx.exit_code = RunValidate(*dir); });
}

}  // namespace tessera::cli
