// Which instances mount which volumes, alone: only active instances hold them; who may mount one
// (its tenant's own, not being deleted, one holder unless shared, a gang's restart excepted, all
// of an instance's volumes on one node), each refusal naming what is wrong; a volume's node taken
// from its first instance's; and what an agent reports of the volumes on its node. The state's
// tests (state_volumes_test.cc) carry volumes through real agents.
#include "core/volume_mounts.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

class VolumeMountsTest : public ::testing::Test {
 protected:
  Volume* Make(const std::string& tenant, const std::string& name, bool shared,
               const std::string& node = "") {
    Volumes::Request r;
    r.name = name;
    r.size_gib = 10;
    r.shared = shared;
    r.node = node;
    auto v = volumes_.Create(tenant, r, "", clock_.Now(), Money::FromCents(1), batch_);
    EXPECT_TRUE(v.ok());
    if (v.ok()) (*v)->node = node;
    return v.ok() ? *v : nullptr;
  }

  // Instance `seq` of tenant 1, running on `node`, mounting `names` at /mnt/NAME.
  Instance& Mounting(int64_t seq, const std::vector<std::string>& names,
                     const std::string& node = "n1") {
    Instance i = TestInstance(seq, "tenant-000001", InstanceState::kRunning);
    i.node = node;
    for (const std::string& n : names) i.volumes.push_back({n, "/mnt/" + n});
    Instance& added = instances_.Add(std::move(i));
    mounts_.Track(added);
    return added;
  }

  static CreateInstanceRequest Req(const std::vector<std::string>& names) {
    CreateInstanceRequest r = TestH100(1);
    for (const std::string& n : names) r.volumes.push_back({n, "/mnt/" + n});
    return r;
  }

  std::string Refusal(const std::vector<std::string>& names, int count = 1,
                      std::string_view group = "") const {
    return mounts_.Check("tenant-000001", Req(names), count, group).message();
  }

  FakeClock clock_;
  store::Batch batch_;
  Volumes volumes_;
  InstanceTable instances_;
  VolumeMounts mounts_{&volumes_, &instances_};
};

TEST_F(VolumeMountsTest, OnlyActiveInstancesHoldAndAVolumeNotSharedHasOneHolder) {
  Make("tenant-000001", "ckpt", false);
  Make("tenant-000001", "data", true);
  Make("tenant-000002", "theirs", false);
  Instance& holder = Mounting(1, {"ckpt", "data"});
  holder.group = "grp-000001";
  EXPECT_EQ(mounts_.Users("tenant-000001", "ckpt"), std::vector<std::string>{"inst-000001"});
  EXPECT_TRUE(mounts_.Users("tenant-000002", "ckpt").empty()) << "another tenant's name space";

  EXPECT_EQ(Refusal({"ckpt"}),
            "volume 'ckpt' is attached to inst-000001, and it is not shared (create it with "
            "\"shared\": true to mount it from several instances on its node)");
  EXPECT_EQ(Refusal({"ckpt"}, 1, "grp-000001"), "") << "a restart of the holder's own group";
  EXPECT_EQ(Refusal({"ckpt"}, 2),
            "volume 'ckpt' is not shared: 2 instances cannot mount it at once (create it with "
            "\"shared\": true)");
  EXPECT_EQ(Refusal({"data"}, 3), "") << "a shared volume takes many";
  EXPECT_EQ(Refusal({"data", "nope"}),
            "field 'volumes[1].name': volume 'nope' does not exist (POST /v1/volumes makes it)");
  EXPECT_EQ(Refusal({"theirs"}).rfind("field 'volumes[0].name': volume 'theirs' does not exist", 0),
            0u)
      << "another tenant's volume reads as none";

  holder.state = InstanceState::kSucceeded;
  mounts_.Track(holder);
  EXPECT_TRUE(mounts_.Users("tenant-000001", "ckpt").empty()) << "ended work holds nothing";
  EXPECT_EQ(Refusal({"ckpt"}), "");
}

TEST_F(VolumeMountsTest, AVolumeTakesItsFirstInstancesNodeAndItsAgentsWord) {
  Volume* data = Make("tenant-000001", "data", true);
  Volume* scratch = Make("tenant-000001", "scratch", false, "n2");
  ASSERT_TRUE(data && scratch);
  const Instance& first = Mounting(1, {"data"});
  EXPECT_EQ(mounts_.NodeOf(first), "") << "no node yet: it may go anywhere";
  batch_ = {};
  mounts_.Settle(first, batch_);
  EXPECT_EQ(data->node, "n1");
  EXPECT_EQ(KeysWithPrefix(batch_, Volumes::kPrefix),
            std::vector<std::string>{"volume/tenant-000001/data"});
  EXPECT_EQ(mounts_.NodeOf(first), "n1");
  EXPECT_EQ(Refusal({"data", "scratch"}),
            "volumes 'data' (on node 'n1') and 'scratch' (on node 'n2') are on different nodes; "
            "an instance runs on one");

  VolumeReport n1;
  n1.held = {{data->id, VolumeUse{5 << 20, 10ll << 30, true}}};
  mounts_.ApplyReport("n1", n1, batch_);
  ASSERT_TRUE(data->use.has_value());
  EXPECT_EQ(data->use->used_bytes, 5 << 20);
  VolumeReport liar;
  liar.held = {{data->id, VolumeUse{1, 1, false}}};
  mounts_.ApplyReport("n2", liar, batch_);
  EXPECT_EQ(data->use->used_bytes, 5 << 20) << "another node's agent cannot speak for it";

  volumes_.MarkDeleting(*scratch, batch_);
  EXPECT_EQ(Refusal({"scratch"}), "volume 'scratch' is being deleted");
  mounts_.ApplyReport("n1", n1, batch_);
  EXPECT_NE(volumes_.Find("tenant-000001", "scratch"), nullptr) << "not n1's to remove";
  mounts_.ApplyReport("n2", VolumeReport{}, batch_);
  EXPECT_EQ(volumes_.Find("tenant-000001", "scratch"), nullptr)
      << "its agent no longer holds it: its data is gone";
}

}  // namespace
}  // namespace tessera::core
