#include "server/authz.h"

#include <algorithm>
#include <array>

namespace gpupool::server {

namespace {

// Which objects of an action a role may touch.
enum class Reach : uint8_t {
  kNone,
  kAll,
  kOwn,         // object.owner == who.subject
  kOwnOrGroup,  // ... or the object's group shares jobs and who is in it
  kInGroup,     // object.group is "" or one of who's groups
};

struct Rule {
  Action action;
  uint32_t scope;  // the token must hold it
  // Indexed by Role: admin, provider, member, agent, join.
  std::array<Reach, 5> reach;
};

using enum Reach;
// The authorization table. docs/api.md#authorization shows it to users, and
// server_test's matrix runs every cell of it through the HTTP API.
constexpr std::array<Rule, kActionCount> kRules = {{
    //                                         admin  provider     member       agent  join
    {Action::kJobSubmit, kScopeJobsWrite, {kAll, kInGroup, kInGroup, kNone, kNone}},
    {Action::kJobRead, kScopeJobsRead, {kAll, kOwnOrGroup, kOwnOrGroup, kNone, kNone}},
    {Action::kJobCancel, kScopeJobsWrite, {kAll, kOwnOrGroup, kOwnOrGroup, kNone, kNone}},
    {Action::kCheckpointWrite, kScopeAgent, {kAll, kNone, kNone, kOwn, kNone}},
    {Action::kBlobRead, kScopeJobsRead, {kAll, kAll, kAll, kAll, kNone}},
    {Action::kBlobWrite, kScopeJobsWrite, {kAll, kAll, kAll, kAll, kNone}},
    {Action::kPoolRead, kScopePoolRead, {kAll, kAll, kAll, kNone, kNone}},
    {Action::kNodeManage, kScopeNodesWrite, {kAll, kOwn, kNone, kNone, kNone}},
    {Action::kOwnTokens, kScopeTokens, {kAll, kAll, kAll, kNone, kNone}},
    {Action::kAdminister, kScopeAdmin, {kAll, kNone, kNone, kNone, kNone}},
    {Action::kAgentConnect, kScopeAgent, {kNone, kNone, kNone, kOwn, kNone}},
    {Action::kAgentEnroll, kScopeEnroll, {kAll, kAll, kNone, kNone, kAll}},
    // Only the owner: a shell in a job is the owner's identity, which a lab
    // that shares jobs for reading and cancelling does not share.
    {Action::kJobConnect, kScopeJobsWrite, {kAll, kOwn, kOwn, kNone, kNone}},
    // Pool-wide counts and GPU telemetry, no job ids: what pool:read shows.
    // The scope exists for a scrape-only token (`--scopes metrics`).
    {Action::kMetricsRead, kScopeMetrics, {kAll, kAll, kAll, kNone, kNone}},
}};

constexpr bool TableIsInActionOrder() {
  for (size_t i = 0; i < kRules.size(); ++i) {
    if (static_cast<size_t>(kRules[i].action) != i) return false;
  }
  return true;
}
static_assert(TableIsInActionOrder(), "kRules must list every Action once, in order");

constexpr std::array<std::string_view, kActionCount> kActionNames = {
    "submit jobs",         "read this job",       "cancel this job",       "write checkpoints",
    "read blobs",          "upload blobs",        "read the pool",         "manage this node",
    "manage tokens",       "administer the pool", "connect as this agent", "enroll agents",
    "connect to this job", "read the metrics"};

constexpr std::array<std::pair<std::string_view, uint32_t>, 9> kScopeNames = {{
    {"jobs:read", kScopeJobsRead},
    {"jobs:write", kScopeJobsWrite},
    {"pool:read", kScopePoolRead},
    {"nodes:write", kScopeNodesWrite},
    {"tokens", kScopeTokens},
    {"admin", kScopeAdmin},
    {"agent", kScopeAgent},
    {"enroll", kScopeEnroll},
    {"metrics", kScopeMetrics},
}};

constexpr std::array<std::string_view, 5> kRoleNames = {"admin", "provider", "member", "agent",
                                                        "agent-join"};

std::string_view ScopeName(uint32_t bit) {
  for (const auto& [name, b] : kScopeNames) {
    if (b == bit) return name;
  }
  return "?";
}

}  // namespace

std::string_view RoleName(Role r) { return kRoleNames[static_cast<size_t>(r)]; }

Result<Role> ParseRole(std::string_view name) {
  for (size_t i = 0; i < kRoleNames.size(); ++i) {
    if (kRoleNames[i] == name) return static_cast<Role>(i);
  }
  return Status::InvalidArgument("unknown role \"" + std::string(name) + "\"");
}

Result<Role> ParseUserRole(std::string_view name) {
  auto role = ParseRole(name);
  if (!role.ok() || *role == Role::kAgent || *role == Role::kJoin) {
    return Status::InvalidArgument("role: must be admin, provider or member, got \"" +
                                   std::string(name) + "\"");
  }
  return role;
}

std::string_view ActionName(Action a) { return kActionNames[static_cast<size_t>(a)]; }

Result<uint32_t> ParseScopes(std::string_view text) {
  if (text == "*" || text.empty()) return kAllScopes;
  uint32_t bits = 0;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    auto it = std::find_if(kScopeNames.begin(), kScopeNames.end(),
                           [&](const auto& s) { return s.first == item; });
    if (it == kScopeNames.end()) {
      return Status::InvalidArgument(
          "scopes: unknown scope \"" + std::string(item) +
          "\" (known: jobs:read, jobs:write, pool:read, nodes:write, tokens, admin, agent, "
          "enroll, metrics, or * for all)");
    }
    bits |= it->second;
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
  }
  return bits;
}

std::string ScopesToString(uint32_t scopes) {
  if ((scopes & kAllScopes) == kAllScopes) return "*";
  std::string out;
  for (const auto& [name, bit] : kScopeNames) {
    if ((scopes & bit) == 0) continue;
    if (!out.empty()) out += ',';
    out += name;
  }
  return out;
}

Decision Decide(const Principal& who, Action action, const Resource& object) {
  const Rule& rule = kRules[static_cast<size_t>(action)];
  auto contains = [](const std::vector<std::string>& v, std::string_view x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  bool allowed = false;
  switch (rule.reach[static_cast<size_t>(who.role)]) {
    case kNone:
      break;
    case kAll:
      allowed = true;
      break;
    case kOwn:
      allowed = object.owner == who.subject;
      break;
    case kOwnOrGroup:
      allowed = object.owner == who.subject ||
                (!object.group.empty() && contains(who.shared_groups, object.group));
      break;
    case kInGroup:
      allowed = object.group.empty() || contains(who.groups, object.group);
      break;
  }
  if (!allowed) return Decision::kNotYours;
  return (who.scopes & rule.scope) != 0 ? Decision::kAllowed : Decision::kNoScope;
}

Status Authorize(const Principal& who, Action action, const Resource& object) {
  switch (Decide(who, action, object)) {
    case Decision::kAllowed:
      return Status::Ok();
    case Decision::kNotYours:
      return Status::PermissionDenied(std::string(RoleName(who.role)) + " " + who.subject +
                                      " may not " + std::string(ActionName(action)));
    case Decision::kNoScope:
      break;
  }
  return Status::PermissionDenied(
      "this token lacks the scope " +
      std::string(ScopeName(kRules[static_cast<size_t>(action)].scope)) + " needed to " +
      std::string(ActionName(action)));
}

}  // namespace gpupool::server
