#!/usr/bin/env bash
# Data parallel under a real memory limit (issue 45 point 4): a job of
# RANKS ranks under msrun, each worker moved into a memory cgroup of its own
# (cgroup_rank.sh) whose limit is a quarter of the model's full training
# state (16 bytes a parameter in fp32: parameters, gradients, m and v) per
# rank. For ZeRO 2 and 3 the job runs in memory (stopped by the limit) and
# with the blocks' parameters and the moments on disk (--offload
# params=disk:DIR,optimizer=disk:DIR); each row prints every rank's cgroup
# peak, the step time and the bound: max(compute: the in-memory step
# without a limit, the offloaded bytes of every rank over the disk's read
# and write bandwidth, measured by dd in the same run: the more of one dd
# and of one dd a rank at once, each on a file of its own).
#
# usage: bench/offload/cgroup_dp_bench.sh [BUILD_DIR] [DIR] [STEPS] [RANKS] [MODEL ARGS...]
#   DIR: the files' directory, on the disk to measure (default: a new one
#   under $TMPDIR); RANKS: 2 to 4 (2); ZERO="2 3": the stages to run.
#   The default model (75.8 M parameters) runs under full recompute with
#   1 MiB buckets and 1 MiB chunks of the moments: a rank's gradient shard
#   (4 bytes a parameter over dp) stays resident, so what else it keeps
#   (block inputs, buckets, buffers) must fit in the rest of the quarter.
#   ACTS=1: a row per stage with the block inputs on disk too
#   (activations=disk:DIR; needs --recompute full in the model's options).
#   GRADS=1: a row per stage with the gradient shard on disk too
#   (grads=disk:DIR): what a rank then keeps of its gradients is a chunk.
#   EP=N: the expert-parallel degree of a MoE model (--experts E in the
#   model's options, GPT): their parameters go to a file of their own
#   beside the blocks' (under ZeRO 3 with replicas, EP < RANKS, each
#   rank's shares of them); under GRADS their gradients go to a file
#   too (under ZeRO 3 with replicas each rank's shares of the replicas'
#   sums).
# Prints a table; docs/performance.md "A quarter of the state per rank" has
# results.
set -euo pipefail
here=$(dirname "$0")
build=${1:-build}
dir=${2:-}
steps=${3:-4}
ranks=${4:-2}
shift $(($# < 4 ? $# : 4))
model=("$@")
[[ ${#model[@]} -gt 0 ]] ||
    model=(--layers 24 --channels 512 --heads 8 --seq 64 --micro-batch 2 --recompute full --bucket-mb 1)
[[ $steps =~ ^[0-9]+$ && $steps -ge 2 ]] || { echo "STEPS '$steps' is not an integer >= 2" >&2; exit 2; }
[[ $ranks =~ ^[2-4]$ ]] || { echo "RANKS '$ranks' is not 2, 3 or 4" >&2; exit 2; }
zeros=${ZERO:-2 3}
modes="memory disk"
case ${ACTS:-0} in 0) ;; 1) modes+=" disk+acts" ;; *) echo "ACTS='$ACTS' is not 0 or 1" >&2; exit 2 ;; esac
case ${GRADS:-0} in 0) ;; 1) modes+=" disk+grads" ;; *) echo "GRADS='$GRADS' is not 0 or 1" >&2; exit 2 ;; esac
ep=${EP:-1}
[[ $ep =~ ^[1-4]$ && $((ranks % ep)) -eq 0 ]] || { echo "EP '$ep' does not divide RANKS $ranks" >&2; exit 2; }
for z in $zeros; do
    [[ $z == 2 || $z == 3 ]] || { echo "ZERO='$zeros': each stage must be 2 or 3" >&2; exit 2; }
done
# shellcheck source=bench/offload/cgroup_job.sh
source "$here/cgroup_job.sh"
cgroup_job_start dp dd.bin dd0.bin dd1.bin dd2.bin dd3.bin

# job LIMIT ARGS...: train_gpt on $ranks ranks, each in a cgroup of LIMIT
# bytes (0: none); output in $tmp/out; prints "exit ms/step peaks rss-max"
# (peaks: every rank's cgroup peak in MB, joined by /; - without a limit)
job() {
    local limit=$1 rc=0 r peaks="" ms rss launch=()
    shift
    if [[ $limit -gt 0 ]]; then
        for ((r = 0; r < ranks; r++)); do cg_make "$cg-rank$r" "$limit"; done
        launch=("$here/cgroup_rank.sh" "$cg")
    fi
    timeout -k 5 1200 "$msrun" --worker_num="$ranks" --local_worker_num="$ranks" --job_id="$job" \
        "${launch[@]}" "$bin" "${model[@]}" --steps "$steps" --report "$@" >"$tmp/out" 2>&1 || rc=$?
    for ((r = 0; r < ranks && limit > 0; r++)); do
        peaks+=$(awk -v p="$(cat "$cg-rank$r/$cg_peak_file")" 'BEGIN { printf "%.1f", p / 1e6 }')
        [[ $r -eq $((ranks - 1)) ]] || peaks+=/
        rmdir "$cg-rank$r"
    done
    ms=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/out")
    rss=$(sed -n 's/.*peak RSS \([0-9]*\) KiB.*/\1/p' "$tmp/out" | sort -n | tail -1)
    echo "$rc ${ms:--} ${peaks:--} ${rss:--}"
}
# the model's shape, from train_gpt's first line
"$bin" "${model[@]}" --steps 0 >/dev/null 2>"$tmp/err" ||
    { echo "train_gpt ${model[*]}: $(tail -3 "$tmp/err")" >&2; exit 1; }
read -r P L C T < <(sed -n 's/^train_gpt: model of \([0-9]*\) parameters (layers \([0-9]*\) channels \([0-9]*\) heads [0-9]* seq \([0-9]*\)).*/\1 \2 \3 \4/p' "$tmp/err")
state=$((16 * P))
limit=$((state / 4))
# an option's value in the model's options (its default when absent)
opt() { awk -v o="$1" -v d="$2" '{ for (i = 1; i < NF; i++) if ($i == o) v = $(i + 1) } END { print v != "" ? v : d }' <<<"${model[*]}"; }
# a block input: micro-batch x seq x channels floats
mbatch=$(opt --micro-batch 8)
# a MoE model (GPT): every --moe-every-th block's MLP is E experts of 8C^2 +
# 5C parameters each, E / ep of them on a rank (EP); such a block keeps 4C^2 + 8C
# + EC (attention, the norms, the router), a dense one 12C^2 + 13C
E=$(opt --experts 0) every=$(opt --moe-every 1)
nmoe=0 eper=0 Pe=0
if [[ $E -gt 0 ]]; then
    nmoe=$((L / every)) eper=$((E / ep * (8 * C * C + 5 * C))) Pe=$((L / every * E * (8 * C * C + 5 * C)))
    blk=$((4 * C * C + 8 * C + E * C))
    [[ $every -eq 1 || $blk -ge $((12 * C * C + 13 * C)) ]] || blk=$((12 * C * C + 13 * C))
else
    blk=$(((P - (256 + T + 2) * C) / L)) # one block's parameters (a byte vocabulary)
fi
# ZERO MODE [ACCUM]: every rank's bytes read and written a step, "read
# write": each block read by each micro-batch's forward and backward and
# by the update, written by the update, and the moments' shard (8 bytes a
# parameter) read and written once; the gradient shard (disk+grads, ACCUM
# micro-batches a step) is written by each micro-batch, read back by each
# after the first (to add to), by the norm and by the update. A MoE
# model's experts: their moments (under ZeRO the share of each of the
# ranks holding the same experts), their parameters read and written as
# a block's (under ZeRO 3 with replicas each rank's share of a MoE block:
# an upper bound there, as a pass's blocks still gathered are not read
# again), and under disk+grads their gradients (or shares) read and
# written back around each backward and read by the norm and the update
# (under ZeRO 2 with replicas the norm's read is the reduce of the owned
# parts, which writes back the blocks a rank owns a part of, the only
# ones its update reads: owned_blocks)
# owned_blocks REPS: the MoE blocks the ranks of a replica group own a
# part of, summed over the group (a replica's block of the experts,
# ceil(nmoe x eper / REPS) elements, spans these)
owned_blocks() {
    local reps=$1 n=$((nmoe * eper)) z lo hi r sum=0
    z=$(((n + reps - 1) / reps))
    for ((r = 0; r < reps; r++)); do
        lo=$((r * z < n ? r * z : n)) hi=$((r * z + z < n ? r * z + z : n))
        [[ $hi -le $lo ]] || sum=$((sum + (hi - 1) / eper - lo / eper + 1))
    done
    echo "$sum"
}
io_bytes() {
    local share=$blk shard=$(((P - Pe + ranks - 1) / ranks)) acts=0 grd=0 grw=0 m=${3:-1}
    local reps=$((ranks / ep)) em=$((nmoe * eper)) er=0 ew=0 eshare=$eper own=0
    [[ $1 -lt 3 ]] || share=$(((blk + ranks - 1) / ranks))
    [[ $1 -lt 3 || $reps -eq 1 ]] || eshare=$(((eper + reps - 1) / reps))
    [[ $2 != disk+acts ]] || acts=$((L * ((4 * mbatch * T * C + 4095) / 4096 * 4096)))
    [[ $2 != disk+grads ]] || grd=$(((m + 1) * 4 * shard)) grw=$((m * 4 * shard))
    local b=$(((4 * share + 4095) / 4096 * 4096)) es=$(((4 * eshare + 4095) / 4096 * 4096))
    if [[ $E -gt 0 ]]; then
        er=$((8 * ((em + reps - 1) / reps) + nmoe * es * (2 * m + 1)))
        ew=$((8 * ((em + reps - 1) / reps) + nmoe * es))
        if [[ $2 == disk+grads && ($1 -ge 3 || $reps -eq 1) ]]; then
            er=$((er + nmoe * es * (m + 2))) ew=$((ew + nmoe * es * m))
        elif [[ $2 == disk+grads ]]; then # the update's reads, the reduce's writes
            er=$((er + nmoe * es * (m + 1))) ew=$((ew + nmoe * es * m))
            own=$((ep * $(owned_blocks "$reps") * es))
        fi
    fi
    echo "$((ranks * ((2 * m + 1) * L * b + 8 * shard + acts + grd + er) + own))" \
        "$((ranks * (L * b + 8 * shard + acts + grw + ew) + own))"
}
read -r most _ < <(io_bytes 2 disk+acts)
read -r most_g _ < <(io_bytes 2 disk+grads 2)
[[ $most_g -le $most ]] || most=$most_g
mb=$(((most + 4194303) / 4194304))
dd_s() { sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p'; }
w_s=$(dd if=/dev/zero of="$dir/dd.bin" bs=4M count="$mb" oflag=direct conv=fsync 2>&1 | dd_s)
r_s=$(dd if="$dir/dd.bin" of=/dev/null bs=4M iflag=direct 2>&1 | dd_s)
rm -f "$dir/dd.bin"
wbw1=$(awk -v b="$((mb * 4194304))" -v s="$w_s" 'BEGIN { printf "%.0f", b / s }')
rbw1=$(awk -v b="$((mb * 4194304))" -v s="$r_s" 'BEGIN { printf "%.0f", b / s }')
# the same bytes as one dd a rank at once, each with a file of its own (as
# the ranks' stores are): bytes over the wall time of them all
per=$(((mb + ranks - 1) / ranks))
dd_all() { # dd_all w|r: the wall seconds of $ranks dd's at once
    local t0 r
    t0=$(date +%s.%N)
    for ((r = 0; r < ranks; r++)); do
        if [[ $1 == w ]]; then
            dd if=/dev/zero of="$dir/dd$r.bin" bs=4M count="$per" oflag=direct conv=fsync 2>/dev/null &
        else
            dd if="$dir/dd$r.bin" of=/dev/null bs=4M iflag=direct 2>/dev/null &
        fi
    done
    wait
    awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }'
}
wn_s=$(dd_all w)
rn_s=$(dd_all r)
for ((r = 0; r < ranks; r++)); do rm -f "$dir/dd$r.bin"; done
wbwn=$(awk -v b="$((ranks * per * 4194304))" -v s="$wn_s" 'BEGIN { printf "%.0f", b / s }')
rbwn=$(awk -v b="$((ranks * per * 4194304))" -v s="$rn_s" 'BEGIN { printf "%.0f", b / s }')
# the disk's own bandwidth: the more it gave, one stream or one a rank
wbw=$((wbw1 > wbwn ? wbw1 : wbwn))
rbw=$((rbw1 > rbwn ? rbw1 : rbwn))
awk -v P="$P" -v S="$state" -v L="$limit" -v n="$ranks" -v w="$wbw" -v r="$rbw" 'BEGIN {
    printf "model: %d parameters, full training state %.1f MB; %d ranks, each limited to %.1f MB (a quarter)\n",
        P, S / 1e6, n, L / 1e6
    printf "disk (dd, direct, 4 MiB blocks): write %.0f MB/s, read %.0f MB/s (the more of one dd and one a rank at once:\n", w / 1e6, r / 1e6 }'
awk -v w1="$wbw1" -v r1="$rbw1" -v wn="$wbwn" -v rn="$rbwn" -v n="$ranks" 'BEGIN {
    printf "  one: write %.0f, read %.0f; %d at once: write %.0f, read %.0f)\n", w1 / 1e6, r1 / 1e6, n, wn / 1e6, rn / 1e6 }'
[[ $E -eq 0 ]] || echo "experts: $E in each of $nmoe MoE blocks ($Pe parameters), $((E / ep)) a rank (ep $ep)"
printf '| %4s | %-10s | %4s | %9s | %-23s | %12s | %8s | %8s | %7s | %10s | %9s |\n' zero mode exit \
    "ms/step" "cgroup peak MB per rank" "peak RSS MB" "I/O ms" "bound ms" "x bound" "overlap ms" "x overlap"
printf '|------|------------|------|-----------|-------------------------|--------------|----------|----------|---------|------------|-----------|\n'
off="params=disk:$dir,optimizer=disk:$dir"
computes=""
for z in $zeros; do
    read -r rc_free ms_free _ _ < <(job 0 --zero "$z" --ep "$ep")
    [[ $rc_free -eq 0 && $ms_free != - ]] ||
        { echo "zero $z without a limit failed ($rc_free): $(tail -3 "$tmp/out")" >&2; exit 1; }
    accum=$(sed -n 's/.* x accum \([0-9]*\) x dp.*/\1/p' "$tmp/out" | head -1)
    computes+="zero $z $ms_free ms; "
    for mode in $modes; do
        read -r rd wr < <(io_bytes "$z" "$mode" "${accum:-1}")
        io=$(awk -v rd="$rd" -v wr="$wr" -v r="$rbw" -v w="$wbw" 'BEGIN { printf "%.1f", 1000 * (rd / r + wr / w) }')
        # the reads and the writes at once, each at its own rate
        ov=$(awk -v rd="$rd" -v wr="$wr" -v r="$rbw" -v w="$wbw" 'BEGIN { a = rd / r; b = wr / w; printf "%.1f", 1000 * (a > b ? a : b) }')
        args=(--zero "$z" --ep "$ep")
        [[ $mode != disk ]] || args+=(--offload "$off" --offload-chunk 1048576)
        [[ $mode != disk+acts ]] || args+=(--offload "$off,activations=disk:$dir" --offload-chunk 1048576)
        [[ $mode != disk+grads ]] || args+=(--offload "$off,grads=disk:$dir" --offload-chunk 1048576)
        read -r rc ms peaks rss < <(job "$limit" "${args[@]}")
        [[ $rc -eq 0 || $mode == memory ]] || echo "zero $z on disk: $(grep -i 'error\|killed\|exit' "$tmp/out" | tail -3)" >&2
        awk -v z="$z" -v m="$mode" -v rc="$rc" -v ms="$ms" -v p="$peaks" -v rss="$rss" -v c="$ms_free" \
            -v io="$io" -v ov="$ov" 'BEGIN { b = c > io ? c : io; mio = m != "memory" ? sprintf("%.1f", io) : "-"
            bo = c > ov ? c : ov
            r = rss == "-" ? "-" : sprintf("%.1f", rss * 1024 / 1e6)
            x = ms == "-" ? "-" : sprintf("%.2f", ms / b); t = ms == "-" ? "-" : sprintf("%.1f", ms)
            xo = ms == "-" ? "-" : sprintf("%.2f", ms / bo)
            printf "| %4s | %-10s | %4s | %9s | %-23s | %12s | %8s | %8.1f | %7s | %10.1f | %9s |\n",
                z, m, rc, t, p, r, mio, b, x, bo, xo }'
    done
done
echo "compute (in memory, no limit): ${computes%; }"
echo "bound: max(compute: the in-memory step without a limit ($steps steps, the mean after the first), the I/O:"
echo "  the bytes read over the read rate plus the bytes written over the write rate)"
echo "overlap: max(compute, the longer of the reads and the writes, each at its rate: a disk that serves both at once)"
