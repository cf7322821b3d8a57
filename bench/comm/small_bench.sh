#!/usr/bin/env bash
# Small collectives at the shared-memory limit, in one go: the cache-line
# ping-pong bound (pingpong, two CPUs), then for each NP msrun's comm_bench
# and Open MPI's mpi_comm_bench alternately ROUNDS times each, every rank
# pinned to a core of its own (msrun --bind_to core, mpirun --bind-to core;
# more ranks than cores share them round-robin, and the table says so).
# Prints per op, NP and size the best and the median over the rounds of
# each (lat_us: the slowest rank's mean per call), msrun's best over Open
# MPI's best (below 1: msrun is faster), and for 2 ranks msrun's best over
# the bound: one overlapped cache-line exchange (allreduce, allgather,
# reduce-scatter, barrier: each rank needs the other's line) or one way
# (broadcast: the root's line to the other). The ping-pong runs before
# every round too, and the bound is its best over all of them: on a
# virtual machine the two CPUs' distance (one core's threads, one cache
# complex, two) can change while the script runs, and a bound taken once
# can sit above a best that a later round caught at a shorter distance.
#
# Usage: bench/comm/small_bench.sh [NP ...]    (default: 2 4 8)
# Environment: ROUNDS (5), SIZES (8,64,1024,4096), OPS
# (allreduce,broadcast,allgather,reduce_scatter,barrier), ITERS (20000
# calls timed per size), MSRUN_BUILD (build), CPUS (the two for the
# ping-pong and the count of cores: 0,1), PINGPONG_ITERS (200000 bounces
# per ping-pong run; fewer on a loaded machine), MPI=0 leaves Open MPI out,
# RAW=1 also prints every raw line.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${MSRUN_BUILD:-$here/build}
case $build in /*) ;; *) build=$here/$build ;; esac
rounds=${ROUNDS:-5}
sizes=${SIZES:-8,64,1024,4096}
ops=${OPS:-allreduce,broadcast,allgather,reduce_scatter,barrier}
iters=${ITERS:-20000}
cpus=${CPUS:-0,1}
pp_iters=${PINGPONG_ITERS:-200000}
nps=("$@")
[ ${#nps[@]} -eq 0 ] && nps=(2 4 8)
for b in msrun comm_bench pingpong; do
    [ -x "$build/bin/$b" ] || {
        echo "small_bench.sh: $build/bin/$b is missing: build first" >&2
        exit 2
    }
done
mpi=${MPI:-1}
if [ "$mpi" = 1 ] && { ! command -v mpirun >/dev/null || [ ! -x "$build/bin/mpi_comm_bench" ]; }; then
    echo "small_bench.sh: no mpirun or mpi_comm_bench: Open MPI left out" >&2
    mpi=0
fi
ncores=$(($(tr -cd , <<<"$cpus" | wc -c) + 1))
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# pinned to CPUs $cpus ($ncores cores); $rounds rounds, $iters calls per size"
"$build/bin/pingpong" --cpus "$cpus" --iters "$pp_iters" --runs "$rounds" | tee "$tmp/pingpong"

for np in "${nps[@]}"; do
    over=""
    [ "$np" -gt "$ncores" ] && over=":overload-allowed"
    for ((r = 1; r <= rounds; r++)); do
        "$build/bin/pingpong" --cpus "$cpus" --iters "$pp_iters" --runs 3 | sed "s/^/round $r np $np: /" |
            tee -a "$tmp/pingpong"
        taskset -c "$cpus" "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" \
            --bind_to core --log_level=error "$build/bin/comm_bench" --op "$ops" \
            --sizes "$sizes" --iters "$iters" | sed 's/^\[[^]]*\] //' | grep '^op=' |
            sed 's/^/impl=msrun /' >>"$tmp/lines" || echo "small_bench.sh: msrun np=$np failed" >&2
        [ "$mpi" = 1 ] || continue
        taskset -c "$cpus" mpirun --allow-run-as-root --oversubscribe --bind-to "core$over" \
            -np "$np" "$build/bin/mpi_comm_bench" --op "$ops" --sizes "$sizes" \
            --iters "$iters" 2>/dev/null | grep '^op=' | sed 's/^/impl=ompi /' >>"$tmp/lines" ||
            echo "small_bench.sh: mpirun np=$np failed" >&2
    done
done
[ "${RAW:-0}" = 1 ] && cat "$tmp/lines"

python3 - "$tmp/lines" "$tmp/pingpong" "$ncores" <<'EOF'
import re, statistics, sys
lines, pp, ncores = sys.argv[1], open(sys.argv[2]).read(), int(sys.argv[3])
exs = [float(v) / 1e3 for v in re.findall(r"exchange_ns best=([\d.]+)", pp)]
ows = [float(v) / 1e3 for v in re.findall(r"oneway_ns best=([\d.]+)", pp)]
ex, ow = min(exs), min(ows)
runs = {}
order = []
for ln in open(lines):
    f = dict(kv.split("=", 1) for kv in ln.split())
    key = (f["op"], int(f["np"]), int(f["bytes"]))
    if key not in runs:
        order.append(key)
    runs.setdefault(key, {}).setdefault(f["impl"], []).append(float(f["lat_us"]))
print(f"bound (2 ranks): exchange {ex:.3f} us, one way {ow:.3f} us (pingpong best of "
      f"{len(exs)} runs; their bests ranged exchange {ex:.3f}-{max(exs):.3f} us, "
      f"one way {ow:.3f}-{max(ows):.3f} us)")
print("| op | np | bytes | msrun best | msrun median | Open MPI best | Open MPI median "
      "| best ratio | msrun best / bound |")
print("|---|---|---|---|---|---|---|---|---|")
def cell(v):
    return "—" if v is None else f"{v:.2f}"
for key in order:
    op, np_, b = key
    m, o = runs[key].get("msrun", []), runs[key].get("ompi", [])
    mb, mm = (min(m), statistics.median(m)) if m else (None, None)
    ob, om = (min(o), statistics.median(o)) if o else (None, None)
    ratio = f"{mb / ob:.2f}" if mb and ob else "—"
    bound = ow if op == "broadcast" else ex
    vs = f"{mb / bound:.2f}" if np_ == 2 and mb else "—"
    npc = f"{np_} ({np_ // ncores} per core)" if np_ > ncores else str(np_)
    print(f"| {op} | {npc} | {b} | {cell(mb)} | {cell(mm)} | {cell(ob)} | {cell(om)} "
          f"| {ratio} | {vs} |")
EOF
