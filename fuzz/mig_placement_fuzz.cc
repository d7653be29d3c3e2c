// Fuzzes the MIG command-line parsing (src/mig/mig.h) on every MIG table of the embedded
// catalog. The input is whitespace-separated tokens, as `tessera mig check` and `tessera mig plan`
// receive them; a "--existing" token sets plan's flag. Invariants:
//   - ParsePlacement gives a placement of the table that prints and parses back the same, or
//     InvalidArgument / NotFound with a message;
//   - CheckLayout of parsed placements is OK or FailedPrecondition, never anything else;
//   - a plan from ParsePlanTokens' request is a valid layout that keeps the existing instances
//     first and adds one instance per profile asked for, in order; a refusal is FailedPrecondition
//     exactly when the existing instances are invalid, else ResourceExhausted.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "catalog/catalog_testing.h"
#include "fuzz/fuzz_util.h"
#include "mig/mig.h"

namespace tessera::fuzz {
namespace {

// More tokens only make the planner's explanation slower, not different.
constexpr size_t kMaxTokens = 24;

std::vector<std::string> Tokens(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size() && out.size() < kMaxTokens) {
    const size_t start = text.find_first_not_of(" \t\r\n", i);
    if (start == std::string_view::npos) break;
    size_t end = text.find_first_of(" \t\r\n", start);
    if (end == std::string_view::npos) end = text.size();
    out.emplace_back(text.substr(start, end - start));
    i = end;
  }
  return out;
}

bool InTable(const mig::Table& t, const mig::Profile* p) {
  for (const mig::Profile& q : t.profiles) {
    if (&q == p) return true;
  }
  return false;
}

void FuzzPlacements(const mig::Table& t, const std::vector<std::string>& tokens) {
  std::vector<mig::Placement> layout;
  for (const std::string& token : tokens) {
    Result<mig::Placement> p = mig::ParsePlacement(t, token);
    if (!p.ok()) {
      Check(p.status().code() == StatusCode::kInvalidArgument ||
                p.status().code() == StatusCode::kNotFound,
            "ParsePlacement failed with an unexpected code");
      Check(!p.status().message().empty(), "ParsePlacement failed without a message");
      continue;
    }
    Check(InTable(t, p->profile), "ParsePlacement returned a profile of another table");
    Check(p->start >= 0, "ParsePlacement returned a negative start");
    Result<mig::Placement> again = mig::ParsePlacement(t, p->ToString());
    Check(again.ok() && *again == *p, "a placement does not print and parse back the same");
    layout.push_back(*p);
  }
  const Status s = mig::CheckLayout(t, layout);
  Check(s.ok() || (s.code() == StatusCode::kFailedPrecondition && !s.message().empty()),
        "CheckLayout of parsed placements failed with an unexpected code or no message");
}

void FuzzPlan(const mig::Table& t, const std::vector<std::string>& tokens, bool existing_allowed) {
  Result<mig::PlanRequest> request = mig::ParsePlanTokens(t, tokens, existing_allowed);
  if (!request.ok()) {
    Check(!request.status().message().empty(), "ParsePlanTokens failed without a message");
    return;
  }
  Check(!request->add.empty(), "ParsePlanTokens returned nothing to add");
  Check(existing_allowed || request->existing.empty(), "a start passed without --existing");
  const Status existing_valid = mig::CheckLayout(t, request->existing);
  Result<std::vector<mig::Placement>> plan = mig::Plan(t, request->existing, request->add);
  if (!plan.ok()) {
    const StatusCode want =
        existing_valid.ok() ? StatusCode::kResourceExhausted : StatusCode::kFailedPrecondition;
    if (plan.status().code() != want) {
      std::fprintf(stderr, "plan: %s\n", plan.status().ToString().c_str());
      Check(false, "Plan refused with an unexpected code");
    }
    Check(!plan.status().message().empty(), "Plan refused without a message");
    return;
  }
  Check(existing_valid.ok(), "Plan accepted invalid existing instances");
  const Status valid = mig::CheckLayout(t, *plan);
  if (!valid.ok()) {
    std::fprintf(stderr, "plan %s: %s\n", mig::FormatLayout(*plan).c_str(),
                 valid.ToString().c_str());
    Check(false, "Plan returned an invalid layout");
  }
  const size_t n = request->existing.size();
  Check(plan->size() == n + request->add.size(), "Plan added the wrong number of instances");
  for (size_t i = 0; i < plan->size(); ++i) {
    if (i < n) {
      Check((*plan)[i] == request->existing[i], "Plan moved an existing instance");
    } else {
      Check((*plan)[i].profile == request->add[i - n], "Plan added another profile");
    }
  }
}

void FuzzOne(std::string_view text) {
  std::vector<std::string> tokens = Tokens(text);
  bool existing_allowed = false;
  std::erase_if(tokens, [&](const std::string& token) {
    if (token != "--existing") return false;
    existing_allowed = true;
    return true;
  });
  for (const catalog::GpuModel& g : catalog::EmbeddedCatalogForTest().gpus()) {
    if (g.mig == nullptr) continue;
    FuzzPlacements(*g.mig, tokens);
    FuzzPlan(*g.mig, tokens, existing_allowed);
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
