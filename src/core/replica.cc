#include "core/replica.h"

#include <spdlog/spdlog.h>

#include <chrono>

namespace tessera::core {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Replica::Replica(Core* core, std::unique_ptr<store::Leadership> leadership, ReplicaOptions options,
                 std::optional<store::LeaseView> built_from)
    : core_(core), leadership_(std::move(leadership)), options_(options) {
  status_.id = leadership_->holder();
  if (built_from) {
    status_.applied_commits = built_from->commits;
    status_.epoch = built_from->epoch;
    built_at_commits_ = built_from->commits;
  }
  core_->set_on_step_down([this](const std::string&) { stepped_down_ = true; });
}

Replica::~Replica() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  const ReplicaStatus s = view();
  if (s.leader) {
    // Writes stop before the lease goes, so the next leader reads everything this one wrote.
    core_->StopLeading();
    if (Status r = leadership_->Release(s.epoch); !r.ok()) {
      spdlog::warn("could not release the leadership lease: {}", r.message());
    } else {
      spdlog::info("released the leadership lease (epoch {})", s.epoch);
    }
  }
}

void Replica::Start() {
  thread_ = std::thread([this] { Loop(); });
}

bool Replica::AwaitSettled(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
               [&] { return status_.settled || stopping_; });
  return status_.settled;
}

bool Replica::AwaitLeader(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
               [&] { return status_.leader || stopping_; });
  return status_.leader;
}

ReplicaStatus Replica::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void Replica::Sleep(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return stopping_; });
}

void Replica::Loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    const bool leading = view().leader;
    if (leading) {
      LeadPass();
    } else {
      FollowPass();
    }
    Announce();
    Sleep(view().leader ? options_.renew_s : options_.poll_s);
  }
}

void Replica::LeadPass() {
  const int64_t epoch = view().epoch;
  if (stepped_down_.exchange(false)) {
    StepDown("the core stopped leading (a commit was fenced or the store failed)");
    return;
  }
  const double sent = SteadySeconds();
  auto renewed = leadership_->Renew(epoch, options_.lease_s);
  if (renewed.ok() && *renewed) {
    deadline_ = sent + options_.lease_s;
  } else if (renewed.ok()) {
    StepDown("the lease was taken or expired");
  } else if (SteadySeconds() >= deadline_) {
    StepDown("the lease could not be renewed in time: " + renewed.status().message());
  }
}

void Replica::StepDown(const std::string& why) {
  spdlog::warn("stepping down as leader: {}", why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.leader = false;
    status_.leader_url.clear();
  }
  stepped_down_ = false;
  // Memory is what this leader committed; FollowPass catches up with what a successor commits.
  core_->StopLeading();
  built_at_commits_ = -1;
}

void Replica::FollowPass() {
  auto lease = leadership_->Read();
  const double now = SteadySeconds();
  if (!lease.ok()) {
    Warn("cannot read the leadership lease: " + lease.status().message());
    if (behind_since_ < 0) behind_since_ = now;
    std::lock_guard<std::mutex> lock(mu_);
    status_.lag_s = now - behind_since_;
    return;
  }
  if (!lease->live || lease->holder == status_.id) {
    const double sent = SteadySeconds();
    int64_t commits = -1;
    auto epoch = leadership_->TryAcquire(options_.lease_s, &commits);
    if (!epoch.ok()) Warn("cannot take the leadership lease: " + epoch.status().message());
    if (epoch.ok() && *epoch > 0) {
      // No commit since the state was built: it is current, and need not be read again.
      const bool current = built_at_commits_ >= 0 && commits == built_at_commits_;
      if (Status s = core_->Lead(*epoch, current); !s.ok()) {
        spdlog::error("took the lease (epoch {}) but cannot lead: {}", *epoch, s.message());
        (void)leadership_->Release(*epoch);
      } else {
        deadline_ = sent + options_.lease_s;
        spdlog::info("leading (epoch {}; {})", *epoch,
                     current ? "the state as built, nothing committed since"
                             : "the state rebuilt from the store");
        std::lock_guard<std::mutex> lock(mu_);
        status_.leader = true;
        status_.settled = true;
        status_.epoch = *epoch;
        status_.leader_url = "";
        status_.lag_s = 0;
        ++status_.takeovers;
        behind_since_ = -1;
        cv_.notify_all();
        return;
      }
    }
  }
  // Behind the leader: catch up from the store.
  const ReplicaStatus before = view();
  bool current = lease->commits == before.applied_commits && lease->epoch == before.epoch;
  if (!current) {
    if (behind_since_ < 0) behind_since_ = now;
    // The count read before the rebuild: the state holds at least that much.
    built_at_commits_ = -1;
    if (core_->Follow().ok()) {
      current = true;
      behind_since_ = -1;
      built_at_commits_ = lease->commits;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  status_.leader_url = lease->live ? lease->url : "";
  status_.settled = status_.settled || lease->live;
  if (current) {
    status_.applied_commits = lease->commits;
    status_.epoch = lease->epoch;
  }
  status_.lag_s = behind_since_ < 0 ? 0 : SteadySeconds() - behind_since_;
  cv_.notify_all();
}

void Replica::Warn(const std::string& what) {
  const double now = SteadySeconds();
  if (now - last_warning_ < 10) return;
  last_warning_ = now;
  spdlog::warn("{}", what);
}

void Replica::Announce() {
  const double now = SteadySeconds();
  if (now - last_announce_ < 1.0) return;
  last_announce_ = now;
  const ReplicaStatus s = view();
  (void)leadership_->Announce(s.leader ? "leader" : "follower", s.applied_commits,
                              static_cast<int64_t>(s.lag_s * 1000));
  auto replicas = leadership_->Replicas(10 * std::max(options_.lease_s, 1.0));
  if (replicas.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    status_.replicas = std::move(*replicas);
  }
}

}  // namespace tessera::core
