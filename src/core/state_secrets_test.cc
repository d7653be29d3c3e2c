// The state's secrets and sealed values: where a secret's value goes (only the desired state of
// the node that runs its workload), what the store holds (sealed values only), what ends with
// the work, what a restart opens, and a rotation's walk over every sealed record.
#include <gtest/gtest.h>

#include "common/envelope.h"
#include "common/text.h"
#include "core/core.h"
#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class StateSecretsTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    StateOptions o;
    o.sealer = &sealer_;
    MakeState(o);
    ASSERT_TRUE(JoinNode("n1", TestInventory(2, "H100-80GB", "a"), agent_).ok());
    ASSERT_TRUE(JoinNode("n2", TestInventory(2, "H100-80GB", "b"), agent_).ok());
  }

  Instance Create(const Env& env, int gpus = 1) {
    CreateInstanceRequest r = TestH100(gpus);
    r.env = env;
    auto made = CreateInRound(r);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? *made : Instance{};
  }

  // What node `node`'s agent is told of instance `id`; none when not told.
  std::optional<DesiredWorkload> Told(const std::string& node, const std::string& id) {
    return core::Told(state_->agent_hub().DesiredState(node), id);
  }

  void Restart() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
    state_ = NewState();
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
  }

  // Commits what is pending and restores the store into a new state whose keyring is `sealer`
  // (none when null); the restore's status, the state in `out` when given.
  Status RestoreWith(Sealer* sealer, std::unique_ptr<State>* out = nullptr) {
    if (Status c = store_->Commit(batch_); !c.ok()) return c;
    batch_ = {};
    StateOptions o = options_;
    o.sealer = sealer;
    auto fresh = NewTestState(&clock_, o);
    Status s = RestoreFromStore(*fresh, *store_, batch_).status();
    if (out != nullptr) *out = std::move(fresh);
    return s;
  }

  Sealer sealer_{TestKeyring(TestKeyLine("k1", 'a'))};
};

TEST_F(StateSecretsTest, ASecretsValueGoesOnlyToTheAgentThatRunsItsWorkload) {
  ASSERT_TRUE(state_->PutSecret(Acme(), "hf", "s3cret", "", false, batch_).ok());
  const Instance inst = Create({{"HF", {.secret = "hf"}}, {"MODE", {.value = "fast"}}});
  ASSERT_FALSE(inst.node.empty());
  const std::string other = inst.node == "n1" ? "n2" : "n1";
  const auto told = Told(inst.node, inst.id.str());
  ASSERT_TRUE(told.has_value());
  EXPECT_EQ(told->env.at("HF"), "s3cret");
  EXPECT_EQ(told->env.at("MODE"), "fast");
  EXPECT_FALSE(Carries(state_->agent_hub().DesiredState(other), "s3cret"));
  // The API shows the reference; the store holds no value in the clear.
  const json shown = ToJson(*state_->views().Get(Acme(), inst.id.str()));
  EXPECT_EQ(shown["env"], json({{"HF", {{"secret", "hf"}}}, {"MODE", "fast"}}));
  const std::string stored = DumpJson(ToStoredJson(Get(inst.id.str()), state_->fleet()));
  EXPECT_EQ(stored.find("fast"), std::string::npos) << stored;
  EXPECT_NE(stored.find("enc:v1:k1:"), std::string::npos) << stored;
  // A secret of another tenant of the same name is not this one's.
  auto beta = state_->tenants().Create("beta", 8000, "h-beta", batch_);
  ASSERT_TRUE(beta.ok());
  CreateInstanceRequest r = TestH100(1);
  r.env = {{"HF", {.secret = "hf"}}};
  auto refused = CreateInRound(*beta, r);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("secret 'hf' does not exist"), std::string::npos);
}

TEST_F(StateSecretsTest, ValuesOpenAtARestartAndAKeyringWithoutTheirKeyStopsIt) {
  ASSERT_TRUE(state_->PutSecret(Acme(), "hf", "s3cret", "user-000001", false, batch_).ok());
  const Instance inst = Create({{"MODE", {.value = "fast"}}, {"HF", {.secret = "hf"}}});
  Restart();
  EXPECT_EQ(Told(inst.node, inst.id.str())->env.at("MODE"), "fast");
  EXPECT_EQ(Told(inst.node, inst.id.str())->env.at("HF"), "s3cret");
  EXPECT_EQ(state_->secrets().Find(Acme().id.str(), "hf")->created_by, "user-000001");
  // Another keyring: the restore fails, naming the key.
  Sealer other(TestKeyring(TestKeyLine("k9", 'z')));
  const Status s = RestoreWith(&other);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("key 'k1' is not in the keyring"), std::string::npos) << s.message();
  // No keyring at all says so too.
  const Status none = RestoreWith(nullptr);
  EXPECT_NE(none.message().find("this server has no keyring"), std::string::npos) << none.message();
}

TEST_F(StateSecretsTest, WorkThatEndedKeepsNoValues) {
  const Instance inst = Create({{"MODE", {.value = "fast"}}});
  state_->BeginRound();
  ASSERT_TRUE(state_->instances().Delete(Acme(), inst.id.str(), batch_).ok());
  state_->EndRound(batch_);
  AgentSync s;
  s.agent_id = agent_;
  s.seq = 1;
  AgentReport ended;
  ended.instance = inst.id.str();
  ended.state = InstanceState::kTerminated;
  ended.exit_code = 0;
  s.reports = {ended};
  ASSERT_TRUE(SyncNode(inst.node, s).ok());
  const Instance& after = Get(inst.id.str());
  ASSERT_EQ(after.state, InstanceState::kTerminated);
  EXPECT_TRUE(after.env.at("MODE").dropped);
  EXPECT_TRUE(after.env.at("MODE").value.empty());
  const json stored = ToStoredJson(after, state_->fleet());
  EXPECT_EQ(stored["env"]["MODE"], json({{"dropped", true}})) << stored.dump();
  EXPECT_TRUE(ToJson(after)["env"]["MODE"].is_null());
}

TEST_F(StateSecretsTest, AForcedDeleteStopsWhatWaitsAndARestartWithoutTheSecretFails) {
  ASSERT_TRUE(state_->PutSecret(Acme(), "db", "pw", "", false, batch_).ok());
  const Instance running = Create({{"DB", {.secret = "db"}}});
  AgentReport started;
  started.instance = running.id.str();
  started.started_at = clock_.Now();
  ASSERT_TRUE(SyncRound(*state_, running.node, agent_, 1, {started}, batch_).ok());
  Create({}, 2);
  Create({}, 1);  // The fleet's four H100s are taken.
  const Instance waiting = Create({{"DB", {.secret = "db"}}});
  ASSERT_EQ(waiting.state, InstanceState::kPending);
  const Status refused = state_->DeleteSecret(Acme(), "db", false, batch_);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find(running.id.str()), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find(waiting.id.str()), std::string::npos);
  state_->BeginRound();
  ASSERT_TRUE(state_->DeleteSecret(Acme(), "db", true, batch_).ok());
  state_->EndRound(batch_);
  EXPECT_EQ(Get(waiting.id.str()).state, InstanceState::kTerminated);
  EXPECT_EQ(Get(running.id.str()).state, InstanceState::kRunning) << "what runs keeps running";
}

// A rotation walks every record that holds a sealed value, a bounded step at a time, and moves
// each to the new current key: the store then holds none under the old one.
TEST_F(StateSecretsTest, AStepwiseResealLeavesNoValueUnderTheOldKey) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(state_->PutSecret(Acme(), "s" + std::to_string(i), "v", "", false, batch_).ok());
  }
  for (int i = 0; i < 3; ++i) Create({{"MODE", {.value = "fast"}}});
  GroupRequest g;
  g.size = 1;
  g.min_available = 1;
  g.member = TestH100(1);
  g.member.env = {{"MODE", {.value = "slow"}}};
  ASSERT_TRUE(state_->groups().Create(Acme(), g, batch_).ok());
  alerts::Rule rule;
  rule.name = "hot";
  rule.owner = Acme().id.str();
  rule.notify = {{alerts::Receiver::Kind::kWebhook, "https://hooks.example.com/t0ken", true}};
  ASSERT_TRUE(state_->monitoring().CreateRule(Acme(), rule, batch_).ok());
  EXPECT_EQ(state_->rotation().SealedKeys(),
            (std::map<std::string, int64_t>{{"k1", 5 + 3 + 1 + 1 + 1}}))
      << "secrets, instances, the group's template, its member and the rule";
  sealer_.SetKeyring(TestKeyring(TestKeyLine("k2", 'b') + "\n" + TestKeyLine("k1", 'a')));
  KeyRotation::Cursor cursor;
  size_t steps = 0, resealed = 0;
  while (!cursor.done()) {
    auto step = state_->rotation().Step("k2", cursor, 3, batch_);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    EXPECT_LE(step->examined, 3u);
    resealed += step->resealed;
    ++steps;
  }
  EXPECT_EQ(resealed, 11u);
  EXPECT_GE(steps, 4u) << "bounded steps";
  EXPECT_EQ(state_->rotation().SealedKeys(), (std::map<std::string, int64_t>{{"k2", 11}}));
  // Without k1 the whole store opens.
  Sealer only_new(TestKeyring(TestKeyLine("k2", 'b')));
  std::unique_ptr<State> fresh;
  const Status restored = RestoreWith(&only_new, &fresh);
  ASSERT_TRUE(restored.ok()) << restored.ToString();
  EXPECT_EQ(fresh->secrets().size(), 5u);
}

// Stores written before envelope encryption hold registry passwords and webhook URLs in the
// clear. The first start with a keyring seals those of live work and drops those of ended work;
// a start without a keyring keeps live ones as they were and still drops ended ones.
TEST_F(StateSecretsTest, ValuesStoredInTheClearBeforeEncryptionAreSealedOrDroppedAtTheFirstStart) {
  CreateInstanceRequest live = TestH100(1);
  live.image.ref = "registry.example.com/team/train:1";
  live.image.auth = RegistryAuth{"bot", "pw-live", "", ""};
  auto made = CreateInRound(live);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string live_id = made->id.str();
  GroupRequest g;
  g.size = 1;
  g.min_available = 1;
  g.member = live;
  g.member.image.auth = RegistryAuth{"bot", "pw-group", "", ""};
  ASSERT_TRUE(state_->groups().Create(Acme(), g, batch_).ok());
  g.member.image.auth = RegistryAuth{"bot", "pw-ended", "", ""};
  ASSERT_TRUE(state_->groups().Create(Acme(), g, batch_).ok());
  alerts::Rule rule;
  rule.name = "hot";
  rule.owner = Acme().id.str();
  rule.notify = {{alerts::Receiver::Kind::kWebhook, "https://hooks.example.com/t0ken", true}};
  auto made_rule = state_->monitoring().CreateRule(Acme(), rule, batch_);
  ASSERT_TRUE(made_rule.ok());
  ASSERT_TRUE(store_->Commit(batch_).ok());
  batch_ = {};

  // Rewrite the records as an earlier release stored them: passwords and URLs as plain strings,
  // and the second group ended.
  store::Batch legacy;
  auto instances = store_->LoadInstances("");
  ASSERT_TRUE(instances.ok());
  ASSERT_EQ(instances->size(), 3u) << "the instance and the groups' members";
  for (store::InstanceRecord rec : *instances) {
    json doc = json::parse(rec.doc);
    ASSERT_TRUE(doc["registry_auth"]["password"].is_object()) << doc.dump();
    doc["registry_auth"]["password"] = rec.id == live_id ? "pw-live" : "pw-member";
    rec.doc = doc.dump();
    legacy.instances.push_back(rec);
  }
  auto settings = store_->ListSettings("");
  ASSERT_TRUE(settings.ok());
  int groups = 0;
  for (const auto& [key, value] : *settings) {
    json j = json::parse(value, nullptr, false);
    if (key.starts_with(GroupTable::kPrefix) && j.is_object() && j.contains("template")) {
      const bool ended = ++groups == 2;
      j["template"]["registry_auth"]["password"] = ended ? "pw-ended" : "pw-group";
      if (ended) j["state"] = "deleted";
      legacy.settings.emplace_back(key, j.dump());
    } else if (key == std::string(Monitoring::kRulePrefix) + made_rule->id) {
      j["notify"][0]["webhook"] = "https://hooks.example.com/t0ken";
      legacy.settings.emplace_back(key, j.dump());
    }
  }
  ASSERT_EQ(groups, 2);
  ASSERT_TRUE(store_->Commit(legacy).ok());

  // Without a keyring: the start succeeds, live values as they were, ended ones dropped.
  std::unique_ptr<State> keyless;
  const Status without = RestoreWith(nullptr, &keyless);
  ASSERT_TRUE(without.ok()) << without.ToString();
  EXPECT_EQ(keyless->instances().table().Find(live_id)->image.auth->password, "pw-live");
  batch_ = {};

  // With one: everything live is sealed, nothing ended keeps its password.
  std::unique_ptr<State> fresh;
  const Status with = RestoreWith(&sealer_, &fresh);
  ASSERT_TRUE(with.ok()) << with.ToString();
  ASSERT_TRUE(store_->Commit(batch_).ok());
  batch_ = {};
  std::string all;
  auto now = store_->LoadInstances("");
  ASSERT_TRUE(now.ok());
  for (const store::InstanceRecord& rec : *now) all += rec.doc;
  auto after = store_->ListSettings("");
  ASSERT_TRUE(after.ok());
  for (const auto& [key, value] : *after) all += value;
  for (const char* plain :
       {"pw-live", "pw-member", "pw-group", "pw-ended", "hooks.example.com/t0ken"}) {
    EXPECT_EQ(all.find(plain), std::string::npos) << plain << " is still stored in the clear";
  }
  EXPECT_EQ(fresh->instances().table().Find(live_id)->image.auth->password, "pw-live");
  EXPECT_EQ(fresh->rotation().SealedKeys(), (std::map<std::string, int64_t>{{"k1", 5}}))
      << "the instance, the two members, the live group's template and the rule";
}

}  // namespace
}  // namespace tessera::core
