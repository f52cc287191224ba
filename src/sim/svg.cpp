#include "sim/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gpupool::sim {

namespace {

// The openb plot's layout and colours (bench/run_openb_matrix.sh).
constexpr int kW = 720, kH = 460, kL = 60, kR = 150, kT = 40, kB = 50;
const char* const kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd",
                               "#d62728", "#8c564b", "#e377c2"};

std::string Num(double v, int decimals = 1) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A tick label: as few decimals as the step needs.
std::string Tick(double v, double step) {
  int decimals = 0;
  while (decimals < 4 && std::fabs(step * std::pow(10.0, decimals) -
                                   std::round(step * std::pow(10.0, decimals))) > 1e-9) {
    ++decimals;
  }
  return Num(v, decimals);
}

std::string Header(const std::string& title) {
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(kW) +
                  "\" height=\"" + std::to_string(kH) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + std::to_string(kL) + "\" y=\"22\" font-size=\"14\">" + XmlEscape(title) +
       "</text>\n";
  return o;
}

std::string AxisLabels(const std::string& x_label, const std::string& y_label) {
  std::string o;
  o += "<text x=\"" + Num((kL + kW - kR) / 2.0) + "\" y=\"" + std::to_string(kH - 12) +
       "\" text-anchor=\"middle\">" + XmlEscape(x_label) + "</text>\n";
  o += "<text transform=\"translate(16," + Num((kT + kH - kB) / 2.0) +
       ") rotate(-90)\" text-anchor=\"middle\">" + XmlEscape(y_label) + "</text>\n";
  return o;
}

std::string Frame() {
  return "<rect x=\"" + std::to_string(kL) + "\" y=\"" + std::to_string(kT) + "\" width=\"" +
         std::to_string(kW - kL - kR) + "\" height=\"" + std::to_string(kH - kT - kB) +
         "\" fill=\"none\" stroke=\"#333\"/>\n";
}

}  // namespace

double NiceStep(double range, int target_lines) {
  if (!(range > 0) || target_lines <= 0) return 1;
  const double raw = range / target_lines;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string LineChartSvg(const LineChart& c) {
  const double x0 = c.x_min, x1 = c.x_max > c.x_min ? c.x_max : c.x_min + 1;
  const double y0 = c.y_min, y1 = c.y_max > c.y_min ? c.y_max : c.y_min + 1;
  auto sx = [&](double x) { return kL + (kW - kL - kR) * (x - x0) / (x1 - x0); };
  auto sy = [&](double y) { return kT + (kH - kT - kB) * (1 - (y - y0) / (y1 - y0)); };
  const double xs = c.x_step > 0 ? c.x_step : NiceStep(x1 - x0, 8);
  const double ys = c.y_step > 0 ? c.y_step : NiceStep(y1 - y0, 8);
  std::string o = Header(c.title);
  o += "<defs><clipPath id=\"plot\"><rect x=\"" + std::to_string(kL) + "\" y=\"" +
       std::to_string(kT) + "\" width=\"" + std::to_string(kW - kL - kR) + "\" height=\"" +
       std::to_string(kH - kT - kB) + "\"/></clipPath></defs>\n";
  for (double y = std::ceil(y0 / ys) * ys; y <= y1 + ys * 1e-9; y += ys) {
    o += "<line x1=\"" + std::to_string(kL) + "\" y1=\"" + Num(sy(y)) + "\" x2=\"" +
         std::to_string(kW - kR) + "\" y2=\"" + Num(sy(y)) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + std::to_string(kL - 6) + "\" y=\"" + Num(sy(y) + 4) +
         "\" text-anchor=\"end\">" + Tick(y, ys) + XmlEscape(c.y_suffix) + "</text>\n";
  }
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + xs * 1e-9; x += xs) {
    o += "<line x1=\"" + Num(sx(x)) + "\" y1=\"" + std::to_string(kT) + "\" x2=\"" + Num(sx(x)) +
         "\" y2=\"" + std::to_string(kH - kB) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + Num(sx(x)) + "\" y=\"" + std::to_string(kH - kB + 16) +
         "\" text-anchor=\"middle\">" + Tick(x, xs) + XmlEscape(c.x_suffix) + "</text>\n";
  }
  o += Frame();
  o += AxisLabels(c.x_label, c.y_label);
  for (size_t i = 0; i < c.series.size(); ++i) {
    const LineSeries& s = c.series[i];
    const char* col = kColors[i % std::size(kColors)];
    std::string pts;
    for (const auto& [x, y] : s.points) {
      if (!pts.empty()) pts += ' ';
      pts += Num(sx(x)) + "," + Num(sy(y));
    }
    o += "<polyline clip-path=\"url(#plot)\" fill=\"none\" stroke=\"" + std::string(col) +
         "\" stroke-width=\"1.8\"" + (s.dashed ? " stroke-dasharray=\"5 3\"" : "") + " points=\"" +
         pts + "\"/>\n";
    // The legend: the name, and the note on a line of its own under it.
    const int ly = kT + 20 + 36 * static_cast<int>(i);
    o += "<line x1=\"" + std::to_string(kW - kR + 10) + "\" y1=\"" + std::to_string(ly) +
         "\" x2=\"" + std::to_string(kW - kR + 34) + "\" y2=\"" + std::to_string(ly) +
         "\" stroke=\"" + col + "\" stroke-width=\"3\"" +
         (s.dashed ? " stroke-dasharray=\"5 3\"" : "") + "/>\n";
    o += "<text x=\"" + std::to_string(kW - kR + 40) + "\" y=\"" + std::to_string(ly + 4) + "\">" +
         XmlEscape(s.name) + "</text>\n";
    if (!s.note.empty()) {
      o += "<text x=\"" + std::to_string(kW - kR + 40) + "\" y=\"" + std::to_string(ly + 18) +
           "\" font-size=\"11\" fill=\"#555\">" + XmlEscape(s.note) + "</text>\n";
    }
  }
  o += "</svg>\n";
  return o;
}

std::string BarChartSvg(const BarChart& c) {
  double top = c.y_max;
  if (!(top > 0)) {
    for (const auto& g : c.groups) {
      for (double v : g.values) top = std::max(top, v);
    }
    top = top > 0 ? top * 1.15 : 1;
  }
  const double ys = NiceStep(top, 8);
  top = std::ceil(top / ys) * ys;
  auto sy = [&](double y) { return kT + (kH - kT - kB) * (1 - y / top); };
  std::string o = Header(c.title);
  for (double y = 0; y <= top + ys * 1e-9; y += ys) {
    o += "<line x1=\"" + std::to_string(kL) + "\" y1=\"" + Num(sy(y)) + "\" x2=\"" +
         std::to_string(kW - kR) + "\" y2=\"" + Num(sy(y)) + "\" stroke=\"#ddd\"/>\n";
    o += "<text x=\"" + std::to_string(kL - 6) + "\" y=\"" + Num(sy(y) + 4) +
         "\" text-anchor=\"end\">" + Tick(y, ys) + XmlEscape(c.y_suffix) + "</text>\n";
  }
  const size_t n = std::max<size_t>(1, c.groups.size());
  const size_t k = std::max<size_t>(1, c.series.size());
  const double group_w = static_cast<double>(kW - kL - kR) / static_cast<double>(n);
  const double bar_w = group_w * 0.8 / static_cast<double>(k);
  for (size_t gi = 0; gi < c.groups.size(); ++gi) {
    const BarGroup& g = c.groups[gi];
    const double gx = kL + group_w * static_cast<double>(gi) + group_w * 0.1;
    for (size_t si = 0; si < g.values.size() && si < k; ++si) {
      const double v = std::clamp(g.values[si], 0.0, top);
      const double x = gx + bar_w * static_cast<double>(si);
      o += "<rect x=\"" + Num(x) + "\" y=\"" + Num(sy(v)) + "\" width=\"" + Num(bar_w - 1) +
           "\" height=\"" + Num(sy(0) - sy(v)) + "\" fill=\"" + kColors[si % std::size(kColors)] +
           "\"/>\n";
      if (si < g.value_labels.size() && !g.value_labels[si].empty()) {
        // Above the bar, or inside its top when the bar reaches the title.
        const bool inside = sy(v) < kT + 45;
        const double lx = x + bar_w / 2 + 3;
        const double ly = inside ? sy(v) + 4 : sy(v) - 4;
        o += "<text transform=\"translate(" + Num(lx) + "," + Num(ly) + ") rotate(-90)\"" +
             (inside ? " text-anchor=\"end\" fill=\"white\"" : "") + " font-size=\"10\">" +
             XmlEscape(g.value_labels[si]) + "</text>\n";
      }
    }
    const std::string gx_mid = Num(kL + group_w * (static_cast<double>(gi) + 0.5));
    o += "<text x=\"" + gx_mid + "\" y=\"" + std::to_string(kH - kB + 16) +
         "\" text-anchor=\"middle\">" + XmlEscape(g.label) + "</text>\n";
    if (!g.sublabel.empty()) {
      o += "<text x=\"" + gx_mid + "\" y=\"" + std::to_string(kH - kB + 30) +
           "\" text-anchor=\"middle\" font-size=\"10\" fill=\"#555\">" + XmlEscape(g.sublabel) +
           "</text>\n";
    }
  }
  o += Frame();
  o += AxisLabels("", c.y_label);
  for (size_t si = 0; si < c.series.size(); ++si) {
    const int ly = kT + 20 + 22 * static_cast<int>(si);
    o += "<rect x=\"" + std::to_string(kW - kR + 10) + "\" y=\"" + std::to_string(ly - 6) +
         "\" width=\"24\" height=\"12\" fill=\"" + kColors[si % std::size(kColors)] + "\"/>\n";
    o += "<text x=\"" + std::to_string(kW - kR + 40) + "\" y=\"" + std::to_string(ly + 4) + "\">" +
         XmlEscape(c.series[si]) + "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

}  // namespace gpupool::sim
