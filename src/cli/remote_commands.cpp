// gpupool exec and gpupool shell: a command inside a running job over a
// WebSocket to the server's /v1/jobs/{id}/exec (server/session_gateway.h),
// whose binary messages carry proto/exec_stream.h frames. Like ssh: the
// remote command's exit code becomes ours; losing the connection first is
// 255. (session connect is in remote_forward.cpp.)
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command_util.h"
#include "cli/remote_fd_io.h"
#include "cli/remote_terminal.h"
#include "cli/remote_ws.h"
#include "cli/session_commands.h"
#include "proto/exec_stream.h"

namespace gpupool::cli {

namespace {

using proto::ExecFrameType;

// Back-pressure: a source stops being read while its destination holds more
// than kHighWater bytes, and resumes below kLowWater.
constexpr size_t kHighWater = 1 << 20;
constexpr size_t kLowWater = 256 << 10;
// ssh's code for "the connection, not the command, failed".
constexpr int kConnectionFailed = 255;
// After this many signals the remote command did not end on, we leave.
constexpr int kSignalsBeforeLeaving = 3;
// How long we wait for the server to finish the close handshake.
constexpr int64_t kCloseWaitMs = 1'000;

struct ExecOutcome {
  int code = kConnectionFailed;
  std::string message;              // ours, for stderr after the terminal is restored
  std::vector<std::string> errors;  // the agent's error frames
};

// One exec stream: stdin to the server, the server's frames to stdout and
// stderr, until the exit frame or the end of the WebSocket. Stops the loop
// once the outcome is known and the output written.
class ExecClient : public net::WsHandler {
 public:
  ExecClient(net::EventLoop& loop, std::string command, bool tty)
      : loop_(loop),
        command_(std::move(command)),
        tty_(tty),
        stdin_(
            loop, STDIN_FILENO, [this](std::string_view b) { FromStdin(b); },
            [this] { StdinEnded(); }),
        stdout_(
            loop, STDOUT_FILENO, [this] { OutputDrained(); },
            [this](int err) { OutputFailed(err); }),
        stderr_(
            loop, STDERR_FILENO, [this] { OutputDrained(); }, [this](int) { OutputDrained(); }) {}

  void OnOpen(std::shared_ptr<net::WsConnection> conn) override {
    conn_ = std::move(conn);
    opened_ = true;
    conn_->Send(command_);
    stdin_.Start();
  }

  void OnBinary(std::string bytes) override {
    if (finishing_) return;
    reader_.Feed(bytes);
    for (;;) {
      auto frame = reader_.Next();
      if (!frame.ok()) {
        return Finish(kConnectionFailed,
                      "unreadable data from the server: " + frame.status().message());
      }
      if (!*frame) break;
      Handle(**frame);
      if (finishing_) return;
    }
    if (!ws_paused_ && stdout_.pending() + stderr_.pending() > kHighWater) {
      ws_paused_ = true;
      conn_->PauseReading(true);
    }
  }

  void OnMessage(std::string) override {}  // the gateway sends none

  void OnSent() override {
    if (conn_ && stdin_.paused() && conn_->queued_bytes() < kLowWater) stdin_.Resume();
  }

  void OnClose(std::string reason) override {
    conn_.reset();
    if (finishing_) {
      // After the exit frame the agent may still say why the command ended
      // ("session ended: the provider reclaimed the GPU ..."): worth showing.
      if (exit_code_ && outcome_.message.empty())
        outcome_.message = DescribeWsEnd(reason, true).message;
      return MaybeStop();
    }
    if (exit_code_) return Finish(*exit_code_, "");
    WsEnd end = DescribeWsEnd(reason, opened_);
    Finish(kConnectionFailed, end.message.empty() ? "connection to the server lost" : end.message);
  }

  // SIGINT, SIGTERM, SIGHUP, SIGQUIT: passed on to the remote command.
  void Signal(int sig) {
    if (finishing_) return;
    if (!conn_) return Finish(128 + sig, "");  // nothing runs yet
    conn_->SendBinary(proto::EncodeExecSignal(static_cast<uint8_t>(sig)));
    if (++signals_ >= kSignalsBeforeLeaving) {
      Finish(kConnectionFailed, "the remote command did not end after " + std::to_string(signals_) +
                                    " signals; left it running");
    }
  }

  void WindowChanged() {
    auto size = CurrentTerminalSize();
    if (!tty_ || !conn_ || !size) return;
    conn_->SendBinary(proto::EncodeExecResize(static_cast<uint16_t>(size->rows),
                                              static_cast<uint16_t>(size->cols)));
  }

  // Before the loop goes: no more watches of our fds.
  void Shutdown() {
    stdin_.Stop();
    stdout_.Stop();
    stderr_.Stop();
    if (conn_) conn_->Close("");  // the server did not close after the exit frame
  }

  const ExecOutcome& outcome() const { return outcome_; }

 private:
  void Handle(const proto::ExecFrame& f) {
    switch (f.type) {
      case ExecFrameType::kStdout:
        stdout_.Write(f.payload);
        break;
      case ExecFrameType::kStderr:
        stderr_.Write(f.payload);
        break;
      case ExecFrameType::kError:
        outcome_.errors.push_back(f.payload);
        break;
      case ExecFrameType::kExit: {
        auto code = proto::DecodeExecExit(f.payload);
        exit_code_ = code.ok() ? *code : kConnectionFailed;
        // The agent closes the stream next; nothing more is needed from it.
        Finish(*exit_code_, "");
        break;
      }
      default:
        Finish(kConnectionFailed, "the server sent an unexpected frame");
    }
  }

  void FromStdin(std::string_view bytes) {
    if (!conn_) return stdin_.Pause();
    while (!bytes.empty()) {
      size_t n = std::min(bytes.size(), proto::kMaxExecPayload);
      conn_->SendBinary(proto::EncodeExecFrame(ExecFrameType::kStdin, bytes.substr(0, n)));
      bytes.remove_prefix(n);
    }
    if (conn_->queued_bytes() > kHighWater) stdin_.Pause();
  }

  void StdinEnded() {
    if (conn_) conn_->SendBinary(proto::EncodeExecFrame(ExecFrameType::kStdinEof));
  }

  void OutputDrained() {
    if (ws_paused_ && conn_ && stdout_.pending() + stderr_.pending() < kLowWater) {
      ws_paused_ = false;
      conn_->PauseReading(false);
    }
    MaybeStop();
  }

  // Our stdout's reader went away (`gpupool exec ID -- cat big | head`): the
  // remote command gets the SIGPIPE it would have had locally.
  void OutputFailed(int err) {
    if (err == EPIPE && conn_ && !finishing_) conn_->SendBinary(proto::EncodeExecSignal(SIGPIPE));
    OutputDrained();
  }

  void Finish(int code, std::string message) {
    if (finishing_) return;
    finishing_ = true;
    outcome_.code = code;
    outcome_.message = std::move(message);
    stdin_.Stop();
    if (conn_) {
      conn_->PauseReading(false);
      // After an exit frame the server closes, with the agent's reason; on
      // any other end we close at once. Either way the close handshake
      // gets a moment to finish, so that the server sees a clean end.
      if (!exit_code_) conn_->Close("");
      loop_.RunAfter(kCloseWaitMs, [this] {
        close_waited_ = true;
        MaybeStop();
      });
    }
    MaybeStop();
  }

  void MaybeStop() {
    if (finishing_ && (!conn_ || close_waited_) && stdout_.pending() == 0 &&
        stderr_.pending() == 0) {
      loop_.Stop();
    }
  }

  net::EventLoop& loop_;
  std::string command_;  // the first (text) message
  bool tty_;
  FdReader stdin_;
  FdWriter stdout_, stderr_;
  std::shared_ptr<net::WsConnection> conn_;
  proto::ExecFrameReader reader_;
  bool opened_ = false, ws_paused_ = false, finishing_ = false, close_waited_ = false;
  int signals_ = 0;
  std::optional<int> exit_code_;
  ExecOutcome outcome_;
};

ExecOutcome RunExec(const net::WsClientOptions& options, const nlohmann::json& command, bool tty,
                    TerminalGuard& terminal) {
  net::EventLoop loop;
  auto client = std::make_shared<ExecClient>(loop, command.dump(), tty);
  loop.OnSignals({SIGINT, SIGTERM, SIGHUP, SIGQUIT}, [&client](int sig) { client->Signal(sig); });
  if (tty) loop.OnSignals({SIGWINCH}, [&client](int) { client->WindowChanged(); });
  // Raw before connecting: keys typed meanwhile must reach the remote PTY,
  // not be echoed and line-edited here.
  if (tty) terminal.MakeRaw();
  net::WsConnect(loop, options, client);
  loop.Run();
  client->Shutdown();
  return client->outcome();
}

}  // namespace

int CmdExec(const GlobalFlags& g, const std::string& id, const std::vector<std::string>& argv,
            bool tty, bool no_tty) {
  auto job = ParseJobId(id);
  if (!job.ok()) return ReportError(job.status());
  if (argv.empty()) return ReportError(Status::InvalidArgument("exec: no command given"));
  auto api = Connect(g);
  if (!api.ok()) return ReportError(api.status());
  // Of several servers, the tunnel goes to the leader: an API call finds it.
  if (api->endpoint().server.find(',') != std::string::npos) {
    auto found = api->Get("/v1/jobs/" + std::to_string(*job));
    if (!found.ok()) return ReportError(found.status());
  }
  auto options = GatewayOptions(api->endpoint(), "/v1/jobs/" + std::to_string(*job) + "/exec");
  if (!options.ok()) return ReportError(options.status());

  bool use_tty = !no_tty && (tty || ::isatty(STDIN_FILENO));
  nlohmann::json command = {{"argv", argv}, {"tty", use_tty}};
  if (use_tty) {
    TerminalSize size = CurrentTerminalSize().value_or(TerminalSize{24, 80});
    const char* term = std::getenv("TERM");
    command["rows"] = size.rows;
    command["cols"] = size.cols;
    command["term"] = term && *term ? term : "xterm-256color";
  }
  // Our stdout's reader may go away; that is a write error, not a death.
  ::signal(SIGPIPE, SIG_IGN);

  ExecOutcome outcome;
  {
    TerminalGuard terminal;  // restores the terminal and fd flags on every path out
    try {
      outcome = RunExec(*options, command, use_tty, terminal);
    } catch (const std::exception& e) {
      outcome.code = kConnectionFailed;
      outcome.message = e.what();
    }
  }
  for (const std::string& e : outcome.errors) std::cerr << "gpupool: " << e << "\n";
  if (!outcome.message.empty()) std::cerr << "gpupool: " << outcome.message << "\n";
  return outcome.code;
}

int CmdShell(const GlobalFlags& g, const std::string& id) {
  // The job's own login shell: bash where the image has it, else sh.
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"};
  return CmdExec(g, id, argv, /*tty=*/true, /*no_tty=*/false);
}

}  // namespace gpupool::cli
