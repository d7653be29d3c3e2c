#include "telemetry/sample.h"

#include <fmt/format.h>

#include <set>

#include "common/json.h"

namespace tessera::telemetry {
namespace {

using nlohmann::json;

constexpr size_t kMaxGpus = 64;
constexpr size_t kMaxMig = 64;
constexpr size_t kMaxXids = 256;
constexpr double kMaxReading = 1e15;  // Far above any real reading; rejects nonsense.
constexpr int64_t kMaxCount = int64_t{1} << 53;

void PutOptional(json& j, const char* key, const std::optional<double>& v) {
  if (v) j[key] = *v;
}

std::optional<double> ReadRatio(JsonFields& f, std::string_view key) {
  if (!f.Get(key, false)) return std::nullopt;
  return f.Number(key, 0, 1);
}

}  // namespace

std::optional<HolderReading> ReadHolder(const Telemetry& t, int index, std::string_view mig_profile,
                                        int mig_start) {
  for (const GpuSample& s : t.gpus) {
    if (s.index != index) continue;
    HolderReading r;
    if (s.lost) {
      r.lost = true;
      return r;
    }
    r.gpu_util = s.gpu_util;
    r.fb_used_mib = s.memory_used_mib;
    r.fb_total_mib = s.memory_total_mib;
    r.power_w = s.power_w;
    r.temperature_c = s.temperature_c;
    if (mig_profile.empty()) return r;
    for (const MigSample& m : s.mig) {
      if (m.start != mig_start || m.profile != mig_profile) continue;
      if (m.gr_engine_active) r.gpu_util = *m.gr_engine_active * 100;
      r.fb_used_mib = m.fb_used_mib;
      r.fb_total_mib = m.fb_total_mib;
      return r;
    }
    return std::nullopt;
  }
  return std::nullopt;
}

json ToJson(const Telemetry& t) {
  json gpus = json::array();
  for (const GpuSample& s : t.gpus) {
    json g = {{"index", s.index},
              {"gpu_util", s.gpu_util},
              {"mem_copy_util", s.mem_copy_util},
              {"memory_used_mib", s.memory_used_mib},
              {"memory_total_mib", s.memory_total_mib},
              {"temperature_c", s.temperature_c},
              {"power_w", s.power_w},
              {"sm_clock_mhz", s.sm_clock_mhz},
              {"mem_clock_mhz", s.mem_clock_mhz},
              {"pcie_tx_kib_s", s.pcie_tx_kib_s},
              {"pcie_rx_kib_s", s.pcie_rx_kib_s},
              {"ecc_sbe_total", s.ecc_sbe_total},
              {"ecc_dbe_total", s.ecc_dbe_total},
              {"lost", s.lost}};
    PutOptional(g, "gr_engine_active", s.gr_engine_active);
    PutOptional(g, "tensor_active", s.tensor_active);
    if (!s.mig.empty()) {
      json mig = json::array();
      for (const MigSample& m : s.mig) {
        json d = {{"start", m.start},
                  {"profile", m.profile},
                  {"gi_id", m.gi_id},
                  {"fb_used_mib", m.fb_used_mib},
                  {"fb_total_mib", m.fb_total_mib}};
        PutOptional(d, "gr_engine_active", m.gr_engine_active);
        PutOptional(d, "tensor_active", m.tensor_active);
        mig.push_back(std::move(d));
      }
      g["mig"] = std::move(mig);
    }
    gpus.push_back(std::move(g));
  }
  json xids = json::array();
  for (const XidEvent& x : t.xids) xids.push_back({{"gpu", x.gpu}, {"code", x.code}});
  return {{"gpus", std::move(gpus)}, {"xids", std::move(xids)}};
}

Result<Telemetry> FromJson(const json& j) {
  JsonFields f(j, "telemetry");
  if (!j.is_object()) return Status::InvalidArgument("telemetry: expected an object");
  f.RejectUnknown({"gpus", "xids"});
  Telemetry t;
  const json* gpus = f.Get("gpus");
  if (gpus && (!gpus->is_array() || gpus->size() > kMaxGpus)) {
    f.Fail("gpus", fmt::format("expected a list of at most {} GPUs", kMaxGpus));
  } else if (gpus) {
    std::set<int64_t> seen;
    for (size_t i = 0; i < gpus->size(); ++i) {
      JsonFields g((*gpus)[i], fmt::format("telemetry: gpus[{}]", i));
      if (!(*gpus)[i].is_object()) {
        f.Fail(fmt::format("gpus[{}]", i), "expected an object");
        continue;
      }
      g.RejectUnknown({"index", "gpu_util", "mem_copy_util", "memory_used_mib", "memory_total_mib",
                       "temperature_c", "power_w", "sm_clock_mhz", "mem_clock_mhz", "pcie_tx_kib_s",
                       "pcie_rx_kib_s", "ecc_sbe_total", "ecc_dbe_total", "gr_engine_active",
                       "tensor_active", "mig", "lost"});
      GpuSample s;
      s.index = static_cast<int>(g.Int("index", 0, static_cast<int64_t>(kMaxGpus) - 1));
      if (g.ok() && !seen.insert(s.index).second) g.Fail("index", "given twice");
      s.gpu_util = g.Number("gpu_util", 0, 100, false);
      s.mem_copy_util = g.Number("mem_copy_util", 0, 100, false);
      s.memory_used_mib = g.Int("memory_used_mib", 0, kMaxCount, false);
      s.memory_total_mib = g.Int("memory_total_mib", 0, kMaxCount, false);
      s.temperature_c = g.Number("temperature_c", -273, 1000, false);
      s.power_w = g.Number("power_w", 0, kMaxReading, false);
      s.sm_clock_mhz = g.Int("sm_clock_mhz", 0, kMaxCount, false);
      s.mem_clock_mhz = g.Int("mem_clock_mhz", 0, kMaxCount, false);
      s.pcie_tx_kib_s = g.Int("pcie_tx_kib_s", 0, kMaxCount, false);
      s.pcie_rx_kib_s = g.Int("pcie_rx_kib_s", 0, kMaxCount, false);
      s.ecc_sbe_total = g.Int("ecc_sbe_total", 0, kMaxCount, false);
      s.ecc_dbe_total = g.Int("ecc_dbe_total", 0, kMaxCount, false);
      s.gr_engine_active = ReadRatio(g, "gr_engine_active");
      s.tensor_active = ReadRatio(g, "tensor_active");
      s.lost = g.Bool("lost", false);
      if (const json* mig = g.Get("mig", false)) {
        if (!mig->is_array() || mig->size() > kMaxMig) {
          g.Fail("mig", fmt::format("expected a list of at most {} MIG devices", kMaxMig));
        } else {
          for (size_t d = 0; d < mig->size(); ++d) {
            JsonFields m((*mig)[d], fmt::format("telemetry: gpus[{}].mig[{}]", i, d));
            if (!(*mig)[d].is_object()) {
              g.Fail(fmt::format("mig[{}]", d), "expected an object");
              continue;
            }
            m.RejectUnknown({"start", "profile", "gi_id", "fb_used_mib", "fb_total_mib",
                             "gr_engine_active", "tensor_active"});
            MigSample ms;
            ms.start = static_cast<int>(m.Int("start", 0, 63));
            ms.profile = m.String("profile", false);
            if (ms.profile.size() > 32) m.Fail("profile", "longer than 32 bytes");
            ms.gi_id = static_cast<int>(m.Int("gi_id", -1, 1 << 20, false, -1));
            ms.fb_used_mib = m.Int("fb_used_mib", 0, kMaxCount, false);
            ms.fb_total_mib = m.Int("fb_total_mib", 0, kMaxCount, false);
            ms.gr_engine_active = ReadRatio(m, "gr_engine_active");
            ms.tensor_active = ReadRatio(m, "tensor_active");
            if (!m.ok()) return m.first_error();
            s.mig.push_back(std::move(ms));
          }
        }
      }
      if (!g.ok()) return g.first_error();
      t.gpus.push_back(std::move(s));
    }
  }
  if (const json* xids = f.Get("xids", false)) {
    if (!xids->is_array() || xids->size() > kMaxXids) {
      f.Fail("xids", fmt::format("expected a list of at most {} events", kMaxXids));
    } else {
      for (size_t i = 0; i < xids->size(); ++i) {
        JsonFields x((*xids)[i], fmt::format("telemetry: xids[{}]", i));
        if (!(*xids)[i].is_object()) {
          f.Fail(fmt::format("xids[{}]", i), "expected an object");
          continue;
        }
        x.RejectUnknown({"gpu", "code"});
        XidEvent e;
        e.gpu = static_cast<int>(x.Int("gpu", -1, static_cast<int64_t>(kMaxGpus) - 1));
        e.code = x.Int("code", 0, 1 << 20);
        if (!x.ok()) return x.first_error();
        t.xids.push_back(e);
      }
    }
  }
  if (!f.ok()) return f.first_error();
  return t;
}

}  // namespace tessera::telemetry
