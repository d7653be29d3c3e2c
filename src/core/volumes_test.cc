// Volumes alone: names taken per tenant (while being deleted too), ids never reused, the GiB a
// tenant holds, the volumes being deleted as agents are told of them, what the store keeps and
// what a restore reads back, corrupt records named. The state's own tests
// (state_volumes_test.cc) decide who may do what with them, through real agents.
#include "core/volumes.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

Volumes::Request Named(const std::string& name, int64_t gib) {
  Volumes::Request r;
  r.name = name;
  r.size_gib = gib;
  return r;
}

TEST(VolumeRecordsTest, NamesArePerTenantAndStayTakenWhileDeleting) {
  FakeClock clock;
  Volumes volumes;
  store::Batch batch;
  const Money rate = VolumeRate(100, *Money::Parse("0.08"));
  auto data = volumes.Create("tenant-000001", Named("data", 100), "", clock.Now(), rate, batch);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ((*data)->id, "vol-000001");
  EXPECT_EQ((*data)->meter.rate, rate);
  EXPECT_TRUE(volumes.Create("tenant-000002", Named("data", 10), "", clock.Now(), rate, batch).ok())
      << "another tenant's name space";
  EXPECT_EQ(volumes.Create("tenant-000001", Named("data", 5), "", clock.Now(), rate, batch)
                .status()
                .code(),
            StatusCode::kAlreadyExists);
  ASSERT_TRUE(
      volumes.Create("tenant-000001", Named("scratch", 20), "", clock.Now(), rate, batch).ok());
  EXPECT_EQ(volumes.GibOf("tenant-000001"), 120);
  EXPECT_EQ(volumes.List("tenant-000001").size(), 2u);
  EXPECT_EQ(volumes.List("").size(), 3u);

  Volume* v = volumes.Find("tenant-000001", "data");
  ASSERT_NE(v, nullptr);
  volumes.MarkDeleting(*v, batch);
  ASSERT_EQ(volumes.Deleting().size(), 1u);
  EXPECT_EQ(volumes.Deleting()[0]->id, "vol-000001");
  EXPECT_EQ(volumes.Create("tenant-000001", Named("data", 5), "", clock.Now(), rate, batch)
                .status()
                .code(),
            StatusCode::kAlreadyExists)
      << "the name is taken until its agent removed the data";
  EXPECT_EQ(volumes.GibOf("tenant-000001"), 120) << "a volume being deleted still counts";
  volumes.Erase("tenant-000001", "data", batch);
  EXPECT_TRUE(volumes.Deleting().empty());
  EXPECT_EQ(volumes.FindById("vol-000001"), nullptr);
  auto again = volumes.Create("tenant-000001", Named("data", 5), "", clock.Now(), rate, batch);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->id, "vol-000004") << "ids are never reused";
}

TEST(VolumeRecordsTest, ARestoreReadsBackWhatWasStoredAndNamesACorruptRecord) {
  FakeClock clock;
  Volumes first;
  store::Batch batch;
  const Money rate = VolumeRate(10, *Money::Parse("0.08"));
  auto v = first.Create("tenant-000001", Named("data", 10), "owner", clock.Now(), rate, batch);
  ASSERT_TRUE(v.ok());
  (*v)->node = "gpu-1";
  first.Save(**v, batch);
  first.MarkDeleting(**v, batch);

  Volumes second;
  ASSERT_TRUE(second.Restore(batch.settings).ok());
  const Volume* back = second.Find("tenant-000001", "data");
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->node, "gpu-1");
  EXPECT_EQ(back->created_by, "owner");
  EXPECT_TRUE(back->deleting);
  EXPECT_EQ(second.Deleting().size(), 1u);
  auto next = second.Create("tenant-000001", Named("more", 1), "", clock.Now(), rate, batch);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ((*next)->id, "vol-000002");

  Volumes third;
  const Status bad = third.Restore({{"volume/tenant-000001/data", "{\"id\": 7}"}});
  EXPECT_EQ(bad.code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.message().find("volume/tenant-000001/data"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace tessera::core
