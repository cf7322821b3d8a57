#!/usr/bin/env bash
# Checkpoints under a real memory limit (issue 45's "checkpoints and resume
# work with offload on"): cgroup_dp_bench.sh's job (RANKS ranks, each in a
# memory cgroup limited to a quarter of the model's full training state)
# with the parameters, the moments and the gradient shard on disk
# (--offload params=disk:DIR,optimizer=disk:DIR,grads=disk:DIR), trained
# STEPS steps with a checkpoint saved at the last, then resumed for one
# more step from the checkpoint that the same run without a limit saved
# (so a resume is measured even when the limited save is killed). Each
# row prints the exit status and every rank's cgroup peak: a save or a
# resume that brings the offloaded state back into memory is killed by
# the limit (exit 137). The rows without a limit give the peak RSS a save
# and a resume need.
#
# usage: bench/offload/cgroup_ckpt_bench.sh [BUILD_DIR] [DIR] [STEPS] [RANKS] [MODEL ARGS...]
#   as cgroup_dp_bench.sh (ZERO="2 3": the stages to run); DIR also holds
#   the checkpoints.
# Prints a table; docs/performance.md "A quarter of the state per rank" has
# results.
set -euo pipefail
here=$(dirname "$0")
build=${1:-build}
dir=${2:-}
steps=${3:-2}
ranks=${4:-2}
shift $(($# < 4 ? $# : 4))
model=("$@")
[[ ${#model[@]} -gt 0 ]] ||
    model=(--layers 24 --channels 512 --heads 8 --seq 64 --micro-batch 2 --recompute full --bucket-mb 1)
[[ $steps =~ ^[0-9]+$ && $steps -ge 1 ]] || { echo "STEPS '$steps' is not an integer >= 1" >&2; exit 2; }
[[ $ranks =~ ^[2-4]$ ]] || { echo "RANKS '$ranks' is not 2, 3 or 4" >&2; exit 2; }
zeros=${ZERO:-2 3}
for z in $zeros; do
    [[ $z == 2 || $z == 3 ]] || { echo "ZERO='$zeros': each stage must be 2 or 3" >&2; exit 2; }
done
# shellcheck source=bench/offload/cgroup_job.sh
source "$here/cgroup_job.sh"
cgroup_job_start ckpt ck ck0

# job LIMIT ARGS...: train_gpt on $ranks ranks, each in a cgroup of LIMIT
# bytes (0: none); prints "exit peaks rss-max" (peaks: every rank's cgroup
# peak in MB, joined by /; - without a limit)
job() {
    local limit=$1 rc=0 r peaks="" rss launch=()
    shift
    if [[ $limit -gt 0 ]]; then
        for ((r = 0; r < ranks; r++)); do cg_make "$cg-rank$r" "$limit"; done
        launch=("$here/cgroup_rank.sh" "$cg")
    fi
    timeout -k 5 1200 "$msrun" --worker_num="$ranks" --local_worker_num="$ranks" --job_id="$job" \
        "${launch[@]}" "$bin" "${model[@]}" --report "$@" >"$tmp/out" 2>&1 || rc=$?
    for ((r = 0; r < ranks && limit > 0; r++)); do
        peaks+=$(awk -v p="$(cat "$cg-rank$r/$cg_peak_file")" 'BEGIN { printf "%.1f", p / 1e6 }')
        [[ $r -eq $((ranks - 1)) ]] || peaks+=/
        rmdir "$cg-rank$r"
    done
    rss=$(sed -n 's/.*peak RSS \([0-9]*\) KiB.*/\1/p' "$tmp/out" | sort -n | tail -1)
    [[ -n "$rss" ]] && rss=$(awk -v k="$rss" 'BEGIN { printf "%.1f", k * 1024 / 1e6 }')
    echo "$rc ${peaks:--} ${rss:--}"
}
"$bin" "${model[@]}" --steps 0 >/dev/null 2>"$tmp/err" ||
    { echo "train_gpt ${model[*]}: $(tail -3 "$tmp/err")" >&2; exit 1; }
P=$(sed -n 's/^train_gpt: model of \([0-9]*\) parameters.*/\1/p' "$tmp/err")
limit=$((16 * P / 4))
awk -v P="$P" -v n="$ranks" -v L="$limit" 'BEGIN {
    printf "model: %d parameters, full training state %.1f MB; %d ranks, each limited to %.1f MB (a quarter)\n",
        P, 16 * P / 1e6, n, L / 1e6 }'
printf '| %4s | %-14s | %8s | %-15s | %-23s | %11s |\n' zero run limit exit "cgroup peak MB per rank" \
    "peak RSS MB"
printf '|------|----------------|----------|-----------------|-------------------------|-------------|\n'
off=(--offload "params=disk:$dir,optimizer=disk:$dir,grads=disk:$dir" --offload-chunk 1048576)
# row Z RUN LIMIT RC PEAKS RSS
row() {
    local what="-"
    [[ $3 -eq 0 ]] || what=$(awk -v l="$3" 'BEGIN { printf "%.1f MB", l / 1e6 }')
    printf '| %4s | %-14s | %8s | %-15s | %-23s | %11s |\n' "$1" "$2" "$what" "$4" "$5" "$6"
}
# the checkpoint of step $steps: saved by the unlimited run, kept in
# ck0 so that the limited resume starts from it even when the limited
# save was killed
for z in $zeros; do
    for lim in 0 "$limit"; do
        rm -rf "$dir/ck"
        read -r rc peaks rss < <(job "$lim" --zero "$z" "${off[@]}" --steps "$steps" \
            --ckpt-every "$steps" --ckpt-dir "$dir/ck")
        row "$z" "train + save" "$lim" "$rc" "$peaks" "$rss"
        if [[ $lim -eq 0 ]]; then
            [[ $rc -eq 0 ]] || { echo "zero $z: $(tail -3 "$tmp/out")" >&2; exit 1; }
            rm -rf "$dir/ck0"
            cp -r "$dir/ck" "$dir/ck0"
        fi
        rm -rf "$dir/ck"
        cp -r "$dir/ck0" "$dir/ck"
        read -r rc peaks rss < <(job "$lim" --zero "$z" "${off[@]}" --steps $((steps + 1)) \
            --ckpt-every "$steps" --ckpt-dir "$dir/ck" --resume)
        grep -q "resumed from step $steps" "$tmp/out" || rc="$rc, no resume"
        row "$z" "resume + 1" "$lim" "$rc" "$peaks" "$rss"
    done
done
