#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR under ZeRO-3 (docs/model.md
# "Offload"): each rank's shard of each block in its file, read ahead of
# the gather that needs it and written back in order by the update. One
# process (the blocks replicated by the default --zero-min-bytes), dp 2
# with the blocks sharded (both I/O engines), with the moments offloaded
# too (4 KiB chunks), under full recompute, tp 2 x dp 2 with sp and
# cp 2 x dp 2 give bitwise the losses of the same layout without offload,
# every rank reading each block back ahead of its forward's and its
# backward's gather and of its update; fewer parameter bytes resident; no
# file left; runs stopped and resumed with the offload on then off, off
# then on and on throughout end as one never stopped, the last's restore
# holding one block's share at a time; a block's shard changed
# underneath is a clear error naming the file.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offz3
offload_limit=90
small+=(--zero 3)
zsplit=(--bucket-mb 0.02 --zero-min-bytes 4096)
engines=(threads uring)
if timeout 30 "$bin/train_gpt" "${small[@]}" --steps 1 "${params[@]}" --offload-io uring \
    2>&1 >/dev/null | grep -q "io_uring is not in this build"; then
    echo "skip: --offload-io uring (built without liburing)"
    engines=(threads)
fi
same() { offload_same "$@"; }
same one 1 4 -- "${params[@]}"
for io in "${engines[@]}"; do
    same dp 2 2 --dp 2 "${zsplit[@]}" -- "${params[@]}" --offload-io "$io"
    mv "$work/dp-off.out" "$work/dp-$io.out" && rm "$work/dp-off.log" # --loss-log appends
done
same dp 2 2 --dp 2 "${zsplit[@]}" -- --offload "$pdisk,optimizer=disk:$work/off" \
    --offload-chunk 4096
same full 2 2 --dp 2 "${zsplit[@]}" --recompute full -- "${params[@]}"
same tp 4 2 --tp 2 --sp --dp 2 "${zsplit[@]}" -- "${params[@]}"
same cp 4 2 --cp 2 --dp 2 "${zsplit[@]}" -- "${params[@]}"
grep -q "rank 1 parameter offload: .*msrun-params-rank1-.*threads" "$work/dp-threads.out" ||
    fail "dp: rank 1 did not use the thread pool: $(grep "parameter offload" "$work/dp-threads.out")"

# the parameters resident: the shard without its blocks' share (the
# store's 3 buffers instead)
pbytes() { sed -n 's/.*rank 0 zero 3: params \([0-9]*\) .*/\1/p' "$work/$1.out"; }
[[ -n "$(pbytes dp-off)" && $(pbytes dp-off) -lt $(pbytes dp) ]] ||
    fail "params $(pbytes dp-off) bytes with offload, $(pbytes dp) without"

# nor at the start: the blocks' shares are seeded into the file one at a
# time and the shard's buffer is zero without being written, so with
# --steps 0 the peak RSS is below the same run's without offload by at
# least half the bytes the offload moves (8 blocks of 12.6 MB); seeding
# the whole shard first, or zeroing its buffer by writing it, peaks above
init=(--zero 3 --layers 8 --channels 512 --heads 8 --seq 16 --micro-batch 2 --steps 0 --report)
peak() { # ARGS...: "peak-RSS-bytes params-bytes" of train_gpt --steps 0
    timeout 60 "$bin/train_gpt" "${init[@]}" "$@" 2>&1 >/dev/null |
        sed -n 's/.* params \([0-9]*\) .*peak RSS \([0-9]*\) KiB.*/\2 \1/p' | awk '{ print $1 * 1024, $2 }'
}
if [[ -n "${MSRUN_SANITIZE:-}" ]]; then
    # its allocator writes what base's maps untouched, and its shadow and
    # quarantine set the peak
    echo "skipped the start's peak: not the program's under MSRUN_SANITIZE=$MSRUN_SANITIZE"
else
    read -r rss_mem p_mem < <(peak) || fail "no --report without offload"
    read -r rss_off p_off < <(peak "${params[@]}") || fail "no --report with offload"
    [[ $((rss_mem - rss_off)) -ge $(((p_mem - p_off) / 2)) ]] ||
        fail "at the start: peak RSS $rss_off bytes with offload, $rss_mem without, $((p_mem - p_off)) moved"
    offload_none_left start
fi

# stopped at step 2 and resumed with the offload on then off, off then on
offload_resume_both dp --dp 2 "${zsplit[@]}"
# and on throughout: the restore fills a block's share at a time, never
# the shard's blocks
rm -rf "$work/ck"
offload_run ck-on-on 2 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" --dp 2 "${zsplit[@]}" \
    "${params[@]}"
offload_run ck-on-on 2 --ckpt-every 2 --ckpt-dir "$work/ck" --resume --dp 2 "${zsplit[@]}" \
    "${params[@]}" --report
offload_none_left ck-on-on
grep -q "resumed from step 2" "$work/ck-on-on.out" || fail "on-on: no resume"
cmp -s "$work/dp.log" "$work/ck-on-on.log" ||
    fail "resumed on-on: $(diff "$work/dp.log" "$work/ck-on-on.log" | head -4)"
offload_restore_bounded ck-on-on 1

# a block's shard changed underneath while the run goes on: the gather
# that reads it stops the run naming the file and the block (blocks of 8
# channels fit a 4 KiB slot of the file)
scribble "$work/off" params block 1 "${small[@]}" --channels 8 --heads 2 --steps 1000000 \
    "${params[@]}"
echo "offload: parameters under ZeRO-3 (one, dp 2, both offloads, recompute, tp, cp) bitwise equal"
