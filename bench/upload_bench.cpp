// gpupool-upload-bench: uploads a directory to a running server's blob store
// the way the agent ships a checkpoint (StoreTree through HttpChunkStore,
// then the manifest) and prints what it cost as one JSON line. Run twice on
// a changed tree to measure an incremental upload; bench/run_upload_bench.sh
// compares that with rsync.
//
//   gpupool-upload-bench --server URL --token-file FILE --dir DIR [--avg-chunk 16KiB]
//
// With --restore MANIFEST it goes the other way, as an agent restores a
// checkpoint: through a chunk cache (--cache DIR) into DIR.
#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>

#include "blob/cached_chunk_store.h"
#include "blob/http_chunk_store.h"
#include "blob/manifest.h"
#include "blob/tree.h"
#include "common/files.h"
#include "common/units.h"

using namespace gpupool;

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Fail(const Status& s) {
  std::cerr << "gpupool-upload-bench: " << s.ToString() << "\n";
  return 1;
}

// Without `cache_dir`, straight from the server.
int Restore(blob::HttpChunkStore& remote, const std::string& manifest_id, const std::string& dir,
            const std::string& cache_dir) {
  auto start = std::chrono::steady_clock::now();
  auto manifest = remote.GetManifest(manifest_id);
  if (!manifest.ok()) return Fail(manifest.status());
  nlohmann::json out = {{"tree_bytes", manifest->TotalBytes()}};
  if (cache_dir.empty()) {
    if (Status s = blob::RestoreTree(*manifest, remote, dir); !s.ok()) return Fail(s);
  } else {
    blob::CachedChunkStoreOptions co;
    co.dir = cache_dir;
    auto cache = blob::CachedChunkStore::Open(
        co, remote, [&remote](const std::vector<blob::ChunkId>& ids, const blob::ChunkSink& sink) {
          return remote.FetchMany(ids, sink);
        });
    if (!cache.ok()) return Fail(cache.status());
    if (Status s = blob::RestoreTree(*manifest, **cache, dir); !s.ok()) return Fail(s);
    blob::CacheStats stats = (*cache)->stats();
    out["fetched_chunks"] = stats.fetched_chunks;
    out["fetched_bytes"] = stats.fetched_bytes;
    out["cache_hits"] = stats.hits;
  }
  out["seconds"] = SecondsSince(start);
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("upload a directory to a gpupool server's blob store and report the cost");
  std::string server, token_file, dir, avg = "64KiB";
  app.add_option("--server", server, "server URL")->required();
  app.add_option("--token-file", token_file, "a file holding a token (admin or join)")->required();
  app.add_option("--dir", dir, "the directory to upload")->required();
  app.add_option("--avg-chunk", avg, "average chunk size (a power of two)")->capture_default_str();
  std::string restore, cache_dir;
  app.add_option("--restore", restore, "restore this manifest into --dir instead");
  app.add_option("--cache", cache_dir,
                 "the chunk cache for --restore (none: straight from the server)");
  CLI11_PARSE(app, argc, argv);

  auto token = ReadFile(token_file);
  auto avg_bytes = ParseBytes(avg);
  if (!token.ok() || !avg_bytes.ok()) {
    std::cerr << "gpupool-upload-bench: bad --token-file or --avg-chunk\n";
    return 2;
  }
  blob::HttpChunkStoreOptions o;
  o.server = server;
  o.token = token->substr(0, token->find_last_not_of(" \n") + 1);
  blob::HttpChunkStore remote(o);
  if (!restore.empty()) return Restore(remote, restore, dir, cache_dir);
  blob::StoreTreeOptions tree;
  tree.chunker.avg_size = static_cast<size_t>(*avg_bytes);
  tree.chunker.min_size = tree.chunker.avg_size / 4;
  tree.chunker.max_size = tree.chunker.avg_size * 4;

  auto start = std::chrono::steady_clock::now();
  blob::TreeStats stats;
  auto manifest = blob::StoreTree(dir, remote, tree, &stats);
  if (!manifest.ok()) {
    std::cerr << "gpupool-upload-bench: " << manifest.status().ToString() << "\n";
    return 1;
  }
  auto tree_done = std::chrono::steady_clock::now();
  std::string text = blob::EncodeManifest(*manifest);
  double encode_seconds = SecondsSince(tree_done);
  auto stored = remote.PutManifest(text);
  if (!stored.ok()) {
    std::cerr << "gpupool-upload-bench: " << stored.status().ToString() << "\n";
    return 1;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << nlohmann::json{{"seconds", seconds},
                              {"manifest_seconds", SecondsSince(tree_done)},
                              {"encode_seconds", encode_seconds},
                              {"tree_bytes", stats.bytes},
                              {"chunks", stats.chunks},
                              {"new_chunks", stats.new_chunks},
                              {"chunk_bytes_sent", stats.uploaded_bytes},
                              {"manifest_bytes", text.size()},
                              {"avg_chunk", tree.chunker.avg_size}}
                   .dump()
            << "\n";
  return 0;
}
