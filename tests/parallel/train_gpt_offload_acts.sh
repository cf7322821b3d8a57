#!/usr/bin/env bash
# train_gpt --offload activations=disk:DIR (docs/model.md "Offload"): under
# full recompute, the same losses, bitwise, as the same layout without
# offload for one process, dp 2, tp 2, pp 2 (1F1B and GPipe with several
# micro-batches in flight, interleaved with two virtual stages), with both
# I/O engines (one process, pp 1F1B; the others with the thread pool) and
# beside the optimizer's offload; every block input written
# is read back, each read ahead of its backward; the activations' peak is
# lower than without; the files are 0600 and removed; a run stopped and
# resumed ends as one never stopped; the option's forms at their bounds and
# the refusals exit 2 by name; a missing directory, the file size limit and
# a block input changed underneath are clear errors naming the file.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offacts
small+=(--recompute full)
acts="activations=disk:$work/off"
# run NAME N ARGS...: an N-rank job writing its losses to $work/NAME.log
# (N 1: train_gpt alone; N m1: one rank under msrun)
run() { offload_run "$@"; }
engines=(threads uring)
if timeout 30 "$bin/train_gpt" "${small[@]}" --steps 1 --offload "$acts" --offload-io uring \
    2>&1 >/dev/null | grep -q "io_uring is not in this build"; then
    echo "skip: --offload-io uring (built without liburing)"
    engines=(threads)
fi
# every rank wrote block inputs and read each back, none of them unasked
# for: the read-ahead's order is backward's
read_ahead() {
    local name=$1 n=$2 lines
    lines=$(grep -c "activation offload: \([1-9][0-9]*\) written, \1 read back, 0 not read ahead" \
        "$work/$name.out" || true)
    [[ $lines -eq $n ]] || fail "$name: $n ranks should read every input back ahead: \
$(grep "activation offload" "$work/$name.out")"
}
# same NAME N ENGINES ARGS...: with and without the offload, with each of
# ENGINES ("all": this build's), bitwise
same() {
    local name=$1 n=$2 ios=("$3")
    shift 3
    [[ "${ios[0]}" != all ]] || ios=("${engines[@]}")
    run "$name" "$n" "$@"
    for io in "${ios[@]}"; do
        run "$name-$io" "$n" "$@" --offload "$acts" --offload-io "$io" --report
        [[ $(wc -l <"$work/$name-$io.log") -eq 4 ]] || fail "$name-$io: not 4 steps"
        cmp -s "$work/$name.log" "$work/$name-$io.log" ||
            fail "$name with --offload-io $io differs: $(diff "$work/$name.log" "$work/$name-$io.log" | head -4)"
        read_ahead "$name-$io" "$n"
        [[ -z "$(ls -A "$work/off")" ]] || fail "$name-$io left files: $(ls "$work/off")"
    done
}
same one 1 all
same pp 2 all --pp 2 --grad-accum 4
same dp 2 threads --dp 2
same tp 2 threads --tp 2
same gpipe 2 threads --pp 2 --grad-accum 4 --schedule gpipe
same interleaved 2 threads --pp 2 --grad-accum 4 --schedule interleaved --virtual-stages 2
# beside the optimizer's offload, in one list, and in the other order
run both 2 --dp 2 --offload "optimizer=disk:$work/off,$acts" --report
cmp -s "$work/dp.log" "$work/both.log" || fail "optimizer and activations offloaded differ"
read_ahead both 2
run both2 1 --offload "$acts,optimizer=disk:$work/off" --offload-chunk 4096
cmp -s "$work/one.log" "$work/both2.log" || fail "activations and optimizer offloaded differ"

# the activations' peak: GPipe keeps every micro-batch's frame until its
# backward; offloaded, a frame keeps one block input, not five
peak() { sed -n 's/.*activations peak \([0-9]*\) bytes.*/\1/p' "$work/$1.out"; }
run peak-mem 1 --schedule gpipe --report
run peak-off 1 --schedule gpipe --report --offload "$acts"
cmp -s "$work/peak-mem.log" "$work/peak-off.log" || fail "GPipe with offload differs"
[[ -n "$(peak peak-off)" && $(peak peak-off) -lt $(peak peak-mem) ]] ||
    fail "activations peak $(peak peak-off) with offload, $(peak peak-mem) without"

# kept on request: one per rank, 0600 whatever the umask
(umask 000 && run keep 2 --dp 2 --offload "$acts" --offload-keep)
cmp -s "$work/dp.log" "$work/keep.log" || fail "--offload-keep changed the losses"
kept "$work/off" acts 2

# stopped at step 2 and resumed, offloaded throughout: the run never stopped
run ck m1 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" --offload "$acts"
run ck m1 --ckpt-every 2 --ckpt-dir "$work/ck" --offload "$acts" --resume
grep -q "resumed from step 2" "$work/ck.out" || fail "no resume: $(cat "$work/ck.out")"
cmp -s "$work/one.log" "$work/ck.log" || fail "resumed with offload: $(diff "$work/one.log" "$work/ck.log")"

list="is not a comma-separated list of optimizer=host"
refuse 1 "$list" "${small[@]}" --offload activations=disk:
refuse 1 "$list" "${small[@]}" --offload activations=
refuse 1 "$list" "${small[@]}" --offload activations
refuse 1 "$list" "${small[@]}" --offload "optimizer=host,"
refuse 1 "$list" "${small[@]}" --offload ",$acts"
refuse 1 "--offload needs a non-empty value" "${small[@]}" --offload ""
refuse 1 "$list" "${small[@]}" --offload "$acts,$acts"
refuse 1 "$list" "${small[@]}" --offload "optimizer=host,optimizer=disk:$work/off"
refuse 1 "$list" "${small[@]}" --offload "activations=host,"
refuse 1 "$list" "${small[@]}" --offload "weights=disk:$work/off"
refuse 1 "activations=host: a CPU rank's activations are in host memory already" "${small[@]}" \
    --offload activations=host
refuse 1 "it needs --recompute full, not none" "${small[@]}" --offload "$acts" --recompute none
refuse 1 "it needs --recompute full, not selective" "${small[@]}" --offload "$acts" \
    --recompute selective
refuse 1 "--offload-chunk needs --offload optimizer=disk:DIR" "${small[@]}" --offload "$acts" \
    --offload-chunk 4096
refuse 1 "--offload-keep needs --offload optimizer=disk:DIR, activations=disk:DIR, params=disk:DIR or grads=disk:DIR" \
    "${small[@]}" --offload-keep
refuse 1 "--offload-io 'aio' is not threads or uring" "${small[@]}" --offload "$acts" \
    --offload-io aio
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "activations=disk:DIR" "$work/help" || fail "--help lacks activations=disk:DIR"
# a directory whose name holds a comma (an item ends only where the next begins)
mkdir -p "$work/a,b"
run comma 1 --steps 1 --offload "activations=disk:$work/a,b" --offload-keep
compgen -G "$work/a,b/msrun-acts-rank0-*.bin" >/dev/null || fail "no file in $work/a,b"

# errors: a directory that is not there, the file size limit reached
# (16 KiB: activations 4-7, the second micro-batch's, are past it; the
# write waited for first is the one named)
rc=0
timeout 30 "$bin/train_gpt" "${small[@]}" --offload "activations=disk:$work/none" >"$work/out" \
    2>"$work/err" || rc=$?
[[ $rc -eq 1 ]] && grep -q "offload: cannot create $work/none/msrun-acts-rank0-" "$work/err" ||
    fail "a missing directory: exit $rc: $(cat "$work/err")"
rc=0
(ulimit -f 16 && exec timeout 30 "$bin/train_gpt" "${small[@]}" --offload "$acts") \
    >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 1 ]] && grep -q "writing activation [4-7] of $work/off/msrun-acts-rank0-.*File too large" \
    "$work/err" || fail "the file size limit: exit $rc: $(cat "$work/err")"
[[ -z "$(ls -A "$work/off")" ]] || fail "a failed run left files: $(ls "$work/off")"
# a block input changed underneath while the run goes on: the backward that
# reads it stops the run naming the file and the activation (activation 1
# is scribbled over until the run stops: its next forward rewrites it)
scribble "$work/off" acts activation 1 "${small[@]}" --steps 1000000 --offload "$acts"
echo "offload: activations bitwise equal without it (one, dp, tp, pp 1F1B/GPipe/interleaved)"
