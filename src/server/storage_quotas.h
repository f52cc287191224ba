// StorageQuotas: per-user and per-group limits on what the blob store keeps
// (docs/operator-guide.md#storage-quotas).
//
// What counts (Tx::StorageUsed, kept by the store): the logical size (the
// files' total bytes, as their manifests say) of the distinct manifests a
// holder's jobs name: the inputs of its jobs that have not finished, and
// every checkpoint its jobs keep (after they finished too, until deleted).
// A user is charged for the jobs it owns, a group for the jobs charged to
// it (spec.group), so splitting work across jobs changes nothing.
// Compression and sharing between holders are not credited; one tree named
// by several jobs of one holder counts once.
//
// Limits: the quota an admin set for that user or group (Tx storage
// quotas), else the server's default for its kind (options), else none.
//
// Enforcement, all or nothing:
// - Guard(tx, owner, group, what, change) runs `change` inside the caller's
//   transaction (storing a job with inputs; adding a checkpoint and applying
//   retention) and refuses it with ResourceExhausted when it raised the
//   user's or the group's usage above its limit; the caller's transaction
//   then rolls back, so nothing is stored. A change that does not raise a
//   holder's usage passes, even over a quota lowered since.
// - Uploads are stored before a job or checkpoint names them, and what a
//   holder stops naming stays on disk until garbage collection. Each
//   holder's transient bytes are those on disk because of it that its
//   usage does not count, within the last `upload_window_ms` (the blob GC
//   grace, after which unnamed blobs are collected): new chunks (and
//   manifests) it uploaded, in logical bytes; and what its usage dropped by
//   (a job that ended or was cancelled, checkpoints deleted or replaced by
//   retention), seen at its next upload or Guard. An upload is refused,
//   nothing of it stored, when usage + transient + its new bytes would pass
//   the limit, so cycling (upload, submit, cancel, upload again) cannot put
//   more than the quota on disk within a grace period.
//   A user's uploads are charged to the user; an agent's checkpoint uploads
//   name their attempt and are charged to its job's owner and group. When a
//   change passes Guard, what it added to a holder's usage leaves the
//   transient bytes (it is counted as stored now); what it removed joins
//   them. The transient bytes live in memory: a restarted server starts
//   with none.
//
// Threading: Guard, Allowance, Standing, List and Set run on the event
// loop (they use the Store); Admit may run on any thread (the transient
// bytes have their own mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"

namespace gpupool::server {

struct StorageQuotasOptions {
  std::optional<int64_t> default_user_bytes;   // --user-storage-quota; none = unlimited
  std::optional<int64_t> default_group_bytes;  // --group-storage-quota
  int64_t upload_window_ms = 3'600'000;        // the blob GC grace
};

// One holder's standing (GET /v1/quotas).
struct StorageStanding {
  StorageHolder holder;
  int64_t used = 0;               // stored (usage)
  int64_t transient = 0;          // uploaded or freed within the window, not in `used`
  std::optional<int64_t> limit;   // none = unlimited
  bool limit_is_default = false;  // the server's default, not set for this holder
};

// What one upload may add, computed on the loop for Admit.
struct UploadAllowance {
  struct Room {
    StorageHolder holder;
    int64_t limit = 0;
    int64_t used = 0;
    bool is_default = false;
  };
  std::vector<Room> rooms;  // only holders that have a limit
  // Set: any new bytes are refused with this (an agent that did not say
  // whose checkpoint it uploads); what is stored already passes.
  Status refuse_new;
};

class StorageQuotas {
 public:
  StorageQuotas(Store& store, const Clock& clock, StorageQuotasOptions options);

  // ---- in the caller's transaction
  Status Guard(Tx& tx, const std::string& owner, const std::string& group, std::string_view what,
               const std::function<Status()>& change);

  // ---- uploads
  // The limits that bound an upload charged to `user` (and `group`, when
  // not empty). Reads the store: loop thread.
  Result<UploadAllowance> Allowance(const std::string& user, const std::string& group);
  // Refuses `new_bytes` beyond any room (ResourceExhausted naming the
  // limit), else adds them to the holders' transient bytes. Any thread.
  Status Admit(const UploadAllowance& allowance, int64_t new_bytes);

  // ---- administration (loop thread)
  // Sets (bytes) or clears (nullopt: back to the default) a holder's quota.
  Status Set(const StorageHolder& holder, std::optional<int64_t> bytes);
  // Every holder that stores, uploads or has a quota; users, then groups.
  Result<std::vector<StorageStanding>> List();
  Result<StorageStanding> Standing(const StorageHolder& holder);

 private:
  struct Limit {
    std::optional<int64_t> bytes;
    bool is_default = false;
  };
  // Per holder: transient entries (when, bytes), oldest first, and the
  // usage last seen (to notice drops that happened in other transactions).
  struct Transient {
    std::deque<std::pair<int64_t, int64_t>> entries;
    std::optional<int64_t> last_used;
  };
  Result<Limit> LimitOf(Tx& tx, const StorageHolder& holder) const;
  // Records that `holder`'s usage is `used` now: a drop since the last
  // time joins its transient bytes. Takes mu_.
  void SawUsage(const StorageHolder& holder, int64_t used);
  int64_t TransientBytes(const StorageHolder& holder);  // takes mu_
  // Moves `bytes` from the holder's transient bytes into its usage.
  void Stored(const StorageHolder& holder, int64_t bytes);
  // Sum of the entries still inside the window (drops the older ones).
  int64_t Live(Transient& t, int64_t now) const;

  Store& store_;
  const Clock& clock_;
  StorageQuotasOptions options_;
  std::mutex mu_;                                 // guards transient_
  std::map<StorageHolder, Transient> transient_;  // holders with something in the window
};

// "user alice" / "group vision".
std::string DescribeHolder(const StorageHolder& h);

}  // namespace gpupool::server
