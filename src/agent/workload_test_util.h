// The workload supervisor tests' fixture (workload_test.cc, workload_uid_test.cc): real processes
// under a supervisor in a temporary work dir, waited for with short bounded polls.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "agent/container_test_support.h"
#include "agent/workload.h"
#include "agent/workload_uids.h"
#include "common/clock.h"
#include "common/json.h"
#include "testing/testing.h"

namespace tessera::agent {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

inline std::string ReadOr(const std::string& path, const std::string& fallback = "") {
  std::ifstream in(path);
  if (!in) return fallback;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `pred` every 10 ms until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& pred, milliseconds timeout = milliseconds(5000)) {
  const auto end = Steady::now() + timeout;
  while (Steady::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

// True while `pid` is a process that has not ended (a zombie counts as ended).
inline bool Alive(pid_t pid) {
  const std::string stat = ReadOr("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' &&
         stat[paren + 2] != 'X';
}

// The pid a workload wrote to `file` in its directory (`echo $$ > pid`), once it is there.
inline pid_t WaitPid(const std::string& path) {
  std::string text;
  WaitFor([&] {
    text = ReadOr(path);
    return !text.empty() && text.back() == '\n';
  });
  return text.empty() ? -1 : std::stoi(text);
}

inline std::optional<WorkloadStatus> Find(WorkloadSupervisor& sup, const std::string& id) {
  for (WorkloadStatus& s : sup.Poll()) {
    if (s.id == id) return s;
  }
  return std::nullopt;
}

inline WorkloadStatus WaitExited(WorkloadSupervisor& sup, const std::string& id,
                                 milliseconds timeout = milliseconds(5000)) {
  std::optional<WorkloadStatus> st;
  WaitFor(
      [&] {
        st = Find(sup, id);
        return st && st->phase == WorkloadPhase::kExited;
      },
      timeout);
  EXPECT_TRUE(st.has_value()) << id << " is unknown";
  if (!st) return {};
  EXPECT_EQ(st->phase, WorkloadPhase::kExited) << id << " did not exit in time";
  return *st;
}

inline WorkloadSpec Spec(std::string id, std::string command) {
  WorkloadSpec s;
  s.id = std::move(id);
  s.command = std::move(command);
  return s;
}

inline std::string Seq(int n) {
  std::string out;
  for (int i = 1; i <= n; ++i) out += std::to_string(i) + "\n";
  return out;
}

class WorkloadTest : public ::testing::Test {
 protected:
  WorkloadSupervisor::Options Opts() const {
    WorkloadSupervisor::Options o;
    o.work_dir = tmp_.path() + "/work";
    o.cgroup_root = "none";
    o.lease_kill_grace = milliseconds(200);
    return o;
  }
  std::unique_ptr<WorkloadSupervisor> OpenSup(const WorkloadSupervisor::Options& o) {
    auto sup = WorkloadSupervisor::Open(o);
    EXPECT_TRUE(sup.ok()) << sup.status().ToString();
    return sup.ok() ? std::move(sup).value() : nullptr;
  }
  std::unique_ptr<WorkloadSupervisor> OpenSup() { return OpenSup(Opts()); }
  // Whatever a test left running (a failed assertion, say) is stopped, so no process outlives
  // the test.
  void TearDown() override {
    if (!fs::exists(tmp_.path() + "/work")) return;
    auto sup = OpenSup();
    ASSERT_TRUE(sup);
    for (const WorkloadStatus& st : sup->Poll()) {
      if (st.phase == WorkloadPhase::kRunning) {
        EXPECT_TRUE(sup->Stop(st.id, milliseconds(0)).ok());
      }
    }
    EXPECT_TRUE(WaitFor([&] {
      for (const WorkloadStatus& st : sup->Poll()) {
        if (st.phase == WorkloadPhase::kRunning) return false;
      }
      return true;
    })) << "a workload outlived its test";
  }
  std::string Dir(const std::string& id) const { return tmp_.path() + "/work/" + id; }
  std::string Control(const std::string& id) const { return tmp_.path() + "/work/.control/" + id; }

  ::tessera::testing::TempDir tmp_;
};

// Tenants' workloads under uids of their own (needs root, as a real agent does). Each attack is
// made by the tenant's own command; what it managed is written to its log as "<attack>:<result>".
class WorkloadUidTest : public WorkloadTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching uids needs root, as the agent has";
    // A range of its own per test: ctest runs these tests side by side, and a uid's processes
    // (its process limit, the sweep of what a tenant left behind) are the whole machine's.
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    first_uid_ =
        1'999'000'000u + 10u * static_cast<uint32_t>(std::hash<std::string>{}(name) % 10'000);
  }
  WorkloadSupervisor::Options UidOpts() const {
    auto o = Opts();
    o.first_uid = first_uid_;
    o.last_uid = first_uid_ + 9;
    return o;
  }
  uint32_t first_uid_ = 0;  // This test's first workload uid.
  WorkloadSpec TenantSpec(std::string id, std::string tenant, std::string command) const {
    WorkloadSpec s = Spec(std::move(id), std::move(command));
    s.tenant = std::move(tenant);
    return s;
  }
  std::string Log(WorkloadSupervisor& sup, const std::string& id) {
    int64_t next = 0;
    auto log = sup.ReadLog(id, 0, 1 << 20, &next);
    return log.ok() ? *log : log.status().ToString();
  }
};

}  // namespace tessera::agent
