#include "testing/replicas.h"

#include <fmt/format.h>
#include <httplib.h>
#include <signal.h>

#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

namespace tessera::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// `j[key]` when it is a string, else "".
std::string Str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether `done` holds within `limit`, asked every `poll`; asked once more at the end.
bool Await(const std::function<bool()>& done, std::chrono::milliseconds limit,
           std::chrono::milliseconds poll) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

}  // namespace

std::string Answer::Code() const {
  return body.is_object() && body.contains("error") ? Str(body["error"], "code") : "";
}

std::string Answer::Describe() const {
  return fmt::format("{} from {}: {}", status, url, body.is_discarded() ? "" : body.dump());
}

std::string Answer::Outcome() const {
  if (status == 0) return sent ? "no answer" : "refused";
  return Code().empty() ? std::to_string(status) : fmt::format("{} {}", status, Code());
}

Answer SendOnce(const std::string& url, const std::string& method, const std::string& path,
                const std::string& token, const json* body, int timeout_s) {
  httplib::Client client(url);
  client.set_connection_timeout(1);
  client.set_read_timeout(timeout_s);
  client.set_write_timeout(timeout_s);
  const httplib::Headers headers = {{"Authorization", "Bearer " + token}};
  const std::string text = body ? body->dump() : "";
  httplib::Result r = method == "GET"      ? client.Get(path, headers)
                      : method == "DELETE" ? client.Delete(path, headers)
                                           : client.Post(path, headers, text, "application/json");
  Answer a;
  a.url = url;
  if (!r) {
    a.sent = r.error() != httplib::Error::Connection;
    return a;
  }
  a.sent = true;
  a.status = r->status;
  a.body = json::parse(r->body, nullptr, false);
  a.location = r->get_header_value("Location");
  return a;
}

Answer ClusterClient::Send(const std::string& method, const std::string& path,
                           const std::string& token, const json* body) {
  const size_t n = urls_.size();
  std::optional<Answer> refused, redirected;
  for (size_t tries = 0; tries < 2 * n; ++tries) {
    Answer a = SendOnce(urls_[current_], method, path, token, body, timeout_s_);
    if (a.status == 0 && a.sent) return a;
    if (a.status == 307) {
      size_t to = 0;
      while (to < n && a.location.rfind(urls_[to] + "/", 0) != 0) ++to;
      current_ = to < n ? to : (current_ + 1) % n;
      redirected = std::move(a);
    } else if (a.status == 0 || (a.status == 503 && a.Code() == "no_leader")) {
      current_ = (current_ + 1) % n;
      refused = std::move(a);
    } else {
      return a;
    }
  }
  return refused ? *refused : *redirected;
}

bool ProcessExited(int pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || stat.compare(paren + 2, 1, "Z") == 0;
}

ReplicaSet::ReplicaSet(int count, std::string store_url, std::vector<std::string> flags,
                       std::string admin_token, std::string dir)
    : store_url_(std::move(store_url)),
      admin_token_(std::move(admin_token)),
      flags_(std::move(flags)),
      replicas_(static_cast<size_t>(count)) {
  for (int i = 0; i < count; ++i) {
    Replica& r = replicas_[i];
    r.port = FreeTcpPort();
    r.url = fmt::format("http://127.0.0.1:{}", r.port);
    r.log = fmt::format("{}/replica-{}.log", dir, i);
    r.data = fmt::format("{}/data-{}", dir, i);
    urls_.push_back(r.url);
  }
}

ReplicaSet::~ReplicaSet() {
  // A replica frozen with SIGSTOP is woken first, so that nothing of it lingers stopped.
  for (Replica& r : replicas_) {
    if (r.process) kill(r.process->pid(), SIGCONT);
    r.process.reset();
  }
}

bool ReplicaSet::Start(std::string* error) {
  for (int i = 0; i < size(); ++i) {
    if (!StartReplica(i, error)) return false;
    if (i == 0 && WaitForLeader(5s) != 0) {
      *error = "replica 0 does not lead within 5 s\n" + Logs();
      return false;
    }
  }
  return true;
}

bool ReplicaSet::StartReplica(int i, std::string* error) {
  Replica& r = replicas_[i];
  const size_t from = ReadAll(r.log).size();  // A restart appends to the log.
  std::vector<std::string> argv = {
      TesseraBinary(), "server", "--listen", fmt::format("127.0.0.1:{}", r.port),
      "--data",        r.data,   "--store",  store_url_};
  argv.insert(argv.end(), flags_.begin(), flags_.end());
  r.process = std::make_unique<ChildProcess>(
      argv, r.log,
      std::vector<std::pair<std::string, std::string>>{{"TESSERA_ADMIN_TOKEN", admin_token_}});
  auto listening = [&] { return ReadAll(r.log).find("listening on", from) != std::string::npos; };
  Await([&] { return listening() || ProcessExited(r.process->pid()); }, 20s, 50ms);
  if (listening()) return true;
  *error = fmt::format("replica {} did not start\n{}", i, Logs());
  return false;
}

int ReplicaSet::Kill(int i, int signal) {
  return replicas_[i].process ? replicas_[i].process->Stop(signal) : -1;
}

int ReplicaSet::IndexOf(const std::string& url) const {
  for (int i = 0; i < size(); ++i) {
    if (replicas_[i].url == url) return i;
  }
  return -1;
}

Answer ReplicaSet::Direct(int i, const std::string& method, const std::string& path,
                          const std::string& token, const json* body, int timeout_s) const {
  return SendOnce(replicas_[i].url, method, path, token, body, timeout_s);
}

json ReplicaSet::ReadyZ(int i) const {
  return Direct(i, "GET", "/readyz", admin_token_, nullptr, 1).body;
}

int ReplicaSet::WaitForLeader(std::chrono::milliseconds limit) const {
  int leader = -1;
  Await(
      [&] {
        std::vector<int> leading;
        for (int i = 0; i < size(); ++i) {
          if (Running(i) && Str(ReadyZ(i), "role") == "leader") leading.push_back(i);
        }
        leader = leading.size() == 1 ? leading[0] : -1;
        return leader >= 0;
      },
      limit, 100ms);
  return leader;
}

std::string ReplicaSet::Logs() const {
  std::string out;
  for (int i = 0; i < size(); ++i) {
    std::string text = ReadAll(replicas_[i].log);
    if (text.size() > 4000) text.replace(0, text.size() - 4000, "...");
    out += fmt::format("== replica {} ({}, pid {}) ==\n{}\n", i, replicas_[i].url, Pid(i), text);
  }
  return out;
}

}  // namespace tessera::testing
