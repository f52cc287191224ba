#include "metrics/families.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <span>

namespace gpupool::metrics {

namespace {

using prometheus::MetricType;

void AppendValue(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    // The shortest text that reads back as the same double, in fixed
    // notation where printf's %g would use it ("0.0005", "14400"; a
    // bucket's `le` reads as people write it), else scientific ("1e+21").
    const double a = std::abs(v);
    const auto format = a != 0 && (a < 1e-4 || a >= 1e16) ? std::chars_format::scientific
                                                          : std::chars_format::fixed;
    char buf[400];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, format);
    out.append(buf, ec == std::errc() ? end : buf);
  }
}

std::string ValueText(double v) {
  std::string out;
  AppendValue(out, v);
  return out;
}

// Label values escape \, " and newlines; help texts \ and newlines.
void AppendEscaped(std::string& out, std::string_view text, bool quotes) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

// name+suffix{label="value",...,extra="value"} value
void AppendSample(std::string& out, std::string_view name, std::string_view suffix,
                  std::span<const Label> labels, const Label* extra, double value) {
  out += name;
  out += suffix;
  if (!labels.empty() || extra != nullptr) {
    out += '{';
    bool first = true;
    auto label = [&](const Label& l) {
      if (!first) out += ',';
      first = false;
      out += l.first;
      out += "=\"";
      AppendEscaped(out, l.second, true);
      out += '"';
    };
    for (const Label& l : labels) label(l);
    if (extra != nullptr) label(*extra);
    out += '}';
  }
  out += ' ';
  AppendValue(out, value);
  out += '\n';
}

std::string_view TypeName(MetricType t) {
  switch (t) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Summary:
      return "summary";
    case MetricType::Histogram:
      return "histogram";
    default:
      return "untyped";
  }
}

void AppendHead(std::string& out, std::string_view name, std::string_view help, MetricType type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  AppendEscaped(out, help, false);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += TypeName(type);
  out += '\n';
}

void AppendHistogram(std::string& out, std::string_view name, std::span<const Label> labels,
                     const prometheus::ClientMetric::Histogram& h) {
  AppendSample(out, name, "_count", labels, nullptr, static_cast<double>(h.sample_count));
  AppendSample(out, name, "_sum", labels, nullptr, h.sample_sum);
  bool inf = false;
  for (const auto& b : h.bucket) {
    const std::string le = ValueText(b.upper_bound);
    const Label extra{"le", le};
    AppendSample(out, name, "_bucket", labels, &extra, static_cast<double>(b.cumulative_count));
    inf = std::isinf(b.upper_bound);
  }
  if (!inf) {
    const Label extra{"le", "+Inf"};
    AppendSample(out, name, "_bucket", labels, &extra, static_cast<double>(h.sample_count));
  }
}

void AppendMetric(std::string& out, const prometheus::MetricFamily& f,
                  const prometheus::ClientMetric& m) {
  std::vector<Label> labels;
  labels.reserve(m.label.size());
  for (const auto& l : m.label) labels.emplace_back(l.name, l.value);
  switch (f.type) {
    case MetricType::Counter:
      AppendSample(out, f.name, "", labels, nullptr, m.counter.value);
      break;
    case MetricType::Gauge:
      AppendSample(out, f.name, "", labels, nullptr, m.gauge.value);
      break;
    case MetricType::Histogram:
      AppendHistogram(out, f.name, labels, m.histogram);
      break;
    case MetricType::Summary:
      AppendSample(out, f.name, "_count", labels, nullptr,
                   static_cast<double>(m.summary.sample_count));
      AppendSample(out, f.name, "_sum", labels, nullptr, m.summary.sample_sum);
      for (const auto& q : m.summary.quantile) {
        const std::string quantile = ValueText(q.quantile);
        const Label extra{"quantile", quantile};
        AppendSample(out, f.name, "", labels, &extra, q.value);
      }
      break;
    default:
      AppendSample(out, f.name, "", labels, nullptr, m.untyped.value);
  }
}

}  // namespace

TextFamily::TextFamily(std::string_view name, std::string_view help, MetricType type)
    : name_(name) {
  AppendHead(head_, name, help, type);
}

TextFamily& TextFamily::Add(std::initializer_list<Label> labels, double value) {
  AppendSample(samples_, name_, "", std::span<const Label>(labels.begin(), labels.size()), nullptr,
               value);
  return *this;
}

TextFamily& TextFamily::Add(const std::vector<Label>& labels, double value) {
  AppendSample(samples_, name_, "", labels, nullptr, value);
  return *this;
}

void TextFamily::AppendTo(std::string& out) const {
  if (samples_.empty()) return;
  out += head_;
  out += samples_;
}

std::string RenderText(const std::vector<prometheus::MetricFamily>& families) {
  std::string out;
  for (const prometheus::MetricFamily& f : families) {
    if (f.metric.empty()) continue;
    AppendHead(out, f.name, f.help, f.type);
    for (const prometheus::ClientMetric& m : f.metric) AppendMetric(out, f, m);
  }
  return out;
}

}  // namespace gpupool::metrics
