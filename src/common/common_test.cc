#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "common/csv.h"
#include "common/ids.h"
#include "common/money.h"
#include "testing/testing.h"

namespace tessera {
namespace {

TEST(MoneyTest, ParsesAndFormatsExactly) {
  struct Case {
    const char* text;
    int64_t micros;
    const char* printed;
  };
  const Case cases[] = {
      {"3.06", 3'060'000, "3.06"},        {"0", 0, "0.00"},
      {"12", 12'000'000, "12.00"},        {"0.000001", 1, "0.000001"},
      {"-1.5", -1'500'000, "-1.50"},      {"98.32", 98'320'000, "98.32"},
      {"21.9576", 21'957'600, "21.9576"}, {"0.10", 100'000, "0.10"},
  };
  for (const auto& c : cases) {
    auto m = Money::Parse(c.text);
    ASSERT_TRUE(m.ok()) << c.text << ": " << m.status().ToString();
    EXPECT_EQ(m->micros(), c.micros) << c.text;
    EXPECT_EQ(m->ToString(), c.printed) << c.text;
  }
}

TEST(MoneyTest, RejectsWhatIsNotExact) {
  for (const char* text : {"", "-", "1.", ".5", "1.0000001", "1e3", "abc", "1,5", " 1", "1 ",
                           "99999999999999999999"}) {
    auto m = Money::Parse(text);
    EXPECT_FALSE(m.ok()) << text;
    if (!m.ok()) {
      EXPECT_NE(m.status().message().find(text), std::string::npos);
    }
  }
}

// Found with the catalog fuzz target: a price whose whole part fits but whose fraction carries it
// past the int64 range aborted the process (catalog validate, the server's start) instead of
// being an error.
TEST(MoneyTest, TheLargestAmountsParseAndOneMicroMoreIsAnError) {
  EXPECT_EQ(Money::Parse("9223372036854.775807")->micros(), INT64_MAX);
  EXPECT_EQ(Money::Parse("-9223372036854.775808")->micros(), INT64_MIN);
  for (const char* text :
       {"9223372036854.775808", "9223372036854.999999", "-9223372036854.775809"}) {
    auto m = Money::Parse(text);
    ASSERT_FALSE(m.ok()) << text;
    EXPECT_EQ(m.status().message(), fmt::format("'{}' is not a money amount: too large", text));
  }
}

TEST(MoneyTest, MulDivRoundsHalfToEven) {
  const Money price = *Money::Parse("3.06");                 // per hour
  EXPECT_EQ(price.MulDiv(90, 3600).ToString(), "0.0765");    // 90 s
  EXPECT_EQ(Money::FromMicros(5).MulDiv(1, 2).micros(), 2);  // 2.5 -> 2
  EXPECT_EQ(Money::FromMicros(7).MulDiv(1, 2).micros(), 4);  // 3.5 -> 4
  EXPECT_EQ(Money::FromMicros(-7).MulDiv(1, 2).micros(), -4);
  EXPECT_EQ((price * 3 + Money::FromCents(2)).ToString(), "9.20");
  EXPECT_EQ(Money::FromMicros(1'234'999).RoundedToCents().ToString(), "1.23");
  EXPECT_EQ(Money::FromMicros(1'235'000).RoundedToCents().ToString(), "1.24");
}

TEST(ClockTest, FakeClockMovesOnlyWhenTold) {
  FakeClock clock;
  const Time t0 = clock.Now();
  EXPECT_EQ(clock.Now(), t0);
  clock.Advance(std::chrono::seconds(90));
  EXPECT_EQ(clock.Now() - t0, std::chrono::seconds(90));
  EXPECT_EQ(FormatRfc3339(t0), "2026-01-01T00:00:00Z");
}

TEST(ClockTest, Rfc3339RoundTripsAndRejectsJunk) {
  auto t = ParseRfc3339("2026-11-30T01:27:33.250Z");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(FormatRfc3339(*t), "2026-11-30T01:27:33.250Z");
  auto offset = ParseRfc3339("2026-11-30T03:27:33+02:00");
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(FormatRfc3339(*offset), "2026-11-30T01:27:33Z");
  for (const char* bad : {"", "2026-13-01T00:00:00Z", "2026-11-30 01:27:33Z", "2026-11-30T01:27:33",
                          "2026-02-30T00:00:00Z"}) {
    EXPECT_FALSE(ParseRfc3339(bad).ok()) << bad;
  }
}

TEST(IdsTest, TypedIdsAreReadableAndValidated) {
  EXPECT_EQ(InstanceId::FromNumber(42).str(), "inst-000042");
  EXPECT_TRUE(NodeId::Parse("node-a100-03").ok());
  EXPECT_FALSE(NodeId::Parse("inst-000042").ok());
  EXPECT_FALSE(NodeId::Parse("node-").ok());
  EXPECT_FALSE(NodeId::Parse("node-A100").ok());
  EXPECT_FALSE(NodeId::Parse("node-a/b").ok());
}

TEST(CsvTest, ReadsRowsAndNamesTheLineOfABrokenOne) {
  testing::TempDir dir;
  const std::string path =
      dir.Write("n.csv", "sn,cpu,model\r\na,1000,T4\n\nb,x,T4\nc,1,T4,extra\n");
  auto reader = CsvReader::Open(path);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(reader->ReadHeader({"sn", "cpu"}, {"model"}).ok());
  ASSERT_TRUE(reader->Next());
  EXPECT_EQ(reader->Field("sn"), "a");
  EXPECT_EQ(*reader->Int("cpu"), 1000);
  EXPECT_EQ(reader->Field("model"), "T4");
  ASSERT_TRUE(reader->Next());
  auto bad = reader->Int("cpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), path + ":4: column 'cpu': 'x' is not an integer");
  EXPECT_FALSE(reader->Next());
  EXPECT_EQ(reader->status().message(), path + ":5: expected 3 fields, found 4");
}

TEST(CsvTest, HeaderErrorsNameTheColumn) {
  CsvReader missing("f.csv", "sn,gpu\n");
  EXPECT_EQ(missing.ReadHeader({"sn", "cpu_milli"}).message(),
            "f.csv:1: header lacks column 'cpu_milli' (expected sn,cpu_milli)");
  CsvReader unknown("f.csv", "sn,cpu_milli,colour\n");
  EXPECT_EQ(unknown.ReadHeader({"sn", "cpu_milli"}).message(),
            "f.csv:1: unexpected column 'colour' in header");
  EXPECT_FALSE(CsvReader::Open("/nonexistent/x.csv").ok());
}

// Found by the csv fuzzer: Field() reads the first column of a name, so the second "cpu_milli"
// was ignored without a word.
TEST(CsvTest, AColumnNamedTwiceIsAnError) {
  CsvReader twice("f.csv", "sn,cpu_milli,model, cpu_milli\na,1,T4,2\n");
  EXPECT_EQ(twice.ReadHeader({"sn", "cpu_milli"}, {"model"}).message(),
            "f.csv:1: column 'cpu_milli' appears twice in header");
}

TEST(CsvTest, QuotedFields) {
  CsvReader r("q.csv", "a,b\n\"x,y\",\"say \"\"hi\"\"\"\n");
  ASSERT_TRUE(r.ReadHeader({"a", "b"}).ok());
  ASSERT_TRUE(r.Next());
  EXPECT_EQ(r.Field("a"), "x,y");
  EXPECT_EQ(r.Field("b"), "say \"hi\"");
}

}  // namespace
}  // namespace tessera
