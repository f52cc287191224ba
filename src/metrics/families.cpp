#include "metrics/families.h"

#include <iterator>

#include <prometheus/text_serializer.h>

namespace gpupool::metrics {

FamilyBuilder::FamilyBuilder(std::string name, std::string help, prometheus::MetricType type) {
  family_.name = std::move(name);
  family_.help = std::move(help);
  family_.type = type;
}

FamilyBuilder& FamilyBuilder::Add(const Labels& labels, double value) {
  prometheus::ClientMetric m;
  for (const auto& [name, label_value] : labels) m.label.push_back({name, label_value});
  if (family_.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family_.metric.push_back(std::move(m));
  return *this;
}

void Append(std::vector<prometheus::MetricFamily>& to, std::vector<prometheus::MetricFamily> from) {
  to.insert(to.end(), std::make_move_iterator(from.begin()), std::make_move_iterator(from.end()));
}

std::string RenderText(const std::vector<prometheus::MetricFamily>& families) {
  // A family without samples (no GPUs yet, no reclaims yet) is left out
  // rather than shown as a bare HELP and TYPE.
  std::vector<prometheus::MetricFamily> shown;
  for (const prometheus::MetricFamily& f : families) {
    if (!f.metric.empty()) shown.push_back(f);
  }
  return prometheus::TextSerializer().Serialize(shown);
}

}  // namespace gpupool::metrics
