#include "alerts/notifier.h"

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "alerts/address.h"
#include "alerts/smtp.h"
#include "alerts/url.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::alerts {
namespace {

using json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kMaxStatuses = 10'000;
constexpr auto kMaxBackoff = std::chrono::milliseconds(60'000);

enum class JobKind { kWebhook, kEmail, kAlertmanager };

std::string KindName(JobKind k) {
  switch (k) {
    case JobKind::kWebhook:
      return "webhook";
    case JobKind::kEmail:
      return "email";
    case JobKind::kAlertmanager:
      return "alertmanager";
  }
  return "webhook";
}

// One message to one receiver, waiting for its next attempt.
struct Job {
  JobKind kind = JobKind::kWebhook;
  Delivery delivery;                 // Webhook and email.
  std::vector<AlertMessage> alerts;  // Alertmanager.
  std::string receiver;              // Receiver::Name(), or "alertmanager:URL".
  int attempts = 0;                  // Made so far.
  SteadyClock::time_point due;       // Not before.
};

// The newest kMaxStatuses statuses, most recently handled first.
class StatusBook {
 public:
  DeliveryStatus& Touch(const std::string& key, const std::string& receiver) {
    const auto found = index_.find({key, receiver});
    if (found != index_.end()) {
      items_.splice(items_.begin(), items_, found->second);
      return items_.front();
    }
    DeliveryStatus fresh;
    fresh.alert_key = key;
    fresh.receiver = receiver;
    items_.push_front(std::move(fresh));
    index_[{key, receiver}] = items_.begin();
    if (items_.size() > kMaxStatuses) {
      index_.erase({items_.back().alert_key, items_.back().receiver});
      items_.pop_back();
    }
    return items_.front();
  }
  std::vector<DeliveryStatus> List(const std::string& key) const {
    std::vector<DeliveryStatus> out;
    for (const DeliveryStatus& s : items_) {
      if (key.empty() || s.alert_key == key) out.push_back(s);
    }
    return out;
  }

 private:
  std::list<DeliveryStatus> items_;
  std::map<std::pair<std::string, std::string>, std::list<DeliveryStatus>::iterator> index_;
};

// The delay before attempt `attempts` + 1: backoff, doubling, at most a minute.
std::chrono::milliseconds Backoff(std::chrono::milliseconds base, int attempts) {
  auto d = std::max(base, std::chrono::milliseconds(1));
  for (int i = 1; i < attempts && d < kMaxBackoff; ++i) d *= 2;
  return std::min(d, kMaxBackoff);
}

}  // namespace

struct Notifier::Impl {
  NotifierOptions options;
  const Clock* clock;

  mutable std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;                                       // Guarded by mu.
  std::deque<Job> queue;                                       // Guarded by mu.
  std::map<std::string, SteadyClock::time_point> backing_off;  // Receiver -> until; mu.
  // Worker -> what aborts its attempt in flight; each holds what it aborts alive. mu.
  std::map<int, std::function<void()>> cancels;
  NotifierCounters counters;  // Guarded by mu (queued unused).
  // Per tenant, its email bucket: tokens left and when they were counted. Guarded by mu.
  struct Bucket {
    double tokens = 0;
    SteadyClock::time_point at;
  };
  std::map<std::string, Bucket> email_buckets;
  StatusBook statuses;  // Guarded by mu.
  int running = 0;      // Workers not yet returned; guarded by mu.
  std::condition_variable exited;
  std::vector<std::thread> workers;

  Impl(NotifierOptions o, const Clock* c) : options(std::move(o)), clock(c) {}

  void Enqueue(Job job);  // mu held.
  void WorkerLoop(int worker);
  std::optional<Job> TakeDue(std::unique_lock<std::mutex>& lock);  // mu held.
  Status Attempt(const Job& job, int worker);
  void Finish(Job job, const Status& outcome);  // mu held.
  Status Post(const Url& url, const std::string& body, const std::string& ip, int worker);
  Status Email(const Job& job, int worker);
  // Takes one of the tenant's email tokens; false when its hourly rate is spent. mu held.
  bool TakeEmailToken(const std::string& tenant);
  // Registers `cancel` for the worker's attempt; false when stopping (do not start).
  bool Register(int worker, std::function<void()> cancel);
  void Unregister(int worker);
  // Unregisters a worker's cancel when its attempt ends, however it ends.
  struct CancelScope {
    Impl* impl;
    int worker;
    ~CancelScope() { impl->Unregister(worker); }
  };
};

bool Notifier::Impl::TakeEmailToken(const std::string& tenant) {
  const int rate = options.tenant_emails_per_hour;
  if (rate <= 0) return true;
  const auto now = SteadyClock::now();
  auto [it, fresh] = email_buckets.try_emplace(tenant, Bucket{static_cast<double>(rate), now});
  Bucket& b = it->second;
  if (!fresh) {
    const double hours = std::chrono::duration<double, std::ratio<3600>>(now - b.at).count();
    b.tokens = std::min<double>(rate, b.tokens + hours * rate);
    b.at = now;
  }
  if (b.tokens < 1) return false;
  b.tokens -= 1;
  return true;
}

void Notifier::Impl::Enqueue(Job job) {
  const size_t limit = std::max<size_t>(options.max_queue, 1);
  while (queue.size() >= limit) {
    Job& old = queue.front();
    counters.dropped[KindName(old.kind)]++;
    if (old.kind != JobKind::kAlertmanager) {
      DeliveryStatus& s = statuses.Touch(old.delivery.alert_key, old.receiver);
      s.failed++;
      s.last_error = fmt::format("dropped: the notification queue is full ({} waiting)", limit);
    }
    queue.pop_front();
  }
  queue.push_back(std::move(job));
  wake.notify_one();
}

std::optional<Job> Notifier::Impl::TakeDue(std::unique_lock<std::mutex>& lock) {
  while (!stopping) {
    const auto now = SteadyClock::now();
    std::optional<SteadyClock::time_point> next;
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      auto ready = it->due;
      const auto b = backing_off.find(it->receiver);
      if (b != backing_off.end()) {
        if (b->second <= now) {
          backing_off.erase(b);
        } else {
          ready = std::max(ready, b->second);
        }
      }
      if (ready <= now) {
        Job job = std::move(*it);
        queue.erase(it);
        return job;
      }
      if (!next || ready < *next) next = ready;
    }
    if (next) {
      wake.wait_until(lock, *next);
    } else {
      wake.wait(lock);
    }
  }
  return std::nullopt;
}

void Notifier::Impl::WorkerLoop(int worker) {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    std::optional<Job> job = TakeDue(lock);
    if (!job) {
      running--;
      exited.notify_all();
      return;
    }
    job->attempts++;
    if (job->kind != JobKind::kAlertmanager) {
      statuses.Touch(job->delivery.alert_key, job->receiver).attempts = job->attempts;
    }
    lock.unlock();
    Status outcome;
    try {
      outcome = Attempt(*job, worker);
    } catch (const std::exception& e) {
      outcome = Status::Unavailable(fmt::format("{}: {}", job->receiver, e.what()));
    } catch (...) {
      outcome = Status::Unavailable(job->receiver + ": unknown exception");
    }
    lock.lock();
    Finish(std::move(*job), outcome);
  }
}

void Notifier::Impl::Finish(Job job, const Status& outcome) {
  const std::string kind = KindName(job.kind);
  DeliveryStatus* s = job.kind == JobKind::kAlertmanager
                          ? nullptr
                          : &statuses.Touch(job.delivery.alert_key, job.receiver);
  if (outcome.ok()) {
    counters.sent[kind]++;
    backing_off.erase(job.receiver);
    if (s != nullptr) {
      s->sent++;
      s->last_sent_at = clock->Now();
      s->last_error.clear();
    }
    return;
  }
  if (s != nullptr) s->last_error = outcome.message();
  if (outcome.code() == StatusCode::kPermissionDenied) {
    counters.refused[kind]++;
    if (s != nullptr) s->failed++;
    return;
  }
  if (outcome.code() == StatusCode::kUnavailable && job.attempts < options.max_attempts &&
      !stopping) {
    // Wait in the queue, not in a worker: the receiver is skipped until then.
    job.due = SteadyClock::now() + Backoff(options.backoff, job.attempts);
    auto& until = backing_off[job.receiver];
    until = std::max(until, job.due);
    Enqueue(std::move(job));
    return;
  }
  counters.failed[kind]++;
  if (s != nullptr) s->failed++;
}

bool Notifier::Impl::Register(int worker, std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) return false;
  cancels[worker] = std::move(cancel);
  return true;
}

void Notifier::Impl::Unregister(int worker) {
  std::lock_guard<std::mutex> lock(mu);
  cancels.erase(worker);
}

Status Notifier::Impl::Attempt(const Job& job, int worker) {
  if (job.kind == JobKind::kEmail) return Email(job, worker);
  if (job.kind == JobKind::kAlertmanager) {
    Result<Url> url = ParseUrl(options.alertmanager_url);
    if (!url.ok()) return Status::FailedPrecondition(url.status().message());
    std::string base = url->path;
    while (!base.empty() && base.back() == '/') base.pop_back();
    url->path = base.substr(0, base.find('?')) + "/api/v2/alerts";
    return Post(*url, AlertmanagerPayload(job.alerts, clock->Now(), options.alertmanager_lease), "",
                worker);
  }
  const Receiver& r = job.delivery.receiver;
  Result<Url> url = ParseUrl(r.target);
  if (!url.ok()) return Status::FailedPrecondition(url.status().message());
  std::string ip;
  if (r.tenant_owned && !options.allow_private) {
    // Resolve once, check, and connect to exactly the address checked.
    Result<std::string> allowed = ResolveAllowedAddress(url->host);
    if (!allowed.ok()) return allowed.status();
    ip = *allowed;
  }
  return Post(*url, WebhookPayload(job.delivery.alert, job.receiver, options.external_url), ip,
              worker);
}

Status Notifier::Impl::Post(const Url& url, const std::string& body, const std::string& ip,
                            int worker) {
  std::shared_ptr<httplib::ClientImpl> client;
  if (url.scheme == "https") {
    client = std::make_shared<httplib::SSLClient>(url.host, url.port);
  } else {
    client = std::make_shared<httplib::ClientImpl>(url.host, url.port);
  }
  client->set_connection_timeout(options.timeout);
  client->set_read_timeout(options.timeout);
  client->set_write_timeout(options.timeout);
  client->set_keep_alive(false);
  // A redirect could lead a tenant's webhook past the address check: never follow one.
  client->set_follow_location(false);
  if (!ip.empty()) client->set_hostname_addr_map({{url.host, ip}});
  const std::string where = "POST " + url.origin;
  if (!Register(worker, [client] { client->stop(); })) {
    return Status::Unavailable(where + ": the notifier is stopping");
  }
  const CancelScope scope{this, worker};
  const httplib::Headers headers = {{"User-Agent", "Tessera-Alerts/1"}};
  const httplib::Result res = client->Post(url.path, headers, body, "application/json");
  if (!res)
    return Status::Unavailable(fmt::format("{}: {}", where, httplib::to_string(res.error())));
  const int code = res->status;
  if (code >= 200 && code < 300) return Status::Ok();
  std::string message = fmt::format("{}: answered {}", where, code);
  if (!res->body.empty()) message += ": " + Quote(res->body, 200);
  // 408 and 429 ask to come back later, as 5xx may; other answers will not change (and a
  // redirect is not followed).
  if (code == 408 || code == 429 || code >= 500) return Status::Unavailable(std::move(message));
  return Status::FailedPrecondition(std::move(message));
}

Status Notifier::Impl::Email(const Job& job, int worker) {
  const std::string& to = job.delivery.receiver.target;
  if (options.smtp_host.empty()) {
    return Status::FailedPrecondition(
        fmt::format("no --smtp configured: cannot send email to '{}'", Quote(to)));
  }
  const std::string from = options.smtp_from.empty() ? "tessera@localhost" : options.smtp_from;
  SmtpMessage message{from, {to}, AlertEmail(job.delivery.alert, from, to, clock->Now())};
  auto smtp = std::make_shared<SmtpClient>();
  if (!Register(worker, [smtp] { smtp->Cancel(); })) {
    return Status::Unavailable("SMTP: the notifier is stopping");
  }
  const CancelScope scope{this, worker};
  return smtp->Send(options.smtp_host, options.smtp_port, message, options.timeout);
}

Notifier::Notifier(NotifierOptions options, const Clock* clock)
    : impl_(std::make_unique<Impl>(std::move(options), clock)) {
  const int n = std::max(1, impl_->options.workers);
  impl_->running = n;
  for (int i = 0; i < n; ++i) {
    impl_->workers.emplace_back([impl = impl_.get(), i] { impl->WorkerLoop(i); });
  }
}

Notifier::~Notifier() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    impl_->queue.clear();
  }
  impl_->wake.notify_all();
  // Abort the attempts in flight, so a slow receiver does not hold shutdown for its timeout.
  // Again every few milliseconds: an abort that lands before the attempt opens its connection
  // does nothing. The aborts run without mu, since httplib's stop() waits for a connect.
  while (true) {
    std::vector<std::function<void()>> cancels;
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      if (impl_->running == 0) break;
      for (const auto& [worker, cancel] : impl_->cancels) cancels.push_back(cancel);
    }
    for (const auto& cancel : cancels) cancel();
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->exited.wait_for(lock, std::chrono::milliseconds(20),
                           [&] { return impl_->running == 0; });
  }
  for (std::thread& t : impl_->workers) t.join();
}

void Notifier::Send(Delivery delivery) {
  Job job;
  job.kind = delivery.receiver.kind == Receiver::Kind::kEmail ? JobKind::kEmail : JobKind::kWebhook;
  job.receiver = delivery.receiver.Name();
  job.delivery = std::move(delivery);
  job.due = SteadyClock::now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopping) return;
  DeliveryStatus& status = impl_->statuses.Touch(job.delivery.alert_key, job.receiver);
  if (job.kind == JobKind::kEmail && !job.delivery.tenant.empty() &&
      !impl_->TakeEmailToken(job.delivery.tenant)) {
    impl_->counters.limited["email"]++;
    status.failed++;
    status.last_error = fmt::format("not sent: the tenant's rate of {} emails an hour is spent",
                                    impl_->options.tenant_emails_per_hour);
    return;
  }
  impl_->Enqueue(std::move(job));
}

void Notifier::SendToAlertmanager(std::vector<AlertMessage> alerts) {
  if (!has_alertmanager() || alerts.empty()) return;
  Job job;
  job.kind = JobKind::kAlertmanager;
  job.receiver = "alertmanager:" + impl_->options.alertmanager_url;
  job.alerts = std::move(alerts);
  job.due = SteadyClock::now();
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopping) return;
  impl_->Enqueue(std::move(job));
}

std::vector<DeliveryStatus> Notifier::Statuses(const std::string& alert_key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->statuses.List(alert_key);
}

NotifierCounters Notifier::counters() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  NotifierCounters c = impl_->counters;
  c.queued = static_cast<int64_t>(impl_->queue.size());
  return c;
}

bool Notifier::has_alertmanager() const { return !impl_->options.alertmanager_url.empty(); }

}  // namespace tessera::alerts
