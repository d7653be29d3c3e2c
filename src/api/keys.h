// Key rotation for the operator (docs/secrets.md): GET /v1/keys says which key seals new values
// and how many records each key seals; POST /v1/keys/rotate reads the keyring again (its file,
// with the new first key `tessera keys rotate` wrote, or the KMS plugin's current key) and then,
// on a thread of its own, re-seals every record not under the current key, a bounded step per
// core round, so creates and everything else go on meanwhile. Once GET /v1/keys shows an old key
// sealing nothing, it may leave the keyring.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/envelope.h"
#include "common/result.h"

namespace tessera::core {
class Core;
}  // namespace tessera::core

namespace tessera::api {

class KeyRotator {
 public:
  // Records looked at in one core round of a rotation.
  static constexpr size_t kStep = 2000;

  // `clock` must outlive this.
  explicit KeyRotator(const Clock* clock) : clock_(clock) {}
  ~KeyRotator();  // Stops a rotation between two steps and waits for its thread.
  KeyRotator(const KeyRotator&) = delete;
  KeyRotator& operator=(const KeyRotator&) = delete;

  void set_core(core::Core* core) { core_ = core; }
  // Before serving: the sealer (null: the server has no keyring; it must outlive this) and
  // `description`, which names the keyring in answers ("keyring file F").
  void set_keyring(Sealer* sealer, std::string description) {
    sealer_ = sealer;
    description_ = std::move(description);
  }

  // Reads the keyring again, then re-seals in the background; `started` gets OK (with the new
  // current key's id) or why nothing started: FailedPrecondition without a keyring or while a
  // rotation runs, the keyring's error when it cannot be read. Called on the rotation's own
  // thread, never the caller's.
  void Rotate(std::function<void(Result<std::string>)> started);

  // The keyring, the current key, and the rotation's progress (the caller adds the counts).
  nlohmann::json Progress() const;
  bool has_keyring() const { return sealer_ != nullptr; }

 private:
  void Run(std::string key_id);

  Sealer* sealer_ = nullptr;
  const Clock* clock_;
  std::string description_ = "none";
  core::Core* core_ = nullptr;
  mutable std::mutex mu_;
  bool running_ = false;                          // GUARDED_BY(mu_).
  std::string key_id_;                            // GUARDED_BY(mu_); the last rotation's target.
  int64_t examined_ = 0;                          // GUARDED_BY(mu_).
  int64_t resealed_ = 0;                          // GUARDED_BY(mu_).
  std::string error_;                             // GUARDED_BY(mu_).
  std::optional<Time> started_at_, finished_at_;  // GUARDED_BY(mu_).
  std::atomic<bool> stop_{false};
  std::mutex thread_mu_;  // Held while thread_ is joined or replaced.
  std::thread thread_;    // GUARDED_BY(thread_mu_).
};

}  // namespace tessera::api
