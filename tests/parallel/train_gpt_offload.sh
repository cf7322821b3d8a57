#!/usr/bin/env bash
# train_gpt --offload optimizer=disk:DIR (docs/model.md "Offload"): the same
# losses, bitwise, as the same layout without offload for 10 steps, for dp,
# ZeRO 1, 2, 3, tp and pp, with both I/O engines and in bf16; the files are
# one per rank, 0600, removed at the end and kept with --offload-keep; the
# options' bounds (the chunk at each bound and one past) and refusals exit
# 2 with the reason; a file size limit reached is a clear error.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
small=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 4 --steps 10)
# run NAME N ARGS...: an N-rank job (under msrun, one rank too) writing
# its 10 steps' losses to $work/NAME.log
run() {
    local name=$1 n=$2
    shift 2
    offload_run "$name" "m$n" "$@"
    [[ $(wc -l <"$work/$name.log") -eq 10 ]] || fail "$name: $(wc -l <"$work/$name.log") steps"
}
# the engines this build has (io_uring only where built with liburing)
engines=(threads uring)
if timeout 30 "$bin/train_gpt" "${small[@]}" --steps 1 --offload "optimizer=disk:$work/off" \
    --offload-io uring 2>&1 >/dev/null | grep -q "io_uring is not in this build"; then
    echo "skip: --offload-io uring (built without liburing)"
    engines=(threads)
fi
# same LAYOUT N ARGS...: with and without offload, each engine, bitwise
same() {
    local name=$1 n=$2
    shift 2
    run "$name" "$n" "$@"
    for io in "${engines[@]}"; do
        run "$name-$io" "$n" "$@" --offload "optimizer=disk:$work/off" --offload-io $io \
            --offload-chunk 4096
        cmp -s "$work/$name.log" "$work/$name-$io.log" ||
            fail "$name with --offload-io $io differs: $(diff "$work/$name.log" "$work/$name-$io.log" | head -4)"
        [[ -z "$(ls -A "$work/off")" ]] || fail "$name-$io left files: $(ls "$work/off")"
    done
}
same dp 2 --zero 0
same zero1 2 --zero 1 --bucket-mb 0.02
same zero2 2 --zero 2 --bucket-mb 0.02
same zero3 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0
same tp 2 --tp 2 --zero 1
same pp 2 --pp 2
same bf16 2 --precision bf16
# the offload does something: each rank's moments are in its file
MSR_LOG_LEVEL=info run note 2 --zero 1 --offload "optimizer=disk:$work/off"
for r in 0 1; do
    grep -q "rank $r.*offload: the moments of [0-9]* elements in $work/off/msrun-offload-rank$r-" \
        "$work/note.out" || fail "rank $r does not say where its moments are: $(cat "$work/note.out")"
done
[[ -z "$(ls -A "$work/off")" ]] || fail "files left: $(ls "$work/off")"

# kept on request: one per rank, 0600 (whatever the umask), of the shard's size
(umask 000 && run keep 2 --zero 1 --offload "optimizer=disk:$work/off" --offload-keep)
cmp -s "$work/dp.log" "$work/keep.log" || fail "--offload-keep changed the losses"
kept "$work/off" offload 2

# the chunk at its bounds runs (a chunk larger than the shard shrinks to it)
run chunk-min 1 --offload "optimizer=disk:$work/off" --offload-chunk 4096
run chunk-max 1 --offload "optimizer=disk:$work/off" --offload-chunk 1073741824
run one 1
cmp -s "$work/one.log" "$work/chunk-min.log" || fail "--offload-chunk 4096 differs"
cmp -s "$work/one.log" "$work/chunk-max.log" || fail "--offload-chunk 1073741824 differs"

d="optimizer=disk:$work/off"
refuse 1 "--offload-chunk 4095 is not an integer in \[4096, 1073741824\]" "${small[@]}" \
    --offload "$d" --offload-chunk 4095
refuse 1 "--offload-chunk 1073745920 is not an integer in \[4096" "${small[@]}" --offload "$d" \
    --offload-chunk 1073745920
refuse 1 "not a multiple of 4096" "${small[@]}" --offload "$d" --offload-chunk 1073741820
refuse 1 "not a multiple of 4096" "${small[@]}" --offload "$d" --offload-chunk 6000
refuse 1 "is not a comma-separated list of optimizer=host" "${small[@]}" --offload optimizer=disk:
refuse 1 "is not a comma-separated list of optimizer=host" "${small[@]}" --offload weights=disk:x
refuse 1 "--offload-io 'aio' is not threads or uring" "${small[@]}" --offload "$d" --offload-io aio
refuse 1 "--offload-keep needs --offload optimizer=disk:DIR" "${small[@]}" --offload-keep
refuse 1 "--offload-chunk needs --offload optimizer=disk:DIR" "${small[@]}" \
    --offload optimizer=host --offload-chunk 8192
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "--offload-chunk" "$work/help" || fail "--help lacks --offload-chunk"
# optimizer=host: a CPU rank's moments are in host memory already
run host 1 --offload optimizer=host
cmp -s "$work/one.log" "$work/host.log" || fail "--offload optimizer=host differs"

# errors: a directory that is not there, and the file size limit reached
rc=0
timeout 30 "$bin/train_gpt" "${small[@]}" --offload "optimizer=disk:$work/none" >"$work/out" \
    2>"$work/err" || rc=$?
[[ $rc -ne 0 ]] && grep -q "offload: cannot create $work/none/msrun-offload-rank0-" "$work/err" ||
    fail "a missing directory: exit $rc: $(cat "$work/err")"
rc=0
(ulimit -f 16 && exec timeout 30 "$bin/train_gpt" "${small[@]}" --offload "optimizer=disk:$work/off" \
    --offload-chunk 4096) >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -ne 0 ]] && grep -q "writing chunk 4 of $work/off/msrun-offload-rank0-.*File too large" \
    "$work/err" || fail "the file size limit: exit $rc: $(cat "$work/err")"
[[ -z "$(ls -A "$work/off")" ]] || fail "a failed start left files: $(ls "$work/off")"
# a chunk changed underneath while the run goes on: the step that reads it
# stops the run with the file and the chunk named (chunk 5 is scribbled
# over until the run stops: a step's own write-behind may undo one pass)
scribble "$work/off" offload chunk 5 "${small[@]}" --steps 1000000 \
    --offload "optimizer=disk:$work/off" --offload-chunk 4096
echo "offload: losses bitwise equal without it for dp, ZeRO 1-3, tp, pp, bf16, both engines"
