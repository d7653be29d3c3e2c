// Billing's pure parts: metering arithmetic to the micro-dollar, calendar months, reservations'
// monthly lines, summaries whose totals are the sums of their lines, CSV that parses back, and
// the request codecs' errors.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "billing/budget.h"
#include "billing/invoice.h"
#include "billing/meter.h"
#include "billing/recommend.h"
#include "billing/reservation.h"
#include "catalog/catalog.h"
#include "common/json.h"

namespace tessera::billing {
namespace {

using nlohmann::json;

constexpr int64_t kNov30 = 1'795'996'800;  // 2026-11-30T00:00:00Z.
constexpr int64_t kDec1 = kNov30 + kSecondsPerDay;

Money Dollars(const char* text) { return *Money::Parse(text); }

const Payer kPayer{"tenant-000001", "inst-000001", "gpu.1xh100", "on_demand", ""};

std::vector<store::LedgerRecord> Closed(Meter m, int64_t end, Ending how) {
  std::vector<store::LedgerRecord> out;
  Close(m, kPayer, end, how, out);
  return out;
}

TEST(CalendarTest, MonthsAndDays) {
  EXPECT_EQ(MonthName(kNov30), "2026-11");
  EXPECT_EQ(MonthName(kDec1), "2026-12");
  EXPECT_EQ(NextMonthStart(kNov30), kDec1);
  EXPECT_EQ(MonthStart(kDec1 + 12345), kDec1);
  EXPECT_EQ(ParseMonth("2026-12"), kDec1);
  EXPECT_EQ(NextMonthStart(*ParseMonth("2028-02")) - *ParseMonth("2028-02"), 29 * kSecondsPerDay);
  for (const char* bad : {"2026-13", "2026-00", "26-12", "2026/12", "2026-1x", ""}) {
    EXPECT_FALSE(ParseMonth(bad)) << bad;
  }
  EXPECT_EQ(DayStart(kDec1 + 5), kDec1);
  EXPECT_EQ(DayStart(kDec1 - 1), kNov30);
}

TEST(MeterTest, ACustomerEndPaysAtLeastAMinutePerStart) {
  const Meter m{kNov30 + 100, 0, Dollars("3.60")};  // 0.001 USD a second.
  auto lines = Closed(m, kNov30 + 130, Ending::kCustomer);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 60);
  EXPECT_EQ(lines[0].amount_micros, 60'000);
  EXPECT_EQ(lines[0].note, "minimum");
  EXPECT_EQ(lines[0].start, kNov30 + 100);
  EXPECT_EQ(lines[0].end, kNov30 + 130);
  // Past the minute, per second.
  lines = Closed(m, kNov30 + 225, Ending::kCustomer);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 125);
  EXPECT_EQ(lines[0].amount_micros, 125'000);
  EXPECT_EQ(lines[0].note, "");
  // A start that ends the moment it began still pays its minute.
  lines = Closed(m, kNov30 + 100, Ending::kCustomer);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 60);
}

TEST(MeterTest, ThePlatformEndingAnIntervalBillsItToTheSecond) {
  const Meter m{kNov30 + 100, 0, Dollars("3.60")};
  auto lines = Closed(m, kNov30 + 120, Ending::kPlatform);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 20);
  EXPECT_EQ(lines[0].amount_micros, 20'000);
  EXPECT_EQ(lines[0].note, "ended by the platform");
}

TEST(MeterTest, IntervalsAreCutAtMidnightAndTheMinuteCountsTheWholeStart) {
  // 23:59:50 to 00:00:10 next day (and next month): 10 s in November, 10 s in December plus the
  // minimum's top-up of 40 s on the start's last line.
  Meter m{kDec1 - 10, 0, Dollars("3.60")};
  auto lines = Closed(m, kDec1 + 10, Ending::kCustomer);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].start, kDec1 - 10);
  EXPECT_EQ(lines[0].end, kDec1);
  EXPECT_EQ(lines[0].seconds, 10);
  EXPECT_EQ(lines[1].start, kDec1);
  EXPECT_EQ(lines[1].seconds, 50);
  EXPECT_EQ(lines[1].note, "minimum");
  // The same start rolled at midnight first: the roll writes November's 10 s; the close then
  // writes December's with the same top-up. Lines and money are the same either way.
  std::vector<store::LedgerRecord> rolled;
  Close(m, kPayer, kDec1, Ending::kRoll, rolled);
  EXPECT_EQ(m.since, kDec1);
  EXPECT_EQ(m.billed, 10);
  Close(m, kPayer, kDec1 + 10, Ending::kCustomer, rolled);
  ASSERT_EQ(rolled.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rolled[i].start, lines[i].start);
    EXPECT_EQ(rolled[i].seconds, lines[i].seconds);
    EXPECT_EQ(rolled[i].amount_micros, lines[i].amount_micros);
  }
  // Three days in one go: one line per day.
  lines = Closed(Meter{kNov30 + 3600, 0, Dollars("1")}, kDec1 + 2 * kSecondsPerDay + 60,
                 Ending::kCustomer);
  ASSERT_EQ(lines.size(), 4u);
  int64_t seconds = 0;
  for (const auto& l : lines) {
    EXPECT_EQ(DayStart(l.start), DayStart(l.end - 1)) << "a line never crosses midnight";
    seconds += l.seconds;
  }
  EXPECT_EQ(seconds, 2 * kSecondsPerDay + 60 + (kSecondsPerDay - 3600));
}

TEST(MeterTest, AmountsRoundHalfToEvenToTheMicroDollar) {
  // 0.000001 USD an hour for 1800 s is half a micro-dollar: rounds to even (0); 5400 s is 1.5:
  // rounds to 2.
  EXPECT_EQ(Amount(Money::FromMicros(1), 1800).micros(), 0);
  EXPECT_EQ(Amount(Money::FromMicros(1), 5400).micros(), 2);
  // The catalog's 8xH100 on-demand price for one second.
  EXPECT_EQ(Amount(Dollars("98.32"), 1).micros(), 27'311);
}

// Two gpu.1xh100 units for a year from `start`, at the catalog's one-year rate.
Reservation TwoH100sForAYear(int64_t start) {
  Reservation r;
  r.id = "resv-000001";
  r.tenant = "tenant-000001";
  r.instance_type = "gpu.1xh100";
  r.count = 2;
  r.term = "1y";
  r.start = start;
  r.end = start + *TermSeconds("1y");
  r.rate = Dollars("7.672959");
  return r;
}

TEST(ReservationTest, TheWholeTermIsBilledInMonthlyLines) {
  const Reservation r = TwoH100sForAYear(kNov30 + 12 * 3600);  // From Nov 30 noon.
  std::vector<store::LedgerRecord> lines;
  ReservationLines(r, 0, INT64_MAX, lines);
  ASSERT_EQ(lines.size(), 13u) << "half a day of November, 11 whole months, then the rest";
  EXPECT_EQ(lines[0].start, r.start);
  EXPECT_EQ(lines[0].seconds, 2 * 12 * 3600);
  EXPECT_EQ(lines[1].start, kDec1);
  EXPECT_EQ(lines.back().end, r.end);
  int64_t unit_seconds = 0;
  for (const auto& l : lines) {
    unit_seconds += l.seconds;
    EXPECT_EQ(l.amount_micros, Amount(r.rate, l.seconds).micros());
    EXPECT_EQ(l.billing, "reserved");
  }
  EXPECT_EQ(unit_seconds, 2 * *TermSeconds("1y"));
  // Lines are counted where they start: December alone.
  lines.clear();
  ReservationLines(r, kDec1, NextMonthStart(kDec1), lines);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 2 * 31 * kSecondsPerDay);
  // Before its start, nothing.
  lines.clear();
  ReservationLines(r, 0, r.start, lines);
  EXPECT_TRUE(lines.empty());
  // What is owed on Dec 10: November's half day and nine days of December, nothing later.
  lines.clear();
  ReservationLines(r, 0, INT64_MAX, lines, kDec1 + 9 * kSecondsPerDay);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].seconds, 2 * 9 * kSecondsPerDay) << "a term is billed as it passes";
}

// Parses the CSV a summary writes: every item row's amount, and the total row's.
std::pair<std::vector<Money>, Money> ParseCsv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // Header.
  std::vector<Money> amounts;
  Money total;
  while (std::getline(in, line)) {
    const std::string amount = line.substr(line.rfind(',') + 1);
    if (line.rfind("total,", 0) == 0) {
      total = *Money::Parse(amount);
    } else {
      amounts.push_back(*Money::Parse(amount));
    }
  }
  return {amounts, total};
}

TEST(SummaryTest, TotalsAreTheExactSumOfTheLinesAndTheCsvParsesBack) {
  std::vector<store::LedgerRecord> lines;
  Meter a{kNov30, 0, Dollars("11.06125")};
  Close(a, kPayer, kNov30 + 7, Ending::kPlatform, lines);
  Payer share = kPayer;
  share.instance = "inst-000002";
  share.instance_type = "shared.l40s.half";
  share.billing = "spot";
  Meter b{kNov30 + 5, 0, Dollars("0.333333")};
  Close(b, share, kDec1 + 4000, Ending::kCustomer, lines);
  for (GroupBy by : {GroupBy::kInstance, GroupBy::kType, GroupBy::kBilling, GroupBy::kDay}) {
    Summary s(by);
    Money sum;
    for (const auto& l : lines) {
      s.Add(l);
      sum += Money::FromMicros(l.amount_micros);
    }
    EXPECT_EQ(s.total(), sum);
    Money items;
    for (const Item& i : s.Items()) items += i.amount;
    EXPECT_EQ(items, sum);
    const auto [amounts, total] = ParseCsv(s.ToCsv());
    Money csv_sum;
    for (Money m : amounts) csv_sum += m;
    EXPECT_EQ(total, sum);
    EXPECT_EQ(csv_sum, sum);
    EXPECT_EQ(amounts.size(), s.Items().size());
    // The JSON says the same, and is the same bytes when built again.
    Summary again(by);
    for (const auto& l : lines) again.Add(l);
    EXPECT_EQ(DumpJson(s.ToJson()), DumpJson(again.ToJson()));
    EXPECT_EQ(s.ToJson()["total_usd"], Usd(sum));
  }
  Summary by_day(GroupBy::kDay);
  for (const auto& l : lines) by_day.Add(l);
  ASSERT_EQ(by_day.Items().size(), 2u);
  EXPECT_EQ(by_day.Items()[0].day, "2026-11-30");
  EXPECT_EQ(by_day.Items()[1].day, "2026-12-01");
}

// "Seconds" are time that ran: a reservation's term, used or not, is counted apart as unit-seconds,
// so a tenant who reserved 2 units and ran 10 minutes on one sees 600 seconds, not a month.
TEST(SummaryTest, SecondsAreTimeOfUseAndAReservationsTermIsCountedApart) {
  const Reservation r = TwoH100sForAYear(kNov30);
  std::vector<store::LedgerRecord> lines;
  ReservationLines(r, kNov30, kDec1, lines);
  ASSERT_EQ(lines.size(), 1u);
  Payer reserved = kPayer;
  reserved.billing = "reserved";
  reserved.reservation = r.id;
  Meter m{kNov30 + 60, 0, Money()};
  Close(m, reserved, kNov30 + 660, Ending::kCustomer, lines);
  for (GroupBy by : {GroupBy::kType, GroupBy::kBilling, GroupBy::kDay}) {
    Summary s(by);
    for (const auto& l : lines) s.Add(l);
    ASSERT_EQ(s.Items().size(), 1u);
    EXPECT_EQ(s.Items()[0].seconds, 600);
    EXPECT_EQ(s.Items()[0].reserved_unit_seconds, 2 * kSecondsPerDay);
    EXPECT_EQ(s.ToJson()["items"][0]["seconds"], 600);
    EXPECT_EQ(s.ToJson()["items"][0]["reserved_unit_seconds"], 2 * kSecondsPerDay);
    const std::string csv = s.ToCsv();
    EXPECT_NE(csv.find(fmt::format(",600,{},", 2 * kSecondsPerDay)), std::string::npos) << csv;
  }
  Summary by_instance(GroupBy::kInstance);
  for (const auto& l : lines) by_instance.Add(l);
  ASSERT_EQ(by_instance.Items().size(), 2u);
  for (const Item& i : by_instance.Items()) {
    EXPECT_EQ(i.instance.empty() ? i.reserved_unit_seconds : i.seconds,
              i.instance.empty() ? 2 * kSecondsPerDay : 600);
    EXPECT_EQ(i.instance.empty() ? i.seconds : i.reserved_unit_seconds, 0);
  }
}

TEST(CodecTest, BadRequestsNameTheField) {
  struct Case {
    json body;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {{{"count", 1}, {"term", "1y"}}, "instance_type"},
           {{{"instance_type", "gpu.1xh100"}, {"count", 0}, {"term", "1y"}}, "count"},
           {{{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "2y"}}, "term"},
           {{{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "1y"}, {"start", "soon"}},
            "start"},
           {{{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "1y"}, {"x", 1}}, "x"},
       }) {
    auto r = ParseReservationRequest(c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status().message();
  }
  auto ok = ParseBudget({{"monthly_usd", "250.50"}, {"hard_stop", true}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->monthly, Dollars("250.50"));
  EXPECT_TRUE(ok->hard_stop);
  EXPECT_EQ(ParseBudget({{"monthly_usd", 300}})->monthly, Dollars("300"));
  for (const json& bad : {json{{"monthly_usd", 250.5}}, json{{"monthly_usd", "-1"}},
                          json{{"monthly_usd", "0"}}, json{{"monthly_usd", "1.0000001"}},
                          json{{"monthly_usd", true}}, json{{"hard_stop", true}}}) {
    auto r = ParseBudget(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("monthly_usd"), std::string::npos) << r.status().message();
  }
  EXPECT_NE(ParseBudget({{"monthly_usd", 250.5}}).status().message().find("decimal string"),
            std::string::npos);
}

const catalog::Catalog& Catalog() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

Recommendation Ask(const std::map<std::string, std::string>& params,
                   const std::set<std::string>& busy = {}) {
  auto q = ParseRecommendQuery([&](std::string_view name) -> const std::string* {
    auto it = params.find(std::string(name));
    return it == params.end() ? nullptr : &it->second;
  });
  EXPECT_TRUE(q.ok()) << q.status().message();
  return Recommend(Catalog(), *q,
                   [&](const catalog::InstanceType& t, int) { return !busy.contains(t.id); });
}

TEST(RecommendTest, ACaseTable) {
  struct Case {
    std::map<std::string, std::string> params;
    std::string first_type, first_billing, reason;  // The best offer and words of its reason.
  };
  for (const Case& c : std::vector<Case>{
           {{{"workload", "inference"}, {"gpu_memory_gib", "24"}},
            "gpu.1xl4",
            "on_demand",
            "24 GB fits on L4-24GB (24 GB a GPU), the cheapest per hour"},
           {{{"workload", "training"},
             {"model_params_b", "13"},
             {"gpus", "8"},
             {"nvlink", "true"},
             {"months", "36"}},
            "gpu.8xa100-40gb",
            "reserved_3y",
            "8-GPU training: NVLink island of 8; 36 months: a 3-year reservation saves"},
           {{{"workload", "fine-tuning"},
             {"model_params_b", "7"},
             {"interruptible", "true"},
             {"hours_per_month", "100"}},
            "gpu.1xl4",
            "spot",
            "20 GB fits on L4-24GB (24 GB a GPU); interruptible: spot saves 44%"},
           {{{"workload", "inference"}, {"gpu_memory_gib", "5"}},
            "gpu.1xt4",
            "on_demand",
            "5 GB fits on T4-16GB (16 GB a GPU), the cheapest per hour"},
       }) {
    const Recommendation r = Ask(c.params);
    ASSERT_FALSE(r.offers.empty()) << r.why_none;
    EXPECT_EQ(r.offers[0].instance_type, c.first_type) << DumpJson(ToJson(r));
    EXPECT_EQ(r.offers[0].billing, c.first_billing) << DumpJson(ToJson(r));
    EXPECT_NE(r.offers[0].reason.find(c.reason), std::string::npos) << r.offers[0].reason;
    for (size_t i = 1; i < r.offers.size(); ++i) {
      EXPECT_LE(r.offers[i - 1].monthly, r.offers[i].monthly) << "cheapest first";
    }
  }
  // Training and fine-tuning never get a MIG slice or a share.
  for (const Offer& o : Ask({{"workload", "training"}, {"gpu_memory_gib", "5"}}).offers) {
    EXPECT_EQ(o.instance_type.rfind("gpu.", 0), 0u) << o.instance_type;
  }
  // What the fleet cannot place now says it would wait.
  const Recommendation busy =
      Ask({{"workload", "inference"}, {"gpu_memory_gib", "24"}}, {"gpu.1xl4"});
  EXPECT_FALSE(busy.offers[0].placeable_now);
  EXPECT_NE(busy.offers[0].reason.find("would wait"), std::string::npos);
}

TEST(RecommendTest, WhatTheFleetOffersComesFirstAndTheRestSayItIsNotOfferedHere) {
  auto q = ParseRecommendQuery([](std::string_view name) -> const std::string* {
    static const std::map<std::string, std::string> params = {{"workload", "inference"},
                                                              {"gpu_memory_gib", "24"}};
    auto it = params.find(std::string(name));
    return it == params.end() ? nullptr : &it->second;
  });
  ASSERT_TRUE(q.ok());
  // A fleet of H100s only: the L4 (cheapest) is not here.
  const Recommendation r = Recommend(
      Catalog(), *q, [](const catalog::InstanceType&, int) { return true; },
      [](const catalog::InstanceType& t) { return t.gpu_model == "H100-80GB"; });
  ASSERT_FALSE(r.offers.empty());
  EXPECT_TRUE(r.offers[0].offered_here);
  EXPECT_EQ(Catalog().FindInstanceType(r.offers[0].instance_type)->gpu_model, "H100-80GB");
  bool seen_elsewhere = false;
  for (const Offer& o : r.offers) {
    if (!o.offered_here) {
      seen_elsewhere = true;
      EXPECT_NE(o.reason.find("not offered here"), std::string::npos) << o.reason;
      EXPECT_FALSE(o.placeable_now);
    } else {
      EXPECT_FALSE(seen_elsewhere) << "offered ones first: " << o.instance_type;
    }
  }
  EXPECT_TRUE(seen_elsewhere) << DumpJson(ToJson(r));
  EXPECT_EQ(ToJson(r)["offers"][0]["offered_here"], true);
}

TEST(RecommendTest, ALargeModelIsNeverSpreadOverManySmallGpusWithOnlyTheNetworkBetween) {
  const Recommendation r = Ask({{"workload", "training"}, {"model_params_b", "30"}});
  ASSERT_FALSE(r.offers.empty()) << r.why_none;
  for (const Offer& o : r.offers) {
    const catalog::InstanceType* t = Catalog().FindInstanceType(o.instance_type);
    ASSERT_NE(t, nullptr);
    if (o.units > 1 && o.gpus > 8) {
      EXPECT_TRUE(t->nvlink && o.gpus / o.units >= 4) << o.instance_type << " x " << o.units;
    }
    if (o.units > 1) {
      EXPECT_NE(o.reason.find("over " + std::to_string(o.units) + " instances"), std::string::npos)
          << o.reason;
    }
  }
}

TEST(RecommendTest, NothingFitsSaysWhy) {
  Recommendation r = Ask({{"workload", "inference"}, {"gpu_memory_gib", "500"}, {"gpus", "1"}});
  EXPECT_TRUE(r.offers.empty());
  EXPECT_NE(r.why_none.find("the largest is H200-141GB"), std::string::npos) << r.why_none;
  r = Ask({{"workload", "training"}, {"model_params_b", "70"}, {"gpus", "8"}, {"nvlink", "1"}});
  EXPECT_TRUE(r.offers.empty()) << "70B parameters need over 1 TB to train: not on 8 GPUs";
  r = Ask({{"workload", "training"}, {"model_params_b", "7"}, {"budget_usd", "100"}});
  EXPECT_TRUE(r.offers.empty());
  EXPECT_NE(r.why_none.find("over the budget of 100.00"), std::string::npos) << r.why_none;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"workload", "mining"},
                                                        {"gpus", "0"},
                                                        {"gpus", "1.5"},
                                                        {"months", "x"},
                                                        {"hours_per_month", "800"},
                                                        {"budget_usd", "-5"},
                                                        {"nvlink", "maybe"},
                                                        {"gpu_memory_gib", "nan"}}) {
    const std::string& param = name;
    const std::string& text = value;
    auto q = ParseRecommendQuery(
        [&](std::string_view n) -> const std::string* { return n == param ? &text : nullptr; });
    ASSERT_FALSE(q.ok()) << name << "=" << value;
    EXPECT_NE(q.status().message().find("'" + name + "'"), std::string::npos)
        << q.status().message();
  }
}

}  // namespace
}  // namespace tessera::billing
