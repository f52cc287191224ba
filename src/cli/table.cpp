#include "cli/table.h"

#include <algorithm>

namespace gpupool::cli {

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width;
  for (const auto& row : rows_) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], DisplayWidth(row[i]));
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - DisplayWidth(row[i]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  }
}

void Table::PrintCsv(std::ostream& out) const {
  for (const auto& row : rows_) {
    for (size_t i = 0; i < row.size(); ++i) {
      const std::string& cell = row[i];
      if (cell.find_first_of(",\"\r\n") == std::string::npos) {
        out << cell;
      } else {
        out << '"';
        for (char c : cell) out << (c == '"' ? "\"\"" : std::string(1, c));
        out << '"';
      }
      out << (i + 1 < row.size() ? "," : "\r\n");
    }
  }
}

}  // namespace gpupool::cli
