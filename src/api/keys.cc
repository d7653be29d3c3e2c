#include "api/keys.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api/api.h"
#include "api/routes.h"
#include "core/core.h"

namespace tessera::api {

using nlohmann::json;

namespace {

Status NoKeyring() {
  return Status::FailedPrecondition(
      "this server has no keyring: start it with --kek-file or --kms-command");
}

}  // namespace

KeyRotator::~KeyRotator() {
  stop_ = true;
  std::lock_guard<std::mutex> lock(thread_mu_);
  if (thread_.joinable()) thread_.join();
}

void KeyRotator::Rotate(std::function<void(Result<std::string>)> started) {
  if (sealer_ == nullptr || core_ == nullptr) return started(NoKeyring());
  // One caller at a time replaces the thread: a rotation that failed at once may have let
  // another caller in before this one stored its thread.
  std::lock_guard<std::mutex> thread_lock(thread_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_) {
      started(Status::FailedPrecondition(
          fmt::format("a rotation to key '{}' is under way ({} records looked at); wait for it",
                      key_id_, examined_)));
      return;
    }
    running_ = true;
    error_.clear();
  }
  if (thread_.joinable()) thread_.join();  // The last rotation's, finished.
  thread_ = std::thread([this, started = std::move(started)] {
    // Off the I/O threads: a KMS plugin may take seconds to answer. A keyring file is read
    // again; then a new seed is wrapped, which learns the current key (a KMS plugin's own).
    Status reloaded = sealer_->ReloadKeyring();
    if (reloaded.code() == StatusCode::kFailedPrecondition) reloaded = Status::Ok();  // A KMS.
    Result<std::string> key = reloaded.ok() ? sealer_->RenewSeed() : Result<std::string>(reloaded);
    if (!key.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      error_ = key.status().message();
    }
    started(key);
    if (key.ok()) Run(*key);
  });
}

void KeyRotator::Run(std::string key_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    key_id_ = key_id;
    examined_ = resealed_ = 0;
    started_at_ = clock_->Now();
    finished_at_.reset();
  }
  spdlog::info("key rotation: re-sealing every value not under key '{}'", key_id);
  auto cursor = std::make_shared<core::KeyRotation::Cursor>();
  Status failed;
  while (!stop_ && !cursor->done()) {
    if (core_->follower()) {
      failed = Status::FailedPrecondition("this replica no longer leads: rotate on the leader");
      break;
    }
    auto step = core_->Run<core::ResealStep>(
        [&, cursor](core::State& s, store::Batch& b) -> Result<core::ResealStep> {
          return s.rotation().Step(key_id, *cursor, kStep, b);
        });
    if (!step.ok()) {
      failed = step.status();
      break;
    }
    std::lock_guard<std::mutex> lock(mu_);
    examined_ += static_cast<int64_t>(step->examined);
    resealed_ += static_cast<int64_t>(step->resealed);
  }
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  finished_at_ = clock_->Now();
  if (!failed.ok()) error_ = failed.message();
  if (stop_ && failed.ok() && !cursor->done()) error_ = "stopped with the server; rotate again";
  spdlog::info("key rotation to '{}': {} records looked at, {} re-sealed{}", key_id, examined_,
               resealed_, error_.empty() ? "" : "; " + error_);
}

json KeyRotator::Progress() const {
  json j = {{"keyring", description_}};
  if (sealer_ != nullptr) {
    auto current = sealer_->CurrentKeyId();
    j["current_key"] = current.ok() ? json(*current) : json();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (key_id_.empty() && !running_ && error_.empty()) {
    j["rotation"] = nullptr;
    return j;
  }
  json r = {{"state", running_         ? "running"
                      : error_.empty() ? "done"
                                       : "failed"},
            {"key", key_id_},
            {"examined", examined_},
            {"resealed", resealed_}};
  if (started_at_) r["started_at"] = FormatRfc3339(*started_at_);
  if (finished_at_) r["finished_at"] = FormatRfc3339(*finished_at_);
  if (started_at_ && finished_at_) {
    r["seconds"] = std::chrono::duration<double>(*finished_at_ - *started_at_).count();
  }
  if (!error_.empty()) r["error"] = error_;
  j["rotation"] = std::move(r);
  return j;
}

void AddKeyRoutes(Api& table) {
  table.Add("GET", "/v1/keys", Access::kAdmin, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              const KeyRotator* keys = api.keys();
              api.Run<json>(
                  call, Status::Ok(),
                  {[keys](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
                     json j = keys ? keys->Progress() : json{{"keyring", "none"}};
                     json in_use = json::object();
                     for (const auto& [key, n] : s.rotation().SealedKeys()) in_use[key] = n;
                     j["records_by_key"] = std::move(in_use);
                     return j;
                   },
                   200, Passthrough, nullptr});
            });
  table.Add("POST", "/v1/keys/rotate", Access::kAdmin, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              KeyRotator* keys = api.keys();
              if (!keys) {
                return api.Run<json>(call, NoKeyring(), {nullptr, 202, Passthrough, nullptr});
              }
              keys->Rotate([&api, call, keys](Result<std::string> started) {
                // Answered (and audited) once the keyring was read again.
                api.Run<json>(
                    call, started.status(),
                    {[keys](core::State&, store::Batch&, const core::Tenant&) -> Result<json> {
                       return keys->Progress();
                     },
                     202, Passthrough, [](const json& j) { return j.value("current_key", ""); }});
              });
            });
}

}  // namespace tessera::api
