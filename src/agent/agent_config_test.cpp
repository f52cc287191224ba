#include "agent/agent_config.h"

#include <stdlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/files.h"

namespace gpupool::agent {
namespace {

using ::testing::HasSubstr;

std::string FormatIpPrefixes(const std::vector<exec::IpPrefix>& list) {
  std::string out;
  for (const auto& p : list) out += (out.empty() ? "" : " ") + exec::FormatIpPrefix(p);
  return out;
}

std::string Error(std::string_view text) {
  auto c = ParseAgentConfig(text, "/data");
  return c.ok() ? "(accepted)" : c.status().message();
}

TEST(AgentConfig, Defaults) {
  auto c = ParseAgentConfig("{}", "/var/lib/agent");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->exec.executors, std::vector<std::string>{"sandbox"});
  EXPECT_EQ(c->exec.images.dir, "/var/lib/agent/images");
  EXPECT_EQ(c->exec.images.max_image_bytes, int64_t{20} << 30);
  EXPECT_EQ(c->exec.cgroup, "auto");
  EXPECT_EQ(c->exec.defaults.pids, 4096);
  EXPECT_EQ(c->exec.defaults.memory_bytes, 0);
  EXPECT_EQ(c->exec.docker.engine, "docker");
  EXPECT_EQ(c->exec.podman.engine, "podman");
  EXPECT_EQ(c->exec.first_uid, 190000);
  EXPECT_EQ(c->exec.uid_count, 1000);
  EXPECT_EQ(c->exec.sandbox.pasta, "pasta");
  EXPECT_EQ(c->exec.sandbox.blocked_networks.size(), 2u);
  EXPECT_EQ(FormatIpPrefixes(c->exec.sandbox.blocked_networks), "169.254.0.0/16 fd00:ec2::254/128");
  EXPECT_EQ(c->exec.sandbox.gang_ports, (exec::PortRange{61000, 1000}));
  EXPECT_EQ(c->exec.sandbox.gang_ports_per_rank, 50);
}

TEST(AgentConfig, EveryField) {
  auto c = ParseAgentConfig(R"(
executors: [docker, sandbox, process]
sandbox:
  uids: 200000-200009
  host_paths: [/usr, /etc, /opt/conda]
  devices_dir: /tmp/fakedev
  bwrap: /usr/bin/bwrap
  ldconfig: /tmp/ldconfig.sh
  pasta: /usr/bin/pasta
  blocked_networks: [10.1.2.3, 192.168.7.0/24, "fe80::1:2/64"]
  gang_ports: 40000-40099
  gang_ports_per_rank: 20
gpu_driver_dir: /opt/nvidia/550
images: {cache_dir: /cache, cache_size: 2GiB, max_image_size: 5GiB, skopeo: /usr/bin/skopeo,
         umoci: /usr/bin/umoci}
docker: {command: /usr/bin/docker, gpus: gpus, extra_args: [--runtime=nvidia]}
podman: {gpus: cdi}
limits: {cgroup: none, pids: 64, memory: 4GiB, cpus: 1.5, disk: 10GiB, memory_poll: 50ms}
)",
                            "/data");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const exec::ExecConfig& e = c->exec;
  EXPECT_EQ(e.executors, (std::vector<std::string>{"docker", "sandbox", "process"}));
  EXPECT_EQ(e.first_uid, 200000);
  EXPECT_EQ(e.uid_count, 10);
  EXPECT_EQ(e.sandbox.host_paths, (std::vector<std::string>{"/usr", "/etc", "/opt/conda"}));
  EXPECT_EQ(e.sandbox.devices_dir, "/tmp/fakedev");
  EXPECT_EQ(e.sandbox.ldconfig, "/tmp/ldconfig.sh");
  EXPECT_EQ(e.sandbox.pasta, "/usr/bin/pasta");
  // Host bits are cleared: the kernel wants a prefix.
  EXPECT_EQ(FormatIpPrefixes(e.sandbox.blocked_networks), "10.1.2.3/32 192.168.7.0/24 fe80::/64");
  EXPECT_EQ(e.sandbox.gang_ports, (exec::PortRange{40000, 100}));
  EXPECT_EQ(e.sandbox.gang_ports_per_rank, 20);
  EXPECT_EQ(e.gpu_driver_dir, "/opt/nvidia/550");
  EXPECT_EQ(e.images.dir, "/cache");
  EXPECT_EQ(e.images.max_bytes, int64_t{2} << 30);
  EXPECT_EQ(e.images.max_image_bytes, int64_t{5} << 30);
  EXPECT_EQ(e.docker.engine, "/usr/bin/docker");
  EXPECT_EQ(e.docker.gpu_mode, "gpus");
  EXPECT_EQ(e.docker.extra_args, std::vector<std::string>{"--runtime=nvidia"});
  EXPECT_EQ(e.podman.engine, "podman");
  EXPECT_EQ(e.cgroup, "none");
  EXPECT_EQ(e.defaults, (exec::Limits{int64_t{4} << 30, 1500, 64, int64_t{10} << 30}));
  EXPECT_EQ(e.memory_poll_ms, 50);
}

TEST(AgentConfig, RejectsWithThePath) {
  EXPECT_THAT(Error("executor: [sandbox]"),
              HasSubstr("executor (line 1): unknown field (known: executors"));
  EXPECT_THAT(Error("executors: [vm]"),
              HasSubstr("executors[0] (line 1): unknown executor \"vm\""));
  EXPECT_THAT(Error("executors: []"), HasSubstr("executors (line 1): must name at least one"));
  EXPECT_THAT(Error("executors: [sandbox, sandbox]"),
              HasSubstr("executors[1] (line 1): \"sandbox\" is listed twice"));
  EXPECT_THAT(Error("sandbox: {uids: 5-10}"),
              HasSubstr("sandbox.uids (line 1): must be FIRST-LAST with 1000"));
  EXPECT_THAT(Error("sandbox: {uids: 190000}"),
              HasSubstr("sandbox.uids (line 1): must be a range"));
  EXPECT_THAT(Error("sandbox: {host_paths: [usr]}"),
              HasSubstr("sandbox.host_paths[0] (line 1): must be an absolute path"));
  EXPECT_THAT(Error("images: {cache_size: lots}"), HasSubstr("images.cache_size (line 1):"));
  EXPECT_THAT(Error("sandbox: {blocked_networks: [10.0.0.0/33]}"),
              HasSubstr("sandbox.blocked_networks[0] (line 1): \"10.0.0.0/33\": the prefix length "
                        "must be 0 to 32"));
  EXPECT_THAT(Error("sandbox: {blocked_networks: [metadata.internal]}"),
              HasSubstr("sandbox.blocked_networks[0] (line 1): \"metadata.internal\" is not an "
                        "IPv4 or IPv6 address"));
  EXPECT_THAT(Error("sandbox: {gang_ports: 80-90}"),
              HasSubstr("sandbox.gang_ports (line 1): must be a port range FIRST-LAST within "
                        "1024-65535"));
  EXPECT_THAT(Error("sandbox: {gang_ports: 40000-40009}"),
              HasSubstr("holds fewer ports than one rank takes (gang_ports_per_rank 50)"));
  EXPECT_THAT(Error("sandbox: {gang_ports_per_rank: 1}"),
              HasSubstr("sandbox.gang_ports_per_rank (line 1): must be an integer from 2"));
  EXPECT_THAT(Error("images: {max_image_size: -1}"), HasSubstr("images.max_image_size (line 1):"));
  EXPECT_THAT(Error("images: {max_image_size: 0B}"), HasSubstr("images.max_image_size (line 1):"));
  EXPECT_THAT(Error("docker: {gpus: all}"), HasSubstr("docker.gpus (line 1): must be cdi or gpus"));
  EXPECT_THAT(Error("limits: {pids: 0}"),
              HasSubstr("limits.pids (line 1): must be a whole number from 1"));
  EXPECT_THAT(Error("limits: {cgroup: relative/path}"),
              HasSubstr("limits.cgroup (line 1): must be auto, none or an absolute path"));
  EXPECT_THAT(Error("limits: {memory: 4}"), HasSubstr("limits.memory (line 1): must be a size"));
  EXPECT_THAT(Error("limits: {memory_poll: 1ms}"),
              HasSubstr("limits.memory_poll (line 1): must be from 10ms"));
  EXPECT_THAT(Error("limits: {swap: 1GiB}"), HasSubstr("limits.swap (line 1): unknown field"));
  EXPECT_THAT(Error("- a\n- b"), HasSubstr("expected a mapping"));
}

TEST(AgentConfig, PolicyAndOwner) {
  auto c = ParseAgentConfig(R"(
owner: alice
policy:
  gpus: [0]
  users: {allow: [bob]}
  reclaim_grace: 15s
)",
                            "/data");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->owner, "alice");
  EXPECT_EQ(c->policy.gpus, std::vector<std::string>{"0"});
  EXPECT_EQ(c->policy.allow_users, std::set<std::string>{"bob"});
  EXPECT_EQ(c->policy.reclaim_grace_ms, 15'000);
  EXPECT_EQ(ParseAgentConfig("owner: 1000", "/data")->owner, "1000");
  EXPECT_EQ(DefaultAgentConfig("/data").policy, ProviderPolicy{});
  EXPECT_THAT(Error("policy: {windows: {weekly: [{days: [someday]}]}}"),
              HasSubstr("policy.windows.weekly[0].days"));
  EXPECT_THAT(Error("owner: \"\""), HasSubstr("owner (line 1): must be a non-empty string"));
}

TEST(AgentConfig, AdvertiseAddr) {
  EXPECT_EQ(ParseAgentConfig("advertise_addr: 100.64.0.7", "/data")->advertise_addr, "100.64.0.7");
  EXPECT_EQ(ParseAgentConfig("{}", "/data")->advertise_addr, "");
  EXPECT_THAT(Error("advertise_addr: \"a b\""),
              HasSubstr("advertise_addr (line 1): must be a host name or an IP address"));
  for (const char* ok : {"10.0.0.5", "node-3.lab.example.edu", "fd00::5", "fe80::1%wg0", "my_host",
                         "100.101.102.103"}) {
    EXPECT_TRUE(CheckAdvertiseAddr(ok).ok()) << ok << ": " << CheckAdvertiseAddr(ok).message();
  }
  for (const char* bad : {"", "a b", "[fd00::5]", "10.0.0.5:29500", "host;rm", "$(id)", "-x", ".x",
                          "fd00::zz", "host%eth0", "a\nb"}) {
    EXPECT_FALSE(CheckAdvertiseAddr(bad).ok()) << bad;
  }
  EXPECT_THAT(CheckAdvertiseAddr("[::1]").message(), HasSubstr("no brackets or port"));
  EXPECT_FALSE(CheckAdvertiseAddr(std::string(254, 'a')).ok());
}

TEST(AgentConfig, GpuDriverDir) {
  EXPECT_EQ(ParseAgentConfig("{}", "/data")->exec.gpu_driver_dir, "");
  EXPECT_EQ(ParseAgentConfig("gpu_driver_dir: /opt/nvidia/550", "/data")->exec.gpu_driver_dir,
            "/opt/nvidia/550");
  EXPECT_THAT(Error("gpu_driver_dir: nvidia/550"),
              HasSubstr("gpu_driver_dir (line 1): must be an absolute path"));
  EXPECT_THAT(Error("gpu_driver_dir: [/a]"), HasSubstr("gpu_driver_dir (line 1)"));
  EXPECT_THAT(Error("sandbox: {gpu_driver_dir: /a}"), HasSubstr("sandbox.gpu_driver_dir"));
}

TEST(AgentConfig, CheckGpuDriverDir) {
  EXPECT_TRUE(CheckGpuDriverDir("/tmp").ok());
  Status missing = CheckGpuDriverDir("/nonexistent/driver");
  EXPECT_EQ(missing.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("cannot use /nonexistent/driver: No such file"));
  EXPECT_THAT(CheckGpuDriverDir("/dev/null").message(), HasSubstr("/dev/null is not a directory"));
  EXPECT_THAT(CheckGpuDriverDir("driver").message(), HasSubstr("must be an absolute path"));
}

TEST(AgentConfig, ResolveAppliesTheFlagsOverTheFile) {
  char tmpl[] = "/tmp/gpupool-agent-config-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string file = dir + "/agent.yaml";
  ASSERT_TRUE(WriteFileAtomic(file, "gpu_driver_dir: " + dir + "/gone\n").ok());

  // No file: the defaults, with the flags.
  auto plain = ResolveAgentConfig("", "/data", {});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->exec.gpu_driver_dir, "");
  auto flags = ResolveAgentConfig("", "/data", {int64_t{1} << 30, dir, ""});
  ASSERT_TRUE(flags.ok()) << flags.status().ToString();
  EXPECT_EQ(flags->exec.gpu_driver_dir, dir);
  EXPECT_EQ(flags->exec.images.max_image_bytes, int64_t{1} << 30);
  // The file's directory does not exist: named with the file and the field.
  auto from_file = ResolveAgentConfig(file, "/data", {});
  ASSERT_FALSE(from_file.ok());
  EXPECT_EQ(from_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(from_file.status().message(),
              HasSubstr(file + ": gpu_driver_dir: cannot use " + dir + "/gone"));
  // The flag wins over the file.
  auto flag_wins = ResolveAgentConfig(file, "/data", {0, dir, ""});
  ASSERT_TRUE(flag_wins.ok()) << flag_wins.status().ToString();
  EXPECT_EQ(flag_wins->exec.gpu_driver_dir, dir);
  // A bad flag is named as the flag.
  auto bad_flag = ResolveAgentConfig(file, "/data", {0, file, ""});
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_EQ(bad_flag.status().message(), "--gpu-driver-dir: " + file + " is not a directory");
  std::filesystem::remove_all(dir);
}

TEST(AgentConfig, SharingMode) {
  EXPECT_FALSE(ParseAgentConfig("{}", "/data")->exec.gpu_share_strict);
  EXPECT_TRUE(ParseAgentConfig("sharing_mode: strict", "/data")->exec.gpu_share_strict);
  EXPECT_FALSE(ParseAgentConfig("sharing_mode: work-conserving", "/data")->exec.gpu_share_strict);
  EXPECT_THAT(Error("sharing_mode: fair"),
              HasSubstr("sharing_mode (line 1): must be strict or work-conserving"));
}

TEST(AgentConfig, MpsControlAndDir) {
  auto c = ParseAgentConfig("mps_control: /usr/bin/nvidia-cuda-mps-control\nmps_dir: /run/mps\n",
                            "/data");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->mps_control, "/usr/bin/nvidia-cuda-mps-control");
  EXPECT_EQ(c->mps_dir, "/run/mps");
  EXPECT_EQ(ParseAgentConfig("{}", "/data")->mps_dir, "");  // DATA_DIR/mps
  EXPECT_THAT(Error("mps_dir: run/mps"), HasSubstr("mps_dir (line 1): must be an absolute path"));
  EXPECT_THAT(Error("mps_control: \"\""), HasSubstr("mps_control"));
  AgentConfigFlags flags;
  flags.mps_control = "/opt/mps-control";
  EXPECT_EQ(ResolveAgentConfig("", "/data", flags)->mps_control, "/opt/mps-control");
}

TEST(AgentConfig, GpushareLibrary) {
  EXPECT_EQ(ParseAgentConfig("{}", "/data")->exec.gpushare_library, "");
  EXPECT_EQ(ParseAgentConfig("gpushare_library: /opt/gpupool/lib/libgpushare.so", "/data")
                ->exec.gpushare_library,
            "/opt/gpupool/lib/libgpushare.so");
  EXPECT_THAT(Error("gpushare_library: lib/libgpushare.so"),
              HasSubstr("gpushare_library (line 1): must be an absolute path"));

  char tmpl[] = "/tmp/gpupool-agent-config-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string lib = dir + "/libgpushare.so";
  const std::string file = dir + "/agent.yaml";
  ASSERT_TRUE(WriteFileAtomic(lib, "elf").ok());
  ASSERT_TRUE(WriteFileAtomic(file, "gpushare_library: " + dir + "/gone.so\n").ok());
  EXPECT_TRUE(CheckGpushareLibraryPath(lib).ok());
  EXPECT_THAT(CheckGpushareLibraryPath(dir).message(), HasSubstr(dir + " is not a file"));
  EXPECT_THAT(CheckGpushareLibraryPath("libgpushare.so").message(),
              HasSubstr("must be an absolute path"));
  // Unnamed: left to the agent's default. Named in the file: checked, named
  // with the file and field; the flag wins and is named as the flag.
  EXPECT_EQ(ResolveAgentConfig("", "/data", {})->exec.gpushare_library, "");
  auto from_file = ResolveAgentConfig(file, "/data", {});
  ASSERT_FALSE(from_file.ok());
  EXPECT_THAT(from_file.status().message(),
              HasSubstr(file + ": gpushare_library: cannot use " + dir + "/gone.so"));
  auto flag_wins = ResolveAgentConfig(file, "/data", {0, "", lib});
  ASSERT_TRUE(flag_wins.ok()) << flag_wins.status().ToString();
  EXPECT_EQ(flag_wins->exec.gpushare_library, lib);
  auto bad_flag = ResolveAgentConfig("", "/data", {0, "", dir});
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_EQ(bad_flag.status().message(), "--gpushare-library: " + dir + " is not a file");
  std::filesystem::remove_all(dir);
}

TEST(AgentConfig, GpushareLibraryNextToTheBinary) {
  EXPECT_EQ(GpushareLibraryNextTo("/opt/gpupool/bin/gpupool"), "/opt/gpupool/lib/libgpushare.so");
  EXPECT_EQ(GpushareLibraryNextTo("/work/main/build/bin/gpupool"),
            "/work/main/build/lib/libgpushare.so");
  EXPECT_EQ(GpushareLibraryNextTo("/usr/bin/gpupool"), "/usr/lib/libgpushare.so");
  // This test's own binary (build/tests/agent_test): build/lib, where the build puts it.
  EXPECT_THAT(DefaultGpushareLibrary(), testing::EndsWith("/lib/libgpushare.so"));

  exec::ExecConfig config;
  (void)ResolveGpuSharing(config);  // an empty one: the default
  EXPECT_EQ(config.gpushare_library, DefaultGpushareLibrary());
  config.gpushare_library = "/nonexistent/libgpushare.so";
  auto missing = ResolveGpuSharing(config);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("GPU sharing is not available on this node: cannot use "
                        "/nonexistent/libgpushare.so: No such file or directory; tasks holding a "
                        "share of a GPU will fail to start"));
  char tmpl[] = "/tmp/gpupool-agent-config-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  config.gpushare_library = std::string(tmpl) + "/libgpushare.so";
  ASSERT_TRUE(WriteFileAtomic(config.gpushare_library, "elf").ok());
  auto found = ResolveGpuSharing(config);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  EXPECT_EQ(*found, "GPU sharing: shares of a GPU are held to their memory cap by " +
                        config.gpushare_library);
  std::filesystem::remove_all(tmpl);
}

TEST(AgentConfig, NvmlLibraryPath) {
  // --nvml-library wins; then the driver directory's; else OpenNvml's own default.
  EXPECT_EQ(NvmlLibraryPath("/x/libnvidia-ml.so.1", "/opt/nv"), "/x/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibraryPath("", "/opt/nv"), "/opt/nv/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibraryPath("", "/opt/nv/"), "/opt/nv/libnvidia-ml.so.1");
  EXPECT_EQ(NvmlLibraryPath("", ""), "");
}

TEST(AgentConfig, PolicyErrorsNameTheLineAndField) {
  auto c = ParseAgentConfig("executors: [sandbox]\npolicy:\n  gpus: [0]\n  reclaim_grace: soon\n",
                            "/data");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("policy.reclaim_grace (line 4):"));
  // A policy file: its fields at the top, or a whole agent config.
  auto p =
      ParsePolicyText("gpus: [0]\nwindows:\n  weekly:\n    - {days: [mon], from: \"25:00\"}\n");
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("policy.windows.weekly[0].from (line 4):"));
  auto ok = ParsePolicyText("users: {allow: [alice]}");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->allow_users, std::set<std::string>{"alice"});
  auto whole = ParsePolicyText("executors: [sandbox]\npolicy: {max_runtime: 2h}\n");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->max_runtime_ms, 7'200'000);
  EXPECT_FALSE(ParsePolicyText("").ok());
}

TEST(AgentConfig, TheExamplesParse) {
  auto config = LoadAgentConfig(GPUPOOL_EXAMPLES_DIR "/agent.yaml", "/data");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->policy.reclaim_grace_ms, 30'000);
  auto text = ReadFile(GPUPOOL_EXAMPLES_DIR "/policy-nights.yaml");
  ASSERT_TRUE(text.ok());
  auto policy = ParsePolicyText(*text);
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  EXPECT_EQ(policy->gpus, std::vector<std::string>{"1"});
  EXPECT_EQ(policy->windows.size(), 2u);
  EXPECT_EQ(policy->allow_groups, (std::set<std::string>{"nlp", "vision"}));
}

TEST(AgentConfig, LoadNamesTheFile) {
  auto c = LoadAgentConfig("/nonexistent/agent.yaml", "/data");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("/nonexistent/agent.yaml"));
}

}  // namespace
}  // namespace gpupool::agent
