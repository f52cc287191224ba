"""Network namespaces that stand in for separate machines on one network.

A job's network and a multi-node job's ranks are about machines: a job
must not reach its own machine's services, and ranks on different machines
must reach each other at their machines' addresses. On one test host every
agent would share one loopback and one address, so each "machine" here is a
network namespace of its own (`ip netns`, we run as root) with one
interface on a bridge in this host's namespace:

    host namespace: bridge gpb<tag>, 198.18.N.1/24 (the pool's server listens here)
    machine "a":    eth0 198.18.N.2/24, default route via 198.18.N.1
    machine "b":    eth0 198.18.N.3/24, ...

198.18.0.0/15 is the range set aside for network tests (RFC 2544); N is
picked per test so that concurrent test runs do not collide. Nothing leaves
this host: the host namespace does not forward, the bridge holds only our
veths, and every address used here is on the bridge (checked before use).
"""
import os
import random
import shutil
import subprocess


def _ip(*args, netns=None, check=True):
    cmd = ["ip"] + (["-n", netns] if netns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


class Machines:
    def __init__(self):
        self.tag = f"{os.getpid() % 10000}{random.randint(0, 99)}"
        self.bridge = f"gpb{self.tag}"
        self.namespaces = {}  # name -> netns
        self.addresses = {}   # name -> address
        self.veths = []
        # A /24 of 198.18.0.0/15 that no interface of this host uses yet.
        used = _ip("-4", "-o", "addr", "show").stdout
        for _ in range(100):
            n = random.randint(1, 250)
            if f" 198.18.{n}." not in used:
                break
        self.net = f"198.18.{n}"
        self.gateway = f"{self.net}.1"
        # The bridge's MAC address is fixed here: a bridge left to itself takes
        # the lowest of its ports' addresses, so it changes as machines join.
        # A machine that learnt the old address for the gateway then sends to
        # a MAC the host no longer takes as its own, and its packets are
        # dropped until its ARP entry is probed again (5 s, or up to 45 s
        # when the entry was fresh): agents' first connections hung.
        mac = "02:67:70:" + ":".join(f"{random.randint(0, 255):02x}" for _ in range(3))
        _ip("link", "add", self.bridge, "address", mac, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        route = _ip("route", "get", f"{self.net}.2").stdout
        assert f"dev {self.bridge}" in route, f"198.18 addresses would leave through: {route}"

    def add(self, name, extra_addresses=()):
        """A machine: its namespace name and address."""
        ns = f"gpm{self.tag}{name}"
        host_end = f"gpv{self.tag}{name}"[:15]
        addr = f"{self.net}.{2 + len(self.namespaces)}"
        _ip("netns", "add", ns)
        self.namespaces[name] = ns
        # No DNS server is reachable from here: lookups (of a sandbox's host
        # name, say) must fail at once, not after resolv.conf's timeouts.
        # `ip netns exec` binds this file over /etc/resolv.conf.
        os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
        with open(f"/etc/netns/{ns}/resolv.conf", "w") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self.veths.append(host_end)
        _ip("link", "set", host_end, "master", self.bridge)
        _ip("link", "set", host_end, "up")
        _ip("addr", "add", f"{addr}/24", "dev", "eth0", netns=ns)
        for extra in extra_addresses:
            _ip("addr", "add", extra, "dev", "eth0", netns=ns)
        _ip("link", "set", "eth0", "up", netns=ns)
        _ip("link", "set", "lo", "up", netns=ns)
        _ip("route", "add", "default", "via", self.gateway, netns=ns)
        self.addresses[name] = addr
        return ns, addr

    def run(self, name, args, **kw):
        """Popen of `args` inside machine `name`."""
        return subprocess.Popen(["ip", "netns", "exec", self.namespaces[name], *args], **kw)

    def close(self):
        for ns in self.namespaces.values():
            pids = _ip("netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        for veth in self.veths:
            _ip("link", "del", veth, check=False)
        _ip("link", "del", self.bridge, check=False)
