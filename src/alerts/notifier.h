// Getting alerts to people: the notifier delivers what the alert evaluator decides to send, off
// the core thread, to three kinds of receiver:
//   Alertmanager  POST {url}/api/v2/alerts, a JSON list of {labels, annotations, startsAt,
//                 endsAt, generatorURL}, as Prometheus posts them (SendToAlertmanager);
//   webhook       POST of Alertmanager's webhook payload, version "4", one alert a message;
//   email         SMTP (HELO, MAIL FROM, RCPT TO, DATA, QUIT) through --smtp, with a subject and
//                 a plain-text body a person reads.
// Each delivery is retried with exponential backoff up to max_attempts; a receiver that is down
// or slow holds one worker for at most `timeout` per attempt and is skipped while it backs off, so
// it never blocks the caller or the other receivers. A tenant's webhook is refused (never
// connected to) when its host resolves to a loopback, link-local, private, CGNAT, multicast or
// unspecified address, unless allow_private; the check is made at send time, after DNS, and the
// connection goes to the address that was checked (no DNS rebinding between check and connect).
// Thread-safety: every public method may be called from any thread; Send and
// SendToAlertmanager never block on the network.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace tessera::alerts {

// One alert as receivers see it.
struct AlertMessage {
  bool firing = true;                              // "firing", else "resolved".
  std::map<std::string, std::string> labels;       // alertname, severity, the series' labels.
  std::map<std::string, std::string> annotations;  // summary, description, ...
  Time starts_at;
  std::optional<Time> ends_at;  // Resolved: when; firing: none (sent as Go's zero time, or to
                                // Alertmanager as now + the resend lease).
  std::string generator_url;    // A link back to the rule (server URL + /v1/alert-rules/ID).
  std::string fingerprint;      // 16 hex digits, stable for the alert's labels.
};

// Where one alert goes.
struct Receiver {
  enum class Kind { kWebhook, kEmail };
  Kind kind = Kind::kWebhook;
  std::string target;         // The URL, or the email address.
  bool tenant_owned = false;  // Subject to the private-address refusal.

  // "webhook:URL" or "email:ADDR": the receiver's name in payloads and statuses.
  std::string Name() const;
};

struct Delivery {
  std::string alert_key;  // The alert's id (rule id + "/" + fingerprint), for Statuses().
  Receiver receiver;
  AlertMessage alert;
  std::string tenant = {};  // Whose rule sent it; empty for the operator.s.
};

struct NotifierOptions {
  std::string alertmanager_url;  // e.g. "http://127.0.0.1:9093"; empty: none.
  std::string smtp_host;         // Empty: email receivers fail with "no --smtp configured".
  int smtp_port = 25;
  std::string smtp_from;       // The sender; empty: "tessera@localhost".
  bool allow_private = false;  // --allow-private-receivers.
  std::string external_url;    // The server's URL, for externalURL in webhook payloads.
  std::chrono::milliseconds timeout{5000};  // Per attempt: connect plus answer.
  int max_attempts = 5;
  std::chrono::milliseconds backoff{1000};  // Before the 2nd attempt; doubles, at most 60 s.
  int workers = 4;
  size_t max_queue = 10'000;  // Deliveries waiting; beyond it the oldest is dropped (counted).
  // A tenant's emails through the operator's relay: at most this many an hour per tenant (a
  // bucket of this size, refilled evenly), the rest refused and counted; 0: no limit.
  int tenant_emails_per_hour = 60;
  // How long the Alertmanager keeps a firing alert it hears nothing more about (its endsAt is
  // now + lease), as Prometheus sets it: several resend intervals.
  std::chrono::seconds alertmanager_lease{240};
};

// What became of the deliveries of one alert to one receiver.
struct DeliveryStatus {
  std::string alert_key;
  std::string receiver;  // Receiver::Name().
  int64_t sent = 0;      // Messages delivered (2xx, or SMTP 250 after DATA).
  int64_t failed = 0;    // Messages given up on after max_attempts, refused or dropped.
  int attempts = 0;      // Of the message now in flight or last handled.
  std::optional<Time> last_sent_at;
  std::string last_error;  // Of the last failed attempt; empty after a success.
};

// Totals for /metrics, by receiver kind ("alertmanager", "webhook", "email").
struct NotifierCounters {
  std::map<std::string, int64_t> sent;
  std::map<std::string, int64_t> failed;   // Given up after retries.
  std::map<std::string, int64_t> refused;  // Private address for a tenant receiver.
  std::map<std::string, int64_t> dropped;  // Queue full.
  std::map<std::string, int64_t> limited;  // A tenant's email beyond its hourly rate.
  int64_t queued = 0;                      // Waiting now.
};

class Notifier {
 public:
  // Starts options.workers threads. `clock` stamps statuses; waiting uses real time.
  Notifier(NotifierOptions options, const Clock* clock);
  ~Notifier();  // Stops the workers; what is still queued is dropped.
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;

  // Queues a delivery. Never blocks.
  void Send(Delivery delivery);
  // Queues one POST of `alerts` to the Alertmanager (none configured: ignored). Never blocks.
  void SendToAlertmanager(std::vector<AlertMessage> alerts);

  // Statuses of `alert_key`'s deliveries (empty key: all), newest handled first.
  std::vector<DeliveryStatus> Statuses(const std::string& alert_key = "") const;
  NotifierCounters counters() const;
  bool has_alertmanager() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks a receiver before a rule is stored: a webhook is an http or https URL with a host
// (at most 2048 bytes, no user:password, no whitespace or control characters); an email is
// local@domain. InvalidArgument naming `field` otherwise.
Status ValidateReceiver(const Receiver& r, const std::string& field);

// For a tenant's webhook URL: InvalidArgument naming `field` when its host is "localhost" or a
// numeric address that ResolveAllowedAddress would refuse (a name is checked when sent).
Status CheckPublicHost(const std::string& url, const std::string& field);

// The webhook payload (Alertmanager's, version "4") for one alert sent to `receiver`.
std::string WebhookPayload(const AlertMessage& alert, const std::string& receiver,
                           const std::string& external_url);
// The Alertmanager v2 body (a JSON list) for `alerts`, with firing alerts' endsAt = now + lease.
std::string AlertmanagerPayload(const std::vector<AlertMessage>& alerts, Time now,
                                std::chrono::seconds lease);

// The email subject for `alert`, e.g. "[FIRING] GpuTemperatureHigh on node-3 GPU 0", from its
// alertname, Hostname and gpu labels; control characters (CR and LF among them) become spaces.
std::string EmailSubject(const AlertMessage& alert);
// The whole message for one alert email (headers, a blank line, a plain-text body; CRLF line
// ends, no line over 998 bytes), dated `now`.
std::string AlertEmail(const AlertMessage& alert, const std::string& from, const std::string& to,
                       Time now);

}  // namespace tessera::alerts
