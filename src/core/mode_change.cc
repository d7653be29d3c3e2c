#include "core/mode_change.h"

#include <fmt/format.h>

#include "common/json.h"
#include "common/text.h"

namespace tessera::core {

std::string_view ModeChangeStateName(ModeChangeState s) {
  switch (s) {
    case ModeChangeState::kRequested:
      return "requested";
    case ModeChangeState::kPendingReset:
      return "pending_reset";
    case ModeChangeState::kApplied:
      return "applied";
    case ModeChangeState::kRefused:
      return "refused";
    case ModeChangeState::kFailed:
      return "failed";
  }
  return "requested";
}

std::optional<ModeChangeState> ParseModeChangeState(std::string_view name) {
  for (ModeChangeState s :
       {ModeChangeState::kRequested, ModeChangeState::kPendingReset, ModeChangeState::kApplied,
        ModeChangeState::kRefused, ModeChangeState::kFailed}) {
    if (ModeChangeStateName(s) == name) return s;
  }
  return std::nullopt;
}

nlohmann::json GpuModeChange::ToJson() const {
  return {{"id", id},
          {"gpu", gpu},
          {"mode", catalog::SharingModeName(mode)},
          {"allow_reset", allow_reset},
          {"state", ModeChangeStateName(state)},
          {"reason", reason},
          {"requested_at", FormatRfc3339(requested_at)}};
}

nlohmann::json GpuModeChange::RequestJson() const {
  return {{"id", id},
          {"gpu", gpu},
          {"mode", catalog::SharingModeName(mode)},
          {"allow_reset", allow_reset}};
}

Result<GpuModeChange> GpuModeChange::FromJson(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  GpuModeChange c;
  c.id = f.Int("id", 1, INT64_MAX);
  c.gpu = static_cast<int>(f.Int("gpu", 0, 1023));
  const std::string mode = f.String("mode");
  c.allow_reset = f.Bool("allow_reset", false);
  const std::string state = f.String("state");
  c.reason = f.String("reason", false);
  const std::string at = f.String("requested_at");
  TESSERA_RETURN_IF_ERROR(f.first_error());
  const auto m = catalog::ParseSharingMode(mode);
  if (!m) f.Fail("mode", fmt::format("'{}' is not exclusive, mig or shared", Quote(mode)));
  const auto s = ParseModeChangeState(state);
  if (!s) f.Fail("state", fmt::format("'{}' is not a mode change's state", Quote(state)));
  auto t = ParseRfc3339(at);
  if (!t.ok()) f.Fail("requested_at", "is not an RFC 3339 time");
  TESSERA_RETURN_IF_ERROR(f.first_error());
  c.mode = *m;
  c.state = *s;
  c.requested_at = *t;
  return c;
}

}  // namespace tessera::core
