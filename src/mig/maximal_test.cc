// The rules and the planner against an independent reference: the 28 maximal layouts of an
// 8-slice GPU listed in the shared research notes (reference/mig.json, valid_layouts_8slice,
// derived there by its own exhaustive search). "1g" is the 1-slice 1g profile, "1g.2s" the
// 2-slice one.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "mig/mig.h"
#include "mig/mig_test_util.h"

namespace tessera::mig {
namespace {

using testutil::ByShape;
using testutil::EightSliceTables;
using testutil::Shapes;

const std::vector<const char*> kMaximal = {
    "1g@0 1g@1 1g@2 1g@3 1g@4 1g@5 1g@6",
    "1g@0 1g@1 1g@2 1g@3 1g@4 1g@5 1g.2s@6",
    "1g@0 1g@1 1g@2 1g@3 2g@4 1g@6",
    "1g@0 1g@1 1g@2 1g@3 2g@4 1g.2s@6",
    "1g@0 1g@1 1g@2 1g@3 3g@4",
    "1g@0 1g@1 2g@2 2g@4 1g@6",
    "4g@0 1g@4 1g@5 1g@6",
    "1g@0 1g@1 2g@2 2g@4 1g.2s@6",
    "4g@0 1g@4 1g@5 1g.2s@6",
    "1g@0 1g@1 2g@2 3g@4",
    "2g@0 2g@2 2g@4 1g@6",
    "4g@0 2g@4 1g@6",
    "2g@0 2g@2 2g@4 1g.2s@6",
    "4g@0 2g@4 1g.2s@6",
    "2g@0 2g@2 3g@4",
    "4g@0 3g@4",
    "7g@0",
    "1g@0 1g@1 1g@2 1g@3 1g.2s@4 1g.2s@6",
    "1g@0 1g@1 1g.2s@2 2g@4 1g.2s@6",
    "1g@0 1g@1 1g.2s@2 3g@4",
    "1g.2s@0 2g@2 2g@4 1g.2s@6",
    "4g@0 1g.2s@4 1g.2s@6",
    "1g.2s@0 2g@2 3g@4",
    "3g@0 3g@4",
    "1g@0 1g@1 1g.2s@2 1g.2s@4 1g.2s@6",
    "1g.2s@0 1g.2s@2 2g@4 1g.2s@6",
    "1g.2s@0 1g.2s@2 3g@4",
    "1g.2s@0 1g.2s@2 1g.2s@4 1g.2s@6",
};

std::vector<const Profile*> Profiles(const std::vector<Placement>& layout) {
  std::vector<const Profile*> out;
  for (const Placement& p : layout) out.push_back(p.profile);
  return out;
}

TEST(MaximalLayoutsTest, EveryOneIsValidAndTakesNoFurther1g) {
  ASSERT_EQ(kMaximal.size(), 28u);
  for (const Table* t : EightSliceTables()) {
    for (const char* text : kMaximal) {
      std::vector<Placement> layout = Shapes(*t, text);
      EXPECT_TRUE(CheckLayout(*t, layout).ok()) << t->model << " " << text;
      for (const char* shape : {"1g", "1g+me", "1g.2s"}) {
        const Profile* extra = ByShape(*t, shape);
        ASSERT_NE(extra, nullptr);
        for (int start : extra->starts) {
          std::vector<Placement> more = layout;
          more.push_back({extra, start});
          EXPECT_FALSE(CheckLayout(*t, more).ok())
              << t->model << " " << text << " + " << shape << "@" << start;
        }
      }
    }
  }
}

// The planner finds room for every maximal set, whatever order it is asked in, and finds none
// for one more 1g.
TEST(MaximalLayoutsTest, PlannerPlacesEachSetInAnyOrderAndNoMore) {
  for (const Table* t : EightSliceTables()) {
    for (const char* text : kMaximal) {
      std::vector<const Profile*> want = Profiles(Shapes(*t, text));
      std::vector<const Profile*> reversed(want.rbegin(), want.rend());
      for (const auto& add : {want, reversed}) {
        Result<std::vector<Placement>> plan = Plan(*t, {}, add);
        ASSERT_TRUE(plan.ok()) << t->model << " " << text << ": " << plan.status().ToString();
        EXPECT_TRUE(CheckLayout(*t, *plan).ok()) << FormatLayout(*plan);
        EXPECT_EQ(Profiles(*plan), add);
      }
      for (const char* shape : {"1g", "1g.2s"}) {
        std::vector<const Profile*> more = want;
        more.push_back(ByShape(*t, shape));
        Result<std::vector<Placement>> plan = Plan(*t, {}, more);
        EXPECT_EQ(plan.status().code(), StatusCode::kResourceExhausted)
            << t->model << " " << text << " + " << shape;
      }
    }
  }
}

// Enumerates every valid layout of the non-+me profiles with CheckLayout alone, and checks the
// counts the reference reports: 77 placeable multisets of profiles, of which the 28 that no other
// placeable multiset contains are exactly kMaximal.
TEST(MaximalLayoutsTest, CheckLayoutAgreesWithTheReferenceEnumeration) {
  const Table& t = *EightSliceTables().front();
  std::vector<Placement> all;
  for (const char* shape : {"1g", "1g.2s", "2g", "3g", "4g", "7g"}) {
    const Profile* p = ByShape(t, shape);
    for (int s : p->starts) all.push_back({p, s});
  }
  using Multiset = std::vector<std::string>;
  auto key = [](const std::vector<Placement>& layout) {
    Multiset m;
    for (const Placement& p : layout) m.push_back(p.profile->name);
    std::sort(m.begin(), m.end());
    return m;
  };
  std::set<Multiset> placeable;
  std::vector<Placement> layout;
  std::function<void(size_t)> grow = [&](size_t i) {
    if (!layout.empty()) placeable.insert(key(layout));
    for (size_t k = i; k < all.size(); ++k) {
      layout.push_back(all[k]);
      if (CheckLayout(t, layout).ok()) grow(k + 1);
      layout.pop_back();
    }
  };
  grow(0);
  EXPECT_EQ(placeable.size(), 77u);
  auto contains = [](const Multiset& big, const Multiset& small) {
    return big != small && std::includes(big.begin(), big.end(), small.begin(), small.end());
  };
  std::set<Multiset> maximal;
  for (const Multiset& m : placeable) {
    if (std::none_of(placeable.begin(), placeable.end(),
                     [&](const Multiset& o) { return contains(o, m); })) {
      maximal.insert(m);
    }
  }
  std::set<Multiset> reference;
  for (const char* text : kMaximal) reference.insert(key(Shapes(t, text)));
  EXPECT_EQ(maximal, reference);
}

}  // namespace
}  // namespace tessera::mig
