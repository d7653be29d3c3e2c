// What receivers read: the webhook and Alertmanager payloads, the email, and the checks on
// receivers' addresses (notifier.h).
#include <fmt/format.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "alerts/address.h"
#include "alerts/notifier.h"
#include "alerts/url.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::alerts {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxUrlBytes = 2048;
constexpr std::string_view kGoZeroTime = "0001-01-01T00:00:00Z";

// ---- Times ----

// RFC 3339 in UTC, always with milliseconds: "2026-01-01T00:00:00.000Z".
std::string FormatMillis(Time t) {
  std::string s = FormatRfc3339(std::chrono::floor<std::chrono::milliseconds>(t));
  if (s.find('.') == std::string::npos) s.insert(s.size() - 1, ".000");
  return s;
}

// RFC 2822 (section 3.3): "Thu, 01 Jan 2026 00:00:00 +0000".
std::string FormatRfc2822(Time t) {
  static constexpr std::string_view kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd(day);
  const std::chrono::weekday wd(day);
  const std::chrono::hh_mm_ss hms(std::chrono::floor<std::chrono::seconds>(t - day));
  return fmt::format("{}, {:02d} {} {:04d} {:02d}:{:02d}:{:02d} +0000", kDays[wd.c_encoding()],
                     unsigned(ymd.day()), kMonths[unsigned(ymd.month()) - 1], int(ymd.year()),
                     hms.hours().count(), hms.minutes().count(), hms.seconds().count());
}

// ---- Payloads ----

json LabelsJson(const std::map<std::string, std::string>& m) {
  json j = json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

std::string Label(const AlertMessage& a, const std::string& name) {
  const auto it = a.labels.find(name);
  return it == a.labels.end() ? "" : it->second;
}

// Go's %q for the label values in a group key: quotes and backslashes escaped.
std::string GoQuote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// ---- Email ----

// `s` as one header-safe line: valid UTF-8, every control character a space.
std::string OneLine(std::string_view s) {
  std::string out = ToValidUtf8(s);
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return out;
}

// A header value: as is when ASCII, else RFC 2047 encoded words (each under 76 characters),
// folded onto continuation lines.
std::string EncodeHeader(std::string_view value) {
  const bool ascii = std::all_of(value.begin(), value.end(),
                                 [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (ascii) return std::string(value);
  std::string out;
  while (!value.empty()) {
    const std::string_view piece = CutUtf8(value, 45);
    if (!out.empty()) out += "\r\n ";
    out += "=?UTF-8?B?" + Base64Encode(piece) + "?=";
    value.remove_prefix(piece.size());
  }
  return out;
}

// Body text: valid UTF-8, CRLF line ends, no control characters but tabs, lines broken so none
// exceeds SMTP's 998-byte limit.
std::string BodyText(std::string_view text) {
  const std::string valid = ToValidUtf8(text);
  std::string out;
  size_t line = 0;
  for (size_t i = 0; i < valid.size(); ++i) {
    const char c = valid[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < valid.size() && valid[i + 1] == '\n') ++i;
      out += "\r\n";
      line = 0;
      continue;
    }
    const auto u = static_cast<unsigned char>(c);
    if (line >= 900 && (u & 0xc0) != 0x80) {
      out += "\r\n";
      line = 0;
    }
    out += (u < 0x20 && c != '\t') || u == 0x7f ? ' ' : c;
    ++line;
  }
  return out;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), static_cast<int>(bytes)) != 1) {
    raw = std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  }
  std::string out;
  for (const char c : raw) out += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return out;
}

}  // namespace

// ---- URLs ----

namespace {

bool ValidHostName(std::string_view h) {
  if (h.empty() || h.size() > 253) return false;
  return std::all_of(h.begin(), h.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

}  // namespace

// Parses an http or https URL with a host and no user information; the error names what is
// wrong with it (the caller adds the field).
Result<Url> ParseUrl(const std::string& target) {
  const std::string quoted = fmt::format("'{}'", Quote(target, 100));
  if (target.size() > kMaxUrlBytes) {
    return Status::InvalidArgument(fmt::format("URL is longer than {} bytes", kMaxUrlBytes));
  }
  for (const char ch : target) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument(quoted + " contains whitespace or a control character");
    }
  }
  const size_t sep = target.find("://");
  Url url;
  url.scheme = sep == std::string::npos ? "" : target.substr(0, sep);
  std::transform(url.scheme.begin(), url.scheme.end(), url.scheme.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  if (url.scheme != "http" && url.scheme != "https") {
    return Status::InvalidArgument(quoted + " is not an http or https URL");
  }
  const std::string rest = target.substr(sep + 3);
  const size_t authority_end = std::min(rest.find_first_of("/?#"), rest.size());
  const std::string authority = rest.substr(0, authority_end);
  if (authority.find('@') != std::string::npos) {
    return Status::InvalidArgument(quoted + " must not contain a user name or password");
  }
  std::string port_text;
  bool bad_host = false;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return Status::InvalidArgument(quoted + " has an invalid host");
    url.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty() && after[0] != ':') bad_host = true;
    if (!after.empty()) port_text = after.substr(1);
    if (ClassifyIp(url.host) == AddressClass::kInvalid || url.host.find(':') == std::string::npos) {
      bad_host = true;
    }
    if (after == ":") bad_host = true;
  } else {
    const size_t colon = authority.find(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) bad_host = true;
    }
    if (!url.host.empty() && !ValidHostName(url.host)) bad_host = true;
  }
  if (url.host.empty()) return Status::InvalidArgument(quoted + " has no host");
  if (bad_host) return Status::InvalidArgument(quoted + " has an invalid host or port");
  url.port = url.scheme == "https" ? 443 : 80;
  if (!port_text.empty()) {
    if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(),
                                             [](char c) { return c >= '0' && c <= '9'; })) {
      return Status::InvalidArgument(quoted + " has an invalid port");
    }
    url.port = std::stoi(port_text);
    if (url.port < 1 || url.port > 65535) {
      return Status::InvalidArgument(quoted + " has an invalid port");
    }
  }
  std::string tail = rest.substr(authority_end);
  tail = tail.substr(0, tail.find('#'));
  url.path = (tail.empty() || tail[0] != '/') ? "/" + tail : tail;
  const bool v6 = url.host.find(':') != std::string::npos;
  url.origin =
      fmt::format("{}://{}{}{}:{}", url.scheme, v6 ? "[" : "", url.host, v6 ? "]" : "", url.port);
  return url;
}

bool ValidEmail(std::string_view a) {
  if (a.size() > 254) return false;
  const size_t at = a.find('@');
  if (at == std::string_view::npos || at == 0 || at > 64 || a.find('@', at + 1) != a.npos) {
    return false;
  }
  const std::string_view local = a.substr(0, at);
  const std::string_view domain = a.substr(at + 1);
  for (const char ch : local) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || std::string_view("<>()[]\\,;:\"").find(ch) != a.npos) {
      return false;
    }
  }
  if (domain.empty() || domain.front() == '.' || domain.back() == '.' ||
      domain.find("..") != domain.npos) {
    return false;
  }
  return std::all_of(domain.begin(), domain.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  });
}

// ---- Free functions ----

std::string Receiver::Name() const {
  return (kind == Kind::kEmail ? "email:" : "webhook:") + target;
}

Status ValidateReceiver(const Receiver& r, const std::string& field) {
  if (r.kind == Receiver::Kind::kWebhook) {
    const Result<Url> url = ParseUrl(r.target);
    if (!url.ok()) return url.status().WithPrefix(field);
    return Status::Ok();
  }
  if (!ValidEmail(r.target)) {
    return Status::InvalidArgument(fmt::format("{}: '{}' is not an email address (local@domain)",
                                               field, Quote(r.target, 100)));
  }
  return Status::Ok();
}

Status CheckPublicHost(const std::string& target, const std::string& field) {
  const Result<Url> url = ParseUrl(target);
  if (!url.ok()) return url.status().WithPrefix(field);
  std::string host = url->host;
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (host == "localhost" || host.ends_with(".localhost")) {
    return Status::InvalidArgument(
        fmt::format("{}: {} is this server's own loopback; a tenant's webhook must reach a "
                    "public address",
                    field, Quote(url->host)));
  }
  const AddressClass c = ClassifyIp(url->host);
  if (c != AddressClass::kInvalid && c != AddressClass::kPublic) {
    return Status::InvalidArgument(
        fmt::format("{}: {} is a {} address; a tenant's webhook must reach a public address", field,
                    Quote(url->host), AddressClassName(c)));
  }
  return Status::Ok();
}

std::string WebhookPayload(const AlertMessage& alert, const std::string& receiver,
                           const std::string& external_url) {
  const std::string status = alert.firing ? "firing" : "resolved";
  json group_labels = json::object();
  const auto name = alert.labels.find("alertname");
  if (name != alert.labels.end()) group_labels["alertname"] = name->second;
  json a = {
      {"status", status},
      {"labels", LabelsJson(alert.labels)},
      {"annotations", LabelsJson(alert.annotations)},
      {"startsAt", FormatMillis(alert.starts_at)},
      {"endsAt",
       alert.firing || !alert.ends_at ? std::string(kGoZeroTime) : FormatMillis(*alert.ends_at)},
      {"generatorURL", alert.generator_url},
      {"fingerprint", alert.fingerprint},
  };
  json j = {
      {"version", "4"},
      {"groupKey", "{}:{alertname=" + GoQuote(Label(alert, "alertname")) + "}"},
      {"truncatedAlerts", 0},
      {"status", status},
      {"receiver", receiver},
      {"groupLabels", group_labels},
      {"commonLabels", LabelsJson(alert.labels)},
      {"commonAnnotations", LabelsJson(alert.annotations)},
      {"externalURL", external_url},
      {"alerts", json::array({a})},
  };
  return DumpJson(j);
}

std::string AlertmanagerPayload(const std::vector<AlertMessage>& alerts, Time now,
                                std::chrono::seconds lease) {
  json list = json::array();
  for (const AlertMessage& a : alerts) {
    Time ends = now + lease;
    if (!a.firing) ends = a.ends_at.value_or(now);
    list.push_back({
        {"labels", LabelsJson(a.labels)},
        {"annotations", LabelsJson(a.annotations)},
        {"startsAt", FormatMillis(a.starts_at)},
        {"endsAt", FormatMillis(ends)},
        {"generatorURL", a.generator_url},
    });
  }
  return DumpJson(list);
}

std::string EmailSubject(const AlertMessage& alert) {
  std::string name = Label(alert, "alertname");
  std::string s = alert.firing ? "[FIRING] " : "[RESOLVED] ";
  s += name.empty() ? "alert" : name;
  if (const std::string host = Label(alert, "Hostname"); !host.empty()) s += " on " + host;
  if (const std::string gpu = Label(alert, "gpu"); !gpu.empty()) s += " GPU " + gpu;
  return std::string(CutUtf8(OneLine(s), 200));
}

std::string AlertEmail(const AlertMessage& alert, const std::string& from, const std::string& to,
                       Time now) {
  const std::string subject = EmailSubject(alert);
  std::string body = subject.substr(1, subject.find(']') - 1) + ":" +
                     subject.substr(subject.find(']') + 1) + "\n\n";
  // Summary and description first: they are what the rule's author wrote for a person.
  for (const char* key : {"summary", "description"}) {
    const auto it = alert.annotations.find(key);
    if (it == alert.annotations.end()) continue;
    std::string title = it->first;
    title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(title[0])));
    body += title + ": " + it->second + "\n";
  }
  for (const auto& [key, value] : alert.annotations) {
    if (key != "summary" && key != "description") body += key + ": " + value + "\n";
  }
  body += "\nLabels:\n";
  for (const auto& [key, value] : alert.labels) body += "  " + key + " = " + value + "\n";
  body += "\nStarted: " + FormatMillis(alert.starts_at) + "\n";
  if (!alert.firing && alert.ends_at) body += "Ended:   " + FormatMillis(*alert.ends_at) + "\n";
  if (!alert.generator_url.empty()) body += "Source:  " + alert.generator_url + "\n";
  if (!alert.fingerprint.empty()) body += "Fingerprint: " + alert.fingerprint + "\n";
  body += "\n-- \nSent by Tessera alerting.\n";

  const size_t at = from.rfind('@');
  const std::string domain = at == std::string::npos ? "tessera" : OneLine(from.substr(at + 1));
  const auto micros = now.time_since_epoch().count();
  std::string m;
  m += "From: " + OneLine(from) + "\r\n";
  m += "To: " + OneLine(to) + "\r\n";
  m += "Subject: " + EncodeHeader(subject) + "\r\n";
  m += "Date: " + FormatRfc2822(now) + "\r\n";
  m += fmt::format("Message-ID: <tessera.{}.{}@{}>\r\n", micros, RandomHex(8), domain);
  m += "MIME-Version: 1.0\r\n";
  m += "Content-Type: text/plain; charset=utf-8\r\n";
  m += "Content-Transfer-Encoding: 8bit\r\n";
  m += "Auto-Submitted: auto-generated\r\n";  // RFC 3834: vacation responders stay quiet.
  m += "\r\n";
  m += BodyText(body);
  return m;
}

}  // namespace tessera::alerts
