#include "api/server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <charconv>
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

// The principal behind a request, copied out of the core so handlers never hold core memory.
struct Caller {
  core::Tenant tenant;
  std::string actor() const { return tenant.admin ? "admin" : tenant.id.str(); }
};

}  // namespace

struct ApiServer::Impl {
  // Who made a mutating request and what it touched; written to the audit log exactly once.
  struct Audit {
    std::string actor = "anonymous";
    std::string target;
    bool recorded = false;
  };
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  using AuditedHandler = std::function<void(const httplib::Request&, httplib::Response&, Audit&)>;

  core::Core* core;
  const catalog::Catalog* catalog;
  ServerOptions options;
  httplib::Server http;
  Metrics metrics;
  std::atomic<bool> ready{false};

  Impl(core::Core* c, const catalog::Catalog* cat, ServerOptions o)
      : core(c), catalog(cat), options(std::move(o)) {}

  static void Reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
  }

  static void ReplyError(httplib::Response& res, const Status& s) {
    const HttpError e = ToHttpError(s);
    Reply(res, e.status, ErrorBody(e.code, s.message()));
  }

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

  // A mutating route: whatever the outcome, one audit record is written. Commands that reach
  // the core write it in their own durable batch; refusals before that get one of their own.
  void Mutating(const std::string& method, const std::string& pattern, const std::string& label,
                AuditedHandler h) {
    Route(method, pattern, label, [this, h](const httplib::Request& req, httplib::Response& res) {
      Audit audit;
      h(req, res, audit);
      if (!audit.recorded) {
        const std::string detail = res.status >= 400 ? ErrorMessage(res) : "";
        (void)core->Run<bool>([&](core::State&, store::Batch& b) -> Result<bool> {
          AppendAudit(b, req, audit, res.status, detail);
          return true;
        });
      }
    });
  }

  static std::string ErrorMessage(const httplib::Response& res) {
    json j = json::parse(res.body, nullptr, false);
    if (j.is_object() && j.contains("error")) return j["error"].value("message", "");
    return "";
  }

  static void AppendAudit(store::Batch& b, const httplib::Request& req, const Audit& audit,
                          int status, const std::string& detail) {
    b.audit.push_back({0, FormatRfc3339(SystemClock::Get().Now()), audit.actor,
                       req.method + " " + req.path, audit.target, status, detail});
  }

  // Runs a mutating command with its audit record in the same durable batch, and answers.
  template <typename T>
  void Mutate(const httplib::Request& req, httplib::Response& res, Audit& audit, int ok_status,
              std::function<Result<T>(core::State&, store::Batch&)> fn,
              std::function<json(const T&)> render, std::function<std::string(const T&)> target) {
    auto r = core->Run<T>([&](core::State& s, store::Batch& b) -> Result<T> {
      Result<T> out = fn(s, b);
      if (out.ok()) audit.target = target(*out);
      AppendAudit(b, req, audit, out.ok() ? ok_status : ToHttpError(out.status()).status,
                  out.ok() ? "" : out.status().message());
      return out;
    });
    audit.recorded = r.ok() || r.status().code() != StatusCode::kUnavailable;
    if (!r.ok()) return ReplyError(res, r.status());
    Reply(res, ok_status, render(*r));
  }

  // Authenticates the bearer token; answers 401 and returns nullopt on failure.
  std::optional<Caller> Authenticate(const httplib::Request& req, httplib::Response& res) {
    const std::string header = req.get_header_value("Authorization");
    const std::string_view token = BearerToken(header);
    if (token.empty()) {
      ReplyError(res, Status::Unauthenticated("missing bearer token (Authorization: Bearer ...)"));
      return std::nullopt;
    }
    const std::string hash = HashToken(token);
    auto found =
        core->Run<core::Tenant>([&](core::State& s, store::Batch&) -> Result<core::Tenant> {
          const core::Tenant* t = s.Authenticate(hash);
          if (!t) return Status::Unauthenticated("invalid token");
          return *t;
        });
    if (!found.ok()) {
      ReplyError(res, found.status());
      return std::nullopt;
    }
    return Caller{*found};
  }

  std::optional<Caller> Admin(const httplib::Request& req, httplib::Response& res, Audit* audit) {
    auto caller = Authenticate(req, res);
    if (!caller) return std::nullopt;
    if (audit) audit->actor = caller->actor();
    if (!caller->tenant.admin) {
      ReplyError(res, Status::PermissionDenied("this route is for the operator's admin token"));
      return std::nullopt;
    }
    return caller;
  }

  // Parses a JSON request body, answering 413, 415 or 400 itself when it cannot.
  std::optional<json> Body(const httplib::Request& req, httplib::Response& res) {
    if (req.body.size() > options.max_body_bytes) {
      Reply(res, 413,
            ErrorBody("payload_too_large", fmt::format("the body is {} bytes; the limit is {}",
                                                       req.body.size(), options.max_body_bytes)));
      return std::nullopt;
    }
    const std::string type = req.get_header_value("Content-Type");
    if (type.rfind("application/json", 0) != 0) {
      Reply(res, 415,
            ErrorBody("unsupported_media_type",
                      fmt::format("Content-Type must be application/json, not '{}'", type)));
      return std::nullopt;
    }
    auto j = ParseJson(req.body, "body");
    if (!j.ok()) {
      ReplyError(res, j.status());
      return std::nullopt;
    }
    return *j;
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
  Mutating("POST", "/v1/tenants", "/v1/tenants", [this](const auto& req, auto& res, Audit& audit) {
    if (!Admin(req, res, &audit)) return;
    auto body = Body(req, res);
    if (!body) return;
    auto parsed = ParseCreateTenant(*body);
    if (!parsed.ok()) return ReplyError(res, parsed.status());
    auto token = GenerateToken();
    if (!token.ok()) return ReplyError(res, token.status());
    const std::string hash = HashToken(*token);
    Mutate<core::Tenant>(
        req, res, audit, 201,
        [&](core::State& s, store::Batch& b) {
          return s.CreateTenant(parsed->name, parsed->quota_gpu_milli, hash, b);
        },
        [&](const core::Tenant& t) {
          json j = core::ToJson(t);
          j["token"] = *token;  // Shown this once; only its hash is stored.
          return j;
        },
        [](const core::Tenant& t) { return t.id.str(); });
  });
  Route("GET", "/v1/tenants", "/v1/tenants", [this](const auto& req, auto& res) {
    if (!Admin(req, res, nullptr)) return;
    auto tenants = core->Run<std::vector<core::Tenant>>(
        [](core::State& s, store::Batch&) -> Result<std::vector<core::Tenant>> {
          return s.ListTenants();
        });
    if (!tenants.ok()) return ReplyError(res, tenants.status());
    json out = json::array();
    for (const auto& t : *tenants) out.push_back(core::ToJson(t));
    Reply(res, 200, {{"tenants", out}});
  });
  Route("GET", "/v1/instance-types", "/v1/instance-types", [this](const auto& req, auto& res) {
    if (!Authenticate(req, res)) return;
    Reply(res, 200, {{"instance_types", InstanceTypesJson(*catalog)}});
  });
}

void ApiServer::Impl::InstanceRoutes() {
  Mutating("POST", "/v1/instances", "/v1/instances",
           [this](const auto& req, auto& res, Audit& audit) {
             auto caller = Authenticate(req, res);
             if (!caller) return;
             audit.actor = caller->actor();
             if (caller->tenant.admin) {
               return ReplyError(
                   res, Status::PermissionDenied(
                            "the admin token has no quota; create instances with a tenant's "
                            "token"));
             }
             auto body = Body(req, res);
             if (!body) return;
             auto parsed = ParseCreateInstance(*body);
             if (!parsed.ok()) return ReplyError(res, parsed.status());
             Mutate<core::Instance>(
                 req, res, audit, 201,
                 [&](core::State& s, store::Batch& b) {
                   return s.CreateInstance(caller->tenant, *parsed, b);
                 },
                 [](const core::Instance& i) { return core::ToJson(i); },
                 [](const core::Instance& i) { return i.id.str(); });
           });
  Route("GET", "/v1/instances", "/v1/instances", [this](const auto& req, auto& res) {
    auto caller = Authenticate(req, res);
    if (!caller) return;
    std::optional<core::InstanceState> state;
    if (req.has_param("state")) {
      const std::string text = req.get_param_value("state");
      state = core::ParseState(text);
      if (!state) {
        return ReplyError(res, Status::InvalidArgument(fmt::format(
                                   "query 'state': '{}' is not an instance state", text)));
      }
    }
    auto list = core->Run<std::vector<core::Instance>>(
        [&](core::State& s, store::Batch&) -> Result<std::vector<core::Instance>> {
          return s.ListInstances(caller->tenant, state);
        });
    if (!list.ok()) return ReplyError(res, list.status());
    json out = json::array();
    for (const auto& i : *list) out.push_back(core::ToJson(i));
    Reply(res, 200, {{"instances", out}});
  });
  Route("GET", R"(/v1/instances/([^/]+))", "/v1/instances/{id}",
        [this](const auto& req, auto& res) {
          auto caller = Authenticate(req, res);
          if (!caller) return;
          const std::string id = req.matches[1];
          auto inst = core->Run<core::Instance>(
              [&](core::State& s, store::Batch&) { return s.GetInstance(caller->tenant, id); });
          if (!inst.ok()) return ReplyError(res, inst.status());
          Reply(res, 200, core::ToJson(*inst));
        });
  Mutating("DELETE", R"(/v1/instances/([^/]+))", "/v1/instances/{id}",
           [this](const auto& req, auto& res, Audit& audit) {
             auto caller = Authenticate(req, res);
             if (!caller) return;
             audit.actor = caller->actor();
             const std::string id = req.matches[1];
             Mutate<core::Instance>(
                 req, res, audit, 200,
                 [&](core::State& s, store::Batch& b) {
                   return s.DeleteInstance(caller->tenant, id, b);
                 },
                 [](const core::Instance& i) { return core::ToJson(i); },
                 [](const core::Instance& i) { return i.id.str(); });
           });
}

void ApiServer::Impl::NodeRoutes() {
  Route("GET", "/v1/nodes", "/v1/nodes", [this](const auto& req, auto& res) {
    if (!Admin(req, res, nullptr)) return;
    auto nodes = core->Run<json>(
        [](core::State& s, store::Batch&) -> Result<json> { return NodesJson(s.fleet()); });
    if (!nodes.ok()) return ReplyError(res, nodes.status());
    Reply(res, 200, {{"nodes", *nodes}});
  });
  for (const bool drain : {true, false}) {
    const std::string verb = drain ? "drain" : "undrain";
    Mutating("POST", R"(/v1/nodes/([^/]+)/)" + verb, "/v1/nodes/{id}/" + verb,
             [this, drain](const auto& req, auto& res, Audit& audit) {
               if (!Admin(req, res, &audit)) return;
               const std::string node = req.matches[1];
               Mutate<std::string>(
                   req, res, audit, 200,
                   [&](core::State& s, store::Batch& b) -> Result<std::string> {
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
    if (!ready) return ReplyError(res, Status::Unavailable("starting"));
    Reply(res, 200, {{"status", "ready"}});
  });
  Route("GET", "/metrics", "/metrics", [this](const auto&, auto& res) {
    auto text = core->Run<std::string>([&](core::State& s, store::Batch&) -> Result<std::string> {
      metrics.ObserveSchedulingLatencies(s.TakeSchedulingLatencies());
      return metrics.Render(s);
    });
    if (!text.ok()) return ReplyError(res, text.status());
    res.status = 200;
    res.set_content(*text, "text/plain; version=0.0.4");
  });
  Route("GET", "/v1/audit", "/v1/audit", [this](const auto& req, auto& res) {
    if (!Admin(req, res, nullptr)) return;
    int64_t after = 0;
    int64_t limit = 100;
    for (auto [name, value, max] :
         {std::tuple{"after", &after, INT64_MAX}, std::tuple{"limit", &limit, int64_t{1000}}}) {
      if (!req.has_param(name)) continue;
      const std::string text = req.get_param_value(name);
      int64_t v = 0;
      const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || p != text.data() + text.size() || v < 0 || v > max) {
        return ReplyError(res,
                          Status::InvalidArgument(fmt::format(
                              "query '{}': '{}' is not an integer in [0, {}]", name, text, max)));
      }
      *value = v;
    }
    auto entries = core->ListAudit(after, static_cast<int>(limit));
    if (!entries.ok()) return ReplyError(res, entries.status());
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
}

ApiServer::~ApiServer() { Stop(); }

Status ApiServer::Bind() {
  if (impl_->options.port == 0) {
    const int port = impl_->http.bind_to_any_port(impl_->options.host);
    if (port < 0) return Status::Unavailable("cannot listen on " + impl_->options.host);
    impl_->options.port = port;
  } else if (!impl_->http.bind_to_port(impl_->options.host, impl_->options.port)) {
    return Status::Unavailable(fmt::format("cannot listen on {}:{} (in use, or not an address)",
                                           impl_->options.host, impl_->options.port));
  }
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
