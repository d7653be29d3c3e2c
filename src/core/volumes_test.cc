// Volumes alone: names taken per tenant (while being deleted too), ids never reused, the GiB a
// tenant holds, the volumes being deleted as agents are told of them, what the store keeps and
// what a restore reads back, corrupt records named. The state's own tests
// (state_volumes_test.cc) decide who may do what with them, through real agents.
#include "core/volumes.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

class VolumeRecordsTest : public ::testing::Test {
 protected:
  // A volume of `gib` GiB named `name`, made for `tenant` in `volumes` now.
  Result<Volume*> Make(Volumes& volumes, const std::string& tenant, const std::string& name,
                       int64_t gib, const std::string& user = "") {
    Volumes::Request r;
    r.name = name;
    r.size_gib = gib;
    return volumes.Create(tenant, r, user, clock_.Now(), rate_, batch_);
  }

  FakeClock clock_;
  store::Batch batch_;
  const Money rate_ = VolumeRate(100, *Money::Parse("0.08"));
};

TEST_F(VolumeRecordsTest, NamesArePerTenantAndStayTakenWhileDeleting) {
  Volumes volumes;
  auto data = Make(volumes, "tenant-000001", "data", 100);
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ((*data)->id, "vol-000001");
  EXPECT_EQ((*data)->meter.rate, rate_);
  EXPECT_TRUE(Make(volumes, "tenant-000002", "data", 10).ok()) << "another tenant's name space";
  EXPECT_EQ(Make(volumes, "tenant-000001", "data", 5).status().code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(Make(volumes, "tenant-000001", "scratch", 20).ok());
  EXPECT_EQ(volumes.GibOf("tenant-000001"), 120);
  EXPECT_EQ(volumes.List("tenant-000001").size(), 2u);
  EXPECT_EQ(volumes.List("").size(), 3u);

  Volume* v = volumes.Find("tenant-000001", "data");
  ASSERT_NE(v, nullptr);
  volumes.MarkDeleting(*v, batch_);
  ASSERT_EQ(volumes.Deleting().size(), 1u);
  EXPECT_EQ(volumes.Deleting()[0]->id, "vol-000001");
  EXPECT_EQ(Make(volumes, "tenant-000001", "data", 5).status().code(), StatusCode::kAlreadyExists)
      << "the name is taken until its agent removed the data";
  EXPECT_EQ(volumes.GibOf("tenant-000001"), 120) << "a volume being deleted still counts";
  volumes.Erase("tenant-000001", "data", batch_);
  EXPECT_TRUE(volumes.Deleting().empty());
  EXPECT_EQ(volumes.FindById("vol-000001"), nullptr);
  auto again = Make(volumes, "tenant-000001", "data", 5);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->id, "vol-000004") << "ids are never reused";
}

TEST_F(VolumeRecordsTest, ARestoreReadsBackWhatWasStoredAndNamesACorruptRecord) {
  Volumes first;
  auto v = Make(first, "tenant-000001", "data", 10, "owner");
  ASSERT_TRUE(v.ok());
  (*v)->node = "gpu-1";
  first.Save(**v, batch_);
  first.MarkDeleting(**v, batch_);

  Volumes second;
  ASSERT_TRUE(second.Restore(batch_.settings).ok());
  const Volume* back = second.Find("tenant-000001", "data");
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->node, "gpu-1");
  EXPECT_EQ(back->created_by, "owner");
  EXPECT_TRUE(back->deleting);
  EXPECT_EQ(second.Deleting().size(), 1u);
  auto next = Make(second, "tenant-000001", "more", 1);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ((*next)->id, "vol-000002");

  Volumes third;
  const Status bad = third.Restore({{"volume/tenant-000001/data", "{\"id\": 7}"}});
  EXPECT_EQ(bad.code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.message().find("volume/tenant-000001/data"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace tessera::core
