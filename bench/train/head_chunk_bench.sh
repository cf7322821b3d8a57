#!/bin/bash
# The chunked head (train_gpt --head-chunk) against the whole head, one
# process pinned to one core, on a model whose head dominates its memory
# (a Llama-sized vocabulary of 32,000 on a small model): for each chunk,
# the step time (median over ROUNDS runs, the configurations alternating),
# the process's peak RSS, the work space and activations train_gpt
# --report counts, and the last step's loss.
#   bench/train/head_chunk_bench.sh [BUILD] [CORE] [CHUNKS] [-- TRAIN_GPT_ARGS...]
# (BUILD defaults to build, CORE to 0, CHUNKS to 0,32000,8192,4096,1024:
# 0 is the whole head, 32000 one chunk; ROUNDS=3 and STEPS=4 in the
# environment; TRAIN_GPT_ARGS replace the model and batch below)
set -euo pipefail
build=${1:-build}
core=${2:-0}
chunks=${3:-0,32000,8192,4096,1024}
shift $(($# < 3 ? $# : 3))
[[ ${1:-} != -- ]] || shift
model=(--vocab 32000 --layers 2 --channels 256 --heads 4 --seq 256 --micro-batch 4)
(($# == 0)) || model=("$@")
rounds=${ROUNDS:-3}
steps=${STEPS:-4}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
IFS=, read -r -a hcs <<<"$chunks"
echo "core $core: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); train_gpt ${model[*]}" \
    "--steps $steps; $rounds rounds"
for ((r = 0; r < rounds; r++)); do
    for hc in "${hcs[@]}"; do
        out=$work/$hc.$r
        timeout 600 taskset -c "$core" /usr/bin/time -f "maxrss %M" "$build/bin/train_gpt" \
            "${model[@]}" --steps "$steps" --head-chunk "$hc" --report >"$out" 2>&1 ||
            { echo "train_gpt --head-chunk $hc failed: $(tail -3 "$out")"; exit 1; }
    done
done
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo
echo "| head chunk | ms/step (median) | peak RSS MiB | work MiB | activations MiB | last loss |"
echo "|---|---:|---:|---:|---:|---:|"
for hc in "${hcs[@]}"; do
    ms=$(for ((r = 0; r < rounds; r++)); do
        sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$work/$hc.$r"
    done | median)
    rss=$(sed -n 's/^maxrss \([0-9]*\)/\1/p' "$work/$hc.0")
    wb=$(sed -n 's/.*; work \([0-9]*\) bytes;.*/\1/p' "$work/$hc.0")
    # the mp runtime's peak; the whole model's table is the rest of its RSS
    acts=$(sed -n 's/.*activations peak \([0-9]*\) bytes.*/\1/p' "$work/$hc.0")
    loss=$(grep "^step $steps " "$work/$hc.0" | awk '{print $4}')
    name=$hc
    [[ $hc != 0 ]] || name="0 (whole)"
    awk -v n="$name" -v ms="$ms" -v rss="$rss" -v wb="$wb" -v a="${acts:-}" -v l="$loss" \
        'BEGIN {printf "| %s | %.1f | %.1f | %.1f | %s | %s |\n", n, ms, rss / 1024, wb / 1048576,
                a == "" ? "(whole model)" : sprintf("%.1f", a / 1048576), l}'
done
