#include "agent/blob_transfer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>

#include "agent/staging.h"
#include "blob/cached_chunk_store.h"
#include "blob/http_chunk_store.h"
#include "blob/manifest.h"
#include "blob/tree.h"
#include "common/safe_fs.h"
#include "common/units.h"
#include "exec/executor.h"
#include "net/http.h"
#include "net/http_client.h"

namespace gpupool::agent {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Gives `dir` and everything under it to `uid`, through directory
// descriptors: a symlink in the tree changes owner itself, nothing it
// points to does.
Status GiveTo(const std::string& dir, int uid) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return Status::Internal("cannot open " + dir + ": " + std::strerror(errno));
  return ChownTree(fd.get(), uid, uid).WithContext("giving " + dir + " to the job");
}

// The agent's chunk cache in front of the server. `keep`: keep copies of
// what is downloaded (inputs; not checkpoints).
Result<std::unique_ptr<blob::CachedChunkStore>> OpenCache(const BlobAccess& access,
                                                          blob::HttpChunkStore& remote, bool keep) {
  blob::CachedChunkStoreOptions o;
  o.dir = access.cache_dir;
  o.limit_bytes = access.cache_bytes;
  o.keep_fetched = keep;
  return blob::CachedChunkStore::Open(
      o, remote, [&remote](const std::vector<blob::ChunkId>& ids, const blob::ChunkSink& sink) {
        return remote.FetchMany(ids, sink);
      });
}

// How long a restore waits for its job's staging in progress: it has a
// head start on a restore from scratch.
constexpr int64_t kStagingWaitMs = 60'000;

// The job's checkpoint into `checkpoint_dir`, over its tree staged on this
// node when there is one.
Status RestoreCheckpoint(const proto::StartTask& task, const std::string& checkpoint_dir,
                         const BlobAccess& access, blob::HttpChunkStore& remote,
                         const std::function<void(const std::string&)>& event) {
  const std::string what = "checkpoint " + std::to_string(task.restore_checkpoint);
  GP_ASSIGN_OR_RETURN(blob::Manifest m, remote.GetManifest(task.restore_manifest));
  std::optional<blob::RestoreBase> base;
  // Beside the work directory (the job never sees it), on its filesystem.
  const std::string base_dir =
      (fs::path(checkpoint_dir).parent_path().parent_path() / "staged-base").string();
  std::error_code ec;
  fs::remove_all(base_dir, ec);
  if (!access.staging_dir.empty()) {
    auto staged = TakeStaged(access.staging_dir, task.job_id, base_dir, kStagingWaitMs);
    if (staged.ok()) base = *std::move(staged);
  }
  GP_ASSIGN_OR_RETURN(auto cache, OpenCache(access, remote, /*keep=*/false));
  event("restoring " + what + " (" + FormatBytes(m.TotalBytes()) +
        (base ? ", over the one staged on this node" : "") + ")");
  blob::RestoreStats stats;
  Status s = blob::RestoreTree(m, *cache, checkpoint_dir, base ? &*base : nullptr, &stats);
  fs::remove_all(base_dir, ec);
  GP_RETURN_IF_ERROR(s.WithContext("cannot restore " + what));
  if (base) {
    event("restored " + what + ": " + FormatBytes(stats.bytes - stats.reused_bytes) + " fetched, " +
          FormatBytes(stats.reused_bytes) + " already staged");
  }
  return Status::Ok();
}

// The checkpoint directory is the agent's to fill (and, with a restore,
// to write into as root): inputs may hold it only as an empty directory,
// never as a symlink or a file, and nothing under it.
Status CheckInputsLeaveCheckpointsAlone(const blob::Manifest& inputs) {
  const std::string name(exec::kCheckpointDirName);
  for (const blob::ManifestEntry& e : inputs.entries) {
    bool is_it = e.path == name && e.type != blob::EntryType::kDir;
    if (is_it || e.path.starts_with(name + "/")) {
      return Status::FailedPrecondition("the job's inputs hold " + e.path + ", but " + name +
                                        " is reserved for its checkpoints (an empty directory "
                                        "or nothing)");
    }
  }
  return Status::Ok();
}

// The job's inputs into `work_dir`, then its checkpoint into `checkpoint_dir`.
Status FetchTrees(const proto::StartTask& task, const std::string& work_dir,
                  const std::string& checkpoint_dir, const BlobAccess& access,
                  const std::function<void(const std::string&)>& event) {
  blob::HttpChunkStore remote(RemoteStoreOptions(access));
  if (!task.spec.inputs.empty()) {
    GP_ASSIGN_OR_RETURN(blob::Manifest m, remote.GetManifest(task.spec.inputs));
    GP_RETURN_IF_ERROR(CheckInputsLeaveCheckpointsAlone(m));
    event("restoring the job's inputs (" + FormatBytes(m.TotalBytes()) + ")");
    GP_ASSIGN_OR_RETURN(auto cache, OpenCache(access, remote, /*keep=*/true));
    GP_RETURN_IF_ERROR(
        blob::RestoreTree(m, *cache, work_dir).WithContext("cannot restore the job's inputs"));
  }
  if (task.restore_manifest.empty()) return Status::Ok();
  return RestoreCheckpoint(task, checkpoint_dir, access, remote, event);
}

}  // namespace

blob::HttpChunkStoreOptions RemoteStoreOptions(const BlobAccess& access) {
  blob::HttpChunkStoreOptions o;
  o.server = access.server_url;
  o.token = access.token;
  o.tls = access.tls;
  return o;
}

Status MaterializeWorkDir(const proto::StartTask& task, const std::string& work_dir, int uid,
                          const BlobAccess& access,
                          const std::function<void(const std::string&)>& event) {
  std::string checkpoint_dir = exec::CheckpointDirIn(work_dir);
  if (!task.spec.inputs.empty() || !task.restore_manifest.empty()) {
    GP_RETURN_IF_ERROR(FetchTrees(task, work_dir, checkpoint_dir, access, event));
  }
  // The job's to write into, whether or not a checkpoint was restored
  // (never through a symlink of the inputs').
  GP_RETURN_IF_ERROR(OpenOrMakeDirPath(checkpoint_dir, 0755).status());
  return uid >= 0 ? GiveTo(work_dir, uid) : Status::Ok();
}

UploadFn HttpUploadFn(const BlobAccess& access, int64_t job_id, const std::string& attempt_id,
                      const TaskTree& tree) {
  // The chunks of the last checkpoint this attempt registered: stored on
  // the server (retention keeps it), so the next upload does not ask about
  // them. Uploads run one at a time (CheckpointUploader).
  auto registered = std::make_shared<std::unordered_set<blob::ChunkId>>();
  return [access, job_id, attempt_id, registered, tree](const std::string& dir,
                                                        const Commit& c) -> Result<UploadResult> {
    blob::HttpChunkStoreOptions remote_options = RemoteStoreOptions(access);
    remote_options.for_attempt = attempt_id;  // charged to the job's storage quota
    blob::HttpChunkStore remote(std::move(remote_options));
    blob::StoreTreeOptions options;
    options.beneath = tree.beneath;
    options.read_as = tree.read_as;
    // The tree a restored attempt finds: the checkpoint directory holding
    // only this commit.
    options.ignore = [&c](const std::string& path, bool) {
      return path.substr(0, path.find('/')) != c.name;
    };
    options.known_stored = [registered](const blob::ChunkId& id) {
      return registered->count(id) > 0;
    };
    UploadResult out;
    GP_ASSIGN_OR_RETURN(blob::Manifest m, blob::StoreTree(dir, remote, options, &out.stats));
    bool found = false;
    for (const blob::ManifestEntry& e : m.entries) found = found || e.path == c.name;
    // The job deleted it meanwhile, having committed a newer one.
    if (!found) return Status::NotFound(c.name + " is gone");
    auto stored = remote.PutManifest(blob::EncodeManifest(m));
    if (stored.status().code() == StatusCode::kFailedPrecondition && !registered->empty()) {
      // A chunk thought stored is not (collected after all): ask about all.
      registered->clear();
      GP_ASSIGN_OR_RETURN(m, blob::StoreTree(dir, remote, options, &out.stats));
      stored = remote.PutManifest(blob::EncodeManifest(m));
    }
    GP_RETURN_IF_ERROR(stored.status());
    out.manifest = stored->id;

    net::HttpCall call;
    call.base_url = access.server_url;
    call.method = "POST";
    call.target = "/v1/jobs/" + std::to_string(job_id) + "/checkpoints";
    call.headers["Authorization"] = "Bearer " + access.token;
    call.tls = access.tls;
    call.headers["Content-Type"] = "application/json";
    call.body = json{{"attempt", attempt_id}, {"manifest", out.manifest}}.dump();
    GP_ASSIGN_OR_RETURN(net::HttpResponse r, net::Fetch(call));
    if (r.status >= 300) return net::ErrorStatus(r, "registering checkpoint " + c.name);
    json j = json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("number") || !j["number"].is_number_integer()) {
      return Status::Internal("registering checkpoint " + c.name + ": unexpected answer " +
                              r.body.substr(0, 200));
    }
    out.checkpoint = j["number"].get<int64_t>();
    registered->clear();
    for (const blob::ManifestEntry& e : m.entries) {
      for (const blob::ChunkRef& ref : e.chunks) registered->insert(ref.id);
    }
    return out;
  };
}

}  // namespace gpupool::agent
