#!/usr/bin/env bash
# The parameter server's pull and push beside the floor they are built on
# (docs/ps.md "Beside the transport and the store"), in one go: for each NP
# (default 2 and 4) msrun starts NP ranks, the last NP/2 servers (2 ranks:
# 1 worker + 1 server; 4: 2 + 2), and ps_raw_bench's worker 0 times, per
# payload size, msr_ps_pull and msr_ps_push (asynchronous, distinct keys),
# the same keys and rows as one raw message each way per server
# (msr_comm_isend/irecv: what the parameter server uses underneath), and the
# store's get and set of a value of the same bytes. ROUNDS runs alternate
# the three, so each sees the same load. Prints two markdown tables (pull
# beside raw and store_get; push beside raw and store_set): the best and the
# median over the rounds of the mean per call, the throughput of the best,
# and the ratios of the bests (ps / raw, ps / store). The load average
# before and after is printed with them: on a loaded machine the figures
# are loose.
#
# Usage: bench/ps/raw_bench.sh [NP ...]    (default: 2 4; NP even, >= 2)
# Environment: ROUNDS (3), SIZES (8,64,1024,16384,262144,4194304 bytes),
# OPTIM (sgd; adagrad, adam: the servers' update), MSRUN_BUILD (build),
# RAW=1 also prints every raw line. The communicator's waiting settings
# (MSR_COMM_SPIN_US, docs/comm.md) pass through; the header names a
# MSR_COMM_SPIN_US that is set.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${MSRUN_BUILD:-$here/build}
case $build in /*) ;; *) build=$here/$build ;; esac
rounds=${ROUNDS:-3}
sizes=${SIZES:-8,64,1024,16384,262144,4194304}
optim=${OPTIM:-sgd}
nps=("$@")
[ ${#nps[@]} -eq 0 ] && nps=(2 4)
for b in msrun ps_raw_bench; do
    [ -x "$build/bin/$b" ] || {
        echo "raw_bench.sh: $build/bin/$b is missing: build first" >&2
        exit 2
    }
done
for np in "${nps[@]}"; do
    if ! [[ $np =~ ^[0-9]+$ ]] || [ "$np" -lt 2 ] || [ $((np % 2)) -ne 0 ]; then
        echo "raw_bench.sh: NP must be an even number >= 2, not '$np'" >&2
        exit 2
    fi
done
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# $(nproc) CPUs; load average before: $(load); $rounds rounds; optimizer $optim${MSR_COMM_SPIN_US:+; MSR_COMM_SPIN_US=$MSR_COMM_SPIN_US}"
for np in "${nps[@]}"; do
    "$build/bin/msrun" --worker_num="$np" --local_worker_num="$np" --ps_servers=$((np / 2)) \
        --log_level=error "$build/bin/ps_raw_bench" --rounds "$rounds" --sizes "$sizes" \
        --optim "$optim" | sed 's/^\[[^]]*\] //' | grep '^op=' >>"$tmp/lines" || {
        echo "raw_bench.sh: np=$np failed" >&2
        exit 1
    }
done
echo "# load average after: $(load)"
[ "${RAW:-0}" = 1 ] && cat "$tmp/lines"

python3 - "$tmp/lines" <<'EOF'
import statistics, sys
runs, order = {}, []
for ln in open(sys.argv[1]):
    f = dict(kv.split("=", 1) for kv in ln.split())
    key = (int(f["np"]), int(f["servers"]), int(f["bytes"]), f["rows"], f["width"])
    if key not in runs:
        order.append(key)
    runs.setdefault(key, {}).setdefault(f["op"], []).append(float(f["lat_us"]))

def stat(v):
    return (min(v), statistics.median(v)) if v else (None, None)

def us(v):
    return "—" if v is None else f"{v:.1f}"

def mbs(b, v):
    return "—" if not v else f"{b / v:.3g}"

for ps, raw, store in (("pull", "raw_pull", "store_get"), ("push", "raw_push", "store_set")):
    print(f"\n{ps}: microseconds per call (best / median of the rounds), MB/s of the best")
    print(f"| ranks (workers + servers) | bytes | rows x width | {ps} best | median | MB/s "
          f"| raw best | median | MB/s | {store} best | median | {ps} / raw | {ps} / {store} |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        np_, sv, b, rows, width = key
        p, r, s = (stat(runs[key].get(op, [])) for op in (ps, raw, store))
        pr = f"{p[0] / r[0]:.1f}" if p[0] and r[0] else "—"
        pst = f"{p[0] / s[0]:.2f}" if p[0] and s[0] else "—"
        print(f"| {np_} ({np_ - sv} + {sv}) | {b} | {rows} x {width} | {us(p[0])} | {us(p[1])} "
              f"| {mbs(b, p[0])} | {us(r[0])} | {us(r[1])} | {mbs(b, r[0])} | {us(s[0])} "
              f"| {us(s[1])} | {pr} | {pst} |")
EOF
