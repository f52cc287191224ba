// Internal to the PostgreSQL store (pg_store.cpp, pg_leader.cpp,
// pg_migrate.cpp): owning handles for libpq's connections and results.
#pragma once

#include <libpq-fe.h>

#include <memory>

namespace gpupool {

struct PgConnClose {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct PgResultClear {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgConnPtr = std::unique_ptr<PGconn, PgConnClose>;
using PgResultPtr = std::unique_ptr<PGresult, PgResultClear>;

}  // namespace gpupool
