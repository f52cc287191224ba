// TunnelEndpoint and task_exec with real tasks (the bubblewrap sandbox and
// the process executor, as in tasks_test.cpp): the endpoint is paired with
// a server-side TunnelMux and frames move between them as over the channel.
#include "agent/tunnel_endpoint.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "agent/tasks.h"
#include "common/clock.h"
#include "common/files.h"
#include "exec/executors.h"
#include "net/event_loop.h"
#include "proto/exec_stream.h"
#include "proto/tunnel_mux.h"
#include "proto/tunnel_target.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using proto::ExecFrameType;
using proto::TunnelTarget;
using ::testing::HasSubstr;

// What the server side of one exec stream got.
struct ExecResult {
  std::string out, err, error;
  std::optional<int> exit;
};

class TunnelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpupool-tunnel-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0755);
    config_.executors = {"process", "sandbox"};
    config_.cgroup = "none";
    config_.images.dir = dir_ + "/images";
    env_ = exec::ProbeExecEnvironment(config_, -1, -1);
    Make(false);
  }

  void Make(bool own_uids) {
    endpoint_.reset();
    manager_.reset();
    TaskManager::Options o;
    o.data_dir = dir_ + "/data";
    o.kill_grace_ms = 2000;
    o.exec_config = &config_;
    o.exec_env = &env_;
    o.own_uids = own_uids;
    o.blob.server_url = "http://127.0.0.1:1";
    o.blob.cache_dir = dir_ + "/chunk-cache";
    manager_ = std::make_unique<TaskManager>(std::move(o), loop_, clock_, nullptr);
    ASSERT_TRUE(manager_->Recover().ok());
    endpoint_ = std::make_unique<TunnelEndpoint>(loop_, *manager_, TunnelEndpoint::Options{});
    proto::TunnelMux::Events e;
    e.data = [this](uint32_t s, std::string_view d) {
      received_[s].append(d);
      if (consume_) server_->Consumed(s, d.size());
    };
    e.closed = [this](uint32_t s, const std::string& reason) { closed_[s] = reason; };
    server_ = std::make_unique<proto::TunnelMux>(proto::TunnelMuxOptions{}, e);
  }

  void TearDown() override {
    for (const auto& [id, t] : manager_->tasks()) manager_->Stop(id, "test over", 0);
    RunUntil(
        [&] {
          for (const auto& [id, t] : manager_->tasks()) {
            if (!manager_->Ended(t)) return false;
          }
          return true;
        },
        10'000);
    endpoint_.reset();
    manager_.reset();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  bool Offers(const std::string& executor) const {
    return std::find(env_.available.begin(), env_.available.end(), executor) !=
           env_.available.end();
  }

  // Moves frames both ways, reads task output (the endpoint sees task
  // ends through it), until `done` or the time is up.
  bool RunUntil(const std::function<bool()>& done, int64_t timeout_ms = 10'000) {
    int64_t give_up = clock_.NowMs() + timeout_ms;
    bool ok = false;
    std::function<void()> tick = [&] {
      for (int i = 0; i < 64; ++i) {
        bool moved = false;
        if (auto f = endpoint_->NextFrame()) {
          auto frame = proto::DecodeTunnelFrame(*f);
          EXPECT_TRUE(frame.ok());
          EXPECT_TRUE(server_->OnFrame(*frame).ok());
          moved = true;
        }
        if (auto f = server_->NextFrame()) {
          EXPECT_TRUE(endpoint_->OnMessage(proto::EncodeTunnelFrame(*f)).ok());
          moved = true;
        }
        if (!moved) break;
      }
      manager_->Poll();
      for (const auto& [id, t] : manager_->tasks()) manager_->ReadOutput(id, 1 << 20);
      endpoint_->CheckTasks();
      if (done()) {
        ok = true;
        return loop_.Stop();
      }
      if (clock_.NowMs() >= give_up) return loop_.Stop();
      loop_.RunAfter(2, tick);
    };
    loop_.Post(tick);
    loop_.Run();
    return ok;
  }

  static proto::StartTask Task(const std::string& attempt, const std::string& executor,
                               const std::string& run) {
    proto::StartTask t;
    t.attempt_id = attempt;
    t.job_id = std::stoll(attempt.substr(0, attempt.find('.')));
    t.spec.name = "session";
    t.spec.run = run;
    t.spec.executor = executor;
    t.spec.env = {{"MY_VAR", "hello from the job"}};
    return t;
  }

  // Starts the task and waits until its job runs.
  void StartTask(const proto::StartTask& t) {
    ASSERT_TRUE(manager_->Start(t, {}).ok());
    ASSERT_TRUE(RunUntil([&] { return manager_->tasks().at(t.attempt_id).started; }));
  }

  uint32_t Open(const TunnelTarget& t) { return server_->Open(proto::EncodeTunnelTarget(t)); }

  static TunnelTarget Exec(const std::string& attempt, std::vector<std::string> argv,
                           bool tty = false, int rows = 0, int cols = 0) {
    TunnelTarget t;
    t.attempt_id = attempt;
    t.kind = TunnelTarget::Kind::kExec;
    t.argv = std::move(argv);
    t.tty = tty;
    t.rows = rows;
    t.cols = cols;
    t.term = tty ? "xterm-256color" : "";
    return t;
  }

  ExecResult Parse(uint32_t stream) {
    ExecResult r;
    proto::ExecFrameReader reader;
    reader.Feed(received_[stream]);
    while (true) {
      auto f = reader.Next();
      EXPECT_TRUE(f.ok()) << f.status().ToString();
      if (!f.ok() || !*f) break;
      switch ((*f)->type) {
        case ExecFrameType::kStdout:
          r.out += (*f)->payload;
          break;
        case ExecFrameType::kStderr:
          r.err += (*f)->payload;
          break;
        case ExecFrameType::kError:
          r.error += (*f)->payload;
          break;
        case ExecFrameType::kExit:
          r.exit = *proto::DecodeExecExit((*f)->payload);
          break;
        default:
          ADD_FAILURE() << "unexpected frame type " << static_cast<int>((*f)->type);
      }
    }
    return r;
  }

  // Runs a command to its end and returns what it printed.
  ExecResult RunExec(const TunnelTarget& t) {
    uint32_t s = Open(t);
    EXPECT_TRUE(RunUntil([&] { return closed_.count(s) > 0; })) << "no end of " << t.argv[0];
    EXPECT_EQ(closed_[s], "");
    return Parse(s);
  }

  std::string dir_;
  exec::ExecConfig config_;
  exec::ExecEnvironment env_;
  net::EventLoop loop_;
  RealClock clock_;
  std::unique_ptr<TaskManager> manager_;
  std::unique_ptr<TunnelEndpoint> endpoint_;
  std::unique_ptr<proto::TunnelMux> server_;
  bool consume_ = true;
  std::map<uint32_t, std::string> received_;
  std::map<uint32_t, std::string> closed_;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    start = nl + 1;
  }
  return lines;
}

TEST_F(TunnelTest, ExecRunsInTheJobsWorldUnderEachExecutor) {
  for (const std::string executor : {"sandbox", "process"}) {
    if (!Offers(executor)) {
      ADD_FAILURE() << executor << " does not work here: " << env_.unavailable[executor];
      continue;
    }
    SCOPED_TRACE(executor);
    std::string id = executor == "sandbox" ? "21.1" : "22.1";
    StartTask(Task(id, executor, "sleep 600"));
    ExecResult r = RunExec(
        Exec(id, {"/bin/sh", "-c",
                  "id -u; pwd; echo \"$MY_VAR\"; hostname; tr '\\0' ' ' </proc/1/cmdline; echo; "
                  "echo \"$GPUPOOL_JOB_ID\"; echo oops >&2"}));
    ASSERT_TRUE(r.exit);
    EXPECT_EQ(*r.exit, 0);
    EXPECT_EQ(r.err, "oops\n");
    auto lines = Lines(r.out);
    ASSERT_EQ(lines.size(), 6u) << r.out;
    EXPECT_EQ(lines[0], std::to_string(::getuid()));
    EXPECT_EQ(lines[2], "hello from the job");
    EXPECT_EQ(lines[5], id.substr(0, 2));
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    if (executor == "sandbox") {
      EXPECT_EQ(lines[1], "/work");
      EXPECT_EQ(lines[3], "gpupool-21");
      EXPECT_THAT(lines[4], HasSubstr("bwrap"));  // the sandbox's pid 1
    } else {
      EXPECT_EQ(lines[1], manager_->tasks().at(id).paths.work_dir());
      EXPECT_EQ(lines[3], host);
    }
  }
}

TEST_F(TunnelTest, SandboxExecTakesTheTasksOwnAccount) {
  if (::geteuid() != 0 || !Offers("sandbox")) GTEST_SKIP() << "needs root and the sandbox";
  Make(/*own_uids=*/true);
  StartTask(Task("23.1", "sandbox", "sleep 600"));
  int uid = manager_->tasks().at("23.1").uid;
  ASSERT_GE(uid, config_.first_uid);
  ExecResult r = RunExec(Exec("23.1", {"/bin/sh", "-c",
                                       "id -u; id -g; touch /work/made; "
                                       "grep CapEff /proc/self/status"}));
  ASSERT_TRUE(r.exit);
  EXPECT_EQ(*r.exit, 0) << r.err << r.error;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out << r.err;
  EXPECT_EQ(lines[0], std::to_string(uid));
  EXPECT_EQ(lines[1], std::to_string(uid));
  EXPECT_THAT(lines[2], HasSubstr("0000000000000000"));
  struct stat st;
  ASSERT_EQ(::stat((manager_->tasks().at("23.1").paths.work_dir() + "/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(uid));
}

TEST_F(TunnelTest, ExitCodesAndCommandsThatDoNotExist) {
  StartTask(Task("24.1", "sandbox", "sleep 600"));
  ExecResult r = RunExec(Exec("24.1", {"/bin/sh", "-c", "exit 3"}));
  EXPECT_EQ(r.exit, 3);
  r = RunExec(Exec("24.1", {"no-such-command", "x"}));
  EXPECT_EQ(r.error, "cannot run no-such-command: No such file or directory");
  EXPECT_EQ(r.exit, 127);
  r = RunExec(Exec("24.1", {"/work"}));  // a directory: not executable
  EXPECT_THAT(r.error, HasSubstr("cannot run /work: Permission denied"));
  EXPECT_EQ(r.exit, 126);
}

TEST_F(TunnelTest, ATerminalHasItsSizeResizesAndTakesControlC) {
  StartTask(Task("25.1", "sandbox", "sleep 600"));
  uint32_t s = Open(Exec("25.1", {"/bin/sh", "-c", "stty size; read x; stty size"}, true, 30, 100));
  ASSERT_TRUE(RunUntil([&] { return Parse(s).out.find("30 100") != std::string::npos; }))
      << Parse(s).out;
  server_->Write(s, proto::EncodeExecResize(40, 120));
  server_->Write(s, proto::EncodeExecFrame(ExecFrameType::kStdin, "\n"));
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }));
  ExecResult r = Parse(s);
  EXPECT_THAT(r.out, HasSubstr("40 120"));
  EXPECT_EQ(r.exit, 0);

  s = Open(Exec("25.1", {"sleep", "100"}, true));
  RunUntil([] { return false; }, 300);  // sleep runs
  server_->Write(s, proto::EncodeExecFrame(ExecFrameType::kStdin, "\x03"));
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }, 5000)) << Parse(s).out;
  EXPECT_EQ(Parse(s).exit, 130);

  // Without a terminal the client forwards the signal itself.
  s = Open(Exec("25.1", {"sleep", "100"}));
  RunUntil([] { return false; }, 300);
  server_->Write(s, proto::EncodeExecSignal(SIGINT));
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }, 5000));
  EXPECT_EQ(Parse(s).exit, 130);

  // Stdin, then its end.
  s = Open(Exec("25.1", {"cat"}));
  server_->Write(s, proto::EncodeExecFrame(ExecFrameType::kStdin, "abc"));
  server_->Write(s, proto::EncodeExecFrame(ExecFrameType::kStdinEof));
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }, 5000));
  EXPECT_EQ(Parse(s).out, "abc");
  EXPECT_EQ(Parse(s).exit, 0);
}

TEST_F(TunnelTest, TcpReachesTheSandboxsOwnLoopback) {
  // network: false gives the sandbox a loopback of its own: only a socket
  // made in its namespace reaches the server.
  proto::StartTask t = Task("26.1", "sandbox",
                            "echo hi >/work/index.html; cd /work && exec /usr/bin/python3 -m "
                            "http.server 18765 --bind 127.0.0.1");
  t.spec.network = NetworkMode::kNone;
  StartTask(t);
  TunnelTarget target;
  target.attempt_id = "26.1";
  target.port = 18765;
  std::string response;
  for (int attempt = 0; attempt < 50 && response.find("200") == std::string::npos; ++attempt) {
    uint32_t s = Open(target);
    server_->Write(s, "GET /index.html HTTP/1.0\r\n\r\n");
    server_->Close(s);
    RunUntil([&] { return closed_.count(s) > 0; });
    response = received_[s];
    if (response.empty()) RunUntil([] { return false; }, 100);  // not listening yet
  }
  EXPECT_THAT(response, HasSubstr("HTTP/1.0 200"));
  EXPECT_THAT(response, HasSubstr("\r\n\r\nhi\n"));

  target.port = 18766;
  uint32_t s = Open(target);
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }));
  EXPECT_EQ(closed_[s], "cannot connect to port 18766 in the session: Connection refused");
}

TEST_F(TunnelTest, ASlowReaderHoldsTheEndpointAtOneWindow) {
  StartTask(Task("27.1", "sandbox", "sleep 600"));
  consume_ = false;
  uint32_t s = Open(Exec("27.1", {"head", "-c", "8000000", "/dev/zero"}));
  RunUntil([] { return false; }, 1500);
  size_t window = proto::TunnelMuxOptions{}.window;
  EXPECT_LE(received_[s].size(), window);
  EXPECT_GE(received_[s].size(), window / 2);
  EXPECT_EQ(closed_.count(s), 0u);
  consume_ = true;
  server_->Consumed(s, received_[s].size());
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }, 60'000));
  ExecResult r = Parse(s);
  EXPECT_EQ(r.out.size(), 8000000u);
  EXPECT_EQ(r.exit, 0);
}

TEST_F(TunnelTest, StreamsCloseWithTheReasonTheirTaskEnded) {
  StartTask(Task("28.1", "sandbox", "sleep 600"));
  StartTask(Task("29.1", "process", "sleep 600"));
  uint32_t a = Open(Exec("28.1", {"sleep", "100"}, true));
  uint32_t b = Open(Exec("29.1", {"sleep", "100"}));
  RunUntil([] { return false; }, 300);
  EXPECT_EQ(endpoint_->streams(), 2u);
  manager_->Vacate("28.1", "the owner needs the GPU", TaskManager::kKillNow);
  manager_->Stop("29.1", "cancelled", TaskManager::kKillNow);
  ASSERT_TRUE(RunUntil([&] { return closed_.count(a) && closed_.count(b); }, 15'000));
  EXPECT_EQ(closed_[a], "session ended: the provider reclaimed the GPU (the owner needs the GPU)");
  EXPECT_EQ(closed_[b], "session ended: stopped: cancelled");
  EXPECT_EQ(endpoint_->streams(), 0u);
}

TEST_F(TunnelTest, UnknownOrEndedTasksAreRefused) {
  uint32_t s = Open(Exec("99.1", {"true"}));
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }));
  EXPECT_EQ(closed_[s], "the session is not running on this node");
  s = server_->Open("{not json");
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }));
  EXPECT_THAT(closed_[s], HasSubstr("tunnel target: invalid JSON"));

  proto::StartTask t = Task("30.1", "process", "true");
  ASSERT_TRUE(manager_->Start(t, {}).ok());
  ASSERT_TRUE(RunUntil([&] { return manager_->tasks().at("30.1").result.has_value(); }));
  s = Open(Exec("30.1", {"true"}));
  ASSERT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }));
  EXPECT_EQ(closed_[s], "the session is not running on this node");
}

TEST_F(TunnelTest, ResetDropsStreamsAndKillsTheirCommands) {
  StartTask(Task("31.1", "process", "sleep 600"));
  uint32_t s = Open(Exec("31.1", {"/bin/sh", "-c", "echo $$; exec sleep 100"}));
  ASSERT_TRUE(RunUntil([&] { return !Parse(s).out.empty(); }));
  pid_t pid = std::stoi(Parse(s).out);
  ASSERT_EQ(::kill(pid, 0), 0);
  endpoint_->Reset();
  EXPECT_EQ(endpoint_->streams(), 0u);
  EXPECT_TRUE(RunUntil([&] { return ::kill(pid, 0) != 0; }, 5000));
}

TEST_F(TunnelTest, JupyterInASandboxAnswersThroughItsStream) {
  if (::access("/usr/bin/jupyter", X_OK) != 0) GTEST_SKIP() << "no jupyter here";
  // As a root agent runs it: the job has an account of its own (Jupyter
  // also refuses to run as root).
  if (::geteuid() == 0) Make(/*own_uids=*/true);
  proto::StartTask t =
      Task("32.1", "sandbox",
           "exec /usr/bin/jupyter notebook --no-browser --sock=\"$GPUPOOL_JUPYTER_SOCKET\" "
           "--NotebookApp.base_url=\"/v1/sessions/$GPUPOOL_JOB_ID/proxy/\" "
           "--NotebookApp.allow_remote_access=True");
  t.spec.session = SessionSpec{};
  t.spec.session->kind = SessionKind::kJupyter;
  t.spec.session->jupyter_token = "tok-5f3a";
  StartTask(t);
  std::string sock = manager_->tasks().at("32.1").paths.work_dir() + "/.gpupool-jupyter";
  struct stat st;
  ASSERT_EQ(::stat(sock.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_TRUE(
      RunUntil([&] { return ::access((sock + "/jupyter.sock").c_str(), F_OK) == 0; }, 60'000))
      << "the notebook server made no socket: "
      << ReadFile(manager_->tasks().at("32.1").paths.output_log()).value_or("");
  TunnelTarget target;
  target.attempt_id = "32.1";
  target.kind = TunnelTarget::Kind::kJupyter;
  // The socket's name comes with bind(), before the server listens on it
  // (on a busy machine, for a while): until then a connection is refused
  // and the stream ends saying so, and the request is sent again.
  const std::string not_yet = "the session's Jupyter server is not running (yet)";
  auto get = [&](const std::string& path, const std::string& token) {
    uint32_t s = 0;
    for (int64_t give_up = clock_.NowMs() + 60'000;;) {
      s = Open(target);
      server_->Write(s, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n" +
                            (token.empty() ? "" : "Authorization: token " + token + "\r\n") +
                            "Connection: close\r\n\r\n");
      EXPECT_TRUE(RunUntil([&] { return closed_.count(s) > 0; }, 20'000));
      if (closed_[s] != not_yet || clock_.NowMs() > give_up) break;
      RunUntil([] { return false; }, 100);
    }
    EXPECT_NE(closed_[s], not_yet);
    return received_[s];
  };
  std::string ok = get("/v1/sessions/32/proxy/api/status", "tok-5f3a");
  EXPECT_THAT(ok, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(ok, HasSubstr("\"kernels\""));
  EXPECT_THAT(get("/v1/sessions/32/proxy/api/status", "wrong"), HasSubstr("HTTP/1.1 403"));
}

}  // namespace
}  // namespace gpupool::agent
