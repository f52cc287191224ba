#include "exec/driver_files.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "common/files.h"
#include "exec/subprocess.h"

namespace gpupool::exec {
namespace {

// The libraries bound into images, by the name before ".so": libnvidia-
// container's "utility", "compute" and "video" lists (nvc_info.c) without
// libvdpau_nvidia (a display API that lives in a vdpau/ subdirectory).
constexpr std::string_view kDriverLibStems[] = {
    // utility
    "libnvidia-ml",
    "libnvidia-cfg",
    "libnvidia-nscq",
    // compute
    "libcuda",
    "libcudadebugger",
    "libnvidia-opencl",
    "libnvidia-gpucomp",
    "libnvidia-ptxjitcompiler",
    "libnvidia-fatbinaryloader",
    "libnvidia-allocator",
    "libnvidia-compiler",
    "libnvidia-pkcs11",
    "libnvidia-pkcs11-openssl3",
    "libnvidia-nvvm",
    "libnvidia-tileiras",
    // video
    "libnvidia-encode",
    "libnvidia-opticalflow",
    "libnvcuvid",
};

constexpr std::string_view kDriverBins[] = {"nvidia-smi", "nvidia-cuda-mps-control"};

constexpr std::string_view kControlDevices[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                "nvidia-modeset"};

constexpr int64_t kLdconfigTimeoutMs = 10'000;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// "libcuda.so.1" -> true for a known stem and a version of digits and dots;
// "libcuda.so" (the development symlink) and unknown libraries -> false.
bool IsDriverSoname(std::string_view name) {
  size_t so = name.find(".so.");
  if (so == std::string_view::npos) return false;
  std::string_view stem = name.substr(0, so);
  std::string_view version = name.substr(so + 4);
  if (version.empty() || version.front() == '.' || version.back() == '.') return false;
  if (!std::all_of(version.begin(), version.end(),
                   [](char c) { return (c >= '0' && c <= '9') || c == '.'; })) {
    return false;
  }
  return std::ranges::find(kDriverLibStems, stem) != std::end(kDriverLibStems);
}

// Whether the comma-separated ldconfig flags ("libc6,x86-64, OS ABI: Linux
// 3.2.0") include `abi` as one of their words.
bool FlagsName(std::string_view flags, std::string_view abi) {
  while (!flags.empty()) {
    size_t comma = flags.find(',');
    if (Trim(flags.substr(0, comma)) == abi) return true;
    if (comma == std::string_view::npos) break;
    flags.remove_prefix(comma + 1);
  }
  return false;
}

struct LdconfigEntry {
  std::string_view name;
  std::string_view flags;
  std::string_view path;
};

// "\tNAME (FLAGS) => PATH"; false for any other line.
bool ParseEntry(std::string_view line, LdconfigEntry* entry) {
  line = Trim(line);
  size_t arrow = line.find(" => ");
  if (arrow == std::string_view::npos) return false;
  std::string_view left = Trim(line.substr(0, arrow));
  size_t open = left.find(" (");
  if (open == std::string_view::npos || left.back() != ')') return false;
  entry->name = left.substr(0, open);
  entry->flags = left.substr(open + 2, left.size() - open - 3);
  entry->path = Trim(line.substr(arrow + 4));
  return !entry->name.empty() && !entry->path.empty() && entry->path.front() == '/';
}

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

std::string JoinPath(std::string_view dir, std::string_view name) {
  std::string out(dir);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

std::vector<DriverFile> FindBins(std::string_view path) {
  std::vector<DriverFile> found;
  for (std::string_view bin : kDriverBins) {
    std::string_view rest = path;
    while (true) {
      size_t colon = rest.find(':');
      std::string_view dir = rest.substr(0, colon);
      if (!dir.empty() && dir.front() == '/') {
        std::string candidate = JoinPath(dir, bin);
        if (IsExecutableFile(candidate)) {
          found.push_back({std::string(bin), std::move(candidate)});
          break;
        }
      }
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  return found;
}

}  // namespace

std::vector<std::string> GpuDeviceNodes(const std::string& dev_dir,
                                        const std::vector<int>& minors) {
  std::set<std::string> nodes;
  for (int minor : minors) {
    if (minor >= 0) nodes.insert(JoinPath(dev_dir, "nvidia" + std::to_string(minor)));
  }
  if (nodes.empty()) return {};
  for (std::string_view control : kControlDevices) {
    std::string node = JoinPath(dev_dir, control);
    if (PathExists(node)) nodes.insert(std::move(node));
  }
  return {nodes.begin(), nodes.end()};
}

namespace {

// The N of the "DeviceFileMinor: N" line of a capability's access file, or -1.
int DeviceFileMinor(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  constexpr std::string_view kKey = "DeviceFileMinor:";
  while (std::getline(in, line)) {
    if (!line.starts_with(kKey)) continue;
    std::string_view v = Trim(std::string_view(line).substr(kKey.size()));
    int n = -1;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < 0 || n >= (1 << 20)) return -1;
    return n;
  }
  return -1;
}

}  // namespace

std::vector<std::string> MigCapabilityDevices(const std::string& proc_root,
                                              const MigInstance& mig) {
  std::vector<std::string> out;
  if (mig.minor < 0 || mig.gpu_instance < 0) return out;
  std::string gi =
      JoinPath(proc_root, "driver/nvidia/capabilities/gpu" + std::to_string(mig.minor) + "/mig/gi" +
                              std::to_string(mig.gpu_instance));
  std::vector<std::string> access = {JoinPath(gi, "access")};
  if (mig.compute_instance >= 0) {
    access.push_back(JoinPath(gi, "ci" + std::to_string(mig.compute_instance) + "/access"));
  }
  for (const std::string& file : access) {
    int n = DeviceFileMinor(file);
    if (n >= 0) out.push_back("nvidia-caps/nvidia-cap" + std::to_string(n));
  }
  return out;
}

std::string_view NativeLdconfigAbi() {
#if defined(__x86_64__)
  return "x86-64";
#elif defined(__aarch64__)
  return "AArch64";
#else
  return "";
#endif
}

std::vector<DriverFile> ParseLdconfigDriverLibs(std::string_view output, std::string_view abi) {
  std::vector<DriverFile> libs;
  if (abi.empty()) return libs;
  std::set<std::string_view> seen;
  while (!output.empty()) {
    size_t eol = output.find('\n');
    std::string_view line = output.substr(0, eol);
    output.remove_prefix(eol == std::string_view::npos ? output.size() : eol + 1);
    LdconfigEntry e;
    if (!ParseEntry(line, &e) || !FlagsName(e.flags, abi) || !IsDriverSoname(e.name)) continue;
    if (!seen.insert(e.name).second) continue;
    libs.push_back({std::string(e.name), std::string(e.path)});
  }
  return libs;
}

Result<DriverFiles> FindDriverFiles(const std::string& ldconfig_cmd, const std::string& path) {
  std::string output;
  auto run = RunCommand(
      {ldconfig_cmd, "-p"},
      [&](std::string_view line) {
        output.append(line);
        output += '\n';
      },
      kLdconfigTimeoutMs);
  if (!run.ok()) {
    return Status::Unavailable("cannot list the driver libraries: " + run.status().message());
  }
  if (!run->ok()) {
    std::string why = run->timed_out     ? "timed out"
                      : run->signal != 0 ? "killed by signal " + std::to_string(run->signal)
                                         : "exit status " + std::to_string(run->exit_code);
    std::string detail = LastErrorLine(run->stderr_tail);
    if (!detail.empty()) why += ": " + detail;
    return Status::Unavailable("cannot list the driver libraries: " + ldconfig_cmd +
                               " -p failed (" + why + ")");
  }
  DriverFiles files;
  files.libs = ParseLdconfigDriverLibs(output);
  files.bins = FindBins(path);
  return files;
}

Result<DriverFiles> DriverFilesInDir(const std::string& dir) {
  if (dir.empty() || dir.front() != '/') {
    return Status::InvalidArgument("the GPU driver directory must be an absolute path, got \"" +
                                   dir + "\"");
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return Status::Unavailable("cannot read the GPU driver directory " + dir + ": " +
                               std::strerror(errno));
  }
  DriverFiles files;
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (!IsDriverSoname(name)) continue;
    std::string path = JoinPath(dir, name);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      files.libs.push_back({std::move(name), std::move(path)});
    }
  }
  ::closedir(d);
  std::sort(files.libs.begin(), files.libs.end(),
            [](const DriverFile& a, const DriverFile& b) { return a.name < b.name; });
  files.bins = FindBins(dir);
  return files;
}

}  // namespace gpupool::exec
