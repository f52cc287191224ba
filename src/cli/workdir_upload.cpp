#include "cli/workdir_upload.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <regex>

#include "blob/http_chunk_store.h"
#include "blob/ignore.h"
#include "common/units.h"
#include "exec/executor.h"

namespace gpupool::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// The bytes of the regular files StoreTree will read (same ignore rules, no
// symlinks followed): the progress bar's total. Entries that cannot be read
// are skipped here; StoreTree reports them.
int64_t TotalBytes(const std::string& dir, const blob::IgnoreRules& rules) {
  int64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::string rel = fs::relative(it->path(), dir, ec).generic_string();
    if (ec) break;
    struct stat st;
    if (::lstat(it->path().c_str(), &st) != 0) continue;
    bool is_dir = S_ISDIR(st.st_mode);
    if (rules.Ignored(rel, is_dir)) {
      if (is_dir) it.disable_recursion_pending();
      continue;
    }
    if (S_ISREG(st.st_mode)) total += st.st_size;
  }
  return total;
}

// What the pool would refuse later, said now in terms of the directory:
// a manifest rule broken (a symlink leading outside), or files in the
// reserved checkpoint directory (docs/checkpoints.md).
Status CheckUploadable(const blob::Manifest& m, const std::string& encoded) {
  const std::string reserved = std::string(exec::kCheckpointDirName) + "/";
  for (const blob::ManifestEntry& e : m.entries) {
    if (e.path == exec::kCheckpointDirName && e.type != blob::EntryType::kDir) {
      return Status::InvalidArgument(std::string(exec::kCheckpointDirName) +
                                     " is reserved for the job's checkpoints and must be an "
                                     "empty directory, not a file or a link: remove it or add it "
                                     "to " +
                                     blob::kIgnoreFileName);
    }
    if (e.path.rfind(reserved, 0) == 0) {
      return Status::InvalidArgument(
          std::string(exec::kCheckpointDirName) +
          " is reserved for the job's checkpoints and must be empty: remove " + e.path +
          " or add " + reserved + " to " + blob::kIgnoreFileName);
    }
  }
  auto decoded = blob::DecodeManifest(encoded);
  if (decoded.ok()) return Status::Ok();
  // "entries[3].target: ..." -> name the file.
  std::string message = decoded.status().message();
  std::smatch match;
  if (std::regex_search(message, match, std::regex(R"(^entries\[(\d+)\])"))) {
    size_t index = std::stoul(match[1]);
    if (index < m.entries.size()) {
      const blob::ManifestEntry& e = m.entries[index];
      message = e.path +
                (e.type == blob::EntryType::kSymlink ? " (a link to " + e.target + ")" : "") +
                ": " + message + " (remove it or add it to " + blob::kIgnoreFileName + ")";
    }
  }
  return Status::InvalidArgument(message);
}

// One line on stderr, redrawn in place.
class ProgressLine {
 public:
  explicit ProgressLine(int64_t total) : total_(total), start_(Clock::now()) {}

  // Scanned is called by StoreTree's thread, Sent by its uploading one.
  void Scanned(int64_t bytes) {
    std::lock_guard lock(mu_);
    scanned_ = bytes;
    Draw();
  }
  void Sent(int64_t bytes) {
    std::lock_guard lock(mu_);
    sent_ = bytes;
    Draw();
  }
  void Clear() { std::cerr << "\r\033[K" << std::flush; }

 private:
  void Draw() {
    auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    int percent =
        total_ > 0 ? static_cast<int>(std::min<int64_t>(100, 100 * scanned_ / total_)) : 100;
    std::string rate = secs > 0 ? FormatBytes(static_cast<int64_t>(scanned_ / secs)) + "/s" : "";
    std::cerr << "\r\033[K"
              << "workdir: " << Bar(percent) << " " << percent << "% " << FormatBytes(scanned_)
              << " of " << FormatBytes(total_) << " scanned, " << FormatBytes(sent_)
              << " uploaded, " << rate << std::flush;
  }
  static std::string Bar(int percent) {
    constexpr int kWidth = 20;
    int full = percent * kWidth / 100;
    return "[" + std::string(full, '#') + std::string(kWidth - full, '.') + "]";
  }

  std::mutex mu_;
  const int64_t total_;
  const Clock::time_point start_;
  Clock::time_point last_{};
  int64_t scanned_ = 0;
  int64_t sent_ = 0;
};

}  // namespace

Result<WorkdirUpload> UploadWorkdir(const Endpoint& e, const std::string& dir, bool progress) {
  const auto start = Clock::now();
  GP_ASSIGN_OR_RETURN(blob::IgnoreRules rules, blob::IgnoreFor(dir));
  ProgressLine line(progress ? TotalBytes(dir, rules) : 0);

  blob::HttpChunkStoreOptions o;
  o.server = e.server;
  o.token = e.token;
  o.tls = e.tls;
  if (progress) o.on_upload = [&line](int64_t sent) { line.Sent(sent); };
  blob::HttpChunkStore store(o);

  blob::StoreTreeOptions tree;
  tree.ignore = rules.AsHook();
  if (progress) tree.on_scanned = [&line](int64_t scanned) { line.Scanned(scanned); };
  WorkdirUpload u;
  auto manifest = blob::StoreTree(dir, store, tree, &u.stats);
  if (progress) line.Clear();
  if (!manifest.ok()) return manifest.status().WithContext("workdir " + dir);
  const std::string encoded = blob::EncodeManifest(*manifest);
  GP_RETURN_IF_ERROR(CheckUploadable(*manifest, encoded).WithContext("workdir " + dir));
  GP_ASSIGN_OR_RETURN(blob::StoredManifest stored, store.PutManifest(encoded));
  u.manifest = stored.id;
  u.unique_chunks = static_cast<int64_t>(manifest->ChunkIds().size());
  u.took_ms = MsSince(start);
  return u;
}

std::string UploadSummary(const WorkdirUpload& u) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f s", static_cast<double>(u.took_ms) / 1000);
  return "uploaded " + FormatBytes(u.stats.uploaded_bytes) + " of " + FormatBytes(u.stats.bytes) +
         " (" + std::to_string(u.stats.new_chunks) + " new chunk" +
         (u.stats.new_chunks == 1 ? "" : "s") + " of " + std::to_string(u.unique_chunks) + ") in " +
         secs +
         (u.stats.skipped > 0 ? "; left out " + std::to_string(u.stats.skipped) +
                                    " entries that changed while being read"
                              : "");
}

}  // namespace gpupool::cli
