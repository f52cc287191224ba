#include "blob/chunk_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/files.h"
#include "common/ids.h"

namespace gpupool::blob {
namespace fs = std::filesystem;

namespace {

Status CheckId(const ChunkId& id) {
  if (IsChunkId(id)) return Status::Ok();
  return Status::InvalidArgument("chunk id must be 64 lowercase hex digits (SHA-256), got \"" +
                                 id.substr(0, 80) + "\"");
}

// Writes `data` to `path` through a temporary file and a rename, so that a
// reader (or a crash) sees the whole chunk or none of it.
Status WriteWhole(const std::string& path, std::string_view data, bool sync) {
  static std::atomic<uint64_t> serial{0};
  std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++serial);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("cannot create " + tmp);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status s = Status::FromErrno("cannot write " + tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (sync && ::fsync(fd) != 0) {
    Status s = Status::FromErrno("cannot fsync " + tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::FromErrno("cannot rename " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (sync) {
    std::string dir = fs::path(path).parent_path().string();
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return Status::Ok();
}

}  // namespace

ChunkId ComputeChunkId(std::span<const uint8_t> data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  ChunkId id(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    id[2 * i] = kHex[digest[i] >> 4];
    id[2 * i + 1] = kHex[digest[i] & 15];
  }
  return id;
}

bool IsChunkId(std::string_view s) { return IsSha256Hex(s); }

Result<std::string> CompressChunk(std::span<const uint8_t> data, int level) {
  if (level < 1 || level > 19) return Status::InvalidArgument("zstd level must be from 1 to 19");
  std::string out(ZSTD_compressBound(data.size()), '\0');
  size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level);
  if (ZSTD_isError(n)) return Status::Internal(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

Result<std::string> OpenChunk(const ChunkId& id, std::string_view compressed, size_t max_bytes) {
  GP_RETURN_IF_ERROR(CheckId(id));
  auto corrupt = [&](const std::string& why) {
    return Status::DataLoss("chunk " + id.substr(0, 12) + ": " + why);
  };
  // The frame header says how large the chunk is; a frame that does not
  // (or claims too much) is refused before anything is allocated.
  unsigned long long size = ZSTD_getFrameContentSize(compressed.data(), compressed.size());
  if (size == ZSTD_CONTENTSIZE_ERROR) return corrupt("not a zstd frame");
  if (size == ZSTD_CONTENTSIZE_UNKNOWN) return corrupt("the zstd frame does not give its size");
  if (size > max_bytes) return corrupt("claims " + std::to_string(size) + " bytes, over the limit");
  std::string out(size, '\0');
  size_t n = ZSTD_decompress(out.data(), out.size(), compressed.data(), compressed.size());
  if (ZSTD_isError(n)) return corrupt(std::string("zstd: ") + ZSTD_getErrorName(n));
  if (n != size) return corrupt("shorter than its frame says");
  auto bytes = std::span(reinterpret_cast<const uint8_t*>(out.data()), out.size());
  if (ComputeChunkId(bytes) != id) return corrupt("its bytes do not match its SHA-256 id");
  return out;
}

Result<std::unique_ptr<FsChunkStore>> FsChunkStore::Open(std::string dir, bool fsync) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  return std::unique_ptr<FsChunkStore>(new FsChunkStore(std::move(dir), fsync));
}

std::string FsChunkStore::PathOf(const ChunkId& id) const {
  return dir_ + "/" + id.substr(0, 2) + "/" + id;
}

Result<std::vector<ChunkId>> FsChunkStore::Missing(const std::vector<ChunkId>& ids) {
  std::vector<ChunkId> missing;
  for (const ChunkId& id : ids) {
    GP_RETURN_IF_ERROR(CheckId(id));
    if (::access(PathOf(id).c_str(), F_OK) != 0) missing.push_back(id);
  }
  return missing;
}

Status FsChunkStore::Put(const ChunkId& id, std::string_view compressed) {
  GP_RETURN_IF_ERROR(OpenChunk(id, compressed).status());
  std::string path = PathOf(id);
  if (::access(path.c_str(), F_OK) == 0) return Status::Ok();  // content-addressed: same bytes
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::Internal("cannot create the directory of " + path + ": " + ec.message());
  return WriteWhole(path, compressed, fsync_);
}

Status FsChunkStore::PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) {
  for (const auto& [id, frame] : frames) GP_RETURN_IF_ERROR(OpenChunk(id, frame).status());
  return PutVerified(frames);
}

Result<bool> FsChunkStore::KeepVerified(const ChunkId& id, std::string_view frame) {
  GP_RETURN_IF_ERROR(CheckId(id));
  std::string path = PathOf(id);
  if (::access(path.c_str(), F_OK) == 0) {
    GP_RETURN_IF_ERROR(Touch(id));
    return false;
  }
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return Status::Internal("cannot create the directory of " + path + ": " + ec.message());
  GP_RETURN_IF_ERROR(WriteWhole(path, frame, /*sync=*/false));
  return true;
}

Status FsChunkStore::PutVerified(const std::vector<std::pair<ChunkId, std::string>>& frames) {
  bool wrote = false;
  for (const auto& [id, frame] : frames) {
    GP_ASSIGN_OR_RETURN(bool stored, KeepVerified(id, frame));
    wrote = wrote || stored;
  }
  if (!wrote || !fsync_) return Status::Ok();
  int fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("cannot open " + dir_);
  int rc = ::syncfs(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : Status::FromErrno("cannot sync " + dir_);
}

Result<VerifiedChunk> FsChunkStore::Read(const ChunkId& id) {
  GP_RETURN_IF_ERROR(CheckId(id));
  std::string path = PathOf(id);
  auto data = ReadFile(path);
  if (!data.ok()) {
    if (::access(path.c_str(), F_OK) != 0) {
      return Status::NotFound("chunk " + id.substr(0, 12) + " is not in " + dir_);
    }
    return data.status();
  }
  auto bytes = OpenChunk(id, *data);
  if (!bytes.ok()) {
    // Set the bad copy aside: the chunk is missing now, so its next upload
    // (or fetch) replaces it instead of the store vouching for it forever.
    ::rename(path.c_str(), (path + ".corrupt").c_str());
    return bytes.status();
  }
  return VerifiedChunk{id, std::move(*data), std::move(*bytes)};
}

Result<std::string> FsChunkStore::Get(const ChunkId& id) {
  GP_ASSIGN_OR_RETURN(VerifiedChunk c, Read(id));
  return std::move(c.frame);
}

Status FsChunkStore::Remove(const ChunkId& id) {
  GP_RETURN_IF_ERROR(CheckId(id));
  if (::unlink(PathOf(id).c_str()) != 0 && errno != ENOENT)
    return Status::FromErrno("cannot remove chunk");
  return Status::Ok();
}

Result<std::vector<ChunkId>> FsChunkStore::List() {
  GP_ASSIGN_OR_RETURN(std::vector<StoredChunk> all, Inventory());
  std::vector<ChunkId> ids;
  ids.reserve(all.size());
  for (StoredChunk& c : all) ids.push_back(std::move(c.id));
  return ids;
}

Result<std::vector<StoredChunk>> FsChunkStore::Inventory() {
  std::vector<StoredChunk> chunks;
  std::error_code ec;
  for (const auto& fan : fs::directory_iterator(dir_, ec)) {
    if (!fan.is_directory()) continue;
    for (const auto& f : fs::directory_iterator(fan.path(), ec)) {
      std::string name = f.path().filename().string();
      if (!IsChunkId(name) || name.compare(0, 2, fan.path().filename().string()) != 0) continue;
      struct stat st;
      if (::stat(f.path().c_str(), &st) != 0) continue;  // removed meanwhile
      int64_t ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
      chunks.push_back({std::move(name), static_cast<int64_t>(st.st_size), ms});
    }
  }
  if (ec) return Status::Internal("cannot list " + dir_ + ": " + ec.message());
  return chunks;
}

Status FsChunkStore::Touch(const ChunkId& id) {
  GP_RETURN_IF_ERROR(CheckId(id));
  if (::utimensat(AT_FDCWD, PathOf(id).c_str(), nullptr, 0) != 0 && errno != ENOENT) {
    return Status::FromErrno("cannot touch chunk");
  }
  return Status::Ok();
}

Result<std::vector<ChunkId>> FsChunkStore::MissingTouchingTheRest(const std::vector<ChunkId>& ids) {
  std::vector<ChunkId> missing;
  for (const ChunkId& id : ids) {
    GP_RETURN_IF_ERROR(CheckId(id));
    if (::utimensat(AT_FDCWD, PathOf(id).c_str(), nullptr, 0) == 0) continue;
    if (errno != ENOENT) return Status::FromErrno("cannot touch chunk");
    missing.push_back(id);
  }
  return missing;
}

Status ChunkStore::PutMany(const std::vector<std::pair<ChunkId, std::string>>& frames) {
  for (const auto& [id, frame] : frames) GP_RETURN_IF_ERROR(Put(id, frame));
  return Status::Ok();
}

Status ChunkStore::ReadChunks(const std::vector<ChunkId>& ids, const ChunkSink& sink) {
  for (const ChunkId& id : ids) {
    GP_ASSIGN_OR_RETURN(std::string frame, Get(id));
    GP_ASSIGN_OR_RETURN(std::string bytes, OpenChunk(id, frame));
    GP_RETURN_IF_ERROR(sink({id, std::move(frame), std::move(bytes)}));
  }
  return Status::Ok();
}

}  // namespace gpupool::blob
