#include "fleet/fleet.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "catalog/catalog_testing.h"

namespace tessera::fleet {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const catalog::Catalog& TestCatalog() { return catalog::EmbeddedCatalogForTest(); }

// Everything about a fleet that Allocate, Release, SetGpuMode or SetNodeState may change, so
// a refused call can be shown to change nothing.
std::string Dump(const Fleet& f) {
  std::string out = fmt::format("used={} total={}\n", f.used_gpu_milli(), f.total_gpus());
  for (uint32_t i = 0; i < f.size(); ++i) {
    const Node& n = f.node(NodeIndex(i));
    out += fmt::format("{} v{} {} cpu {}/{} mem {}/{} w{}\n", n.name, f.version(NodeIndex(i)),
                       NodeStateName(n.state), n.cpu_milli_free, n.cpu_milli, n.memory_mib_free,
                       n.memory_mib, n.workloads);
    for (const Gpu& g : n.gpus) {
      out += fmt::format("  {} i{} {} {}{}{}", catalog::SharingModeName(g.mode), g.island,
                         g.free_milli, g.free_memory_mib, g.healthy ? "" : " unhealthy",
                         g.held ? " held" : "");
      for (const MigInstance& m : g.mig_instances)
        out += fmt::format(" {}@{}", m.profile->name, m.start);
      out += "\n";
    }
  }
  return out;
}

// Node indices of the test fleet, in the order SetUp adds them.
constexpr NodeIndex kH100(0), kA100(1), kT4(2), kCpu(3);

class FleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NodeSpec h100{.name = "h100",
                  .gpu_model = "H100-80GB",
                  .gpus = 8,
                  .cpu_milli = 64000,
                  .memory_mib = 512 * 1024,
                  .nvlink_islands = {{0, 1, 2, 3}, {4, 5, 6, 7}}};
    NodeSpec a100{.name = "a100",
                  .gpu_model = "A100-80GB",
                  .gpus = 4,
                  .cpu_milli = 32000,
                  .memory_mib = 256 * 1024,
                  .gpu_modes = {SharingMode::kMig, SharingMode::kMig, SharingMode::kExclusive,
                                SharingMode::kShared}};
    NodeSpec t4{.name = "t4",
                .gpu_model = "T4",
                .gpus = 2,
                .cpu_milli = 16000,
                .memory_mib = 64 * 1024,
                .default_mode = SharingMode::kShared};
    NodeSpec cpu{.name = "cpu", .cpu_milli = 8000, .memory_mib = 32 * 1024};
    for (const NodeSpec* s : {&h100, &a100, &t4, &cpu}) {
      ASSERT_TRUE(fleet_.AddNode(*s).ok()) << s->name;
    }
    t4_memory_ = TestCatalog().FindGpu("T4")->memory_mib;
  }

  static Assignment Whole(NodeIndex n, std::initializer_list<int> gpus, int64_t cpu = 1000,
                          int64_t mem = 1024) {
    Assignment a{.node = n, .cpu_milli = cpu, .memory_mib = mem};
    for (int g : gpus) a.gpus[static_cast<size_t>(a.gpu_count++)] = GpuGrant{.gpu = g};
    return a;
  }
  static Assignment Share(NodeIndex n, int gpu, int milli, int64_t gpu_mem = 0) {
    Assignment a{.node = n, .cpu_milli = 500, .memory_mib = 512, .gpu_count = 1};
    a.gpus[0] = GpuGrant{.gpu = gpu, .milli = milli, .memory_mib = gpu_mem};
    return a;
  }
  static Assignment Mig(NodeIndex n, int gpu, std::string_view profile, int start,
                        std::string_view model = "A100-80GB") {
    Assignment a{.node = n, .cpu_milli = 500, .memory_mib = 512, .gpu_count = 1};
    const mig::Profile* p = TestCatalog().FindGpu(model)->mig->Find(profile);
    EXPECT_NE(p, nullptr) << profile;
    a.gpus[0] = GpuGrant{.gpu = gpu, .mig_profile = p, .mig_start = start};
    return a;
  }

  Fleet fleet_{&TestCatalog()};

 public:
  int64_t t4_memory_ = 0;  // Public so the refusal cases' lambdas can size their shares.
};

TEST_F(FleetTest, AddNodeFillsGpusFromSpec) {
  EXPECT_EQ(fleet_.size(), 4u);
  EXPECT_EQ(fleet_.total_gpus(), 14);
  EXPECT_EQ(fleet_.used_gpu_milli(), 0);
  const Node& h = fleet_.node(kH100);
  EXPECT_EQ(h.gpus[2].island, 0);
  EXPECT_EQ(h.gpus[5].island, 1);
  EXPECT_EQ(h.gpus[0].free_milli, kMilliPerGpu);
  EXPECT_EQ(fleet_.node(kA100).gpus[0].mode, SharingMode::kMig);
  EXPECT_EQ(fleet_.node(kA100).gpus[2].mode, SharingMode::kExclusive);
  EXPECT_EQ(fleet_.node(kA100).gpus[0].island, -1);
  EXPECT_EQ(fleet_.node(kT4).gpus[1].free_memory_mib, t4_memory_);
  EXPECT_GT(t4_memory_, 0);
  EXPECT_FALSE(fleet_.node(kCpu).model.valid());
  EXPECT_EQ(fleet_.node(kT4).model, *TestCatalog().FindGpuIndex("T4"));
  EXPECT_EQ(fleet_.node(kCpu).memory_mib_free, 32 * 1024);
}

TEST_F(FleetTest, FindByName) {
  auto r = fleet_.Find("t4");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, kT4);
  EXPECT_EQ(fleet_.Find("nope").status(), Status::NotFound("no node named 'nope'"));
}

struct AddNodeCase {
  std::string name;
  NodeSpec spec;
  Status want;
};

TEST_F(FleetTest, AddNodeRejectsBadSpecs) {
  const std::vector<AddNodeCase> cases = {
      {"duplicate",
       {.name = "h100"},
       Status::AlreadyExists("node 'h100': a node with this name exists already")},
      {"bad name",
       {.name = "Big Box"},
       Status::InvalidArgument("node 'Big Box': name: must be 1-63 characters of [a-z0-9._-], "
                               "starting with a letter or digit")},
      {"unknown model",
       {.name = "x", .gpu_model = "Z100", .gpus = 1},
       Status::InvalidArgument("node 'x': gpu_model: unknown GPU model 'Z100'")},
      {"too many gpus",
       {.name = "x", .gpu_model = "T4", .gpus = 17},
       Status::InvalidArgument("node 'x': gpus: 17 is out of range [0, 16]")},
      {"negative gpus",
       {.name = "x", .gpus = -1},
       Status::InvalidArgument("node 'x': gpus: -1 is out of range [0, 16]")},
      {"negative cpu",
       {.name = "x", .cpu_milli = -5},
       Status::InvalidArgument("node 'x': cpu_milli: -5 is negative")},
      {"negative memory",
       {.name = "x", .memory_mib = -1},
       Status::InvalidArgument("node 'x': memory_mib: -1 is negative")},
      {"cpu-only with model",
       {.name = "x", .gpu_model = "T4"},
       Status::InvalidArgument("node 'x': gpu_model: 'T4' given for a node without GPUs")},
      {"gpus without model",
       {.name = "x", .gpus = 2},
       Status::InvalidArgument("node 'x': gpu_model: is required for a node with GPUs")},
      {"mig on T4",
       {.name = "x", .gpu_model = "T4", .gpus = 2, .default_mode = SharingMode::kMig},
       Status::InvalidArgument(fmt::format("node 'x': gpu 0: mig mode on {}, which does not "
                                           "support MIG",
                                           TestCatalog().FindGpu("T4")->id))},
      {"modes count",
       {.name = "x", .gpu_model = "T4", .gpus = 2, .gpu_modes = {SharingMode::kShared}},
       Status::InvalidArgument("node 'x': gpu_modes: 1 entries for 2 GPUs")},
      {"island out of range",
       {.name = "x", .gpu_model = "H100-80GB", .gpus = 4, .nvlink_islands = {{0, 1}, {2, 4}}},
       Status::InvalidArgument("node 'x': nvlink_islands: island 1: gpu 4 is out of range [0, 3]")},
      {"islands overlap",
       {.name = "x", .gpu_model = "H100-80GB", .gpus = 4, .nvlink_islands = {{0, 1, 2}, {2, 3}}},
       Status::InvalidArgument("node 'x': nvlink_islands: island 1: gpu 2 is in two islands")},
      {"island of one",
       {.name = "x", .gpu_model = "H100-80GB", .gpus = 4, .nvlink_islands = {{0}}},
       Status::InvalidArgument(
           "node 'x': nvlink_islands: island 0 has 1 GPU(s); an island links at least 2")},
  };
  for (const AddNodeCase& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string before = Dump(fleet_);
    EXPECT_EQ(fleet_.AddNode(c.spec).status(), c.want);
    EXPECT_EQ(Dump(fleet_), before);
    EXPECT_EQ(fleet_.size(), 4u);
    EXPECT_FALSE(fleet_.Find("x").ok());
  }
}

// One attempt to break an invariant: `setup` runs calls that must succeed, then `attempt` must
// be refused with `code` and a message containing `message`, and change nothing.
struct RefusalCase {
  std::string name;
  std::function<void(FleetTest&, Fleet&)> setup;
  std::function<Status(Fleet&)> attempt;
  StatusCode code;
  std::string message;
};

class FleetRefusalTest : public FleetTest {
 public:
  void Run(const RefusalCase& c) {
    SCOPED_TRACE(c.name);
    Fleet f = fleet_;
    if (c.setup) c.setup(*this, f);
    const std::string before = Dump(f);
    const Status s = c.attempt(f);
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(c.message));
    EXPECT_EQ(Dump(f), before);
  }
};

void Ok(Status s) { ASSERT_TRUE(s.ok()) << s.ToString(); }

TEST_F(FleetRefusalTest, AllocateRefusesWhatWouldBreakAnInvariant) {
  using F = FleetTest;
  const std::vector<RefusalCase> cases = {
      {"double booking an exclusive GPU",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kH100, {0}))); },
       [](Fleet& f) {
         return f.Allocate(F::Whole(kH100, {1, 0}));
       },
       StatusCode::kResourceExhausted, "node 'h100': gpu 0: is allocated"},
      {"a share of an exclusive GPU", nullptr,
       [](Fleet& f) { return f.Allocate(F::Share(kH100, 0, 500)); }, StatusCode::kInvalidArgument,
       "node 'h100': gpu 0: exclusive mode grants whole GPUs only (milli 1000), not milli 500"},
      {"the same GPU twice in one assignment", nullptr,
       [](Fleet& f) {
         return f.Allocate(F::Whole(kH100, {1, 2, 1}));
       },
       StatusCode::kInvalidArgument, "node 'h100': gpu 1 appears twice in one assignment"},
      {"gpu index past the end", nullptr, [](Fleet& f) { return f.Allocate(F::Whole(kH100, {8})); },
       StatusCode::kInvalidArgument, "node 'h100': gpu 8 is out of range (it has 8)"},
      {"negative gpu index", nullptr, [](Fleet& f) { return f.Allocate(F::Whole(kT4, {-1})); },
       StatusCode::kInvalidArgument, "node 't4': gpu -1 is out of range (it has 2)"},
      {"a GPU on a CPU-only node", nullptr,
       [](Fleet& f) { return f.Allocate(F::Whole(kCpu, {0})); }, StatusCode::kInvalidArgument,
       "node 'cpu': gpu 0 is out of range (it has 0)"},
      {"gpu_count above the maximum", nullptr,
       [](Fleet& f) {
         Assignment a = F::Whole(kH100, {});
         a.gpu_count = 17;
         return f.Allocate(a);
       },
       StatusCode::kInvalidArgument, "node 'h100': gpu_count 17 is out of range [0, 16]"},
      {"negative gpu_count", nullptr,
       [](Fleet& f) {
         Assignment a = F::Whole(kH100, {});
         a.gpu_count = -1;
         return f.Allocate(a);
       },
       StatusCode::kInvalidArgument, "node 'h100': gpu_count -1 is out of range [0, 16]"},
      {"unknown node index", nullptr,
       [](Fleet& f) { return f.Allocate(F::Whole(NodeIndex(9), {})); },
       StatusCode::kInvalidArgument, "node index 9 is out of range (the fleet has 4 nodes)"},
      {"invalid node index", nullptr,
       [](Fleet& f) { return f.Allocate(F::Whole(NodeIndex(), {})); }, StatusCode::kInvalidArgument,
       "node index -1 is out of range"},
      {"negative cpu", nullptr, [](Fleet& f) { return f.Allocate(F::Whole(kCpu, {}, -1)); },
       StatusCode::kInvalidArgument, "cpu_milli -1 and memory_mib 1024 must not be negative"},
      {"cpu below zero", [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kCpu, {}, 7000))); },
       [](Fleet& f) { return f.Allocate(F::Whole(kCpu, {}, 1001)); },
       StatusCode::kResourceExhausted, "node 'cpu': 1001 milli-CPU asked, 1000 free"},
      {"memory below zero", nullptr,
       [](Fleet& f) { return f.Allocate(F::Whole(kCpu, {}, 0, 32 * 1024 + 1)); },
       StatusCode::kResourceExhausted, "node 'cpu': 32769 MiB of memory asked, 32768 free"},
      {"shared GPU over its milli",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Share(kT4, 0, 600))); },
       [](Fleet& f) { return f.Allocate(F::Share(kT4, 0, 500)); }, StatusCode::kResourceExhausted,
       "node 't4': gpu 0: 500 milli asked, 400 free"},
      {"shared GPU over its memory",
       [](FleetTest& t, Fleet& f) { Ok(f.Allocate(F::Share(kT4, 1, 100, t.t4_memory_ - 10))); },
       [](Fleet& f) { return f.Allocate(F::Share(kT4, 1, 100, 11)); },
       StatusCode::kResourceExhausted, "node 't4': gpu 1: 11 MiB of GPU memory asked, 10 free"},
      {"whole shared GPU that holds a share",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Share(kT4, 0, 1))); },
       [](Fleet& f) { return f.Allocate(F::Whole(kT4, {0})); }, StatusCode::kResourceExhausted,
       "node 't4': gpu 0: 1000 milli asked, 999 free"},
      {"zero milli share", nullptr, [](Fleet& f) { return f.Allocate(F::Share(kT4, 0, 0)); },
       StatusCode::kInvalidArgument, "node 't4': gpu 0: milli 0 must be in [1, 1000]"},
      {"share above one GPU", nullptr, [](Fleet& f) { return f.Allocate(F::Share(kT4, 0, 1001)); },
       StatusCode::kInvalidArgument, "milli 1001 must be in [1, 1000]"},
      {"negative GPU memory", nullptr,
       [](Fleet& f) { return f.Allocate(F::Share(kT4, 0, 10, -1)); }, StatusCode::kInvalidArgument,
       "memory_mib -1 not negative"},
      {"overlapping MIG instances",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Mig(kA100, 0, "3g.40gb", 4))); },
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "1g.10gb", 5)); },
       StatusCode::kFailedPrecondition,
       "node 'a100': gpu 0: memory slices overlap: 3g.40gb@4 and 1g.10gb@5"},
      {"the same MIG instance twice",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Mig(kA100, 0, "1g.10gb", 2))); },
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "1g.10gb", 2)); },
       StatusCode::kFailedPrecondition, "memory slices overlap"},
      {"+me twice", [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Mig(kA100, 1, "1g.10gb+me", 0))); },
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 1, "1g.10gb+me", 1)); },
       StatusCode::kFailedPrecondition, "node 'a100': gpu 1: more than one +me instance"},
      {"compute slices over 7",
       [](FleetTest&, Fleet& f) {
         for (int s = 0; s < 7; ++s) Ok(f.Allocate(F::Mig(kA100, 0, "1g.10gb", s)));
       },
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "1g.20gb", 6)); },
       StatusCode::kFailedPrecondition, "node 'a100': gpu 0: "},
      {"a MIG start the profile does not allow", nullptr,
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "3g.40gb", 2)); },
       StatusCode::kFailedPrecondition, "node 'a100': gpu 0: start 2 is not valid for 3g.40gb"},
      {"a profile of another model", nullptr,
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "1g.10gb", 0, "H100-80GB")); },
       StatusCode::kInvalidArgument,
       "node 'a100': gpu 0: profile '1g.10gb' is not in the A100-80GB MIG table"},
      {"a MIG GPU without a profile", nullptr,
       [](Fleet& f) { return f.Allocate(F::Whole(kA100, {0})); }, StatusCode::kInvalidArgument,
       "node 'a100': gpu 0: the GPU is in mig mode; the grant needs a MIG profile"},
      {"a MIG profile on a shared GPU", nullptr,
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 3, "1g.10gb", 0)); },
       StatusCode::kInvalidArgument,
       "node 'a100': gpu 3: a MIG profile was given but the GPU is in shared mode"},
      {"all or nothing across GPUs",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kH100, {5}))); },
       [](Fleet& f) {
         return f.Allocate(F::Whole(kH100, {4, 5, 6, 7}));
       },
       StatusCode::kResourceExhausted, "node 'h100': gpu 5: is allocated"},
      {"a draining node",
       [](FleetTest&, Fleet& f) { Ok(f.SetNodeState(kH100, NodeState::kDraining)); },
       [](Fleet& f) { return f.Allocate(F::Whole(kH100, {0})); }, StatusCode::kFailedPrecondition,
       "node 'h100' is draining; it takes no new work"},
      {"a down node", [](FleetTest&, Fleet& f) { Ok(f.SetNodeState(kCpu, NodeState::kDown)); },
       [](Fleet& f) { return f.Allocate(F::Whole(kCpu, {})); }, StatusCode::kFailedPrecondition,
       "node 'cpu' is down; it takes no new work"},
      {"an unhealthy whole GPU", [](FleetTest&, Fleet& f) { Ok(f.SetGpuHealthy(kH100, 3, false)); },
       [](Fleet& f) {
         return f.Allocate(F::Whole(kH100, {2, 3}));
       },
       StatusCode::kUnavailable, "node 'h100': gpu 3: is unhealthy, out of service"},
      {"a share of an unhealthy GPU",
       [](FleetTest&, Fleet& f) { Ok(f.SetGpuHealthy(kT4, 1, false)); },
       [](Fleet& f) { return f.Allocate(F::Share(kT4, 1, 100)); }, StatusCode::kUnavailable,
       "node 't4': gpu 1: is unhealthy"},
      {"a MIG slice of an unhealthy GPU",
       [](FleetTest&, Fleet& f) { Ok(f.SetGpuHealthy(kA100, 0, false)); },
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "1g.10gb", 0)); },
       StatusCode::kUnavailable, "node 'a100': gpu 0: is unhealthy"},
      {"a whole GPU changing its mode",
       [](FleetTest&, Fleet& f) { Ok(f.SetGpuHeld(kH100, 3, true)); },
       [](Fleet& f) {
         return f.Allocate(F::Whole(kH100, {2, 3}));
       },
       StatusCode::kUnavailable, "node 'h100': GPU 3 is changing its mode"},
      {"a MIG slice of a GPU changing its mode",
       [](FleetTest&, Fleet& f) { Ok(f.SetGpuHeld(kA100, 0, true)); },
       [](Fleet& f) { return f.Allocate(F::Mig(kA100, 0, "1g.10gb", 0)); },
       StatusCode::kUnavailable, "node 'a100': GPU 0 is changing its mode"},
      {"holding a GPU past the end", nullptr, [](Fleet& f) { return f.SetGpuHeld(kT4, 2, true); },
       StatusCode::kInvalidArgument, "node 't4': gpu 2 is out of range (it has 2)"},
      {"health of a GPU past the end", nullptr,
       [](Fleet& f) { return f.SetGpuHealthy(kT4, 2, false); }, StatusCode::kInvalidArgument,
       "node 't4': gpu 2 is out of range (it has 2)"},
  };
  for (const RefusalCase& c : cases) Run(c);
}

// What an unhealthy GPU held stays booked until released; once healthy again it is granted.
TEST_F(FleetTest, AnUnhealthyGpuKeepsItsBookingsAndIsGrantedAgainOnceHealthy) {
  ASSERT_TRUE(fleet_.Allocate(Whole(kH100, {0})).ok());
  const uint64_t version = fleet_.version(kH100);
  ASSERT_TRUE(fleet_.SetGpuHealthy(kH100, 0, false).ok());
  EXPECT_GT(fleet_.version(kH100), version);  // Schedulers see the change.
  EXPECT_FALSE(fleet_.node(kH100).gpus[0].healthy);
  EXPECT_EQ(fleet_.used_gpu_milli(), 1000);
  ASSERT_TRUE(fleet_.Release(Whole(kH100, {0})).ok());
  EXPECT_EQ(fleet_.Allocate(Whole(kH100, {0})).code(), StatusCode::kUnavailable);
  ASSERT_TRUE(fleet_.SetGpuHealthy(kH100, 0, true).ok());
  EXPECT_TRUE(fleet_.Allocate(Whole(kH100, {0})).ok());
}

TEST_F(FleetRefusalTest, ReleaseRefusesWhatIsNotHeld) {
  using F = FleetTest;
  const std::vector<RefusalCase> cases = {
      {"nothing held on the node", nullptr,
       [](Fleet& f) { return f.Release(F::Whole(kH100, {0})); }, StatusCode::kFailedPrecondition,
       "node 'h100' holds no assignment"},
      {"a GPU that is not allocated",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kH100, {0}))); },
       [](Fleet& f) { return f.Release(F::Whole(kH100, {1})); }, StatusCode::kFailedPrecondition,
       "node 'h100': gpu 1: releasing 1000 milli but 0 are allocated"},
      {"releasing twice",
       [](FleetTest&, Fleet& f) {
         Ok(f.Allocate(F::Whole(kH100, {3})));
         Ok(f.Allocate(F::Whole(kH100, {2})));
         Ok(f.Release(F::Whole(kH100, {3})));
       },
       [](Fleet& f) { return f.Release(F::Whole(kH100, {3})); }, StatusCode::kFailedPrecondition,
       "node 'h100': gpu 3: releasing 1000 milli but 0 are allocated"},
      {"more milli than allocated",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Share(kT4, 0, 300))); },
       [](Fleet& f) { return f.Release(F::Share(kT4, 0, 500)); }, StatusCode::kFailedPrecondition,
       "node 't4': gpu 0: releasing 500 milli but 300 are allocated"},
      {"more GPU memory than promised",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Share(kT4, 0, 300, 100))); },
       [](Fleet& f) { return f.Release(F::Share(kT4, 0, 300, 101)); },
       StatusCode::kFailedPrecondition,
       "node 't4': gpu 0: releasing 101 MiB of GPU memory but 100 are promised"},
      {"more CPU than in use",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kCpu, {}, 100))); },
       [](Fleet& f) { return f.Release(F::Whole(kCpu, {}, 101)); }, StatusCode::kFailedPrecondition,
       "node 'cpu': releasing 101 milli-CPU but 100 are in use"},
      {"more memory than in use",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kCpu, {}, 100, 10))); },
       [](Fleet& f) { return f.Release(F::Whole(kCpu, {}, 100, 11)); },
       StatusCode::kFailedPrecondition, "node 'cpu': releasing 11 MiB of memory but 10 are in use"},
      {"an absent MIG instance",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Mig(kA100, 0, "3g.40gb", 0))); },
       [](Fleet& f) { return f.Release(F::Mig(kA100, 0, "3g.40gb", 4)); },
       StatusCode::kFailedPrecondition, "node 'a100': gpu 0: holds no MIG instance 3g.40gb@4"},
      {"a MIG instance of another profile",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Mig(kA100, 0, "3g.40gb", 0))); },
       [](Fleet& f) { return f.Release(F::Mig(kA100, 0, "4g.40gb", 0)); },
       StatusCode::kFailedPrecondition, "holds no MIG instance 4g.40gb@0"},
      {"a share of an exclusive GPU",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kH100, {0}))); },
       [](Fleet& f) { return f.Release(F::Share(kH100, 0, 500)); }, StatusCode::kInvalidArgument,
       "exclusive mode grants whole GPUs only"},
      {"a bad gpu index", [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kH100, {0}))); },
       [](Fleet& f) {
         return f.Release(F::Whole(kH100, {0, 99}));
       },
       StatusCode::kInvalidArgument, "node 'h100': gpu 99 is out of range (it has 8)"},
  };
  for (const RefusalCase& c : cases) Run(c);
}

TEST_F(FleetRefusalTest, SetGpuModeRefusesBusyOrUnsupported) {
  using F = FleetTest;
  const std::vector<RefusalCase> cases = {
      {"busy exclusive GPU", [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Whole(kH100, {0}))); },
       [](Fleet& f) { return f.SetGpuMode(kH100, 0, SharingMode::kShared); },
       StatusCode::kFailedPrecondition,
       "node 'h100': gpu 0: is in use; change its mode when nothing is allocated on it"},
      {"shared GPU with a share", [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Share(kT4, 1, 1))); },
       [](Fleet& f) { return f.SetGpuMode(kT4, 1, SharingMode::kExclusive); },
       StatusCode::kFailedPrecondition, "node 't4': gpu 1: is in use"},
      {"MIG GPU with an instance",
       [](FleetTest&, Fleet& f) { Ok(f.Allocate(F::Mig(kA100, 1, "1g.10gb", 6))); },
       [](Fleet& f) { return f.SetGpuMode(kA100, 1, SharingMode::kExclusive); },
       StatusCode::kFailedPrecondition, "node 'a100': gpu 1: is in use"},
      {"MIG on a model without MIG", nullptr,
       [](Fleet& f) { return f.SetGpuMode(kT4, 0, SharingMode::kMig); },
       StatusCode::kFailedPrecondition, "does not support MIG"},
      {"gpu past the end", nullptr,
       [](Fleet& f) { return f.SetGpuMode(kT4, 2, SharingMode::kExclusive); },
       StatusCode::kInvalidArgument, "node 't4': gpu 2 is out of range (it has 2)"},
      {"CPU-only node", nullptr,
       [](Fleet& f) { return f.SetGpuMode(kCpu, 0, SharingMode::kShared); },
       StatusCode::kInvalidArgument, "node 'cpu': gpu 0 is out of range (it has 0)"},
      {"unknown node", nullptr,
       [](Fleet& f) { return f.SetGpuMode(NodeIndex(4), 0, SharingMode::kShared); },
       StatusCode::kInvalidArgument, "node index 4 is out of range"},
      {"unknown node state", nullptr,
       [](Fleet& f) { return f.SetNodeState(NodeIndex(), NodeState::kDown); },
       StatusCode::kInvalidArgument, "is out of range"},
  };
  for (const RefusalCase& c : cases) Run(c);
}

TEST_F(FleetTest, ExclusiveRoundTripRestoresState) {
  const std::string before = Dump(fleet_);
  const Assignment a = Whole(kH100, {0, 1, 2, 3}, 32000, 1024);
  Ok(fleet_.Allocate(a));
  const Node& n = fleet_.node(kH100);
  EXPECT_EQ(n.gpus[0].free_milli, 0);
  EXPECT_EQ(n.gpus[4].free_milli, kMilliPerGpu);
  EXPECT_EQ(n.cpu_milli_free, 32000);
  EXPECT_EQ(n.workloads, 1);
  EXPECT_EQ(fleet_.used_gpu_milli(), 4000);
  EXPECT_EQ(fleet_.version(kH100), 1u);
  EXPECT_EQ(fleet_.version(kT4), 0u);
  Ok(fleet_.Release(a));
  EXPECT_EQ(fleet_.version(kH100), 2u);
  EXPECT_EQ(fleet_.used_gpu_milli(), 0);
  std::string after = Dump(fleet_);
  EXPECT_NE(after, before);  // Only the version moved.
  EXPECT_EQ(after.replace(after.find(" v2 "), 4, " v0 "), before);
}

// Fleet::changes() lets a scheduler skip its scan of node versions: it must move whenever any
// version moves (or a node joins), and only then.
TEST_F(FleetTest, ChangesCountsEveryVersionMoveAndNothingElse) {
  const auto versions = [&] {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < fleet_.size(); ++i) sum += fleet_.version(NodeIndex(i));
    return sum;
  };
  const uint64_t start = fleet_.changes(), versions_at_start = versions();
  const Assignment a = Whole(kH100, {0, 1}, 8000, 1024);
  Ok(fleet_.Allocate(a));
  EXPECT_FALSE(fleet_.Allocate(Whole(kH100, {0}, 8000, 1024)).ok());  // Refused: no change.
  Ok(fleet_.SetNodeState(kT4, NodeState::kDraining));
  Ok(fleet_.SetNodeState(kT4, NodeState::kDraining));  // Already so: no change.
  Ok(fleet_.Release(a));
  EXPECT_EQ(fleet_.changes() - start, 3u);
  EXPECT_EQ(fleet_.changes() - start, versions() - versions_at_start);
  const size_t nodes = fleet_.size();
  ASSERT_TRUE(
      fleet_.AddNode(NodeSpec{.name = "later", .cpu_milli = 1000, .memory_mib = 1024}).ok());
  EXPECT_EQ(fleet_.size(), nodes + 1);
  EXPECT_EQ(fleet_.changes() - start, 4u);
}

TEST_F(FleetTest, SharedGpuFillsExactlyAndCountsMilli) {
  for (int i = 0; i < 4; ++i) Ok(fleet_.Allocate(Share(kT4, 0, 250, 1000)));
  const Gpu& g = fleet_.node(kT4).gpus[0];
  EXPECT_EQ(g.free_milli, 0);
  EXPECT_EQ(g.free_memory_mib, t4_memory_ - 4000);
  EXPECT_EQ(fleet_.used_gpu_milli(), 1000);
  EXPECT_EQ(fleet_.node(kT4).workloads, 4);
  EXPECT_EQ(fleet_.CanAllocate(Share(kT4, 0, 1)).code(), StatusCode::kResourceExhausted);
  Ok(fleet_.Release(Share(kT4, 0, 250, 1000)));
  EXPECT_EQ(fleet_.node(kT4).gpus[0].free_milli, 250);
  EXPECT_EQ(fleet_.used_gpu_milli(), 750);
  // A fully free shared GPU can be granted whole, as openb's whole-GPU pods are.
  Ok(fleet_.Allocate(Whole(kT4, {1})));
  EXPECT_EQ(fleet_.node(kT4).gpus[1].free_milli, 0);
  EXPECT_EQ(fleet_.used_gpu_milli(), 1750);
}

TEST_F(FleetTest, MigInstancesCountComputeSlicesRoundedDown) {
  EXPECT_EQ(fleet_.node(kA100).gpus[0].free_milli, kMilliPerGpu);
  const Assignment big = Mig(kA100, 0, "3g.40gb", 4);
  const Assignment small = Mig(kA100, 0, "1g.10gb", 0);
  Ok(fleet_.Allocate(big));
  EXPECT_EQ(fleet_.node(kA100).gpus[0].free_milli, 0);
  EXPECT_EQ(fleet_.used_gpu_milli(), 428);  // 3/7, rounded down.
  Ok(fleet_.Allocate(small));
  EXPECT_EQ(fleet_.used_gpu_milli(), 571);  // 4/7.
  EXPECT_EQ(UsedComputeSlices(fleet_.node(kA100).gpus[0]), 4);
  ASSERT_EQ(fleet_.node(kA100).gpus[0].mig_instances.size(), 2u);
  Ok(fleet_.Release(big));
  EXPECT_EQ(fleet_.used_gpu_milli(), 142);
  EXPECT_EQ(fleet_.node(kA100).gpus[0].free_milli, 0);
  EXPECT_EQ(fleet_.node(kA100).gpus[0].mig_instances[0].start, 0);
  Ok(fleet_.Release(small));
  EXPECT_EQ(fleet_.used_gpu_milli(), 0);
  EXPECT_EQ(fleet_.node(kA100).gpus[0].free_milli, kMilliPerGpu);
  EXPECT_TRUE(fleet_.node(kA100).gpus[0].mig_instances.empty());
  // A full GPU of seven 1g instances counts as one whole GPU.
  for (int s = 0; s < 7; ++s) Ok(fleet_.Allocate(Mig(kA100, 1, "1g.10gb", s)));
  EXPECT_EQ(fleet_.used_gpu_milli(), 1000);
}

TEST_F(FleetTest, MixedAssignmentAcrossModesIsOneWorkload) {
  Assignment a = Whole(kA100, {2}, 4000, 4096);
  a.gpus[1] = GpuGrant{.gpu = 3, .milli = 400, .memory_mib = 2048};
  a.gpus[2] = Mig(kA100, 0, "2g.20gb", 2).gpus[0];
  a.gpu_count = 3;
  Ok(fleet_.CanAllocate(a));
  Ok(fleet_.Allocate(a));
  EXPECT_EQ(fleet_.used_gpu_milli(), 1000 + 400 + 285);
  EXPECT_EQ(fleet_.node(kA100).workloads, 1);
  Ok(fleet_.CanRelease(a));
  Ok(fleet_.Release(a));
  EXPECT_EQ(fleet_.used_gpu_milli(), 0);
  EXPECT_EQ(fleet_.node(kA100).workloads, 0);
  EXPECT_EQ(fleet_.node(kA100).cpu_milli_free, 32000);
}

TEST_F(FleetTest, ReleaseWorksOnDrainingNode) {
  const Assignment a = Whole(kH100, {6, 7});
  Ok(fleet_.Allocate(a));
  Ok(fleet_.SetNodeState(kH100, NodeState::kDraining));
  EXPECT_EQ(fleet_.node(kH100).state, NodeState::kDraining);
  Ok(fleet_.Release(a));
  EXPECT_EQ(fleet_.used_gpu_milli(), 0);
  EXPECT_EQ(fleet_.version(kH100), 3u);
  Ok(fleet_.SetNodeState(kH100, NodeState::kReady));
  Ok(fleet_.Allocate(a));
}

TEST_F(FleetTest, SetGpuModeOnIdleGpu) {
  Ok(fleet_.SetGpuMode(kH100, 0, SharingMode::kShared));
  const int64_t h100_mem = TestCatalog().FindGpu("H100-80GB")->memory_mib;
  EXPECT_EQ(fleet_.node(kH100).gpus[0].free_memory_mib, h100_mem);
  EXPECT_EQ(fleet_.version(kH100), 1u);
  Ok(fleet_.Allocate(Share(kH100, 0, 500, 1024)));
  Ok(fleet_.Release(Share(kH100, 0, 500, 1024)));
  Ok(fleet_.SetGpuMode(kH100, 0, SharingMode::kMig));
  EXPECT_EQ(fleet_.node(kH100).gpus[0].free_memory_mib, 0);
  Ok(fleet_.Allocate(Mig(kH100, 0, "7g.80gb", 0, "H100-80GB")));
  EXPECT_EQ(fleet_.used_gpu_milli(), 1000);
  // Setting the mode a GPU already has changes nothing, not even the version.
  const uint64_t v = fleet_.version(kT4);
  Ok(fleet_.SetGpuMode(kT4, 0, SharingMode::kShared));
  EXPECT_EQ(fleet_.version(kT4), v);
}

TEST(NodeStateNameTest, Names) {
  EXPECT_EQ(NodeStateName(NodeState::kReady), "ready");
  EXPECT_EQ(NodeStateName(NodeState::kDraining), "draining");
  EXPECT_EQ(NodeStateName(NodeState::kDown), "down");
}

}  // namespace
}  // namespace tessera::fleet
