#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR (docs/model.md "Offload"): the same
# losses, bitwise, as the same layout without offload for one process
# (both I/O engines, 4 and 2 micro-batches a step) and dp 2, alone and
# with the optimizer's moments offloaded too, under full and selective
# recompute, with every offload at once and under ZeRO 1 and 2; every
# block's
# parameters read back ahead of its forward, its backward and its update,
# none unasked for; fewer parameter bytes resident, from the start (the
# blocks never all in memory); the files 0600, kept on
# request, else removed; runs stopped and resumed with the offload on and
# off, in both directions, end as one never stopped; the refusals exit 2
# by name; a missing directory and a block changed underneath are clear
# errors naming the file.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offparams
engines=(threads uring)
if timeout 30 "$bin/train_gpt" "${small[@]}" --steps 1 --offload "$pdisk" --offload-io uring \
    2>&1 >/dev/null | grep -q "io_uring is not in this build"; then
    echo "skip: --offload-io uring (built without liburing)"
    engines=(threads)
fi
# same NAME N M ENGINES ARGS...: with and without the offload, with each of
# ENGINES ("all": this build's), bitwise; M micro-batches a step
same() {
    local name=$1 n=$2 m=$3 ios=("$4")
    shift 4
    [[ "${ios[0]}" != all ]] || ios=("${engines[@]}")
    offload_run "$name" "$n" "$@" --report
    for io in "${ios[@]}"; do
        offload_run "$name-$io" "$n" "$@" --offload "$pdisk" --offload-io "$io" --report
        [[ $(wc -l <"$work/$name-$io.log") -eq 4 ]] || fail "$name-$io: not 4 steps"
        cmp -s "$work/$name.log" "$work/$name-$io.log" ||
            fail "$name with --offload-io $io differs: $(diff "$work/$name.log" "$work/$name-$io.log" | head -4)"
        offload_read_ahead "$name-$io" "$n" "$m"
        [[ -z "$(ls -A "$work/off")" ]] || fail "$name-$io left files: $(ls "$work/off")"
    done
}
same one 1 4 all
same accum2 1 2 threads --global-batch 4
same dp 2 2 threads --dp 2
# recompute: the model-parallel runtime's forward takes each block through
# the hooks as the whole model's does, and its backward recomputes the
# block while it holds it (selective under GPipe: every forward before
# the first backward)
same full 1 4 threads --recompute full
same sel 1 2 threads --recompute selective --schedule gpipe --global-batch 4
same dpfull 2 2 threads --dp 2 --recompute full
# ZeRO 1 and 2: each rank updates the elements it owns in each block (the
# units, of 4 KiB and more, cut across the blocks) and gathers the others'
# from their owners before the block is written back
zsplit=(--dp 2 --bucket-mb 0.02 --zero-min-bytes 4096)
same z1 2 2 threads "${zsplit[@]}" --zero 1
same z2 2 2 threads "${zsplit[@]}" --zero 2 --recompute selective
shard=$(sed -n 's/.*rank 0 zero 1: .*(shard \([0-9]*\) of \([0-9]*\) elements, \([0-9]*\) replicated).*/\1 \2 \3/p' \
    "$work/z1-threads.out")
read -r own all rep <<<"${shard:-0 0 0}"
[[ $own -lt $all && $rep -lt $((all / 2)) ]] || fail "ZeRO 1 sharded little: '$shard'"
# every offload at once: the block inputs, the parameters, the moments
offload_run all 1 --recompute full --report \
    --offload "$pdisk,activations=disk:$work/off,optimizer=disk:$work/off"
cmp -s "$work/full.log" "$work/all.log" || fail "all: $(diff "$work/full.log" "$work/all.log" | head -4)"
offload_read_ahead all 1 4
grep -q "activation offload: 64 written, 64 read back, 0 not read ahead" "$work/all.out" ||
    fail "all: $(grep "activation offload" "$work/all.out")"

# both offloads in one run: the moments' chunks (4 KiB: a block spans
# many; by default: one spans two blocks) reach the blocks in order, each
# block read ahead and written back behind as the chunks move past it
both="$pdisk,optimizer=disk:$work/off"
offload_run both 1 --offload "$both" --offload-chunk 4096 --report
offload_run both-dp 2 --dp 2 --offload "$both" --report
for name in both:one both-dp:dp; do
    cmp -s "$work/${name#*:}.log" "$work/${name%:*}.log" ||
        fail "${name%:*}: $(diff "$work/${name#*:}.log" "$work/${name%:*}.log" | head -4)"
done
offload_read_ahead both 1 4
offload_read_ahead both-dp 2 2
[[ -z "$(ls -A "$work/off")" ]] || fail "both left files: $(ls "$work/off")"

# the parameters resident: without the 4 blocks (3 blocks' buffers instead)
pbytes() { sed -n 's/.*rank 0 zero 0: params \([0-9]*\) .*/\1/p' "$work/$1.out"; }
[[ -n "$(pbytes one-threads)" && $(pbytes one-threads) -lt $(pbytes one) ]] ||
    fail "params $(pbytes one-threads) bytes with offload, $(pbytes one) without"
# nor at the start: the blocks are seeded into the file one at a time, so
# with --steps 0 (the initial parameters only) the peak RSS is below the
# same run's without offload by at least half the bytes the offload moves
# (8 blocks of 12.6 MB); seeding them all first would peak above it
init=(--layers 8 --channels 512 --heads 8 --seq 16 --micro-batch 2 --steps 0 --report)
peak() { # ARGS...: "peak-RSS-bytes params-bytes" of train_gpt --steps 0
    timeout 60 "$bin/train_gpt" "${init[@]}" "$@" 2>&1 >/dev/null |
        sed -n 's/.* params \([0-9]*\) .*peak RSS \([0-9]*\) KiB.*/\2 \1/p' | awk '{ print $1 * 1024, $2 }'
}
read -r rss_mem p_mem < <(peak) || fail "no --report without offload"
read -r rss_off p_off < <(peak --offload "$pdisk") || fail "no --report with offload"
[[ $((rss_mem - rss_off)) -ge $(((p_mem - p_off) / 2)) ]] ||
    fail "at the start: peak RSS $rss_off bytes with offload, $rss_mem without, $((p_mem - p_off)) moved"

# kept on request: one per rank, 0600 whatever the umask
(umask 000 && offload_run keep 2 --dp 2 --offload "$pdisk" --offload-keep)
cmp -s "$work/dp.log" "$work/keep.log" || fail "--offload-keep changed the losses"
kept "$work/off" params 2

# stopped at step 2 and resumed: offloaded throughout, then offloaded only
# before the stop, then only after it: each the run never stopped
for how in on-on on-off off-on both-both both-off full-on-on full-on-off z2-on-on; do
    before=() after=() base=one mode=${how#full-} np=m1
    mode=${mode#z2-}
    [[ $how != full-* ]] || before=(--recompute full) after=(--recompute full) base=full
    if [[ $how == z2-* ]]; then # dp 2 under ZeRO 2
        before=("${zsplit[@]}" --zero 2 --recompute selective) base=z2 np=2
        after=("${before[@]}")
    fi
    [[ $mode != on-* ]] || before+=(--offload "$pdisk")
    [[ $mode != *-on ]] || after+=(--offload "$pdisk")
    [[ $mode != both-* ]] || before+=(--offload "$both")
    [[ $mode != *-both ]] || after+=(--offload "$both")
    rm -rf "$work/ck"
    offload_run "ck-$how" $np --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" "${before[@]}"
    offload_run "ck-$how" $np --ckpt-every 2 --ckpt-dir "$work/ck" "${after[@]}" --resume
    grep -q "resumed from step 2" "$work/ck-$how.out" || fail "$how: no resume: $(cat "$work/ck-$how.out")"
    cmp -s "$work/$base.log" "$work/ck-$how.log" ||
        fail "resumed $how ($base): $(diff "$work/$base.log" "$work/ck-$how.log")"
    [[ -z "$(ls -A "$work/off")" ]] || fail "ck-$how left files: $(ls "$work/off")"
done

# (a build without CUDA refuses --device cuda before it)
refuse 1 "expert parallel on CPU ranks: not --device cuda yet\|this build has no CUDA training path" \
    "${small[@]}" --offload "$pdisk" --device cuda
refuse 1 "params=host: a CPU rank's parameters" "${small[@]}" --offload params=host
refuse 1 "is not a comma-separated list" "${small[@]}" --offload params=disk:
refuse 1 "is not a comma-separated list" "${small[@]}" --offload "$pdisk,$pdisk"
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "params=disk:DIR" "$work/help" || fail "--help lacks params=disk:DIR"

# a directory that is not there: a clear error before any step
rc=0
timeout 30 "$bin/train_gpt" "${small[@]}" --offload "params=disk:$work/none" >"$work/out" \
    2>"$work/err" || rc=$?
[[ $rc -eq 1 ]] && grep -q "offload: cannot create $work/none/msrun-params-rank0-" "$work/err" ||
    fail "a missing directory: exit $rc: $(cat "$work/err")"
grep -q "step" "$work/out" && fail "a missing directory trained: $(cat "$work/out")"
# a block changed underneath while the run goes on: the pass that reads it
# stops the run naming the file and the block (blocks of 8 channels fit a
# 4 KiB slot of the file)
scribble "$work/off" params block 1 "${small[@]}" --channels 8 --heads 2 --steps 1000000 \
    --offload "$pdisk"
# with the moments offloaded too: a block changed underneath, or a chunk
# of the moments, stops the run naming its file
scribble "$work/off" params block 1 "${small[@]}" --channels 8 --heads 2 --steps 1000000 \
    --offload "$both"
scribble "$work/off" offload chunk 1 "${small[@]}" --channels 8 --heads 2 --steps 1000000 \
    --offload "$both" --offload-chunk 4096
# --export-safetensors and --init-from read and write the blocks in their
# file (ZeRO 0 and 3): the same file and the same losses as without
for z in 0 3; do
    offload_export_init "z$z" 2 --dp 2 --zero "$z"
done
echo "offload: parameters bitwise equal without it (one, 2 micro-batches, dp 2, resumed, exported, initialised)"
