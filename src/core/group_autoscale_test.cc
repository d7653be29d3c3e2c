// The autoscaler on the core's state with a fake clock (group_service.cc): HPA's rule on a
// reported backlog and on measured GPU utilization, min and max, the scale-down window, the cron
// floor and a running group's autoscale changed; and the autoscale, elastic and cron specs' errors.
#include "core/groups_test_util.h"

namespace tessera::core {
namespace {

// Autoscaling with the fake clock: HPA's rule on a reported backlog and on measured GPU
// utilization, the tolerance, min and max, the scale-down window and the cron floor.
class AutoscaleTest : public GroupsTest {
 protected:
  void SetUp() override {
    GroupsTest::SetUp();
    clock_.Set(Time(std::chrono::seconds(kMonday)));
    Join("n1", 8, OneIsland(8));
    Join("n2", 8, OneIsland(8));
  }

  static GroupRequest Scaled(int size, Autoscale a) {
    GroupRequest g = Gang(size, 1, Topology::kAny);
    g.min_available = 1;
    g.elastic = Elastic{a.min, a.max};  // What the API gives an autoscaled group by default.
    g.autoscale = std::move(a);
    return g;
  }

  static Autoscale OnBacklog(int min, int max, double target) {
    Autoscale a;
    a.min = min;
    a.max = max;
    a.metric = AutoscaleMetric::kPending;
    a.target = target;
    return a;
  }

  void Backlog(const std::string& id, int64_t pending) {
    ASSERT_TRUE(state_->groups().SetBacklog(Acme(), id, pending).ok());
  }

  // Lets `d` pass in steps of the autoscale interval, a round each (agents heartbeating).
  void Wait(Duration d) {
    while (d > Duration::zero()) {
      const Duration step = std::min<Duration>(d, 15s);
      clock_.Advance(step);
      d -= step;
      for (const auto& [node, shape] : nodes_) Sync(node);
    }
  }

  int Size(const std::string& id) { return Get(id).group.spec.size; }

  static constexpr int64_t kMonday = 1'796'047'140;  // 2026-11-30T13:59:00Z, a Monday.
};

TEST_F(AutoscaleTest, TheBacklogScalesUpAtOnceAndDownOnlyAfterTheWindow) {
  const std::string id = Create(Scaled(2, OnBacklog(1, 6, 10))).group.id;
  const std::string rank0 = Get(id).members[0].instance;
  Backlog(id, 40);  // 20 a member against a target of 10: ceil(2 x 2) = 4.
  Wait(15s);
  EXPECT_EQ(Size(id), 4);
  EXPECT_EQ(Get(id).placed, 4) << "new ranks are placed";
  Backlog(id, 42);  // 10.5 a member: within 10% of the target, no change.
  Wait(15s);
  EXPECT_EQ(Size(id), 4);
  Backlog(id, 200);  // 50 a member: 20 wanted, 6 at most.
  Wait(15s);
  EXPECT_EQ(Size(id), 6);
  Backlog(id, 0);  // Nothing to do: 1 (the min), but not before the window has passed.
  Wait(285s);
  EXPECT_EQ(Size(id), 6) << "the window still holds the recommendation of 6";
  Wait(30s);
  EXPECT_EQ(Size(id), 1);
  EXPECT_EQ(Get(id).members[0].instance, rank0) << "the newest members go first";
  const Group after = Get(id).group;
  EXPECT_EQ(after.scale_ups, 2);
  EXPECT_EQ(after.scale_downs, 1);
  // Every decision is in the audit log with its inputs.
  int audited = 0;
  for (const store::AuditRecord& a : batch_.audit) {
    if (a.actor != "autoscaler") continue;
    ++audited;
    EXPECT_EQ(a.target, id);
    EXPECT_NE(a.detail.find("\"metric\":\"pending\""), std::string::npos) << a.detail;
  }
  EXPECT_EQ(audited, 3);
}

// At the limits the API allows (a backlog of 2^40 against a target of 0.001, then none), the
// size goes to max and back to min: no overflow.
TEST_F(AutoscaleTest, AHugeBacklogOrATinyTargetGoesToMaxWithoutOverflow) {
  Autoscale a = OnBacklog(1, 3, 0.001);
  a.scale_down_stabilization_seconds = 0;
  const std::string id = Create(Scaled(2, a)).group.id;
  Backlog(id, int64_t{1} << 40);
  Wait(15s);
  EXPECT_EQ(Size(id), 3);
  Backlog(id, 0);
  Wait(15s);
  EXPECT_EQ(Size(id), 1);
}

// Scaling out passes the same gate as creating: the tenant's quota holds its autoscaler too.
TEST_F(AutoscaleTest, ScaleOutStopsAtTheTenantsQuotaAndSaysSo) {
  ASSERT_TRUE(state_->UpdateTenant(acme_.id.str(), 3000, std::nullopt, batch_).ok());  // 3 GPUs.
  const std::string id = Create(Scaled(2, OnBacklog(1, 6, 10))).group.id;
  Backlog(id, 200);  // 6 wanted, one GPU each: 6 GPUs against a quota of 3.
  Wait(15s);
  EXPECT_EQ(Size(id), 2) << "all of the new members, or none";
  const std::string decision = Get(id).group.decision;
  EXPECT_NE(decision.find("refused: quota exceeded by 3 GPUs"), std::string::npos) << decision;
  EXPECT_EQ(state_->instances().TenantGpuMilli(acme_.id), 2000);
  auto scaled = state_->groups().Scale(Acme(), id, 5, batch_);
  EXPECT_EQ(scaled.status().code(), StatusCode::kResourceExhausted) << "the API's scale too";
}

// At its owner's cap on pending work an autoscaler scales out as far as the cap leaves room and
// then holds, saying why once: no refusal at every evaluation.
TEST_F(AutoscaleTest, ScaleOutStopsAtThePendingCapAndSaysSoOnce) {
  const std::string id = Create(Scaled(2, OnBacklog(1, 6, 10))).group.id;
  ASSERT_EQ(Get(id).placed, 2);
  ASSERT_TRUE(state_->UpdateTenant(acme_.id.str(), std::nullopt, std::nullopt, batch_, 3).ok());
  for (const char* node : {"n1", "n2"})
    ASSERT_TRUE(state_->node_health().SetNodeDrained(node, true, batch_).ok());
  Backlog(id, 200);  // 6 wanted; new members wait on the drained nodes.
  auto audited = [&] {
    return std::count_if(batch_.audit.begin(), batch_.audit.end(),
                         [&](const store::AuditRecord& a) { return a.target == id; });
  };
  Wait(15s);
  EXPECT_EQ(Size(id), 5) << "3 more members: the cap's room";
  std::string decision = Get(id).group.decision;
  EXPECT_NE(decision.find("2 -> 5: "), std::string::npos) << decision;
  EXPECT_NE(decision.find("; held at 5 by its owner's cap on pending instances (0 pending, cap 3)"),
            std::string::npos)
      << decision;
  EXPECT_EQ(state_->instances().pending().Count(acme_.id.str()), 3);
  Wait(15s);
  decision = Get(id).group.decision;
  EXPECT_EQ(Size(id), 5);
  EXPECT_NE(decision.find("5 -> 6: "), std::string::npos) << decision;
  EXPECT_NE(decision.find("; held at 5 by its owner's cap on pending instances (3 pending, cap 3)"),
            std::string::npos)
      << decision;
  EXPECT_EQ(decision.find("refused"), std::string::npos) << decision;
  const auto rows = audited();
  Wait(60s);
  EXPECT_EQ(audited(), rows) << "held, it says so once";
  EXPECT_EQ(Size(id), 5);
}

TEST_F(AutoscaleTest, GpuUtilizationFromTelemetryDrivesTheSize) {
  Autoscale a;
  a.min = 1;
  a.max = 8;
  a.metric = AutoscaleMetric::kGpuUtil;
  a.target = 50;
  const std::string id = Create(Scaled(2, a)).group.id;
  std::map<std::string, std::vector<int>> busy;  // GPUs the members hold, by node.
  for (int rank = 0; rank < 2; ++rank) {
    const Instance m = Member(Get(id), rank);
    Sync(m.node, {Report(m, InstanceState::kRunning)});
    busy[m.node].push_back(m.gpus[0].index);
  }
  // The members' GPUs at 90%: ceil(2 x 90 / 50) = 4.
  for (const auto& [node, gpus] : busy) {
    auto t = std::make_shared<telemetry::Telemetry>();
    for (int g = 0; g < 8; ++g) {
      telemetry::GpuSample sample;
      sample.index = g;
      sample.gpu_util = std::find(gpus.begin(), gpus.end(), g) != gpus.end() ? 90 : 0;
      sample.memory_total_mib = 81920;
      t->gpus.push_back(sample);
    }
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_[node];
    s.telemetry = t;
    state_->BeginRound();
    ASSERT_TRUE(state_->agent_hub().Sync(node, s, batch_).ok());
    state_->EndRound(batch_);
  }
  clock_.Advance(15s);
  Sync("n1");
  EXPECT_EQ(Size(id), 4);
  EXPECT_NEAR(Get(id).group.metric_value.value_or(-1), 90, 1e-9);
  // The two new members have not started: their GPUs count as idle, and 180 / 4 = 45 would turn
  // a scale-up into a scale-down, so it reads as on target: the group does not grow again on
  // the same readings, nor shrink.
  clock_.Advance(15s);
  Sync("n1");
  EXPECT_EQ(Size(id), 4);
  EXPECT_NEAR(Get(id).group.metric_value.value_or(-1), 50, 1e-9);
}

TEST_F(AutoscaleTest, TheScheduleRaisesTheFloorAtItsTimes) {
  Autoscale a = OnBacklog(1, 8, 10);
  a.scale_down_stabilization_seconds = 60;
  a.schedule.push_back({*Cron::Parse("0 14 * * 1-5"), 4});  // The trading peak, weekdays.
  a.schedule.push_back({*Cron::Parse("0 18 * * 1-5"), 1});
  const std::string id = Create(Scaled(1, a)).group.id;
  Backlog(id, 0);
  Wait(15s);  // 13:59:15 on a Monday: the last entry to fire was last Friday's 18:00.
  EXPECT_EQ(Size(id), 1);
  Wait(60s);  // 14:00:15.
  EXPECT_EQ(Size(id), 4);
  EXPECT_EQ(Get(id).group.floor, 4);
  Wait(std::chrono::hours(3) + 45min);  // 17:45: the floor holds with no backlog.
  EXPECT_EQ(Size(id), 4);
  Wait(30min);  // 18:15: the floor is back to 1, and the window has passed.
  EXPECT_EQ(Size(id), 1);
}

// A running group gains, changes and loses its autoscale without a restart; a change its elastic
// range cannot hold, or a size outside the new range, is refused and changes nothing.
TEST_F(AutoscaleTest, ARunningGroupsAutoscaleIsSetChangedAndRemovedWithoutARestart) {
  GroupRequest plain = Gang(2, 1, Topology::kAny);
  plain.min_available = 1;
  plain.elastic = Elastic{1, 6};
  const std::string id = Create(plain).group.id;
  const std::string rank0 = Get(id).members[0].instance;
  auto patch = [&](std::optional<int> size, std::optional<Autoscale> a) {
    GroupPatch p;
    p.size = size;
    p.autoscale = std::move(a);
    return state_->groups().Patch(Acme(), id, p, batch_);
  };
  ASSERT_TRUE(patch(std::nullopt, OnBacklog(1, 6, 10)).ok());
  Backlog(id, 40);
  Wait(15s);
  EXPECT_EQ(Size(id), 4) << Dump(Get(id));
  EXPECT_EQ(Get(id).group.restarts, 0);
  EXPECT_EQ(Get(id).members[0].instance, rank0);

  auto wider = patch(std::nullopt, OnBacklog(1, 8, 10));
  EXPECT_EQ(wider.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wider.status().message().find("elastic [min, max] = [1, 6]"), std::string::npos)
      << wider.status().message();
  auto both = patch(5, OnBacklog(1, 3, 10));
  EXPECT_NE(both.status().message().find("field 'size': 5 is outside autoscale's"),
            std::string::npos)
      << both.status().message();
  Autoscale rps = OnBacklog(1, 6, 10);
  rps.metric = AutoscaleMetric::kRps;
  EXPECT_NE(patch(std::nullopt, rps).status().message().find("rps needs a service"),
            std::string::npos);
  EXPECT_EQ(Get(id).group.spec.autoscale->max, 6) << "a refused change changes nothing";
  EXPECT_EQ(Size(id), 4);

  // Narrowed: the next evaluation brings the size within it.
  ASSERT_TRUE(patch(std::nullopt, OnBacklog(1, 3, 10)).ok());
  EXPECT_TRUE(Get(id).group.decision.empty()) << "no decision yet under the new autoscale";
  Wait(15s);
  EXPECT_EQ(Size(id), 3);
  // Removed: the group keeps its size, whatever the backlog.
  GroupPatch off;
  off.autoscale.emplace();
  ASSERT_TRUE(state_->groups().Patch(Acme(), id, off, batch_).ok());
  EXPECT_FALSE(Get(id).group.spec.autoscale.has_value());
  Backlog(id, 400);
  Wait(30s);
  EXPECT_EQ(Size(id), 3);
  EXPECT_EQ(Get(id).members[0].instance, rank0);
  // Another tenant's group is unknown to it.
  GroupPatch any;
  any.size = 2;
  EXPECT_EQ(state_->groups().Patch(Tenant{}, id, any, batch_).status().code(),
            StatusCode::kNotFound);
}

TEST(AutoscaleSpecTest, ErrorsNameTheField) {
  auto read = [](const json& body) {
    JsonFields f(body, "body");
    auto r = ReadGroupRequest(f, body);
    return f.ok() ? r.status() : f.body_error();
  };
  json base = {{"size", 2},
               {"template", {{"billing", "spot"}, {"instance_type", "gpu.1xh100"}}},
               {"autoscale",
                {{"min", 1},
                 {"max", 4},
                 {"metric", "gpu_util"},
                 {"target", 60},
                 {"schedule", {{{"cron", "0 14 * * 1-5"}, {"min", 3}}}}}}};
  EXPECT_TRUE(read(base).ok()) << read(base).message();
  json bad_cron = base;
  bad_cron["autoscale"]["schedule"][0]["cron"] = "0 25 * * 1-5";
  EXPECT_NE(read(bad_cron).message().find("autoscale.schedule[0].cron"), std::string::npos)
      << read(bad_cron).message();
  EXPECT_NE(read(bad_cron).message().find("hour"), std::string::npos);
  json fields = base;
  fields["autoscale"]["schedule"][0]["cron"] = "0 14 * *";
  EXPECT_NE(read(fields).message().find("5"), std::string::npos) << read(fields).message();
  json metric = base;
  metric["autoscale"]["metric"] = "qps";
  EXPECT_NE(read(metric).message().find("autoscale.metric"), std::string::npos);
  json range = base;
  range["autoscale"]["max"] = 0;
  EXPECT_NE(read(range).message().find("autoscale.max"), std::string::npos);
  json outside = base;
  outside["size"] = 9;
  EXPECT_NE(read(outside).message().find("size"), std::string::npos);
}

// `elastic` is false or {min, max}; an autoscaled group is elastic over its range unless it says
// otherwise; errors name the field.
TEST(ElasticSpecTest, DefaultsAndErrorsNameTheField) {
  auto read = [](const json& body) -> Result<GroupRequest> {
    JsonFields f(body, "body");
    auto r = ReadGroupRequest(f, body);
    if (!f.ok()) return f.body_error();
    return r;
  };
  const json gang = {
      {"size", 2},
      {"template",
       {{"billing", "on_demand"}, {"instance_type", "gpu.1xh100"}, {"command", "torchrun t.py"}}}};
  ASSERT_TRUE(read(gang).ok()) << read(gang).status().message();
  EXPECT_FALSE(read(gang)->elastic) << "a gang is not elastic unless it says so";
  json scaled = gang;
  scaled["autoscale"] = {{"min", 1}, {"max", 6}, {"metric", "pending"}, {"target", 10}};
  ASSERT_TRUE(read(scaled)->elastic);
  EXPECT_EQ(read(scaled)->elastic->max, 6) << "replicas resize in place";
  scaled["elastic"] = false;
  EXPECT_FALSE(read(scaled)->elastic) << "unless they say not to";
  json elastic = gang;
  elastic["elastic"] = {{"min", 2}, {"max", 8}};
  ASSERT_TRUE(read(elastic).ok());
  EXPECT_EQ(read(elastic)->elastic->min, 2);
  const auto message = [&](json body) { return read(body).status().message(); };
  json bad = gang;
  bad["elastic"] = true;
  EXPECT_NE(message(bad).find("'elastic'"), std::string::npos) << message(bad);
  bad["elastic"] = {{"min", 3}, {"max", 2}};
  EXPECT_NE(message(bad).find("elastic.max"), std::string::npos) << message(bad);
  bad["elastic"] = {{"min", 1}, {"max", 4}, {"step", 1}};
  EXPECT_NE(message(bad).find("step"), std::string::npos) << message(bad);
  bad["elastic"] = {{"min", 3}, {"max", 4}};
  EXPECT_NE(message(bad).find("'size'"), std::string::npos) << message(bad);
  json narrow = scaled;
  narrow["elastic"] = {{"min", 1}, {"max", 4}};
  EXPECT_NE(message(narrow).find("does not hold autoscale's [1, 6]"), std::string::npos)
      << message(narrow);
  // The stored form says which, and reads back the same.
  Group g;
  g.id = "grp-000001";
  g.tenant = *TenantId::Parse("tenant-000001");
  g.spec = *read(elastic);
  const json stored = ToJson(g, Secrets::kIncluded);
  EXPECT_EQ(stored["elastic"], json({{"min", 2}, {"max", 8}}));
  auto back = GroupFromJson(stored, "test");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->spec.elastic->max, 8);
}

TEST(CronTest, MatchesAndFindsThePreviousFiring) {
  const Time monday_1400 = Time(std::chrono::seconds(1'796'047'200));  // 2026-11-30T14:00:00Z.
  auto peak = Cron::Parse("0 14 * * 1-5");
  ASSERT_TRUE(peak.ok());
  EXPECT_TRUE(peak->Matches(monday_1400));
  EXPECT_FALSE(peak->Matches(monday_1400 + 1min));
  EXPECT_EQ(peak->Previous(monday_1400 + 3h, 24h), monday_1400);
  // Before Monday's: last Friday's, three days back.
  EXPECT_EQ(peak->Previous(monday_1400 - 1min, std::chrono::hours(24 * 7)),
            monday_1400 - std::chrono::hours(72));
  EXPECT_FALSE(peak->Previous(monday_1400 - 1min, 24h).has_value());
  auto steps = Cron::Parse("*/15 9-17/2 1,15 * 0,7");
  ASSERT_TRUE(steps.ok()) << steps.status().message();
  for (const char* bad : {"60 * * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "5-1 * * * *",
                          "*/0 * * * *", "a * * * *", "* * * *"}) {
    EXPECT_FALSE(Cron::Parse(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace tessera::core
