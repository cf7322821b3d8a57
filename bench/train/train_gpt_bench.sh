#!/usr/bin/env bash
# Tokens per second of train_gpt (one process) for a few model shapes and
# OpenBLAS thread counts: the median over the steps after the first two.
#
# usage: bench/train/train_gpt_bench.sh [BUILD_DIR] [STEPS]
# Prints one table row per run; see docs/model.md for results.
set -euo pipefail
build=${1:-build}
steps=${2:-12}
bin="$build/bin/train_gpt"
[[ -x "$bin" ]] || { echo "no $bin: build first" >&2; exit 1; }

shapes=(
    "--layers 2 --channels 64 --heads 4 --seq 64 --micro-batch 8"
    "--layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8" # the default
    "--layers 6 --channels 256 --heads 8 --seq 128 --micro-batch 8"
    "--layers 8 --channels 512 --heads 8 --seq 128 --micro-batch 4"
)
printf '| %-62s | %7s | %10s | %8s | %11s |\n' shape threads parameters tok/s "ms/step"
printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..64})" "---------" "------------" \
    "----------" "-------------"
for shape in "${shapes[@]}"; do
    for threads in 1 2; do
        # shellcheck disable=SC2086
        out=$(timeout 600 "$bin" $shape --steps "$steps" --threads "$threads" 2>"$build/.bench_err")
        params=$(sed -n 's/^train_gpt: \([0-9]*\) parameters.*/\1/p' "$build/.bench_err")
        toks=$(echo "$out" | awk 'NR > 2 { print $6 }' | sort -n)
        n=$(echo "$toks" | wc -l)
        median=$(echo "$toks" | sed -n "$(((n + 1) / 2))p")
        # tokens per step = micro-batch x seq
        mb=$(echo "$shape" | sed 's/.*--micro-batch \([0-9]*\).*/\1/')
        seq=$(echo "$shape" | sed 's/.*--seq \([0-9]*\).*/\1/')
        ms=$(awk -v t="$((mb * seq))" -v r="$median" 'BEGIN { printf "%.1f", 1000 * t / r }')
        printf '| %-62s | %7s | %10s | %8s | %11s |\n' "$shape" "$threads" "$params" "$median" "$ms"
    done
done
rm -f "$build/.bench_err"
