// Billing's costs on the real SQLite store (docs/billing.md):
//   BM_Invoice/1000000     a month's invoice for one tenant over 1,000,000 ledger lines: the
//                          store's scan and the summary into line items, rendered as JSON;
//   BM_Metering            what an instance's ledger line adds to the durable commits of its
//                          life, against its share of the commit that creates it.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>

#include "billing/invoice.h"
#include "billing/meter.h"
#include "common/json.h"
#include "store/store.h"
#include "testing/testing.h"

namespace tessera::billing {
namespace {

constexpr int64_t kDec1 = 1'796'083'200;  // 2026-12-01T00:00:00Z.

store::LedgerRecord Line(int64_t i) {
  store::LedgerRecord l;
  l.tenant = "tenant-000001";
  l.instance = fmt::format("inst-{:06}", i % 5000);
  l.instance_type = i % 3 ? "gpu.1xh100" : "shared.l40s.half";
  l.billing = i % 2 ? "on_demand" : "spot";
  l.start = kDec1 + (i % (30 * kSecondsPerDay - 3600));
  l.end = l.start + 600;
  l.seconds = 600;
  l.rate_micros = 11'061'250;
  l.amount_micros = Amount(Money::FromMicros(l.rate_micros), 600).micros();
  return l;
}

void BM_Invoice(benchmark::State& state) {
  const int64_t lines = state.range(0);
  testing::TempDir dir;
  auto store = std::move(store::OpenSqliteStore(dir.File("data"))).value();
  for (int64_t i = 0; i < lines;) {
    store::Batch b;
    for (int64_t k = 0; k < 50'000 && i < lines; ++k, ++i) b.ledger.push_back(Line(i));
    if (!store->Commit(b).ok()) state.SkipWithError("commit failed");
  }
  for (auto _ : state) {
    Summary sum(GroupBy::kInstance);
    Status s = store->ScanLedger("tenant-000001", kDec1, NextMonthStart(kDec1),
                                 [&](const store::LedgerRecord& l) { sum.Add(l); });
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    std::string text = DumpJson(sum.ToJson());
    benchmark::DoNotOptimize(text);
    if (sum.lines() != lines) state.SkipWithError("lines missing");
  }
  state.SetItemsProcessed(state.iterations() * lines);
}
BENCHMARK(BM_Invoice)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->Iterations(3);

// The durable commits of 32 instances' lives, as the core groups them (created, running,
// deleted, stopped), on two stores side by side: one without ledger lines and one with the line
// each stop adds. The two alternate, so the machine's speed that moment weighs on both alike.
// Counters: create_commit_us, one instance's share of its create commit; metering_us, what its
// ledger line adds to its life; metering_pct, the second in percent of the first.
void BM_Metering(benchmark::State& state) {
  testing::TempDir dir;
  auto plain = std::move(store::OpenSqliteStore(dir.File("plain"))).value();
  auto metered = std::move(store::OpenSqliteStore(dir.File("metered"))).value();
  const std::string doc(900, 'x');  // About an instance record's size.
  using Clock = std::chrono::steady_clock;
  Clock::duration create{}, without{}, with{};
  int64_t n = 0;
  for (auto _ : state) {
    for (const char* step : {"pending", "running", "stopping", "terminated"}) {
      store::Batch b;
      for (int k = 0; k < 32; ++k) {
        const std::string id = fmt::format("inst-{:06}", n + k);
        b.instances.push_back({id, "tenant-000001", step, doc, ""});
        if (step[0] == 'p' || step[0] == 's') {
          b.audit.push_back(
              {0, "2026-12-01T00:00:00Z", "tenant-000001", "POST /v1/instances", id, 201, ""});
        }
      }
      store::Batch m = b;
      if (step[0] == 's') {
        for (int k = 0; k < 32; ++k) m.ledger.push_back(Line(n + k));
      }
      auto commit = [&](store::Store& s, const store::Batch& batch) {
        const auto t0 = Clock::now();
        if (!s.Commit(batch).ok()) state.SkipWithError("commit failed");
        return Clock::now() - t0;
      };
      const bool plain_first = n % 64 == 0;
      const auto a = commit(plain_first ? *plain : *metered, plain_first ? b : m);
      const auto c = commit(plain_first ? *metered : *plain, plain_first ? m : b);
      without += plain_first ? a : c;
      with += plain_first ? c : a;
      if (step[0] == 'p') create += plain_first ? a : c;
    }
    n += 32;
  }
  auto us = [&](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count() / static_cast<double>(n);
  };
  state.counters["create_commit_us"] = us(create);
  state.counters["metering_us"] = us(with - without);
  state.counters["metering_pct"] = 100 * us(with - without) / us(create);
  state.SetItemsProcessed(n);
}
BENCHMARK(BM_Metering)->Unit(benchmark::kMicrosecond)->MinTime(3);

}  // namespace
}  // namespace tessera::billing

BENCHMARK_MAIN();
