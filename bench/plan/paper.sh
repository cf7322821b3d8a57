#!/usr/bin/env bash
# The planner at paper scale (docs/plan.md "Paper scale"): the GPT models of
# Table 1 of Narayanan et al. (2021, Megatron-LM on up to 3072 A100 80 GB,
# 8 per node; vocabulary 51200, sequence 2048), each planned for the paper's
# GPU count and global batch on bench/plan/a100.cluster in bf16, beside the
# tensor and pipeline sizes the paper used and the throughput per GPU it
# measured. For each model, the paper's own layout is planned too (--fix
# tp=..,pp=..), so the table shows what the model predicts for it.
#
# usage: bench/plan/paper.sh [BUILD_DIR] [--explain]
# With --explain, each model's first plan is broken down (plan_gpt --explain).
set -euo pipefail
build=${1:-build}
explain=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
plan="$build/bin/plan_gpt"
[[ -x $plan ]] || { echo "no $plan: build first" >&2; exit 1; }
# params(B) heads hidden layers tp pp gpus batch tflops_per_gpu
table="1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008.0 160 25600 128 8 64 3072 3072 163"

# field NAME LINE: a kv line's value
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

printf '| %-7s | %5s | %6s | %-28s | %9s | %9s | %-22s | %9s | %9s | %8s |\n' params GPUs batch \
    "plan: dp tp pp sp zero rc sched" "GiB/GPU" "TFLOP/s" "paper: tp pp" "TFLOP/s" \
    "paper's" "search s"
echo '|---------|-------|--------|------------------------------|-----------|-----------|------------------------|-----------|-----------|----------|'
while read -r params heads hidden layers tp pp gpus batch tflops; do
    model=(--layers "$layers" --channels "$hidden" --heads "$heads" --seq 2048 --vocab 51200
        --global-batch "$batch" --world "$gpus" --precision bf16 --cluster "$here/a100.cluster")
    start=$(date +%s.%N)
    best=$("$plan" "${model[@]}" --search fast --top 1 --format kv | grep '^plan ' || true)
    end=$(date +%s.%N)
    theirs=$("$plan" "${model[@]}" --search fast --top 1 --format kv --fix "tp=$tp,pp=$pp" |
        grep '^plan ' || true)
    secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }')
    if [[ -z $best ]]; then
        printf '| %-7s | %5s | %6s | %-28s | %9s | %9s | %-22s | %9s | %9s | %8s |\n' "${params}B" \
            "$gpus" "$batch" "(none fits)" "" "" "$tp $pp" "$tflops" "" "$secs"
        continue
    fi
    lay="$(field dp "$best") $(field tp "$best") $(field pp "$best") $(field sp "$best") $(field zero "$best") $(field recompute "$best") $(field schedule "$best")/$(field virtual_stages "$best")"
    gib=$(awk -v b="$(field peak_bytes "$best")" 'BEGIN { printf "%.1f", b / 2^30 }')
    mine=$(field tflops_per_rank "$best")
    theirs_tf=$([[ -n $theirs ]] && field tflops_per_rank "$theirs" || echo "(over memory)")
    printf '| %-7s | %5s | %6s | %-28s | %9s | %9s | %-22s | %9s | %9s | %8s |\n' "${params}B" "$gpus" \
        "$batch" "$lay" "$gib" "$mine" "$tp $pp" "$tflops" "$theirs_tf" "$secs"
    if [[ $explain == --explain ]]; then
        echo
        "$plan" "${model[@]}" --search fast --explain 1 | sed 's/^/    /'
        echo
    fi
done <<<"$table"
