#!/usr/bin/env bash
# The elastic timeline (docs/checkpoint.md "Elastic jobs"): 3 msrun agents
# on loopback (--nnodes=2:3, 2 workers each) train train_gpt --auto --tp 2
# with a checkpoint every 4 steps (tp 2 x pp 3 on 6 ranks); once the first
# checkpoint of the 6 ranks is complete, node 2's msrun is killed with
# SIGKILL and the job re-forms on 4 ranks
# (tp 2 x pp 2). From the kill to the first step after the resume, each
# phase ends at a log line, stamped as it arrives:
#   detect      the agent restarts the job ("restart N of M after ...")
#   re-form     the new generation's rendezvous ("generation N: started")
#   plan        train_gpt --auto chose ("--auto: plan 1 of ...": the
#               worker's start, the checkpoint's global batch, the search)
#   load        the resume ("resumed from step ...": the trainer made,
#               the checkpoint resharded into it)
#   first step  the first step after the resume ("step N loss ...")
# Prints the median of RUNS runs (and each run) as a markdown table.
#
# usage: bench/ckpt/elastic_bench.sh [BUILD_DIR] [RUNS]
set -euo pipefail
build=${1:-build}
runs=${2:-5}
bin="$build/bin"
src="$(cd "$(dirname "$0")/../.." && pwd)"
[[ -x "$bin/train_gpt" && -x "$bin/msrun" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
tmp=$(mktemp -d)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
(umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$tmp/token")
export MSRUN_TOKEN_FILE="$tmp/token"
cat >"$tmp/cluster" <<'CLUSTER'
ranks_per_node = 2
mem_gib = 0.0015
peak_tflops = 0.05
intra_gbs = 5
latency_us = 2
mem_gbs = 3
kernel_us = 0.2
cores_per_node = 2
CLUSTER
# stamp: each line of stdin with the time it arrived (seconds)
stamp='import sys, time
for l in sys.stdin:
    sys.stdout.write("%.6f %s" % (time.time(), l))
    sys.stdout.flush()'
# wait_line PATTERN FILE SECONDS
wait_line() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -q -- "$1" "$2" 2>/dev/null && return 0
        sleep 0.05
    done
    echo "elastic_bench: no '$1' in $2 within $3 s" >&2
    tail -n 20 "$2" >&2
    exit 1
}

# wait_coordinator PORT: until msrun status answers there (30 s)
wait_coordinator() {
    local i
    for ((i = 0; i < 600; i++)); do
        "$bin/msrun" status --master_addr 127.0.0.1 --master_port "$1" >/dev/null 2>&1 && return 0
        sleep 0.05
    done
    echo "elastic_bench: no coordinator at 127.0.0.1:$1 within 30 s" >&2
    exit 1
}

one_run() { # one_run DIR: the phases' seconds, one line
    local d=$1 port n agent
    mkdir -p "$d"
    port=$(python3 "$src/scripts/free_port.py")
    pids=()
    for n in 0 1 2; do
        # the agent's pid (the stamper's subshell is not msrun)
        ("$bin/msrun" --master_addr=127.0.0.1 --master_port="$port" --nnodes=2:3 \
            --local_worker_num=2 --max_restarts=3 --node_timeout=2 --last_call=0.3 \
            --log_level=info "$bin/train_gpt" --layers 6 --channels 32 --heads 4 --seq 16 \
            --micro-batch 2 --lr 3e-3 --steps 40 --threads 1 --auto --tp 2 \
            --cluster "$tmp/cluster" --ckpt-every 4 --resume --ckpt-dir "$d/ck" \
            --loss-log "$d/loss" 2>&1 & echo $! >"$d/pid$n"; wait) |
            python3 -u -c "$stamp" >"$d/n$n.log" &
        pids+=($!)
        wait_line "" "$d/pid$n" 10
        pids+=("$(cat "$d/pid$n")")
        # the first starts the coordinator: the others join it once it answers
        [[ $n == 0 ]] && wait_coordinator "$port"
    done
    wait_line "generation [0-9]*: started 2 workers (ranks [0-9.]* of 6)" "$d/n0.log" 30
    # a checkpoint of the 6 ranks is complete (its MANIFEST is written last)
    local i
    for ((i = 0; i < 1200; i++)); do
        grep -qs '"world_size": 6' "$d"/ck/step-*/MANIFEST && break
        sleep 0.05
    done
    agent=$(cat "$d/pid2")
    local t0
    t0=$(python3 -c 'import time; print("%.6f" % time.time())')
    kill -9 "$agent"
    wait_line "train_gpt: resumed from step" "$d/n0.log" 60
    wait_line "^step 40 " "$d/loss" 60
    for n in 0 1; do wait "${pids[$((2 * n))]}" 2>/dev/null || true; done
    python3 - "$d/n0.log" "$t0" <<'PY'
import re, sys
t0 = float(sys.argv[2])
marks = [("detect", r"msrun\[node 0\] warning: restart \d+ of \d+ after"),
         ("re-form", r"msrun\[node 0\] info: generation \d+: started 2 workers \(ranks [0-9.]+ of 4\)"),
         ("plan", r"train_gpt: --auto: plan 1 of"),
         ("load", r"train_gpt: resumed from step"),
         ("first step", r"\] step \d+ loss")]
at, k = [], 0
for line in open(sys.argv[1]):
    t, _, text = line.partition(" ")
    if float(t) < t0 or k == len(marks):
        continue
    if re.search(marks[k][1], text):
        at.append(float(t))
        k += 1
if k < len(marks):
    sys.exit("elastic_bench: no '%s' line after the kill" % marks[k][0])
prev, out = t0, []
for t in at:
    out.append(t - prev)
    prev = t
print(" ".join("%.3f" % x for x in out + [at[-1] - t0]))
PY
}

rows=()
for ((r = 1; r <= runs; r++)); do
    rows+=("$(one_run "$tmp/run$r")")
done
python3 - "${rows[@]}" <<'PY'
import statistics, sys
names = ["detect", "re-form", "plan", "load", "first step", "total"]
rows = [[float(x) for x in r.split()] for r in sys.argv[1:]]
print("| phase | median s | " + " | ".join("run %d" % (i + 1) for i in range(len(rows))) + " |")
print("|---|---:|" + "---:|" * len(rows))
for k, n in enumerate(names):
    print("| %s | %.3f | %s |" % (n, statistics.median(r[k] for r in rows),
                                  " | ".join("%.3f" % r[k] for r in rows)))
PY
