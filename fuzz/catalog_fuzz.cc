// Fuzzes the catalog's parser and validator (Catalog::ParseTexts, src/catalog/catalog.h). The
// input is the data files in Catalog::DataFiles() order (gpus.json, mig.json,
// instance_types.json, prices.json), separated by lines of "---"; files past the input are
// missing. A rejected catalog gets a message that starts with a file's name; an accepted one keeps
// the promises the rest of Tessera relies on:
//   - every model id and alias resolves to its model, and every MIG table belongs to its model;
//   - each MIG profile fits alone at each of its starts, and the planner can place it;
//   - every instance type names a known model (and, for MIG, one of its profiles) and has a price;
//   - prices are above zero, commitments and spot never cost more than on-demand, and every
//     amount prints and parses back the same.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "common/money.h"
#include "fuzz/fuzz_util.h"
#include "mig/mig.h"

namespace tessera::fuzz {
namespace {

constexpr std::string_view kSeparator = "\n---\n";

std::map<std::string, std::string, std::less<>> SplitFiles(std::string_view text) {
  std::map<std::string, std::string, std::less<>> files;
  bool more = true;
  for (const std::string& name : catalog::Catalog::DataFiles()) {
    if (!more) break;
    const size_t end = text.find(kSeparator);
    files[name] = std::string(text.substr(0, end));
    more = end != std::string_view::npos;
    if (more) text.remove_prefix(end + kSeparator.size());
  }
  return files;
}

void CheckError(const Status& s) {
  Check(!s.ok() && !s.message().empty(), "a rejected catalog has no message");
  bool named = false;
  for (const std::string& name : catalog::Catalog::DataFiles()) {
    named = named || s.message().rfind(name + ": ", 0) == 0;
  }
  if (!named) std::fprintf(stderr, "message: %s\n", s.message().c_str());
  Check(named, "a catalog error does not start with a file name");
}

void CheckMigTable(const catalog::GpuModel& g) {
  const mig::Table& t = *g.mig;
  Check(t.model == g.id, "a MIG table is attached to another model");
  for (const mig::Profile& p : t.profiles) {
    Check(!p.starts.empty(), "a MIG profile has no start");
    for (int start : p.starts) {
      const Status s = mig::CheckLayout(t, {{&p, start}});
      if (!s.ok()) std::fprintf(stderr, "%s: %s\n", t.model.c_str(), s.ToString().c_str());
      Check(s.ok(), "a MIG profile does not fit alone at one of its starts");
    }
    Result<std::vector<mig::Placement>> plan = mig::Plan(t, {}, {&p});
    Check(plan.ok() && plan->size() == 1, "the planner cannot place a profile on an empty GPU");
  }
}

void CheckMoney(Money m) {
  Result<Money> again = Money::Parse(m.ToString(6));
  Check(again.ok() && *again == m, "a price does not print and parse back the same");
}

void CheckCatalog(const catalog::Catalog& c) {
  for (const catalog::GpuModel& g : c.gpus()) {
    Check(c.FindGpu(g.id) == &g, "a model id does not resolve to its model");
    for (const std::string& alias : g.aliases) {
      Check(c.FindGpu(alias) == &g, "an alias does not resolve to its model");
    }
    if (g.mig != nullptr) CheckMigTable(g);
  }
  for (const catalog::InstanceType& t : c.instance_types()) {
    Check(c.FindInstanceType(t.id) == &t, "an instance type id does not resolve");
    const catalog::GpuModel* g = c.FindGpu(t.gpu_model);
    Check(g != nullptr && g->id == t.gpu_model, "an instance type names an unknown model");
    switch (t.sharing) {
      case catalog::SharingMode::kExclusive:
        Check(t.gpus >= 1, "an exclusive type has no GPU");
        break;
      case catalog::SharingMode::kMig:
        Check(g->mig != nullptr && g->mig->Find(t.mig_profile) != nullptr,
              "a MIG type names a profile its model lacks");
        break;
      case catalog::SharingMode::kShared:
        Check(t.milli_gpu >= 1 && t.milli_gpu <= 999, "a shared type's share is out of range");
        break;
    }
    const catalog::Price* p = c.FindPrice(t.id);
    Check(p != nullptr && p->instance_type == t.id, "an instance type has no price");
  }
  for (const catalog::Price& p : c.prices()) {
    Check(p.on_demand_per_hour > Money() && p.reserved_1y_per_hour > Money() &&
              p.reserved_3y_per_hour > Money() && p.spot_per_hour > Money(),
          "a price is not above zero");
    Check(p.reserved_1y_per_hour <= p.on_demand_per_hour &&
              p.reserved_3y_per_hour <= p.reserved_1y_per_hour &&
              p.spot_per_hour <= p.on_demand_per_hour,
          "a commitment or spot costs more than on-demand");
    for (Money m :
         {p.on_demand_per_hour, p.reserved_1y_per_hour, p.reserved_3y_per_hour, p.spot_per_hour}) {
      CheckMoney(m);
    }
  }
}

void FuzzOne(std::string_view text) {
  Result<catalog::Catalog> c = catalog::Catalog::ParseTexts(SplitFiles(text));
  if (!c.ok()) {
    CheckError(c.status());
    return;
  }
  CheckCatalog(*c);
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
