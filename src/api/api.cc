#include "api/api.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <charconv>
#include <set>

#include "api/codec.h"
#include "common/auth.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

namespace {

// A body sent to a route that takes none is read up to this and ignored.
constexpr size_t kIgnoredBodyBytes = 4 << 10;

// True for "application/json" exactly (any case), with parameters allowed, but no charset
// other than UTF-8, the only one JSON has (RFC 8259).
bool IsJsonMediaType(std::string_view type) {
  const size_t semi = type.find(';');
  if (!IEquals(TrimSpace(type.substr(0, semi)), "application/json")) return false;
  while (semi != std::string_view::npos && !type.empty()) {
    type.remove_prefix(std::min(type.size(), type.find(';') + 1));
    const std::string_view param = TrimSpace(type.substr(0, type.find(';')));
    const size_t eq = param.find('=');
    if (eq != std::string_view::npos && IEquals(TrimSpace(param.substr(0, eq)), "charset")) {
      std::string_view value = TrimSpace(param.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      if (!IEquals(value, "utf-8")) return false;
    }
    if (type.find(';') == std::string_view::npos) break;
  }
  return true;
}

std::vector<std::string> Segments(std::string_view path) {
  std::vector<std::string> out;
  for (std::string_view s : PathSegments(path)) out.emplace_back(s);
  return out;
}

}  // namespace

HttpResponse StatusResponse(const Status& status) {
  const HttpError e = ToHttpError(status);
  return ErrorResponse(e.status, e.code, status.message());
}

HttpResponse JsonResponse(int status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  return r;
}

std::string Actor(const core::Tenant& t) { return t.admin ? "admin" : t.id.str(); }

Status PageParams(const Target& target, int64_t& after, size_t& limit, int64_t default_limit,
                  int64_t max_limit) {
  auto number = [](const std::string& text, int64_t max) -> std::optional<int64_t> {
    int64_t v = 0;
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || p != text.data() + text.size() || v < 0 || v > max) {
      return std::nullopt;
    }
    return v;
  };
  after = 0;
  limit = static_cast<size_t>(default_limit);
  if (const std::string* text = target.Param("limit")) {
    auto v = number(*text, max_limit);
    if (!v || *v == 0) {
      return Status::InvalidArgument(fmt::format(
          "query parameter 'limit': '{}' is not an integer in [1, {}]", Quote(*text), max_limit));
    }
    limit = static_cast<size_t>(*v);
  }
  if (const std::string* text = target.Param("page_token")) {
    auto v =
        text->size() > 1 && (*text)[0] == 'p' ? number(text->substr(1), INT64_MAX) : std::nullopt;
    if (!v) {
      return Status::InvalidArgument(
          "query parameter 'page_token': not a token this server gave (use a page's "
          "next_page_token as it is)");
    }
    after = *v;
  }
  return Status::Ok();
}

std::string PageToken(int64_t after) { return fmt::format("p{}", after); }

Result<const core::Tenant*> VisibleTenant(const core::State& s, const core::Tenant& caller,
                                          const std::string& id) {
  const core::Tenant* t = s.tenants().Find(id);
  if (!t || (!caller.admin && caller.id != t->id)) {
    return Status::NotFound(fmt::format("tenant '{}' not found", Quote(id)));
  }
  return t;
}

Status IntParam(const Target& target, const char* name, int64_t min, int64_t max, int64_t& value) {
  const std::string* text = target.Param(name);
  if (!text) return Status::Ok();
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
  if (ec != std::errc() || p != text->data() + text->size() || v < min || v > max) {
    return Status::InvalidArgument(fmt::format(
        "query parameter '{}': '{}' is not an integer in [{}, {}]", name, Quote(*text), min, max));
  }
  value = v;
  return Status::Ok();
}

Result<std::pair<std::string, std::string>> NewToken() {
  TESSERA_ASSIGN_OR_RETURN(std::string token, GenerateToken());
  std::string hash = HashToken(token);
  return std::pair{std::move(token), std::move(hash)};
}

Api::Api(const catalog::Catalog* catalog, const Clock* clock) : catalog_(catalog), clock_(clock) {}

void Api::Add(std::string method, std::string pattern, Access access, BodyKind body, bool audited,
              Handler handler, std::optional<core::Role> need) {
  const bool write = method != "GET" && method != "HEAD";
  const core::Role role = need.value_or(write ? core::Role::kMember : core::Role::kViewer);
  std::vector<std::string> query;
  bool any_query = false;
  if (const size_t mark = pattern.find('?'); mark != std::string::npos) {
    for (std::string_view name : Split(std::string_view(pattern).substr(mark + 1), '&')) {
      if (name == "*") {
        any_query = true;
      } else if (!name.empty()) {
        query.emplace_back(name);
      }
    }
    pattern.resize(mark);
  }
  std::vector<std::string> segments = Segments(pattern);
  routes_.push_back({std::move(method), std::move(pattern), std::move(segments), std::move(query),
                     any_query, access, body, audited, std::move(handler), role, write});
}

nlohmann::json Api::RoutesJson() const {
  static constexpr const char* kAccess[] = {"public", "any_token", "admin", "tenant", "node"};
  nlohmann::json out = nlohmann::json::array();
  for (const Route& r : routes_) {
    nlohmann::json j = {{"method", r.method},
                        {"pattern", r.pattern},
                        {"query", r.query},
                        {"access", kAccess[static_cast<int>(r.access)]},
                        {"write", r.write}};
    if (r.access == Access::kTenant || r.access == Access::kAnyToken) {
      j["role"] = core::RoleName(r.need);
    }
    out.push_back(std::move(j));
  }
  return out;
}

Status Api::CheckQuery(const Route& route, const Target& target) {
  if (route.any_query) return Status::Ok();
  const std::string* unknown = nullptr;
  size_t more = 0;
  for (const auto& [name, value] : target.query) {
    if (std::find(route.query.begin(), route.query.end(), name) != route.query.end()) continue;
    if (unknown) {
      ++more;
    } else {
      unknown = &name;
    }
  }
  if (!unknown) return Status::Ok();
  const std::string takes = route.query.empty() ? std::string("no query parameters")
                                                : fmt::format("{}", fmt::join(route.query, ", "));
  return Status::InvalidArgument(fmt::format(
      "query parameter '{}' is not known here; {} {} takes {}{}", Quote(*unknown), route.method,
      route.pattern, takes, more > 0 ? fmt::format(" ({} more unknown)", more) : ""));
}

const Api::Route* Api::Match(const HttpRequest& head, std::vector<std::string>& params,
                             std::vector<std::string>& allowed) const {
  const std::vector<std::string_view> path = PathSegments(head.parsed.path);
  const Route* found = nullptr;
  for (const Route& r : routes_) {
    // A last segment "{*}" takes whatever path follows (none included); the handler reads it.
    const bool tail = !r.segments.empty() && r.segments.back() == "{*}";
    const size_t fixed = r.segments.size() - (tail ? 1 : 0);
    if (tail ? path.size() < fixed : r.segments.size() != path.size()) continue;
    std::vector<std::string> p;
    bool match = true;
    for (size_t i = 0; i < fixed && match; ++i) {
      const std::string& s = r.segments[i];
      if (s.size() > 2 && s.front() == '{' && s.back() == '}') {
        match = !path[i].empty();
        p.emplace_back(path[i]);
      } else {
        match = s == path[i];
      }
    }
    if (!match) continue;
    allowed.push_back(r.method);
    if (r.method == head.method && !found) {
      found = &r;
      params = std::move(p);
    }
  }
  return found;
}

Result<core::Principal> Api::Authenticate(const HttpRequest& head, std::string& token_hash) {
  const std::string* header = head.Header("authorization");
  if (!header) {
    return Status::Unauthenticated("missing bearer token (Authorization: Bearer <token>)");
  }
  const std::string_view token = BearerToken(*header);
  if (token.empty()) {
    return Status::Unauthenticated("the Authorization header must be 'Bearer <token>'");
  }
  token_hash = HashToken(token);
  return core::Authenticate(*core_->principals(), token_hash, clock_->Now());
}

HeadDecision Api::OnHead(const HttpRequest& head) {
  HeadDecision decision;
  std::vector<std::string> params, allowed;
  const Route* route = Match(head, params, allowed);
  if (!route) {
    HttpResponse r;
    if (allowed.empty()) {
      r = ErrorResponse(404, "not_found",
                        fmt::format("no route {} {}", head.method, head.parsed.path));
    } else {
      r = ErrorResponse(405, "method_not_allowed",
                        fmt::format("{} does not take {}; it takes {}", head.parsed.path,
                                    head.method, fmt::join(allowed, ", ")));
      r.headers.emplace_back("Allow", fmt::format("{}", fmt::join(allowed, ", ")));
    }
    metrics_.CountRequest(head.method, "unmatched", r.status);
    decision.refuse = std::move(r);
    return decision;
  }
  // On a follower, before the token: the leader authenticates, audits and answers.
  if (auto redirect = RedirectToLeader(*route, head)) {
    metrics_.CountRequest(head.method, route->pattern, redirect->status);
    decision.refuse = std::move(*redirect);
    return decision;
  }
  std::string token_hash;
  core::Principal principal;
  if (route->access != Access::kPublic) {
    auto p = Authenticate(head, token_hash);
    if (!p.ok()) {
      const int status = StatusResponse(p.status()).status;
      metrics_.CountRefusal(status == 401 ? "unauthenticated" : "disabled");
      if (status == 401) SampleAnonymous(head, p.status().message());
      HttpResponse r = StatusResponse(p.status());
      if (status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"tessera\"");
      metrics_.CountRequest(head.method, route->pattern, r.status);
      decision.refuse = std::move(r);
      return decision;
    }
    principal = *p;
    const bool node_route = route->access == Access::kNode;
    const bool admin_only = route->access == Access::kAdmin && !principal.admin;
    const bool tenant_only = route->access == Access::kTenant && principal.admin;
    // A node token acts only as its node, on the agent routes; no other token may use those.
    const bool node_only = node_route != !principal.node.empty();
    if (admin_only || tenant_only || node_only) {
      const std::string message =
          node_only && node_route ? "the agent routes take a node token (POST /v1/nodes)"
          : node_only             ? "a node token may call only the agent routes (/v1/agent/...)"
          : admin_only            ? "this route is for the operator's admin token"
                       : "the admin token has no quota; create instances with a tenant's token";
      decision.refuse = ErrorResponse(403, "forbidden", message);
      if (route->audited) AuditAsync(principal, head, 403, message);
      metrics_.CountRequest(head.method, route->pattern, 403);
      return decision;
    }
    // With --client-ca, a node token counts only over a connection whose client certificate
    // names its node (in-process agents have no connection to prove).
    if (node_route && require_client_certs_ && head.peer != kInProcessPeer &&
        std::find(head.client_names.begin(), head.client_names.end(), principal.node) ==
            head.client_names.end()) {
      const std::string message = fmt::format(
          "the agent routes need a client certificate for node '{}' signed by the server's "
          "--client-ca (the connection presented {})",
          principal.node,
          head.client_names.empty()
              ? std::string("none that verified")
              : fmt::format("one for {}", fmt::join(head.client_names, ", ")));
      decision.refuse = ErrorResponse(403, "forbidden", message);
      metrics_.CountRefusal("client_certificate");
      metrics_.CountRequest(head.method, route->pattern, 403);
      return decision;
    }
    // A tenant's user acts within its role; a read-only token only reads (docs/users.md).
    if (Status role = core::Authorize(principal, route->need, route->write); !role.ok()) {
      decision.refuse = StatusResponse(role);
      metrics_.CountRefusal("role");
      if (route->audited) AuditAsync(principal, head, 403, role.message());
      metrics_.CountRequest(head.method, route->pattern, 403);
      return decision;
    }
  }
  // After the token, as an unknown body field is refused only for a known caller.
  if (Status query = CheckQuery(*route, head.parsed); !query.ok()) {
    decision.refuse = StatusResponse(query);
    if (route->audited) AuditAsync(principal, head, 400, query.message());
    metrics_.CountRequest(head.method, route->pattern, 400);
    return decision;
  }
  decision.max_body = kIgnoredBodyBytes;
  // Each principal's bodies count against its own share of the body budget, and the agents' and
  // the operator's against a pool of their own: no tenant can starve another, the nodes, or the
  // operator acting against it (docs/http.md). A public route's caller is known by its address.
  if (route->access != Access::kPublic) {
    decision.budget_key = !principal.node.empty() ? "node " + principal.node
                          : principal.admin       ? std::string("admin")
                                                  : "tenant " + principal.tenant.str();
    decision.reserved = !principal.node.empty() || principal.admin;
  }
  if (route->body != BodyKind::kNone) {
    decision.max_body = SIZE_MAX;  // The HTTP layer's limit (1 MiB) applies.
    const std::string* type = head.Header("content-type");
    if (route->body != BodyKind::kRaw && head.has_body && (!type || !IsJsonMediaType(*type))) {
      const std::string message =
          type ? fmt::format("Content-Type must be application/json, not '{}'", Quote(*type))
               : std::string("Content-Type must be application/json");
      decision.refuse = ErrorResponse(415, "unsupported_media_type", message);
      if (route->audited) AuditAsync(principal, head, 415, message);
      metrics_.CountRequest(head.method, route->pattern, 415);
      return decision;
    }
  }
  decision.handler = [this, route, params = std::move(params), token_hash, principal](
                         HttpRequest&& request, Responder responder) {
    auto call = std::make_shared<Call>(Call{
        std::move(request), route->pattern, route->audited, params, token_hash, principal,
        route->need, route->write, nlohmann::json::object(), Status::Ok(), std::move(responder)});
    if (route->body != BodyKind::kNone && route->body != BodyKind::kRaw) {
      if (call->request.body.empty() && route->body == BodyKind::kOptionalJson) {
        call->body = nlohmann::json::object();
      } else if (auto j = ParseJson(call->request.body, "body"); j.ok()) {
        call->body = std::move(*j);
        if (!call->body.is_object()) {
          call->body_status = Status::InvalidArgument(
              fmt::format("body: expected an object, found {}", JsonTypeName(call->body)));
        }
      } else {
        call->body_status = j.status();
      }
    }
    route->handler(*this, call);
    // The handler has parsed what it needs; the raw body and its JSON need not wait in memory
    // for the core's answer.
    call->body = nlohmann::json();
    std::string().swap(call->request.body);
  };
  return decision;
}

std::optional<HttpResponse> Api::RedirectToLeader(const Route& route, const HttpRequest& head) {
  if (!replica_ || !core_->follower()) return std::nullopt;
  // Followers serve reads from their own state, rebuilt from the store: every GET but the
  // agents' (their reports and long polls change what the leader holds) and those of what only
  // the leader's memory holds, from the agents' reports (logs, GPU telemetry).
  static const std::set<std::string, std::less<>> kLeaderMemory = {
      "/v1/instances/{id}/logs",
      "/v1/instances/{id}/metrics",
      "/v1/metrics/instances",
      "/v1/nodes/{id}",
      "/v1/instances/{id}/ports/{port}/{*}",
      "/v1/groups/{id}/service/{*}"};
  const bool read = head.method == "GET" || head.method == "HEAD";
  if (read && route.access != Access::kNode && !kLeaderMemory.contains(route.pattern)) {
    return std::nullopt;
  }
  const std::string leader = replica_->view().leader_url;
  if (leader.empty()) {
    HttpResponse r = ErrorResponse(
        503, "no_leader", "no replica leads at the moment (a failover is under way); retry");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  HttpResponse r = ErrorResponse(307, "not_leader",
                                 fmt::format("this replica follows; the leader is {}", leader));
  r.headers.emplace_back("Location", leader + head.target);
  return r;
}

void Api::AuditAsync(const core::Principal& who, const HttpRequest& head, int status,
                     const std::string& detail) {
  store::AuditRecord record{0,
                            FormatRfc3339(clock_->Now()),
                            who.admin ? "admin" : who.tenant.str(),
                            head.method + " " + head.parsed.path,
                            "",
                            status,
                            detail,
                            who.user};
  core_->Submit<bool>(
      [this, record = std::move(record)](core::State&, store::Batch& b) -> Result<bool> {
        Audit(b, record);
        return true;
      },
      [](Result<bool>) {});
}

void Api::Audit(store::Batch& batch, store::AuditRecord row) {
  if (auto admitted = audit_gate_.Admit(std::move(row), clock_->Now())) {
    batch.audit.push_back(std::move(*admitted));
  } else {
    metrics_.CountUnrecordedAudit();
  }
}

void Api::SampleAnonymous(const HttpRequest& head, const std::string& why) {
  const Time now = clock_->Now();
  int64_t skipped = 0;
  {
    std::lock_guard<std::mutex> lock(sample_mu_);
    if (now - last_sample_ < std::chrono::seconds(1)) {
      ++unsampled_;
      return;
    }
    last_sample_ = now;
    skipped = unsampled_;
    unsampled_ = 0;
  }
  spdlog::warn("refused an unauthenticated request from {}: {} {}: {}{}", head.peer, head.method,
               Quote(head.parsed.path, 200), why,
               skipped > 0 ? fmt::format(" (and {} more since the last report)", skipped) : "");
}

void Api::Reply(Call& call, HttpResponse response) {
  metrics_.CountRequest(call.request.method, call.route, response.status);
  call.responder.Send(std::move(response));
}

void Api::ReplyError(Call& call, const Status& status) { Reply(call, StatusResponse(status)); }

}  // namespace tessera::api
