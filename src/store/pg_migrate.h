// Moving a pool from SQLite to PostgreSQL (`gpupool admin migrate --from
// DATA_DIR --to postgresql://...`), offline: the server must be stopped.
//
// Contract:
// - The SQLite database is first brought to this binary's schema version
//   (as the server would, with its copy aside), then read through a
//   connection of its own; it is never written otherwise.
// - The PostgreSQL database (its search_path's schema) must hold no pool:
//   its schema is created if missing, and a table with rows refuses the
//   migration (FailedPrecondition naming it), nothing changed.
// - Every table is copied row by row, ids kept (identity sequences moved
//   past them), in one PostgreSQL transaction; storage_refs is not copied
//   but rebuilt by PostgreSQL's triggers from the jobs and checkpoints, as
//   the server's would be.
// - The copy is checked before it commits: each table's rows (storage_refs
//   included) are counted and hashed on both sides (an order-free digest of
//   every value: NULL, integer, text and bytes told apart); a difference
//   rolls everything back (DataLoss naming the table) and nothing is left
//   in PostgreSQL but the empty schema.
//
// Threading: blocking, on the caller's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpupool {

struct MigratedTable {
  std::string table;
  int64_t rows = 0;
  std::string digest;  // the rows' digest, equal on both sides
};

Result<std::vector<MigratedTable>> MigrateSqliteToPostgres(const std::string& sqlite_path,
                                                           const std::string& pg_url);

}  // namespace gpupool
