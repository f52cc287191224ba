// gpupool checkpoints, gpupool checkpoint download, gpupool admin gc: the
// blob store as users and operators see it (docs/user-guide.md).
#include <filesystem>
#include <iostream>

#include "blob/http_chunk_store.h"
#include "blob/tree.h"
#include "cli/command_util.h"
#include "cli/commands.h"
#include "cli/table.h"
#include "common/clock.h"
#include "common/units.h"

namespace gpupool::cli {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string CheckpointsPath(int64_t job) {
  return "/v1/jobs/" + std::to_string(job) + "/checkpoints";
}

Status CheckEmptyDestination(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return Status::Ok();
  if (!fs::is_directory(dir, ec)) {
    return Status::FailedPrecondition(dir + " exists and is not a directory: choose --to DIR");
  }
  if (!fs::is_empty(dir, ec)) {
    return Status::FailedPrecondition(dir +
                                      " is not empty: choose another --to DIR (nothing there "
                                      "is overwritten)");
  }
  return Status::Ok();
}

Status Download(const Endpoint& e, const std::string& manifest_id, const std::string& dir) {
  blob::HttpChunkStoreOptions o;
  o.server = e.server;
  o.token = e.token;
  o.tls = e.tls;
  blob::HttpChunkStore store(o);
  GP_ASSIGN_OR_RETURN(blob::Manifest m, store.GetManifest(manifest_id));
  // The user's own path: a symlink they name is theirs to follow (the
  // restore itself never follows one).
  std::error_code ec;
  fs::path real = fs::weakly_canonical(dir, ec);
  return blob::RestoreTree(m, store, ec ? dir : real.string());
}

}  // namespace

int CmdCheckpoints(const GlobalFlags& g, const std::string& job_text) {
  auto job = ParseJobId(job_text);
  if (!job.ok()) return ReportError(job.status());
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Get(CheckpointsPath(*job));
  if (!r.ok()) return ReportError(r.status());
  const json& list = (*r)["checkpoints"];
  if (g.output == "json") {
    std::cout << list.dump(2) << "\n";
    return 0;
  }
  if (list.empty()) {
    std::cout << "job " << *job << " has no checkpoints\n";
    return 0;
  }
  Table t({"NUMBER", "CREATED", "ATTEMPT", "FILES", "SIZE", "MANIFEST"});
  for (const json& c : list) {
    t.Add({std::to_string(Int(c, "number")), FormatTimestampMs(Int(c, "created_ms")),
           Str(c, "attempt"), std::to_string(Int(c, "files")), FormatBytes(Int(c, "bytes")),
           Str(c, "manifest").substr(0, 12)});
  }
  t.Print(std::cout);
  return 0;
}

int CmdCheckpointDownload(const GlobalFlags& g, const std::string& job_text, int64_t number,
                          const std::string& to) {
  auto job = ParseJobId(job_text);
  if (!job.ok()) return ReportError(job.status());
  if (number < 0) return ReportError(Status::InvalidArgument("--id must be a positive number"));
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  std::string which = number > 0 ? std::to_string(number) : "latest";
  auto c = api->Get(CheckpointsPath(*job) + "/" + which);
  if (!c.ok()) return ReportError(c.status());
  int64_t n = Int(*c, "number");
  std::string dir =
      to.empty() ? "job-" + std::to_string(*job) + "-checkpoint-" + std::to_string(n) : to;
  if (Status s = CheckEmptyDestination(dir); !s.ok()) return ReportError(s);
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  if (Status s = Download(api->endpoint(), Str(*c, "manifest"), dir); !s.ok()) {
    if (!existed)
      fs::remove_all(dir, ec);  // leave nothing half restored behind
    else if (fs::exists(dir, ec)) {
      for (const auto& e : fs::directory_iterator(dir, ec)) fs::remove_all(e.path(), ec);
    }
    return ReportError(
        s.WithContext("checkpoint " + std::to_string(n) + " of job " + std::to_string(*job)));
  }
  if (g.output == "json") {
    json out = *c;
    out["dir"] = dir;
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "checkpoint " << n << " of job " << *job << " (" << Int(*c, "files") << " files, "
              << FormatBytes(Int(*c, "bytes")) << ") -> " << dir << "\n";
  }
  return 0;
}

int CmdAdminGc(const GlobalFlags& g) {
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  auto r = api->Post("/v1/admin/gc", json::object());
  if (!r.ok()) return ReportError(r.status());
  if (g.output == "json") {
    std::cout << r->dump(2) << "\n";
    return 0;
  }
  std::cout << "removed " << Int(*r, "manifests_removed") << " manifests and "
            << Int(*r, "chunks_removed") << " chunks (" << FormatBytes(Int(*r, "bytes_freed"))
            << " freed); " << Int(*r, "chunks_kept") << " chunks kept\n";
  if (r->contains("logs") && (*r)["logs"].is_object()) {
    const json& l = (*r)["logs"];
    std::cout << "removed the logs of " << Int(l, "jobs_removed") << " jobs ("
              << Int(l, "by_retention") << " ended longer ago than the log retention, "
              << Int(l, "by_budget") << " over the log budget; "
              << FormatBytes(Int(l, "bytes_removed")) << " freed); the logs of "
              << Int(l, "jobs_kept") << " jobs kept (" << FormatBytes(Int(l, "bytes_kept"))
              << ")\n";
  }
  return 0;
}

}  // namespace gpupool::cli
