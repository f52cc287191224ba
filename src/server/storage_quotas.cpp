#include "server/storage_quotas.h"

#include <algorithm>
#include <set>

#include "common/units.h"

namespace gpupool::server {
namespace {

std::string LimitSource(const StorageHolder& h, bool is_default) {
  if (!is_default) return "set by an admin: gpupool admin quota";
  return h.kind == StorageHolderKind::kUser ? "the server's --user-storage-quota"
                                            : "the server's --group-storage-quota";
}

Status Exceeded(std::string_view what, const StorageHolder& h, int64_t limit, bool is_default,
                int64_t used, int64_t transient, int64_t adding) {
  std::string held = FormatBytes(used);
  if (transient > 0) {
    held += " (+" + FormatBytes(transient) +
            " uploaded and not in a job yet, or freed and not "
            "collected yet)";
  }
  return Status::ResourceExhausted(
      "storage quota exceeded: " + std::string(what) + " needs " + FormatBytes(adding) +
      " more, but " + DescribeHolder(h) + " stores " + held + " of the " + FormatBytes(limit) +
      " it may (" + LimitSource(h, is_default) +
      "); delete checkpoints of finished jobs (gpupool checkpoint delete JOB) or ask an admin "
      "for more");
}

}  // namespace

std::string DescribeHolder(const StorageHolder& h) {
  return std::string(StorageHolderKindName(h.kind)) + " " + h.name;
}

StorageQuotas::StorageQuotas(Store& store, const Clock& clock, StorageQuotasOptions options)
    : store_(store), clock_(clock), options_(options) {}

Result<StorageQuotas::Limit> StorageQuotas::LimitOf(Tx& tx, const StorageHolder& holder) const {
  GP_ASSIGN_OR_RETURN(auto set, tx.GetStorageQuota(holder));
  if (set) return Limit{set->bytes, false};
  const auto& fallback = holder.kind == StorageHolderKind::kUser ? options_.default_user_bytes
                                                                 : options_.default_group_bytes;
  return Limit{fallback, fallback.has_value()};
}

Status StorageQuotas::Guard(Tx& tx, const std::string& owner, const std::string& group,
                            std::string_view what, const std::function<Status()>& change) {
  const StorageHolder holders[] = {{StorageHolderKind::kUser, owner},
                                   {StorageHolderKind::kGroup, group}};
  int64_t before[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    GP_ASSIGN_OR_RETURN(StorageUsage u, tx.StorageUsed(holders[i]));
    before[i] = u.bytes;
  }
  GP_RETURN_IF_ERROR(change());
  int64_t after[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    GP_ASSIGN_OR_RETURN(StorageUsage u, tx.StorageUsed(holders[i]));
    after[i] = u.bytes;
    if (after[i] <= before[i]) continue;
    GP_ASSIGN_OR_RETURN(Limit limit, LimitOf(tx, holders[i]));
    if (limit.bytes && after[i] > *limit.bytes) {
      return Exceeded(what, holders[i], *limit.bytes, limit.is_default, before[i], 0,
                      after[i] - before[i]);
    }
  }
  for (int i = 0; i < 2; ++i) {
    // Drops before this change (another transaction's) join the transient
    // bytes; what this change added left them; what it removed joins them.
    SawUsage(holders[i], before[i]);
    if (after[i] > before[i]) Stored(holders[i], after[i] - before[i]);
    SawUsage(holders[i], after[i]);
  }
  return Status::Ok();
}

Result<UploadAllowance> StorageQuotas::Allowance(const std::string& user,
                                                 const std::string& group) {
  UploadAllowance out;
  std::vector<StorageHolder> holders = {{StorageHolderKind::kUser, user}};
  if (!group.empty()) holders.push_back({StorageHolderKind::kGroup, group});
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    for (const StorageHolder& h : holders) {
      GP_ASSIGN_OR_RETURN(Limit limit, LimitOf(tx, h));
      if (!limit.bytes) continue;
      GP_ASSIGN_OR_RETURN(StorageUsage u, tx.StorageUsed(h));
      out.rooms.push_back({h, *limit.bytes, u.bytes, limit.is_default});
    }
    return Status::Ok();
  }));
  for (const UploadAllowance::Room& r : out.rooms) SawUsage(r.holder, r.used);
  return out;
}

Status StorageQuotas::Admit(const UploadAllowance& allowance, int64_t new_bytes) {
  if (new_bytes <= 0) return Status::Ok();
  if (!allowance.refuse_new.ok()) return allowance.refuse_new;
  if (allowance.rooms.empty()) return Status::Ok();
  const int64_t now = clock_.NowMs();
  std::lock_guard lock(mu_);
  for (const UploadAllowance::Room& r : allowance.rooms) {
    int64_t transient = Live(transient_[r.holder], now);
    if (r.used + transient + new_bytes > r.limit) {
      return Exceeded("this upload", r.holder, r.limit, r.is_default, r.used, transient, new_bytes);
    }
  }
  for (const UploadAllowance::Room& r : allowance.rooms) {
    transient_[r.holder].entries.emplace_back(now, new_bytes);
  }
  return Status::Ok();
}

int64_t StorageQuotas::Live(Transient& t, int64_t now) const {
  while (!t.entries.empty() && t.entries.front().first + options_.upload_window_ms < now) {
    t.entries.pop_front();
  }
  int64_t sum = 0;
  for (const auto& e : t.entries) sum += e.second;
  return sum;
}

void StorageQuotas::SawUsage(const StorageHolder& holder, int64_t used) {
  std::lock_guard lock(mu_);
  Transient& t = transient_[holder];
  if (t.last_used && used < *t.last_used) {
    t.entries.emplace_back(clock_.NowMs(), *t.last_used - used);
  }
  t.last_used = used;
}

int64_t StorageQuotas::TransientBytes(const StorageHolder& holder) {
  std::lock_guard lock(mu_);
  auto it = transient_.find(holder);
  if (it == transient_.end()) return 0;
  return Live(it->second, clock_.NowMs());
}

void StorageQuotas::Stored(const StorageHolder& holder, int64_t bytes) {
  std::lock_guard lock(mu_);
  auto& entries = transient_[holder].entries;
  // The newest uploads are the likeliest to be what was just named.
  while (bytes > 0 && !entries.empty()) {
    int64_t take = std::min(bytes, entries.back().second);
    entries.back().second -= take;
    bytes -= take;
    if (entries.back().second == 0) entries.pop_back();
  }
}

Status StorageQuotas::Set(const StorageHolder& holder, std::optional<int64_t> bytes) {
  if (holder.name.empty()) return Status::InvalidArgument("a quota needs a user or group name");
  if (bytes && *bytes < 0) return Status::InvalidArgument("a quota cannot be negative");
  return store_.Transact([&](Tx& tx) -> Status {
    if (!bytes) return tx.DeleteStorageQuota(holder);
    return tx.PutStorageQuota({holder, *bytes, clock_.NowMs()});
  });
}

Result<StorageStanding> StorageQuotas::Standing(const StorageHolder& holder) {
  StorageStanding s;
  s.holder = holder;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(StorageUsage u, tx.StorageUsed(holder));
    s.used = u.bytes;
    GP_ASSIGN_OR_RETURN(Limit limit, LimitOf(tx, holder));
    s.limit = limit.bytes;
    s.limit_is_default = limit.is_default;
    return Status::Ok();
  }));
  s.transient = TransientBytes(holder);
  return s;
}

Result<std::vector<StorageStanding>> StorageQuotas::List() {
  std::set<StorageHolder> holders;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto usage, tx.ListStorageUsage());
    for (const StorageUsage& u : usage) holders.insert(u.holder);
    GP_ASSIGN_OR_RETURN(auto quotas, tx.ListStorageQuotas());
    for (const gpupool::StorageQuota& q : quotas) holders.insert(q.holder);
    return Status::Ok();
  }));
  {
    std::lock_guard lock(mu_);
    const int64_t now = clock_.NowMs();
    for (auto& [h, t] : transient_) {
      if (Live(t, now) > 0) holders.insert(h);
    }
  }
  std::vector<StorageStanding> out;
  for (const StorageHolder& h : holders) {
    GP_ASSIGN_OR_RETURN(StorageStanding s, Standing(h));
    out.push_back(std::move(s));
  }
  // Users first, then groups, each by name.
  std::stable_sort(out.begin(), out.end(), [](const StorageStanding& a, const StorageStanding& b) {
    return a.holder.kind == StorageHolderKind::kUser && b.holder.kind != StorageHolderKind::kUser;
  });
  return out;
}

}  // namespace gpupool::server
