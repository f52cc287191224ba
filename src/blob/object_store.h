// ObjectStore: named byte strings with a modification time, the shape of
// an S3-compatible bucket, for what the server keeps besides chunks (the
// manifests: "manifests/<id>.json"). FsObjectStore keeps them as files
// under a directory (the server's --blob-dir, which several servers may
// share over NFS); a bucket-backed store implements the same calls
// (PutObject, GetObject, HeadObject, a copy onto itself, DeleteObject,
// ListObjectsV2), and the chunks go through blob::ChunkStore likewise.
//
// Contract:
// - Keys are relative paths of segments of [A-Za-z0-9._-] (no "." or ".."
//   segment); anything else is InvalidArgument.
// - Put replaces the object whole: a reader sees the old bytes or the new,
//   never a part; with `durable`, they survive a power loss once it returns.
// - Get and Stat of an absent object: NotFound and nullopt.
// - Touch sets the modification time to now (garbage collection's grace
//   counts from it); NotFound when absent. Remove of an absent object is Ok.
// - List(prefix) lists the objects directly under `prefix` ("manifests/"),
//   in no particular order; an object removed meanwhile may be missing.
//
// Thread-safe: any call from any thread; two Puts of one key at once leave
// one of them.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gpupool::blob {

struct ObjectInfo {
  std::string key;
  int64_t bytes = 0;
  int64_t modified_ms = 0;  // Unix ms
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  virtual Status Put(const std::string& key, std::string_view bytes) = 0;
  virtual Result<std::string> Get(const std::string& key) = 0;
  virtual Result<std::optional<ObjectInfo>> Stat(const std::string& key) = 0;
  virtual Status Touch(const std::string& key) = 0;
  virtual Status Remove(const std::string& key) = 0;
  virtual Result<std::vector<ObjectInfo>> List(const std::string& prefix) = 0;
};

// InvalidArgument unless `key` is a relative path of good segments.
Status CheckObjectKey(std::string_view key);

class FsObjectStore : public ObjectStore {
 public:
  // Objects as files DIR/KEY (created as needed); `durable`: each Put
  // flushes the file and its directory before it returns.
  static Result<std::unique_ptr<FsObjectStore>> Open(std::string dir, bool durable = true);

  Status Put(const std::string& key, std::string_view bytes) override;
  Result<std::string> Get(const std::string& key) override;
  Result<std::optional<ObjectInfo>> Stat(const std::string& key) override;
  Status Touch(const std::string& key) override;
  Status Remove(const std::string& key) override;
  Result<std::vector<ObjectInfo>> List(const std::string& prefix) override;

  // Where the object is (tests and tools of the file layout).
  std::string PathOf(const std::string& key) const { return dir_ + "/" + key; }

 private:
  FsObjectStore(std::string dir, bool durable) : dir_(std::move(dir)), durable_(durable) {}
  std::string dir_;
  bool durable_;
  // Puts take turns: the temporary file is named after its target.
  std::mutex put_mu_;
};

}  // namespace gpupool::blob
