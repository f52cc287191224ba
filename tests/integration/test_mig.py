"""MIG end to end: an agent whose (fake) NVML has an A100 in MIG mode reports
its instances, the scheduler places MIG jobs on instances that fit (the
smallest first, never two jobs on one), each job's CUDA_VISIBLE_DEVICES is
its own instance's MIG UUID and its sandbox has only the parent GPU's device
node, and a request larger than every instance waits with a reason.

The fake NVML (tests/fake_nvml) is loaded through --gpu-driver-dir, as in
test_gpu_driver_dir.py; its devices say they are simulated only through
their UUIDs here, as real NVML would report them."""

from fake_gpus import fake_driver
from pool import wait_for

A100 = "GPU-11111111-2222-3333-4444-555555555555"
T4 = "GPU-66666666-7777-8888-9999-000000000000"
MIG_3G = "MIG-aaaaaaaa-0000-5000-8000-000000000003"
MIG_1G = "MIG-bbbbbbbb-0000-5000-8000-000000000001"
MIG_2G = "MIG-cccccccc-0000-5000-8000-000000000002"

CONFIG = {
    "driver_version": "550.54.15",
    "cuda_version": 12040,
    "devices": [
        {"name": "NVIDIA A100-SXM4-80GB", "uuid": A100, "memory_total_mib": 81920,
         "cc": [8, 0], "minor": 0, "mig_mode": 1, "sm_count": 98,
         "mig_devices": [
             {"index": 0, "uuid": MIG_3G, "profile": "3g.40gb", "memory_total_mib": 40192,
              "sm_count": 42, "gpu_instance_slices": 3, "gpu_instance_id": 2},
             {"index": 3, "uuid": MIG_1G, "profile": "1g.10gb", "memory_total_mib": 9728,
              "sm_count": 14, "gpu_instance_slices": 1, "gpu_instance_id": 9},
             {"index": 5, "uuid": MIG_2G, "profile": "2g.20gb", "memory_total_mib": 19968,
              "sm_count": 28, "gpu_instance_slices": 2, "gpu_instance_id": 5},
         ]},
        {"name": "Tesla T4", "uuid": T4, "memory_total_mib": 15360, "cc": [7, 5], "minor": 1},
    ],
}

# What a job shows of its GPUs, then waits to be cancelled.
SHOW = 'echo "cvd=$CUDA_VISIBLE_DEVICES"; echo "devs=$(ls /dev | grep nvidia | tr "\\n" " ")"; sleep 600'


def start(pool, tmp_path):
    driver, nvml, sandbox = fake_driver(tmp_path, CONFIG, cuda=False, minors=(0, 1))
    config = tmp_path / "agent.yaml"
    config.write_text(sandbox)
    pool.start_server()
    pool.start_agent("mig-box", gpus=None, env={"FAKE_NVML_CONFIG": str(nvml)},
                     extra=["--gpu-driver-dir", str(driver), "--config", str(config)])
    pool.wait_nodes_ready(1)


def wait_shown(pool, job_id):
    """The job's cvd= and devs= lines, once it printed them."""
    def shown():
        lines = pool.logs_text(job_id)
        cvd = [l for l in lines if l.startswith("cvd=")]
        devs = [l for l in lines if l.startswith("devs=")]
        return (cvd[0][4:], devs[0][5:].split()) if cvd and devs else None
    try:
        return wait_for(shown, timeout=60, what=f"job {job_id} to show its GPUs")
    except AssertionError as e:
        raise AssertionError(f"{e}: {pool.job(job_id)}\n{pool.agent_log_tails()}") from None


def mig_job(profile):
    return {"run": SHOW, "resources": {"mig": profile}}


def test_the_agent_reports_a_mig_gpu_as_its_instances(pool, tmp_path):
    start(pool, tmp_path)
    gpus = pool.nodes()[0]["gpus"]
    by_uuid = {g["uuid"]: g for g in gpus}
    assert set(by_uuid) == {MIG_3G, MIG_1G, MIG_2G, T4}, gpus  # the A100 itself is not offered
    g = by_uuid[MIG_1G]
    assert g["name"] == "NVIDIA A100-SXM4-80GB" and g["memory_mib"] == 9728, g
    assert g["mig"] == {"parent_uuid": A100, "profile": "1g.10gb", "slices": 1,
                        "gpu_instance": 9, "compute_instance": 0}, g
    assert by_uuid[MIG_3G]["mig"]["profile"] == "3g.40gb"
    assert by_uuid[T4]["mig"] is None

    out = pool.cli("nodes", check=True).stdout
    assert f"0: NVIDIA A100-SXM4-80GB in MIG mode ({A100})" in out, out
    for profile, uuid in [("3g.40gb", MIG_3G), ("1g.10gb", MIG_1G), ("2g.20gb", MIG_2G)]:
        assert f"MIG {profile} {uuid}" in out, out
    assert "1: Tesla T4" in out, out


def test_mig_jobs_get_instances_of_their_own_that_fit(pool, tmp_path):
    start(pool, tmp_path)
    small = pool.submit(mig_job("1g.10gb"))
    big = pool.submit(mig_job("3g.40gb"))
    got = {small: wait_shown(pool, small), big: wait_shown(pool, big)}
    assert got[small][0] == MIG_1G, got  # the smallest that fits
    assert got[big][0] == MIG_3G, got
    for cvd, devs in got.values():
        # Only the parent A100's node (nvidia0), not the T4's (nvidia1).
        assert "nvidia0" in devs and "nvidia1" not in devs, devs

    # A second 1g.10gb: the 1g instance is taken, so the next that fits.
    second = pool.submit(mig_job("1g.10gb"))
    assert wait_shown(pool, second)[0] == MIG_2G
    # A third (through the CLI's flag): every instance is held now; it
    # waits, and says for what.
    r = pool.cli("submit", "--quiet", "--mig", "1g.10gb", "--", "sh", "-c", SHOW, check=True)
    third = int(r.stdout.strip().splitlines()[-1])
    job = pool.wait_considered(third)
    assert job["state"] == "pending", job
    assert "waiting for a free MIG instance of at least 1g.10gb" in job["reason"], job

    # A whole-GPU job takes the T4, never an instance.
    whole = pool.submit({"run": SHOW, "resources": {"gpus": 1}})
    assert wait_shown(pool, whole)[0] == T4

    # Never two jobs on one instance, as the server records it too.
    held = {}
    for job_id in [small, big, second, whole]:
        attempt = pool.job(job_id)["attempt_list"][-1]
        for uuid in attempt["gpus"]:
            assert uuid not in held, (uuid, held)
            held[uuid] = job_id
    assert set(held) == {MIG_1G, MIG_3G, MIG_2G, T4}, held

    out = pool.cli("job", str(small), check=True).stdout
    assert f"{MIG_1G} (MIG 1g.10gb)" in out, out
    assert "MIG instance of at least 1g.10gb" in out, out
    out = pool.cli("nodes", check=True).stdout
    mig_row = [l for l in out.splitlines() if f"MIG 1g.10gb {MIG_1G}" in l]
    assert mig_row and pool.job(small)["attempt_list"][-1]["id"] in mig_row[0], out

    # When the small job ends, its instance goes to the waiting one.
    status, _ = pool.api("POST", f"/v1/jobs/{small}/cancel", {})
    assert status == 200
    assert wait_shown(pool, third)[0] == MIG_1G
    for job_id in [big, second, third, whole]:
        pool.api("POST", f"/v1/jobs/{job_id}/cancel", {})


def test_a_mig_request_larger_than_every_instance_waits_with_a_reason(pool, tmp_path):
    start(pool, tmp_path)
    for profile in ["7g.80gb", "4g.20gb", "3g.80gb"]:  # more slices, or more memory, than any
        job_id = pool.submit(mig_job(profile))
        job = pool.wait_considered(job_id)
        assert job["state"] == "pending", job
        assert f"no node has a MIG instance of at least {profile}" in job["reason"], job


def test_mig_specs_are_checked_at_submission(pool, tmp_path):
    pool.start_server()
    for resources, why in [
            ({"mig": "3g"}, 'resources.mig: invalid MIG profile "3g"'),
            ({"mig": "3g.40gb", "gpus": 2}, "resources.mig: asks for exactly one MIG instance"),
            ({"mig": "3g.40gb", "gpus": 0.5}, "cannot be combined with a share of a GPU"),
            ({"mig": "3g.40gb", "gpu_memory": "10GiB"}, "cannot be combined with gpu_memory")]:
        status, body = pool.api("POST", "/v1/jobs", {"run": "true", "resources": resources})
        assert status == 400, (resources, body)
        assert why in body["error"]["message"], (resources, body)
