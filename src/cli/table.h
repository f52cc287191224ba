// A plain-text table for people: columns padded to their widest cell.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gpupool::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out) const;
  // The same as CSV (RFC 4180): a header line, then a line per row; a cell
  // with a comma, quote or line break is quoted, its quotes doubled.
  void PrintCsv(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

// Width of `s` in terminal columns, counting each UTF-8 character once.
size_t DisplayWidth(const std::string& s);

}  // namespace gpupool::cli
