#include "api/api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tessera::api {
namespace {

// The head stage of a GET on public routes, which needs neither a core nor a catalog.
class ApiQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* pattern : {"/list?limit&page_token", "/item/{id}", "/files/{name}?*"}) {
      api_.Add("GET", pattern, Access::kPublic, BodyKind::kNone, false,
               [this](Api& api, std::shared_ptr<Call> call) {
                 route_seen_ = call->route;
                 api.Reply(*call, JsonResponse(200, nlohmann::json::object()));
               });
    }
  }

  // The status the head stage answers for `target`, and its message; 200 when it passes, after
  // running the route's handler.
  std::pair<int, std::string> Head(const std::string& target) {
    HttpRequest request;
    request.method = "GET";
    request.target = target;
    auto parsed = ParseTarget(target);
    EXPECT_TRUE(parsed.ok()) << target;
    request.parsed = *parsed;
    HeadDecision d = api_.OnHead(request);
    if (d.refuse) {
      const auto body = nlohmann::json::parse(d.refuse->body);
      EXPECT_EQ(body["error"]["code"], d.refuse->status == 400 ? "invalid_argument" : "not_found");
      return {d.refuse->status, body["error"]["message"]};
    }
    int status = 0;
    d.handler(std::move(request), Responder::Local([&](HttpResponse r) { status = r.status; }));
    return {status, ""};
  }

  Api api_{nullptr, &SystemClock::Get()};
  std::string route_seen_;
};

TEST_F(ApiQueryTest, AQueryParameterTheRouteDoesNotTakeIsRefusedNamingIt) {
  struct Case {
    std::string target;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/list", 200, ""},
      {"/list?limit=5&page_token=p3", 200, ""},
      {"/list?limit=5&limt=6", 400,
       "query parameter 'limt' is not known here; GET /list takes limit, page_token"},
      {"/list?a=1&limit=5&b&c=3", 400,
       "query parameter 'a' is not known here; GET /list takes limit, page_token (2 more "
       "unknown)"},
      {"/item/x", 200, ""},
      {"/item/x?verbose", 400,
       "query parameter 'verbose' is not known here; GET /item/{id} takes no query parameters"},
      {"/item/x?caf%C3%A9=1", 400,
       "query parameter 'caf\xc3\xa9' is not known here; GET /item/{id} takes no query "
       "parameters"},
      {"/item/x?" + std::string(100, 'a'), 400,
       "query parameter '" + std::string(64, 'a') +
           "...' is not known here; GET /item/{id} takes no query parameters"},
      {"/files/app.js?v=123&anything=else", 200, ""},
      // The query part of a pattern is not part of its path.
      {"/list%3Flimit", 404, "no route GET /list?limit"},
  };
  for (const Case& c : cases) {
    const auto [status, message] = Head(c.target);
    EXPECT_EQ(status, c.status) << c.target;
    EXPECT_EQ(message, c.message) << c.target;
  }
}

TEST_F(ApiQueryTest, CallsAndMetricsNameThePatternWithoutItsQuery) {
  ASSERT_EQ(Head("/list?limit=1").first, 200);
  EXPECT_EQ(route_seen_, "/list");
  ASSERT_EQ(Head("/files/a.css?v=1").first, 200);
  EXPECT_EQ(route_seen_, "/files/{name}");
}

}  // namespace
}  // namespace tessera::api
