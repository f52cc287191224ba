// Hand-written SVG charts for the simulator's outputs: a line chart and a
// grouped bar chart, drawn in the same style as the openb plot
// (docs/img/openb-default.svg, made by bench/run_openb_matrix.sh): 720x460,
// plot frame at left 60 / right 150 / top 40 / bottom 50, light grey grid,
// the legend on the right, the same colours. No dependency beyond the
// standard library.
//
// Contract: pure functions (no I/O, no globals); safe from any thread. Text
// is XML-escaped. Lines are clipped to the plot frame.
#pragma once

#include "common/markup.h"

#include <string>
#include <string_view>
#include <vector>

namespace gpupool::sim {

using ::gpupool::XmlEscape;  // common/markup.h

struct LineSeries {
  std::string name;  // shown in the legend
  std::vector<std::pair<double, double>> points;
  std::string note;  // under the legend entry, e.g. "mean 62.1%"
  bool dashed = false;
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  double x_min = 0, x_max = 1;
  double y_min = 0, y_max = 1;
  double x_step = 0, y_step = 0;   // grid spacing; 0 = about 8 lines, a 1-2-5 step
  std::string x_suffix, y_suffix;  // appended to tick labels ("%", "h")
  std::vector<LineSeries> series;
};

std::string LineChartSvg(const LineChart& chart);

struct BarGroup {
  std::string label;                      // under the group
  std::string sublabel;                   // under the label, smaller; may be empty
  std::vector<double> values;             // one per series
  std::vector<std::string> value_labels;  // above each bar; may be empty
};

struct BarChart {
  std::string title;
  std::string y_label;
  std::string y_suffix;
  std::vector<std::string> series;  // names, in the legend
  std::vector<BarGroup> groups;
  double y_max = 0;  // 0 = from the data
};

std::string BarChartSvg(const BarChart& chart);

// A 1-2-5 step near range / target_lines.
double NiceStep(double range, int target_lines);

}  // namespace gpupool::sim
