#!/usr/bin/env bash
# The planner's search times (docs/plan.md, issue 17 item 4): plan_gpt's
# fast search for 16,384 ranks and 128 layers (goal: under 1 s) and its
# exhaustive search for 1,024 ranks (goal: under 10 s), with the default
# cluster (80 GiB per rank), bf16. Each case runs REPEAT times; the table
# gives the least and the median wall time of the whole process, the plans
# found, the layouts left out, and the best plan.
#
# usage: bench/plan/search_time.sh [BUILD_DIR] [REPEAT]
# Prints a markdown table.
set -euo pipefail
build=${1:-build}
repeat=${2:-5}
bin="$build/bin"
[[ -x "$bin/plan_gpt" ]] || { echo "no $bin/plan_gpt: build first" >&2; exit 1; }
out=$(mktemp)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -f "$out"; }' EXIT

# Narayanan et al. (2021)'s 1T model (128 layers) and GPT-3 175B (96 layers)
t1=(--layers 128 --channels 25600 --heads 160 --seq 2048 --vocab 51200 --precision bf16)
g3=(--layers 96 --channels 12288 --heads 96 --seq 2048 --vocab 51200 --precision bf16)

now() { date +%s.%N; }

echo "| model | ranks | batch | search | least s | median s | found | invalid | over memory | best plan | step ms |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|---|---:|"
run() { # run NAME WORLD BATCH MODE MODEL...
    local name=$1 world=$2 batch=$3 mode=$4
    shift 4
    local times=()
    for ((i = 0; i < repeat; i++)); do
        local t0 t1
        t0=$(now)
        "$bin/plan_gpt" "$@" --world "$world" --global-batch "$batch" --search "$mode" \
            --format kv --top 1 >"$out"
        t1=$(now)
        times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
    done
    local sorted least median
    sorted=$(printf '%s\n' "${times[@]}" | sort -g)
    least=$(head -1 <<<"$sorted")
    median=$(sed -n "$(((repeat + 1) / 2))p" <<<"$sorted")
    local s p
    s=$(grep '^search ' "$out")
    p=$(grep '^plan ' "$out")
    get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
    local best
    best="dp $(get dp "$p") tp $(get tp "$p") pp $(get pp "$p") $(get schedule "$p")"
    best+=" v$(get virtual_stages "$p") mb $(get micro_batch "$p") $(get recompute "$p")"
    best+=" zero $(get zero "$p")"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f |\n' "$name" "$world" \
        "$batch" "$mode" "$least" "$median" "$(get found "$s")" "$(get invalid "$s")" \
        "$(get over_memory "$s")" "$best" "$(get step_ms "$p")"
}
run "1T, 128 layers" 16384 4096 fast "${t1[@]}"
run "1T, 128 layers" 1024 1024 fast "${t1[@]}"
run "1T, 128 layers" 1024 1024 exhaustive "${t1[@]}"
run "175B, 96 layers" 1024 1536 fast "${g3[@]}"
run "175B, 96 layers" 1024 1536 exhaustive "${g3[@]}"
