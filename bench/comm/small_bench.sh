#!/usr/bin/env bash
# Small collectives at the shared-memory limit, in one go: the cache-line
# ping-pong bound (pingpong, two CPUs), then for each NP msrun's comm_bench
# and Open MPI's mpi_comm_bench alternately ROUNDS times each, every rank
# pinned to a core of its own (msrun --bind_to core, mpirun --bind-to core;
# more ranks than cores share them round-robin, and the table says so).
# Prints per op, NP and size the best and the median over the rounds of
# each (lat_us: the slowest rank's mean per call), msrun's best over Open
# MPI's best (below 1: msrun is faster), and for 2 ranks the bound for
# that size and msrun's best over it. The bound moves the message's bytes
# (pingpong --bytes: B/64 lines rounded up, each written whole by one side
# and read by the other): one overlapped exchange (allreduce, allgather,
# reduce-scatter, barrier: each rank needs the other's lines) or one way
# (broadcast, broadcast_once: the root's lines to the other), so a 4 KiB
# call is held to 64 lines moved, not to one. Every ping-pong run bounces
# as many times at every size (PINGPONG_ITERS, by default ITERS: as many
# bounces as calls timed), so that the bounds of all sizes are bests over
# runs of the same length. broadcast_once is comm_bench's single
# broadcast after a barrier (only the broadcast timed: no call overlaps the
# next, as one broadcast of a stream does), the row to hold against the
# one-way bound; its row barrier+broadcast_once is the same calls timed
# with the barrier (comm_bench's cycle_us, no bound): where ranks share
# cores, a single broadcast's readers wait for the root as long as the
# barrier left it off its core, so this row tells a slow broadcast from
# time that moved between the two. The ping-pong runs before every round too, for
# every size, and the bound is its best over all of them: on a virtual
# machine the two CPUs' distance (one core's threads, one cache complex,
# two) can change while the script runs, and a bound taken once can sit
# above a best that a later round caught at a shorter distance. The last
# column holds each round's call against the bound of that round's own
# ping-pong (run just before it, at the distance the round most likely
# ran at): the least and the median of those ratios over the rounds, so
# that a round at another distance neither flatters nor hides the rest.
#
# Usage: bench/comm/small_bench.sh [NP ...]    (default: 2 4 8)
# Environment: ROUNDS (5), SIZES (8,64,1024,4096), OPS
# (allreduce,broadcast,broadcast_once,allgather,reduce_scatter,barrier),
# ITERS (20000 calls timed per size), MSRUN_BUILD (build), CPUS (the two
# for the ping-pong and the count of cores: 0,1), PINGPONG_ITERS (bounces
# per ping-pong run, the same at every size: ITERS), MPI=0 leaves Open MPI
# out, RAW=1 also prints every raw line.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${MSRUN_BUILD:-$here/build}
case $build in /*) ;; *) build=$here/$build ;; esac
rounds=${ROUNDS:-5}
sizes=${SIZES:-8,64,1024,4096}
ops=${OPS:-allreduce,broadcast,broadcast_once,allgather,reduce_scatter,barrier}
iters=${ITERS:-20000}
cpus=${CPUS:-0,1}
pp_iters=${PINGPONG_ITERS:-$iters}
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
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT

# pingpong RUNS PREFIX: the bound at every size, appended to $tmp/pingpong
pingpong() {
    local b
    for b in ${sizes//,/ }; do
        if [ "$b" -lt 1 ] || [ "$b" -gt 65536 ]; then
            continue # outside pingpong's range: no bound for that size
        fi
        "$build/bin/pingpong" --cpus "$cpus" --iters "$pp_iters" --runs "$1" --bytes "$b" |
            sed "s/^/$2/" | tee -a "$tmp/pingpong"
    done
}

echo "# pinned to CPUs $cpus ($ncores cores); $rounds rounds, $iters calls per size," \
    "$pp_iters bounces per ping-pong run at every size; load average $(cut -d' ' -f1-3 /proc/loadavg)"
pingpong "$rounds" ""

for np in "${nps[@]}"; do
    over=""
    [ "$np" -gt "$ncores" ] && over=":overload-allowed"
    for ((r = 1; r <= rounds; r++)); do
        pingpong 3 "round $r np $np: "
        taskset -c "$cpus" "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" \
            --bind_to core --log_level=error "$build/bin/comm_bench" --op "$ops" \
            --sizes "$sizes" --iters "$iters" | sed 's/^\[[^]]*\] //' | grep '^op=' |
            sed "s/^/impl=msrun round=$r /" >>"$tmp/lines" ||
            echo "small_bench.sh: msrun np=$np failed" >&2
        [ "$mpi" = 1 ] || continue
        taskset -c "$cpus" mpirun --allow-run-as-root --oversubscribe --bind-to "core$over" \
            -np "$np" "$build/bin/mpi_comm_bench" --op "$ops" --sizes "$sizes" \
            --iters "$iters" 2>/dev/null | grep '^op=' | sed "s/^/impl=ompi round=$r /" >>"$tmp/lines" ||
            echo "small_bench.sh: mpirun np=$np failed" >&2
    done
done
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "${RAW:-0}" = 1 ] && cat "$tmp/lines"

python3 - "$tmp/lines" "$tmp/pingpong" "$ncores" <<'EOF'
import re, statistics, sys
lines, pp, ncores = sys.argv[1], open(sys.argv[2]).read(), int(sys.argv[3])
# the bound per line count (8 and 64 bytes are both one line; a barrier's
# 0 bytes still move one): the best over every ping-pong run of it
ex, ow = {}, {}
for m in re.finditer(r"lines=(\d+) .*oneway_ns best=([\d.]+) .*exchange_ns best=([\d.]+)", pp):
    n = int(m.group(1))
    ow.setdefault(n, []).append(float(m.group(2)) / 1e3)
    ex.setdefault(n, []).append(float(m.group(3)) / 1e3)
# each round's own bound (the ping-pong run just before its calls, at the
# same distance between the two CPUs): (np, round, lines) -> (one way, exchange)
rb = {}
for m in re.finditer(r"round (\d+) np (\d+): pingpong .*lines=(\d+) .*oneway_ns best=([\d.]+) "
                     r".*exchange_ns best=([\d.]+)", pp):
    rb[(int(m.group(2)), int(m.group(1)), int(m.group(3)))] = (float(m.group(4)) / 1e3,
                                                                float(m.group(5)) / 1e3)
runs = {}
rounds = {}
order = []
for ln in open(lines):
    f = dict(kv.split("=", 1) for kv in ln.split())
    rows = [(f["op"], f["lat_us"])]
    if "cycle_us" in f:
        rows.append(("barrier+" + f["op"], f["cycle_us"]))
    for op, us in rows:
        key = (op, int(f["np"]), int(f["bytes"]))
        if key not in runs:
            order.append(key)
        runs.setdefault(key, {}).setdefault(f["impl"], []).append(float(us))
        if f["impl"] == "msrun" and "round" in f:
            rounds.setdefault(key, []).append((int(f["round"]), float(us)))
for n in sorted(ex):
    print(f"bound (2 ranks) {n} line{'s' if n > 1 else ''} ({n * 64} B): exchange "
          f"{min(ex[n]):.3f} us, one way {min(ow[n]):.3f} us (pingpong best of {len(ex[n])} "
          f"runs; their bests ranged exchange {min(ex[n]):.3f}-{max(ex[n]):.3f} us, one way "
          f"{min(ow[n]):.3f}-{max(ow[n]):.3f} us)")
print("| op | np | bytes | msrun best | msrun median | Open MPI best | Open MPI median "
      "| best ratio | bound | msrun best / bound | msrun / its round's bound |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
def cell(v):
    return "—" if v is None else f"{v:.2f}"
for key in order:
    op, np_, b = key
    m, o = runs[key].get("msrun", []), runs[key].get("ompi", [])
    mb, mm = (min(m), statistics.median(m)) if m else (None, None)
    ob, om = (min(o), statistics.median(o)) if o else (None, None)
    ratio = f"{mb / ob:.2f}" if mb and ob else "—"
    table = ow if op.startswith("broadcast") else ex
    n = max(1, (b + 63) // 64)
    bound = min(table[n]) if np_ == 2 and n in table and "+" not in op else None
    vs = f"{mb / bound:.2f}" if bound and mb else "—"
    # per round: msrun's call over the bound its own round's ping-pong took
    # just before it (the least and the median of those ratios)
    per = []
    if bound is not None:
        for r, us in rounds.get(key, []):
            pair = rb.get((np_, r, n))
            if pair:
                per.append(us / pair[0 if op.startswith("broadcast") else 1])
    own = f"{min(per):.2f}-{max(per):.2f} (median {statistics.median(per):.2f})" if per else "—"
    npc = f"{np_} ({np_ // ncores} per core)" if np_ > ncores else str(np_)
    print(f"| {op} | {npc} | {b} | {cell(mb)} | {cell(mm)} | {cell(ob)} | {cell(om)} "
          f"| {ratio} | {'—' if bound is None else f'{bound:.3f}'} | {vs} | {own} |")
EOF
