// End-to-end tests of volumes (docs/volumes.md): a real server, real agents, real workloads
// writing to real file systems on the node.
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "agent_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class VolumesTest : public AgentTest {
 protected:
  // Volumes outlive their agents by design: the test's own are unmounted (lazily, as workloads
  // may still hold them until their lease lapses), so no loop device outlives the test.
  void TearDown() override {
    agents_.clear();
    std::ifstream mounts("/proc/self/mounts");
    std::string device, at, rest;
    std::vector<std::string> mine;
    while (mounts >> device >> at && std::getline(mounts, rest)) {
      if (at.rfind(dir_.path() + "/", 0) == 0) mine.push_back(at);
    }
    for (const std::string& m : mine) umount2(m.c_str(), MNT_DETACH);
  }
  json NewVolume(const json& body, const std::string& token) {
    auto r = Post("/v1/volumes", token, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body;
  }
  json Volume(const std::string& name, const std::string& token) {
    return Get("/v1/volumes/" + name, token).body;
  }
  // Where the volume lives on its node's disk.
  std::string VolumeDir(const std::string& node, const std::string& id) {
    return WorkDir(node) + "/volumes/" + id;
  }
  std::string TenantId(const std::string& token) {
    return Get("/v1/whoami", token).body["tenant"].value("id", "");
  }
  // Whether the node's agent runs each tenant under a uid of its own.
  bool AgentIsolates(const std::string& node) {
    const json nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
    for (const json& n : nodes) {
      if (n.value("id", "") == node) return n.value("isolation", "") == "uid";
    }
    return false;
  }
  std::string Logs(const std::string& id) {
    return Call("GET", "/v1/instances/" + id + "/logs?tail=100", tenant_).raw;
  }
};

// The seeds' spot with automatic restart saves money only when the restarted job finds its
// checkpoint: a spot job counts on a volume, is preempted, restarts on the volume's node and
// carries on from where it was.
TEST_F(VolumesTest, ASpotJobFindsItsCheckpointAfterAPreemptionAndRestart) {
  Join("gpu-01");
  const json vol = NewVolume({{"name", "ckpt"}, {"size_gib", 1}}, tenant_);
  EXPECT_EQ(vol.value("state", ""), "available");
  EXPECT_TRUE(vol["node"].is_null()) << "placed with its first instance";
  json spot = H100(2, "spot");
  spot["volumes"] = json::array({{{"name", "ckpt"}, {"path", "/ckpt"}}});
  // A training loop that checkpoints its step every tenth of a second and resumes from it.
  const std::string id = Create(
      spot,
      "step=$(cat \"$TESSERA_VOLUME_CKPT/step\" 2>/dev/null || echo 0); echo \"resumed at $step\"; "
      "while true; do step=$((step+1)); echo $step > \"$TESSERA_VOLUME_CKPT/step.new\"; "
      "mv \"$TESSERA_VOLUME_CKPT/step.new\" \"$TESSERA_VOLUME_CKPT/step\"; sleep 0.1; done");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  EXPECT_EQ(Volume("ckpt", tenant_).value("node", ""), "gpu-01");
  EXPECT_EQ(Volume("ckpt", tenant_)["attached_to"], json::array({id}));
  const std::string step_file = VolumeDir("gpu-01", vol.value("id", "")) + "/step";
  ASSERT_TRUE(WaitFor([&] { return ReadFile(step_file).size() >= 2; }, 10s)) << Logs(id);
  // Deleting a volume an instance mounts is refused, naming it.
  auto refused = Call("DELETE", "/v1/volumes/ckpt", tenant_);
  EXPECT_EQ(refused.status, 409) << refused.raw;
  EXPECT_NE(refused.raw.find(id), std::string::npos) << refused.raw;

  // On-demand work takes the node: the spot job is preempted and waits to restart.
  const std::string od = Create(H100(2, "on_demand"), "sleep 60");
  ASSERT_TRUE(WaitState(od, "running", 20s)) << Instance(od).dump();
  ASSERT_TRUE(WaitState(id, "pending")) << Instance(id).dump();
  const int64_t saved = std::stoll(ReadFile(step_file));
  EXPECT_GE(saved, 10);
  EXPECT_EQ(Call("DELETE", "/v1/volumes/ckpt", tenant_).status, 409)
      << "an instance waiting to restart holds its volume";
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + od, tenant_).status, 200);
  ASSERT_TRUE(WaitState(id, "running", 20s)) << Instance(id).dump();
  EXPECT_EQ(Instance(id).value("restarts", 0), 1);
  // The restarted attempt's output replaces the first's: it resumed from the checkpoint.
  int64_t resumed = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string log = Logs(id);
        const size_t at = log.rfind("resumed at ");
        resumed = at == std::string::npos ? 0 : std::atoll(log.c_str() + at + 11);
        return resumed > 0;
      },
      10s))
      << Logs(id);
  EXPECT_GE(resumed, saved);
  EXPECT_LE(resumed, saved + 2) << "the first attempt stopped within a step of its last save";

  // Ended, its volume may go: the bill stops and the node removes the data.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  ASSERT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
  auto gone = Call("DELETE", "/v1/volumes/ckpt", tenant_);
  ASSERT_EQ(gone.status, 200) << gone.raw;
  EXPECT_EQ(gone.body.value("state", ""), "deleting") << "until its agent removed the data";
  ASSERT_TRUE(WaitFor([&] { return Get("/v1/volumes/ckpt", tenant_).status == 404; }, 10s))
      << Volume("ckpt", tenant_).dump();
  EXPECT_FALSE(std::filesystem::exists(VolumeDir("gpu-01", vol.value("id", ""))));
  EXPECT_FALSE(std::filesystem::exists(VolumeDir("gpu-01", vol.value("id", "")) + ".img"));
  // Its ledger lines are the tenant's usage, under the volume's id.
  auto usage = Get("/v1/usage?group_by=instance", tenant_);
  ASSERT_EQ(usage.status, 200) << usage.raw;
  bool billed = false;
  for (const json& item : usage.body.value("items", json::array())) {
    if (item.value("instance", "") == vol.value("id", "")) {
      billed = true;
      EXPECT_EQ(item.value("instance_type", ""), "volume");
      EXPECT_EQ(item.value("billing", ""), "storage");
    }
  }
  EXPECT_TRUE(billed) << usage.raw;
}

TEST_F(VolumesTest, AVolumeIsAFileSystemOfItsSizeOrTheNodeSaysItCannotBe) {
  Join("gpu-01");
  const json vol = NewVolume({{"name", "data"}, {"size_gib", 1}, {"node", "gpu-01"}}, tenant_);
  EXPECT_EQ(vol.value("node", ""), "gpu-01");
  json body = H100(1, "on_demand");
  body["volumes"] = json::array({{{"name", "data"}, {"path", "/data"}}});
  const std::string id = Create(
      body, "dd if=/dev/zero of=\"$TESSERA_VOLUME_DATA/fill\" bs=1M count=1100 2>&1; echo dd=$?");
  ASSERT_TRUE(WaitState(id, "succeeded", 60s)) << Instance(id).dump() << Logs(id);
  json node;
  const json nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
  for (const json& n : nodes) {
    if (n.value("id", "") == "gpu-01") node = n;
  }
  ASSERT_TRUE(node.contains("agent")) << node.dump();
  const json agent = node["agent"];
  if (agent.value("volume_quota_enforced", false)) {
    EXPECT_NE(Logs(id).find("No space left on device"), std::string::npos) << Logs(id);
    EXPECT_NE(Logs(id).find("dd=1"), std::string::npos) << Logs(id);
    ASSERT_TRUE(WaitFor([&] { return Volume("data", tenant_).value("size_enforced", false); }, 10s))
        << Volume("data", tenant_).dump();
    const json shown = Volume("data", tenant_);
    EXPECT_LE(shown.value("size_bytes", int64_t{0}), int64_t{1} << 30);
    EXPECT_GT(shown.value("used_bytes", int64_t{0}), int64_t{900} << 20) << shown.dump();
  } else {
    EXPECT_FALSE(agent.value("volume_quota_note", "").empty()) << agent.dump();
  }
}

TEST_F(VolumesTest, AnotherTenantCanNeitherSeeNorMountNorReadIt) {
  Join("gpu-01");
  const json vol = NewVolume({{"name", "secret-data"}, {"size_gib", 1}}, tenant_);
  json body = H100(1, "on_demand");
  body["volumes"] = json::array({{{"name", "secret-data"}, {"path", "/mnt/d"}}});
  const std::string mine = Create(body, "echo private > \"$TESSERA_VOLUME_SECRET_DATA/f\"");
  ASSERT_TRUE(WaitState(mine, "succeeded")) << Instance(mine).dump() << Logs(mine);
  const std::string dir = VolumeDir("gpu-01", vol.value("id", ""));
  EXPECT_EQ(ReadFile(dir + "/f"), "private\n");
  struct stat st {};
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  const std::string other = NewTenant("globex", 4);
  EXPECT_EQ(Get("/v1/volumes/secret-data", other).status, 404);
  EXPECT_EQ(Get("/v1/volumes", other).body["volumes"].size(), 0u);
  EXPECT_EQ(Call("DELETE", "/v1/volumes/secret-data", other).status, 404);
  auto attach = Post("/v1/instances", other, body);
  EXPECT_EQ(attach.status, 400) << attach.raw;
  EXPECT_NE(attach.raw.find("volumes[0].name"), std::string::npos) << attach.raw;
  // Its workload, on the same node, cannot read the volume's files by their path either.
  json plain = H100(1, "on_demand");
  plain["command"] = fmt::format("cat {}/f && echo LEAKED || echo refused", dir);
  auto snoop = Post("/v1/instances", other, plain);
  ASSERT_EQ(snoop.status, 201) << snoop.raw;
  const std::string sid = snoop.body.value("id", "");
  ASSERT_TRUE(WaitFor(
      [&] { return Get("/v1/instances/" + sid, other).body.value("state", "") == "succeeded"; },
      10s));
  const std::string log = Call("GET", "/v1/instances/" + sid + "/logs", other).raw;
  if (AgentIsolates("gpu-01")) {
    EXPECT_NE(log.find("refused"), std::string::npos) << log;
    EXPECT_EQ(log.find("LEAKED"), std::string::npos) << log;
  }
}

// Volumes hold their instances to their node, a second instance may mount a shared volume, and
// the tenant's volumes_gib quota caps what they hold.
TEST_F(VolumesTest, VolumesPinTheirInstancesAndTheQuotaCapsThem) {
  Join("gpu-01");
  Join("gpu-02");
  NewVolume({{"name", "shared"}, {"size_gib", 1}, {"node", "gpu-02"}, {"shared", true}}, tenant_);
  NewVolume({{"name", "solo"}, {"size_gib", 1}, {"node", "gpu-02"}}, tenant_);
  json body = H100(1, "on_demand");
  body["volumes"] =
      json::array({{{"name", "shared"}, {"path", "/s"}}, {{"name", "solo"}, {"path", "/o"}}});
  const std::string a = Create(body, "sleep 60");
  ASSERT_TRUE(WaitState(a, "running")) << Instance(a).dump();
  EXPECT_EQ(Instance(a).value("node", ""), "gpu-02");
  auto second = Post("/v1/instances", tenant_, body);
  EXPECT_EQ(second.status, 409) << "solo is not shared: " << second.raw;
  body["volumes"] = json::array({{{"name", "shared"}, {"path", "/s"}}});
  const std::string b = Create(body, "sleep 60");
  ASSERT_TRUE(WaitState(b, "running")) << Instance(b).dump();
  EXPECT_EQ(Instance(b).value("node", ""), "gpu-02");
  // A third waits for room on gpu-02 rather than run on gpu-01 without its volume.
  const std::string c = Create(body, "sleep 60");
  ASSERT_TRUE(WaitFor(
      [&] { return Instance(c).value("reason", "").find("gpu-02") != std::string::npos; }, 5s))
      << Instance(c).dump();
  EXPECT_EQ(Instance(c).value("state", ""), "pending");

  auto quota =
      Patch("/v1/tenants/" + TenantId(tenant_), kAdminToken, {{"quota", {{"volumes_gib", 3}}}});
  ASSERT_EQ(quota.status, 200) << quota.raw;
  EXPECT_EQ(quota.body["quota"].value("volumes_gib", 0), 3);
  EXPECT_EQ(quota.body["usage"].value("volumes_gib", 0), 2);
  auto over = Post("/v1/volumes", tenant_, {{"name", "big"}, {"size_gib", 2}});
  EXPECT_EQ(over.status, 403) << over.raw;
  EXPECT_NE(over.raw.find("volumes quota of 3 GiB"), std::string::npos) << over.raw;
  EXPECT_EQ(Post("/v1/volumes", tenant_, {{"name", "small"}, {"size_gib", 1}}).status, 201);
  // Bad requests name their field.
  auto bad = Post("/v1/volumes", tenant_, {{"name", "x"}, {"size_gib", 0}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("size_gib"), std::string::npos) << bad.raw;
  json wrong = H100(1, "on_demand");
  wrong["volumes"] = json::array({{{"name", "shared"}, {"path", "/proc/x"}}});
  auto path = Post("/v1/instances", tenant_, wrong);
  EXPECT_EQ(path.status, 400);
  EXPECT_NE(path.raw.find("volumes[0].path"), std::string::npos) << path.raw;
}

}  // namespace
}  // namespace tessera
