#include "sim/curve.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/csv.h"

namespace tessera::sim {

double RoundHalfEven(double x) {
  // nearbyint honours the default rounding mode, round-to-nearest-even.
  return std::nearbyint(x);
}

double Round2(double x) {
  const double y = x * 100.0;
  const double frac = y - std::floor(y);
  // Far from a half, x * 100's own rounding error cannot change the answer.
  if (std::fabs(frac - 0.5) > 1e-6) return std::nearbyint(y) / 100.0;
  // Near a half, decide on the exact binary value: glibc's printf rounds it exactly, halves to
  // even, as Python's round(x, 2) does.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  return std::strtod(buf, nullptr);
}

namespace {

struct Accumulator {
  int64_t rows = 0;
  double alloc = 0;  // Sum of per-row rounded allocation %.
  double frag = 0;   // Sum of frag milli.
  double ratio = 0;  // Sum of per-row frag/idle %.

  void Add(const Accumulator& o) {
    rows += o.rows;
    alloc += o.alloc;
    frag += o.frag;
    ratio += o.ratio;
  }
};

}  // namespace

Curve BucketSamples(const std::vector<Sample>& samples, int64_t total_gpus) {
  const auto total = static_cast<double>(total_gpus);
  // Index = arrive %, with room for b + 1 at the last bucket.
  std::vector<Accumulator> acc(kMaxArrivedPct + 2);
  for (const Sample& s : samples) {
    const double arrive = RoundHalfEven(static_cast<double>(s.arrived_milli) / total / 10.0);
    if (arrive < 0 || arrive > kMaxArrivedPct + 1) continue;
    Accumulator& a = acc[static_cast<size_t>(arrive)];
    ++a.rows;
    a.alloc += Round2(static_cast<double>(s.used_milli) / total / 10.0);
    a.frag += s.frag_milli;
    a.ratio += s.idle_milli > 0 ? s.frag_milli / static_cast<double>(s.idle_milli) * 100.0 : 0.0;
  }
  Curve curve(kMaxArrivedPct + 1);
  for (int b = 0; b <= kMaxArrivedPct; ++b) {
    const auto ub = static_cast<size_t>(b);
    Accumulator a = acc[ub];
    if (a.rows == 0) {
      if (b > 0) a.Add(acc[ub - 1]);
      a.Add(acc[ub + 1]);
    }
    CurvePoint& p = curve[ub];
    p.arrived_pct = b;
    if (a.rows == 0) continue;
    const auto n = static_cast<double>(a.rows);
    p.has_data = true;
    p.allocated_pct = Round2(a.alloc / n);
    p.unallocated_pct = 100.0 - p.allocated_pct;
    p.frag_pct = Round2(100.0 * (a.frag / n) / 1000.0 / total);
    p.frag_ratio_pct = a.ratio / n;
  }
  return curve;
}

Curve MeanCurve(const std::vector<Curve>& curves) {
  Curve out(kMaxArrivedPct + 1);
  for (size_t b = 0; b < out.size(); ++b) {
    CurvePoint& p = out[b];
    p.arrived_pct = static_cast<int>(b);
    int n = 0;
    for (const Curve& c : curves) {
      if (b >= c.size() || !c[b].has_data) continue;
      ++n;
      p.allocated_pct += c[b].allocated_pct;
      p.frag_pct += c[b].frag_pct;
      p.frag_ratio_pct += c[b].frag_ratio_pct;
    }
    if (n == 0) continue;
    p.has_data = true;
    p.allocated_pct /= n;
    p.unallocated_pct = 100.0 - p.allocated_pct;
    p.frag_pct /= n;
    p.frag_ratio_pct /= n;
  }
  return out;
}

std::optional<double> UnallocatedAt(const Curve& curve, int pct) {
  if (pct < 0 || static_cast<size_t>(pct) >= curve.size()) return std::nullopt;
  const CurvePoint& p = curve[static_cast<size_t>(pct)];
  if (!p.has_data) return std::nullopt;
  return p.unallocated_pct;
}

std::string CurveCsv(const Curve& curve) {
  std::string out = "arrived_pct,allocated_pct,unallocated_pct,frag_pct,frag_ratio_pct\n";
  for (const CurvePoint& p : curve) {
    if (!p.has_data) {
      out += fmt::format("{},,,,\n", p.arrived_pct);
      continue;
    }
    out += fmt::format("{},{:.4f},{:.4f},{:.4f},{:.4f}\n", p.arrived_pct, p.allocated_pct,
                       p.unallocated_pct, p.frag_pct, p.frag_ratio_pct);
  }
  return out;
}

Status WriteCurveCsv(const Curve& curve, const std::string& path) {
  return WriteFile(path, CurveCsv(curve));
}

}  // namespace tessera::sim
