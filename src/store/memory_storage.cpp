// MemoryStore's storage facet (store/memory_tables.h): the manifests blob
// garbage collection must keep, what each user and group stores, and their
// quotas. The references are kept as SQLite's storage_refs triggers keep
// them: a holder's row per manifest counts its references and the largest
// size given while the row lived.
#include <set>

#include "store/memory_tables.h"

namespace gpupool {
namespace {

std::vector<StorageHolder> HoldersOf(const Job& job) {
  return {{StorageHolderKind::kUser, job.owner}, {StorageHolderKind::kGroup, job.spec.group}};
}

}  // namespace

void MemoryTx::AddStorageRef(const Job& job, const std::string& manifest, int64_t bytes) {
  for (const StorageHolder& h : HoldersOf(job)) {
    auto& refs = s_.storage_refs[h];
    auto it = refs.find(manifest);
    MemoryStorageRef ref{bytes, 1};
    if (it != refs.end()) ref = {std::max(it->second.bytes, bytes), it->second.refs + 1};
    j_.Put(refs, manifest, ref);
  }
}

void MemoryTx::DropStorageRef(const Job& job, const std::string& manifest) {
  for (const StorageHolder& h : HoldersOf(job)) {
    auto holder = s_.storage_refs.find(h);
    if (holder == s_.storage_refs.end()) continue;
    auto it = holder->second.find(manifest);
    if (it == holder->second.end()) continue;
    MemoryStorageRef ref = it->second;
    if (--ref.refs > 0) {
      j_.Put(holder->second, manifest, ref);
    } else {
      j_.Erase(holder->second, manifest);
    }
  }
}

Result<std::vector<std::string>> MemoryTx::ListCheckpointManifests() {
  std::vector<std::string> out;
  out.reserve(s_.checkpoint_manifests.size());
  for (const auto& [manifest, n] : s_.checkpoint_manifests) out.push_back(manifest);
  return out;
}

Result<std::vector<std::string>> MemoryTx::ListActiveJobInputs() {
  std::set<std::string> inputs;
  for (JobState st : {JobState::kPending, JobState::kScheduled, JobState::kRunning}) {
    auto ids = s_.jobs_by_state.find(st);
    if (ids == s_.jobs_by_state.end()) continue;
    for (int64_t id : ids->second) {
      const Job& job = s_.jobs.at(id);
      if (!job.spec.inputs.empty()) inputs.insert(job.spec.inputs);
    }
  }
  return std::vector<std::string>(inputs.begin(), inputs.end());
}

Result<StorageUsage> MemoryTx::StorageUsed(const StorageHolder& holder) {
  StorageUsage u;
  u.holder = holder;
  auto it = s_.storage_refs.find(holder);
  if (it == s_.storage_refs.end()) return u;
  for (const auto& [manifest, ref] : it->second) {
    u.bytes += ref.bytes;
    ++u.manifests;
  }
  return u;
}

Result<std::vector<std::pair<std::string, int64_t>>> MemoryTx::StorageByAccount() {
  std::set<std::string> lab_manifests;
  std::map<std::string, int64_t> by_account;
  for (const auto& [holder, refs] : s_.storage_refs) {
    if (holder.kind != StorageHolderKind::kGroup || !s_.groups.count(holder.name)) continue;
    for (const auto& [manifest, ref] : refs) {
      lab_manifests.insert(manifest);
      by_account["group:" + holder.name] += ref.bytes;
    }
  }
  for (const auto& [holder, refs] : s_.storage_refs) {
    if (holder.kind != StorageHolderKind::kUser) continue;
    for (const auto& [manifest, ref] : refs) {
      if (!lab_manifests.count(manifest)) by_account["user:" + holder.name] += ref.bytes;
    }
  }
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [account, bytes] : by_account)
    if (bytes > 0) out.emplace_back(account, bytes);
  return out;
}

Result<std::vector<StorageUsage>> MemoryTx::ListStorageUsage() {
  // StorageHolder orders users before groups, each by name.
  std::vector<StorageUsage> out;
  for (const auto& [holder, refs] : s_.storage_refs) {
    if (refs.empty()) continue;
    GP_ASSIGN_OR_RETURN(StorageUsage u, StorageUsed(holder));
    out.push_back(std::move(u));
  }
  return out;
}

Status MemoryTx::PutStorageQuota(const StorageQuota& q) {
  j_.Put(s_.storage_quotas, q.holder, q);
  return Status::Ok();
}

Status MemoryTx::DeleteStorageQuota(const StorageHolder& holder) {
  j_.Erase(s_.storage_quotas, holder);
  return Status::Ok();
}

Result<std::optional<StorageQuota>> MemoryTx::GetStorageQuota(const StorageHolder& holder) {
  auto it = s_.storage_quotas.find(holder);
  if (it == s_.storage_quotas.end()) return std::optional<StorageQuota>();
  return std::optional<StorageQuota>(it->second);
}

Result<std::vector<StorageQuota>> MemoryTx::ListStorageQuotas() {
  std::vector<StorageQuota> out;
  for (const auto& [holder, q] : s_.storage_quotas) out.push_back(q);
  return out;
}

}  // namespace gpupool
