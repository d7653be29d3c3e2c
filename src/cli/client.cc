#include "cli/client.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli/cli.h"
#include "common/json.h"
#include "common/server_list.h"
#include "common/text.h"
#include "common/tunnel.h"

namespace tessera::cli {

using nlohmann::json;

// Sends one request; a transport failure or an error status is printed and returns nullopt.
std::optional<Response> Call(const ClientFlags& flags, const std::string& method,
                             const std::string& path, const json* body, const std::string& accept,
                             Response* refused) {
  const std::string url =
      flags.url.empty() ? EnvOr("TESSERA_URL", "http://127.0.0.1:8080") : flags.url;
  const std::string token = flags.token.empty() ? EnvOr("TESSERA_TOKEN", "") : flags.token;
  const std::string ca = flags.ca.empty() ? EnvOr("TESSERA_CA", "") : flags.ca;
  auto servers = ServerList::Parse(url, "--url");
  if (!servers.ok()) {
    std::cerr << "tessera: " << EscapeForTerminal(servers.status().message()) << "\n";
    return std::nullopt;
  }
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  if (!accept.empty()) headers.emplace("Accept", accept);
  const std::string text = body ? body->dump() : "{}";
  // Replicas (docs/ha.md): a follower's 307 leads to a listed leader; a server that cannot be
  // reached, or knows no leader yet, to the next. A request is sent again only when it was
  // surely not applied (no connection, a redirect, no leader).
  const size_t n = servers->urls().size();
  std::vector<std::string> failures;
  std::optional<httplib::Result> answer;
  bool unlisted = false;  // The last redirect named a server --url does not list.
  for (size_t tries = 0; tries < (n > 1 ? 2 * n : 1); ++tries) {
    httplib::Client client(servers->current());
    if (!client.is_valid()) {
      std::cerr << "tessera: '" << EscapeForTerminal(servers->current())
                << "' is not a server URL (http://HOST:PORT or https://HOST:PORT)\n";
      return std::nullopt;
    }
    if (!ca.empty()) client.set_ca_cert_path(ca);
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(5);
    client.set_read_timeout(60);
    answer.emplace(method == "GET"      ? client.Get(path, headers)
                   : method == "DELETE" ? client.Delete(path, headers)
                   : method == "PATCH"  ? client.Patch(path, headers, text, "application/json")
                   : method == "PUT"    ? client.Put(path, headers, text, "application/json")
                                        : client.Post(path, headers, text, "application/json"));
    httplib::Result& r = *answer;
    if (!r) {
      std::string why = httplib::to_string(r.error());
      if (r.error() == httplib::Error::Connection) {
        // httplib says only "Connection": ask the system why.
        const std::string problem =
            ConnectProblem(servers->current(), std::chrono::milliseconds(2000));
        if (!problem.empty()) why = problem;
      }
      if (r.error() == httplib::Error::SSLServerVerification) {
        why += " (the server's certificate is not signed by a known authority: give --ca FILE)";
      }
      failures.push_back("cannot reach " + EscapeForTerminal(servers->current()) + ": " + why);
      // Sent but unanswered: it may have been applied, so it is not sent again.
      if (r.error() != httplib::Error::Connection || failures.size() == n) break;
      servers->Next();
      continue;
    }
    failures.clear();  // Reached: only the last round of failures is news.
    if (n > 1 && r->status == 307) {
      unlisted = !servers->Follow(r->get_header_value("Location"));
      if (unlisted) servers->Next();
      continue;
    }
    if (n > 1 && r->status == 503 && r->body.find("\"no_leader\"") != std::string::npos) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      servers->Next();
      continue;
    }
    break;
  }
  if (!answer || !*answer) {
    std::cerr << "tessera: " << fmt::format("{}", fmt::join(failures, "; ")) << "\n";
    return std::nullopt;
  }
  httplib::Result& r = *answer;
  if (r->status == 307) {
    const std::string leader = EscapeForTerminal(r->get_header_value("Location"));
    if (unlisted || n == 1) {
      std::cerr << "tessera: " << EscapeForTerminal(servers->current())
                << " follows; the leader is at " << leader
                << ", which --url does not list (give every replica's URL, separated by commas)\n";
    } else {
      std::cerr << "tessera: the replicas send the request to " << leader
                << ", which does not lead (a failover is under way); retry shortly\n";
    }
    return std::nullopt;
  }
  Response out{r->status, json::parse(r->body, nullptr, false), r->body, r->headers};
  if (r->status >= 400 && refused) {
    *refused = std::move(out);
    return std::nullopt;
  }
  if (r->status >= 400) {
    std::string message = r->body;
    if (out.body.is_object() && out.body.contains("error") && out.body["error"].is_object()) {
      message = out.body["error"].value("message", r->body);
    }
    std::cerr << "tessera: " << EscapeForTerminal(message) << " (HTTP " << r->status << ")\n";
    return std::nullopt;
  }
  return out;
}

bool IsActiveState(std::string_view state) {
  return state == "pending" || state == "scheduled" || state == "running" || state == "stopping" ||
         state == "preempting";
}

std::optional<std::string> ResolveInstance(const ClientFlags& flags,
                                           const std::string& name_or_id) {
  const bool is_id = name_or_id.size() > 5 && name_or_id.rfind("inst-", 0) == 0 &&
                     name_or_id.find_first_not_of("0123456789", 5) == std::string::npos;
  if (is_id) return name_or_id;
  auto all = CallAll(flags, "/v1/instances", "instances");
  if (!all) return std::nullopt;
  std::vector<std::string> named, active;
  for (const json& i : all->body.value("instances", json::array())) {
    if (i.value("name", "") != name_or_id) continue;
    named.push_back(i.value("id", ""));
    const std::string state = i.value("state", "");
    if (IsActiveState(state)) {
      active.push_back(named.back());
    }
  }
  if (named.size() == 1) return named[0];
  if (active.size() == 1) return active[0];
  if (named.empty()) {
    std::cerr << "tessera: no instance is named or has the id '" << EscapeForTerminal(name_or_id)
              << "'\n";
  } else {
    std::cerr << "tessera: '" << EscapeForTerminal(name_or_id) << "' names "
              << (active.empty() ? named.size() : active.size()) << " instances ("
              << fmt::format("{}", fmt::join(active.empty() ? named : active, ", "))
              << "): give an id\n";
  }
  return std::nullopt;
}

// Percent-encodes `s` for a path segment or a query value: everything but unreserved characters.
std::string Encode(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += fmt::format("%{:02X}", u);
    }
  }
  return out;
}

// "KEY=VALUE" flags into a JSON object; the error names the flag.
std::optional<json> KeyValues(const std::vector<std::string>& pairs, const char* flag) {
  json out = json::object();
  for (const std::string& p : pairs) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "tessera: " << flag << " '" << EscapeForTerminal(p) << "' is not KEY=VALUE\n";
      return std::nullopt;
    }
    out[p.substr(0, eq)] = p.substr(eq + 1);
  }
  return out;
}

// Every page of a list route: `path` (which may carry a query) is fetched page after page, and
// the items under `key` are put together as one answer.
std::optional<Response> CallAll(const ClientFlags& flags, const std::string& path,
                                const std::string& key) {
  const std::string sep = path.find('?') == std::string::npos ? "?" : "&";
  std::optional<Response> all;
  std::string token;
  for (;;) {
    auto page = Call(flags, "GET",
                     path + sep + "limit=1000" + (token.empty() ? "" : "&page_token=" + token));
    if (!page) return std::nullopt;
    if (!all) {
      // The first page's other fields go along (the nodes still waiting for their agent).
      all = Response{page->status, page->body, "", {}};
      all->body[key] = json::array();
      all->body.erase("next_page_token");
    }
    for (auto& item : page->body[key]) all->body[key].push_back(std::move(item));
    if (!page->body.contains("next_page_token")) return all;
    token = Encode(page->body["next_page_token"].get<std::string>());
  }
}

std::string Str(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "-";
  if (j[key].is_string()) return j[key].get<std::string>();
  return j[key].dump();
}

// A GPU count as people write it: 16, 0.5.
std::string Gpus(const json& v) {
  return v.is_number() ? fmt::format("{:g}", v.get<double>()) : "-";
}

int Show(const ClientFlags& f, const std::optional<Response>& r,
         const std::function<void(const json&)>& table) {
  if (!r) return kExitFailure;
  if (!PrintDocument(f, r->body)) table(r->body);
  return kExitOk;
}

namespace {

// Whether YAML would read `s`, written plain, as something other than that string.
bool ReadsAsOtherThanText(const std::string& s) {
  if (s.empty()) return true;
  static const char* kWords[] = {"true",  "false", "yes", "no", "on",  "off",  "null", "~",
                                 "True",  "False", "Yes", "No", "On",  "Off",  "Null", "TRUE",
                                 "FALSE", "YES",   "NO",  "ON", "OFF", "NULL", ".inf", ".nan"};
  for (const char* w : kWords) {
    if (s == w) return true;
  }
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

void EmitYaml(YAML::Emitter& out, const json& j) {
  if (j.is_object()) {
    out << YAML::BeginMap;
    for (const auto& item : j.items()) {
      out << YAML::Key;
      if (ReadsAsOtherThanText(item.key())) out << YAML::DoubleQuoted;
      out << item.key() << YAML::Value;
      EmitYaml(out, item.value());
    }
    out << YAML::EndMap;
  } else if (j.is_array()) {
    out << YAML::BeginSeq;
    for (const json& v : j) EmitYaml(out, v);
    out << YAML::EndSeq;
  } else if (j.is_string()) {
    const std::string s = ToValidUtf8(j.get<std::string>());
    if (ReadsAsOtherThanText(s)) out << YAML::DoubleQuoted;
    out << s;
  } else if (j.is_null()) {
    out << YAML::Null;
  } else {
    out << j.dump();  // Numbers and booleans as JSON writes them, which YAML reads the same.
  }
}

}  // namespace

std::string ToYaml(const json& j) {
  YAML::Emitter out;
  out << YAML::EscapeNonAscii;
  EmitYaml(out, j);
  return std::string(out.c_str()) + "\n";
}

bool PrintDocument(const ClientFlags& f, const json& j) {
  if (f.output == "json") {
    // JSON escapes control characters itself; only invalid UTF-8 needs replacing.
    std::cout << DumpJson(j, 2) << "\n";
    return true;
  }
  if (f.output == "yaml") {
    std::cout << ToYaml(j);
    return true;
  }
  return false;
}

void AddCommon(CLI::App* cmd, ClientFlags& f, bool csv) {
  cmd->add_option("--url", f.url, "Server URL (default $TESSERA_URL or http://127.0.0.1:8080)");
  cmd->add_option("--token", f.token, "Bearer token (default $TESSERA_TOKEN)");
  cmd->add_option("--ca", f.ca,
                  "PEM file of the authority that signed an https server's certificate "
                  "(default $TESSERA_CA, else the system's)");
  if (csv) {
    cmd->add_option("-o,--output", f.output, "table, json, yaml or csv")
        ->check(CLI::IsMember({"table", "json", "yaml", "csv"}));
  } else {
    cmd->add_option("-o,--output", f.output, "table, json or yaml")
        ->check(CLI::IsMember({"table", "json", "yaml"}));
  }
}

}  // namespace tessera::cli
