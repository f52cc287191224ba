#include "proto/tunnel_target.h"

#include <nlohmann/json.hpp>

#include "common/json_reader.h"
#include "model/job.h"

namespace gpupool::proto {

using nlohmann::json;

namespace {

constexpr const char* kWhat = "tunnel target";
constexpr size_t kMaxTermBytes = 64;

// TERM goes into the command's environment and names a terminfo file: a
// short name of the characters real ones use ("xterm-256color", "rxvt-unicode").
bool ValidTerm(std::string_view term) {
  if (term.size() > kMaxTermBytes) return false;
  for (char c : term) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == '+';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string_view TunnelTargetKindName(TunnelTarget::Kind kind) {
  switch (kind) {
    case TunnelTarget::Kind::kTcp:
      return "tcp";
    case TunnelTarget::Kind::kJupyter:
      return "jupyter";
    case TunnelTarget::Kind::kExec:
      return "exec";
  }
  return "tcp";
}

std::string EncodeTunnelTarget(const TunnelTarget& t) {
  json j = {{"attempt", t.attempt_id}, {"kind", TunnelTargetKindName(t.kind)}};
  switch (t.kind) {
    case TunnelTarget::Kind::kTcp:
      j["port"] = t.port;
      break;
    case TunnelTarget::Kind::kJupyter:
      break;
    case TunnelTarget::Kind::kExec:
      j["argv"] = t.argv;
      j["tty"] = t.tty;
      j["rows"] = t.rows;
      j["cols"] = t.cols;
      j["term"] = t.term;
      break;
  }
  return j.dump();
}

Result<TunnelTarget> DecodeTunnelTarget(std::string_view text) {
  GP_ASSIGN_OR_RETURN(json j, ParseJsonObject(text, kWhat));
  JsonReader r(j, kWhat);
  TunnelTarget t;
  t.attempt_id = r.Str("attempt");
  if (r.ok()) {
    auto id = ParseAttemptId(t.attempt_id);
    if (!id.ok()) r.Fail("attempt", id.status().message());
  }
  std::string kind = r.Str("kind");
  if (!r.ok()) return r.status();
  if (kind == "tcp") {
    t.kind = TunnelTarget::Kind::kTcp;
    t.port = static_cast<int>(r.IntIn("port", 1, 65535));
  } else if (kind == "jupyter") {
    t.kind = TunnelTarget::Kind::kJupyter;
  } else if (kind == "exec") {
    t.kind = TunnelTarget::Kind::kExec;
    t.argv = r.StrList("argv", true, kMaxExecArgs);
    if (r.ok() && t.argv.empty()) r.Fail("argv", "must name a command");
    size_t bytes = 0;
    for (const auto& a : t.argv) bytes += a.size() + 1;
    if (r.ok() && bytes > kMaxExecArgvBytes) {
      r.Fail("argv", "must be at most " + std::to_string(kMaxExecArgvBytes) + " bytes, got " +
                         std::to_string(bytes));
    }
    for (size_t i = 0; r.ok() && i < t.argv.size(); ++i) {
      // execve cannot pass a NUL inside an argument; refuse rather than cut.
      if (t.argv[i].find('\0') != std::string::npos)
        r.Fail("argv[" + std::to_string(i) + "]", "must not contain a NUL byte");
    }
    if (r.ok() && t.argv[0].empty()) r.Fail("argv[0]", "must not be empty");
    t.tty = r.Bool("tty", false, false);
    t.rows = static_cast<int>(r.IntIn("rows", 0, kMaxTerminalSize, false));
    t.cols = static_cast<int>(r.IntIn("cols", 0, kMaxTerminalSize, false));
    t.term = r.Str("term", false);
    if (r.ok() && !ValidTerm(t.term))
      r.Fail("term", "must be a terminal name of at most 64 letters, digits and - _ . +");
  } else {
    r.Fail("kind", "must be tcp, jupyter or exec, got \"" + kind.substr(0, 32) + "\"");
  }
  GP_RETURN_IF_ERROR(r.Finish(true));
  return t;
}

}  // namespace gpupool::proto
