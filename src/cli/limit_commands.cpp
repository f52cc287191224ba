#include "cli/limit_commands.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/command_util.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/units.h"
#include "store/pg_migrate.h"
#include "store/pg_store.h"
#include "store/sqlite_files.h"
#include "store/sqlite_store.h"

namespace gpupool::cli {

using nlohmann::json;

namespace {

std::string LimitText(const json& q) {
  if (!q.contains("limit_bytes") || !q["limit_bytes"].is_number_integer()) return "none";
  std::string text = FormatBytes(q["limit_bytes"].get<int64_t>());
  if (q.value("limit_is_default", false)) text += " (default)";
  return text;
}

int CmdQuotas(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/quotas");
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  Table t({"KIND", "NAME", "STORED", "TRANSIENT", "QUOTA", "USE"});
  for (const json& q : (*r)["quotas"]) {
    std::string use = "-";
    if (q.contains("limit_bytes") && q["limit_bytes"].is_number_integer()) {
      int64_t limit = q["limit_bytes"].get<int64_t>();
      int64_t held = Int(q, "used_bytes") + Int(q, "transient_bytes");
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.0f%%",
                    limit > 0 ? 100.0 * static_cast<double>(held) / static_cast<double>(limit)
                              : (held > 0 ? 100.0 : 0.0));
      use = buf;
    }
    t.Add({Str(q, "kind"), Str(q, "name"), FormatBytes(Int(q, "used_bytes")),
           FormatBytes(Int(q, "transient_bytes")), LimitText(q), use});
  }
  t.Print(std::cout);
  return 0;
}

int CmdQuotaSet(const GlobalFlags& g, const LimitFlags& f) {
  if (f.user.empty() == f.group.empty()) {
    return ReportError(Status::InvalidArgument("give --user NAME or --group NAME"));
  }
  std::string target =
      f.user.empty() ? "/v1/quotas/groups/" + f.group : "/v1/quotas/users/" + f.user;
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  Result<json> r = Status::Internal("unset");
  if (f.size == "none" || f.size == "default") {
    r = api->Delete(target);
  } else {
    auto bytes = ParseBytes(f.size);
    if (!bytes.ok()) {
      return ReportError(Status::InvalidArgument("SIZE: " + bytes.status().message() +
                                                 " (e.g. 500GiB, or none for the default)"));
    }
    r = api->Put(target, {{"bytes", *bytes}});
  }
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  std::cout << Str(*r, "kind") << " " << Str(*r, "name") << ": quota " << LimitText(*r)
            << ", stores " << FormatBytes(Int(*r, "used_bytes")) << "\n";
  return 0;
}

int CmdCheckpointDelete(const GlobalFlags& g, const LimitFlags& f) {
  auto job = ParseJobId(f.job);
  if (!job.ok()) return ReportError(job.status());
  if (f.all == (f.number > 0)) {
    return ReportError(Status::InvalidArgument("give --id N (one checkpoint) or --all"));
  }
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  std::string target = "/v1/jobs/" + std::to_string(*job) + "/checkpoints";
  if (!f.all) target += "/" + std::to_string(f.number);
  auto r = api->Delete(target);
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  std::cout << "deleted " << (*r)["deleted"].size() << " checkpoints of job " << *job << " ("
            << FormatBytes(Int(*r, "bytes")) << ")\n";
  return 0;
}

std::string Describe(const SqliteFileInfo& info) {
  return "schema version " + std::to_string(info.schema_version) + ", " + FormatBytes(info.bytes);
}

// Downloads a backup the server made, in ranges, to `file`.tmp; checks it
// and renames it to `file`.
Result<SqliteFileInfo> DownloadBackup(ApiClient& api, const json& made, const std::string& file) {
  const std::string id = Str(made, "id");
  const int64_t size = Int(made, "bytes");
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::InvalidArgument("cannot write " + tmp);
    int64_t offset = 0;
    while (offset < size) {
      GP_ASSIGN_OR_RETURN(std::string bytes,
                          api.GetBytes("/v1/admin/backups/" + id +
                                       "?offset=" + std::to_string(offset) + "&length=8388608"));
      if (bytes.empty())
        return Status::Internal("the server sent no bytes at offset " + std::to_string(offset));
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      offset += static_cast<int64_t>(bytes.size());
    }
    out.flush();
    if (!out) return Status::Internal("cannot write " + tmp);
  }
  (void)api.Delete("/v1/admin/backups/" + id);
  auto info = CheckSqliteFile(tmp);
  if (!info.ok() || info->bytes != size) {
    std::remove(tmp.c_str());
    if (!info.ok()) return info.status().WithContext("the downloaded backup");
    return Status::Internal("the downloaded backup has " + std::to_string(info->bytes) +
                            " bytes, not " + std::to_string(size));
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    return Status::Internal("cannot rename " + tmp + " to " + file);
  }
  return info;
}

int CmdBackup(const GlobalFlags& g, const LimitFlags& f) {
  if (!f.data_dir.empty()) {
    auto made = BackupSqliteFile(f.data_dir + "/state.db", f.file);
    if (!made.ok()) return ReportError(made.status());
    std::cout << "backed up " << f.data_dir << "/state.db (" << Describe(*made) << ") to " << f.file
              << "\n";
    return 0;
  }
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  // Making the copy takes about as long as reading the database once.
  auto made = api->Post("/v1/admin/backups", json::object(), 600'000);
  if (!made.ok()) return ReportError(made.status());
  auto info = DownloadBackup(*api, *made, f.file);
  if (!info.ok()) return ReportError(info.status());
  std::cout << "backed up the server's database (" << Describe(*info) << ") to " << f.file << "\n";
  return 0;
}

int CmdRestore(const LimitFlags& f) {
  auto done = RestoreSqliteFile(f.file, f.data_dir + "/state.db", SqliteStore::kSchemaVersion,
                                RealClock().NowMs());
  if (!done.ok()) return ReportError(done.status());
  std::cout << "restored " << f.file << " (" << Describe(done->restored) << ") into " << f.data_dir
            << "/state.db";
  if (!done->set_aside.empty()) std::cout << "; the old database is in " << done->set_aside;
  std::cout << "\nStart the server again; agents reconnect by themselves.\n";
  return 0;
}

int CmdServers(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get("/v1/admin/servers");
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  std::cout << "store: " << Str(*r, "store");
  if (Str(*r, "store") == "postgresql") {
    std::cout << ", epoch " << Int(*r, "epoch") << ", lease "
              << FormatDurationMs(Int(*r, "lease_ms"));
  }
  std::cout << "\n";
  Table t({"ID", "ADDRESS", "ROLE", "VERSION", "HEARD", "STARTED"});
  for (const json& s : (*r)["servers"]) {
    t.Add({Str(s, "id"), Str(s, "address"), Str(s, "role"), Str(s, "version"),
           FormatDurationMs(Int(s, "seen_ago_ms")) + " ago", Ago(Int(s, "started_ms"))});
  }
  t.Print(std::cout);
  return 0;
}

int CmdMigrate(const LimitFlags& f) {
  const std::string db = f.data_dir + "/state.db";
  auto in_use = SqliteFileInUse(db);
  if (!in_use.ok()) return ReportError(in_use.status());
  if (*in_use) {
    return ReportError(Status::FailedPrecondition(
        db + " is in use: stop the server first (the migration is offline)"));
  }
  auto moved = MigrateSqliteToPostgres(db, f.to);
  if (!moved.ok()) return ReportError(moved.status());
  int64_t rows = 0;
  for (const MigratedTable& t : *moved) {
    std::cout << "  " << t.table << ": " << t.rows << " rows\n";
    rows += t.rows;
  }
  std::cout << "moved " << rows << " rows of " << db << " to " << PgStore::Redacted(f.to)
            << "; every table checked (rows and their contents match). Start the server with "
               "--store and that URL; keep "
            << db << " until you no longer need to go back.\n";
  return 0;
}

}  // namespace

void AddLimitCommands(CLI::App& app, CLI::App& admin, CLI::App& checkpoint, GlobalFlags& g,
                      LimitFlags& f) {
  auto* quota = app.add_subcommand("quota", "your storage quota and your labs': stored, quota");
  quota->fallthrough();
  quota->callback([&] { f.run = [&] { return CmdQuotas(g); }; });

  auto* aq = admin.add_subcommand("quota", "storage quotas of users and groups");
  aq->require_subcommand(1);
  auto* list = aq->add_subcommand("list", "every user's and group's storage and quota");
  list->fallthrough();
  list->callback([&] { f.run = [&] { return CmdQuotas(g); }; });
  auto* set = aq->add_subcommand("set", "set a user's or group's quota: SIZE (500GiB) or none");
  set->fallthrough();
  set->add_option("--user", f.user, "the user");
  set->add_option("--group", f.group, "the group (a job's `group`)");
  set->add_option("size", f.size, "e.g. 500GiB; none = the server's default")->required();
  set->callback([&] { f.run = [&] { return CmdQuotaSet(g, f); }; });

  auto* del = checkpoint.add_subcommand(
      "delete", "delete a finished job's checkpoints (frees storage quota)");
  del->fallthrough();
  del->add_option("job", f.job, "job id")->required();
  del->add_option("--id", f.number, "checkpoint number")->check(CLI::PositiveNumber);
  del->add_flag("--all", f.all, "every checkpoint of the job");
  del->callback([&] { f.run = [&] { return CmdCheckpointDelete(g, f); }; });

  auto* backup = admin.add_subcommand(
      "backup", "write a consistent copy of the server's database to FILE (while it runs)");
  backup->fallthrough();
  backup->add_option("file", f.file, "where to write it")->required();
  backup->add_option("--data-dir", f.data_dir,
                     "copy DATA_DIR/state.db directly instead of through the server's API");
  backup->callback([&] { f.run = [&] { return CmdBackup(g, f); }; });

  auto* restore = admin.add_subcommand(
      "restore", "put a backup in place of DATA_DIR/state.db (the server must be stopped)");
  restore->add_option("file", f.file, "the backup")->required();
  restore->add_option("--data-dir", f.data_dir, "the server's data directory")->required();
  restore->callback([&] { f.run = [&] { return CmdRestore(f); }; });

  auto* servers = admin.add_subcommand(
      "servers", "the pool's servers: which leads, the standbys, those not heard from");
  servers->fallthrough();
  servers->callback([&] { f.run = [&] { return CmdServers(g); }; });

  auto* migrate = admin.add_subcommand(
      "migrate", "move a pool's state from SQLite to PostgreSQL (the server must be stopped)");
  migrate->add_option("--from", f.data_dir, "the server's data directory (its state.db)")
      ->required();
  migrate->add_option("--to", f.to, "postgresql://USER@HOST/DB, an empty database")->required();
  migrate->callback([&] { f.run = [&] { return CmdMigrate(f); }; });
}

}  // namespace gpupool::cli
