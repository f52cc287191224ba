// .gpupoolignore: which files of a job's work directory the CLI leaves out
// of the upload, with the rules of .gitignore that users already know.
//
//   # a comment; blank lines are ignored
//   *.pt            any file or directory named so, at any depth
//   data/           a directory named "data" at any depth (not a file so named)
//   /build          only "build" at the top of the work directory
//   logs/*.txt      a pattern with a slash inside is anchored at the top
//   **/cache        "cache" at any depth; a/**/b: zero or more directories between
//   out/**          everything inside "out"
//   !keep.pt        re-includes what an earlier pattern left out
//   \#file, \!file  a literal leading '#' or '!'; "\ " keeps a trailing space
//
// `*` and `?` never match '/', `[a-z]`/`[!a]` are character classes (fnmatch),
// and the last pattern that matches a path decides. As in git, a file cannot
// be re-included when a directory above it is left out (the upload does not
// descend into it). Trailing spaces and a trailing '\r' are dropped.
//
// Only DIR/.gpupoolignore is read (no nested .gpupoolignore files, no global
// one), and nothing is left out implicitly: not .git/, not the
// .gpupoolignore file itself. Add `.git/` to the file to leave it out.
//
// Pure but for IgnoreFor, which reads the file. An IgnoreRules is immutable
// once built and safe to share between threads.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::blob {

inline constexpr char kIgnoreFileName[] = ".gpupoolignore";

class IgnoreRules {
 public:
  // Rules that leave nothing out.
  IgnoreRules() = default;
  // The rules of a .gpupoolignore text. Every line is a valid pattern (one
  // that cannot match anything simply never does), so this cannot fail.
  static IgnoreRules Parse(std::string_view text);

  // Whether `path` (relative to the work directory, '/'-separated, no
  // leading "./") is left out; `is_dir` for directories.
  bool Ignored(std::string_view path, bool is_dir) const;

  // For StoreTreeOptions::ignore. The hook holds its own copy of the rules.
  std::function<bool(const std::string& path, bool is_dir)> AsHook() const;

  size_t size() const { return patterns_.size(); }
  bool empty() const { return patterns_.empty(); }

 private:
  struct Pattern {
    std::vector<std::string> segments;  // the glob split at '/'
    bool negate = false;                // "!pattern"
    bool dir_only = false;              // "pattern/"
    bool anchored = false;              // has a '/' before its end: matched from the top
  };
  static bool Matches(const Pattern& p, const std::vector<std::string_view>& path);
  std::vector<Pattern> patterns_;
};

// The rules of DIR/.gpupoolignore; empty rules when there is none. An error
// only when the file exists but cannot be read.
Result<IgnoreRules> IgnoreFor(const std::string& dir);

}  // namespace gpupool::blob
