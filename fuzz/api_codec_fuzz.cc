// Fuzzes what the API does with a request body (src/api/codec.h over src/common/json.h): the
// strict JSON reader, then every body codec and the label selector. The API's promises:
//   - nothing throws, and nothing crashes;
//   - an error message is one line of valid UTF-8 with no control character, however hostile
//     the body (it goes into a JSON answer, the audit log and an operator's terminal), and is
//     bounded in size whatever was sent;
//   - what a codec accepts is within the documented bounds.
// The agent protocol's bodies (registration, reports, telemetry), alert rules, reservations,
// budgets and stacks are fuzzed the same way.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "alerts/rule.h"
#include "api/codec.h"
#include "api/stack_internal.h"
#include "api/stacks.h"
#include "billing/budget.h"
#include "billing/reservation.h"
#include "common/json.h"
#include "common/text.h"
#include "core/group.h"
#include "core/labels.h"
#include "fuzz/fuzz_util.h"
#include "telemetry/sample.h"
#include "telemetry/series.h"

namespace tessera::fuzz {
namespace {

// An accepted image: a valid reference, and credentials only with one, within their bounds.
void CheckImage(const core::ImageSpec& image) {
  if (image.empty()) {
    Check(!image.auth && image.pull_policy == core::PullPolicy::kIfNotPresent,
          "a pull policy or registry credentials without an image were accepted");
    return;
  }
  Check(core::ValidateImageRef(image.ref).ok(), "an invalid image reference was accepted");
  if (image.auth) {
    for (const std::string* s : {&image.auth->username, &image.auth->password}) {
      Check(!s->empty() && s->size() <= core::kMaxRegistryAuthBytes && IsValidUtf8(*s) &&
                s->find('\0') == std::string::npos,
            "a registry credential out of bounds was accepted");
    }
  }
}

void FuzzBody(const std::string& text) {
  auto body = ParseJson(text, "body");
  if (!body.ok()) return CheckMessage(body.status());
  // Whatever parsed can be written back: the API dumps what it stores.
  (void)DumpJson(*body);
  if (auto r = api::ParseCreateInstance(*body); r.ok()) {
    Check(r->command.size() <= api::kMaxCommandBytes, "a command over 64 KiB was accepted");
    Check(r->name.empty() || IsValidIdBody(r->name), "an invalid name was accepted");
    Check(r->labels.size() <= core::kMaxLabels, "too many labels were accepted");
    Check(core::ValidateLabels(r->labels).ok(), "labels that fail validation were accepted");
    Check(core::ValidateAnnotations(r->annotations).ok(), "bad annotations were accepted");
    CheckImage(r->image);
  } else {
    CheckMessage(r.status());
  }
  if (auto r = api::ParseCreateTenant(*body); r.ok()) {
    Check(IsValidIdBody(r->name), "an invalid tenant name was accepted");
    Check(r->quota_gpu_milli >= 0 && r->quota_gpu_milli <= int64_t{1'000'000'000},
          "a quota out of range was accepted");
  } else {
    CheckMessage(r.status());
  }
  if (auto r = api::ParseUpdateTenant(*body); !r.ok()) CheckMessage(r.status());
  if (auto r = api::ParseRotateToken(*body); r.ok()) {
    Check(r->grace >= Duration::zero() && r->grace <= core::kMaxTokenGrace,
          "a grace period out of range was accepted");
  } else {
    CheckMessage(r.status());
  }
  // The agent protocol: what a node token may send.
  if (auto r = api::ParseRegistration(*body); r.ok()) {
    Check(r->inventory.is_object(), "a registration without an inventory object was accepted");
  } else {
    CheckMessage(r.status());
  }
  nlohmann::json sync = *body;
  if (auto r = api::ParseSync(sync); r.ok()) {
    Check(r->wait <= api::kMaxAgentWait, "a wait over the longest long poll was accepted");
    Check(r->reports.size() + r->pulls.size() <= 4096 && r->logs.size() <= 4096,
          "too many entries were accepted");
    for (const auto& pull : r->pulls) {
      Check(pull.progress.bytes >= 0 && pull.progress.total_bytes >= 0 &&
                pull.progress.percent >= 0 && pull.progress.percent <= 100,
            "a pull's progress out of range was accepted");
    }
    for (const auto& log : r->logs) {
      Check(log.data.size() <= (256u << 10), "a log chunk over 256 KiB was accepted");
    }
  } else {
    CheckMessage(r.status());
  }
  // Alert rules (a tenant's or the admin's), and an agent's telemetry alone.
  if (auto r = alerts::ParseRule(*body, true); r.ok()) {
    Check(r->notify.size() <= 16 && r->matchers.size() <= 16, "too many entries were accepted");
    Check(r->for_seconds >= 0 && r->keep_firing_for_seconds >= 0, "a negative duration");
    (void)DumpJson(alerts::RuleJson(*r));
  } else {
    CheckMessage(r.status());
  }
  // Groups: the template is a create request, and what is read is stored and read back.
  {
    JsonFields f(*body, "body");
    if (auto r = core::ReadGroupRequest(f, *body); r.ok() && f.ok()) {
      Check(r->size >= 1 && r->size <= core::kMaxGroupSize, "a group size out of range");
      Check(r->min_available >= 1 && r->min_available <= r->size, "min_available out of range");
      core::Group g;
      g.id = "grp-000001";
      g.tenant = *TenantId::Parse("tenant-000001");
      g.spec = *r;
      CheckImage(r->member.image);
      Check(core::GroupFromJson(core::ToJson(g, core::Secrets::kIncluded), "stored").ok(),
            "a stored group reads back");
      const nlohmann::json shown = core::ToJson(g, core::Secrets::kHidden);
      Check(!shown["template"].contains("registry_auth") ||
                !shown["template"]["registry_auth"].contains("password"),
            "a group's API form shows its registry password");
    } else {
      CheckMessage(!f.ok() ? f.body_error() : r.status());
    }
  }
  // Stacks: the objects come out ordered, each after what it needs, and references resolve
  // without throwing whatever their paths say.
  if (auto r = api::ParseStackRequest(*body); r.ok()) {
    Check(r->objects.size() <= core::kMaxStackObjects, "too many stack objects were accepted");
    std::set<std::string> seen;
    for (const api::StackObject& o : r->objects) {
      for (const std::string& need : o.needs) {
        Check(seen.contains(need), "a stack object comes before what it needs");
      }
      const std::string key = std::string(api::stack_internal::KindName(o.kind)) + "/" + o.name;
      Check(seen.insert(key).second, "a stack object was accepted twice");
      api::stack_internal::Outputs outputs;
      for (const std::string& need : o.needs) outputs[need] = *body;
      std::vector<std::string> unknown, missing;
      (void)DumpJson(api::stack_internal::Resolve(o.spec, outputs, unknown, missing));
    }
  } else {
    CheckMessage(r.status());
  }
  // Billing: reservations and budgets.
  if (auto r = billing::ParseReservationRequest(*body); r.ok()) {
    Check(r->count >= 1 && r->count <= billing::kMaxReservationUnits, "a count out of range");
    Check(billing::TermSeconds(r->term).has_value(), "an unknown term was accepted");
  } else {
    CheckMessage(r.status());
  }
  if (auto r = billing::ParseBudget(*body); r.ok()) {
    Check(r->monthly > Money(), "a budget of nothing was accepted");
  } else {
    CheckMessage(r.status());
  }
  if (auto r = telemetry::FromJson(*body); r.ok()) {
    Check(r->gpus.size() <= 64 && r->xids.size() <= 256, "too many entries were accepted");
    std::vector<telemetry::Target> targets;
    telemetry::NodeInfo node{
        "n", "d", {{0, "GPU-0", "x", "b", true}, {1, "GPU-1", "x", "b", false}}};
    telemetry::NodeTargets(node, &*r, {{0, "i", "t", 1000, "1g.10gb", 0, -1}}, true, targets);
    std::string out;
    telemetry::RenderExposition(targets, out);
  } else {
    CheckMessage(r.status());
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = tessera::fuzz::AsText(data, size);
  tessera::fuzz::FuzzBody(text);
  if (auto s = tessera::core::ParseLabelSelector(text); !s.ok()) {
    tessera::fuzz::CheckMessage(s.status());
  }
  return 0;
}
