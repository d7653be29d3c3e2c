// What the client commands share (client_cmd.cc, identity_cmd.cc): the flags every one takes,
// one request to the server with its errors printed, and the ways an answer is shown. Whatever
// the server sent is escaped before it reaches the terminal.
// Thread-safety: used from main() only.
#pragma once

#include <httplib.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace tessera::cli {

struct ClientFlags {
  std::string url;
  std::string token;
  std::string ca;
  std::string output = "table";
};

struct Response {
  int status = 0;
  nlohmann::json body;
  std::string text;  // The body as sent (routes that answer text).
  httplib::Headers headers;
};

// Sends one request (`body` as JSON; none: {}), following a replica's redirect to a listed
// leader; a transport failure or an error status is printed and returns nullopt.
// With `refused`, an error status is not printed but left there (its status, body and text).
std::optional<Response> Call(const ClientFlags& flags, const std::string& method,
                             const std::string& path, const nlohmann::json* body = nullptr,
                             const std::string& accept = "", Response* refused = nullptr);
// Every page of a list route: the items under `key` put together as one answer, with the first
// page's other fields.
std::optional<Response> CallAll(const ClientFlags& flags, const std::string& path,
                                const std::string& key);
// Whether an instance in `state` (as the API names it) holds or waits for capacity: pending,
// scheduled, running, stopping or preempting.
bool IsActiveState(std::string_view state);
// The id of the instance `name_or_id` stands for: an id ("inst-000042") as it is; a name, the
// caller's one instance of that name (the active one, when ended ones share it). nullopt after
// saying why: no such name, or a name several active instances share (their ids listed).
std::optional<std::string> ResolveInstance(const ClientFlags& flags, const std::string& name_or_id);
// Percent-encodes `s` for a path segment or a query value.
std::string Encode(std::string_view s);
// "KEY=VALUE" flags into a JSON object; nullopt (after saying why, naming `flag`) otherwise.
std::optional<nlohmann::json> KeyValues(const std::vector<std::string>& pairs, const char* flag);
// j[key] as text: a string as it is, "-" when absent or null, else its JSON.
std::string Str(const nlohmann::json& j, const char* key);
// A GPU count as people write it: 16, 0.5.
std::string Gpus(const nlohmann::json& v);
// `j` as YAML (-o yaml): block style, every string that would read as something else (a number,
// a boolean, null) quoted, and everything outside printable ASCII escaped, so nothing the server
// sent can drive the terminal.
std::string ToYaml(const nlohmann::json& j);
// Prints `j` as the -o flag asks for a document (json or yaml); false for a table (the caller's).
bool PrintDocument(const ClientFlags& f, const nlohmann::json& j);
// Prints `r` as JSON (-o json), YAML (-o yaml) or through `table`; returns the exit code.
int Show(const ClientFlags& f, const std::optional<Response>& r,
         const std::function<void(const nlohmann::json&)>& table);
// --url, --token, --ca and -o (table, json, yaml; and csv when `csv`).
void AddCommon(CLI::App* cmd, ClientFlags& f, bool csv = false);

}  // namespace tessera::cli
