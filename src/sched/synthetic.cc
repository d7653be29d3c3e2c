#include "sched/synthetic.h"

#include <fmt/format.h>

#include <array>

namespace tessera::sched {

namespace {

struct Shape {
  const char* model;
  int gpus;
  int vcpus;
  int memory_gib;
  int count;
};

// openb-fgd.md §1.1; the six rare nodes are given plausible CPU and memory.
constexpr std::array<Shape, 15> kOpenbShapes{{
    {"G2", 8, 96, 384, 549},
    {"T4", 2, 104, 512, 387},
    {"P100", 2, 16, 120, 107},
    {"G3", 8, 128, 768, 39},
    {"V100M16", 4, 32, 128, 28},
    {"P100", 2, 64, 256, 22},
    {"V100M32", 8, 96, 768, 21},
    {"V100M16", 1, 8, 32, 19},
    {"T4", 4, 96, 384, 17},
    {"V100M32", 4, 48, 368, 9},
    {"V100M16", 8, 64, 256, 7},
    {"A10", 1, 128, 1024, 2},
    {"P100", 1, 8, 60, 3},
    {"P100", 2, 32, 128, 2},
    {"V100M16", 8, 96, 384, 1},
}};

constexpr std::array<Shape, 4> kEightGpuShapes{{
    {"G2", 8, 96, 384, 14},
    {"G3", 8, 128, 768, 1},
    {"V100M32", 8, 96, 768, 1},
    {"V100M16", 8, 64, 256, 1},
}};

fleet::NodeSpec Spec(const Shape& s, size_t index) {
  return fleet::NodeSpec{.name = fmt::format("openb-node-{:05d}", index),
                         .gpu_model = s.model,
                         .gpus = s.gpus,
                         .cpu_milli = int64_t{s.vcpus} * 1000,
                         .memory_mib = int64_t{s.memory_gib} * 1024,
                         .default_mode = catalog::SharingMode::kShared};
}

// The most common share sizes of the default trace, with their pod counts.
constexpr std::array<std::array<int, 2>, 8> kShares{{{810, 1078},
                                                     {470, 750},
                                                     {320, 328},
                                                     {650, 253},
                                                     {250, 200},
                                                     {500, 180},
                                                     {100, 150},
                                                     {50, 139}}};
constexpr std::array<int, 10> kCpus{1000, 2000, 4000, 4000, 6000, 8000, 8000, 12000, 16000, 32000};

}  // namespace

std::vector<fleet::NodeSpec> OpenbLikeNodes(int scale) {
  std::vector<fleet::NodeSpec> specs;
  for (int copy = 0; copy < scale; ++copy) {
    for (const Shape& s : kOpenbShapes) {
      for (int i = 0; i < s.count; ++i) specs.push_back(Spec(s, specs.size()));
    }
  }
  return specs;
}

std::vector<fleet::NodeSpec> EightGpuNodes(int nodes) {
  std::vector<fleet::NodeSpec> specs;
  int total = 0;
  for (const Shape& s : kEightGpuShapes) total += s.count;
  for (int i = 0; i < nodes; ++i) {
    int pick = i % total;
    for (const Shape& s : kEightGpuShapes) {
      if (pick < s.count) {
        specs.push_back(Spec(s, specs.size()));
        break;
      }
      pick -= s.count;
    }
  }
  return specs;
}

Request OpenbLikeRequest(Rng& rng) {
  Request r;
  r.cpu_milli = kCpus[rng.Uniform(kCpus.size())];
  r.memory_mib = r.cpu_milli * 4;  // 4 GiB per vCPU, in MiB per milli-CPU.
  const uint64_t kind = rng.Uniform(100);
  if (kind < 13) return r;
  if (kind < 51) {
    uint64_t total = 0;
    for (const auto& s : kShares) total += static_cast<uint64_t>(s[1]);
    uint64_t pick = rng.Uniform(total);
    for (const auto& s : kShares) {
      if (pick < static_cast<uint64_t>(s[1])) {
        r.gpu_milli = s[0];
        break;
      }
      pick -= static_cast<uint64_t>(s[1]);
    }
    r.gpu_count = 1;
    return r;
  }
  r.gpu_milli = fleet::kMilliPerGpu;
  const uint64_t multi = rng.Uniform(100);
  r.gpu_count = kind < 99 ? 1 : (multi < 21 ? 2 : (multi < 41 ? 4 : 8));
  return r;
}

Status AddNodes(fleet::Fleet& fleet, const std::vector<fleet::NodeSpec>& specs) {
  for (const fleet::NodeSpec& s : specs) {
    Result<fleet::NodeIndex> added = fleet.AddNode(s);
    if (!added.ok()) return added.status();
  }
  return Status::Ok();
}

}  // namespace tessera::sched
