#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with tensor parallel (docs/model.md
# "Offload"): each tp rank keeps its own slices of the blocks in its file;
# tp 2 (thread pool), tp 2 with sp under full recompute (the default
# engine) and dp 2 x tp 2 with sp under ZeRO 1 with the moments offloaded
# too give bitwise the losses of the same layout without offload, every
# rank reading each block back ahead of its forward, backward and update;
# a tp 2 run stopped and resumed with the offload on then off, and off
# then on, ends as the run never stopped; no file is left.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 8 --steps 4)
mkdir -p "$work/off"
params=(--offload "params=disk:$work/off")
# run NAME N ARGS...: an N-rank job writing its losses to $work/NAME.log
run() {
    local name=$1 n=$2 job=offtp-$$-$RANDOM
    shift 2
    jobs_started+=("$job")
    timeout -k 5 90 "${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${small[@]}" --loss-log "$work/$name.log" "$@" \
        >"$work/$name.out" 2>&1 || fail "$name: exited $?: $(tail -5 "$work/$name.out")"
    [[ -z "$(ls -A "$work/off")" ]] || fail "$name left files: $(ls "$work/off")"
}
# same NAME N M ARGS...: with and without the offload (ARGS after the
# layout's), bitwise, each of the N ranks reading each of the 4 blocks
# back ahead once per forward and backward of its M micro-batches and
# once per update, 4 steps
same() {
    local name=$1 n=$2 m=$3 lines
    shift 3
    local -a layout=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    shift
    run "$name" "$n" "${layout[@]}"
    run "$name-off" "$n" "${layout[@]}" "$@" --report
    [[ $(wc -l <"$work/$name-off.log") -eq 4 ]] || fail "$name-off: not 4 steps"
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    lines=$(grep -c "parameter offload: 20 written, $((4 * 4 * (2 * m + 1))) read back, 0 not read ahead" \
        "$work/$name-off.out" || true)
    [[ $lines -eq $n ]] || fail "$name-off: $n ranks should read every block back ahead: \
$(grep "parameter offload" "$work/$name-off.out")"
}
same tp 2 4 --tp 2 -- "${params[@]}" --offload-io threads
same sp 2 4 --tp 2 --sp --recompute full -- "${params[@]}"
same dptp 4 2 --tp 2 --sp --dp 2 --zero 1 --bucket-mb 0.02 --zero-min-bytes 0 -- \
    --offload "params=disk:$work/off,optimizer=disk:$work/off" --offload-chunk 4096

# stopped at step 2 and resumed with the offload on then off, off then on
for how in on-off off-on; do
    before=(--tp 2) after=(--tp 2)
    [[ $how != on-* ]] || before+=("${params[@]}")
    [[ $how != *-on ]] || after+=("${params[@]}")
    rm -rf "$work/ck"
    run "ck-$how" 2 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" "${before[@]}"
    run "ck-$how" 2 --ckpt-every 2 --ckpt-dir "$work/ck" --resume "${after[@]}"
    grep -q "resumed from step 2" "$work/ck-$how.out" || fail "$how: no resume: $(tail -5 "$work/ck-$how.out")"
    cmp -s "$work/tp.log" "$work/ck-$how.log" ||
        fail "resumed $how: $(diff "$work/tp.log" "$work/ck-$how.log" | head -4)"
done
echo "offload: parameters under tp 2, sp and dp 2 x tp 2 bitwise equal without it (resumed)"
