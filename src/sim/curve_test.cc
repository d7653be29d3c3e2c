#include "sim/curve.h"

#include <gtest/gtest.h>

#include <sstream>

#include "common/csv.h"
#include "testing/testing.h"

namespace tessera::sim {
namespace {

TEST(RoundTest, HalvesGoToEvenLikePython) {
  struct Case {
    double in, want;
  };
  for (const Case& c : {Case{0.5, 0}, Case{1.5, 2}, Case{2.5, 2}, Case{-0.5, 0}, Case{3.49, 3},
                        Case{130.5, 130}, Case{131.5, 132}}) {
    EXPECT_EQ(RoundHalfEven(c.in), c.want) << c.in;
  }
}

TEST(RoundTest, TwoDecimalsDecideOnTheBinaryValueLikePython) {
  // Expected values are Python 3's round(x, 2).
  struct Case {
    double in, want;
  };
  for (const Case& c :
       {Case{0.125, 0.12}, Case{0.375, 0.38}, Case{2.675, 2.67}, Case{1.005, 1.0},
        Case{0.135, 0.14}, Case{95.444, 95.44}, Case{95.446, 95.45}, Case{100.0, 100.0}}) {
    EXPECT_EQ(Round2(c.in), c.want) << c.in;
  }
}

// A 10-GPU cluster: arrived % = arrived_milli / 100.
std::vector<Sample> HandSamples() {
  return {
      {50, 50, 1000, 9950},    // arrive round(0.5) = 0
      {150, 100, 2000, 9900},  // round(1.5) = 2
      {250, 200, 3000, 9800},  // round(2.5) = 2
      {500, 450, 0, 9550},     // 5
  };
}

TEST(BucketTest, MeansRowsPerRoundedArrivedBucketWithNeighbourFallback) {
  const Curve c = BucketSamples(HandSamples(), 10);
  ASSERT_EQ(c.size(), 131u);
  EXPECT_TRUE(c[0].has_data);
  EXPECT_DOUBLE_EQ(c[0].allocated_pct, 0.5);
  EXPECT_DOUBLE_EQ(c[0].unallocated_pct, 99.5);
  EXPECT_DOUBLE_EQ(c[0].frag_pct, 10.0);
  EXPECT_DOUBLE_EQ(c[0].frag_ratio_pct, 1000.0 / 9950 * 100);
  // Bucket 1 is empty: rows with arrive in 0..2 are s1, s2, s3.
  EXPECT_DOUBLE_EQ(c[1].allocated_pct, 1.17);  // round((0.5 + 1 + 2) / 3, 2)
  EXPECT_DOUBLE_EQ(c[1].frag_pct, 20.0);
  EXPECT_DOUBLE_EQ(c[1].frag_ratio_pct,
                   (1000.0 / 9950 * 100 + 2000.0 / 9900 * 100 + 3000.0 / 9800 * 100) / 3);
  EXPECT_DOUBLE_EQ(c[2].allocated_pct, 1.5);  // 1.5 and 2.5 both round to 2.
  EXPECT_DOUBLE_EQ(c[2].frag_pct, 25.0);
  EXPECT_DOUBLE_EQ(c[3].allocated_pct, 1.5);  // Neighbours 2..4: s2, s3.
  EXPECT_DOUBLE_EQ(c[4].allocated_pct, 4.5);  // Neighbours 3..5: s4.
  EXPECT_DOUBLE_EQ(c[5].allocated_pct, 4.5);
  EXPECT_DOUBLE_EQ(c[6].allocated_pct, 4.5);
  EXPECT_FALSE(c[7].has_data);
  EXPECT_FALSE(UnallocatedAt(c, 7).has_value());
  EXPECT_DOUBLE_EQ(*UnallocatedAt(c, 5), 95.5);
  for (int b = 0; b <= 130; ++b) EXPECT_EQ(c[static_cast<size_t>(b)].arrived_pct, b);
}

TEST(BucketTest, ARowWithNoIdleGpuCountsAsZeroRatio) {
  const Curve c = BucketSamples({{1000, 1000, 0, 0}}, 1);
  EXPECT_DOUBLE_EQ(c[100].allocated_pct, 100.0);
  EXPECT_DOUBLE_EQ(c[100].frag_ratio_pct, 0.0);
}

TEST(CurveTest, MeanCurveAveragesOnlyCurvesWithData) {
  Curve a = BucketSamples(HandSamples(), 10);
  Curve b = BucketSamples({{700, 300, 0, 9700}}, 10);  // Data at 6..8 only.
  const Curve m = MeanCurve({a, b});
  EXPECT_DOUBLE_EQ(m[0].allocated_pct, 0.5);
  EXPECT_DOUBLE_EQ(m[6].allocated_pct, (4.5 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(m[6].unallocated_pct, 100 - (4.5 + 3.0) / 2);
  EXPECT_DOUBLE_EQ(m[8].allocated_pct, 3.0);
  EXPECT_FALSE(m[9].has_data);
}

TEST(CurveTest, CsvHasTheFixedHeaderAndOneRowPerBucket) {
  const std::string csv = CurveCsv(BucketSamples(HandSamples(), 10));
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 132u);
  EXPECT_EQ(lines[0], "arrived_pct,allocated_pct,unallocated_pct,frag_pct,frag_ratio_pct");
  EXPECT_EQ(lines[1].substr(0, 33), "0,0.5000,99.5000,10.0000,10.0503");
  EXPECT_EQ(lines[8], "7,,,,");
  EXPECT_EQ(lines[131], "130,,,,");
}

TEST(CurveTest, WriteReportsTheUnwritablePath) {
  const Status s = WriteCurveCsv(Curve(131), "/nonexistent-dir/curve.csv");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/curve.csv"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera::sim
