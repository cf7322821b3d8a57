#!/usr/bin/env bash
# Context and expert parallel figures of train_gpt under msrun
# (docs/model.md "Context parallel" and "Mixture-of-Experts"):
#   1. tokens per second of cp 4 against tp 4 and dp 4 on 4 ranks, on
#      sequences of 1024 tokens, the same global batch;
#   2. ring attention from a traced cp 4 step: per rank, the attention
#      computed while the next K/V block travels (the "ring fwd/bwd" spans)
#      against the waits the ring leaves exposed ("ring wait"), and the
#      bytes it moves;
#   3. tokens per second of a MoE model with ep 1, 2 and 4 on 4 ranks;
#   4. the same MoE model under context parallel: cp 2 x dp 2 (ep 1 and
#      2) and cp 4 beside dp 4 (ep 2), the same global batch;
#   5. with a third argument, an SVG of the traced cp 4 step there.
# The alltoall MoE's dispatch and combine use, against Open MPI's
# MPI_Alltoall: scripts/bench-comm.sh 4 --op alltoall --sizes ...
#
# usage: bench/train/cp_ep_bench.sh [BUILD_DIR] [STEPS] [SVG]
# Prints markdown tables. Every rank runs with one OpenBLAS thread.
set -euo pipefail
build=${1:-build}
steps=${2:-6}
svg=${3:-}
bin="$build/bin"
[[ -x "$bin/train_gpt" && -x "$bin/msrun" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT

run() { # run NP ARGS... : rank output into $tmp/err
    local n=$1
    shift
    timeout 600 "$bin/msrun" --worker_num="$n" --local_worker_num="$n" "$bin/train_gpt" \
        --threads 1 --steps "$steps" "$@" >"$tmp/err" 2>&1 || { cat "$tmp/err" >&2; exit 1; }
}

# rank 0's median tokens/s over the steps after the first
tok_s() {
    grep -o 'rank 0\] step [0-9]* loss [0-9.]* tok/s [0-9.]*' "$tmp/err" | awk '
        $4 > 1 { v[n++] = $8 }
        END { if (n == 0) exit 1
              for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
              printf "%.0f\n", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}

long=(--layers 2 --channels 128 --heads 8 --seq 1024 --micro-batch 1 --global-batch 4)
echo "### cp 4 against tp 4 and dp 4: 4 ranks, ${long[*]}"
echo
echo "| layout | tokens/s |"
echo "|---|---:|"
for lay in "--cp 4 --dp 1" "--tp 4 --dp 1" "--dp 4"; do
    read -r -a a <<<"$lay"
    run 4 "${long[@]}" "${a[@]}"
    echo "| ${lay} | $(tok_s) |"
done
echo

run 4 "${long[@]}" --cp 4 --dp 1 --trace "$tmp/trace.json"
echo "### Ring attention, one traced step of cp 4 (ms per rank)"
echo
python3 - "$tmp/trace.json" <<'EOF'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
print("| rank | attention in ring steps | exposed ring waits | waits / (steps + waits) |")
print("|---:|---:|---:|---:|")
for r in sorted({e["pid"] for e in ev}):
    steps = sum(e["dur"] for e in ev if e["pid"] == r and e["name"].startswith("ring fwd")
                or e["pid"] == r and e["name"].startswith("ring bwd")) / 1e3
    waits = sum(e["dur"] for e in ev if e["pid"] == r and e["name"] == "ring wait") / 1e3
    print(f"| {r} | {steps:.2f} | {waits:.2f} | {100 * waits / (steps + waits):.1f}% |")
EOF
# each ring step sends a K/V block (forward and backward) and its
# gradient (backward): 2 C/tp floats per position of the rank's T/cp
echo
echo "Each ring step moves 2 x 128 x 256 x 4 = 262144 bytes a block per rank (K and V of the rank's 256 positions)."
echo
if [[ -n $svg ]]; then
    python3 "$(dirname "$0")/trace_svg.py" "$tmp/trace.json" "$svg" \
        "train_gpt --cp 4: ring attention, one step (4 ranks, sequence 1024)"
fi

moe=(--layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8 --global-batch 32
    --experts 8 --top-k 2 --dp 4)
echo "### MoE, expert parallel: 4 ranks, ${moe[*]}"
echo
echo "| ep | experts per rank | tokens/s |"
echo "|---:|---:|---:|"
for ep in 1 2 4; do
    run 4 "${moe[@]}" --ep "$ep"
    echo "| $ep | $((8 / ep)) | $(tok_s) |"
done

moecp=(--layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8 --global-batch 32
    --experts 8 --top-k 2)
echo
echo "### MoE under context parallel: 4 ranks, ${moecp[*]}"
echo
echo "| layout | tokens/s |"
echo "|---|---:|"
for lay in "--dp 4 --ep 2" "--cp 2 --dp 2" "--cp 2 --dp 2 --ep 2" "--cp 4 --dp 1"; do
    read -r -a a <<<"$lay"
    run 4 "${moecp[@]}" "${a[@]}"
    echo "| ${lay} | $(tok_s) |"
done
