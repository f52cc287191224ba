// MemoryStore's identity and meta facets (store/memory_tables.h): tokens,
// users, groups, the audit log, and named values.
#include <algorithm>
#include <tuple>

#include "store/memory_tables.h"

namespace gpupool {
namespace {

template <typename M>
auto Find(const M& m, const typename M::key_type& k) -> std::optional<typename M::mapped_type> {
  auto it = m.find(k);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

template <typename M>
auto Values(const M& m) -> std::vector<typename M::mapped_type> {
  std::vector<typename M::mapped_type> out;
  out.reserve(m.size());
  for (const auto& [k, v] : m) out.push_back(v);
  return out;
}

}  // namespace

// ---- tokens

Status MemoryTx::PutToken(const TokenRecord& t) {
  j_.Put(s_.tokens, t.hash, t);
  return Status::Ok();
}

Result<std::optional<TokenRecord>> MemoryTx::GetToken(const std::string& hash) {
  return Find(s_.tokens, hash);
}

Result<std::vector<TokenRecord>> MemoryTx::ListTokens(const std::string& subject) {
  std::vector<TokenRecord> out;
  for (const auto& [hash, t] : s_.tokens) {
    if (subject.empty() || t.subject == subject) out.push_back(t);
  }
  // Oldest first, as SQLite orders them (created_ms, then hash).
  std::sort(out.begin(), out.end(), [](const TokenRecord& a, const TokenRecord& b) {
    return std::tie(a.created_ms, a.hash) < std::tie(b.created_ms, b.hash);
  });
  return out;
}

// ---- users and groups

Status MemoryTx::PutUser(const UserRecord& u) {
  j_.Put(s_.users, u.name, u);
  return Status::Ok();
}

Result<std::optional<UserRecord>> MemoryTx::GetUser(const std::string& name) {
  return Find(s_.users, name);
}

Result<std::vector<UserRecord>> MemoryTx::ListUsers() { return Values(s_.users); }

Status MemoryTx::PutGroup(const GroupRecord& g) {
  j_.Put(s_.groups, g.name, g);
  return Status::Ok();
}

Result<std::optional<GroupRecord>> MemoryTx::GetGroup(const std::string& name) {
  return Find(s_.groups, name);
}

Result<std::vector<GroupRecord>> MemoryTx::ListGroups() { return Values(s_.groups); }

// ---- audit

Result<int64_t> MemoryTx::AppendAudit(const AuditEntry& e) {
  AuditEntry stored = e;
  stored.id = s_.last_audit_id + 1;
  j_.Set(s_.last_audit_id, stored.id);
  j_.Put(s_.audit, stored.id, stored);
  return stored.id;
}

Result<std::vector<AuditEntry>> MemoryTx::ListAudit(int64_t after_id, int64_t before_id,
                                                    int32_t limit) {
  std::vector<AuditEntry> out;
  if (limit <= 0) return out;
  if (before_id > 0) {  // newest first
    for (auto it = s_.audit.lower_bound(before_id);
         it != s_.audit.begin() && out.size() < static_cast<size_t>(limit);) {
      --it;
      if (it->first <= after_id) break;
      out.push_back(it->second);
    }
    return out;
  }
  for (auto it = s_.audit.upper_bound(after_id);
       it != s_.audit.end() && out.size() < static_cast<size_t>(limit); ++it) {
    out.push_back(it->second);
  }
  return out;
}

// ---- meta

Result<std::optional<std::string>> MemoryTx::GetMeta(const std::string& key) {
  return Find(s_.meta, key);
}

Status MemoryTx::PutMeta(const std::string& key, const std::string& value) {
  j_.Put(s_.meta, key, value);
  return Status::Ok();
}

}  // namespace gpupool
