#!/bin/bash
# What observing a job costs (docs/observe.md), side by side on this host:
# msrun's launch of 4 ranks of `true` without and with the dashboard, and a
# train_gpt step of 2 ranks without (MSR_REPORT=0) and with progress
# reports. Runs alternate so that a busy host hurts both sides alike; the
# medians are printed.
#   scripts/bench-observe.sh [RUNS]      (build/bin from MSRUN_BUILD or build)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${MSRUN_BUILD:-build}/bin
runs=${1:-7}
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
port() { python3 "$(dirname "$0")/free_port.py"; }

for ((i = 0; i < runs; i++)); do
    for side in off on; do
        extra=()
        [ $side = on ] && extra=(--dashboard_port "$(port)")
        t0=$(date +%s.%N)
        "$B/msrun" --worker_num 4 "${extra[@]}" true 2>/dev/null
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}' >>"$tmp/launch_$side"
    done
done

model=(--steps 60 --layers 2 --channels 64 --heads 4 --seq 64 --micro-batch 4)
for ((i = 0; i < runs; i++)); do
    for side in off on; do
        rep=0
        [ $side = on ] && rep=1
        MSR_REPORT=$rep "$B/msrun" --worker_num 2 "$B/train_gpt" "${model[@]}" 2>&1 |
            sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' >>"$tmp/step_$side"
    done
done

printf "%-44s %12s %12s\n" "what (median of $runs)" "without" "with"
printf "%-44s %12.3f %12.3f\n" "msrun --worker_num 4 true: launch (s)" \
    "$(median <"$tmp/launch_off")" "$(median <"$tmp/launch_on")"
printf "%-44s %12.2f %12.2f\n" "train_gpt 2 ranks (2 layers, 64 wide): ms/step" \
    "$(median <"$tmp/step_off")" "$(median <"$tmp/step_on")"
