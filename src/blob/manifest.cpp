#include "blob/manifest.h"

#include <nlohmann/json.hpp>
#include <set>
#include <unordered_set>

#include "common/json_reader.h"

namespace gpupool::blob {

using nlohmann::json;

namespace {

std::string_view TypeName(EntryType t) {
  switch (t) {
    case EntryType::kFile:
      return "file";
    case EntryType::kDir:
      return "dir";
    case EntryType::kSymlink:
      return "symlink";
  }
  return "file";
}

std::string Parent(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? "" : std::string(path.substr(0, slash));
}

// Where a symlink at `path` pointing to `target` lands, relative to the
// tree's root; false when it leaves the tree (absolute, or too many "..").
bool TargetStaysInside(std::string_view path, std::string_view target) {
  if (target.empty() || target.front() == '/') return false;
  int depth = 0;  // components of the link's directory
  for (char c : Parent(path)) depth += c == '/';
  depth += Parent(path).empty() ? 0 : 1;
  size_t start = 0;
  while (start <= target.size()) {
    size_t end = target.find('/', start);
    if (end == std::string_view::npos) end = target.size();
    std::string_view part = target.substr(start, end - start);
    if (part == "..") {
      if (--depth < 0) return false;
    } else if (!part.empty() && part != ".") {
      ++depth;
    }
    start = end + 1;
  }
  return true;
}

}  // namespace

Status CheckRelativePath(std::string_view path) {
  if (path.empty()) return Status::InvalidArgument("must not be empty");
  if (path.size() > kMaxPathBytes) return Status::InvalidArgument("is too long");
  if (path.front() == '/') return Status::InvalidArgument("must be relative");
  if (path.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("must not contain NUL");
  }
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (part.empty()) return Status::InvalidArgument("must not contain empty components");
    if (part == "." || part == "..") {
      return Status::InvalidArgument("must not contain \".\" or \"..\" components");
    }
    start = end + 1;
  }
  return Status::Ok();
}

int64_t Manifest::TotalBytes() const {
  int64_t total = 0;
  for (const ManifestEntry& e : entries) total += e.type == EntryType::kFile ? e.size : 0;
  return total;
}

std::vector<ChunkId> Manifest::ChunkIds() const {
  std::vector<ChunkId> ids;
  std::unordered_set<std::string_view> seen;
  for (const ManifestEntry& e : entries) {
    for (const ChunkRef& c : e.chunks) {
      if (seen.insert(c.id).second) ids.push_back(c.id);
    }
  }
  return ids;
}

std::string EncodeManifest(const Manifest& m) {
  json entries = json::array();
  for (const ManifestEntry& e : m.entries) {
    json j = {{"path", e.path}, {"type", TypeName(e.type)}};
    if (e.type != EntryType::kSymlink) j["mode"] = e.mode;
    if (e.type == EntryType::kFile) {
      json chunks = json::array();
      for (const ChunkRef& c : e.chunks) chunks.push_back({c.id, c.size});
      j["size"] = e.size;
      j["chunks"] = chunks;
    }
    if (e.type == EntryType::kSymlink) j["target"] = e.target;
    entries.push_back(std::move(j));
  }
  return json{{"version", 1}, {"entries", entries}}.dump();
}

Status ValidateManifest(const Manifest& m) {
  if (m.entries.size() > kMaxManifestEntries) {
    return Status::InvalidArgument("entries: more than " + std::to_string(kMaxManifestEntries) +
                                   " entries");
  }
  std::unordered_set<std::string_view> paths, dirs;
  size_t chunks = 0;
  for (size_t i = 0; i < m.entries.size(); ++i) {
    const ManifestEntry& e = m.entries[i];
    const std::string at = "entries[" + std::to_string(i) + "].";
    auto fail = [&](const std::string& field, const std::string& why) {
      return Status::InvalidArgument(at + field + ": " + why);
    };
    if (Status s = CheckRelativePath(e.path); !s.ok()) return fail("path", s.message());
    if (!paths.insert(e.path).second) return fail("path", "is listed twice");
    std::string parent = Parent(e.path);
    if (!parent.empty() && !dirs.count(parent)) {
      return fail("path", "lies under \"" + parent + "\", which is not listed before it as a dir");
    }
    if (e.type != EntryType::kSymlink && e.mode > 0777)
      return fail("mode", "must be from 0 to 0777");
    switch (e.type) {
      case EntryType::kFile: {
        // Counted first: with at most kMaxManifestChunks chunks of at most
        // kMaxChunkBytes each, the sums below cannot overflow.
        chunks += e.chunks.size();
        if (chunks > kMaxManifestChunks) {
          return fail("chunks", "more than " + std::to_string(kMaxManifestChunks) +
                                    " chunks in the manifest");
        }
        int64_t sum = 0;
        for (size_t c = 0; c < e.chunks.size(); ++c) {
          const ChunkRef& ref = e.chunks[c];
          const std::string cat = "chunks[" + std::to_string(c) + "]";
          if (!IsChunkId(ref.id)) return fail(cat, "not a SHA-256 chunk id");
          if (ref.size <= 0 || ref.size > static_cast<int64_t>(kMaxChunkBytes)) {
            return fail(cat, "chunk size out of range");
          }
          sum += ref.size;
        }
        if (sum != e.size) {
          return fail("size", "is " + std::to_string(e.size) + " but its chunks hold " +
                                  std::to_string(sum) + " bytes");
        }
        break;
      }
      case EntryType::kDir:
        dirs.insert(e.path);
        break;
      case EntryType::kSymlink:
        if (e.target.size() > kMaxPathBytes) return fail("target", "is too long");
        // symlink(2) would stop at a NUL: "a/../..\0/b" looks inside, "a/../.." is not.
        if (e.target.find('\0') != std::string::npos) return fail("target", "must not contain NUL");
        if (!TargetStaysInside(e.path, e.target)) {
          return fail("target", "must be a relative path that stays inside the tree");
        }
        break;
    }
  }
  return Status::Ok();
}

Result<Manifest> DecodeManifest(std::string_view text) {
  if (text.size() > kMaxManifestBytes) {
    return Status::InvalidArgument("manifest: larger than " + std::to_string(kMaxManifestBytes) +
                                   " bytes");
  }
  JsonLimits limits;
  limits.max_string_bytes = kMaxPathBytes;
  limits.max_values = kMaxManifestJsonValues;
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(text, "manifest", limits));
  JsonReader r(j, "");
  int64_t version = r.Int("version");
  Manifest m;
  size_t chunks = 0;
  r.Each("entries", true, kMaxManifestEntries,
         [&](const json& ej, const std::string& at) -> Status {
           JsonReader er(ej, at);
           ManifestEntry e;
           e.path = er.Str("path");
           std::string type = er.Str("type");
           if (!er.ok()) return er.Finish(false);
           if (type == "file") {
             e.type = EntryType::kFile;
             e.size = er.Int("size");
             er.Each("chunks", true, [&](const json& cj, const std::string& cat) -> Status {
               if (++chunks > kMaxManifestChunks) {
                 return Status::InvalidArgument(cat + ": more than " +
                                                std::to_string(kMaxManifestChunks) +
                                                " chunks in the manifest");
               }
               if (!cj.is_array() || cj.size() != 2 || !cj[0].is_string() ||
                   !cj[1].is_number_integer()) {
                 return Status::InvalidArgument(cat + ": must be [id, size]");
               }
               // Unsigned values past int64_t would wrap: out of range like any other.
               if (cj[1].is_number_unsigned() &&
                   cj[1].get<uint64_t>() > static_cast<uint64_t>(kMaxChunkBytes)) {
                 return Status::InvalidArgument(cat + ": chunk size out of range");
               }
               e.chunks.push_back({cj[0].get<std::string>(), cj[1].get<int64_t>()});
               return Status::Ok();
             });
           } else if (type == "dir") {
             e.type = EntryType::kDir;
           } else if (type == "symlink") {
             e.type = EntryType::kSymlink;
             e.mode = 0;  // symlinks have none
             e.target = er.Str("target");
           } else {
             er.Fail("type", "must be file, dir or symlink");
           }
           if (e.type != EntryType::kSymlink) {
             int64_t mode = er.Int("mode", false, e.type == EntryType::kDir ? 0755 : 0644);
             if (er.ok() && (mode < 0 || mode > 07777)) er.Fail("mode", "must be from 0 to 07777");
             e.mode = static_cast<uint32_t>(mode) & 0777;
           }
           GP_RETURN_IF_ERROR(er.Finish(true));
           m.entries.push_back(std::move(e));
           return Status::Ok();
         });
  GP_RETURN_IF_ERROR(r.Finish(true));
  if (version != 1) {
    return Status::InvalidArgument("version: unsupported manifest version " +
                                   std::to_string(version) + " (this side reads 1)");
  }
  GP_RETURN_IF_ERROR(ValidateManifest(m));
  return m;
}

ChunkId ManifestId(std::string_view encoded) {
  return ComputeChunkId(
      std::span(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()));
}

}  // namespace gpupool::blob
