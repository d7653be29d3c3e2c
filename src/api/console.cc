// GET / and GET /console/...: the console's files, each with its media type, a validator (ETag)
// so a browser revalidates instead of downloading again, and headers that confine the page:
// scripts and styles from this origin only (no inline script), no framing, no referrer, and
// requests only to this origin's API.
#include "api/console.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "api/api.h"
#include "api/routes.h"

namespace tessera::api {
namespace {

constexpr const char* kPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

std::string_view MediaType(std::string_view path) {
  static const std::map<std::string_view, std::string_view> kTypes = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
      {".json", "application/json"},
  };
  const size_t dot = path.rfind('.');
  auto it = dot == std::string_view::npos ? kTypes.end() : kTypes.find(path.substr(dot));
  return it == kTypes.end() ? "application/octet-stream" : it->second;
}

// FNV-1a over the bytes: the file's validator; it changes with every build that changes it.
std::string Etag(std::string_view content) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : content) h = (h ^ c) * 1099511628211ULL;
  return fmt::format("\"{:016x}\"", h);
}

struct Served {
  std::string_view content;
  std::string_view type;
  std::string etag;
};

// The files by path, and manifest.json: the pages the console loads (web/pages/*.js), so adding
// a page is adding a file.
const std::map<std::string, Served, std::less<>>& ServedFiles() {
  static const auto* files = [] {
    auto* out = new std::map<std::string, Served, std::less<>>();
    nlohmann::json pages = nlohmann::json::array();
    for (const EmbeddedFile& f : EmbeddedFiles()) {
      (*out)[std::string(f.path)] = {f.content, MediaType(f.path), Etag(f.content)};
      if (f.path.starts_with("pages/") && f.path.ends_with(".js")) pages.push_back(f.path);
    }
    static const std::string manifest = nlohmann::json{{"pages", pages}}.dump();
    (*out)["manifest.json"] = {manifest, MediaType("manifest.json"), Etag(manifest)};
    return out;
  }();
  return *files;
}

HttpResponse Serve(const HttpRequest& request, std::string_view path) {
  const auto& files = ServedFiles();
  auto it = files.find(path);
  if (it == files.end()) {
    return ErrorResponse(404, "not_found", fmt::format("no console file '{}'", path));
  }
  HttpResponse r;
  r.content_type = std::string(it->second.type);
  r.headers = {{"Content-Security-Policy", kPolicy}, {"X-Content-Type-Options", "nosniff"},
               {"X-Frame-Options", "DENY"},          {"Referrer-Policy", "no-referrer"},
               {"Cache-Control", "no-cache"},        {"ETag", it->second.etag}};
  const std::string* match = request.Header("if-none-match");
  if (match && *match == it->second.etag) {
    r.status = 304;
    return r;
  }
  r.body = std::string(it->second.content);
  return r;
}

}  // namespace

void AddConsoleRoutes(Api& table) {
  table.Add("GET", "/?*", Access::kPublic, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Reply(*call, Serve(call->request, "index.html"));
            });
  table.Add("GET", "/console/{file}?*", Access::kPublic, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Reply(*call, Serve(call->request, call->params[0]));
            });
  table.Add("GET", "/console/{dir}/{file}?*", Access::kPublic, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Reply(*call, Serve(call->request, call->params[0] + "/" + call->params[1]));
            });
}

}  // namespace tessera::api
