#include "api/server.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <charconv>
#include <filesystem>
#include <map>
#include <mutex>
#include <tuple>

#include "api/codec.h"
#include "api/metrics.h"
#include "common/auth.h"
#include "common/json.h"

namespace tessera::api {

namespace {

using nlohmann::json;

// Who may call a route.
enum class Access {
  kAnyToken,  // The admin or any tenant.
  kAdmin,     // The operator's admin token only.
  kTenant,    // A tenant's token only (the admin has no quota to spend).
};

// An answer decided before the core ran, with its own HTTP status (413, 415, 400).
struct Refusal {
  int status = 0;
  std::string code;
  std::string message;
};

void Reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

}  // namespace

struct ApiServer::Impl {
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  core::Core* core;
  const catalog::Catalog* catalog;
  ServerOptions options;
  httplib::Server http;
  Metrics metrics;
  std::atomic<bool> ready{false};

  Impl(core::Core* c, const catalog::Catalog* cat, ServerOptions o)
      : core(c), catalog(cat), options(std::move(o)) {}

  // Registers a route and counts its requests under the pattern, not the raw path.
  void Route(const std::string& method, const std::string& pattern, const std::string& label,
             Handler h) {
    Handler counted = [this, method, label, h](const httplib::Request& req,
                                               httplib::Response& res) {
      h(req, res);
      metrics.CountRequest(method, label, res.status);
    };
    if (method == "GET") http.Get(pattern, counted);
    if (method == "POST") http.Post(pattern, counted);
    if (method == "DELETE") http.Delete(pattern, counted);
  }

  // Runs one request in a single round on the core: authenticates the bearer token (401),
  // checks `access` (403), reports `refusal` (a defect found in the request before the core) and
  // only then runs `op` as the caller. A mutating request (`audited`) appends its audit record,
  // whatever the outcome, to the same durable batch as its changes. `refused` tells the caller
  // to answer with the refusal's own status.
  template <typename T>
  Result<T> Execute(const httplib::Request& req, Access access, bool audited, int ok_status,
                    const std::optional<Refusal>& refusal, bool& refused,
                    std::function<Result<T>(core::State&, store::Batch&, const core::Tenant&)> op,
                    std::function<std::string(const T&)> target) {
    const std::string header = req.get_header_value("Authorization");
    const std::string_view token = BearerToken(header);
    const std::string hash = token.empty() ? "" : HashToken(token);
    refused = false;
    return core->Run<T>([&](core::State& s, store::Batch& b) -> Result<T> {
      const core::Tenant* caller = hash.empty() ? nullptr : s.Authenticate(hash);
      Result<T> out = Status::Internal("unreached");
      if (!caller) {
        out = Status::Unauthenticated(
            hash.empty() ? "missing bearer token (Authorization: Bearer ...)" : "invalid token");
      } else if (access == Access::kAdmin && !caller->admin) {
        out = Status::PermissionDenied("this route is for the operator's admin token");
      } else if (access == Access::kTenant && caller->admin) {
        out = Status::PermissionDenied(
            "the admin token has no quota; create instances with a tenant's token");
      } else if (refusal) {
        refused = true;
        out = Status::InvalidArgument(refusal->message);
      } else {
        out = op(s, b, *caller);
      }
      if (audited) {
        const std::string actor = !caller         ? "anonymous"
                                  : caller->admin ? "admin"
                                                  : caller->id.str();
        const int status = out.ok()  ? ok_status
                           : refused ? refusal->status
                                     : ToHttpError(out.status()).status;
        b.audit.push_back({0, FormatRfc3339(SystemClock::Get().Now()), actor,
                           req.method + " " + req.path, out.ok() && target ? target(*out) : "",
                           status, out.ok() ? "" : out.status().message()});
      }
      return out;
    });
  }

  // Answers a failed Execute: with the refusal's own status when that was the answer.
  static void ReplyFailure(httplib::Response& res, const Status& status,
                           const std::optional<Refusal>& refusal, bool refused) {
    if (refused) return Reply(res, refusal->status, ErrorBody(refusal->code, refusal->message));
    const HttpError e = ToHttpError(status);
    Reply(res, e.status, ErrorBody(e.code, status.message()));
  }

  // Execute, answered with `render`'s JSON.
  template <typename T>
  void Handle(const httplib::Request& req, httplib::Response& res, Access access, bool audited,
              int ok_status, std::optional<Refusal> refusal,
              std::function<Result<T>(core::State&, store::Batch&, const core::Tenant&)> op,
              std::function<json(const T&)> render,
              std::function<std::string(const T&)> target = nullptr) {
    bool refused = false;
    auto r = Execute<T>(req, access, audited, ok_status, refusal, refused, std::move(op),
                        std::move(target));
    if (!r.ok()) return ReplyFailure(res, r.status(), refusal, refused);
    Reply(res, ok_status, render(*r));
  }

  // Parses a JSON body into `out`; a defect becomes a refusal (413, 415 or 400).
  std::optional<Refusal> Body(const httplib::Request& req, json& out) {
    if (req.body.size() > options.max_body_bytes) {
      return Refusal{413, "payload_too_large",
                     fmt::format("the body is {} bytes; the limit is {}", req.body.size(),
                                 options.max_body_bytes)};
    }
    const std::string type = req.get_header_value("Content-Type");
    if (type.rfind("application/json", 0) != 0) {
      return Refusal{415, "unsupported_media_type",
                     fmt::format("Content-Type must be application/json, not '{}'", type)};
    }
    auto j = ParseJson(req.body, "body");
    if (!j.ok()) return Refusal{400, "invalid_argument", j.status().message()};
    out = std::move(*j);
    return std::nullopt;
  }

  // Parses a body with `parse`; any defect becomes a refusal.
  template <typename T>
  std::optional<Refusal> ParseBody(const httplib::Request& req, T& out,
                                   const std::function<Result<T>(const json&)>& parse) {
    json body;
    if (auto refusal = Body(req, body)) return refusal;
    auto parsed = parse(body);
    if (!parsed.ok()) return Refusal{400, "invalid_argument", parsed.status().message()};
    out = std::move(*parsed);
    return std::nullopt;
  }

  void Routes() {
    TenantRoutes();
    InstanceRoutes();
    NodeRoutes();
    ObservabilityRoutes();
    http.set_payload_max_length(options.max_body_bytes * 4);
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        Reply(res, 413, ErrorBody("payload_too_large", "the body is over the size limit"));
      } else if (res.status == 404) {
        Reply(res, 404,
              ErrorBody("not_found", fmt::format("no route {} {}", req.method, req.path)));
      } else {
        Reply(res, res.status, ErrorBody("error", fmt::format("HTTP status {}", res.status)));
      }
    });
  }

  void TenantRoutes();
  void InstanceRoutes();
  void NodeRoutes();
  void ObservabilityRoutes();
};

void ApiServer::Impl::TenantRoutes() {
  Route("POST", "/v1/tenants", "/v1/tenants", [this](const auto& req, auto& res) {
    CreateTenantRequest parsed;
    auto refusal = ParseBody<CreateTenantRequest>(req, parsed, ParseCreateTenant);
    auto token = GenerateToken();
    if (!token.ok()) return Reply(res, 500, ErrorBody("internal", token.status().message()));
    const std::string hash = HashToken(*token);
    Handle<core::Tenant>(
        req, res, Access::kAdmin, true, 201, refusal,
        [&](core::State& s, store::Batch& b, const core::Tenant&) {
          return s.CreateTenant(parsed.name, parsed.quota_gpu_milli, hash, b);
        },
        [&](const core::Tenant& t) {
          json j = core::ToJson(t);
          j["token"] = *token;  // Shown this once; only its hash is stored.
          return j;
        },
        [](const core::Tenant& t) { return t.id.str(); });
  });
  Route("GET", "/v1/tenants", "/v1/tenants", [this](const auto& req, auto& res) {
    Handle<json>(
        req, res, Access::kAdmin, false, 200, std::nullopt,
        [](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
          json out = json::array();
          for (const auto& t : s.ListTenants()) out.push_back(core::ToJson(t));
          return json{{"tenants", out}};
        },
        [](const json& j) { return j; });
  });
  Route("GET", "/v1/instance-types", "/v1/instance-types", [this](const auto& req, auto& res) {
    Handle<json>(
        req, res, Access::kAnyToken, false, 200, std::nullopt,
        [this](core::State&, store::Batch&, const core::Tenant&) -> Result<json> {
          return json{{"instance_types", InstanceTypesJson(*catalog)}};
        },
        [](const json& j) { return j; });
  });
}

void ApiServer::Impl::InstanceRoutes() {
  auto render = [](const core::Instance& i) { return core::ToJson(i); };
  auto target = [](const core::Instance& i) { return i.id.str(); };
  Route("POST", "/v1/instances", "/v1/instances", [=, this](const auto& req, auto& res) {
    core::CreateInstanceRequest parsed;
    auto refusal = ParseBody<core::CreateInstanceRequest>(req, parsed, ParseCreateInstance);
    Handle<core::Instance>(
        req, res, Access::kTenant, true, 201, refusal,
        [&](core::State& s, store::Batch& b, const core::Tenant& caller) {
          return s.CreateInstance(caller, parsed, b);
        },
        render, target);
  });
  Route("GET", "/v1/instances", "/v1/instances", [this](const auto& req, auto& res) {
    std::optional<core::InstanceState> state;
    std::optional<Refusal> refusal;
    if (req.has_param("state")) {
      const std::string text = req.get_param_value("state");
      state = core::ParseState(text);
      if (!state) {
        refusal = Refusal{400, "invalid_argument",
                          fmt::format("query 'state': '{}' is not an instance state", text)};
      }
    }
    Handle<json>(
        req, res, Access::kAnyToken, false, 200, refusal,
        [&](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
          json out = json::array();
          for (const auto& i : s.ListInstances(caller, state)) {
            out.push_back(core::ToJson(i));
          }
          return json{{"instances", out}};
        },
        [](const json& j) { return j; });
  });
  Route("GET", R"(/v1/instances/([^/]+))", "/v1/instances/{id}",
        [=, this](const auto& req, auto& res) {
          const std::string id = req.matches[1];
          Handle<core::Instance>(
              req, res, Access::kAnyToken, false, 200, std::nullopt,
              [&](core::State& s, store::Batch&, const core::Tenant& caller) {
                return s.GetInstance(caller, id);
              },
              render);
        });
  Route("DELETE", R"(/v1/instances/([^/]+))", "/v1/instances/{id}",
        [=, this](const auto& req, auto& res) {
          const std::string id = req.matches[1];
          Handle<core::Instance>(
              req, res, Access::kAnyToken, true, 200, std::nullopt,
              [&](core::State& s, store::Batch& b, const core::Tenant& caller) {
                return s.DeleteInstance(caller, id, b);
              },
              render, target);
        });
}

void ApiServer::Impl::NodeRoutes() {
  Route("GET", "/v1/nodes", "/v1/nodes", [this](const auto& req, auto& res) {
    Handle<json>(
        req, res, Access::kAdmin, false, 200, std::nullopt,
        [](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
          return json{{"nodes", NodesJson(s.fleet())}};
        },
        [](const json& j) { return j; });
  });
  for (const bool drain : {true, false}) {
    const std::string verb = drain ? "drain" : "undrain";
    Route("POST", R"(/v1/nodes/([^/]+)/)" + verb, "/v1/nodes/{id}/" + verb,
          [this, drain](const auto& req, auto& res) {
            const std::string node = req.matches[1];
            Handle<std::string>(
                req, res, Access::kAdmin, true, 200, std::nullopt,
                [&](core::State& s, store::Batch& b, const core::Tenant&) -> Result<std::string> {
                  TESSERA_RETURN_IF_ERROR(s.SetNodeDrained(node, drain, b));
                  return node;
                },
                [&](const std::string& n) {
                  return json{{"id", n}, {"state", drain ? "draining" : "ready"}};
                },
                [](const std::string& n) { return n; });
          });
  }
}

void ApiServer::Impl::ObservabilityRoutes() {
  Route("GET", "/healthz", "/healthz", [](const auto&, auto& res) {
    Reply(res, 200, {{"status", "ok"}});
  });
  Route("GET", "/readyz", "/readyz", [this](const auto&, auto& res) {
    if (!ready) return Reply(res, 503, ErrorBody("unavailable", "starting"));
    Reply(res, 200, {{"status", "ready"}});
  });
  // Metrics name tenants and count their instances, so only the operator may read them
  // (Prometheus sends the admin token with `authorization: {credentials: ...}`).
  Route("GET", "/metrics", "/metrics", [this](const auto& req, auto& res) {
    bool refused = false;
    auto text = Execute<std::string>(
        req, Access::kAdmin, false, 200, std::nullopt, refused,
        [this](core::State& s, store::Batch&, const core::Tenant&) -> Result<std::string> {
          return metrics.Render(s);
        },
        nullptr);
    if (!text.ok()) return ReplyFailure(res, text.status(), std::nullopt, refused);
    res.status = 200;
    res.set_content(*text, "text/plain; version=0.0.4");
  });
  Route("GET", "/v1/audit", "/v1/audit", [this](const auto& req, auto& res) {
    int64_t after = 0;
    int64_t limit = 100;
    std::optional<Refusal> refusal;
    for (auto [name, value, max] :
         {std::tuple{"after", &after, INT64_MAX}, std::tuple{"limit", &limit, int64_t{1000}}}) {
      if (!req.has_param(name)) continue;
      const std::string text = req.get_param_value(name);
      int64_t v = 0;
      const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || v < 0 || v > max) {
        refusal =
            Refusal{400, "invalid_argument",
                    fmt::format("query '{}': '{}' is not an integer in [0, {}]", name, text, max)};
      }
      *value = v;
    }
    // Authorise on the core first; the store is then read on the core thread too.
    Handle<bool>(
        req, res, Access::kAdmin, false, 200, refusal,
        [](core::State&, store::Batch&, const core::Tenant&) -> Result<bool> { return true; },
        [](const bool&) { return json(); });
    if (res.status != 200) return;
    auto entries = core->ListAudit(after, static_cast<int>(limit));
    if (!entries.ok()) return Reply(res, 503, ErrorBody("unavailable", entries.status().message()));
    json out = json::array();
    for (const auto& e : *entries) {
      out.push_back({{"seq", e.seq},
                     {"at", e.at},
                     {"actor", e.actor},
                     {"action", e.action},
                     {"target", e.target},
                     {"status", e.status},
                     {"detail", e.detail}});
    }
    Reply(res, 200, {{"entries", out}});
  });
}

ApiServer::ApiServer(core::Core* core, const catalog::Catalog* catalog, ServerOptions options)
    : impl_(std::make_unique<Impl>(core, catalog, std::move(options))) {
  impl_->Routes();
  // Handlers mostly wait for the core's durable commit, not for CPU, so many workers let one
  // group commit carry many requests.
  // A server that closes keep-alive connections after a few requests races with clients that
  // reuse them, and a POST caught in that race fails on the client's side without an answer.
  impl_->http.set_keep_alive_max_count(100000);
  impl_->http.set_keep_alive_timeout(60);
  const size_t workers = impl_->options.workers;
  impl_->http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
}

ApiServer::~ApiServer() { Stop(); }

namespace {

// Debian's cpp-httplib is compiled with a listen backlog of 5, so a burst of new connections
// overflows the accept queue and clients see resets. Linux lets listen() be called again on a
// listening socket to raise the backlog; find ours by its bound port and do so.
void RaiseListenBacklog(int port) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    const std::string name = entry.path().filename().string();
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) != 0) continue;
    const int bound = addr.ss_family == AF_INET
                          ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                          : ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}

}  // namespace

Status ApiServer::Bind() {
  if (impl_->options.port == 0) {
    const int port = impl_->http.bind_to_any_port(impl_->options.host);
    if (port < 0) return Status::Unavailable("cannot listen on " + impl_->options.host);
    impl_->options.port = port;
  } else if (!impl_->http.bind_to_port(impl_->options.host, impl_->options.port)) {
    return Status::Unavailable(fmt::format("cannot listen on {}:{} (in use, or not an address)",
                                           impl_->options.host, impl_->options.port));
  }
  RaiseListenBacklog(impl_->options.port);
  return Status::Ok();
}

int ApiServer::port() const { return impl_->options.port; }

void ApiServer::Serve() {
  impl_->ready = true;
  impl_->http.listen_after_bind();
}

void ApiServer::Stop() {
  impl_->ready = false;
  impl_->http.stop();
}

}  // namespace tessera::api
