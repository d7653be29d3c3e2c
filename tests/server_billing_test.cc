// Billing through a real server process: usage and invoices in JSON and CSV, reservations,
// budgets, tenant isolation on every billing route, and the ledger across kill -9.
#include <csignal>
#include <sstream>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

class ServerBillingTest : public ServerTest {
 protected:
  // A text answer with `accept` (CSV).
  std::pair<int, std::string> GetText(const std::string& path, const std::string& token,
                                      const std::string& accept) {
    httplib::Client client(server_->url());
    auto r = client.Get(path, {{"Authorization", "Bearer " + token}, {"Accept", accept}});
    if (!r) return {0, ""};
    return {r->status, r->body};
  }

  // Creates an on-demand H100 and waits for it to run.
  // An instance that keeps its simulated GPU 60% busy (a noop would read idle).
  std::string RunOne(const std::string& token) {
    json body = H100(1, "on_demand");
    body["env"] = {{"TESSERA_SIM_LOAD", "60"}};
    auto r = Post("/v1/instances", token, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    const std::string id = r.body.value("id", "");
    EXPECT_EQ(AwaitState(token, id, "running"), "running");
    return id;
  }

  std::string Month() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[8];
    std::strftime(buf, sizeof buf, "%Y-%m", &tm);
    return buf;
  }
};

// The amounts of a CSV report's item rows, and its total row's.
std::pair<std::vector<std::string>, std::string> CsvAmounts(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, total;
  std::vector<std::string> amounts;
  std::getline(in, line);
  while (std::getline(in, line)) {
    const std::string amount = line.substr(line.rfind(',') + 1);
    if (line.rfind("total,", 0) == 0) {
      total = amount;
    } else {
      amounts.push_back(amount);
    }
  }
  return {amounts, total};
}

TEST_F(ServerBillingTest, UsageAndInvoicesBillARunAndOnlyItsTenantSeesThem) {
  const std::string acme = NewTenant("acme", 8);
  const std::string beta = NewTenant("beta", 8);
  const std::string acme_id = Get("/v1/tenants", kAdminToken).body["tenants"][0]["id"];
  const std::string id = RunOne(acme);
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, acme).status, 200);
  AwaitState(acme, id, "terminated");

  auto usage = Get("/v1/usage", acme);
  ASSERT_EQ(usage.status, 200) << usage.raw;
  ASSERT_EQ(usage.body["items"].size(), 1u) << usage.raw;
  const json& item = usage.body["items"][0];
  EXPECT_EQ(item["instance"], id);
  EXPECT_EQ(item["billing"], "on_demand");
  EXPECT_EQ(item["seconds"], 60) << "a run of a moment pays its minute";
  EXPECT_FALSE(item.contains("open"));
  EXPECT_EQ(usage.body["total_usd"], item["amount_usd"]);

  const std::string month = Month();
  auto invoice = Get("/v1/invoices/" + month, acme);
  ASSERT_EQ(invoice.status, 200) << invoice.raw;
  EXPECT_EQ(invoice.body["status"], "open");
  EXPECT_EQ(invoice.body["total_usd"], usage.body["total_usd"]);
  auto [code, csv] = GetText("/v1/invoices/" + month, acme, "text/csv");
  ASSERT_EQ(code, 200);
  const auto [amounts, total] = CsvAmounts(csv);
  ASSERT_EQ(amounts.size(), 1u) << csv;
  EXPECT_EQ(total, invoice.body["total_usd"]) << csv;
  EXPECT_EQ(amounts[0], item["amount_usd"]);

  // Another tenant sees none of it, on any billing route.
  auto theirs = Get("/v1/usage", beta);
  ASSERT_EQ(theirs.status, 200);
  EXPECT_EQ(theirs.body["items"].size(), 0u);
  EXPECT_EQ(theirs.body["total_usd"], "0.000000");
  EXPECT_EQ(Get("/v1/usage?tenant=" + acme_id, beta).status, 404);
  EXPECT_EQ(Get("/v1/invoices/" + month + "?tenant=" + acme_id, beta).status, 404);
  const json budget = {{"monthly_usd", "1"}};
  EXPECT_EQ(Call("PUT", "/v1/tenants/" + acme_id + "/budget", beta, &budget).status, 404);
  // The admin names the tenant.
  EXPECT_EQ(Get("/v1/invoices/" + month, kAdminToken).status, 400);
  auto admin = Get("/v1/invoices/" + month + "?tenant=" + acme_id, kAdminToken);
  ASSERT_EQ(admin.status, 200);
  EXPECT_EQ(admin.raw, invoice.raw);
  // Bad parameters name themselves.
  auto bad = Get("/v1/usage?group_by=colour", acme);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("group_by"), std::string::npos);
  EXPECT_EQ(Get("/v1/usage?from=yesterday", acme).status, 400);
  EXPECT_EQ(Get("/v1/invoices/2026-13", acme).status, 400);
  // A period is at most 366 days: a longer one is asked for in parts.
  auto long_period = Get("/v1/usage?from=2024-01-01&to=2026-01-01", acme);
  EXPECT_EQ(long_period.status, 400);
  EXPECT_NE(long_period.raw.find("366 days"), std::string::npos) << long_period.raw;
  EXPECT_EQ(Get("/v1/usage?limit=0", acme).status, 400);
  // Items come in pages; the total is the whole period's.
  const std::string second = RunOne(acme);
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + second, acme).status, 200);
  AwaitState(acme, second, "terminated");
  auto first_page = Get("/v1/usage?limit=1", acme);
  ASSERT_EQ(first_page.status, 200) << first_page.raw;
  ASSERT_EQ(first_page.body["items"].size(), 1u);
  EXPECT_EQ(first_page.body["items_total"], 2);
  const std::string token = first_page.body.value("next_page_token", "");
  ASSERT_FALSE(token.empty()) << first_page.raw;
  auto second_page = Get("/v1/usage?limit=1&page_token=" + token, acme);
  ASSERT_EQ(second_page.body["items"].size(), 1u) << second_page.raw;
  EXPECT_FALSE(second_page.body.contains("next_page_token"));
  EXPECT_NE(first_page.body["items"][0]["instance"], second_page.body["items"][0]["instance"]);
  EXPECT_EQ(first_page.body["total_usd"], second_page.body["total_usd"]);
  EXPECT_EQ(first_page.body["total_usd"], Get("/v1/usage", acme).body["total_usd"]);
  invoice = Get("/v1/invoices/" + month, acme);
  admin = Get("/v1/invoices/" + month + "?tenant=" + acme_id, kAdminToken);
  EXPECT_EQ(admin.raw, invoice.raw);

  // With nothing running, the month's invoice is the same bytes across a restart.
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer();
  auto again = Get("/v1/invoices/" + month, acme);
  EXPECT_EQ(again.raw, invoice.raw);
}

TEST_F(ServerBillingTest, TheCostReportWeighsCostByMeasuredUtilization) {
  const std::string acme = NewTenant("acme", 8);
  const std::string id = RunOne(acme);
  // Agents send telemetry every fifth report (10 s at the default heartbeat).
  std::this_thread::sleep_for(std::chrono::milliseconds(11000));
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, acme).status, 200);
  AwaitState(acme, id, "terminated");
  auto usage = Get("/v1/usage", acme);
  auto report = Get("/v1/reports/cost", acme);
  ASSERT_EQ(report.status, 200) << report.raw;
  ASSERT_EQ(report.body["tenants"].size(), 1u) << report.raw;
  const json& row = report.body["tenants"][0];
  EXPECT_EQ(row["cost_usd"], usage.body["total_usd"]);
  EXPECT_NEAR(row["gpu_hours"].get<double>(), 60.0 / 3600, 0.001) << "one GPU, its minute";
  ASSERT_TRUE(row["mean_gpu_util_percent"].is_number()) << report.raw;
  const double util = row["mean_gpu_util_percent"];
  EXPECT_GT(util, 0);
  EXPECT_LE(util, 100);
  ASSERT_TRUE(row["cost_per_utilized_gpu_hour_usd"].is_string());
  EXPECT_GT(std::stod(row["cost_per_utilized_gpu_hour_usd"].get<std::string>()),
            std::stod(row["cost_usd"].get<std::string>()) / (60.0 / 3600))
      << "a GPU busy part of the time costs more per busy hour";
  EXPECT_TRUE(row["cost_per_effective_tflops_hour_usd"].is_string());
  EXPECT_GT(std::stod(row["spot_would_save_usd"].get<std::string>()), 0);
  EXPECT_FALSE(report.body.contains("idle")) << "a tenant never sees the fleet";
  auto admin = Get("/v1/reports/cost", kAdminToken);
  ASSERT_EQ(admin.status, 200);
  // The period counts from the fleet's first start, seconds ago: the run's billed minute may
  // cover all the H100s saw, and the L40S nobody used was idle all along.
  bool h100 = false, l40s = false;
  for (const json& idle : admin.body["idle"]) {
    if (idle["gpu_model"] == "H100-80GB") {
      h100 = true;
      EXPECT_EQ(idle["gpus"], 2);
      EXPECT_GE(idle["idle_gpu_hours"].get<double>(), 0);
    }
    if (idle["gpu_model"] == "L40S-48GB") {
      l40s = true;
      EXPECT_GT(std::stod(idle["idle_cost_usd"].get<std::string>()), 0) << admin.raw;
    }
  }
  EXPECT_TRUE(h100 && l40s) << admin.raw;
}

TEST_F(ServerBillingTest, ACostReportCountsNothingBeforeTheFleetsFirstStart) {
  // A report from year 1 once counted 2,025 years of idle capacity ($1.44 billion).
  auto ancient =
      Get("/v1/reports/cost?from=0001-01-01T00:00:00Z&to=0001-12-31T00:00:00Z", kAdminToken);
  ASSERT_EQ(ancient.status, 200) << ancient.raw;
  EXPECT_EQ(ancient.body["clamped_start"], true) << ancient.raw;
  EXPECT_EQ(ancient.body["from"], "0001-12-31T00:00:00Z") << "an empty period: the fleet was not";
  ASSERT_FALSE(ancient.body["idle"].empty()) << ancient.raw;
  for (const json& idle : ancient.body["idle"]) {
    EXPECT_EQ(idle["idle_gpu_hours"], 0) << ancient.raw;
    if (idle["idle_cost_usd"].is_string()) {
      EXPECT_EQ(idle["idle_cost_usd"], "0.000000") << ancient.raw;
    }
  }
  // A period that began before the fleet's first start counts from it: this server has run for
  // seconds, not the 300 days asked.
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  const std::time_t asked = now - 300 * 86400;
  gmtime_r(&asked, &tm);
  char from[32];
  std::strftime(from, sizeof from, "%Y-%m-%dT%H:%M:%SZ", &tm);
  auto recent = Get(std::string("/v1/reports/cost?from=") + from, kAdminToken);
  ASSERT_EQ(recent.status, 200) << recent.raw;
  EXPECT_EQ(recent.body["clamped_start"], true) << recent.raw;
  EXPECT_GT(recent.body["from"].get<std::string>(), from) << recent.raw;
  for (const json& idle : recent.body["idle"]) {
    EXPECT_LE(idle["idle_gpu_hours"].get<double>(), idle["gpus"].get<double>() * 0.1)
        << "at most a few minutes of each GPU: " << recent.raw;
  }
  // The fleet's first start is recorded once: a restart does not move it.
  const std::string first = recent.body["from"];
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  StartServer();
  EXPECT_EQ(Get(std::string("/v1/reports/cost?from=") + from, kAdminToken).body["from"], first);
  // A tenant's report is clamped alike; a period after the first start is not.
  const std::string acme = NewTenant("acme", 1);
  EXPECT_EQ(Get(std::string("/v1/reports/cost?from=") + from, acme).body["clamped_start"], true);
  EXPECT_EQ(Get("/v1/reports/cost?from=" + first, kAdminToken).body["clamped_start"], false);
}

TEST_F(ServerBillingTest, ReservationsAndBudgetsAnswerWithTheirCodes) {
  const std::string acme = NewTenant("acme", 8);
  const std::string acme_id = Get("/v1/tenants", kAdminToken).body["tenants"][0]["id"];
  auto none =
      Post("/v1/instances", acme, {{"billing", "reserved"}, {"instance_type", "gpu.1xh100"}});
  EXPECT_EQ(none.status, 409);
  EXPECT_EQ(none.body["error"]["code"], "no_reservation") << none.raw;
  auto bad = Post("/v1/reservations", acme, {{"instance_type", "gpu.1xh100"}, {"count", 1}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("term"), std::string::npos) << bad.raw;
  auto resv = Post("/v1/reservations", acme,
                   {{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "3y"}});
  ASSERT_EQ(resv.status, 201) << resv.raw;
  EXPECT_EQ(Post("/v1/instances", acme, {{"billing", "reserved"}, {"instance_type", "gpu.1xh100"}})
                .status,
            201);
  EXPECT_EQ(Get("/v1/reservations", acme).body["reservations"][0]["used"], 1);
  EXPECT_EQ(Call("DELETE", "/v1/reservations/" + resv.body["id"].get<std::string>(), acme).status,
            409)
      << "a started term is committed";
  // A dry run prices the whole term and makes nothing; a reservation made in error is cancelled
  // at no cost within its window.
  auto preview =
      Post("/v1/reservations", acme,
           {{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "1y"}, {"dry_run", true}});
  ASSERT_EQ(preview.status, 200) << preview.raw;
  EXPECT_FALSE(preview.body.contains("id"));
  EXPECT_EQ(preview.body["dry_run"], true);
  EXPECT_NEAR(std::stod(preview.body["commitment_usd"].get<std::string>()),
              std::stod(preview.body["rate_usd_per_hour"].get<std::string>()) * 8760, 0.01)
      << preview.raw;
  EXPECT_EQ(Get("/v1/reservations", acme).body["reservations"].size(), 1u);
  auto mistake = Post("/v1/reservations", acme,
                      {{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "1y"}});
  ASSERT_EQ(mistake.status, 201) << mistake.raw;
  EXPECT_TRUE(mistake.body.contains("cancellable_until")) << mistake.raw;
  EXPECT_EQ(
      Call("DELETE", "/v1/reservations/" + mistake.body["id"].get<std::string>(), acme).status, 200)
      << "within five minutes of its making";
  EXPECT_EQ(Get("/v1/reservations", acme).body["reservations"].size(), 1u);
  // Another tenant neither sees nor cancels it, nor sees its cost.
  const std::string beta = NewTenant("beta", 8);
  const std::string resv_id = resv.body["id"];
  EXPECT_EQ(Get("/v1/reservations/" + resv_id, beta).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/reservations/" + resv_id, beta).status, 404);
  EXPECT_EQ(Get("/v1/reservations", beta).body["reservations"].size(), 0u);
  EXPECT_EQ(Get("/v1/reports/cost", beta).body["tenants"].size(), 0u);
  EXPECT_EQ(Get("/v1/budgets", beta).body["budgets"].size(), 0u);
  // The month's reservation line is on the usage, for what of the term has passed.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto usage = Get("/v1/usage?group_by=billing", acme);
  ASSERT_EQ(usage.status, 200);
  ASSERT_GE(usage.body["items"].size(), 1u);
  EXPECT_EQ(usage.body["items"][0]["billing"], "reserved");

  // A budget already spent by the reservation (a second of it) stops new on-demand work with 403.
  json budget = {{"monthly_usd", "0.0001"}, {"hard_stop", true}};
  auto set = Call("PUT", "/v1/tenants/" + acme_id + "/budget", acme, &budget);
  ASSERT_EQ(set.status, 200) << set.raw;
  EXPECT_EQ(set.body["stopping_new_instances"], true);
  auto refused = Post("/v1/instances", acme, H100(1, "on_demand"));
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(refused.body["error"]["code"], "budget_exceeded") << refused.raw;
  auto listed = Get("/v1/budgets", kAdminToken);
  ASSERT_EQ(listed.body["budgets"].size(), 1u);
  EXPECT_EQ(listed.body["budgets"][0]["thresholds_crossed"], json::array({80, 100}));
  // The operator's budget is not the tenant's to raise or delete.
  json operators = {{"monthly_usd", "100"}, {"hard_stop", true}};
  ASSERT_EQ(Call("PUT", "/v1/tenants/" + acme_id + "/budget", kAdminToken, &operators).status, 200);
  json raised = {{"monthly_usd", "1000"}, {"hard_stop", true}};
  auto raise = Call("PUT", "/v1/tenants/" + acme_id + "/budget", acme, &raised);
  EXPECT_EQ(raise.status, 403) << raise.raw;
  EXPECT_NE(raise.raw.find("the operator set this budget"), std::string::npos) << raise.raw;
  EXPECT_EQ(Call("DELETE", "/v1/tenants/" + acme_id + "/budget", acme).status, 403);
  EXPECT_EQ(Get("/v1/budgets", acme).body["budgets"][0]["set_by"], "operator");
  json fraction = {{"monthly_usd", 2.5}};
  auto float_refused = Call("PUT", "/v1/tenants/" + acme_id + "/budget", acme, &fraction);
  EXPECT_EQ(float_refused.status, 400);
  EXPECT_NE(float_refused.raw.find("monthly_usd"), std::string::npos);
}

TEST_F(ServerBillingTest, KillNineNeitherLosesNorDuplicatesALedgerLine) {
  const std::string acme = NewTenant("acme", 8);
  for (int round = 0; round < 3; ++round) {
    // Two runs; delete both, and kill the server the moment the deletes are answered.
    const std::string a = RunOne(acme);
    auto b_reply =
        Post("/v1/instances", acme, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
    ASSERT_EQ(b_reply.status, 201) << b_reply.raw;
    const std::string b = b_reply.body["id"];
    ASSERT_EQ(AwaitState(acme, b, "running"), "running");
    ASSERT_EQ(Call("DELETE", "/v1/instances/" + a, acme).status, 200);
    ASSERT_EQ(Call("DELETE", "/v1/instances/" + b, acme).status, 200);
    server_->Stop(SIGKILL);
    StartServer();
    // The restarted server's agents finish the stops the killed one began.
    EXPECT_EQ(AwaitState(acme, a, "terminated", std::chrono::seconds(30)), "terminated");
    ASSERT_EQ(AwaitState(acme, b, "terminated", std::chrono::seconds(30)), "terminated")
        << server_->output() << Get("/v1/instances/" + b, acme).raw;
  }
  auto usage = Get("/v1/usage", acme);
  ASSERT_EQ(usage.status, 200);
  ASSERT_EQ(usage.body["items"].size(), 6u) << usage.raw;
  for (const json& item : usage.body["items"]) {
    EXPECT_EQ(item["seconds"], 60) << "each run billed once, its minute: " << item;
  }
}

}  // namespace
}  // namespace tessera
