// The layout rules and PROFILE@START parsing, on every MIG model in catalog/mig.json.
#include "mig/mig.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mig/mig_test_util.h"

namespace tessera::mig {
namespace {

using testutil::CatalogTable;
using testutil::CatalogTables;
using testutil::EightSliceTables;
using testutil::Render;
using testutil::Shapes;

TEST(MigTablesTest, CatalogHasEveryMigModel) {
  std::vector<std::string> models;
  for (const Table& t : CatalogTables()) models.push_back(t.model);
  EXPECT_EQ(models,
            (std::vector<std::string>{"A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL-94GB",
                                      "H200-141GB", "B200-180GB", "A30-24GB"}));
}

TEST(MigTablesTest, EightSliceModelsUseNvidiasNames) {
  struct Case {
    const char* model;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {"A100-40GB", {"1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"}},
      {"A100-80GB",
       {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-80GB",
       {"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}},
      {"H100-NVL-94GB",
       {"1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"}},
      {"H200-141GB",
       {"1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"}},
      {"B200-180GB",
       {"1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"}},
  };
  for (const Case& c : cases) {
    const Table& t = CatalogTable(c.model);
    std::vector<std::string> got;
    for (const char* shape : {"1g", "1g+me", "1g.2s", "2g", "3g", "4g", "7g"}) {
      const Profile* p = testutil::ByShape(t, shape);
      got.push_back(p ? p->name : std::string("missing ") + shape);
    }
    EXPECT_EQ(got, c.names) << c.model;
  }
}

TEST(MigTablesTest, ReportedMemoryIsUsed) {
  // H100-80GB's 3g.40gb reports 39.50 GiB in `nvidia-smi mig -lgip`.
  const Profile* p = CatalogTable("H100-80GB").Find("3g.40gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->memory_mib, 40448);
  EXPECT_EQ(p->id, 9);
  EXPECT_EQ(p->starts, (std::vector<int>{0, 4}));
}

struct LayoutCase {
  const char* layout;  // Shape notation (see mig_test_util.h).
  const char* error;   // Expected message with {shape} for names; "" when valid.
};

const std::vector<LayoutCase> kEightSliceCases = {
    {"", ""},
    {"7g@0", ""},
    {"4g@0 3g@4", ""},
    {"3g@0 3g@4", ""},
    {"2g@0 2g@2 3g@4", ""},
    {"4g@0 2g@4 1g@6", ""},
    {"2g@0 2g@2 2g@4 1g@6", ""},
    {"1g.2s@0 1g.2s@2 1g.2s@4 1g.2s@6", ""},
    {"1g@0 1g@1 1g@2 1g@3 1g@4 1g@5 1g@6", ""},
    {"1g+me@3 1g@0 1g@1 1g@2 3g@4", ""},
    {"1g@6 4g@0", ""},
    {"3g@3", "start 3 is not valid for {3g} (valid: 0, 4)"},
    {"4g@4", "start 4 is not valid for {4g} (valid: 0)"},
    {"1g@7", "start 7 is not valid for {1g} (valid: 0, 1, 2, 3, 4, 5, 6)"},
    {"2g@6", "start 6 is not valid for {2g} (valid: 0, 2, 4)"},
    {"1g.2s@1", "start 1 is not valid for {1g.2s} (valid: 0, 2, 4, 6)"},
    {"7g@0 1g@3", "memory slices overlap: {7g}@0 and {1g}@3"},
    {"3g@4 1g@5", "memory slices overlap: {3g}@4 and {1g}@5"},
    {"4g@0 3g@0", "memory slices overlap: {4g}@0 and {3g}@0"},
    {"1g@2 1g@2", "memory slices overlap: {1g}@2 and {1g}@2"},
    {"1g.2s@6 3g@4", "memory slices overlap: {1g.2s}@6 and {3g}@4"},
    {"1g+me@0 1g+me@1", "more than one +me instance: {1g+me}@0 {1g+me}@1"},
};

TEST(CheckLayoutTest, EveryEightSliceModel) {
  const std::vector<const Table*> tables = EightSliceTables();
  ASSERT_EQ(tables.size(), 6u);
  for (const Table* t : tables) {
    for (const LayoutCase& c : kEightSliceCases) {
      Status s = CheckLayout(*t, Shapes(*t, c.layout));
      const std::string want = Render(*t, c.error);
      if (want.empty()) {
        EXPECT_TRUE(s.ok()) << t->model << " " << c.layout << ": " << s.ToString();
      } else {
        EXPECT_EQ(s.ToString(), Status::FailedPrecondition(want).ToString())
            << t->model << " " << c.layout;
      }
    }
  }
}

TEST(CheckLayoutTest, A30) {
  const Table& t = CatalogTable("A30-24GB");
  struct Case {
    std::vector<std::pair<std::string, int>> layout;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{{"4g.24gb", 0}}, ""},
      {{{"2g.12gb", 0}, {"2g.12gb", 2}}, ""},
      {{{"1g.6gb", 0}, {"1g.6gb", 1}, {"1g.6gb", 2}, {"1g.6gb", 3}}, ""},
      {{{"2g.12gb+me", 2}, {"1g.6gb", 0}, {"1g.6gb", 1}}, ""},
      {{{"1g.6gb+me", 1}, {"1g.6gb", 0}, {"2g.12gb", 2}}, ""},
      {{{"2g.12gb", 1}}, "start 1 is not valid for 2g.12gb (valid: 0, 2)"},
      {{{"4g.24gb", 0}, {"1g.6gb", 3}}, "memory slices overlap: 4g.24gb@0 and 1g.6gb@3"},
      {{{"1g.6gb+me", 0}, {"2g.12gb+me", 2}},
       "more than one +me instance: 1g.6gb+me@0 2g.12gb+me@2"},
  };
  for (const Case& c : cases) {
    std::vector<Placement> layout;
    for (const auto& [name, start] : c.layout) layout.push_back({t.Find(name), start});
    Status s = CheckLayout(t, layout);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << FormatLayout(layout) << ": " << s.ToString();
    } else {
      EXPECT_EQ(s.ToString(), Status::FailedPrecondition(c.error).ToString())
          << FormatLayout(layout);
    }
  }
}

// No real table can break the compute or per-profile limits without an overlap (slice 7 takes no
// 1-slice profile), so a made-up table where it can shows those rules at work.
Table LooseTable() {
  const nlohmann::json j = {{"model", "LOOSE"},
                            {"memory_slices", 8},
                            {"compute_slices", 7},
                            {"profiles",
                             {{{"name", "1g"},
                               {"id", 1},
                               {"compute_slices", 1},
                               {"memory_slices", 1},
                               {"starts", {0, 1, 2, 3, 4, 5, 6, 7}},
                               {"max_count", 8},
                               {"memory_mib", 1000}},
                              {{"name", "2g"},
                               {"id", 2},
                               {"compute_slices", 2},
                               {"memory_slices", 2},
                               {"starts", {0, 2, 4, 6}},
                               {"max_count", 2},
                               {"memory_mib", 2000}}}}};
  Result<Table> t = ParseTable(j, "test");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Table{};
}

TEST(CheckLayoutTest, ComputeAndCountLimits) {
  const Table t = LooseTable();
  const Profile* g1 = t.Find("1g");
  const Profile* g2 = t.Find("2g");
  ASSERT_TRUE(g1 && g2);
  std::vector<Placement> eight;
  for (int s = 0; s < 8; ++s) eight.push_back({g1, s});
  EXPECT_EQ(CheckLayout(t, eight).ToString(),
            "failed_precondition: compute slices sum to 8, more than 7: 1g@0 1g@1 1g@2 1g@3 1g@4 "
            "1g@5 1g@6 1g@7");
  EXPECT_EQ(CheckLayout(t, {{g2, 0}, {g2, 2}, {g2, 4}}).ToString(),
            "failed_precondition: more than 2 2g instances: 2g@0 2g@2 2g@4");
  EXPECT_TRUE(CheckLayout(t, {{g2, 0}, {g2, 6}, {g1, 2}, {g1, 3}, {g1, 4}}).ok());
  // Slice 7 is free, but the compute slices are all taken.
  eight.pop_back();
  EXPECT_EQ(Plan(t, eight, {g1}).status().ToString(),
            "resource_exhausted: no room for 1g: compute slices would sum to 8, more than 7");
  EXPECT_EQ(Plan(t, {{g2, 0}, {g2, 2}}, {g2}).status().ToString(),
            "resource_exhausted: no room for 2g: at most 2 2g fit on one GPU");
}

TEST(CheckLayoutTest, ProfileFromAnotherTableIsRejected) {
  const Table& a100 = CatalogTable("A100-40GB");
  const Table& h100 = CatalogTable("H100-80GB");
  Status s = CheckLayout(a100, {{h100.Find("3g.40gb"), 0}});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "placement at start 0 names no profile of A100-40GB");
}

TEST(ParsePlacementTest, Cases) {
  const Table& t = CatalogTable("H100-80GB");
  struct Case {
    const char* text;
    StatusCode code;
    std::string message;  // The placement's ToString() when OK.
  };
  const std::string valid = "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb";
  const std::vector<Case> cases = {
      {"3g.40gb@4", StatusCode::kOk, "3g.40gb@4"},
      {"1g.10gb+me@6", StatusCode::kOk, "1g.10gb+me@6"},
      // A start the profile does not allow parses; CheckLayout reports it with the valid starts.
      {"3g.40gb@3", StatusCode::kOk, "3g.40gb@3"},
      {"3g.40gb", StatusCode::kInvalidArgument,
       "'3g.40gb' is not PROFILE@START (for example 1g.10gb@0)"},
      {"@4", StatusCode::kInvalidArgument, "'@4' is not PROFILE@START (for example 1g.10gb@0)"},
      {"3g.40gb@", StatusCode::kInvalidArgument,
       "'3g.40gb@' is not PROFILE@START (for example 1g.10gb@0)"},
      {"3g.40gb@x", StatusCode::kInvalidArgument,
       "'3g.40gb@x': start 'x' is not a memory-slice index (0, 1, 2, ...)"},
      {"3g.40gb@-4", StatusCode::kInvalidArgument,
       "'3g.40gb@-4': start '-4' is not a memory-slice index (0, 1, 2, ...)"},
      {"3g.40gb@4x", StatusCode::kInvalidArgument,
       "'3g.40gb@4x': start '4x' is not a memory-slice index (0, 1, 2, ...)"},
      {"3g.40gb@99999999999", StatusCode::kInvalidArgument,
       "'3g.40gb@99999999999': start '99999999999' is not a memory-slice index (0, 1, 2, ...)"},
      {"3g.20gb@0", StatusCode::kNotFound,
       "unknown MIG profile '3g.20gb' on H100-80GB; valid: " + valid},
  };
  for (const Case& c : cases) {
    Result<Placement> p = ParsePlacement(t, c.text);
    if (c.code == StatusCode::kOk) {
      ASSERT_TRUE(p.ok()) << c.text << ": " << p.status().ToString();
      EXPECT_EQ(p->ToString(), c.message);
    } else {
      EXPECT_EQ(p.status().ToString(), Status(c.code, c.message).ToString()) << c.text;
    }
  }
}

TEST(ParsePlanTokensTest, Cases) {
  const Table& t = CatalogTable("H100-80GB");
  struct Case {
    std::vector<std::string> tokens;
    bool existing_allowed;
    StatusCode code;
    // When OK: the existing layout, then " + " and the profiles to add.
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"3g.40gb", "4g.40gb"}, false, StatusCode::kOk, " + 3g.40gb 4g.40gb"},
      // Starts and profiles may come in any order; the profiles keep theirs.
      {{"2g.20gb", "4g.40gb@0", "1g.10gb", "1g.10gb@6"},
       true,
       StatusCode::kOk,
       "4g.40gb@0 1g.10gb@6 + 2g.20gb 1g.10gb"},
      {{"3g.40gb@4", "1g.10gb"},
       false,
       StatusCode::kInvalidArgument,
       "'3g.40gb@4' names a start; list existing instances after --existing"},
      {{"3g.40gb@4"},
       true,
       StatusCode::kInvalidArgument,
       "no profiles to add; name at least one PROFILE"},
      {{}, false, StatusCode::kInvalidArgument, "no profiles to add; name at least one PROFILE"},
      // The first bad token is reported.
      {{"3g.40gb@x", "5g.50gb"},
       true,
       StatusCode::kInvalidArgument,
       "'3g.40gb@x': start 'x' is not a memory-slice index (0, 1, 2, ...)"},
      {{"1g.10gb", "5g.50gb"},
       false,
       StatusCode::kNotFound,
       "unknown MIG profile '5g.50gb' on H100-80GB; valid: 1g.10gb, 1g.10gb+me, 1g.20gb, "
       "2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb"},
  };
  for (const Case& c : cases) {
    Result<PlanRequest> r = ParsePlanTokens(t, c.tokens, c.existing_allowed);
    if (c.code != StatusCode::kOk) {
      EXPECT_EQ(r.status().ToString(), Status(c.code, c.message).ToString()) << c.message;
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::string got = FormatLayout(r->existing) + " +";
    for (const Profile* p : r->add) got += " " + p->name;
    EXPECT_EQ(got, c.message);
  }
}

TEST(FormatLayoutTest, SpaceSeparatedTokens) {
  const Table& t = CatalogTable("H100-80GB");
  EXPECT_EQ(FormatLayout({{t.Find("4g.40gb"), 0}, {t.Find("1g.10gb"), 6}}), "4g.40gb@0 1g.10gb@6");
  EXPECT_EQ(FormatLayout({}), "");
}

}  // namespace
}  // namespace tessera::mig
