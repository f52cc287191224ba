// The text the scraper reads: Prometheus' text exposition format (version
// 0.0.4), written here.
//
// Most of what /metrics shows is read from the pool when it is scraped
// (jobs by state, nodes, every GPU's telemetry), not kept in a registry
// between scrapes: a TextFamily writes one such family as its samples are
// added. What the server counts between scrapes lives in prometheus-cpp's
// registry (server_metrics.h), whose families RenderText writes. Label
// values and help texts are escaped (so a GPU name or node name an agent
// reported cannot break the format); values are written as the shortest
// text that reads back as the same double.
//
// Why not prometheus-cpp's TextSerializer: it formats through an
// std::ostream, and building its ClientMetric for every GPU sample costs
// an allocation or more each; together they took most of the 100 ms a
// scrape of 1,000 nodes of 8 GPUs may take (docs/performance.md).
// metrics_test checks that RenderText writes the lines TextSerializer
// writes, values compared as numbers; except HELP texts, which
// TextSerializer 1.0 does not escape (a newline there breaks its output).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

namespace gpupool::metrics {

using Label = std::pair<std::string_view, std::string_view>;  // name, value

class TextFamily {
 public:
  // `type` is Gauge or Counter (histograms are kept by ServerMetrics).
  TextFamily(std::string_view name, std::string_view help, prometheus::MetricType type);
  TextFamily& Add(std::initializer_list<Label> labels, double value);
  TextFamily& Add(const std::vector<Label>& labels, double value);
  bool empty() const { return samples_.empty(); }
  // Appends the family, its HELP and TYPE lines and its samples in the
  // order added, to `out`; nothing when it has no sample (no GPUs yet, no
  // blob collection yet), rather than a bare HELP and TYPE.
  void AppendTo(std::string& out) const;

 private:
  std::string name_;
  std::string head_;
  std::string samples_;
};

// The families of a prometheus-cpp registry (those without samples left out).
std::string RenderText(const std::vector<prometheus::MetricFamily>& families);
inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace gpupool::metrics
