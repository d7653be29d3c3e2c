// A change of one GPU's sharing mode that its node's agent carries out: turning MIG on or off
// (`tessera nodes set-gpu-mode`, docs/agent.md "Changing a GPU's mode"). The server records the
// request on the node, sends it in the node's desired state while it is outstanding, and ends it
// with the agent's result. Changes between exclusive and shared need no agent and no request: the
// server applies them at once.
// Thread-safety: plain values; the core thread owns the nodes that hold them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"

namespace tessera::core {

// Where a request stands. requested and pending_reset are outstanding: the GPU is held (nothing
// new is granted on it) and its agent is sent the request. The other three have ended.
enum class ModeChangeState {
  kRequested,     // Sent to the agent, no result yet.
  kPendingReset,  // The agent needs to reset the GPU and was not allowed to: rerun with
                  // --allow-reset (allow_reset: true).
  kApplied,
  kRefused,  // The agent will not do it (its reason says why: a process holds the GPU, ...).
  kFailed,   // The agent tried and the driver said no.
};
// "requested", "pending_reset", "applied", "refused", "failed".
std::string_view ModeChangeStateName(ModeChangeState s);
std::optional<ModeChangeState> ParseModeChangeState(std::string_view name);
constexpr bool IsOutstanding(ModeChangeState s) {
  return s == ModeChangeState::kRequested || s == ModeChangeState::kPendingReset;
}

// The longest reason kept, from an agent or shown to an operator.
inline constexpr size_t kMaxModeReason = 512;

// One request to change GPU `gpu` of a node to `mode`.
struct GpuModeChange {
  int64_t id = 0;  // Increasing per node.
  int gpu = 0;
  catalog::SharingMode mode = catalog::SharingMode::kMig;
  bool allow_reset = false;  // The agent may reset the GPU to apply it.
  ModeChangeState state = ModeChangeState::kRequested;
  std::string reason;  // The agent's word on pending_reset, refused and failed.
  Time requested_at;

  bool outstanding() const { return IsOutstanding(state); }
  // The stored form, also shown (GET /v1/nodes): {"id", "gpu", "mode", "allow_reset", "state",
  // "reason", "requested_at"}.
  nlohmann::json ToJson() const;
  // What the node's agent is sent: {"id", "gpu", "mode", "allow_reset"}.
  nlohmann::json RequestJson() const;
  // The stored form back; InvalidArgument naming `where` and the field when malformed.
  static Result<GpuModeChange> FromJson(const nlohmann::json& j, const std::string& where);
};

// An agent's result for a request (POST /v1/agent/sync's "gpu_mode_results").
struct GpuModeResult {
  int64_t id = 0;
  int gpu = 0;
  ModeChangeState state = ModeChangeState::kApplied;  // Never kRequested.
  std::string reason;
};

}  // namespace tessera::core
