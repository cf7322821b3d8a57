#!/usr/bin/env bash
# Tensor-parallel overlap (train_gpt --tp-overlap, docs/model.md
# "Tensor-parallel overlap"): on tp 2 and tp 4 (dp = pp = 1), without and
# with sequence parallel, each round runs the same model without and with
# --tp-overlap, one after the other (so under about the same load), with
# --trace. From the trace of the last step: the exposed tp communication,
# each rank's time in communication spans (blocking tp collectives:
# "allreduce tp", the head's "allreduce max" and "allreduce loss", with sp
# "allgather seq" and "reduce-scatter seq"; with overlap also "start tp"
# and "wait tp", the time a rank waits for a copy's allreduce or
# reduce-scatter), averaged over the ranks; from
# train_gpt's last line the step time and tokens/s after the first step.
# The table gives the medians over the rounds, and the load average
# (/proc/loadavg's first figure) before the first round and after the last;
# a second table the same medians per collective (the spans' names; with
# sp and overlap "start gather" and "wait gather" are forward's gathers
# and backward's started ahead).
#
# usage: bench/train/tp_overlap_bench.sh [BUILD_DIR] [ROUNDS] [STEPS] [TPS] [SPS]
#   BUILD_DIR  the build with bin/train_gpt and bin/msrun (build)
#   ROUNDS     rounds, >= 1 (3)
#   STEPS      steps of each run, >= 2 (6)
#   TPS        the tp degrees, of 2 and 4 ("2 4")
#   SPS        without and with sp, of - and sp ("- sp")
# Every rank runs with one OpenBLAS thread (--threads 1).
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
steps=${3:-6}
tps=${4:-2 4}
sps=${5:-- sp}
bin="$build/bin"
[[ -x "$bin/train_gpt" && -x "$bin/msrun" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
((rounds >= 1 && steps >= 2)) || { echo "usage: $0 [BUILD_DIR] [ROUNDS>=1] [STEPS>=2] [TPS] [SPS]" >&2; exit 2; }
for tp in $tps; do [[ $tp == 2 || $tp == 4 ]] || { echo "TPS: 2 or 4, not '$tp'" >&2; exit 2; }; done
for sp in $sps; do [[ $sp == - || $sp == sp ]] || { echo "SPS: - or sp, not '$sp'" >&2; exit 2; }; done
[[ -n $tps && -n $sps ]] || { echo "TPS and SPS: at least one each" >&2; exit 2; }
dir=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$dir"; }' EXIT
model=(--layers 4 --channels 256 --heads 8 --seq 128 --micro-batch 4 --grad-accum 2)

# run TP SP MODE: one traced run (SP: sp or -); appends
# "tp sp mode comm_ms step_ms tok_s"
run() {
    local tp=$1 sp=$2 mode=$3 extra=()
    [[ $mode == on ]] && extra+=(--tp-overlap)
    [[ $sp == sp ]] && extra+=(--sp)
    timeout 600 "$bin/msrun" --worker_num="$tp" --local_worker_num="$tp" "$bin/train_gpt" \
        "${model[@]}" --threads 1 --steps "$steps" --tp "$tp" "${extra[@]}" \
        --trace "$dir/trace.json" >/dev/null 2>"$dir/err" || { cat "$dir/err" >&2; exit 1; }
    local comm step
    comm=$(python3 - "$dir/trace.json" "$tp $sp $mode" "$dir/names" <<'PY'
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
ranks = {e["pid"] for e in ev}
comm = [e for e in ev if e["cat"] == "comm"]
with open(sys.argv[3], "a") as f:
    for name in sorted({e["name"] for e in comm}):
        ms = sum(e["dur"] for e in comm if e["name"] == name) / 1e3 / len(ranks)
        n = sum(1 for e in comm if e["name"] == name) / len(ranks)
        f.write("%s %s %.2f %g\n" % (sys.argv[2], name.replace(" ", "_"), ms, n))
print("%.2f" % (sum(e["dur"] for e in comm) / 1e3 / len(ranks)))
PY
)
    step=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step, \([0-9]*\) tok\/s.*/\1 \2/p' "$dir/err" |
        tail -1)
    [[ -n $step ]] || { echo "no step time: $(cat "$dir/err")" >&2; exit 1; }
    echo "$tp $sp $mode $comm $step" >>"$dir/rows"
}

load0=$(cut -d' ' -f1 /proc/loadavg)
for ((r = 0; r < rounds; r++)); do
    for tp in $tps; do
        for sp in $sps; do
            run "$tp" "$sp" off
            run "$tp" "$sp" on
        done
    done
done
load1=$(cut -d' ' -f1 /proc/loadavg)

echo "model: ${model[*]}, --threads 1, $steps steps, $rounds rounds (medians)"
echo "load average: $load0 before, $load1 after"
echo
printf '| %2s | %-3s | %-10s | %22s | %10s | %9s |\n' tp sp tp-overlap "exposed tp comm, ms" "step ms" \
    tokens/s
echo '|----|-----|------------|------------------------|------------|-----------|'
for tp in $tps; do
    for sp in $sps; do
        for mode in off on; do
            awk -v tp="$tp" -v sp="$sp" -v m="$mode" '$1 == tp && $2 == sp && $3 == m {
                n += 0; c[n] = $4; s[n] = $5; t[n] = $6; n++ }
            function med(a, n,   i, j, x) {
                for (i = 1; i < n; i++) for (j = i; j > 0 && a[j - 1] > a[j]; j--) {
                    x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
                return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
            END { printf "| %2d | %-3s | %-10s | %22.2f | %10.1f | %9.0f |\n", tp, sp, m, med(c, n),
                  med(s, n), med(t, n) }' "$dir/rows"
        done
    done
done

echo
echo "per collective: ms per step and rank in the traced step, and how many (medians)"
echo
printf '| %2s | %-3s | %-10s | %-22s | %8s | %5s |\n' tp sp tp-overlap collective ms count
echo '|----|-----|------------|------------------------|----------|-------|'
sort -u -k1,4 "$dir/names" | awk '{ print $1, $2, $3, $4 }' | sort -k1,1n -k2,2 -k3,3 -k4,4 |
    while read -r tp sp mode name; do
        awk -v k="$tp $sp $mode $name" '($1 " " $2 " " $3 " " $4) == k { n += 0; m[n] = $5; c[n] = $6; n++ }
            function med(a, n,   i, j, x) {
                for (i = 1; i < n; i++) for (j = i; j > 0 && a[j - 1] > a[j]; j--) {
                    x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
                return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
            END { split(k, f, " "); gsub("_", " ", f[4])
                  printf "| %2d | %-3s | %-10s | %-22s | %8.2f | %5g |\n", f[1], f[2], f[3], f[4],
                      med(m, n), med(c, n) }' "$dir/names"
    done
