// StaticFiles: the web dashboard's files (HTML, scripts, styles, images),
// served read-only from one directory under GET /ui and /ui/{file...}
// (docs/api.md#static-files). The files hold no pool data: the dashboard
// reads the pool through the API with the user's own token, so these
// routes are public (the sign-in page must load before anyone has a token).
//
// What a hostile client cannot do (each tested): leave the directory
// ("..", an encoded or absolute path, a symlink on the way or at the end:
// files are opened beneath the directory's descriptor with openat2
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS and O_NOFOLLOW, common/safe_fs.h), read a
// hidden file (a segment starting with "." is refused: .git, .env), read
// anything but a regular file (a FIFO, a device, a directory), or make the
// server read more than `max_file_bytes` for one request. Every refusal is
// the same 404, so the answer does not tell what exists. Responses carry
// `X-Content-Type-Options: nosniff`, a Content-Security-Policy limited to
// the pool's own origin, and `Cache-Control: no-cache`.
//
// Not defended: the directory's contents are the operator's; a hard link
// the operator puts there is served like any file.
//
// Files are read on each request (the directory may be updated while the
// server runs); they are meant to be small. Single-threaded: the event loop.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"
#include "common/unique_fd.h"
#include "server/api_module.h"

namespace gpupool::server {

struct StaticFilesOptions {
  std::string dir;                        // --web-dir
  size_t max_file_bytes = 16 << 20;       // one file, at most
  std::string index_file = "index.html";  // what GET /ui serves
};

// The dashboard installed with the binary: BIN/../share/gpupool/web when it
// holds an index.html, else "" (then /ui is 404 unless --web-dir names one).
std::string DefaultWebDir();

// "text/html; charset=utf-8" for "index.html"; application/octet-stream
// for an extension it does not know.
std::string ContentTypeFor(const std::string& file);

class StaticFiles : public ApiModule {
 public:
  // Opens the directory. FailedPrecondition when it is not a directory.
  static Result<std::unique_ptr<StaticFiles>> Open(StaticFilesOptions options);

  void AddRoutes(ApiRoutes& routes) override;

 private:
  StaticFiles(StaticFilesOptions options, UniqueFd dir)
      : options_(std::move(options)), dir_(std::move(dir)) {}
  void Serve(const std::string& file, Respond respond) const;

  StaticFilesOptions options_;
  UniqueFd dir_;
};

}  // namespace gpupool::server
