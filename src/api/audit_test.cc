#include "api/audit.h"

#include <gtest/gtest.h>

#include "common/text.h"

namespace tessera::api {
namespace {

store::AuditRecord Row(const std::string& actor, int status, std::string path = "/v1/instances") {
  return {0, "2026-12-03T00:00:00Z", actor, "DELETE " + path, "", status, "not found"};
}

TEST(AuditGateTest, EveryFieldIsCutToItsSizeOnACharacterBoundary) {
  AuditGate gate;
  // An 8 KB id of two-byte characters: the row keeps a few hundred bytes of it, valid UTF-8.
  std::string id;
  for (int i = 0; i < 4096; ++i) id += "\xC3\xA9";
  store::AuditRecord row = Row("tenant-000001", 404, "/v1/instances/" + id);
  row.target = id;
  row.detail = "instance '" + id + "' not found";
  auto out = gate.Admit(row, Time{});
  ASSERT_TRUE(out);
  EXPECT_LE(out->action.size(), AuditGate::kMaxAction);
  EXPECT_LE(out->target.size(), AuditGate::kMaxTarget);
  EXPECT_LE(out->detail.size(), AuditGate::kMaxDetail);
  for (const std::string* s : {&out->action, &out->target, &out->detail}) {
    EXPECT_TRUE(IsValidUtf8(*s));
    EXPECT_EQ(s->substr(s->size() - 3), "...");
  }
  EXPECT_EQ(out->action.rfind("DELETE /v1/instances/\xC3\xA9", 0), 0u);
  // What fits is kept whole.
  EXPECT_EQ(gate.Admit(Row("tenant-000001", 201), Time{})->action, "DELETE /v1/instances");
}

TEST(AuditGateTest, ACallersRefusalsAreRecordedAtItsRateAndTheGapIsCounted) {
  AuditGate gate;
  const Time t0{};
  int recorded = 0;
  for (int i = 0; i < 300; ++i) recorded += gate.Admit(Row("tenant-000001", 404), t0) ? 1 : 0;
  EXPECT_EQ(recorded, static_cast<int>(AuditGate::kRefusedBurst));
  // Another caller has its own allowance.
  EXPECT_TRUE(gate.Admit(Row("tenant-000002", 404), t0));
  // Two seconds later two more refusals are recorded, and the first says how many were not.
  const Time t2 = t0 + std::chrono::seconds(2);
  auto next = gate.Admit(Row("tenant-000001", 404), t2);
  ASSERT_TRUE(next);
  EXPECT_NE(next->detail.find("not found (200 refused requests of this caller before this one "
                              "were not recorded"),
            std::string::npos)
      << next->detail;
  auto after = gate.Admit(Row("tenant-000001", 404), t2);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->detail, "not found");
  EXPECT_FALSE(gate.Admit(Row("tenant-000001", 404), t2));
  // An accepted request is recorded all the same, and carries the count.
  auto accepted = gate.Admit(Row("tenant-000001", 201), t2);
  ASSERT_TRUE(accepted);
  EXPECT_NE(accepted->detail.find("(1 refused requests"), std::string::npos) << accepted->detail;
}

}  // namespace
}  // namespace tessera::api
