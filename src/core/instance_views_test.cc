// What a tenant is shown of its instances, read alone: a pending instance's reason (the batch
// window; the room it lacks, spot work that could make room, nodes closed to it while another
// tenant's work runs there, never naming that tenant); one instance, pages by state and labels,
// and logs, each the caller's own. The state's tests carry them through creates and agents.
#include "core/instance_views.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

class InstanceViewsTest : public ::testing::Test {
 protected:
  InstanceViewsTest() {
    fleet_ = TestFleet(R"({"name": "v", "shapes": [
      {"name": "h", "count": 1, "gpu_model": "H100-80GB", "gpus": 2, "vcpus": 16,
       "memory_gib": 64, "gpu_mode": "exclusive"}]})");
    scheduler_ = sched::Scheduler::Create(fleet_.get(), {"bestfit", 1, {}}).value();
    admission_ = std::make_unique<Admission>(&TestCatalog(), fleet_.get(), false);
    preemptor_ = std::make_unique<Preemptor>(&TestCatalog(), fleet_.get(), scheduler_.get(),
                                             Preemptor::Limits{});
    views_ = std::make_unique<InstanceViews>(&instances_, &window_, admission_.get(),
                                             preemptor_.get(), &sole_tenant_, &logs_);
  }

  // Instance `seq` of `tenant`: 2 x H100, 4 vCPUs, 1 GiB, in `state`.
  Instance& Add(int64_t seq, const std::string& tenant, InstanceState state,
                Billing billing = Billing::kOnDemand) {
    Instance i = TestInstance(seq, tenant, state);
    i.billing = billing;
    i.shape.gpu_model = "H100-80GB";
    i.shape.mode = catalog::SharingMode::kExclusive;
    i.shape.gpus = 2;
    i.shape.vcpus = 4;
    i.shape.memory_mib = 1024;
    return instances_.Add(std::move(i));
  }

  static Tenant TenantOf(const std::string& id) {
    Tenant t;
    t.id = TenantId::Unchecked(id);
    return t;
  }

  FakeClock clock_;
  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<Admission> admission_;
  std::unique_ptr<Preemptor> preemptor_;
  InstanceTable instances_;
  BatchWindow window_{clock_, 8, 200ms};
  sched::SoleTenantFilter sole_tenant_;
  LogTails logs_;
  std::unique_ptr<InstanceViews> views_;
};

TEST_F(InstanceViewsTest, APendingInstanceSaysWhyItWaitsAndNamesNoOtherTenant) {
  Instance& spot = Add(1, "tenant-000002", InstanceState::kRunning, Billing::kSpot);
  sched::Request all;
  all.gpu_count = 2;
  all.gpu_milli = 1000;
  all.cpu_milli = 4000;
  all.memory_mib = 1024;
  spot.assignment = scheduler_->Schedule(all);
  ASSERT_TRUE(spot.assignment.has_value());
  preemptor_->Track(&spot);

  Instance& waiting = Add(2, "tenant-000001", InstanceState::kPending);
  waiting.reason = "restarting after a failure";
  EXPECT_EQ(views_->Shown(waiting).reason,
            "restarting after a failure; waiting for 2 x H100-80GB with 4 vCPUs and 1024 MiB on "
            "one node; the best node has 0 free; 1 spot instance(s) preemptible")
      << "its own word first, then what it waits for";
  Instance& spot_waiting = Add(3, "tenant-000001", InstanceState::kPending, Billing::kSpot);
  EXPECT_EQ(views_->Shown(spot_waiting).reason.find("preemptible"), std::string::npos)
      << "spot work preempts nothing";

  sole_tenant_.SetShared(fleet::NodeIndex(0), true);
  sole_tenant_.Hold(fleet::NodeIndex(0), SourceOf(spot));
  const std::string closed = views_->Shown(waiting).reason;
  EXPECT_NE(closed.find("; 1 node(s) that cannot isolate tenants from each other host another "
                        "tenant's work"),
            std::string::npos)
      << closed;
  EXPECT_EQ(closed.find("tenant-000002"), std::string::npos) << "never names the other tenant";
  EXPECT_EQ(views_->Shown(spot).reason, "") << "only pending work carries a waiting reason";

  window_.Hold(waiting.id.str());
  EXPECT_EQ(views_->Shown(waiting).reason, window_.Reason()) << "it waits for the window, not room";
}

TEST_F(InstanceViewsTest, OneAPageAndALogAreTheCallersOwn) {
  for (int64_t seq = 1; seq <= 5; ++seq) {
    Instance& i = Add(seq, seq == 3 ? "tenant-000002" : "tenant-000001",
                      seq % 2 ? InstanceState::kRunning : InstanceState::kSucceeded);
    i.labels = {{"team", seq <= 2 ? "a" : "b"}};
  }
  const Tenant mine = TenantOf("tenant-000001");
  ASSERT_TRUE(views_->Get(mine, "inst-000001").ok());
  const Status other = views_->Get(mine, "inst-000003").status();
  EXPECT_EQ(other.code(), StatusCode::kNotFound);
  EXPECT_EQ(other.message(), "instance 'inst-000003' not found")
      << "another tenant's instance reads as an unknown one";

  ListQuery q;
  q.limit = 2;
  InstancePage page = views_->List(mine, q);
  ASSERT_EQ(page.items.size(), 2u);
  EXPECT_EQ(page.next_after, 2);
  q.after_seq = *page.next_after;
  page = views_->List(mine, q);
  ASSERT_EQ(page.items.size(), 2u) << "inst-000003 is another tenant's";
  EXPECT_EQ(page.items[0].id.str(), "inst-000004");
  EXPECT_FALSE(page.next_after.has_value()) << "the last page";
  ListQuery running;
  running.state = InstanceState::kRunning;
  running.selector = *ParseLabelSelector("team=b");
  page = views_->List(mine, running);
  ASSERT_EQ(page.items.size(), 1u);
  EXPECT_EQ(page.items[0].id.str(), "inst-000005");
  Tenant admin;
  admin.admin = true;
  EXPECT_EQ(views_->List(admin, {}).items.size(), 5u);

  logs_.Append("inst-000001", {"inst-000001", 0, 0, "one\ntwo\nthree\n"});
  auto tail = views_->Log(mine, "inst-000001", 2, std::nullopt);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->text, "two\nthree\n");
  EXPECT_EQ(tail->end, 14);
  EXPECT_EQ(tail->state, InstanceState::kRunning);
  auto after = views_->Log(mine, "inst-000001", 0, 8);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->text, "three\n");
  EXPECT_EQ(views_->Log(mine, "inst-000003", 10, std::nullopt).status().code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::core
