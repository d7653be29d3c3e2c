// Declarative stacks end to end (docs/stacks.md): `tessera plan`, `apply` and `destroy` on YAML
// files against a real server with its simulated agents. A stack converges and then plans
// nothing; changes update in place, replace or delete exactly what they should; drift made
// through the API shows; a stale plan is refused; destroy leaves what the stack did not make;
// bad files are refused at their line before anything changes.
#include <fmt/format.h>

#include <csignal>
#include <regex>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using testing::RunTessera;

class StacksTest : public ServerTest {
 protected:
  // Two nodes of two H100s: room for a replacement beside what it replaces and a reservation.
  void SetUp() override {
    fleet_path_ =
        dir_.Write("fleet.json", std::regex_replace(std::string(kSmallFleet),
                                                    std::regex(R"("count": 1, "gpu_model": "H100)"),
                                                    R"("count": 2, "gpu_model": "H100)"));
    StartServer();
    token_ = NewTenant("acme", 8);
  }

  testing::CommandResult Cli(std::vector<std::string> args, const std::string& stdin_text = "") {
    args.insert(args.end(), {"--url", server_->url(), "--token", token_});
    return RunTessera(args, stdin_text);
  }
  // Writes the stack file `name` and returns its path.
  std::string File(const std::string& name, const std::string& yaml) {
    return dir_.Write(name, yaml);
  }
  json Instance(const std::string& id) { return Get("/v1/instances/" + id, token_).body; }
  // The stack's objects by "kind/name": their ids.
  std::map<std::string, std::string> Owned(const std::string& stack) {
    std::map<std::string, std::string> out;
    auto got = Get("/v1/stacks/" + stack, token_);
    if (got.status != 200) ADD_FAILURE() << got.raw;
    for (const json& o : got.body["objects"]) {
      out[o.value("kind", "") + "/" + o.value("name", "")] = o.value("id", "");
    }
    return out;
  }

  std::string token_;
};

// A group of two shares, an instance and one that runs beside it (a reference), a reservation,
// an alert rule and a budget.
constexpr const char* kStack = R"(variables:
  team: ml
  cpus: 4
---
kind: instance
name: trainer
billing: on_demand
gpu_model: H100-80GB
gpus: 1
vcpus: ${cpus}
memory_mib: 16384
command: sleep 600
labels: {team: "${team}"}
---
kind: instance
name: sidecar
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: echo beside ${ref:instance/trainer.node}; sleep 600
labels: {beside: "${ref:instance/trainer.id}"}
---
kind: group
name: workers
size: 2
template: {billing: on_demand, gpu_model: L40S-48GB, milli_gpu: 250, vcpus: 2, memory_mib: 4096,
           command: "sleep 600"}
---
kind: reservation
name: base
instance_type: gpu.1xh100
count: 1
term: 1y
---
kind: alert_rule
name: gpu_hot
metric: DCGM_FI_DEV_GPU_TEMP
op: ">"
threshold: 85
---
kind: budget
name: monthly
monthly_usd: "20000"
)";

TEST_F(StacksTest, AStackConvergesAndASecondApplyPlansNothing) {
  const std::string file = File("train.yaml", kStack);
  auto plan = Cli({"plan", "-f", file});
  EXPECT_EQ(plan.exit_code, 2) << plan.out << plan.err;  // Changes.
  EXPECT_TRUE(std::regex_search(plan.out, std::regex(R"(\+ +instance/trainer +- +create)")))
      << plan.out;
  EXPECT_NE(plan.out.find("known after apply: ${ref:instance/trainer.node}"), std::string::npos)
      << plan.out;
  EXPECT_NE(plan.out.find("Plan: 6 to create, 0 to update, 0 to replace, 0 to delete"),
            std::string::npos)
      << plan.out;
  EXPECT_TRUE(Get("/v1/stacks/train", token_).status == 404) << "a plan changes nothing";

  // Asked, and refused unless the answer is yes.
  auto cancelled = Cli({"apply", "-f", file}, "no\n");
  EXPECT_EQ(cancelled.exit_code, 1);
  EXPECT_NE(cancelled.err.find("apply cancelled; nothing changed"), std::string::npos);
  EXPECT_EQ(Get("/v1/instances", token_).body["instances"].size(), 0u);

  auto apply = Cli({"apply", "-f", file}, "yes\n");
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  EXPECT_NE(apply.out.find("Applied: stack 'train' is at serial 1."), std::string::npos)
      << apply.out;
  const auto owned = Owned("train");
  ASSERT_EQ(owned.size(), 6u);
  const json trainer = Instance(owned.at("instance/trainer"));
  EXPECT_EQ(trainer["name"], "trainer");
  EXPECT_EQ(trainer["labels"]["team"], "ml");
  // Each object names the stack that owns it, in its own answers and in lists.
  EXPECT_EQ(trainer["stack"], "train");
  EXPECT_EQ(Get("/v1/groups", token_).body["groups"][0]["stack"], "train");
  for (const json& i : Get("/v1/instances", token_).body["instances"]) {
    EXPECT_EQ(i["stack"], "train") << i.dump();
  }
  // The reference took the trainer's outputs, made in the same apply.
  const json sidecar = Instance(owned.at("instance/sidecar"));
  EXPECT_EQ(sidecar["command"],
            "echo beside " + trainer["node"].get<std::string>() + "; sleep 600");
  EXPECT_EQ(sidecar["labels"]["beside"], trainer["id"]);
  EXPECT_EQ(Get("/v1/groups/" + owned.at("group/workers"), token_).body["size"], 2);
  EXPECT_EQ(Get("/v1/reservations/" + owned.at("reservation/base"), token_).body["count"], 1);
  EXPECT_EQ(Get("/v1/alert-rules/" + owned.at("alert_rule/gpu_hot"), token_).body["threshold"],
            85.0);
  EXPECT_EQ(Get("/v1/budgets", token_).body["budgets"][0]["monthly_usd"], "20000.00");

  // Converged: nothing to do, exit 0, and an apply asks nothing.
  auto again = Cli({"plan", "-f", file});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("No changes"), std::string::npos) << again.out;
  auto reapply = Cli({"apply", "-f", file});
  EXPECT_EQ(reapply.exit_code, 0) << reapply.err;
  EXPECT_EQ(Get("/v1/stacks/train", token_).body["serial"], 1);
  EXPECT_EQ(Owned("train"), owned);

  // The record survives a restart of the server, and the plan still reads nothing to do.
  server_->Stop(SIGTERM);
  StartServer();
  EXPECT_EQ(Owned("train"), owned);
  auto restarted = Cli({"plan", "-f", file});
  EXPECT_EQ(restarted.exit_code == 0 || restarted.exit_code == 2, true) << restarted.err;
  for (const char* kept :
       {"group/workers", "reservation/base", "alert_rule/gpu_hot", "budget/monthly"}) {
    EXPECT_TRUE(std::regex_search(restarted.out,
                                  std::regex(std::string(kept) + " +[a-z]+-[0-9]+ +no change")))
        << kept << "\n"
        << restarted.out;
  }
}

TEST_F(StacksTest, ChangesUpdateInPlaceReplaceOrDeleteAsTheyMust) {
  const std::string file = File("train.yaml", kStack);
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
  const auto before = Owned("train");

  // A label updates in place; the shape replaces; the rule, removed, is deleted; a group's
  // size updates in place.
  std::string changed = std::regex_replace(kStack, std::regex("team: ml"), "team: research");
  changed = std::regex_replace(changed, std::regex("size: 2"), "size: 3");
  changed = changed.substr(0, changed.find("---\nkind: alert_rule")) +
            changed.substr(changed.find("---\nkind: budget"));
  const std::string file2 = File("v2.yaml", changed);
  auto plan = Cli({"plan", "-f", file2, "--stack", "train", "--var", "cpus=8"});
  EXPECT_EQ(plan.exit_code, 2) << plan.err;
  EXPECT_TRUE(std::regex_search(
      plan.out, std::regex(R"(-/\+ +instance/trainer +inst-\d+ +replace \('vcpus')")))
      << plan.out;
  EXPECT_TRUE(
      std::regex_search(plan.out, std::regex(R"(~ +group/workers .*update in place: size)")))
      << plan.out;
  // Field by field, from what was applied to what the file says.
  EXPECT_NE(plan.out.find("~ group/workers.size: 2 -> 3"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find(R"(-/+ instance/trainer.labels: {"team":"ml"} -> {"team":"research"})"),
            std::string::npos)
      << plan.out;
  EXPECT_TRUE(std::regex_search(plan.out, std::regex(R"(- +alert_rule/gpu_hot +rule-\d+ +delete)")))
      << plan.out;
  // The sidecar's reference to the replaced trainer is not known until it is made.
  EXPECT_TRUE(std::regex_search(plan.out, std::regex(R"(instance/sidecar .*known after apply)")))
      << plan.out;

  auto apply = Cli({"apply", "--yes", "-f", file2, "--stack", "train", "--var", "cpus=8"});
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  const auto after = Owned("train");
  EXPECT_NE(after.at("instance/trainer"), before.at("instance/trainer"));
  const json trainer = Instance(after.at("instance/trainer"));
  EXPECT_EQ(trainer["shape"]["vcpus"], 8);
  EXPECT_EQ(trainer["labels"]["team"], "research");
  EXPECT_EQ(Instance(before.at("instance/trainer"))["state"] == "running", false);
  EXPECT_EQ(after.at("group/workers"), before.at("group/workers"));
  EXPECT_EQ(Get("/v1/groups/" + after.at("group/workers"), token_).body["size"], 3);
  EXPECT_FALSE(after.contains("alert_rule/gpu_hot"));
  EXPECT_EQ(Get("/v1/alert-rules/" + before.at("alert_rule/gpu_hot"), token_).status, 404);
  // The sidecar follows the new trainer: its label changed in place, its command replaced it.
  const json sidecar = Instance(after.at("instance/sidecar"));
  EXPECT_EQ(sidecar["labels"]["beside"], trainer["id"]);

  // Only a label: the same instance, relabelled.
  const std::string v3 = std::regex_replace(changed, std::regex("team: research"), "team: infra");
  ASSERT_EQ(
      Cli({"apply", "--yes", "-f", File("v3.yaml", v3), "--stack", "train", "--var", "cpus=8"})
          .exit_code,
      0);
  EXPECT_EQ(Owned("train").at("instance/trainer"), after.at("instance/trainer"));
  EXPECT_EQ(Instance(after.at("instance/trainer"))["labels"]["team"], "infra");
}

TEST_F(StacksTest, DriftShowsAndTheAutoscalersSizeIsNeverFought) {
  const std::string file = File("svc.yaml", R"(kind: instance
name: web
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: sleep 600
labels: {tier: web}
---
kind: group
name: queue
size: 1
autoscale: {min: 1, max: 3, metric: pending, target: 1}
template: {billing: on_demand, gpu_model: L40S-48GB, milli_gpu: 100, vcpus: 1, memory_mib: 2048,
           command: "sleep 600"}
)");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
  const auto owned = Owned("svc");

  // Someone relabels the instance through the API: the plan shows it, and the apply sets it back.
  auto patched =
      Patch("/v1/instances/" + owned.at("instance/web"), token_, {{"labels", {{"tier", "batch"}}}});
  ASSERT_EQ(patched.status, 200) << patched.raw;
  auto plan = Cli({"plan", "-f", file});
  EXPECT_EQ(plan.exit_code, 2) << plan.err;
  EXPECT_NE(plan.out.find("Changed outside the stack"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find(R"(instance/web: labels was {"tier":"web"}, is now {"tier":"batch"})"),
            std::string::npos)
      << plan.out;
  auto reverted = Cli({"apply", "--yes", "-f", file});
  ASSERT_EQ(reverted.exit_code, 0) << reverted.out << reverted.err;
  EXPECT_EQ(Instance(owned.at("instance/web"))["labels"]["tier"], "web");

  // The autoscaler grows the group on its backlog; applies never take it back to `size`.
  const json backlog = {{"pending", 3}};
  ASSERT_EQ(
      Call("PUT", "/v1/groups/" + owned.at("group/queue") + "/backlog", token_, &backlog).status,
      200);
  ASSERT_TRUE(WaitFor(
      [&] { return Get("/v1/groups/" + owned.at("group/queue"), token_).body["size"] == 3; },
      std::chrono::seconds(20)));
  for (int i = 0; i < 3; ++i) {
    auto again = Cli({"plan", "-f", file});
    EXPECT_EQ(again.exit_code, 0) << again.out;
    ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
    EXPECT_EQ(Get("/v1/groups/" + owned.at("group/queue"), token_).body["size"], 3);
  }
}

TEST_F(StacksTest, AStalePlanIsRefusedAndASavedOneAppliesExactly) {
  const std::string file = File("one.yaml", R"(kind: instance
name: solo
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: sleep 600
labels: {v: "1"}
)");
  const std::string saved = dir_.File("one.plan");
  auto plan = Cli({"plan", "-f", file, "--plan-out", saved});
  ASSERT_EQ(plan.exit_code, 2) << plan.err;
  auto apply = Cli({"apply", "--plan", saved});
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  const std::string id = Owned("one").at("instance/solo");

  // Planned against one state, applied against another: refused, nothing changed.
  const std::string v2 =
      File("one2.yaml", std::regex_replace(ReadFile(file), std::regex("v: \"1\""), "v: \"2\""));
  ASSERT_EQ(Cli({"plan", "-f", v2, "--stack", "one", "--plan-out", saved}).exit_code, 2);
  ASSERT_EQ(Patch("/v1/instances/" + id, token_, {{"labels", {{"v", "3"}}}}).status, 200);
  auto stale = Cli({"apply", "--plan", saved});
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_NE(stale.err.find("changed since its plan was made"), std::string::npos) << stale.err;
  EXPECT_EQ(Instance(id)["labels"]["v"], "3");
}

TEST_F(StacksTest, DestroyLeavesNothingItMadeAndEverythingItDidNot) {
  json mine = H100(1, "on_demand");
  mine["name"] = "handmade";
  mine["command"] = "sleep 600";
  auto handmade = Post("/v1/instances", token_, mine);
  ASSERT_EQ(handmade.status, 201) << handmade.raw;

  // A name the stack did not make is a conflict, named, until adopted.
  const std::string file = File("adopt.yaml", R"(kind: instance
name: handmade
billing: on_demand
gpu_model: H100-80GB
gpus: 1
vcpus: 4
memory_mib: 16384
command: sleep 600
labels: {owner: stack}
---
kind: alert_rule
name: hot
metric: DCGM_FI_DEV_GPU_TEMP
op: ">"
threshold: 80
)");
  auto conflict = Cli({"plan", "-f", file});
  EXPECT_EQ(conflict.exit_code, 1);
  EXPECT_NE(
      conflict.err.find("instance 'handmade' exists (" + handmade.body["id"].get<std::string>() +
                        ") and this stack did not create it"),
      std::string::npos)
      << conflict.err;
  EXPECT_NE(conflict.err.find("adopt.yaml:1:1:"), std::string::npos) << conflict.err;

  const std::string other = File("other.yaml", R"(kind: instance
name: kept
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: sleep 600
)");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", other}).exit_code, 0);
  auto adopt = Cli({"apply", "--yes", "--adopt", "-f", file});
  ASSERT_EQ(adopt.exit_code, 0) << adopt.out << adopt.err;
  EXPECT_EQ(Owned("adopt").at("instance/handmade"), handmade.body["id"]);
  EXPECT_EQ(Instance(handmade.body["id"])["labels"]["owner"], "stack");

  json outsider = H100(1, "on_demand");
  outsider["name"] = "outsider";
  outsider["command"] = "sleep 600";
  auto out = Post("/v1/instances", token_, outsider);
  ASSERT_EQ(out.status, 201);
  auto destroy = Cli({"destroy", "-f", file}, "yes\n");
  ASSERT_EQ(destroy.exit_code, 0) << destroy.out << destroy.err;
  EXPECT_EQ(Get("/v1/stacks/adopt", token_).status, 404);
  EXPECT_EQ(AwaitState(token_, handmade.body["id"], "terminated"), "terminated");
  EXPECT_EQ(Get("/v1/alert-rules", token_).body["rules"].size(), 0u);
  // What the stack did not make, and another stack's, keep running.
  EXPECT_EQ(AwaitState(token_, out.body["id"], "running"), "running");
  EXPECT_FALSE(Instance(out.body["id"]).contains("stack"));
  EXPECT_EQ(AwaitState(token_, Owned("other").at("instance/kept"), "running"), "running");
  // Applied again at once, while what it destroyed may still be stopping: made anew, no conflict.
  const std::string kept = Owned("other").at("instance/kept");
  ASSERT_EQ(Cli({"destroy", "--yes", "-f", other}).exit_code, 0);
  auto again = Cli({"apply", "--yes", "-f", other});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(Owned("other").at("instance/kept"), kept);
}

TEST_F(StacksTest, BadStacksAreRefusedAtTheirLineBeforeAnythingChanges) {
  struct Case {
    std::string yaml, where, says;
  };
  const std::vector<Case> cases = {
      {"kind: instance\nname: a\nbilling: on_demand\n  bad: [\n",
       "bad.yaml:4:", "illegal map value"},
      {"kind: instance\nname: a\nbilling: on_demand\ngpu_model: H100-80GB\ngpus: 1\n"
       "vcpus: many\nmemory_mib: 1024\n",
       "bad.yaml:6:1:", "field 'vcpus'"},
      {"kind: instance\nname: ok\nbilling: on_demand\ninstance_type: gpu.1xh100\n---\n"
       "kind: group\nname: g\nsize: 1\ntemplate:\n  billing: on_demand\n  gpu_model: H100-80GB\n"
       "  gpus: 99\n  vcpus: 1\n  memory_mib: 1024\n",
       "bad.yaml:12:3:", "template.gpus"},
      {"kind: volcano\nname: a\n", "bad.yaml:1:1:", "'volcano' is not instance, group"},
      {"kind: instance\nname: a\nbilling: on_demand\ninstance_type: gpu.1xh100\n---\n"
       "kind: instance\nname: a\nbilling: spot\ninstance_type: gpu.1xh100\n",
       "bad.yaml:7:1:", "instance 'a' is given twice"},
      {"kind: instance\nname: a\nbilling: on_demand\ninstance_type: gpu.1xh100\n"
       "command: ${ref:instance/b.id}\n---\nkind: instance\nname: b\nbilling: on_demand\n"
       "instance_type: gpu.1xh100\ncommand: ${ref:instance/a.id}\n",
       "bad.yaml:", "a reference cycle: instance/a -> instance/b -> instance/a"},
      {"kind: instance\nname: a\nbilling: on_demand\ninstance_type: gpu.1xh100\n"
       "command: echo ${HOME}\n",
       "bad.yaml:5:10:", "variable 'HOME' is not defined"},
      {"kind: instance\nname: a\nbilling: on_demand\ninstance_type: gpu.1xh100\n"
       "lifecycle: {prevent_destory: true}\n",
       "bad.yaml:5:", "lifecycle.prevent_destory"},
  };
  for (const Case& c : cases) {
    const std::string file = File("bad.yaml", c.yaml);
    auto plan = Cli({"plan", "-f", file});
    EXPECT_EQ(plan.exit_code, 1) << c.yaml;
    EXPECT_NE(plan.err.find(c.where), std::string::npos) << c.yaml << "\n" << plan.err;
    EXPECT_NE(plan.err.find(c.says), std::string::npos) << c.yaml << "\n" << plan.err;
    auto apply = Cli({"apply", "--yes", "-f", file});
    EXPECT_EQ(apply.exit_code, 1) << c.yaml;
  }
  // Nothing was made by any of them, not even the valid object beside a bad one.
  EXPECT_EQ(Get("/v1/instances", token_).body["instances"].size(), 0u);
  EXPECT_EQ(Get("/v1/stacks", token_).body["stacks"].size(), 0u);
  // A literal ${ is written $${.
  const std::string shell = File("shell.yaml",
                                 "kind: instance\nname: a\nbilling: on_demand\n"
                                 "instance_type: gpu.1xh100\ncommand: echo $${HOME}\n");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", shell}).exit_code, 0);
  EXPECT_EQ(Instance(Owned("shell").at("instance/a"))["command"], "echo ${HOME}");
}

TEST_F(StacksTest, AnApplyThatFailsMidwaySaysWhatWasDoneAndTheNextContinues) {
  ASSERT_EQ(Patch("/v1/tenants/tenant-000001", kAdminToken, {{"quota", {{"gpus", 1}}}}).status,
            200);
  const std::string file = File("two.yaml", R"(kind: instance
name: first
billing: on_demand
instance_type: gpu.1xh100
command: sleep 600
---
kind: instance
name: second
billing: on_demand
instance_type: gpu.1xh100
command: sleep 600
---
kind: instance
name: third
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: echo ${ref:instance/second.id}
)");
  auto apply = Cli({"apply", "--yes", "-f", file});
  EXPECT_EQ(apply.exit_code, 1);
  EXPECT_NE(apply.out.find("+ instance/first: create inst-"), std::string::npos) << apply.out;
  EXPECT_NE(apply.err.find("failed: instance/second (create)"), std::string::npos) << apply.err;
  EXPECT_NE(apply.err.find("quota"), std::string::npos) << apply.err;
  EXPECT_NE(apply.err.find("not applied: instance/third: it needs instance/second"),
            std::string::npos)
      << apply.err;
  EXPECT_NE(apply.err.find("apply again to continue"), std::string::npos) << apply.err;
  const auto first = Owned("two");
  EXPECT_EQ(first.size(), 1u);

  ASSERT_EQ(Patch("/v1/tenants/tenant-000001", kAdminToken, {{"quota", {{"gpus", 3}}}}).status,
            200);
  auto again = Cli({"apply", "--yes", "-f", file});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(again.out.find("instance/first: create"), std::string::npos)
      << "the first is planned as no change, not made again\n"
      << again.out;
  const auto all = Owned("two");
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(all.at("instance/first"), first.at("instance/first"));
}

TEST_F(StacksTest, PreventDestroyRefusesAPlanThatWouldDeleteIt) {
  const std::string file = File("keep.yaml", R"(kind: instance
name: db
billing: on_demand
instance_type: gpu.1xh100
command: sleep 600
lifecycle: {prevent_destroy: true}
)");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
  const std::string id = Owned("keep").at("instance/db");
  const std::string bigger =
      File("keep2.yaml", std::regex_replace(ReadFile(file), std::regex("on_demand"), "spot"));
  auto replace = Cli({"plan", "-f", bigger, "--stack", "keep"});
  EXPECT_EQ(replace.exit_code, 1);
  EXPECT_NE(
      replace.err.find("keep2.yaml:3:1: objects[0] (instance 'db'): lifecycle.prevent_destroy "
                       "is set, and field 'billing' changed"),
      std::string::npos)
      << replace.err;
  auto destroy = Cli({"destroy", "--yes", "--stack", "keep"});
  EXPECT_EQ(destroy.exit_code, 1);
  EXPECT_NE(destroy.err.find("has lifecycle.prevent_destroy"), std::string::npos) << destroy.err;
  EXPECT_EQ(AwaitState(token_, id, "running"), "running");
}

// A member may deploy instances, but a reservation or a budget commits the tenant's money: making,
// removing or destroying one through a stack needs an owner, as their own routes do.
TEST_F(StacksTest, MoneyNeedsAnOwnerThroughAStackToo) {
  ASSERT_EQ(
      Post("/v1/tenants/tenant-000001/users", token_, {{"name", "mia"}, {"role", "member"}}).status,
      201);
  auto minted = Post("/v1/tenants/tenant-000001/users/mia/tokens", token_, {{"name", "t"}});
  ASSERT_EQ(minted.status, 201) << minted.raw;
  const std::string member = minted.body.value("token", "");
  const std::string file = File("money.yaml", R"(kind: budget
name: monthly
monthly_usd: "100"
---
kind: instance
name: job
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: sleep 600
)");
  auto as_member = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--url", server_->url(), "--token", member});
    return RunTessera(args);
  };
  auto refused = as_member({"apply", "--yes", "-f", file});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("money.yaml:1:1: objects[0] (budget 'monthly'): a budget commits the "
                             "tenant's money and needs the owner role; this token's is member"),
            std::string::npos)
      << refused.err;
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
  // The member cannot take the budget away by leaving it out, nor by destroying the stack.
  const std::string without =
      File("money2.yaml", ReadFile(file).substr(ReadFile(file).find("---")));
  auto removal = as_member({"apply", "--yes", "-f", without, "--stack", "money"});
  EXPECT_EQ(removal.exit_code, 1);
  EXPECT_NE(removal.err.find("needs the owner role"), std::string::npos) << removal.err;
  auto destroy = as_member({"destroy", "--yes", "--stack", "money"});
  EXPECT_EQ(destroy.exit_code, 1);
  EXPECT_NE(destroy.err.find("needs the owner role"), std::string::npos) << destroy.err;
  EXPECT_EQ(Get("/v1/budgets", token_).body["budgets"].size(), 1u);
}

// Secrets in a stack never come back: the record keeps digests of env literals, and the first
// plan of a new stack with one applies exactly (its digest does not depend on a fresh key).
TEST_F(StacksTest, SecretsAreKeptOnlyAsDigestsAndStillPlanExactly) {
  const std::string file = File("sec.yaml", R"(kind: instance
name: svc
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: sleep 600
env: {API_TOKEN: hunter2-very-secret}
)");
  const std::string saved = dir_.File("sec.plan");
  ASSERT_EQ(Cli({"plan", "-f", file, "--plan-out", saved}).exit_code, 2);
  auto apply = Cli({"apply", "--plan", saved});
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  auto state = Get("/v1/stacks/sec", token_);
  ASSERT_EQ(state.status, 200);
  EXPECT_EQ(state.raw.find("hunter2"), std::string::npos) << state.raw;
  EXPECT_NE(state.raw.find("hmac:"), std::string::npos) << state.raw;
  EXPECT_EQ(Cli({"plan", "-f", file}).exit_code, 0);
  // A changed value is seen through its digest, and replaces the instance.
  const std::string v2 =
      File("sec2.yaml", std::regex_replace(ReadFile(file), std::regex("hunter2"), "hunter3"));
  auto plan = Cli({"plan", "-f", v2, "--stack", "sec"});
  EXPECT_EQ(plan.exit_code, 2);
  EXPECT_NE(plan.out.find("replace ('env.API_TOKEN' forces it)"), std::string::npos) << plan.out;
  EXPECT_EQ(plan.out.find("hunter"), std::string::npos) << plan.out;
}

// A group is replaced by a new one made first: the old one serves until every new member runs.
TEST_F(StacksTest, AGroupIsReplacedBeforeItIsDestroyed) {
  const std::string file = File("web.yaml", R"(kind: group
name: web
size: 2
template: {billing: on_demand, gpu_model: L40S-48GB, milli_gpu: 250, vcpus: 2, memory_mib: 4096,
           command: "sleep 600"}
)");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
  const std::string old = Owned("web").at("group/web");
  ASSERT_TRUE(WaitFor([&] { return Get("/v1/groups/" + old, token_).body["placed"] == 2; },
                      std::chrono::seconds(10)));
  const std::string v2 =
      File("web2.yaml", std::regex_replace(ReadFile(file), std::regex("sleep 600"), "sleep 900"));
  auto apply = Cli({"apply", "--yes", "-f", v2, "--stack", "web"});
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  EXPECT_NE(apply.out.find("replace ('template.command' forces it)"), std::string::npos)
      << apply.out;
  const std::string replacement = Owned("web").at("group/web");
  ASSERT_NE(replacement, old);
  // The old group is still there right after the apply, and goes once the new one runs.
  EXPECT_NE(Get("/v1/groups/" + old, token_).body.value("state", ""), "deleted");
  ASSERT_TRUE(
      WaitFor([&] { return Get("/v1/groups/" + old, token_).body.value("state", "") == "deleted"; },
              std::chrono::seconds(20)));
  const json now = Get("/v1/groups/" + replacement, token_).body;
  EXPECT_EQ(now["state"], "running");
  for (const json& m : now["members"]) EXPECT_EQ(m["state"], "running") << now.dump();
  EXPECT_EQ(Cli({"plan", "-f", v2, "--stack", "web"}).exit_code, 0);
}

// A replacement that cannot run yet leaves the group it replaces serving, recorded as retiring
// on it; destroying the stack then deletes both.
TEST_F(StacksTest, AReplacementThatCannotRunLeavesTheOldGroupServingUntilDestroyed) {
  const std::string file = File("svc.yaml", R"(kind: group
name: svc
size: 2
template: {billing: on_demand, gpu_model: L40S-48GB, milli_gpu: 250, vcpus: 2, memory_mib: 4096,
           command: "sleep 600"}
)");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 0);
  const std::string old = Owned("svc").at("group/svc");
  ASSERT_TRUE(WaitFor([&] { return Get("/v1/groups/" + old, token_).body["placed"] == 2; },
                      std::chrono::seconds(10)));
  // Two 600-milli shares do not fit the one L40S beside the old members' 500.
  const std::string bigger =
      File("svc2.yaml",
           std::regex_replace(ReadFile(file), std::regex("milli_gpu: 250"), "milli_gpu: 600"));
  ASSERT_EQ(Cli({"apply", "--yes", "-f", bigger, "--stack", "svc"}).exit_code, 0);
  const std::string replacement = Owned("svc").at("group/svc");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(Get("/v1/groups/" + old, token_).body["state"], "running");
  const json state = Get("/v1/stacks/svc", token_).body;
  EXPECT_EQ(state["objects"][0]["retiring"], json::array({old})) << state.dump();
  // The group it replaces is still the stack's: it says so, and no other stack may adopt it.
  EXPECT_EQ(Get("/v1/groups/" + old, token_).body["stack"], "svc");

  auto destroy = Cli({"destroy", "--yes", "--stack", "svc"});
  ASSERT_EQ(destroy.exit_code, 0) << destroy.out << destroy.err;
  EXPECT_EQ(Get("/v1/groups/" + old, token_).body["state"], "deleted");
  EXPECT_EQ(Get("/v1/groups/" + replacement, token_).body["state"], "deleted");
}

// A tenant has one budget, and one stack holds it.
TEST_F(StacksTest, OneStackHoldsTheTenantsBudget) {
  const std::string a = File("a.yaml", "kind: budget\nname: monthly\nmonthly_usd: \"100\"\n");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", a}).exit_code, 0);
  // Gone outside the stack, it is still stack a's to make again, not stack b's to take.
  ASSERT_EQ(Call("DELETE", "/v1/tenants/tenant-000001/budget", token_).status, 200);
  const std::string b = File("b.yaml", "kind: budget\nname: cap\nmonthly_usd: \"50\"\n");
  auto taken = Cli({"apply", "--yes", "-f", b});
  EXPECT_EQ(taken.exit_code, 1);
  EXPECT_NE(taken.err.find("the tenant's budget belongs to stack 'a'"), std::string::npos)
      << taken.err;
  auto again = Cli({"apply", "--yes", "-f", a});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(Get("/v1/budgets", token_).body["budgets"][0]["monthly_usd"], "100.00");
}

// Hostile references and adoption of an object unlike the file are refused or planned honestly,
// and the server serves on.
TEST_F(StacksTest, HostileReferencesAndMismatchedAdoptionsAreHandled) {
  const std::string file = File("evil.yaml", R"(kind: group
name: w
size: 1
template: {billing: on_demand, gpu_model: L40S-48GB, milli_gpu: 250, vcpus: 2, memory_mib: 4096,
           command: "sleep 600"}
---
kind: instance
name: x
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: "echo ${ref:group/w.members.99999999999999999999999.instance}"
)");
  ASSERT_EQ(Cli({"apply", "--yes", "-f", file}).exit_code, 1);
  auto again = Cli({"apply", "--yes", "-f", file});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("has no value"), std::string::npos) << again.err;
  EXPECT_EQ(Get("/healthz", "").status, 200);

  json handmade = H100(1, "on_demand");
  handmade["name"] = "big";
  handmade["command"] = "sleep 600";
  ASSERT_EQ(Post("/v1/instances", token_, handmade).status, 201);
  const std::string adopt = File("big.yaml", R"(kind: instance
name: big
billing: spot
gpu_model: H100-80GB
gpus: 1
vcpus: 4
memory_mib: 16384
command: sleep 600
)");
  auto plan = Cli({"plan", "--adopt", "-f", adopt});
  EXPECT_EQ(plan.exit_code, 2);
  EXPECT_NE(plan.out.find("replace ('billing' forces it)"), std::string::npos) << plan.out;
}

// A volume is made before the instances that mount it, wherever the file puts it; it is never
// replaced (that would lose its data); destroy deletes it after them.
TEST_F(StacksTest, VolumesComeBeforeWhatMountsThemAndAreNeverReplaced) {
  const std::string file = File("data.yaml", R"(kind: instance
name: job
billing: on_demand
gpu_model: L40S-48GB
milli_gpu: 250
vcpus: 2
memory_mib: 4096
command: sleep 600
volumes: [{name: ckpt, path: /ckpt}]
---
kind: volume
name: ckpt
size_gib: 1
)");
  auto apply = Cli({"apply", "--yes", "-f", file});
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  EXPECT_LT(apply.out.find("+ volume/ckpt: create"), apply.out.find("+ instance/job: create"))
      << apply.out;
  const auto owned = Owned("data");
  EXPECT_EQ(Get("/v1/volumes/ckpt", token_).body["id"], owned.at("volume/ckpt"));
  EXPECT_EQ(Cli({"plan", "-f", file}).exit_code == 1, false);

  const std::string bigger = File(
      "data2.yaml", std::regex_replace(ReadFile(file), std::regex("size_gib: 1"), "size_gib: 2"));
  auto plan = Cli({"plan", "-f", bigger, "--stack", "data"});
  EXPECT_EQ(plan.exit_code, 1);
  EXPECT_NE(plan.err.find("data2.yaml:13:1: objects[1] (volume 'ckpt'): field 'size_gib' changed, "
                          "which would replace the volume and lose its data"),
            std::string::npos)
      << plan.err;

  auto destroy = Cli({"destroy", "--yes", "--stack", "data"});
  ASSERT_EQ(destroy.exit_code, 0) << destroy.out << destroy.err;
  EXPECT_EQ(Get("/v1/volumes/ckpt", token_).status, 404);
}

// docs/stacks.md's example is a stack the server accepts: every object passes the API's checks
// at plan time, and it applies.
TEST_F(StacksTest, TheDocumentedExamplePlansAndApplies) {
  const std::string file = testing::SourceDir() + "/docs/examples/train-stack.yaml";
  auto plan = Cli({"plan", "-f", file});
  ASSERT_EQ(plan.exit_code, 2) << plan.out << plan.err;
  EXPECT_NE(plan.out.find("Stack 'train-stack'"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("Plan: 4 to create, 0 to update, 0 to replace, 0 to delete"),
            std::string::npos)
      << plan.out;
  auto apply = Cli({"apply", "--yes", "-f", file});
  ASSERT_EQ(apply.exit_code, 0) << apply.out << apply.err;
  const auto owned = Owned("train-stack");
  const json loaders = Get("/v1/groups/" + owned.at("group/loaders"), token_).body;
  EXPECT_EQ(loaders["template"]["command"],
            "python loader.py --trainer " + owned.at("group/trainer"));
  EXPECT_EQ(loaders["template"]["billing"], "spot");
}

}  // namespace
}  // namespace tessera
