// Key rotation alone: a walk over the secrets, live instances and live groups that hold sealed
// values, a bounded step at a time, re-sealing under the new current key into the batch what is
// not under it, and skipping what ended. The state's test (state_secrets_test.cc) rotates a whole
// state, alert rules included, and restores it with the new key only.
#include "core/rotation.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

class KeyRotationTest : public ::testing::Test {
 protected:
  KeyRotationTest() {
    Monitoring::Options o;
    o.sealer = &sealer_;
    monitoring_ = std::make_unique<Monitoring>(&clock_, o);
    rotation_ = std::make_unique<KeyRotation>(&secrets_, &instances_, &groups_, monitoring_.get(),
                                              &fleet_, true);
  }

  // Instance `seq` of tenant 1 in `state`, its literal MODE sealed.
  Instance& AddInstance(int64_t seq, InstanceState state) {
    Instance i = TestInstance(seq, "tenant-000001", state);
    i.env["MODE"].value = "fast";
    EXPECT_TRUE(
        secrets_.SealValues(TenantSecrets::InstanceRecord(i.id.str()), i.env, i.image).ok());
    return instances_.Add(std::move(i));
  }

  Group& AddGroup(GroupState state) {
    Group g;
    groups_.Number(g);
    g.tenant = TenantId::Unchecked("tenant-000001");
    g.state = state;
    g.spec.member.env["MODE"].value = "slow";
    g.spec.member.image.ref = "registry.local/train:1";
    g.spec.member.image.auth = RegistryAuth{"robot", "pw", "", ""};
    EXPECT_TRUE(
        secrets_
            .SealValues(TenantSecrets::TemplateRecord(g.id), g.spec.member.env, g.spec.member.image)
            .ok());
    return groups_.Add(std::move(g));
  }

  FakeClock clock_;
  Sealer sealer_{TestKeyring(TestKeyLine("k1", 'a'))};
  TenantSecrets secrets_{&clock_, &sealer_};
  InstanceTable instances_;
  GroupTable groups_;
  fleet::Fleet fleet_{&TestCatalog()};
  std::unique_ptr<Monitoring> monitoring_;
  std::unique_ptr<KeyRotation> rotation_;
  store::Batch batch_;
};

TEST_F(KeyRotationTest, BoundedStepsMoveEveryLiveValueToTheNewKey) {
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(secrets_.Put("tenant-000001", name, "v", "", false, batch_).ok());
  }
  const Instance& live = AddInstance(1, InstanceState::kRunning);
  Instance& ended = AddInstance(2, InstanceState::kSucceeded);
  const std::string ended_sealed = ended.env.at("MODE").sealed;
  const Group& group = AddGroup(GroupState::kRunning);
  Group& deleted = AddGroup(GroupState::kDeleted);
  const std::string deleted_sealed = deleted.spec.member.env.at("MODE").sealed;
  EXPECT_EQ(rotation_->SealedKeys(), (std::map<std::string, int64_t>{{"k1", 3 + 2 + 2}}));

  sealer_.SetKeyring(TestKeyring(TestKeyLine("k2", 'b') + "\n" + TestKeyLine("k1", 'a')));
  batch_ = {};
  KeyRotation::Cursor cursor;
  size_t steps = 0, resealed = 0;
  while (!cursor.done()) {
    auto step = rotation_->Step("k2", cursor, 2, batch_);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_LE(step->examined, 2u) << "a step looks at no more than its limit";
    EXPECT_EQ(step->done, cursor.done());
    resealed += step->resealed;
    ASSERT_LT(++steps, 20u);
  }
  EXPECT_EQ(resealed, 3u + 1u + 1u) << "the secrets, the live instance and the live group";
  EXPECT_GE(steps, 4u);
  EXPECT_EQ(ended.env.at("MODE").sealed, ended_sealed) << "ended work is not re-sealed";
  EXPECT_EQ(deleted.spec.member.env.at("MODE").sealed, deleted_sealed);
  ASSERT_EQ(batch_.instances.size(), 1u);
  EXPECT_EQ(batch_.instances[0].id, live.id.str());
  EXPECT_NE(batch_.instances[0].doc.find("enc:v1:"), std::string::npos)
      << "the record carries the value sealed anew";
  EXPECT_EQ(KeysWithPrefix(batch_, GroupTable::kPrefix),
            std::vector<std::string>{"group/" + group.id});
  EXPECT_EQ(rotation_->SealedKeys(), (std::map<std::string, int64_t>{{"k1", 2}, {"k2", 3 + 1 + 1}}))
      << "only what ended is still under k1";

  // The live values open with the new key alone.
  sealer_.SetKeyring(TestKeyring(TestKeyLine("k2", 'b')));
  Instance copy = live;
  for (auto& [name, v] : copy.env) v.value.clear();
  auto opened = secrets_.OpenValues(TenantSecrets::InstanceRecord(copy.id.str()), false, copy.env,
                                    copy.image);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(copy.env.at("MODE").value, "fast");

  cursor = {};
  auto again = rotation_->Step("k2", cursor, 100, batch_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->resealed, 0u) << "a second walk finds nothing to do";
  EXPECT_TRUE(again->done);
}

}  // namespace
}  // namespace tessera::core
