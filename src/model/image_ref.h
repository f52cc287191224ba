// ImageRef: a container image reference as a job spec names it.
//
// Accepted forms (the transports skopeo understands, restricted to what the
// agent can use without guessing):
//   docker://NAME[:TAG|@sha256:DIGEST]   a registry image ("docker://busybox:1.36")
//   oci-archive:PATH                      an OCI archive (tar)
//   docker-archive:PATH                   `docker save` output
//   oci:DIR[:TAG]                         an OCI layout directory
// PATH and DIR must be absolute and may not contain ':' (skopeo would read
// what follows as a reference) nor "." / ".." components: the agent
// resolves nothing relative. Pure and thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gpupool {

struct ImageRef {
  enum class Kind { kDocker, kOciArchive, kDockerArchive, kOciDir };
  Kind kind = Kind::kDocker;
  std::string text;      // as given, e.g. "oci-archive:/srv/img.tar"
  std::string location;  // after the transport: "busybox:1.36", "/srv/img.tar", "/srv/layout"
  std::string tag;       // oci: only ("" = none)
  bool local() const { return kind != Kind::kDocker; }
  friend bool operator==(const ImageRef&, const ImageRef&) = default;
};

// At most this many characters of text.
inline constexpr size_t kMaxImageRefLength = 1024;

// InvalidArgument with a message naming the reference and what is wrong:
//   image "foo": expected docker://REF, oci-archive:PATH, docker-archive:PATH or oci:DIR[:TAG]
//   image "oci-archive:img.tar": the path must be absolute
// Rejects empty parts, whitespace and control characters, and text longer
// than kMaxImageRefLength.
Result<ImageRef> ParseImageRef(std::string_view text);

}  // namespace gpupool
