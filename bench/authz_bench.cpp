// The cost of deciding who may do what, per request (docs/performance.md,
// "Authorization"): server::Authorize on the cases the API meets, and the
// whole per-request path for a cached token (SHA-256 of the bearer token,
// the cache lookup, the decision). Target: under 5 us per request.
#include <benchmark/benchmark.h>

#include <filesystem>

#include "common/clock.h"
#include "server/auth.h"
#include "server/authz.h"
#include "store/sqlite_store.h"

namespace gpupool::server {
namespace {

Principal Member() {
  Principal p;
  p.subject = "alice";
  p.role = Role::kMember;
  p.scopes = kAllScopes;
  p.groups = {"nlp", "robotics", "vision"};
  p.shared_groups = {"robotics", "vision"};
  p.token_id = "1be409b57dd9";
  return p;
}

void BM_AuthorizeOwnJob(benchmark::State& state) {
  Principal who = Member();
  for (auto _ : state) benchmark::DoNotOptimize(Authorize(who, Action::kJobRead, {"alice", "x"}));
}
BENCHMARK(BM_AuthorizeOwnJob);

void BM_AuthorizeLabMatesJob(benchmark::State& state) {
  Principal who = Member();
  for (auto _ : state)
    benchmark::DoNotOptimize(Authorize(who, Action::kJobCancel, {"carol", "vision"}));
}
BENCHMARK(BM_AuthorizeLabMatesJob);

// A refusal builds its message: the slow path.
void BM_AuthorizeRefused(benchmark::State& state) {
  Principal who = Member();
  for (auto _ : state) benchmark::DoNotOptimize(Authorize(who, Action::kAdminister));
}
BENCHMARK(BM_AuthorizeRefused);

// What every API request pays: authenticate a cached bearer token, then
// authorize the action on the object.
void BM_AuthenticateAndAuthorize(benchmark::State& state) {
  std::string dir = std::filesystem::temp_directory_path() / "gpupool-authz-bench-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    state.SkipWithError("mkdtemp failed");
    return;
  }
  auto store = SqliteStore::Open(dir + "/state.db");
  RealClock clock;
  Auth auth(**store, clock);
  if (!auth.Bootstrap(dir, "").ok() || !auth.AddUser("alice", Role::kMember, "").ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  auto token = auth.CreateToken("alice", Role::kMember, "bench", kAllScopes, 0);
  std::string header = "Bearer " + token->secret;
  (void)auth.Authenticate(header);  // fills the cache, as the first request does
  for (auto _ : state) {
    auto who = auth.Authenticate(header);
    benchmark::DoNotOptimize(Authorize(*who, Action::kJobRead, {"alice", "vision"}));
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_AuthenticateAndAuthorize);

}  // namespace
}  // namespace gpupool::server

BENCHMARK_MAIN();
