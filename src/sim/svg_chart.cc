#include "sim/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

namespace tessera::sim {

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SeriesColor(size_t i) {
  static constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                             "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

std::vector<double> NiceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;
  // Each tick is k * step, rounded to the step's decimals, so 0.3 prints as 0.3.
  const double scale = step < 1 ? std::pow(10.0, std::ceil(-std::log10(step))) : 1.0;
  for (auto k = static_cast<int64_t>(std::ceil(lo / step - 1e-9));
       static_cast<double>(k) * step <= hi + step * 1e-9; ++k) {
    ticks.push_back(std::round(static_cast<double>(k) * step * scale) / scale);
  }
  return ticks;
}

namespace {

// The y range of the data inside [x_min, x_max], widened to round ticks.
std::pair<double, double> FitY(const ChartSpec& spec) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const ChartSeries& s : spec.series) {
    for (const auto& [x, y] : s.points) {
      if (std::isnan(y) || x < spec.x_min || x > spec.x_max) continue;
      lo = std::min(lo, y);
      hi = std::max(hi, y);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-9) lo -= 0.5, hi += 0.5;
  const std::vector<double> t = NiceTicks(lo, hi);
  const double step = t.size() > 1 ? t[1] - t[0] : 1;
  double y_lo = spec.y_min.value_or(std::floor(lo / step) * step);
  double y_hi = spec.y_max.value_or(std::ceil(hi / step) * step);
  if (!(y_hi > y_lo)) y_hi = y_lo + 1;
  return {y_lo, y_hi};
}

std::string TickLabel(double v) {
  if (std::fabs(v - std::round(v)) < 1e-9) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

}  // namespace

namespace {

// The plot area inside the chart, and the data-to-pixel mapping.
struct Frame {
  double left = 64, right = 150, top = 36, bottom = 52;
  double w = 0, h = 0, pw = 0, ph = 0;
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  double X(double x) const { return left + (x - x_min) / (x_max - x_min) * pw; }
  double Y(double y) const { return top + (1 - (y - y_min) / (y_max - y_min)) * ph; }
};

std::string AxesSvg(const ChartSpec& spec, const Frame& f) {
  std::string svg;
  for (const double t : NiceTicks(f.x_min, f.x_max, 13)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#e5e5e5\"/>"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
        f.X(t), f.top, f.top + f.ph, f.top + f.ph + 16, TickLabel(t));
  }
  for (const double t : NiceTicks(f.y_min, f.y_max, 6)) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e5e5e5\"/>"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        f.left, f.Y(t), f.left + f.pw, f.left - 6, f.Y(t) + 4, TickLabel(t));
  }
  svg += fmt::format(
      "<rect x=\"{0}\" y=\"{1}\" width=\"{2:.1f}\" height=\"{3:.1f}\" fill=\"none\" "
      "stroke=\"#333\"/>\n<text x=\"{4:.1f}\" y=\"{5:.1f}\" text-anchor=\"middle\">{6}</text>\n"
      "<text transform=\"translate(16 {7:.1f}) rotate(-90)\" text-anchor=\"middle\">{8}</text>\n",
      f.left, f.top, f.pw, f.ph, f.left + f.pw / 2, f.h - 12, HtmlEscape(spec.x_label),
      f.top + f.ph / 2, HtmlEscape(spec.y_label));
  return svg;
}

// One series' line, clipped to the plot, and its legend entry at position i.
std::string SeriesSvg(const ChartSeries& s, size_t i, const Frame& f, const std::string& clip) {
  std::string path;
  bool pen_down = false;
  for (const auto& [x, y] : s.points) {
    if (std::isnan(y) || x < f.x_min || x > f.x_max) {
      pen_down = false;
      continue;
    }
    path += fmt::format("{}{:.1f},{:.1f} ", pen_down ? "L" : "M", f.X(x), f.Y(y));
    pen_down = true;
  }
  const double ly = f.top + 10 + 18 * static_cast<double>(i);
  return fmt::format(
      "<path d=\"{0}\" fill=\"none\" stroke=\"{1}\" stroke-width=\"1.8\" "
      "clip-path=\"url(#{2})\"><title>{3}</title></path>\n"
      "<line x1=\"{4:.1f}\" y1=\"{5:.1f}\" x2=\"{6:.1f}\" y2=\"{5:.1f}\" stroke=\"{1}\" "
      "stroke-width=\"3\"/><text x=\"{7:.1f}\" y=\"{8:.1f}\">{3}</text>\n",
      path, HtmlEscape(s.color), clip, HtmlEscape(s.name), f.left + f.pw + 12, ly,
      f.left + f.pw + 32, f.left + f.pw + 38, ly + 4);
}

}  // namespace

std::string LineChartSvg(const ChartSpec& spec) {
  Frame f;
  // The legend's margin widens (and the chart with it) to hold the longest series name.
  size_t longest = 0;
  for (const ChartSeries& s : spec.series) longest = std::max(longest, s.name.size());
  const double legend = std::max(f.right, 40 + 7.0 * static_cast<double>(longest));
  f.w = spec.width + (legend - f.right);
  f.right = legend;
  f.h = spec.height;
  f.pw = f.w - f.left - f.right;
  f.ph = f.h - f.top - f.bottom;
  f.x_min = spec.x_min;
  f.x_max = spec.x_max > spec.x_min ? spec.x_max : spec.x_min + 1;
  std::tie(f.y_min, f.y_max) = FitY(spec);
  const std::string clip = HtmlEscape(spec.id + "-plot");
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n"
      "<title>{2}</title>\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{3}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{2}</text>\n"
      "<clipPath id=\"{4}\"><rect x=\"{3}\" y=\"{5}\" width=\"{6:.1f}\" "
      "height=\"{7:.1f}\"/></clipPath>\n",
      static_cast<int>(std::ceil(f.w)), spec.height, HtmlEscape(spec.title), f.left, clip, f.top,
      f.pw, f.ph);
  svg += AxesSvg(spec, f);
  for (size_t i = 0; i < spec.series.size(); ++i) svg += SeriesSvg(spec.series[i], i, f, clip);
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera::sim
