// The exec broker and routes (exec.h, docs/volumes.md "A shell").
#include "api/exec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "api/api.h"
#include "api/routes.h"
#include "common/exec_frames.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;
using std::chrono::steady_clock;

// How long the agent has to connect for a session: its long poll hears of it at once, so this
// covers a slow network, not a heartbeat.
constexpr std::chrono::seconds kConnectWithin{10};
// A session where nothing moves either way this long is closed.
constexpr std::chrono::hours kIdle{4};
// The sessions one tenant may have open at once: the rest of the server's connections, and its
// nodes' 32 sessions each, stay for the others.
constexpr int64_t kMaxOpenPerTenant = 16;
// What a command may be: at most this many arguments of at most this many bytes each.
constexpr size_t kMaxArgs = 256;
constexpr size_t kMaxArgBytes = 4096;

Result<core::ExecSession> ParseExec(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"command", "tty", "cols", "rows"});
  core::ExecSession s;
  s.command = f.Strings("command", false);
  s.tty = f.Bool("tty", false, false);
  s.cols = static_cast<int>(f.Int("cols", 1, 1000, false, 80));
  s.rows = static_cast<int>(f.Int("rows", 1, 1000, false, 24));
  if (f.ok() && s.command.size() > kMaxArgs) {
    f.Fail("command", fmt::format("has {} arguments; at most {}", s.command.size(), kMaxArgs));
  }
  for (size_t i = 0; f.ok() && i < s.command.size(); ++i) {
    const std::string& arg = s.command[i];
    if (arg.size() > kMaxArgBytes || arg.find('\0') != std::string::npos) {
      f.Fail(fmt::format("command[{}]", i),
             fmt::format("must be at most {} bytes, without NUL", kMaxArgBytes));
    }
  }
  if (f.ok() && !s.command.empty() && s.command[0].empty()) {
    f.Fail("command[0]", "must name a program");
  }
  TESSERA_RETURN_IF_ERROR(f.body_error());
  return s;
}

// Whether the request asks to upgrade to the exec protocol.
bool AsksForExec(const HttpRequest& r) {
  const std::string* connection = r.Header("connection");
  const std::string* upgrade = r.Header("upgrade");
  return connection && upgrade && ContainsToken(*connection, "upgrade") &&
         ContainsToken(*upgrade, exec::kProtocol);
}

std::string SwitchingHead() {
  return fmt::format(
      "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: {}\r\n\r\n",
      exec::kProtocol);
}

Status NotUpgraded() {
  return Status::InvalidArgument(
      fmt::format("headers: this route upgrades the connection: send 'Connection: Upgrade' and "
                  "'Upgrade: {}' (tessera instances exec does)",
                  exec::kProtocol));
}

void OpenSession(Api& api, std::shared_ptr<Call> call) {
  ExecBroker* broker = api.exec();
  auto req = !call->body_status.ok()      ? Result<core::ExecSession>(call->body_status)
             : AsksForExec(call->request) ? ParseExec(call->body)
                                          : Result<core::ExecSession>(NotUpgraded());
  if (req.ok() && call->principal.admin) {
    req = Status::PermissionDenied(
        "a command runs in a workload for its own tenant's tokens only, not the admin's");
  }
  if (req.ok() && !broker) req = Status::Unavailable("this server runs no exec sessions");
  if (req.ok() && broker->OpenOf(call->principal.tenant.str()) >= kMaxOpenPerTenant) {
    req = Status::Unavailable(fmt::format(
        "tenant has {} exec sessions open on this server, the most it may; end one first",
        kMaxOpenPerTenant));
  }
  const std::string id = call->params[0];
  Op<core::ExecSession> op;
  op.run = [req, id, broker, client = call->responder](
               core::State& s, store::Batch&,
               const core::Tenant& caller) -> Result<core::ExecSession> {
    TESSERA_ASSIGN_OR_RETURN(core::ExecSession e, s.OpenExec(caller, id, *req, kConnectWithin));
    // Held before its agent can hear of it, which is once this round has committed.
    broker->Wait(e.id, e.node, e.tenant, client, kConnectWithin);
    return e;
  };
  op.ok_status = 101;
  op.target = [](const core::ExecSession& e) { return e.instance; };
  op.detail = [](const core::ExecSession& e) {
    json d = {{"session", e.id}, {"command", e.command}, {"tty", e.tty}};
    return DumpJson(d);
  };
  // Answered when its agent connects, or not within kConnectWithin.
  op.deliver = [](const core::ExecSession&, const Responder&) {};
  api.Run<core::ExecSession>(call, req.status(), std::move(op));
}

void AgentConnects(Api& api, std::shared_ptr<Call> call) {
  const std::string id = call->params[0];
  const std::string node = call->principal.node;
  ExecBroker* broker = api.exec();
  if (!AsksForExec(call->request)) return api.ReplyError(*call, NotUpgraded());
  auto taken = broker ? broker->Take(id, node) : std::nullopt;
  if (!taken) {
    return api.ReplyError(
        *call, Status::NotFound(fmt::format(
                   "exec session '{}' is not waiting for node '{}': unknown, given up, or "
                   "another node's",
                   Quote(id), node)));
  }
  api.core().Submit<bool>(
      [node, id](core::State& s, store::Batch&) -> Result<bool> {
        s.agents().CloseExec(node, id);
        return true;
      },
      [](Result<bool>) {});
  const std::string tenant = taken->second;
  broker->Joined(tenant);
  Responder::Join(taken->first, SwitchingHead(), call->responder, SwitchingHead(), kIdle,
                  [broker, tenant] { broker->Ended(tenant); });
}

}  // namespace

void ExecBroker::Wait(const std::string& id, const std::string& node, const std::string& tenant,
                      Responder client, std::chrono::milliseconds within) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) {
    client.Send(ErrorResponse(503, "unavailable", "the server is stopping"));
    return;
  }
  waiting_.insert_or_assign(id,
                            Waiting{node, tenant, std::move(client), steady_clock::now() + within});
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  cv_.notify_all();
}

std::optional<std::pair<Responder, std::string>> ExecBroker::Take(const std::string& id,
                                                                  const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiting_.find(id);
  if (it == waiting_.end() || it->second.node != node) return std::nullopt;
  std::pair<Responder, std::string> out(std::move(it->second.client), it->second.tenant);
  waiting_.erase(it);
  return out;
}

void ExecBroker::Stop() {
  std::map<std::string, Waiting> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    left.swap(waiting_);
    cv_.notify_all();
  }
  for (auto& entry : left) {
    entry.second.client.Send(ErrorResponse(503, "unavailable", "the server is stopping"));
  }
  if (thread_.joinable()) thread_.join();
}

int64_t ExecBroker::OpenOf(const std::string& tenant) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(tenant);
  return it == open_.end() ? 0 : it->second;
}
void ExecBroker::Joined(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  ++open_[tenant];
}
void ExecBroker::Ended(const std::string& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = open_.find(tenant); it != open_.end() && --it->second <= 0) open_.erase(it);
}

void ExecBroker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    const auto now = steady_clock::now();
    auto next = now + std::chrono::seconds(1);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.deadline > now) {
        next = std::min(next, it->second.deadline);
        ++it;
        continue;
      }
      it->second.client.Send(ErrorResponse(
          504, "gateway_timeout",
          fmt::format("the agent of node '{}' did not connect for the session within {} s; it "
                      "may be cut off from this server",
                      it->second.node, kConnectWithin.count())));
      it = waiting_.erase(it);
    }
    cv_.wait_until(lock, next);
  }
}

void AddExecRoutes(Api& table) {
  table.Add("POST", "/v1/instances/{id}/exec", Access::kAnyToken, BodyKind::kJson, true,
            OpenSession);
  table.Add("POST", "/v1/agent/exec/{session}", Access::kNode, BodyKind::kNone, false,
            AgentConnects);
}

}  // namespace tessera::api
