#include "agent/checkpoint_sync.h"

#include <charconv>
#include <chrono>
#include <filesystem>

namespace gpupool::agent {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kCommitPrefix = "ckpt-";

bool Retryable(StatusCode code) {
  return code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded ||
         code == StatusCode::kInternal;
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::optional<int64_t> ParseCommitName(std::string_view name) {
  if (!name.starts_with(kCommitPrefix)) return std::nullopt;
  std::string_view digits = name.substr(kCommitPrefix.size());
  if (digits.empty() || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size() || n < 0) return std::nullopt;
  return n;
}

std::optional<Commit> NewestCommit(const std::string& checkpoint_dir) {
  std::optional<Commit> newest;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir, ec)) {
    std::string name = entry.path().filename().string();
    auto n = ParseCommitName(name);
    if (!n || (newest && *n <= newest->number)) continue;
    // A symlink named like a commit is not one: its target could be anywhere.
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    newest = Commit{*n, std::move(name)};
  }
  return newest;
}

CheckpointUploader::CheckpointUploader(std::string checkpoint_dir, UploadFn upload,
                                       int64_t max_backoff_ms)
    : dir_(std::move(checkpoint_dir)), upload_(std::move(upload)), max_backoff_ms_(max_backoff_ms) {
  thread_ = std::thread([this] { Run(); });
}

CheckpointUploader::~CheckpointUploader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointUploader::Offer(const Commit& c) {
  {
    std::lock_guard lock(mu_);
    if (fenced_ || c.number <= offered_) return;
    offered_ = c.number;
    waiting_ = c;
  }
  cv_.notify_all();
}

std::vector<CheckpointUploader::Outcome> CheckpointUploader::TakeOutcomes() {
  std::lock_guard lock(mu_);
  std::vector<Outcome> out(std::make_move_iterator(outcomes_.begin()),
                           std::make_move_iterator(outcomes_.end()));
  outcomes_.clear();
  return out;
}

bool CheckpointUploader::busy() const {
  std::lock_guard lock(mu_);
  return running_ || waiting_.has_value();
}

int64_t CheckpointUploader::uploaded() const {
  std::lock_guard lock(mu_);
  return uploaded_;
}

bool CheckpointUploader::fenced() const {
  std::lock_guard lock(mu_);
  return fenced_;
}

bool CheckpointUploader::WaitIdle(int64_t timeout_ms) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                      [this] { return !running_ && !waiting_; });
}

void CheckpointUploader::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || waiting_.has_value(); });
    if (stop_) return;
    Commit c = *waiting_;
    waiting_.reset();
    running_ = true;
    int64_t backoff_ms = 250;
    int64_t began = SteadyMs();
    while (true) {
      lock.unlock();
      Result<UploadResult> r = upload_(dir_, c);
      lock.lock();
      bool newer_waits = waiting_.has_value();
      if (r.ok() || !Retryable(r.status().code()) || newer_waits || stop_) {
        if (r.ok()) uploaded_ = std::max(uploaded_, c.number);
        if (!r.ok() && r.status().code() == StatusCode::kAborted) {
          fenced_ = true;
          waiting_.reset();
        }
        // A transient failure superseded by a newer commit is not worth
        // reporting: the newer one is what matters.
        if (r.ok() || !Retryable(r.status().code()) || stop_) {
          outcomes_.push_back({c, std::move(r), SteadyMs() - began});
        }
        break;
      }
      // Transient (the server is restarting, the network is down): try
      // again, unless a newer commit or the end comes first.
      cv_.wait_for(lock, std::chrono::milliseconds(backoff_ms),
                   [this] { return stop_ || waiting_.has_value(); });
      backoff_ms = std::min(backoff_ms * 2, max_backoff_ms_);
      if (stop_ || waiting_) {
        if (stop_) outcomes_.push_back({c, std::move(r), SteadyMs() - began});
        break;
      }
    }
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace gpupool::agent
