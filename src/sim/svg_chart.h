// A small SVG line chart, drawn by our own code so that reports are single self-contained files
// that work offline: title, axes with labels and ticks, gridlines, one polyline per series and a
// legend. Points with a NaN y leave a gap in their line.
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::sim {

struct ChartSeries {
  std::string name;
  std::string color;                              // Any SVG colour, e.g. "#1f77b4".
  std::vector<std::pair<double, double>> points;  // (x, y); y NaN = no data.
};

struct ChartSpec {
  std::string id = "chart";  // Unique within the page; names the chart's clip path.
  std::string title;
  std::string x_label;
  std::string y_label;
  double x_min = 0, x_max = 1;
  std::optional<double> y_min, y_max;  // Fitted to the visible data (with round ticks) if unset.
  int width = 720, height = 400;
  std::vector<ChartSeries> series;
};

// The chart as an <svg> element.
std::string LineChartSvg(const ChartSpec& spec);

// Round tick positions covering [lo, hi], about `target` of them, at steps of 1, 2 or 5 x 10^k.
std::vector<double> NiceTicks(double lo, double hi, int target = 6);

// `text` with &, <, >, " and ' escaped for HTML and SVG.
std::string HtmlEscape(std::string_view text);

// A colour for the i-th series, from a fixed palette that stays legible in print.
std::string SeriesColor(size_t i);

}  // namespace tessera::sim
