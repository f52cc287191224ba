// Authorization: who may do what on which object, in one table.
//
// Every request is checked here and nowhere else: the API maps an endpoint
// to an Action and the object it touches to a Resource, and Authorize()
// looks the pair up in kRules (authz.cpp, and docs/api.md#authorization).
// A token's scopes narrow what its role allows; they never widen it.
//
// Pure and allocation-free: the check runs on every request.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::server {

enum class Role : uint8_t {
  kAdmin,     // manages everything
  kProvider,  // lends nodes; a member besides
  kMember,    // submits and follows their own jobs
  kAgent,     // an enrolled agent, acting as its node
  kJoin,      // the pool's join token: may only enroll agents
};
std::string_view RoleName(Role r);
Result<Role> ParseRole(std::string_view name);
// The roles a user account may have (admin, provider, member).
Result<Role> ParseUserRole(std::string_view name);

enum class Action : uint8_t {
  kJobSubmit,        // POST /v1/jobs
  kJobRead,          // a job, its logs, checkpoints and sessions; the queue
  kJobCancel,        // POST /v1/jobs/{id}/cancel
  kCheckpointWrite,  // an agent registering its attempt's checkpoint
  kBlobRead,         // fetch chunks and manifests by content id
  kBlobWrite,        // upload chunks and manifests (job inputs, checkpoints)
  kPoolRead,         // nodes, node events, groups
  kNodeManage,       // revoke a node's credential, see its enrollment
  kOwnTokens,        // create, list and revoke one's own tokens; change one's password
  kAdminister,       // users, groups, others' tokens, audit log, join token, gc
  kAgentConnect,     // the agent channel (/v1/agent/connect)
  kAgentEnroll,      // POST /v1/agent/enroll
  kJobConnect,       // a job's tunnels, exec and shell; a session's Jupyter proxy
  kMetricsRead,      // GET /metrics (Prometheus)
};
inline constexpr int kActionCount = 14;
std::string_view ActionName(Action a);

// Token scopes, a bit set. "*" grants every scope.
enum Scope : uint32_t {
  kScopeJobsRead = 1u << 0,    // "jobs:read"
  kScopeJobsWrite = 1u << 1,   // "jobs:write"
  kScopePoolRead = 1u << 2,    // "pool:read"
  kScopeNodesWrite = 1u << 3,  // "nodes:write"
  kScopeTokens = 1u << 4,      // "tokens"
  kScopeAdmin = 1u << 5,       // "admin"
  kScopeAgent = 1u << 6,       // "agent"
  kScopeEnroll = 1u << 7,      // "enroll"
  kScopeMetrics = 1u << 8,     // "metrics"
};
inline constexpr uint32_t kAllScopes = 0x1ff;
// "jobs:read,jobs:write" or "*" -> bits. InvalidArgument names an unknown scope.
Result<uint32_t> ParseScopes(std::string_view text);
std::string ScopesToString(uint32_t scopes);

struct Principal {
  std::string subject;  // a user name; the node name for agents; "join" for the join token
  Role role = Role::kMember;
  uint32_t scopes = kAllScopes;
  std::vector<std::string> groups;         // the labs the subject belongs to
  std::vector<std::string> shared_groups;  // ... of those, the ones whose members share jobs
  std::string token_id;                    // the token's public id (for rate limits and audit)
  bool is_admin() const { return role == Role::kAdmin; }
};

// The object an action touches. For jobs: the owner and the job's group
// (for a submission: the lab it is charged to, "" when that group is not a
// lab); for nodes: the provider who enrolled it; for a checkpoint write: the
// node the attempt runs on. Empty for actions on no particular object.
struct Resource {
  Resource() = default;
  Resource(std::string_view owner_, std::string_view group_ = {})  // NOLINT: {owner, group}
      : owner(owner_), group(group_) {}
  std::string_view owner;
  std::string_view group;
};

enum class Decision : uint8_t {
  kAllowed,
  kNotYours,  // the role may not touch this object (the API may answer 404 to hide it)
  kNoScope,   // the role may, the token's scopes do not let it
};
Decision Decide(const Principal& who, Action action, const Resource& object = {});

// Ok, or PermissionDenied saying what is missing.
Status Authorize(const Principal& who, Action action, const Resource& object = {});

}  // namespace gpupool::server
