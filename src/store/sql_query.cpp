#include "store/sql_query.h"

#include <string>

namespace gpupool {

std::string SqlJsonText(SqlDialect d, std::string_view column, std::string_view field) {
  if (d == SqlDialect::kPostgres) {
    return "(" + std::string(column) + "::jsonb ->> '" + std::string(field) + "')";
  }
  return "json_extract(" + std::string(column) + ", '$." + std::string(field) + "')";
}

namespace {
std::string UtcFormat(SqlDialect d, std::string_view ms, const char* sqlite, const char* pg) {
  if (d == SqlDialect::kPostgres) {
    return "to_char(to_timestamp((" + std::string(ms) + ") / 1000) AT TIME ZONE 'UTC', '" + pg +
           "')";
  }
  return "strftime('" + std::string(sqlite) + "', (" + std::string(ms) + ") / 1000, 'unixepoch')";
}
}  // namespace

std::string SqlUtcDay(SqlDialect d, std::string_view ms) {
  return UtcFormat(d, ms, "%Y-%m-%d", "YYYY-MM-DD");
}

std::string SqlUtcMonth(SqlDialect d, std::string_view ms) {
  return UtcFormat(d, ms, "%Y-%m", "YYYY-MM");
}

}  // namespace gpupool
