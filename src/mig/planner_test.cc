// The planner: where it puts new instances, that it keeps existing ones unmoved, and the reasons it
// gives when nothing fits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mig/mig.h"
#include "mig/mig_test_util.h"

namespace tessera::mig {
namespace {

using testutil::ByShape;
using testutil::CatalogTable;
using testutil::EightSliceTables;
using testutil::Render;
using testutil::Shapes;

std::vector<const Profile*> Adds(const Table& t, const std::vector<const char*>& shapes) {
  std::vector<const Profile*> out;
  for (const char* s : shapes) out.push_back(ByShape(t, s));
  return out;
}

struct PlanCase {
  const char* existing;          // Shape notation.
  std::vector<const char*> add;  // Shapes, in request order.
  const char* want;              // The whole layout, or the error message.
};

// Expected layouts follow the rule in planner.cc: (a) the largest profile still addable, (b) the
// number of placements still addable, (c) late starts for small profiles.
const std::vector<PlanCase> kPlans = {
    // A lone 1g at 0..3 would block 4g@0; at 4 or 5 it blocks 2g@4 as well as 3g@4; 6 blocks least.
    {"", {"1g"}, "{1g}@6"},
    {"", {"1g.2s"}, "{1g.2s}@6"},
    {"", {"2g"}, "{2g}@4"},
    {"", {"3g"}, "{3g}@4"},
    {"", {"4g"}, "{4g}@0"},
    {"", {"7g"}, "{7g}@0"},
    {"", {"3g", "4g"}, "{3g}@4 {4g}@0"},
    {"", {"4g", "3g"}, "{4g}@0 {3g}@4"},
    {"", {"3g", "3g"}, "{3g}@0 {3g}@4"},
    {"", {"1g", "1g"}, "{1g}@4 {1g}@5"},
    {"", {"2g", "2g", "2g"}, "{2g}@0 {2g}@2 {2g}@4"},
    {"", {"1g", "2g", "3g"}, "{1g}@3 {2g}@0 {3g}@4"},
    {"3g@4", {"1g", "2g"}, "{3g}@4 {1g}@3 {2g}@0"},
    {"3g@4", {"2g", "1g"}, "{3g}@4 {2g}@0 {1g}@3"},
    {"4g@0", {"1g"}, "{4g}@0 {1g}@6"},
    {"4g@0 1g@6", {"2g"}, "{4g}@0 {1g}@6 {2g}@4"},
    {"1g@0", {"3g"}, "{1g}@0 {3g}@4"},
    {"1g+me@6", {"4g"}, "{1g+me}@6 {4g}@0"},
    {"2g@0", {}, "{2g}@0"},
    // Failures: the first request that cannot be added, and why.
    {"1g@2", {"4g"}, "no room for {4g}: {4g}@0 overlaps {1g}@2"},
    {"1g@1 1g@5", {"3g"}, "no room for {3g}: {3g}@0 overlaps {1g}@1; {3g}@4 overlaps {1g}@5"},
    {"7g@0", {"1g"}, "no room for {1g}: every start of {1g} overlaps {7g}@0"},
    {"1g+me@0",
     {"1g+me"},
     "no room for {1g+me}: only one +me instance fits on a GPU, and {1g+me}@0 is one"},
    {"",
     {"3g", "3g", "3g"},
     "no room for {3g} beside the other new instances in any arrangement; with the best one "
     "({3g}@0 {3g}@4): at most 2 {3g} fit on one GPU"},
    {"1g@5",
     {"2g", "2g", "3g"},
     "no room for {3g} beside the other new instances in any arrangement; with the best one "
     "({2g}@0 {2g}@2): {3g}@0 overlaps {2g}@0; {3g}@4 overlaps {1g}@5"},
};

TEST(PlanTest, EveryEightSliceModel) {
  for (const Table* t : EightSliceTables()) {
    for (const PlanCase& c : kPlans) {
      const std::string want = Render(*t, c.want);
      Result<std::vector<Placement>> plan = Plan(*t, Shapes(*t, c.existing), Adds(*t, c.add));
      if (want.rfind("no room", 0) == 0) {
        EXPECT_EQ(plan.status().ToString(), Status::ResourceExhausted(want).ToString())
            << t->model << " " << c.want;
      } else {
        ASSERT_TRUE(plan.ok()) << t->model << " " << c.want << ": " << plan.status().ToString();
        EXPECT_EQ(FormatLayout(*plan), want) << t->model;
        EXPECT_TRUE(CheckLayout(*t, *plan).ok()) << FormatLayout(*plan);
      }
    }
  }
}

// The brief's example: one small instance must leave room for both a 4g and a 3g.
TEST(PlanTest, LoneSmallInstanceLeavesRoomFor4gAnd3g) {
  const Table& t = CatalogTable("H100-80GB");
  Result<std::vector<Placement>> plan = Plan(t, {}, {t.Find("1g.10gb")});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_TRUE(Plan(t, *plan, {t.Find("4g.40gb")}).ok()) << FormatLayout(*plan);
  EXPECT_TRUE(Plan(t, *plan, {t.Find("3g.40gb")}).ok()) << FormatLayout(*plan);
  EXPECT_TRUE(Plan(t, *plan, {t.Find("4g.40gb"), t.Find("2g.20gb")}).ok()) << FormatLayout(*plan);
}

TEST(PlanTest, A30) {
  const Table& t = CatalogTable("A30-24GB");
  struct Case {
    std::vector<Placement> existing;
    std::vector<const char*> add;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{}, {"1g.6gb"}, "1g.6gb@3"},
      {{}, {"2g.12gb"}, "2g.12gb@2"},
      {{}, {"2g.12gb+me", "2g.12gb"}, "2g.12gb+me@2 2g.12gb@0"},
      {{{t.Find("1g.6gb"), 0}}, {"2g.12gb", "1g.6gb"}, "1g.6gb@0 2g.12gb@2 1g.6gb@1"},
      {{{t.Find("1g.6gb+me"), 3}},
       {"2g.12gb+me"},
       "no room for 2g.12gb+me: only one +me instance fits on a GPU, and 1g.6gb+me@3 is one"},
      {{{t.Find("1g.6gb"), 1}}, {"4g.24gb"}, "no room for 4g.24gb: 4g.24gb@0 overlaps 1g.6gb@1"},
  };
  for (const Case& c : cases) {
    std::vector<const Profile*> add;
    for (const char* name : c.add) add.push_back(t.Find(name));
    Result<std::vector<Placement>> plan = Plan(t, c.existing, add);
    EXPECT_EQ(plan.ok() ? FormatLayout(*plan) : plan.status().message(), c.want);
  }
}

TEST(PlanTest, InvalidExistingLayoutIsRejected) {
  const Table& t = CatalogTable("H100-80GB");
  Result<std::vector<Placement>> plan =
      Plan(t, {{t.Find("3g.40gb"), 4}, {t.Find("1g.10gb"), 5}}, {t.Find("1g.10gb")});
  EXPECT_EQ(plan.status().ToString(),
            "failed_precondition: existing instances: memory slices overlap: 3g.40gb@4 and "
            "1g.10gb@5");
}

TEST(PlanTest, ProfileOfAnotherModelIsRejected) {
  const Table& t = CatalogTable("H100-80GB");
  Result<std::vector<Placement>> plan = Plan(t, {}, {CatalogTable("A100-40GB").Find("3g.20gb")});
  EXPECT_EQ(plan.status().ToString(),
            Status::InvalidArgument("profile 3g.20gb is not one of H100-80GB's").ToString());
}

}  // namespace
}  // namespace tessera::mig
