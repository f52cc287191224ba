#!/usr/bin/python3
"""Builds CPU-heavy openb variants that are not in ../shared/data/traces/openb,
for a held-out check of `gpupool sim openb` against the FGD authors' cached
results (docs/evaluation.md, "Held-out check").

The published cpuNNN pod lists (alibaba/clusterdata,
cluster-trace-gpu-v2023/csv/openb_pod_list_cpuNNN.csv) are the default list's
7,064 GPU tasks, unchanged and in their order, after a number of CPU-only
tasks drawn with replacement from the default list's 1,088 CPU-only tasks, so
that CPU-only tasks are NNN/10 percent of the list: cpu050 has 375 of 7,439
(the visible one; its CPU rows are all rows of default), cpu250 has 2,356 of
9,420 (its row count and its last rows, read from the published file, match).
The published files are too large to copy here, so this script draws the CPU
rows again with its own seed: the GPU tasks are exactly the published ones,
the CPU tasks are a different sample of the same population, so results can
differ from the published list's by the sampling noise (measured in the
evaluation with several sampling seeds).

usage: bench/make_openb_heldout.py --data DIR [--out DIR] [--variants "cpu200 cpu250"]
           [--sample-seed 1]

Writes OUT/openb_pod_list_cpuNNN.csv for each variant and copies
DATA/openb_node_list_gpu_node.csv into OUT, so that OUT can be given to
bench/run_openb_matrix.sh as --data.
"""
import argparse
import csv
import os
import random
import shutil
import sys

KNOWN_CPU_TASKS = {"cpu050": 375, "cpu250": 2356}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="folder holding openb_pod_list_default.csv")
    ap.add_argument("--out", default="out/openb-heldout-data")
    ap.add_argument("--variants", default="cpu200 cpu250")
    ap.add_argument("--sample-seed", type=int, default=1)
    args = ap.parse_args()

    src = os.path.join(args.data, "openb_pod_list_default.csv")
    if not os.path.isfile(src):
        sys.exit("%s: not found (--data must be the folder of the openb trace)" % src)
    with open(src, newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows or rows[0][:4] != ["name", "cpu_milli", "memory_mib", "num_gpu"]:
        sys.exit("%s: not an openb pod list (header %s)" % (src, rows[0] if rows else "empty"))
    header, body = rows[0], rows[1:]
    cpu = [r for r in body if int(r[3]) == 0]
    gpu = [r for r in body if int(r[3]) != 0]
    if not cpu or not gpu:
        sys.exit("%s: needs both CPU-only and GPU tasks" % src)

    os.makedirs(args.out, exist_ok=True)
    shutil.copy(os.path.join(args.data, "openb_node_list_gpu_node.csv"), args.out)
    for v in args.variants.split():
        if not (v.startswith("cpu") and v[3:].isdigit()):
            sys.exit("variant %r: only cpuNNN (CPU-only tasks NNN/10 percent) is known" % v)
        share = int(v[3:]) / 1000.0
        if not 0 < share < 1:
            sys.exit("variant %r: share out of range" % v)
        # How many CPU-only tasks: the published count where we read it
        # (cpu050: 375 of 7,439; cpu250: 2,356 of 9,420, with default's 7,064
        # GPU tasks), else NNN/10 percent of the list.
        n = KNOWN_CPU_TASKS.get(v) if len(gpu) == 7064 else None
        if n is None:
            n = round(len(gpu) * share / (1 - share))
        rng = random.Random("%s/%d" % (v, args.sample_seed))
        picked = [rng.choice(cpu) for _ in range(n)]
        path = os.path.join(args.out, "openb_pod_list_%s.csv" % v)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(header)
            for i, r in enumerate(picked + gpu):
                w.writerow(["openb-pod-%04d" % i] + r[1:])
        print("%s: %d CPU-only + %d GPU tasks" % (path, n, len(gpu)))


if __name__ == "__main__":
    main()
