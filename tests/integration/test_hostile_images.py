"""Untrusted images (issue 19, hole 8), end to end through a real server,
agent (root, so each task has its own account) and sandbox, with the real
skopeo and umoci: a layer that tries to write outside its bundle, plant a
setuid root binary, device nodes or a hard link to a host file; an image
over the provider's size limit, as declared and once decompressed.

The images are made by tests/images/make_hostile_image.py."""
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile

import pytest

from pool import wait_for

HERE = pathlib.Path(__file__).resolve().parent
MAKE = HERE.parent / "images" / "make_hostile_image.py"


@pytest.fixture(scope="module")
def images():
    # Local images must be readable by the task accounts that pull them.
    out = pathlib.Path(tempfile.mkdtemp(prefix="gpupool-hostile-images-"))
    os.chmod(out, 0o755)
    for kind, extra in (("escape", []), ("bomb", ["--bomb-mib", "256"]),
                        ("big", ["--bomb-mib", "48"])):
        subprocess.run(["/usr/bin/python3", str(MAKE), str(out / kind), kind, *extra], check=True,
                       capture_output=True, timeout=120)
    yield out
    shutil.rmtree(out, ignore_errors=True)


def start(pool, extra=()):
    pool.start_server()
    pool.start_agent("box", gpus="1xA100:80GiB", extra=list(extra))
    pool.wait_nodes_ready(1)


def output(pool, job_id):
    status, page = pool.api("GET", f"/v1/jobs/{job_id}/logs?after=0&limit=1000")
    assert status == 200, page
    return [l["text"] for l in page["lines"] if l["stream"] != "event"]


def events(pool, job_id):
    status, page = pool.api("GET", f"/v1/jobs/{job_id}/logs?after=0&limit=1000")
    assert status == 200, page
    return [l["text"] for l in page["lines"] if l["stream"] == "event"]


def privileged_files(tree):
    """Setuid or setgid files and device nodes under `tree` (no symlink
    followed)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(st.st_mode):
                found.append(os.path.join(dirpath, name))
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                found.append(os.path.join(dirpath, name))
    return found


def escapes(dirs):
    return [str(p) for d in dirs if os.path.isdir(d) for p in pathlib.Path(d).iterdir()
            if p.name.startswith("escape-")]


def test_a_hostile_layer_changes_nothing_outside_its_bundle_and_gains_no_privilege(pool, images):
    passwd = pathlib.Path("/etc/passwd").read_bytes()
    passwd_links = os.stat("/etc/passwd").st_nlink
    start(pool)
    image_cache = pathlib.Path(pool.agent_dir("box")) / "images"
    job_id = pool.submit({"image": f"oci:{images}/escape/layout:test", "run":
                          "echo uid=$(id -u); echo suid=$(/bin/busybox-suid id -u); "
                          "grep NoNewPrivs /proc/self/status; ls -l /bin/busybox-suid; "
                          "ls -l /dev/escape-null 2>&1; echo done"})
    job = pool.wait_finished(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    lines = output(pool, job_id)
    assert "done" in lines, lines
    uid = next(l for l in lines if l.startswith("uid="))
    assert int(uid[4:]) >= 190000, lines
    # The setuid root binary runs as the task's account: no_new_privs holds,
    # and the agent cleared the bit anyway.
    assert f"suid={uid[4:]}" in lines, lines
    assert "NoNewPrivs:\t1" in lines, lines
    assert any(l.startswith("-rwxr-xr-x") and "busybox-suid" in l for l in lines), lines

    # Nothing outside the bundle changed: the host's root, /tmp, the agent's
    # data dir and the cache's own directories hold no escape-* file, the
    # host's passwd file is untouched (the layer's hard link did not reach it).
    agent = pathlib.Path(pool.agent_dir("box"))
    roots = list((image_cache / "roots").iterdir())
    assert len(roots) == 1, roots
    assert escapes(["/", "/tmp", str(pool.dir), str(agent), str(image_cache),
                    str(image_cache / "roots"), str(roots[0]), str(images)]) == []
    assert pathlib.Path("/etc/passwd").read_bytes() == passwd
    assert os.stat("/etc/passwd").st_nlink == passwd_links
    # Nothing in the cache gives anyone on the host a privilege: no setuid
    # or setgid file, no device node; the root is root's, not the account's.
    assert privileged_files(image_cache) == []
    assert os.lstat(roots[0] / "rootfs" / "bin" / "busybox-suid").st_uid == 0
    assert list((image_cache / "tmp").iterdir()) == []


def test_images_over_the_providers_size_limit_fail_with_the_limit_named(pool, images):
    start(pool, ["--max-image-size", "32MiB"])
    image_cache = pathlib.Path(pool.agent_dir("box")) / "images"

    # Declared larger than the limit: refused before anything is copied.
    big = pool.submit({"image": f"oci:{images}/big/layout:test", "run": "true"})
    job = pool.wait_finished(big, timeout=120)
    assert job["state"] == "failed", job
    assert "compressed, more than this node's limit of 32 MiB per image (max-image-size)" in \
        job["reason"], job["reason"]
    assert any("max-image-size" in e for e in events(pool, big)), events(pool, big)

    # A few hundred KiB that decompress to 256 MiB: stopped while unpacking.
    bomb = pool.submit({"image": f"oci:{images}/bomb/layout:test", "run": "true"})
    job = pool.wait_finished(bomb, timeout=120)
    assert job["state"] == "failed", job
    assert "unpacked, it takes more than this node's limit of 32 MiB per image (max-image-size)" \
        in job["reason"], job["reason"]
    # Nothing of either is kept.
    wait_for(lambda: list((image_cache / "tmp").iterdir()) == [], what="the pulls' leftovers gone")
    assert list((image_cache / "roots").iterdir()) == []

    # An image within the limit still runs.
    ok = pool.submit({"image": f"oci:{images}/escape/layout:test", "run": "echo fine"})
    job = pool.wait_finished(ok, timeout=120)
    assert job["state"] == "succeeded" and output(pool, ok) == ["fine"], (job, output(pool, ok))
