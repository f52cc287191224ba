#include "store/pg_leader.h"

#include <libpq-fe.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "store/pg_handles.h"
#include "store/pg_store.h"

namespace gpupool {

struct PgLeader::Impl {
  PgLeaderOptions options;
  PgConnPtr conn;

  // Runs `sql` with text parameters; the result, or Unavailable/Internal.
  Result<PgResultPtr> Run(const char* sql, const std::vector<std::string>& params) {
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      PQreset(conn.get());
      if (PQstatus(conn.get()) != CONNECTION_OK) {
        return Status::Unavailable("leader election: cannot reach PostgreSQL: " +
                                   std::string(PQerrorMessage(conn.get())));
      }
    }
    std::vector<const char*> values;
    for (const std::string& p : params) values.push_back(p.c_str());
    PgResultPtr r(PQexecParams(conn.get(), sql, static_cast<int>(values.size()), nullptr,
                               values.data(), nullptr, nullptr, 0));
    ExecStatusType st = PQresultStatus(r.get());
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      std::string why = PQresultErrorMessage(r.get());
      if (PQstatus(conn.get()) != CONNECTION_OK) {
        return Status::Unavailable("leader election: lost PostgreSQL: " + why);
      }
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
  // A renewal that gets no answer fails within half a lease, so that a
  // leader cut off from the database stops before its lease runs out.
  impl->conn.reset(PgStore::Connect(options.url, options.lease_ms / 2));
  if (PQstatus(impl->conn.get()) != CONNECTION_OK) {
    return Status::Unavailable("leader election: cannot connect to PostgreSQL at " +
                               PgStore::Redacted(options.url) + ": " +
                               PQerrorMessage(impl->conn.get()));
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
  const PgLeaderOptions& o = impl_->options;
  GP_RETURN_IF_ERROR(impl_->Run(kTake, {o.id, o.address, std::to_string(o.lease_ms)}).status());
  GP_ASSIGN_OR_RETURN(PgResultPtr read, impl_->Run(kRead, {o.id}));
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

void PgLeader::set_address(std::string address) { impl_->options.address = std::move(address); }

Status PgLeader::Resign() {
  static const char* kResign =
      "UPDATE gpupool_leader SET expires_at = now() WHERE id = 1 AND holder = $1";
  return impl_->Run(kResign, {impl_->options.id}).status();
}

}  // namespace gpupool
