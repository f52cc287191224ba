#include "agent/agent_config.h"

#include <arpa/inet.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/units.h"
#include "exec/gpu_share.h"
#include "model/job.h"
#include "model/yaml.h"

namespace gpupool::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTopFields[] = {
    "executors", "sandbox",        "gpu_driver_dir", "gpushare_library", "sharing_mode",
    "images",    "docker",         "podman",         "limits",           "policy",
    "owner",     "advertise_addr", "mps_control",    "mps_dir"};
constexpr const char* kSandboxFields[] = {"uids",
                                          "host_paths",
                                          "devices_dir",
                                          "bwrap",
                                          "ldconfig",
                                          "pasta",
                                          "blocked_networks",
                                          "gang_ports",
                                          "gang_ports_per_rank"};
constexpr const char* kImagesFields[] = {"cache_dir", "cache_size", "max_image_size", "skopeo",
                                         "umoci"};
constexpr const char* kEngineFields[] = {"command", "gpus", "extra_args"};
constexpr const char* kLimitsFields[] = {"cgroup", "pids", "memory", "cpus", "disk", "memory_poll"};
constexpr int64_t kMaxPids = 4'194'304;  // the kernel's pid_max ceiling
constexpr size_t kMaxListItems = 256;

Result<std::string> AbsolutePath(const json& v, const std::string& path) {
  GP_ASSIGN_OR_RETURN(std::string p, NonEmptyString(v, path));
  if (p[0] != '/') return FieldError(path, "must be an absolute path, got " + QuoteForError(p));
  return p;
}

Result<std::vector<std::string>> TextList(const json& v, const std::string& path) {
  return StringList(v, path, kMaxListItems);
}

Result<int64_t> Bytes(const json& v, const std::string& path) {
  if (!v.is_string()) {
    return FieldError(path, "must be a size such as \"16GiB\", got " + DescribeValue(v));
  }
  auto b = ParseBytes(v.get_ref<const std::string&>());
  if (!b.ok()) return b.status().WithContext(path);
  return *b;
}

// "190000-190999": the first uid and how many.
Status ParseUids(const json& v, exec::ExecConfig& c) {
  const std::string path = "sandbox.uids";
  if (!v.is_string()) {
    return FieldError(path, "must be a range such as \"190000-190999\", got " + DescribeValue(v));
  }
  const std::string& text = v.get_ref<const std::string&>();
  size_t dash = text.find('-');
  int64_t first = -1, last = -1;
  auto num = [](std::string_view s, int64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  };
  if (dash == std::string::npos || !num(std::string_view(text).substr(0, dash), first) ||
      !num(std::string_view(text).substr(dash + 1), last)) {
    return FieldError(path,
                      "must be a range such as \"190000-190999\", got " + QuoteForError(text));
  }
  if (first < 1000 || last < first || last > 0x7fffffff - 1) {
    return FieldError(path,
                      "must be FIRST-LAST with 1000 <= FIRST <= LAST (uids below 1000 "
                      "belong to the system), got " +
                          QuoteForError(text));
  }
  c.first_uid = static_cast<int>(first);
  c.uid_count = static_cast<int>(last - first + 1);
  return Status::Ok();
}

// "61000-61999": the host ports gang ranks are reached on.
Status ParseGangPorts(const json& v, exec::SandboxOptions& o) {
  const std::string path = "sandbox.gang_ports";
  std::string text = v.is_string() ? v.get<std::string>() : "";
  size_t dash = text.find('-');
  int64_t first = -1, last = -1;
  auto num = [](std::string_view s, int64_t& out) {
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
  };
  if (dash == std::string::npos || !num(std::string_view(text).substr(0, dash), first) ||
      !num(std::string_view(text).substr(dash + 1), last) || first < 1024 || last < first ||
      last > 65535) {
    return FieldError(path,
                      "must be a port range FIRST-LAST within 1024-65535 such as "
                      "\"61000-61999\", got " +
                          DescribeValue(v));
  }
  o.gang_ports = {static_cast<int>(first), static_cast<int>(last - first + 1)};
  return Status::Ok();
}

Status ParseEngine(const json& v, const std::string& name, exec::ContainerOptions& o) {
  if (!v.is_object()) return FieldError(name, "expected a mapping, got " + DescribeValue(v));
  GP_RETURN_IF_ERROR(CheckKnownFields(v, name + ".", kEngineFields));
  if (const json* f = FieldOrNull(v, "command")) {
    GP_ASSIGN_OR_RETURN(o.engine, NonEmptyString(*f, name + ".command"));
  }
  if (const json* f = FieldOrNull(v, "gpus")) {
    GP_ASSIGN_OR_RETURN(o.gpu_mode, NonEmptyString(*f, name + ".gpus"));
    if (o.gpu_mode != "cdi" && o.gpu_mode != "gpus") {
      return FieldError(name + ".gpus", "must be cdi or gpus, got " + QuoteForError(o.gpu_mode));
    }
  }
  if (const json* f = FieldOrNull(v, "extra_args")) {
    GP_ASSIGN_OR_RETURN(o.extra_args, TextList(*f, name + ".extra_args"));
  }
  return Status::Ok();
}

Status ParseLimits(const json& v, exec::ExecConfig& c) {
  if (!v.is_object()) return FieldError("limits", "expected a mapping, got " + DescribeValue(v));
  GP_RETURN_IF_ERROR(CheckKnownFields(v, "limits.", kLimitsFields));
  if (const json* f = FieldOrNull(v, "cgroup")) {
    GP_ASSIGN_OR_RETURN(c.cgroup, NonEmptyString(*f, "limits.cgroup"));
    if (c.cgroup != "auto" && c.cgroup != "none" && c.cgroup[0] != '/') {
      return FieldError("limits.cgroup",
                        "must be auto, none or an absolute path, got " + QuoteForError(c.cgroup));
    }
  }
  if (const json* f = FieldOrNull(v, "pids")) {
    if (!f->is_number_integer() || f->get<int64_t>() < 1 || f->get<int64_t>() > kMaxPids) {
      return FieldError("limits.pids", "must be a whole number from 1 to " +
                                           std::to_string(kMaxPids) + ", got " + DescribeValue(*f));
    }
    c.defaults.pids = f->get<int64_t>();
  }
  if (const json* f = FieldOrNull(v, "memory")) {
    GP_ASSIGN_OR_RETURN(c.defaults.memory_bytes, Bytes(*f, "limits.memory"));
  }
  if (const json* f = FieldOrNull(v, "disk")) {
    GP_ASSIGN_OR_RETURN(c.defaults.disk_bytes, Bytes(*f, "limits.disk"));
  }
  if (const json* f = FieldOrNull(v, "cpus")) {
    int64_t milli = 0;
    if (f->is_string()) {
      auto m = ParseMilli(f->get_ref<const std::string&>());
      if (!m.ok()) return m.status().WithContext("limits.cpus");
      milli = *m;
    } else if (f->is_number() && f->get<double>() >= 0 && f->get<double>() <= 1024) {
      milli = static_cast<int64_t>(f->get<double>() * 1000 + 0.5);
    } else {
      return FieldError("limits.cpus", "must be a number of cores such as 4 or \"1500m\", got " +
                                           DescribeValue(*f));
    }
    c.defaults.cpu_milli = milli;
  }
  if (const json* f = FieldOrNull(v, "memory_poll")) {
    if (!f->is_string()) {
      return FieldError("limits.memory_poll",
                        "must be a duration such as \"100ms\", got " + DescribeValue(*f));
    }
    auto ms = ParseDurationMs(f->get_ref<const std::string&>());
    if (!ms.ok()) return ms.status().WithContext("limits.memory_poll");
    if (*ms < 10 || *ms > 10'000) {
      return FieldError("limits.memory_poll",
                        "must be from 10ms to 10s, got " + FormatDurationMs(*ms));
    }
    c.memory_poll_ms = *ms;
  }
  return Status::Ok();
}

}  // namespace

AgentConfig DefaultAgentConfig(const std::string& data_dir) {
  AgentConfig config;
  config.exec.images.dir = data_dir + "/images";
  config.exec.podman.engine = "podman";
  return config;
}

namespace {

Result<AgentConfig> AgentConfigFromJson(const json& j, const std::string& data_dir) {
  if (!j.is_object()) return FieldError("", "expected a mapping, got " + DescribeValue(j));
  GP_RETURN_IF_ERROR(CheckKnownFields(j, "", kTopFields));
  AgentConfig config = DefaultAgentConfig(data_dir);
  exec::ExecConfig& c = config.exec;
  if (const json* v = FieldOrNull(j, "executors")) {
    GP_ASSIGN_OR_RETURN(c.executors, TextList(*v, "executors"));
    if (c.executors.empty()) return FieldError("executors", "must name at least one executor");
    for (size_t i = 0; i < c.executors.size(); ++i) {
      const std::string& name = c.executors[i];
      std::string path = "executors[" + std::to_string(i) + "]";
      if (std::find(std::begin(kExecutorNames), std::end(kExecutorNames), name) ==
          std::end(kExecutorNames)) {
        return FieldError(path, "unknown executor " + QuoteForError(name) +
                                    " (one of: sandbox, process, docker, podman)");
      }
      if (std::find(c.executors.begin(), c.executors.begin() + static_cast<std::ptrdiff_t>(i),
                    name) != c.executors.begin() + static_cast<std::ptrdiff_t>(i)) {
        return FieldError(path, QuoteForError(name) + " is listed twice");
      }
    }
  }
  if (const json* v = FieldOrNull(j, "sandbox")) {
    if (!v->is_object())
      return FieldError("sandbox", "expected a mapping, got " + DescribeValue(*v));
    GP_RETURN_IF_ERROR(CheckKnownFields(*v, "sandbox.", kSandboxFields));
    if (const json* f = FieldOrNull(*v, "uids")) GP_RETURN_IF_ERROR(ParseUids(*f, c));
    if (const json* f = FieldOrNull(*v, "host_paths")) {
      GP_ASSIGN_OR_RETURN(c.sandbox.host_paths, TextList(*f, "sandbox.host_paths"));
      for (size_t i = 0; i < c.sandbox.host_paths.size(); ++i) {
        GP_RETURN_IF_ERROR(
            AbsolutePath(c.sandbox.host_paths[i], "sandbox.host_paths[" + std::to_string(i) + "]")
                .status());
      }
    }
    if (const json* f = FieldOrNull(*v, "devices_dir")) {
      GP_ASSIGN_OR_RETURN(c.sandbox.devices_dir, AbsolutePath(*f, "sandbox.devices_dir"));
    }
    if (const json* f = FieldOrNull(*v, "bwrap")) {
      GP_ASSIGN_OR_RETURN(c.sandbox.bwrap, NonEmptyString(*f, "sandbox.bwrap"));
    }
    if (const json* f = FieldOrNull(*v, "ldconfig")) {
      GP_ASSIGN_OR_RETURN(c.sandbox.ldconfig, NonEmptyString(*f, "sandbox.ldconfig"));
    }
    if (const json* f = FieldOrNull(*v, "pasta")) {
      GP_ASSIGN_OR_RETURN(c.sandbox.pasta, NonEmptyString(*f, "sandbox.pasta"));
    }
    if (const json* f = FieldOrNull(*v, "blocked_networks")) {
      GP_ASSIGN_OR_RETURN(auto list, TextList(*f, "sandbox.blocked_networks"));
      c.sandbox.blocked_networks.clear();
      for (size_t i = 0; i < list.size(); ++i) {
        auto p = exec::ParseIpPrefix(list[i]);
        if (!p.ok()) {
          return FieldError("sandbox.blocked_networks[" + std::to_string(i) + "]",
                            p.status().message());
        }
        c.sandbox.blocked_networks.push_back(*p);
      }
    }
    if (const json* f = FieldOrNull(*v, "gang_ports")) {
      GP_RETURN_IF_ERROR(ParseGangPorts(*f, c.sandbox));
    }
    if (const json* f = FieldOrNull(*v, "gang_ports_per_rank")) {
      if (!f->is_number_integer() || f->get<int64_t>() < 2 || f->get<int64_t>() > 4096) {
        return FieldError("sandbox.gang_ports_per_rank",
                          "must be an integer from 2 to 4096, got " + DescribeValue(*f));
      }
      c.sandbox.gang_ports_per_rank = f->get<int>();
    }
    if (c.sandbox.gang_ports_per_rank > c.sandbox.gang_ports.count) {
      return FieldError("sandbox.gang_ports",
                        "holds fewer ports than one rank takes (gang_ports_per_rank " +
                            std::to_string(c.sandbox.gang_ports_per_rank) + ")");
    }
  }
  if (const json* v = FieldOrNull(j, "gpu_driver_dir")) {
    // Whether it is a directory is checked when the agent starts (CheckGpuDriverDir).
    GP_ASSIGN_OR_RETURN(c.gpu_driver_dir, AbsolutePath(*v, "gpu_driver_dir"));
  }
  if (const json* v = FieldOrNull(j, "gpushare_library")) {
    // Whether it is a file is checked when the agent starts (CheckGpushareLibraryPath).
    GP_ASSIGN_OR_RETURN(c.gpushare_library, AbsolutePath(*v, "gpushare_library"));
  }
  if (const json* v = FieldOrNull(j, "sharing_mode")) {
    if (!v->is_string() || (*v != "strict" && *v != "work-conserving")) {
      return FieldError("sharing_mode",
                        "must be strict or work-conserving, got " + DescribeValue(*v));
    }
    c.gpu_share_strict = *v == "strict";
  }
  if (const json* v = FieldOrNull(j, "images")) {
    if (!v->is_object())
      return FieldError("images", "expected a mapping, got " + DescribeValue(*v));
    GP_RETURN_IF_ERROR(CheckKnownFields(*v, "images.", kImagesFields));
    if (const json* f = FieldOrNull(*v, "cache_dir")) {
      GP_ASSIGN_OR_RETURN(c.images.dir, AbsolutePath(*f, "images.cache_dir"));
    }
    if (const json* f = FieldOrNull(*v, "cache_size")) {
      GP_ASSIGN_OR_RETURN(c.images.max_bytes, Bytes(*f, "images.cache_size"));
    }
    if (const json* f = FieldOrNull(*v, "max_image_size")) {
      GP_ASSIGN_OR_RETURN(c.images.max_image_bytes, Bytes(*f, "images.max_image_size"));
      if (c.images.max_image_bytes <= 0)
        return FieldError("images.max_image_size", "must be more than 0");
    }
    if (const json* f = FieldOrNull(*v, "skopeo")) {
      GP_ASSIGN_OR_RETURN(c.images.skopeo, NonEmptyString(*f, "images.skopeo"));
    }
    if (const json* f = FieldOrNull(*v, "umoci")) {
      GP_ASSIGN_OR_RETURN(c.images.umoci, NonEmptyString(*f, "images.umoci"));
    }
  }
  if (const json* v = FieldOrNull(j, "docker"))
    GP_RETURN_IF_ERROR(ParseEngine(*v, "docker", c.docker));
  if (const json* v = FieldOrNull(j, "podman"))
    GP_RETURN_IF_ERROR(ParseEngine(*v, "podman", c.podman));
  if (const json* v = FieldOrNull(j, "limits")) GP_RETURN_IF_ERROR(ParseLimits(*v, c));
  if (const json* v = FieldOrNull(j, "policy")) {
    GP_ASSIGN_OR_RETURN(config.policy, ParseProviderPolicy(*v));
  }
  if (const json* v = FieldOrNull(j, "owner")) {
    if (v->is_number_integer() && v->get<int64_t>() >= 0) {
      config.owner = std::to_string(v->get<int64_t>());
    } else {
      GP_ASSIGN_OR_RETURN(config.owner, NonEmptyString(*v, "owner"));
    }
  }
  if (const json* v = FieldOrNull(j, "mps_control")) {
    // Whether it runs is checked when a policy asks for MPS (FindMpsControl).
    GP_ASSIGN_OR_RETURN(config.mps_control, NonEmptyString(*v, "mps_control"));
  }
  if (const json* v = FieldOrNull(j, "mps_dir")) {
    GP_ASSIGN_OR_RETURN(config.mps_dir, AbsolutePath(*v, "mps_dir"));
  }
  if (const json* v = FieldOrNull(j, "advertise_addr")) {
    GP_ASSIGN_OR_RETURN(config.advertise_addr, NonEmptyString(*v, "advertise_addr"));
    if (Status s = CheckAdvertiseAddr(config.advertise_addr); !s.ok()) {
      return FieldError("advertise_addr", s.message());
    }
  }
  return config;
}

YamlOptions DocumentOptions(const std::string& what) {
  YamlOptions options;
  options.what = what;
  options.max_bytes = 1 << 20;
  options.empty_message = "empty " + what + "; expected a mapping";
  return options;
}

}  // namespace

Status CheckAdvertiseAddr(std::string_view addr) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("must be a host name or an IP address (" + why + "), got " +
                                   QuoteForError(std::string(addr)));
  };
  if (addr.empty() || addr.size() > 253) return bad("1-253 characters");
  bool chars_ok = std::all_of(addr.begin(), addr.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == ':' || c == '_' || c == '%';
  });
  if (!chars_ok)
    return bad("letters, digits, '.', '-', ':', '_' and '%' only; no brackets or port");
  if (addr.front() == '-' || addr.front() == '.') return bad("it may not start with '-' or '.'");
  if (addr.find(':') != std::string_view::npos) {
    // IPv6, maybe with a zone ("fe80::1%wg0").
    std::string ip(addr.substr(0, addr.find('%')));
    in6_addr parsed;
    if (::inet_pton(AF_INET6, ip.c_str(), &parsed) != 1) return bad("not an IPv6 address");
  } else if (addr.find('%') != std::string_view::npos) {
    return bad("'%' only in an IPv6 address's zone");
  }
  return Status::Ok();
}

Status CheckGpuDriverDir(const std::string& dir) {
  struct stat st {};
  if (dir.empty() || dir.front() != '/') {
    return Status::InvalidArgument("must be an absolute path, got " + QuoteForError(dir));
  }
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::InvalidArgument("cannot use " + dir + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(dir + " is not a directory");
  return Status::Ok();
}

Status CheckGpushareLibraryPath(const std::string& path) {
  struct stat st {};
  if (path.empty() || path.front() != '/') {
    return Status::InvalidArgument("must be an absolute path, got " + QuoteForError(path));
  }
  if (::stat(path.c_str(), &st) != 0) {
    return Status::InvalidArgument("cannot use " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a file");
  return Status::Ok();
}

std::string GpushareLibraryNextTo(const std::string& exe) {
  fs::path bin_dir = fs::path(exe).parent_path();
  return (bin_dir.parent_path() / "lib" / "libgpushare.so").lexically_normal().string();
}

std::string DefaultGpushareLibrary() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return "";
  return GpushareLibraryNextTo(exe.string());
}

Result<std::string> ResolveGpuSharing(exec::ExecConfig& config) {
  std::string& library = config.gpushare_library;
  if (library.empty()) library = DefaultGpushareLibrary();
  if (Status s = exec::CheckGpushareLibrary(library); !s.ok()) {
    return Status::FailedPrecondition(s.message() +
                                      "; tasks holding a share of a GPU will fail to start "
                                      "(--gpushare-library names the library)");
  }
  return "GPU sharing: shares of a GPU are held to their memory cap by " + library;
}

std::string NvmlLibraryPath(const std::string& nvml_library, const std::string& gpu_driver_dir) {
  if (!nvml_library.empty()) return nvml_library;
  if (gpu_driver_dir.empty()) return "";
  return gpu_driver_dir + (gpu_driver_dir.back() == '/' ? "" : "/") + "libnvidia-ml.so.1";
}

Result<AgentConfig> ParseAgentConfig(std::string_view text, const std::string& data_dir) {
  YamlLines lines;
  GP_ASSIGN_OR_RETURN(json j, ParseYamlDocument(text, DocumentOptions("agent config"), &lines));
  auto config = AgentConfigFromJson(j, data_dir);
  if (!config.ok()) return WithLine(config.status(), lines);
  return config;
}

Result<ProviderPolicy> ParsePolicyText(std::string_view text) {
  YamlLines lines;
  GP_ASSIGN_OR_RETURN(json j, ParseYamlDocument(text, DocumentOptions("policy"), &lines));
  if (j.is_object() && j.contains("policy")) {
    GP_ASSIGN_OR_RETURN(AgentConfig config, ParseAgentConfig(text, "/"));
    return config.policy;
  }
  // The policy's errors name "policy.<field>"; here the fields are at the top.
  YamlLines under_policy;
  for (const auto& [path, line] : lines) under_policy["policy." + path] = line;
  auto policy = ParseProviderPolicy(j);
  if (!policy.ok()) return WithLine(policy.status(), under_policy);
  return policy;
}

Result<AgentConfig> LoadAgentConfig(const std::string& path, const std::string& data_dir) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status().WithContext(path);
  auto config = ParseAgentConfig(*text, data_dir);
  if (!config.ok()) return config.status().WithContext(path);
  return config;
}

Result<AgentConfig> ResolveAgentConfig(const std::string& path, const std::string& data_dir,
                                       const AgentConfigFlags& flags) {
  AgentConfig config = DefaultAgentConfig(data_dir);
  if (!path.empty()) {
    GP_ASSIGN_OR_RETURN(config, LoadAgentConfig(path, data_dir));
  }
  if (flags.max_image_bytes > 0) config.exec.images.max_image_bytes = flags.max_image_bytes;
  std::string& driver_dir = config.exec.gpu_driver_dir;
  if (!flags.gpu_driver_dir.empty()) driver_dir = flags.gpu_driver_dir;
  if (!driver_dir.empty()) {
    if (Status s = CheckGpuDriverDir(driver_dir); !s.ok()) {
      return s.WithContext(flags.gpu_driver_dir.empty() ? path + ": gpu_driver_dir"
                                                        : "--gpu-driver-dir");
    }
  }
  if (!flags.mps_control.empty()) config.mps_control = flags.mps_control;
  std::string& library = config.exec.gpushare_library;
  if (!flags.gpushare_library.empty()) library = flags.gpushare_library;
  if (!library.empty()) {
    if (Status s = CheckGpushareLibraryPath(library); !s.ok()) {
      return s.WithContext(flags.gpushare_library.empty() ? path + ": gpushare_library"
                                                          : "--gpushare-library");
    }
  }
  return config;
}

}  // namespace gpupool::agent
