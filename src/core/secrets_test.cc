// The values a workload carries, as TenantSecrets checks, resolves and seals them, alone on a
// fake clock: references checked and named by field, resolved for the agent with Tessera's own
// variables first, literals and registry passwords sealed and opened under their record, and a
// password stored in the clear before envelope encryption dropped or sealed at a restore.
// The state's own tests (state_secrets_test.cc) carry them through instances and groups.
#include "core/secrets.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

class WorkloadValuesTest : public ::testing::Test {
 protected:
  WorkloadValuesTest() : secrets_(&clock_, TestSealer()) {
    EXPECT_TRUE(secrets_.Put("tenant-000001", "hf-token", "hf_abc", "", false, batch_).ok());
  }

  FakeClock clock_;
  TenantSecrets secrets_;
  store::Batch batch_;
};

TEST_F(WorkloadValuesTest, ReferencesAreCheckedByFieldAndResolvedForTheAgent) {
  Env env;
  env["HF_TOKEN"].secret = "hf-token";
  env["MODE"].value = "train";
  ImageSpec image;
  EXPECT_TRUE(secrets_.CheckRefs("tenant-000001", env, image).ok());
  const Status other = secrets_.CheckRefs("tenant-000002", env, image, "template.");
  EXPECT_EQ(other.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other.message(),
            "field 'template.env.HF_TOKEN': secret 'hf-token' does not exist (POST /v1/secrets "
            "makes it)")
      << "another tenant's secret is not this one's";
  image.auth = RegistryAuth{"robot", "", "registry-pass", ""};
  EXPECT_NE(secrets_.CheckRefs("tenant-000001", env, image)
                .message()
                .find("field 'registry_auth.password': secret 'registry-pass'"),
            std::string::npos);
  EXPECT_EQ(secrets_.Missing("tenant-000001", env, image), "registry-pass");
  EXPECT_EQ(TenantSecrets::RefsOf(env, image),
            (std::vector<std::string>{"hf-token", "registry-pass"}));
  ASSERT_TRUE(secrets_.Put("tenant-000001", "registry-pass", "pw", "", false, batch_).ok());
  ImageSpec told_image = image;
  secrets_.ResolvePassword("tenant-000001", told_image);
  EXPECT_EQ(told_image.auth->password, "pw");
  told_image = image;
  told_image.auth->password = "stale";
  secrets_.ResolvePassword("tenant-000002", told_image);
  EXPECT_EQ(told_image.auth->password, "") << "never another tenant's secret";

  std::map<std::string, std::string> told = {{"MODE", "tessera's own"}};
  env["OLD"].dropped = true;
  secrets_.Resolve("tenant-000001", env, told);
  EXPECT_EQ(told,
            (std::map<std::string, std::string>{{"HF_TOKEN", "hf_abc"}, {"MODE", "tessera's own"}}))
      << "Tessera's own variables win, and a dropped literal is not told";
  ASSERT_TRUE(secrets_.Delete("tenant-000001", "hf-token", batch_).ok());
  told.clear();
  secrets_.Resolve("tenant-000001", env, told);
  EXPECT_EQ(told, (std::map<std::string, std::string>{{"MODE", "train"}}))
      << "a secret deleted since is left out";
}

TEST_F(WorkloadValuesTest, ValuesAreSealedUnderTheirRecordAndAPlainPasswordIsMendedAtARestore) {
  Env env;
  env["MODE"].value = "train";
  ImageSpec image;
  image.ref = "registry.local/app:1";
  image.auth = RegistryAuth{"robot", "s3cret", "", ""};
  const std::string record = TenantSecrets::InstanceRecord("inst-000001");
  EXPECT_EQ(record, "instance/inst-000001");
  EXPECT_EQ(TenantSecrets::TemplateRecord("grp-000001"), "group/grp-000001/template");
  ASSERT_TRUE(secrets_.SealValues(record, env, image).ok());
  EXPECT_TRUE(env["MODE"].sealed.starts_with("enc:v1:"));
  EXPECT_TRUE(image.auth->sealed.starts_with("enc:v1:"));

  // As restored: only the sealed forms.
  Env stored = env;
  stored["MODE"].value.clear();
  ImageSpec stored_image = image;
  stored_image.auth->password.clear();
  auto changed = secrets_.OpenValues(record, false, stored, stored_image);
  ASSERT_TRUE(changed.ok()) << changed.status().message();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(stored["MODE"].value, "train");
  EXPECT_EQ(stored_image.auth->password, "s3cret");
  Env elsewhere = env;
  EXPECT_FALSE(
      secrets_.OpenValues(TenantSecrets::InstanceRecord("inst-000002"), false, elsewhere, image)
          .ok())
      << "sealed under one record, opened under no other";

  // A password stored in the clear before envelope encryption.
  ImageSpec plain;
  plain.auth = RegistryAuth{"robot", "s3cret", "", ""};
  Env none;
  changed = secrets_.OpenValues(record, false, none, plain);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed) << "sealed now, to be saved again";
  EXPECT_FALSE(plain.auth->sealed.empty());
  ImageSpec ended;
  ended.auth = RegistryAuth{"robot", "s3cret", "", ""};
  Env ended_env;
  ended_env["MODE"].value = "train";
  changed = secrets_.OpenValues(record, true, ended_env, ended);
  ASSERT_TRUE(changed.ok());
  EXPECT_TRUE(*changed);
  EXPECT_EQ(ended.auth->password, "") << "work that ended keeps no password";
  EXPECT_TRUE(ended_env["MODE"].dropped);
}

}  // namespace
}  // namespace tessera::core
