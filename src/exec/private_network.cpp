#include "exec/private_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <ifaddrs.h>
#include <linux/nsfs.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <utility>

#include "common/files.h"
#include "exec/launch.h"
#include "exec/limits.h"
#include "exec/local_executor.h"
#include "exec/port_forwarder.h"

namespace gpupool::exec {
namespace {

using Clock = std::chrono::steady_clock;

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSignal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}

// Keeps the first `length` bits of the address.
void MaskHostBits(IpPrefix& p) {
  size_t bytes = p.family == AF_INET ? 4 : 16;
  for (size_t i = 0; i < bytes; ++i) {
    int keep = std::clamp(p.length - static_cast<int>(i) * 8, 0, 8);
    p.addr[i] &= static_cast<unsigned char>(0xff00 >> keep);
  }
}

// Whether the table read from /proc/self/net/route (IPv4) or
// /proc/self/net/ipv6_route has a usable default route.
bool HasDefaultRoute4(const std::string& table) {
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string iface, dest, gateway, flags, refcnt, use, metric, mask;
    if (!(f >> iface >> dest >> gateway >> flags >> refcnt >> use >> metric >> mask)) continue;
    unsigned long fl = std::strtoul(flags.c_str(), nullptr, 16);
    if (dest == "00000000" && mask == "00000000" && (fl & RTF_UP) && !(fl & RTF_REJECT)) {
      return true;
    }
  }
  return false;
}

bool HasDefaultRoute6(const std::string& table) {
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string dest, plen, src, splen, next, metric, refcnt, use, flags, dev;
    if (!(f >> dest >> plen >> src >> splen >> next >> metric >> refcnt >> use >> flags >> dev)) {
      continue;
    }
    unsigned long fl = std::strtoul(flags.c_str(), nullptr, 16);
    if (dest == std::string(32, '0') && plen == "00" && dev != "lo" && (fl & RTF_UP) &&
        !(fl & RTF_REJECT)) {
      return true;
    }
  }
  return false;
}

DefaultRoutes ReadDefaultRoutes() {
  DefaultRoutes r;
  r.v4 = HasDefaultRoute4(ReadFile("/proc/self/net/route").value_or(""));
  r.v6 = HasDefaultRoute6(ReadFile("/proc/self/net/ipv6_route").value_or(""));
  return r;
}

// A "prohibit" route for `p` in the calling process's network namespace.
// Returns 0 or an errno.
int AddProhibitRoute(int nl, const IpPrefix& p, uint32_t seq) {
  struct {
    nlmsghdr nh;
    rtmsg rt;
    char attrs[64];
  } req{};
  size_t addr_len = p.family == AF_INET ? 4 : 16;
  req.nh.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  req.nh.nlmsg_type = RTM_NEWROUTE;
  req.nh.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
  req.nh.nlmsg_seq = seq;
  req.rt.rtm_family = static_cast<unsigned char>(p.family);
  req.rt.rtm_dst_len = static_cast<unsigned char>(p.length);
  req.rt.rtm_table = RT_TABLE_MAIN;
  req.rt.rtm_protocol = RTPROT_STATIC;
  req.rt.rtm_scope = RT_SCOPE_UNIVERSE;
  req.rt.rtm_type = RTN_PROHIBIT;
  auto* rta =
      reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.nh.nlmsg_len));
  rta->rta_type = RTA_DST;
  rta->rta_len = static_cast<unsigned short>(RTA_LENGTH(addr_len));
  std::memcpy(RTA_DATA(rta), p.addr.data(), addr_len);
  req.nh.nlmsg_len = NLMSG_ALIGN(req.nh.nlmsg_len) + RTA_ALIGN(rta->rta_len);
  if (::send(nl, &req, req.nh.nlmsg_len, 0) < 0) return errno;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(nl, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, static_cast<unsigned>(n));
         h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != seq || h->nlmsg_type != NLMSG_ERROR) continue;
      int err = -reinterpret_cast<nlmsgerr*>(NLMSG_DATA(h))->error;
      return err == EEXIST ? 0 : err;
    }
  }
}

// Exit codes of WaitForLoopback besides 0 (the loopback is up) and 1 (a
// failure, written to its err_fd).
constexpr int kSandboxGone = 2;

// A helper child's failure: what failed to `err_fd`, exit 1.
[[noreturn]] void FailChild(int err_fd, const std::string& what) {
  (void)!::write(err_fd, what.data(), what.size());
  _exit(1);
}

// Enters the user namespace that owns the job's network (which gives
// CAP_NET_ADMIN there) and the network namespace, or fails the child.
void EnterJobNetwork(int userns_fd, int netns_fd, int err_fd) {
  if (::setns(userns_fd, CLONE_NEWUSER) != 0) {
    FailChild(err_fd,
              std::string("cannot enter the job's user namespace: ") + std::strerror(errno));
  }
  if (::setns(netns_fd, CLONE_NEWNET) != 0) {
    FailChild(err_fd,
              std::string("cannot enter the job's network namespace: ") + std::strerror(errno));
  }
}

// The child that waits for bubblewrap's sandbox child to bring the
// namespace's loopback up (PrivateNetwork::Attach says why): it enters the
// user and network namespaces, as ConfigureNamespace does, and looks at
// lo's flags every millisecond. bubblewrap gives lo its address, then
// brings it up: up, its setup is done. Exits 0 then, kSandboxGone when
// `sandbox` is gone first; writes what failed to `err_fd` otherwise.
[[noreturn]] void WaitForLoopback(int userns_fd, int netns_fd, pid_t sandbox,
                                  Clock::time_point deadline, int err_fd) {
  auto fail = [&](const std::string& what) { FailChild(err_fd, what); };
  EnterJobNetwork(userns_fd, netns_fd, err_fd);
  // Any socket of the namespace answers for its interfaces.
  int sock = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) fail(std::string("socket: ") + std::strerror(errno));
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  while (true) {
    if (::ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) {
      fail(std::string("cannot read the flags of the job's loopback: ") + std::strerror(errno));
    }
    if (ifr.ifr_flags & IFF_UP) _exit(0);
    if (::kill(sandbox, 0) != 0 && errno == ESRCH) _exit(kSandboxGone);
    if (Clock::now() >= deadline) fail("bubblewrap did not bring the job's loopback up in time");
    ::usleep(1000);
  }
}

// Runs WaitForLoopback in a child and waits for it (it ends by its deadline).
Status AwaitLoopback(int userns_fd, int netns_fd, pid_t sandbox, Clock::time_point deadline) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  pid_t helper = ::fork();
  if (helper < 0) {
    int e = errno;
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return Status::Internal(std::string("fork: ") + std::strerror(e));
  }
  if (helper == 0) {
    ::close(err_pipe[0]);
    WaitForLoopback(userns_fd, netns_fd, sandbox, deadline, err_pipe[1]);
  }
  ::close(err_pipe[1]);
  int st = 0;
  while (::waitpid(helper, &st, 0) < 0 && errno == EINTR) {
  }
  char buf[512];
  ssize_t n = ::read(err_pipe[0], buf, sizeof buf);
  ::close(err_pipe[0]);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return Status::Ok();
  if (WIFEXITED(st) && WEXITSTATUS(st) == kSandboxGone) {
    return Status::Aborted("the sandbox ended before its loopback was up");
  }
  return Status::Unavailable(n > 0 ? std::string(buf, static_cast<size_t>(n))
                                   : "the helper that waits for the job's loopback failed");
}

// The child that configures the namespace: it enters the user namespace
// that owns the job's network (which gives it CAP_NET_ADMIN there) and the
// network namespace, waits for pasta's interface and routes, then adds
// the prohibit routes and the ephemeral port range. Writes what failed to
// `err_fd`; exits 0 when done.
[[noreturn]] void ConfigureNamespace(int userns_fd, int netns_fd, const DefaultRoutes& expect,
                                     const std::vector<IpPrefix>& blocked, PortRange forward,
                                     Clock::time_point deadline, int err_fd) {
  auto fail = [&](const std::string& what) { FailChild(err_fd, what); };
  EnterJobNetwork(userns_fd, netns_fd, err_fd);
  // pasta adds the IPv4 route, then the IPv6 one. One family may fail to
  // come up (an IPv6 route without a usable address): a second after the
  // first, the job starts with what there is.
  Clock::time_point first_seen{};
  while (true) {
    DefaultRoutes now = ReadDefaultRoutes();
    bool all = (now.v4 || !expect.v4) && (now.v6 || !expect.v6);
    if (all) break;
    auto t = Clock::now();
    if (now.any() && first_seen == Clock::time_point{}) first_seen = t;
    if (now.any() && t - first_seen > std::chrono::seconds(1)) break;
    if (t >= deadline) fail("pasta did not configure the job's network in time");
    ::usleep(5000);
  }
  int nl = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (nl < 0) fail(std::string("netlink: ") + std::strerror(errno));
  uint32_t seq = 1;
  for (const IpPrefix& p : blocked) {
    if (int err = AddProhibitRoute(nl, p, seq++); err != 0) {
      fail("cannot block " + FormatIpPrefix(p) + " in the job's network: " + std::strerror(err));
    }
  }
  ::close(nl);
  if (!forward.empty()) {
    // The first port is the master's: the kernel hands out the others.
    int lo = forward.count > 1 ? forward.first + 1 : forward.first;
    std::string range = std::to_string(lo) + " " + std::to_string(forward.last());
    int fd = ::open("/proc/sys/net/ipv4/ip_local_port_range", O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, range.data(), range.size()) != static_cast<ssize_t>(range.size())) {
      fail("cannot set the job's ephemeral port range to " + range + ": " + std::strerror(errno));
    }
    ::close(fd);
  }
  _exit(0);
}

// pasta's child side: its own /dev/net/tun when we are root, the task's
// account and cgroup, death with the shim. Never returns.
[[noreturn]] void ExecPasta(const std::vector<std::string>& argv, const PrivateNetworkPlan& plan,
                            pid_t parent, int log_fd, int keep_a, int keep_b) {
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::dup2(devnull, 0);
  ::dup2(log_fd >= 0 ? log_fd : devnull, 1);
  ::dup2(log_fd >= 0 ? log_fd : devnull, 2);
  auto fail = [](const char* what) {
    std::string msg =
        std::string("gpupool: cannot start pasta: ") + what + ": " + std::strerror(errno) + "\n";
    (void)!::write(2, msg.data(), msg.size());
    _exit(127);
  };
  if (!plan.cgroup_procs.empty()) {
    int fd = ::open(plan.cgroup_procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) fail("cannot join the job's cgroup");
    ::close(fd);
  }
  if (::geteuid() == 0) {
    // Debian ships /dev/net/tun as 0666; some machines make it root-only.
    // pasta, which runs unprivileged, gets a node of its own it may open.
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      fail("private mount namespace");
    }
    ::mkdir("/dev/net", 0755);
    if (::mount("tmpfs", "/dev/net", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=4k") != 0)
      fail("tmpfs on /dev/net");
    if (::mknod("/dev/net/tun", S_IFCHR | 0666, makedev(10, 200)) != 0 ||
        ::chmod("/dev/net/tun", 0666) != 0) {
      fail("/dev/net/tun");
    }
  }
  if (plan.gid >= 0) {
    gid_t gid = static_cast<gid_t>(plan.gid);
    if (::setgroups(1, &gid) != 0 || ::setresgid(gid, gid, gid) != 0) fail("setgid");
  }
  if (plan.uid >= 0) {
    uid_t uid = static_cast<uid_t>(plan.uid);
    if (::setresuid(uid, uid, uid) != 0) fail("setuid");
  }
  // Signals as a new program expects them: the shim ignores SIGPIPE and
  // blocks others, which an exec keeps, and this pasta takes an ignored
  // SIGPIPE for a failure ("Couldn't install signal handlers").
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Dies with the shim (set after the account changed: a change clears it).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(1);
  for (int fd : {keep_a, keep_b}) ::fcntl(fd, F_SETFD, 0);
  int lo = std::min(keep_a, keep_b), hi = std::max(keep_a, keep_b);
  ::close_range(3, static_cast<unsigned>(lo) - 1, 0);
  ::close_range(static_cast<unsigned>(lo) + 1, static_cast<unsigned>(hi) - 1, 0);
  ::close_range(static_cast<unsigned>(hi) + 1, ~0U, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  fail(argv[0].c_str());
  _exit(127);
}

// The last line pasta (or the launch above) logged, for an error message.
std::string LastLogLine(const std::string& path) {
  std::string text = ReadFile(path).value_or("");
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.empty() || line.find("to syslog") != std::string::npos) continue;
    last = line;
  }
  return last;
}

}  // namespace

Result<IpPrefix> ParseIpPrefix(std::string_view text) {
  IpPrefix p;
  std::string addr(text.substr(0, text.find('/')));
  if (::inet_pton(AF_INET, addr.c_str(), p.addr.data()) == 1) {
    p.family = AF_INET;
    p.length = 32;
  } else if (::inet_pton(AF_INET6, addr.c_str(), p.addr.data()) == 1) {
    p.family = AF_INET6;
    p.length = 128;
  } else {
    return Status::InvalidArgument("\"" + std::string(text) +
                                   "\" is not an IPv4 or IPv6 address or prefix");
  }
  if (size_t slash = text.find('/'); slash != std::string_view::npos) {
    std::string len(text.substr(slash + 1));
    char* end = nullptr;
    long n = std::strtol(len.c_str(), &end, 10);
    int max = p.length;
    if (len.empty() || *end != '\0' || n < 0 || n > max) {
      return Status::InvalidArgument("\"" + std::string(text) +
                                     "\": the prefix length must be 0 to " + std::to_string(max));
    }
    p.length = static_cast<int>(n);
  }
  MaskHostBits(p);
  return p;
}

std::string FormatIpPrefix(const IpPrefix& p) {
  char buf[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(p.family, p.addr.data(), buf, sizeof buf);
  return std::string(buf) + "/" + std::to_string(p.length);
}

std::vector<IpPrefix> HostAddresses() {
  std::vector<IpPrefix> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_flags & IFF_LOOPBACK)) continue;
    IpPrefix p;
    if (a->ifa_addr->sa_family == AF_INET) {
      p.family = AF_INET;
      p.length = 32;
      std::memcpy(p.addr.data(), &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, 4);
      if (p.addr[0] == 127) continue;
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      p.family = AF_INET6;
      p.length = 128;
      std::memcpy(p.addr.data(), &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, 16);
      if (IN6_IS_ADDR_LOOPBACK(reinterpret_cast<in6_addr*>(p.addr.data()))) continue;
    } else {
      continue;
    }
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  ::freeifaddrs(list);
  return out;
}

DefaultRoutes HostDefaultRoutes() { return ReadDefaultRoutes(); }

std::string DefaultRouteInterface() {
  std::istringstream v4(ReadFile("/proc/self/net/route").value_or(""));
  std::string line;
  std::getline(v4, line);
  while (std::getline(v4, line)) {
    std::istringstream f(line);
    std::string iface, dest, gateway, flags, refcnt, use, metric, mask;
    if ((f >> iface >> dest >> gateway >> flags >> refcnt >> use >> metric >> mask) &&
        dest == "00000000" && mask == "00000000") {
      return iface;
    }
  }
  std::istringstream v6(ReadFile("/proc/self/net/ipv6_route").value_or(""));
  while (std::getline(v6, line)) {
    std::istringstream f(line);
    std::string dest, plen, src, splen, next, metric, refcnt, use, flags, dev;
    if ((f >> dest >> plen >> src >> splen >> next >> metric >> refcnt >> use >> flags >> dev) &&
        dest == std::string(32, '0') && plen == "00" && dev != "lo") {
      return dev;
    }
  }
  return "";
}

PrivateNetwork::PrivateNetwork(PrivateNetwork&& other) noexcept
    : helpers_(std::exchange(other.helpers_, {})) {}

PrivateNetwork& PrivateNetwork::operator=(PrivateNetwork&& other) noexcept {
  if (this != &other) {
    Stop();
    helpers_ = std::exchange(other.helpers_, {});
  }
  return *this;
}

PrivateNetwork::~PrivateNetwork() { Stop(); }

void PrivateNetwork::Adopt(pid_t pid) { helpers_.push_back({pid, PidfdOpen(pid)}); }

std::vector<pid_t> PrivateNetwork::helper_pids() const {
  std::vector<pid_t> pids;
  for (const Helper& h : helpers_) pids.push_back(h.pid);
  return pids;
}

void PrivateNetwork::Stop() {
  for (Helper& h : helpers_) {
    if (h.pidfd < 0) continue;
    PidfdSignal(h.pidfd, SIGKILL);
    // Exactly this process; ECHILD when the shim's loop reaped it already.
    siginfo_t info;
    ::waitid(P_PIDFD, static_cast<id_t>(h.pidfd), &info, WEXITED);
    ::close(h.pidfd);
  }
  helpers_.clear();
}

Result<PrivateNetwork> PrivateNetwork::Attach(int netns_fd, pid_t sandbox,
                                              const PrivateNetworkPlan& plan) {
  std::string pasta = FindProgram(plan.pasta, EnvValue(HostBaseEnv(), "PATH").value_or(""));
  if (pasta.empty()) {
    return Status::FailedPrecondition("cannot find pasta (" + plan.pasta +
                                      "; Debian's package passt) for the job's network");
  }
  int userns_fd = ::ioctl(netns_fd, NS_GET_USERNS);
  if (userns_fd < 0) {
    return Status::Internal(std::string("cannot find the user namespace of the job's network: ") +
                            std::strerror(errno));
  }
  ::fcntl(userns_fd, F_SETFD, FD_CLOEXEC);
  // Not before bubblewrap's own setup of the loopback (see the header).
  if (Status up = AwaitLoopback(userns_fd, netns_fd, sandbox,
                                Clock::now() + std::chrono::milliseconds(plan.timeout_ms));
      !up.ok()) {
    ::close(userns_fd);
    if (up.code() == StatusCode::kAborted) return up;
    return Status::Unavailable("cannot give the job its network: " + up.message());
  }
  int log_fd = plan.log_path.empty()
                   ? -1
                   : ::open(plan.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  PrivateNetwork net;
  Status s = net.Connect(pasta, netns_fd, userns_fd, log_fd, plan);
  ::close(userns_fd);
  if (log_fd >= 0) ::close(log_fd);
  if (!s.ok()) {
    net.Stop();
    std::string said = plan.log_path.empty() ? "" : LastLogLine(plan.log_path);
    return Status::Unavailable("cannot give the job its network: " + s.message() +
                               (said.empty() ? "" : " (" + said + ")"));
  }
  return net;
}

Status PrivateNetwork::Connect(const std::string& pasta, int netns_fd, int userns_fd, int log_fd,
                               const PrivateNetworkPlan& plan) {
  std::vector<IpPrefix> blocked = plan.blocked;
  for (const IpPrefix& p : HostAddresses()) {
    if (std::find(blocked.begin(), blocked.end(), p) == blocked.end()) blocked.push_back(p);
  }
  DefaultRoutes expect = ReadDefaultRoutes();
  std::vector<std::string> argv = {pasta,         "--config-net",
                                   "--no-map-gw", "--foreground",
                                   "--quiet",     "--stderr",
                                   "-t",          "none",
                                   "-u",          "none",
                                   "-T",          "none",
                                   "-U",          "none",
                                   "--netns",     "/proc/self/fd/" + std::to_string(netns_fd),
                                   "--userns",    "/proc/self/fd/" + std::to_string(userns_fd)};
  // pasta run as root drops to "nobody", who could not join a user
  // namespace of root's (a root agent's task without an account of its own).
  if (::geteuid() == 0 && plan.uid < 0) argv.insert(argv.begin() + 1, {"--runas", "0:0"});
  pid_t self = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return Status::Internal(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) ExecPasta(argv, plan, self, log_fd, netns_fd, userns_fd);
  Adopt(pid);

  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::Internal("pipe failed");
  auto deadline = Clock::now() + std::chrono::milliseconds(plan.timeout_ms);
  pid_t helper = ::fork();
  if (helper < 0) {
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    return Status::Internal(std::string("fork: ") + std::strerror(errno));
  }
  if (helper == 0) {
    ::close(err_pipe[0]);
    ConfigureNamespace(userns_fd, netns_fd, expect, blocked, plan.forward, deadline, err_pipe[1]);
  }
  ::close(err_pipe[1]);
  // Wait for the helper; pasta must not exit meanwhile.
  std::string failure;
  while (true) {
    int st = 0;
    if (::waitpid(helper, &st, WNOHANG) == helper) {
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        char buf[512];
        ssize_t n = ::read(err_pipe[0], buf, sizeof buf);
        failure = n > 0 ? std::string(buf, static_cast<size_t>(n))
                        : "the helper that configures the job's network failed";
      }
      break;
    }
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      failure = "pasta exited (" + DescribeWaitStatus(st) + ")";
      ::kill(helper, SIGKILL);
      ::waitpid(helper, nullptr, 0);
      break;
    }
    if (Clock::now() > deadline + std::chrono::seconds(2)) {
      ::kill(helper, SIGKILL);
      ::waitpid(helper, nullptr, 0);
      failure = "the job's network was not configured in time";
      break;
    }
    ::usleep(2000);
  }
  ::close(err_pipe[0]);
  if (!failure.empty()) return Status::Unavailable(failure);
  if (plan.forward.empty()) return Status::Ok();
  PortForwarderPlan ports{plan.forward, userns_fd, netns_fd, plan.uid, plan.gid, plan.cgroup_procs};
  GP_ASSIGN_OR_RETURN(pid_t forwarder, StartPortForwarder(ports));
  Adopt(forwarder);
  return Status::Ok();
}

}  // namespace gpupool::exec
