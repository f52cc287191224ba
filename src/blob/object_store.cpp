#include "blob/object_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/files.h"

namespace gpupool::blob {

namespace fs = std::filesystem;

namespace {

int64_t ModifiedMs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

bool GoodSegment(std::string_view s) {
  if (s.empty() || s == "." || s == "..") return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Status CheckObjectKey(std::string_view key) {
  size_t at = 0;
  while (true) {
    const size_t slash = key.find('/', at);
    if (!GoodSegment(key.substr(at, slash == std::string_view::npos ? slash : slash - at))) {
      return Status::InvalidArgument("object key \"" + std::string(key.substr(0, 120)) +
                                     "\": segments of A-Z, a-z, 0-9, '.', '_' and '-'");
    }
    if (slash == std::string_view::npos) return Status::Ok();
    at = slash + 1;
  }
}

Result<std::unique_ptr<FsObjectStore>> FsObjectStore::Open(std::string dir, bool durable) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir + ": " + ec.message());
  return std::unique_ptr<FsObjectStore>(new FsObjectStore(std::move(dir), durable));
}

Status FsObjectStore::Put(const std::string& key, std::string_view bytes) {
  GP_RETURN_IF_ERROR(CheckObjectKey(key));
  const std::string path = PathOf(key);
  const std::string parent = fs::path(path).parent_path().string();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) return Status::Internal("cannot create " + parent + ": " + ec.message());
  std::lock_guard lock(put_mu_);
  GP_RETURN_IF_ERROR(WriteFileAtomic(path, std::string(bytes), {.mode = 0644, .fsync = durable_}));
  return durable_ ? SyncPath(parent, /*directory=*/true) : Status::Ok();
}

Result<std::string> FsObjectStore::Get(const std::string& key) {
  GP_RETURN_IF_ERROR(CheckObjectKey(key));
  if (::access(PathOf(key).c_str(), F_OK) != 0) {
    return Status::NotFound("object " + key + " is not stored");
  }
  return ReadFile(PathOf(key));
}

Result<std::optional<ObjectInfo>> FsObjectStore::Stat(const std::string& key) {
  GP_RETURN_IF_ERROR(CheckObjectKey(key));
  struct stat st {};
  if (::stat(PathOf(key).c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<ObjectInfo>();
    return Status::Internal("cannot stat " + PathOf(key) + ": " + std::strerror(errno));
  }
  return std::optional<ObjectInfo>(
      ObjectInfo{key, static_cast<int64_t>(st.st_size), ModifiedMs(st)});
}

Status FsObjectStore::Touch(const std::string& key) {
  GP_RETURN_IF_ERROR(CheckObjectKey(key));
  if (::utimensat(AT_FDCWD, PathOf(key).c_str(), nullptr, 0) != 0) {
    if (errno == ENOENT) return Status::NotFound("object " + key + " is not stored");
    return Status::Internal("cannot touch " + PathOf(key) + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Status FsObjectStore::Remove(const std::string& key) {
  GP_RETURN_IF_ERROR(CheckObjectKey(key));
  if (::unlink(PathOf(key).c_str()) != 0 && errno != ENOENT) {
    return Status::Internal("cannot remove " + PathOf(key) + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<std::vector<ObjectInfo>> FsObjectStore::List(const std::string& prefix) {
  std::string dir = prefix;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  if (!dir.empty()) GP_RETURN_IF_ERROR(CheckObjectKey(dir));
  const std::string base = dir.empty() ? dir_ : dir_ + "/" + dir;
  std::vector<ObjectInfo> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (!GoodSegment(name) || name.ends_with(".tmp")) continue;  // a Put under way
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back(
        {dir.empty() ? name : dir + "/" + name, static_cast<int64_t>(st.st_size), ModifiedMs(st)});
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::Internal("cannot list " + base + ": " + ec.message());
  }
  return out;
}

}  // namespace gpupool::blob
