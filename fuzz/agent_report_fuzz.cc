// Fuzzes what a node agent sends (docs/agent.md) through the decoders its routes use
// (src/api/agent_codec.cc: ParseRegistration, ParseSync; telemetry::FromJson), then through the
// core's checks of what a node token claims (AgentHub::Register, AgentHub::Sync). The input is
// read as JSON and tried as each kind of body: a registration and its inventory, a sync report
// and its telemetry, workloads and logs, and telemetry alone. The promises:
//   - nothing throws or crashes, and a refusal is one bounded line of valid UTF-8 that names the
//     field (or the list entry) at fault;
//   - what a decoder accepts is within the documented bounds: a wait of at most 30 s, at most 4096
//     entries, a reason of 256 bytes, notes of 512, a log chunk of 256 KiB whose end cannot
//     overflow, GPU indices 0..63 given once, readings finite and in range;
//   - telemetry written back reads back the same;
//   - a registration the core accepts describes at most 16 GPUs of one catalog model with unique,
//     short, printable UUIDs and printable words, and one it refuses adds no node;
//   - a report on a node of two GPUs is refused, naming the field and changing nothing, exactly
//     when its telemetry or an XID names a GPU the node lacks.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "api/codec.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/text.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "fleet/fleet.h"
#include "fuzz/fuzz_util.h"
#include "telemetry/sample.h"

namespace tessera::fuzz {
namespace {

using nlohmann::json;

constexpr int kNodeGpus = 2;  // GPUs of the node that reports are applied to.

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// A refusal of a body names what is wrong: a field ("field 'seq': ..."), an entry of one of its
// lists ("workloads[3]: expected an object"), or the body itself when it is not an object.
void CheckRefusal(const Status& s) {
  CheckMessage(s);
  const std::string& m = s.message();
  if (m.find("field '") != std::string::npos || StartsWith(m, "workloads[") ||
      StartsWith(m, "logs[") || StartsWith(m, "expected an object")) {
    return;
  }
  std::fprintf(stderr, "message: %s\n", m.c_str());
  Check(false, "a refusal names no field");
}

bool IsPrintable(std::string_view s, bool spaces) {
  for (const char c : s) {
    if (c < (spaces ? 0x20 : 0x21) || c > 0x7e) return false;
  }
  return true;
}

void CheckReading(double v, double min, double max, std::string_view what) {
  Check(std::isfinite(v) && v >= min && v <= max, what);
}

void CheckTelemetry(const telemetry::Telemetry& t) {
  Check(t.gpus.size() <= 64 && t.xids.size() <= 256, "too many GPUs or XIDs were accepted");
  std::set<int> seen;
  for (const telemetry::GpuSample& g : t.gpus) {
    Check(g.index >= 0 && g.index < 64, "a GPU index out of 0..63 was accepted");
    Check(seen.insert(g.index).second, "a GPU index given twice was accepted");
    CheckReading(g.gpu_util, 0, 100, "a utilization out of range was accepted");
    CheckReading(g.mem_copy_util, 0, 100, "a utilization out of range was accepted");
    CheckReading(g.temperature_c, -273, 1000, "a temperature out of range was accepted");
    CheckReading(g.power_w, 0, 1e15, "a power out of range was accepted");
    for (const int64_t v : {g.memory_used_mib, g.memory_total_mib, g.sm_clock_mhz, g.mem_clock_mhz,
                            g.pcie_tx_kib_s, g.pcie_rx_kib_s, g.ecc_sbe_total, g.ecc_dbe_total}) {
      Check(v >= 0 && v <= (int64_t{1} << 53), "a count out of range was accepted");
    }
    Check(g.mig.size() <= 64, "too many MIG devices were accepted");
    for (const telemetry::MigSample& m : g.mig) {
      Check(m.start >= 0 && m.start < 64 && m.profile.size() <= 32 && m.gi_id >= -1 &&
                m.fb_used_mib >= 0 && m.fb_total_mib >= 0,
            "a MIG device out of range was accepted");
    }
    for (const auto& r : {g.gr_engine_active, g.tensor_active}) {
      if (r) CheckReading(*r, 0, 1, "a ratio out of 0..1 was accepted");
    }
  }
  for (const telemetry::XidEvent& x : t.xids) {
    Check(x.gpu >= -1 && x.gpu < 64 && x.code >= 0 && x.code <= (1 << 20),
          "an XID out of range was accepted");
  }
  // The server keeps what it accepted and shows it again: written back, it reads back the same.
  const json written = telemetry::ToJson(t);
  auto text = ParseJson(DumpJson(written), "telemetry");
  Check(text.ok(), "written telemetry is not JSON");
  auto again = telemetry::FromJson(*text);
  Check(again.ok(), "written telemetry does not read back");
  Check(telemetry::ToJson(*again) == written, "telemetry read back differs");
}

void CheckSync(const core::AgentSync& s) {
  Check(s.seq >= 0, "a negative seq was accepted");
  Check(s.wait >= Duration::zero() && s.wait <= api::kMaxAgentWait, "a wait over 30 s");
  Check(s.reports.size() + s.pulls.size() <= 4096 && s.logs.size() <= 4096,
        "too many entries were accepted");
  for (const core::AgentReport& r : s.reports) {
    Check(r.state == core::InstanceState::kRunning || r.state == core::InstanceState::kTerminated,
          "a report of another state was accepted");
    Check(r.attempt >= 0 && r.reason.size() <= 256, "a report out of bounds was accepted");
    Check(!r.exit_code || (*r.exit_code >= -1 && *r.exit_code <= 1024), "an exit code");
    Check(!r.port || (*r.port >= 1 && *r.port <= 65535), "a port out of range was accepted");
  }
  for (const core::PullReport& p : s.pulls) {
    Check(p.attempt >= 0 && p.progress.bytes >= 0 && p.progress.total_bytes >= 0 &&
              p.progress.percent >= 0 && p.progress.percent <= 100,
          "a pull's progress out of range was accepted");
  }
  for (const core::WorkloadLog& l : s.logs) {
    Check(l.data.size() <= (256u << 10), "a log chunk over 256 KiB was accepted");
    Check(l.offset >= 0 && l.offset <= INT64_MAX - static_cast<int64_t>(l.data.size()),
          "a log chunk whose end overflows was accepted");
  }
  Check(s.limits_note.size() <= 512 && s.isolation_note.size() <= 512, "a note over 512 bytes");
  if (s.telemetry) CheckTelemetry(*s.telemetry);
}

// A fresh state, on a fake clock and without a store, holding agent node "gpu-1" (not joined).
struct Core {
  FakeClock clock;
  std::unique_ptr<core::State> state = core::NewTestState(&clock, {});
  store::Batch batch;

  Core() {
    Check(state->agent_hub()
              .CreateNode("gpu-1", {}, catalog::SharingMode::kExclusive, "t", batch)
              .ok(),
          "the node cannot be created");
  }
};

// The words of an accepted inventory that become labels and API fields: short and printable.
void CheckInventoryWords(const json& inv) {
  const auto word = [](const json& obj, const char* key, size_t max) {
    const auto it = obj.find(key);
    if (it == obj.end()) return;
    Check(it->is_string() && it->get_ref<const std::string&>().size() <= max &&
              IsPrintable(it->get_ref<const std::string&>(), true),
          "an inventory word that is long or not printable was accepted");
  };
  word(inv, "backend", 32);
  word(inv, "driver_version", 64);
  word(inv, "hostname", 253);
  const auto gpus = inv.find("gpus");
  if (gpus == inv.end()) return;
  for (const json& g : *gpus) {
    word(g, "name", 256);
    word(g, "pci_bus_id", 32);
  }
}

// The core's verdict on a registration that decoded.
void RegisterOnCore(const core::AgentRegistration& reg) {
  Core c;
  const Status s = c.state->agent_hub().Register("gpu-1", reg, c.batch);
  auto found = c.state->fleet().Find("gpu-1");
  if (!s.ok()) {
    CheckMessage(s);
    if (s.message().find("field '") == std::string::npos && !StartsWith(s.message(), "inventory")) {
      std::fprintf(stderr, "message: %s\n", s.message().c_str());
      Check(false, "a refused registration names no field");
    }
    Check(!found.ok(), "a refused registration added the node");
    return;
  }
  Check(found.ok(), "an accepted registration did not add the node");
  Check(!reg.agent_id.empty() && reg.agent_id.size() <= 64 && IsPrintable(reg.agent_id, false),
        "an agent_id that is empty, long or not printable was accepted");
  CheckInventoryWords(reg.inventory);
  const fleet::Node& node = c.state->fleet().node(*found);
  Check(node.gpus.size() <= static_cast<size_t>(fleet::kMaxGpusPerNode), "over 16 GPUs");
  Check(node.gpus.empty() || node.model.valid(), "GPUs of no catalog model were accepted");
  std::set<std::string> uuids;
  for (const fleet::Gpu& g : node.gpus) {
    Check(!g.uuid.empty() && g.uuid.size() <= 96 && IsPrintable(g.uuid, false),
          "a GPU UUID that is empty, long or not printable was accepted");
    Check(uuids.insert(g.uuid).second, "a GPU UUID given twice was accepted");
  }
  (void)DumpJson(api::AgentJson(*c.state, "gpu-1"));
  (void)DumpJson(api::DesiredStateJson(c.state->agent_hub().DesiredState("gpu-1")));
}

// The core's verdict on a report that decoded, sent by the current run of a node of kNodeGpus.
void SyncOnCore(core::AgentSync sync) {
  Core c;
  Check(
      c.state->agent_hub()
          .Register("gpu-1", {"a1", core::TestInventory(kNodeGpus, "H100-80GB", "gpu-1")}, c.batch)
          .ok(),
      "the node cannot join");
  sync.agent_id = "a1";
  bool foreign = false;
  if (sync.telemetry) {
    for (const auto& g : sync.telemetry->gpus) foreign |= g.index >= kNodeGpus;
    for (const auto& x : sync.telemetry->xids) foreign |= x.gpu >= kNodeGpus;
  }
  const json before = api::AgentJson(*c.state, "gpu-1");
  c.state->BeginRound();
  auto r = c.state->agent_hub().Sync("gpu-1", sync, c.batch);
  c.state->EndRound(c.batch);
  if (!foreign) {
    if (!r.ok()) std::fprintf(stderr, "message: %s\n", r.status().message().c_str());
    Check(r.ok(), "a report on the node's own GPUs was refused");
    (void)DumpJson(api::AgentJson(*c.state, "gpu-1"));
    return;
  }
  Check(!r.ok(), "telemetry or an XID of a GPU the node lacks was accepted");
  CheckMessage(r.status());
  Check(StartsWith(r.status().message(), "field 'telemetry."), "the refusal names no field");
  Check(api::AgentJson(*c.state, "gpu-1") == before, "a refused report changed the node");
}

void Register(const json& body) {
  auto r = api::ParseRegistration(body);
  if (!r.ok()) return CheckRefusal(r.status());
  Check(r->inventory.is_object(), "a registration without an inventory object was accepted");
  RegisterOnCore(*r);
}

void Sync(json body) {
  auto r = api::ParseSync(body);
  if (!r.ok()) return CheckRefusal(r.status());
  CheckSync(*r);
  SyncOnCore(std::move(*r));
}

// A report of the current run carrying `value` as its `key`.
json SyncWith(const char* key, json value) {
  return {{"protocol", 1}, {"agent_id", "a1"}, {"seq", 1}, {"generation", 0}, {key, value}};
}

json AsList(const json& v) { return v.is_array() ? v : json::array({v}); }

void FuzzBody(const std::string& text) {
  auto body = ParseJson(text, "body");
  if (!body.ok()) return CheckMessage(body.status());
  Register(*body);
  Register({{"protocol", 1}, {"agent_id", "a1"}, {"inventory", *body}});
  Sync(*body);
  Sync(SyncWith("telemetry", *body));
  Sync(SyncWith("workloads", AsList(*body)));
  Sync(SyncWith("logs", AsList(*body)));
  auto t = telemetry::FromJson(*body);
  if (!t.ok()) {
    CheckMessage(t.status());
    Check(StartsWith(t.status().message(), "telemetry: "), "a telemetry error is not named so");
    return;
  }
  CheckTelemetry(*t);
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The core logs every node that joins; a fuzzer joins thousands a second.
  static const bool quiet = (spdlog::set_level(spdlog::level::off), true);
  (void)quiet;
  tessera::fuzz::FuzzBody(tessera::fuzz::AsText(data, size));
  return 0;
}
