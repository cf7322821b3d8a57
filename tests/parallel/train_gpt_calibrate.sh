#!/usr/bin/env bash
# train_gpt --calibrate: under msrun with 2 ranks it writes a cluster file
# with every key, positive rates, ranks_per_node the launcher's local world
# size, the latency and the bandwidth inside the node measured and the one
# between nodes (one node here) commented out as not measured; alone it
# measures the kernels and marks the communication as not measured; a path
# that cannot be written is one line and exit status 2, alone and under
# msrun, and leaves no file. With --offload-dir the disk's rates are
# measured there (positive, the directory left empty), without it marked
# not measured; a directory that is not there is refused the same way. A
# Llama's calibration times its own kernels (its file and cache key name
# them) and its rates are sane. The run under msrun is a Llama's, so that
# one calibration of 2 ranks (seconds of measuring) checks both; a GPT's
# kernels are calibrated alone and for --plan.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 2 --channels 32 --heads 2 --seq 16 --micro-batch 4)
mb=4 seq=16 # of small
# a Llama of small's micro-batch and sequence
llama=(--arch llama --layers 2 --channels 128 --heads 4 --kv-heads 2 --ffn 344 --seq 16 --micro-batch 4)

msrun_n() { # msrun_n N ARGS... (PIN: a command to run msrun under)
    local n=$1 job=calib-$$-$RANDOM
    shift
    jobs_started+=("$job")
    timeout -k 5 60 ${PIN:-} "${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "$@"
}

# value KEY FILE: the key's value on an uncommented line, or nothing
value() { sed -n "s/^$1 = \\([^ ]*\\)\$/\\1/p" "$2"; }
positive() { # positive KEY FILE
    local v
    v=$(value "$1" "$2")
    [[ -n "$v" ]] || fail "$2: no $1: $(cat "$2")"
    awk -v v="$v" 'BEGIN { exit !(v + 0 > 0 && v == v + 0) }' || fail "$2: $1 = $v, not positive"
}

# 2 ranks on one core (so that one computes while the other waits)
core=$(python3 -c 'import os; print(min(os.sched_getaffinity(0)))')
mkdir "$work/disk"
PIN="taskset -c $core" msrun_n 2 "${llama[@]}" --calibrate "$work/c2" --offload-dir "$work/disk" \
    >"$work/out" 2>"$work/err" || fail "--calibrate under msrun: $(tail -5 "$work/err")"
[[ ! -s "$work/out" ]] || fail "--calibrate printed on stdout: $(cat "$work/out")"
grep -q "train_gpt: calibrated 2 ranks in .* TFLOP/s.*latency .* us, .* GB/s inside a node, the offload directory .* GB/s read, .* write; wrote" \
    "$work/err" || fail "no summary line: $(cat "$work/err")"
[[ $(value ranks_per_node "$work/c2") == 2 ]] || fail "ranks_per_node: $(cat "$work/c2")"
for k in mem_gib peak_tflops attn_tflops ring_tflops intra_gbs latency_us mem_gbs act_gbs kernel_us cores_per_node disk_read_gbs disk_write_gbs; do positive $k "$work/c2"; done
[[ -z "$(ls -A "$work/disk")" ]] || fail "--calibrate left files in the offload directory: $(ls -A "$work/disk")"
# the file is a cluster file the planner reads
"$bin/plan_gpt" --arch llama --layers 2 --channels 128 --heads 4 --kv-heads 2 --ffn 344 --seq 16 \
    --world 2 --global-batch 8 --cluster "$work/c2" --top 1 >"$work/plan" 2>&1 ||
    fail "plan_gpt --arch llama --cluster of --calibrate's file: $(cat "$work/plan")"
grep -q "^# inter_gbs = .*(not measured: one node)" "$work/c2" ||
    fail "inter_gbs not marked unmeasured: $(cat "$work/c2")"
[[ $(value cores_per_node "$work/c2") == 1 ]] || fail "cores_per_node: $(cat "$work/c2")"
# the share of the waiting rank's core the computing one got: 0 to 1
lend=$(value idle_lend "$work/c2")
awk -v v="$lend" 'BEGIN { exit !(v == v + 0 && v >= 0 && v <= 1) }' ||
    fail "idle_lend = '$lend': $(cat "$work/c2")"
# a ring step's hand-off beyond its work: a number, 0 or more
hand=$(value ring_step_us "$work/c2")
awk -v v="$hand" 'BEGIN { exit !(v == v + 0 && v >= 0) }' ||
    fail "ring_step_us = '$hand': $(cat "$work/c2")"
# every line a comment or one of the cluster file's keys
bad=$(grep -Ev '^(#.*|(ranks_per_node|mem_gib|peak_tflops|intra_gbs|latency_us|mem_gbs|act_gbs|kernel_us|cores_per_node|mm_rows|mm_rows_half|attn_tflops|ring_tflops|ring_chunk|ring_chunk_half|cold_ms_per_mib|cold_from_mib|cold_full_mib|idle_lend|ring_step_us|disk_read_gbs|disk_write_gbs) = [0-9.e+-]+)$' \
    "$work/c2" || true)
[[ -z "$bad" ]] || fail "unexpected lines: $bad"

# the matmuls' rows: one micro-batch's (small's micro-batch x seq); the
# half-rate rows a number, 0 or more
rows=$(value mm_rows "$work/c2")
[[ $rows == $((mb * seq)) ]] || fail "mm_rows = $rows, want $((mb * seq)): $(cat "$work/c2")"
half=$(value mm_rows_half "$work/c2")
awk -v v="$half" 'BEGIN { exit !(v == v + 0 && v + 0 >= 0) }' || fail "mm_rows_half = '$half'"
# the ring's chunk: a quarter of the sequence; its half-rate chunk 0 or more
[[ $(value ring_chunk "$work/c2") == $((seq / 4)) ]] || fail "ring_chunk: $(cat "$work/c2")"
half=$(value ring_chunk_half "$work/c2")
awk -v v="$half" 'BEGIN { exit !(v == v + 0 && v + 0 >= 0) }' || fail "ring_chunk_half = '$half'"
# frames gone cold: the curve in the header (the node's frames doubling
# from the ranks' one each), and the keys: a rate 0 or more, a ramp
# starting at the first point or later and ending past its start
grep -q "^# a micro-batch's forward and backward with the node's frames at (MiB: ms):\( [0-9.e+]*: [0-9.e+]*\)\{2,\}$" \
    "$work/c2" || fail "no cold frames curve: $(cat "$work/c2")"
cold=$(value cold_ms_per_mib "$work/c2")
from=$(value cold_from_mib "$work/c2")
full=$(value cold_full_mib "$work/c2")
awk -v c="$cold" -v a="$from" -v b="$full" \
    'BEGIN { exit !(c == c + 0 && c >= 0 && (c == 0 || (a + 0 > 0 && b + 0 > a + 0))) }' ||
    fail "cold frames: $cold ms/MiB from $from to $full MiB"

# alone, twice: each key the median of the two runs
timeout 60 "$bin/train_gpt" "${small[@]}" --calibrate "$work/c1" --calibrate-runs 2 2>"$work/err" ||
    fail "--calibrate alone: $(cat "$work/err")"
grep -q "^# train_gpt --calibrate: 1 rank, .*; each key the median of 2 calibrations$" \
    "$work/c1" || fail "alone: not the median of 2: $(head -2 "$work/c1")"
[[ $(value ranks_per_node "$work/c1") == 1 ]] || fail "alone: ranks_per_node: $(cat "$work/c1")"
for k in mem_gib peak_tflops attn_tflops ring_tflops mem_gbs act_gbs kernel_us cores_per_node; do positive $k "$work/c1"; done
for k in latency_us intra_gbs inter_gbs idle_lend ring_step_us disk_read_gbs disk_write_gbs; do
    grep -q "^# $k = .*(not measured" "$work/c1" || fail "alone: $k not marked: $(cat "$work/c1")"
done

# a Llama's own kernels (RMSNorm, SwiGLU, rotary, grouped-query attention,
# products without bias, its own head) at its shapes, on 2 ranks (the run
# above): the file
# names the architecture, the allreduce moves the Llama's gradients (2
# blocks of q, k, v, o and SwiGLU's three, the embedding and the head:
# 1712128 bytes at channels 128, 2 kv heads of 4, ffn 344), every rate is
# positive, finite and under what this machine's cores could do at most
# (64 FLOPs and 128 bytes a cycle at 6 GHz each), a call under one timed
# round, the rows and the ring's chunk the model's
C=128 F=344 KVC=64 V=256
grad=$(((2 * (C * (C + 2 * KVC) + C * C + 3 * C * F) + 2 * V * C) * 4))
grep -q "^# train_gpt --calibrate: 2 ranks, .*; kernels at arch llama ffn 344 kv-heads 2 layers 2 channels 128 heads 4 seq 16, $((mb * seq)) rows; allreduce of $grad bytes$" \
    "$work/c2" || fail "llama: the header: $(head -1 "$work/c2")"
ncores=$(getconf _NPROCESSORS_ONLN)
within() { # within KEY MAX FILE
    local v
    positive "$1" "$3"
    v=$(value "$1" "$3")
    awk -v v="$v" -v m="$2" 'BEGIN { exit !(v + 0 < m + 0 && v != "inf" && v != "nan") }' ||
        fail "$3: $1 = $v, not under $2"
}
for k in peak_tflops attn_tflops ring_tflops; do within $k "$(awk -v n="$ncores" 'BEGIN { print n * 64 * 6e9 / 1e12 }')" "$work/c2"; done
for k in mem_gbs act_gbs; do within $k "$(awk -v n="$ncores" 'BEGIN { print n * 128 * 6e9 / 1e9 }')" "$work/c2"; done
within kernel_us 20000 "$work/c2"
[[ $(value mm_rows "$work/c2") == $((mb * seq)) && $(value ring_chunk "$work/c2") == $((seq / 4)) ]] ||
    fail "llama: rows or chunk: $(cat "$work/c2")"
# --plan's own calibration is cached under a key of its own: a GPT of the
# same shape measures again, the Llama then reuses its own
export XDG_CACHE_HOME="$work/cache"
plan1() { timeout 60 "$bin/train_gpt" "$@" --global-batch 8 --plan >"$work/out" 2>"$work/err"; }
plan1 "${llama[@]}" || fail "llama --plan: $(cat "$work/err")"
grep -q "^train_gpt: calibrated 1 rank" "$work/err" || fail "llama --plan: $(cat "$work/err")"
plan1 --layers 2 --channels 128 --heads 4 --seq 16 --micro-batch 4 || fail "gpt --plan: $(cat "$work/err")"
grep -q "^train_gpt: calibrated 1 rank" "$work/err" || fail "the GPT reused the Llama's: $(cat "$work/err")"
plan1 "${llama[@]}" || fail "llama --plan again: $(cat "$work/err")"
grep -q "^train_gpt: the calibration cached in .* is reused" "$work/err" ||
    fail "the Llama's not reused: $(cat "$work/err")"
head -qn1 "$work"/cache/msrun/calibration-* | grep -q "; arch llama ffn 344 kv-heads 2 rope-theta " ||
    fail "no Llama key: $(head -qn1 "$work"/cache/msrun/calibration-*)"

# bad input: one line, exit 2, no file
rc=0
timeout 30 "$bin/train_gpt" --calibrate "$work/no/such/dir" >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "unwritable --calibrate exited $rc, want 2"
[[ $(wc -l <"$work/err") -eq 1 ]] || fail "not one line: $(cat "$work/err")"
grep -q "^train_gpt: --calibrate $work/no/such/dir: No such file or directory$" "$work/err" ||
    fail "message: $(cat "$work/err")"
rc=0
msrun_n 2 --calibrate "$work/no/such/dir" >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "unwritable --calibrate under msrun exited $rc, want 2"
[[ $(grep -c "\] train_gpt: --calibrate" "$work/err") -eq 1 ]] ||
    fail "under msrun, not one line from the ranks: $(cat "$work/err")"
rc=0
timeout 30 "$bin/train_gpt" --calibrate "$work/c4" --offload-dir "$work/no/such/dir" >"$work/out" \
    2>"$work/err" || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 && ! -e "$work/c4" ]] ||
    fail "--calibrate --offload-dir of no directory: exit $rc: $(cat "$work/err")"
grep -q "^train_gpt: --offload-dir $work/no/such/dir: No such file or directory$" "$work/err" ||
    fail "message: $(cat "$work/err")"
rc=0
timeout 30 "$bin/train_gpt" --calibrate "$work/c3" --device cuda >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 && $(wc -l <"$work/err") -eq 1 && ! -e "$work/c3" ]] ||
    fail "--calibrate --device cuda: exit $rc: $(cat "$work/err")"
echo "calibrate: 2 ranks and alone write the cluster file; bad input refused"
