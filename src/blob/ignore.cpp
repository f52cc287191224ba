#include "blob/ignore.h"

#include <fnmatch.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/files.h"

namespace gpupool::blob {

namespace {

std::vector<std::string_view> Split(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty()) {
    size_t slash = s.find('/');
    std::string_view part = s.substr(0, slash);
    if (!part.empty()) out.push_back(part);
    if (slash == std::string_view::npos) break;
    s.remove_prefix(slash + 1);
  }
  return out;
}

// Drops trailing spaces unless the last one is escaped ("foo\ ").
std::string_view TrimTrailingSpaces(std::string_view line) {
  while (!line.empty() && line.back() == ' ') {
    if (line.size() >= 2 && line[line.size() - 2] == '\\') break;
    line.remove_suffix(1);
  }
  return line;
}

bool GlobMatches(const std::string& glob, std::string_view name) {
  return ::fnmatch(glob.c_str(), std::string(name).c_str(), 0) == 0;
}

// `**` stands for zero or more whole segments; as the last segment, for one
// or more (everything inside a directory, not the directory itself).
bool MatchFrom(const std::vector<std::string>& pattern, size_t i,
               const std::vector<std::string_view>& path, size_t j) {
  if (i == pattern.size()) return j == path.size();
  if (pattern[i] == "**") {
    if (i + 1 == pattern.size()) return j < path.size();
    for (size_t k = j; k <= path.size(); ++k) {
      if (MatchFrom(pattern, i + 1, path, k)) return true;
    }
    return false;
  }
  return j < path.size() && GlobMatches(pattern[i], path[j]) &&
         MatchFrom(pattern, i + 1, path, j + 1);
}

}  // namespace

IgnoreRules IgnoreRules::Parse(std::string_view text) {
  IgnoreRules rules;
  std::istringstream in{std::string(text)};
  std::string raw;
  while (std::getline(in, raw)) {
    std::string_view line = raw;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    line = TrimTrailingSpaces(line);
    if (line.empty() || line.front() == '#') continue;
    Pattern p;
    if (line.front() == '!') {
      p.negate = true;
      line.remove_prefix(1);
    }
    if (!line.empty() && line.back() == '/') {
      p.dir_only = true;
      while (!line.empty() && line.back() == '/') line.remove_suffix(1);
    }
    // A slash at the start or in the middle anchors the pattern at the top.
    p.anchored = line.find('/') != std::string_view::npos;
    for (std::string_view seg : Split(line)) p.segments.emplace_back(seg);
    if (p.segments.empty()) continue;  // "/", "!" or "!/": nothing to match
    rules.patterns_.push_back(std::move(p));
  }
  return rules;
}

bool IgnoreRules::Matches(const Pattern& p, const std::vector<std::string_view>& path) {
  if (path.empty()) return false;
  if (!p.anchored) return GlobMatches(p.segments.front(), path.back());
  return MatchFrom(p.segments, 0, path, 0);
}

bool IgnoreRules::Ignored(std::string_view path, bool is_dir) const {
  if (patterns_.empty()) return false;
  std::vector<std::string_view> segments = Split(path);
  // A path under a left-out directory is left out, whatever follows (git's
  // rule: a file cannot be re-included if a parent directory is excluded).
  for (size_t depth = 1; depth <= segments.size(); ++depth) {
    std::vector<std::string_view> prefix(segments.begin(), segments.begin() + depth);
    bool prefix_is_dir = depth < segments.size() || is_dir;
    bool ignored = false;
    for (const Pattern& p : patterns_) {
      if (p.dir_only && !prefix_is_dir) continue;
      if (Matches(p, prefix)) ignored = !p.negate;
    }
    if (ignored) return true;
  }
  return false;
}

std::function<bool(const std::string&, bool)> IgnoreRules::AsHook() const {
  if (empty()) return {};
  return
      [rules = *this](const std::string& path, bool is_dir) { return rules.Ignored(path, is_dir); };
}

Result<IgnoreRules> IgnoreFor(const std::string& dir) {
  std::string path = dir + "/" + kIgnoreFileName;
  if (::access(path.c_str(), F_OK) != 0 && errno == ENOENT) return IgnoreRules();
  GP_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return IgnoreRules::Parse(text);
}

}  // namespace gpupool::blob
