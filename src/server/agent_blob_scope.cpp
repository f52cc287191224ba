#include "server/agent_blob_scope.h"

#include <algorithm>

#include "blob/manifest.h"
#include "common/ids.h"

namespace gpupool::server {

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

AgentBlobScope::AgentBlobScope(Store& store, BlobService& blobs, const Clock& clock,
                               AgentBlobScopeOptions options)
    : store_(store), blobs_(blobs), clock_(clock), options_(options) {}

Result<std::set<std::string>> AgentBlobScope::Readable(const std::string& node_name) {
  std::set<std::string> out;
  GP_RETURN_IF_ERROR(store_.Transact([&](Tx& tx) -> Status {
    GP_ASSIGN_OR_RETURN(auto node, tx.GetNodeByName(node_name));
    if (!node) return Status::Ok();
    AttemptQuery q;
    q.node_id = node->id;
    q.live_only = true;
    GP_ASSIGN_OR_RETURN(auto live, tx.ListAttempts(q));
    std::set<int64_t> jobs;
    for (const Attempt& a : live) {
      // Only the job's current attempt: a stale one reads nothing.
      if (!jobs.insert(a.job_id).second) continue;
      GP_ASSIGN_OR_RETURN(auto job, tx.GetJob(a.job_id));
      if (!job || job->current_attempt != a.id) continue;
      if (!job->spec.inputs.empty()) out.insert(job->spec.inputs);
      GP_ASSIGN_OR_RETURN(auto checkpoints, tx.ListCheckpoints(a.job_id));
      for (const Checkpoint& c : checkpoints) out.insert(c.manifest);
    }
    return Status::Ok();
  }));
  if (auto it = staged_.find(node_name); it != staged_.end()) {
    const int64_t now = clock_.MonoMs();
    for (auto g = it->second.begin(); g != it->second.end();) {
      if (g->second <= now) {
        g = it->second.erase(g);
        continue;
      }
      out.insert(g->first);
      ++g;
    }
    if (it->second.empty()) staged_.erase(it);
  }
  return out;
}

void AgentBlobScope::GrantStage(const std::string& node_name, const std::string& manifest) {
  staged_[node_name][manifest] = clock_.MonoMs() + options_.stage_ttl_ms;
}

bool AgentBlobScope::KeyOf(const std::string& hex_id, Key* out) {
  if (hex_id.size() < 2 * out->size()) return false;
  for (size_t i = 0; i < out->size(); ++i) {
    int hi = HexDigit(hex_id[2 * i]), lo = HexDigit(hex_id[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

std::shared_ptr<const AgentBlobScope::ChunkList> AgentBlobScope::ChunksOf(
    const std::string& manifest) {
  {
    std::lock_guard lock(mu_);
    if (auto it = cache_.find(manifest); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      return it->second.chunks;
    }
  }
  auto list = std::make_shared<ChunkList>();
  bool read = false;
  if (auto text = blobs_.GetManifest(manifest); text.ok()) {
    if (auto m = blob::DecodeManifest(*text); m.ok()) {
      for (const blob::ChunkId& id : m->ChunkIds()) {
        Key k;
        if (KeyOf(id, &k)) list->push_back(k);
      }
      std::sort(list->begin(), list->end());
      read = true;
    }
  }
  std::shared_ptr<const ChunkList> out = list;
  // Not cached: a manifest that could not be read (it may be next time), or
  // one too large for the cache.
  if (!read || list->size() > options_.cache_chunk_ids) return out;
  std::lock_guard lock(mu_);
  if (cache_.count(manifest)) return out;  // another thread was faster
  cached_ids_ += list->size();
  lru_.push_front(manifest);
  cache_[manifest] = Cached{out, lru_.begin()};
  while (cached_ids_ > options_.cache_chunk_ids && !lru_.empty()) {
    auto victim = cache_.find(lru_.back());
    cached_ids_ -= victim->second.chunks->size();
    cache_.erase(victim);
    lru_.pop_back();
  }
  return out;
}

Status AgentBlobScope::CheckChunks(const std::set<std::string>& manifests,
                                   const std::vector<std::string>& chunk_ids) {
  if (chunk_ids.empty()) return Status::Ok();
  std::vector<std::shared_ptr<const ChunkList>> lists;
  lists.reserve(manifests.size());
  for (const std::string& m : manifests) lists.push_back(ChunksOf(m));
  for (const std::string& id : chunk_ids) {
    Key k;
    bool found = KeyOf(id, &k) && std::any_of(lists.begin(), lists.end(), [&](const auto& l) {
                   return std::binary_search(l->begin(), l->end(), k);
                 });
    if (!found) {
      return Status::PermissionDenied("chunk " + id +
                                      " belongs to no job running on this node: agents read "
                                      "only their own attempts' inputs and checkpoints");
    }
  }
  return Status::Ok();
}

}  // namespace gpupool::server
