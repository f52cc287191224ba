#include "store/pg_leader.h"

#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "store/pg_handles.h"
#include "store/pg_store.h"

namespace gpupool {

namespace {

int64_t MonotonicMs() { return RealClock().MonoMs(); }

// Waits until `conn`'s socket is readable (or writable), or the deadline.
bool WaitFor(PGconn* conn, bool write, int64_t deadline_ms) {
  pollfd p{
      .fd = PQsocket(conn), .events = static_cast<short>(write ? POLLOUT : POLLIN), .revents = 0};
  while (true) {
    const int64_t left = deadline_ms - MonotonicMs();
    if (left <= 0 || p.fd < 0) return false;
    int n = ::poll(&p, 1, static_cast<int>(left));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

}  // namespace

struct PgLeader::Impl {
  PgLeaderOptions options;
  PgConnPtr conn;
  std::mutex mu;  // one statement at a time: the lease keeper's and the API's

  // Every wait on the database is bounded by a third of the lease: a
  // database that stops answering (hung, or cut off by a partition, where
  // TCP itself may wait for minutes) fails the call in time for the leader
  // to stop before its lease ends. The connection is then dropped and made
  // again at the next call.
  int64_t Deadline() const { return MonotonicMs() + std::max<int64_t>(300, options.lease_ms / 3); }

  Status Lost(const std::string& why) {
    conn.reset();
    return Status::Unavailable("leader election: " + why);
  }

  Status Reconnect(int64_t deadline_ms) {
    conn.reset(PgStore::StartConnect(options.url, options.lease_ms / 2));
    if (!conn || PQstatus(conn.get()) == CONNECTION_BAD) {
      return Lost("cannot connect to PostgreSQL: " +
                  std::string(conn ? PQerrorMessage(conn.get()) : "out of memory"));
    }
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (st != PGRES_POLLING_OK) {
      if (st == PGRES_POLLING_FAILED) {
        return Lost("cannot connect to PostgreSQL: " + std::string(PQerrorMessage(conn.get())));
      }
      if (!WaitFor(conn.get(), st == PGRES_POLLING_WRITING, deadline_ms)) {
        return Lost("PostgreSQL did not answer the connection in time");
      }
      st = PQconnectPoll(conn.get());
    }
    if (PQsetnonblocking(conn.get(), 1) != 0)
      return Lost("cannot make the connection non-blocking");
    return Status::Ok();
  }

  // Runs `sql` with text parameters by `deadline` (MonotonicMs); the
  // result, or Unavailable/Internal.
  Result<PgResultPtr> Run(const char* sql, const std::vector<std::string>& params,
                          int64_t deadline) {
    if (!conn || PQstatus(conn.get()) != CONNECTION_OK) GP_RETURN_IF_ERROR(Reconnect(deadline));
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    if (!PQsendQueryParams(conn.get(), sql, static_cast<int>(values.size()), nullptr, values.data(),
                           nullptr, nullptr, 0)) {
      return Lost("lost PostgreSQL: " + std::string(PQerrorMessage(conn.get())));
    }
    for (int flushed = PQflush(conn.get()); flushed != 0; flushed = PQflush(conn.get())) {
      if (flushed < 0 || !WaitFor(conn.get(), true, deadline)) {
        return Lost("PostgreSQL did not take the statement in time");
      }
    }
    // Every result until the end of the command (PQgetResult's null), each
    // waited for within the deadline: a blocking PQgetResult could wait on
    // a partition for as long as TCP does.
    PgResultPtr r;
    while (true) {
      while (PQisBusy(conn.get())) {
        if (!WaitFor(conn.get(), false, deadline)) return Lost("PostgreSQL did not answer in time");
        if (!PQconsumeInput(conn.get())) {
          return Lost("lost PostgreSQL: " + std::string(PQerrorMessage(conn.get())));
        }
      }
      PgResultPtr next(PQgetResult(conn.get()));
      if (!next) break;
      if (!r) r = std::move(next);
    }
    ExecStatusType st = PQresultStatus(r.get());
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      std::string why = r ? PQresultErrorMessage(r.get()) : PQerrorMessage(conn.get());
      if (PQstatus(conn.get()) != CONNECTION_OK) return Lost("lost PostgreSQL: " + why);
      return Status::Internal("leader election: " + why);
    }
    return r;
  }
};

Result<std::unique_ptr<PgLeader>> PgLeader::Connect(const PgLeaderOptions& options) {
  if (options.id.empty() || options.lease_ms < 1000) {
    return Status::InvalidArgument("leader election: an id and a lease of at least 1 s");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (Status s = impl->Reconnect(MonotonicMs() + std::max<int64_t>(5000, options.lease_ms));
      !s.ok()) {
    return Status::Unavailable(s.message() + " (" + PgStore::Redacted(options.url) + ")");
  }
  return std::unique_ptr<PgLeader>(new PgLeader(std::move(impl)));
}

PgLeader::PgLeader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PgLeader::~PgLeader() = default;

Result<LeaderView> PgLeader::Tick() {
  // Take the lease when it has ended, or renew it when it is ours: a new
  // epoch unless it is our own lease still running. Then read the row.
  static const char* kTake =
      "UPDATE gpupool_leader SET epoch = CASE WHEN holder = $1 AND expires_at > now() THEN epoch "
      "ELSE epoch + 1 END, holder = $1, address = $2, expires_at = now() + $3::bigint * "
      "interval '1 millisecond' WHERE id = 1 AND (expires_at <= now() OR holder = $1)";
  static const char* kRead =
      "SELECT epoch, holder, address, GREATEST(0, (EXTRACT(EPOCH FROM expires_at - now()) * "
      "1000)::bigint), holder = $1 AND expires_at > now() FROM "
      "gpupool_leader WHERE id = 1";
  static const char* kHeard =
      "INSERT INTO gpupool_servers AS s VALUES ($1, $2, $3, now(), now()) ON CONFLICT (id) DO "
      "UPDATE SET address = EXCLUDED.address, version = EXCLUDED.version, seen_at = now()";
  std::lock_guard lock(impl_->mu);
  const int64_t deadline = impl_->Deadline();
  const PgLeaderOptions& o = impl_->options;
  GP_RETURN_IF_ERROR(
      impl_->Run(kTake, {o.id, o.address, std::to_string(o.lease_ms)}, deadline).status());
  GP_RETURN_IF_ERROR(impl_->Run(kHeard, {o.id, o.address, o.version}, deadline).status());
  GP_ASSIGN_OR_RETURN(PgResultPtr read, impl_->Run(kRead, {o.id}, deadline));
  const PGresult* r = read.get();
  LeaderView v;
  if (PQntuples(r) == 1) {
    v.epoch = std::atoll(PQgetvalue(r, 0, 0));
    v.lease_left_ms = std::atoll(PQgetvalue(r, 0, 3));
    v.leading = PQgetvalue(r, 0, 4)[0] == 't';
    if (v.lease_left_ms > 0) {
      v.leader_id = PQgetvalue(r, 0, 1);
      v.leader_address = PQgetvalue(r, 0, 2);
    }
  }
  return v;
}

void PgLeader::set_address(std::string address) {
  std::lock_guard lock(impl_->mu);
  impl_->options.address = std::move(address);
}

Status PgLeader::Resign() {
  static const char* kResign =
      "UPDATE gpupool_leader SET expires_at = now() WHERE id = 1 AND holder = $1";
  static const char* kGone = "DELETE FROM gpupool_servers WHERE id = $1";
  std::lock_guard lock(impl_->mu);
  const int64_t deadline = impl_->Deadline();
  GP_RETURN_IF_ERROR(impl_->Run(kResign, {impl_->options.id}, deadline).status());
  return impl_->Run(kGone, {impl_->options.id}, deadline).status();
}

Result<std::vector<ServerSeen>> PgLeader::Servers(int64_t* epoch) {
  static const char* kForget =
      "DELETE FROM gpupool_servers WHERE seen_at < now() - interval '1 hour'";
  static const char* kList =
      "SELECT s.id, s.address, s.version, (EXTRACT(EPOCH FROM s.started_at) * 1000)::bigint, "
      "GREATEST(0, (EXTRACT(EPOCH FROM now() - s.seen_at) * 1000)::bigint), "
      "l.holder = s.id AND l.expires_at > now(), l.epoch FROM gpupool_servers s CROSS JOIN "
      "gpupool_leader l WHERE l.id = 1 ORDER BY s.started_at, s.id";
  std::lock_guard lock(impl_->mu);
  const int64_t deadline = impl_->Deadline();
  GP_RETURN_IF_ERROR(impl_->Run(kForget, {}, deadline).status());
  GP_ASSIGN_OR_RETURN(PgResultPtr list, impl_->Run(kList, {}, deadline));
  const PGresult* r = list.get();
  std::vector<ServerSeen> out;
  for (int i = 0; i < PQntuples(r); ++i) {
    out.push_back({.id = PQgetvalue(r, i, 0),
                   .address = PQgetvalue(r, i, 1),
                   .version = PQgetvalue(r, i, 2),
                   .started_ms = std::atoll(PQgetvalue(r, i, 3)),
                   .seen_ago_ms = std::atoll(PQgetvalue(r, i, 4)),
                   .leading = PQgetvalue(r, i, 5)[0] == 't'});
    if (epoch) *epoch = std::atoll(PQgetvalue(r, i, 6));
  }
  return out;
}

}  // namespace gpupool
