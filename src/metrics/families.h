// Metric families built at scrape time, and the text the scraper reads.
//
// Most of what /metrics shows is read from the pool when it is scraped (jobs
// by state, nodes, every GPU's telemetry), not kept in a registry between
// scrapes: FamilyBuilder makes one family of such values, in
// prometheus-cpp's own types, and RenderText writes families in
// Prometheus' text exposition format (version 0.0.4) through
// prometheus-cpp's serializer, which escapes label values (so a GPU name or
// node name an agent reported cannot break the format).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <prometheus/metric_family.h>

namespace gpupool::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

class FamilyBuilder {
 public:
  // `type` is Gauge or Counter (histograms are kept by ServerMetrics).
  FamilyBuilder(std::string name, std::string help, prometheus::MetricType type);
  // One sample; the family keeps the order of the calls.
  FamilyBuilder& Add(const Labels& labels, double value);
  bool empty() const { return family_.metric.empty(); }
  // The family; the builder is left empty.
  prometheus::MetricFamily Take() { return std::move(family_); }

 private:
  prometheus::MetricFamily family_;
};

// Appends `from` to `to`.
void Append(std::vector<prometheus::MetricFamily>& to, std::vector<prometheus::MetricFamily> from);

// The families in the text format, for Content-Type kTextContentType.
std::string RenderText(const std::vector<prometheus::MetricFamily>& families);
inline constexpr std::string_view kTextContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace gpupool::metrics
