#include "model/image_ref.h"

#include <string>
#include <string_view>
#include <vector>

namespace gpupool {
namespace {

constexpr std::string_view kExpected =
    "expected docker://REF, oci-archive:PATH, docker-archive:PATH or oci:DIR[:TAG]";

// The reference quoted for messages; very long text is cut so a message
// stays readable.
std::string Quoted(std::string_view text) {
  std::string s = "image \"";
  if (text.size() > 80) {
    s.append(text.substr(0, 80));
    s += "...";
  } else {
    s.append(text);
  }
  s += "\"";
  return s;
}

Status Invalid(std::string_view text, std::string_view why) {
  return Status::InvalidArgument(Quoted(text) + ": " + std::string(why));
}

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

// A tag: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}.
bool ValidTag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  if (!IsAlnum(tag[0]) && tag[0] != '_') return false;
  for (char c : tag) {
    if (!IsAlnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// A repository path component: lowercase letters and digits, separated by
// '.', '_' or '-', starting and ending with a letter or digit.
bool ValidPathComponent(std::string_view c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  for (char ch : c) {
    if (!IsLowerAlnum(ch) && ch != '.' && ch != '_' && ch != '-') return false;
  }
  return true;
}

// A registry host: letters, digits, '.', '-', and an optional ":PORT".
bool ValidDomain(std::string_view d) {
  size_t colon = d.find(':');
  std::string_view host = d.substr(0, colon);
  if (host.empty() || !IsAlnum(host.front()) || !IsAlnum(host.back())) return false;
  for (char c : host) {
    if (!IsAlnum(c) && c != '.' && c != '-') return false;
  }
  if (colon != std::string_view::npos) {
    std::string_view port = d.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port) {
      if (c < '0' || c > '9') return false;
    }
  }
  return true;
}

// docker://NAME[:TAG][@sha256:DIGEST]; `ref` is what follows "docker://".
Status CheckDockerRef(std::string_view text, std::string_view ref) {
  if (ref.empty()) return Invalid(text, "the image name is empty");
  std::string_view name = ref;
  size_t at = ref.find('@');
  if (at != std::string_view::npos) {
    std::string_view digest = ref.substr(at + 1);
    name = ref.substr(0, at);
    constexpr std::string_view kSha = "sha256:";
    bool ok = digest.substr(0, kSha.size()) == kSha && digest.size() == kSha.size() + 64;
    for (size_t i = kSha.size(); ok && i < digest.size(); ++i) ok = IsHex(digest[i]);
    if (!ok) {
      return Invalid(text, "invalid digest \"" + std::string(digest) +
                               "\" (expected sha256: and 64 lowercase hex digits)");
    }
  }
  // A ':' after the last '/' starts the tag; one before it is a registry port.
  size_t slash = name.rfind('/');
  size_t colon = name.find(':', slash == std::string_view::npos ? 0 : slash);
  if (colon != std::string_view::npos) {
    std::string_view tag = name.substr(colon + 1);
    name = name.substr(0, colon);
    if (tag.empty()) return Invalid(text, "the tag is empty");
    if (!ValidTag(tag)) {
      return Invalid(text, "invalid tag \"" + std::string(tag) +
                               "\" (letters, digits, '_', '.' and '-', at most 128)");
    }
  }
  if (name.empty()) return Invalid(text, "the image name is empty");
  if (name.size() > 255) return Invalid(text, "the image name is longer than 255 characters");
  std::vector<std::string_view> parts = Split(name, '/');
  size_t first = 0;
  std::string_view head = parts[0];
  // The first component names a registry when it looks like a host (as in
  // Docker's own rule): it has a '.', a port, capitals, or is "localhost".
  bool has_upper = head.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ") != std::string_view::npos;
  if (parts.size() > 1 &&
      (head.find_first_of(".:") != std::string_view::npos || head == "localhost" || has_upper)) {
    if (!ValidDomain(head)) {
      return Invalid(text, "invalid registry \"" + std::string(head) + "\"");
    }
    first = 1;
  }
  for (size_t i = first; i < parts.size(); ++i) {
    if (!ValidPathComponent(parts[i])) {
      return Invalid(text, "invalid image name \"" + std::string(name) +
                               "\" (lowercase letters, digits, '.', '_', '-' and '/')");
    }
  }
  return Status::Ok();
}

// An absolute, normalized path without ':'.
Status CheckPath(std::string_view text, std::string_view path, std::string_view what) {
  std::string w(what);
  if (path.empty()) return Invalid(text, "the " + w + " is empty");
  if (path.front() != '/') return Invalid(text, "the " + w + " must be absolute");
  if (path.find(':') != std::string_view::npos) {
    return Invalid(text, "the " + w + " must not contain ':'");
  }
  for (std::string_view part : Split(path.substr(1), '/')) {
    if (part == "." || part == "..") {
      return Invalid(text, "the " + w + " must not contain \".\" or \"..\" components");
    }
  }
  return Status::Ok();
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

Result<ImageRef> ParseImageRef(std::string_view text) {
  if (text.size() > kMaxImageRefLength) {
    return Invalid(text, "longer than " + std::to_string(kMaxImageRefLength) + " characters");
  }
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) return Invalid(text, "contains whitespace or a control character");
  }
  ImageRef ref;
  ref.text = std::string(text);
  if (StartsWith(text, "docker://")) {
    ref.kind = ImageRef::Kind::kDocker;
    ref.location = std::string(text.substr(9));
    GP_RETURN_IF_ERROR(CheckDockerRef(text, ref.location));
  } else if (StartsWith(text, "oci-archive:")) {
    ref.kind = ImageRef::Kind::kOciArchive;
    ref.location = std::string(text.substr(12));
    GP_RETURN_IF_ERROR(CheckPath(text, ref.location, "path"));
  } else if (StartsWith(text, "docker-archive:")) {
    ref.kind = ImageRef::Kind::kDockerArchive;
    ref.location = std::string(text.substr(15));
    GP_RETURN_IF_ERROR(CheckPath(text, ref.location, "path"));
  } else if (StartsWith(text, "oci:")) {
    ref.kind = ImageRef::Kind::kOciDir;
    std::string_view rest = text.substr(4);
    size_t colon = rest.find(':');
    ref.location = std::string(rest.substr(0, colon));
    GP_RETURN_IF_ERROR(CheckPath(text, ref.location, "directory"));
    if (colon != std::string_view::npos) {
      ref.tag = std::string(rest.substr(colon + 1));
      if (ref.tag.empty()) return Invalid(text, "the tag is empty");
      if (!ValidTag(ref.tag)) {
        return Invalid(text, "invalid tag \"" + ref.tag +
                                 "\" (letters, digits, '_', '.' and '-', at most 128)");
      }
    }
  } else {
    return Invalid(text, kExpected);
  }
  return ref;
}

}  // namespace gpupool
