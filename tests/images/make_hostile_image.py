#!/usr/bin/python3
"""make_hostile_image.py OUT_DIR KIND [--busybox PATH] [--bomb-mib N]

Writes an OCI layout OUT_DIR/layout (tag "test": oci:OUT_DIR/layout:test) of
a small, hostile image, by hand: the tar layers, their digests, the manifest
and the config are written here, so a layer can hold what no image tool
would put in one. The first layer is a working busybox root (like
make_test_image.sh's), so the image runs; KIND picks the second layer:

  escape      entries named ../../escape-dotdot, /escape-absolute, a symlink
              "up" -> ../../.. and a file "up/escape-symlink" through it, a
              symlink "abs" -> /tmp and a file "abs/escape-abs-link", a hard
              link to /etc/passwd, a character device (/dev/null's numbers)
              and a block device, a FIFO, and a setuid and setgid root copy
              of busybox at /bin/busybox-suid
  bomb        one file of N MiB of zeros (--bomb-mib, default 256): a few
              hundred KiB compressed
  big         a layer of N MiB of random bytes (--bomb-mib): large already
              compressed, and declared so in the manifest

Every escape target name starts with "escape-", so a test can look for
them anywhere on the host. No root, no network, only Python's standard
library.
"""
import argparse
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile


def add(tar, name, data=b"", **kw):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    info.mode = kw.pop("mode", 0o644)
    for k, v in kw.items():
        setattr(info, k, v)
    tar.addfile(info, io.BytesIO(data) if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else None)


class Hashing:
    """A write-only file that hashes what goes through it to `inner`."""

    def __init__(self, inner):
        self.inner = inner
        self.sha = hashlib.sha256()

    def write(self, data):
        self.sha.update(data)
        return self.inner.write(data)

    def flush(self):
        self.inner.flush()


def layer(build):
    """A gzipped tar layer, streamed (a bomb is never held in memory):
    returns (its compressed bytes, its diff id)."""
    blob = io.BytesIO()
    compressed = gzip.GzipFile(fileobj=blob, mode="wb", compresslevel=9, mtime=0)
    raw = Hashing(compressed)
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        build(tar)
    compressed.close()
    return blob.getvalue(), "sha256:" + raw.sha.hexdigest()


def base_layer(busybox):
    data = open(busybox, "rb").read()

    def build(tar):
        for d in ("bin", "tmp", "app", "etc", "dev"):
            add(tar, d, type=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        add(tar, "bin/busybox", data, mode=0o755)
        for cmd in ("sh", "ls", "cat", "echo", "id", "stat", "find", "grep", "head", "true"):
            add(tar, "bin/" + cmd, type=tarfile.SYMTYPE, linkname="busybox", mode=0o777)
        add(tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
    return layer(build)


def escape_layer(busybox):
    data = open(busybox, "rb").read()

    def build(tar):
        add(tar, "../../escape-dotdot", b"dotdot\n")
        add(tar, "/escape-absolute", b"absolute\n")
        add(tar, "up", type=tarfile.SYMTYPE, linkname="../../..", mode=0o777)
        add(tar, "up/escape-symlink", b"through a symlink\n")
        add(tar, "abs", type=tarfile.SYMTYPE, linkname="/tmp", mode=0o777)
        add(tar, "abs/escape-abs-link", b"through an absolute symlink\n")
        add(tar, "hostpasswd", type=tarfile.LNKTYPE, linkname="/etc/passwd")
        add(tar, "dev/escape-null", type=tarfile.CHRTYPE, devmajor=1, devminor=3, mode=0o666)
        add(tar, "dev/escape-disk", type=tarfile.BLKTYPE, devmajor=8, devminor=0, mode=0o666)
        add(tar, "dev/escape-fifo", type=tarfile.FIFOTYPE, mode=0o666)
        add(tar, "bin/busybox-suid", data, mode=0o6755, uid=0, gid=0)
    return layer(build)


def bomb_layer(mib):
    def build(tar):
        info = tarfile.TarInfo("app/zeros")
        info.size = mib << 20
        info.mtime = 1700000000

        class Zeros:
            def __init__(self, n):
                self.left = n

            def read(self, size=-1):
                n = self.left if size < 0 else min(size, self.left)
                self.left -= n
                return bytes(n)

        tar.addfile(info, Zeros(info.size))
    return layer(build)


def big_layer(mib):
    def build(tar):
        add(tar, "app/random", os.urandom(mib << 20))
    return layer(build)


def write_blob(blobs, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest, len(data)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("kind", choices=["escape", "bomb", "big"])
    p.add_argument("--busybox", default=shutil.which("busybox"))
    p.add_argument("--bomb-mib", type=int, default=256)
    a = p.parse_args()
    if not a.busybox:
        sys.exit("busybox not found (install busybox-static or pass --busybox)")
    layers = [base_layer(a.busybox)]
    if a.kind == "escape":
        layers.append(escape_layer(a.busybox))
    elif a.kind == "bomb":
        layers.append(bomb_layer(a.bomb_mib))
    else:
        layers.append(big_layer(a.bomb_mib))

    layout = os.path.join(a.out, "layout")
    shutil.rmtree(layout, ignore_errors=True)
    blobs = os.path.join(layout, "blobs", "sha256")
    os.makedirs(blobs)
    descs = []
    for blob, _ in layers:
        digest, size = write_blob(blobs, blob)
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                      "digest": digest, "size": size})
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": ["PATH=/bin"], "WorkingDir": "/app",
                         "Entrypoint": ["/bin/sh", "-c"], "Cmd": ["echo hostile-image"]},
              "rootfs": {"type": "layers", "diff_ids": [d for _, d in layers]}}
    cdigest, csize = write_blob(blobs, json.dumps(config).encode())
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": cdigest, "size": csize},
                "layers": descs}
    mdata = json.dumps(manifest).encode()
    mdigest, msize = write_blob(blobs, mdata)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": mdigest,
             "size": msize, "annotations": {"org.opencontainers.image.ref.name": "test"}}]}, f)
    # Read by the task accounts that pull it.
    for root, dirs, files in os.walk(layout):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)


if __name__ == "__main__":
    main()
