#!/usr/bin/env bash
# Checks that `gpupool sim openb --via decide` (the server's Scheduler::Decide,
# one arrival per pass) gives byte-identical curve.csv to the default path
# (MakePolicy's fast policies) for every policy x trace x seed, and prints
# each run's wall time (summary.json's wall_seconds) for both paths.
# Exits 1 at the end when any pair differs.
#
# usage: bench/openb_compare_via.sh [--build DIR] [--data DIR] [--out DIR]
#          [--policies "random first-fit ..."] [--traces "default ..."]
#          [--seeds "42 43 44"]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
data=$here/../../shared/data/traces/openb
out=$here/../out/openb-via
policies="random first-fit best-fit dot-product fgd gpupool"
traces="default gpushare40 multigpu20 gpuspec20 cpu050"
seeds="42 43 44"
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --traces) traces=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
gpupool=${GPUPOOL_BIN:-$build/bin/gpupool}
[[ -x $gpupool ]] || { echo "no gpupool binary at $gpupool (--build DIR)" >&2; exit 1; }

wall() { /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["wall_seconds"])' "$1"; }

bad=0
echo "trace policy seed same wall_policy_s wall_decide_s"
for t in $traces; do
  for p in $policies; do
    for s in $seeds; do
      for via in policy decide; do
        nice "$gpupool" sim openb --nodes "$data/openb_node_list_gpu_node.csv" \
          --tasks "$data/openb_pod_list_$t.csv" --policy "$p" --seed "$s" --via "$via" \
          --out "$out/$t/$p/$s/$via" >/dev/null
      done
      same=yes
      cmp -s "$out/$t/$p/$s/policy/curve.csv" "$out/$t/$p/$s/decide/curve.csv" || { same=NO; bad=1; }
      echo "$t $p $s $same $(wall "$out/$t/$p/$s/policy/summary.json") $(wall "$out/$t/$p/$s/decide/summary.json")"
    done
  done
done
exit $bad
