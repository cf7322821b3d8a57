#!/usr/bin/env bash
# Ranks share a resume's reads (docs/checkpoint.md, "Replicas share their
# reads"): ZeRO 0 replicas in their own layout each read their own file,
# in another a run of the pieces, and broadcast it to the others as it
# lands; in another layout so do tp groups whose slices cut the same
# pieces. dp 2, dp 3 and tp 2 x dp 2 at ZeRO 0 resume
# to the losses of a run never stopped (bitwise), rank 0 reading only its
# own file (under 55 %, 40 % and 30 % of the checkpoint's bytes). A byte
# damaged in another replica's piece at a broadcast's bound (the last byte
# of its first 1 MiB, the first of the next), in rank 0's own piece, or in
# a piece's chunk CRCs: the step is refused on every rank, the damaged
# file's rank naming the piece's file and tensor, and the job resumes from
# the step before to the same losses, no rank left waiting. Then dp 2
# resumes one process's and tp 2's checkpoints (split reads, tp slices
# through a piece's buffer) to the losses of the saving layout, rank 0 reading under
# 60 %, and so do tp 2 x dp 2 at ZeRO 0 and tp 2 (its tp group sharing)
# from one process's and tp 2 from dp 2's, while tp 2 x dp 2 at ZeRO 1,
# whose tp ranks' needs overlap little, reads alone (under 48 %); each
# refuses a damaged last piece, read by rank 1.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=ckshare
# pieces of more than 2^18 elements (the fc weights: 384 x 1536), so that
# a piece goes out in several broadcasts; 6 sequences a step in every layout
train_args=(--layers 2 --channels 384 --heads 4 --seq 16 --micro-batch 1 --global-batch 6
    --zero 0 --lr 3e-3)
# run NAME N ARGS...: train_gpt on N ranks, its losses in $work/NAME, its
# stderr in $work/err-NAME
run() {
    local name=$1 n=$2
    shift 2
    rm -f "$work/$name"
    msrun_n "$n" --loss-log "$work/$name" "$@" >/dev/null 2>"$work/err-$name" ||
        fail "$name: $(cat "$work/err-$name")"
}
# rank0_read NAME: the bytes rank 0 read in run NAME's resume
rank0_read() {
    sed -n 's/.*rank 0 read \([0-9]*\) bytes .*/\1/p' "$work/err-$1"
}
# layout NAME N PCT ARGS...: N ranks train 6 steps straight, then 4 saving
# at 2 and 4, then resume to 6: the same losses, rank 0 under PCT % of
# the checkpoint's bytes
layout() {
    local name=$1 n=$2 pct=$3 got total
    shift 3
    run "$name-whole" "$n" --steps 6 "$@"
    run "$name-first" "$n" --steps 4 --ckpt-every 2 --ckpt-dir "$work/ck-$name" "$@"
    cp -r "$work/ck-$name" "$work/ck-$name-r" # the resume saves too: keep steps 2 and 4
    run "$name-second" "$n" --steps 6 --ckpt-dir "$work/ck-$name-r" --resume "$@"
    grep -q "resumed from step 4 under" "$work/err-$name-second" ||
        fail "$name did not resume from step 4: $(cat "$work/err-$name-second")"
    diff "$work/$name-whole" <(cat "$work/$name-first" "$work/$name-second") >/dev/null ||
        fail "$name: the resumed run differs: $(paste "$work/$name-whole" \
            <(cat "$work/$name-first" "$work/$name-second"))"
    got=$(rank0_read "$name-second")
    total=$(cat "$work/ck-$name"/step-4/rank-*.bin | wc -c)
    [[ -n $got ]] && ((got * 100 < total * pct)) ||
        fail "$name: rank 0 read '$got' bytes of $total, want under $pct %"
    echo "ok $name: the same losses; rank 0 read $got bytes of $total"
}
layout dp2 2 55 --grad-accum 3
layout dp3 3 40 --grad-accum 2
layout tp2dp2 4 30 --grad-accum 3 --tp 2 --dp 2

# seg_bound FILE: the byte of FILE where the first piece of more than 2^18
# elements has its first 2^18 parameters' bytes (a broadcast's end)
seg_bound() {
    python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
hl, = struct.unpack_from("<I", b, 48 + 12)
n, = struct.unpack_from("<I", b, 48 + 68)
at = 48 + hl
for k in range(n):
    m, = struct.unpack_from("<I", b, 48 + hl - 16 * (n - k) + 8)
    if m > 1 << 18:
        print(at + 4 * (1 << 18))
        break
    at += 12 * m
else:
    sys.exit("no piece of more than 2^18 elements")
PY
}
# damage DIR FILE AT: $work/ck-bad, a copy of DIR with byte AT of
# step-4/FILE changed
damage() {
    rm -rf "$work/ck-bad" && cp -r "$1" "$work/ck-bad"
    printf '\x5a' | dd of="$work/ck-bad/step-4/$2" bs=1 seek="$3" conv=notrunc status=none
    cmp -s "$work/ck-bad/step-4/$2" "$1/step-4/$2" &&
        printf '\xa5' | dd of="$work/ck-bad/step-4/$2" bs=1 seek="$3" conv=notrunc status=none
    return 0
}
# resume_bad FILE BEFORE WHAT: target (dp 2 unless set) resumes
# $work/ck-bad from step 2, and its stderr names FILE's damaged piece
# (after BEFORE, a pattern); WHAT says what was damaged
target=(2 --grad-accum 3)
resume_bad() {
    run bad "${target[@]}" --steps 6 --ckpt-dir "$work/ck-bad" --resume
    grep -q "resumed from step 2 under" "$work/err-bad" ||
        fail "$3: not resumed from step 2: $(cat "$work/err-bad")"
    grep -q "$2step-4/$1: the piece of tensor [a-z0-9.]* (elements \[[0-9]*, [0-9]*) of the whole model) does not match its CRC" \
        "$work/err-bad" || fail "$3: its piece is not named: $(cat "$work/err-bad")"
}
# damaged FILE AT: dp 2's checkpoint with byte AT of step-4/FILE damaged
# resumes from step 2 to the same losses, naming the file's piece
damaged() {
    damage "$work/ck-dp2" "$1" "$2"
    resume_bad "$1" "" "byte $2 of $1 damaged"
    diff <(tail -n 4 "$work/dp2-whole") "$work/bad" >/dev/null ||
        fail "byte $2 of $1 damaged: the losses after step 2 differ"
    echo "ok byte $2 of $1 damaged: refused, resumed from step 2"
}
bound=$(seg_bound "$work/ck-dp2/step-4/rank-1.bin")
damaged rank-1.bin $((bound - 1))
damaged rank-1.bin "$bound"
damaged rank-0.bin $(($(seg_bound "$work/ck-dp2/step-4/rank-0.bin") + 4096))
damaged rank-1.bin $(($(pieces_end "$work/ck-dp2/step-4/rank-1.bin") + 5))

# Another layout: dp 2 at ZeRO 0 resumes one process's checkpoint (its
# pieces in place, split in two runs) and tp 2's (tensor-parallel slices,
# each read whole into a piece's buffer, broadcast and applied by both),
# each to the losses of the saving layout never stopped (1e-5: the state
# is the same, dp 2 computes the steps after it), rank 0 reading about
# half of the checkpoint
# other NAME N ARGS...: layout NAME (N ranks) trains 6 steps straight, then
# 4 saving at 2 and 4 (once a name); target resumes, rank 0 reading under
# $pct % of the checkpoint
pct=60
other() {
    local name=$1 n=$2 got total to="$1-to-${target[*]}"
    shift 2
    to=${to// /}
    if [[ ! -d $work/ck-$name ]]; then
        run "$name-whole" "$n" --steps 6 "$@"
        run "$name-first" "$n" --steps 4 --ckpt-every 2 --ckpt-dir "$work/ck-$name" "$@"
    fi
    rm -rf "$work/ck-r" && cp -r "$work/ck-$name" "$work/ck-r"
    run "$to" "${target[@]}" --steps 6 --ckpt-dir "$work/ck-r" --resume
    grep -q "resumed from step 4 under" "$work/err-$to" ||
        fail "$name -> ${target[*]} did not resume from step 4: $(cat "$work/err-$to")"
    resumed "$work/$name-whole" "$work/$to" 2
    got=$(rank0_read "$to")
    total=$(cat "$work/ck-$name"/step-4/rank-*.bin | wc -c)
    [[ -n $got ]] && ((got * 100 < total * pct)) ||
        fail "$name -> ${target[*]}: rank 0 read '$got' bytes of $total, want under $pct %"
    echo "ok $name -> ${target[*]}: the losses of $name; rank 0 read $got bytes of $total"
}
target=(2 --grad-accum 3)
other one 1 --grad-accum 6
other tp2 2 --grad-accum 6 --tp 2
# tp 2 x dp 2 from one process: each tp rank's two replicas share the
# whole pieces its slices cut, read into a piece's buffer and applied by
# both (the pieces above land in place); rank 0 reads about half of them
target=(4 --grad-accum 3 --tp 2 --dp 2)
other one 1 --grad-accum 6
# tp 2 from one process and from dp 2: the two tp ranks' slices cut every
# piece (alone each would read about 90 % of the checkpoint): the tp group
# shares, each reading half and applying its slices of the other's
target=(2 --grad-accum 6 --tp 2)
other one 1 --grad-accum 6
other dp2 2 --grad-accum 3
# tp 2 x dp 2 at ZeRO 1 from one process: a tp group (one dp rank's)
# needs its slices' parameters and its dp shard's moments, chunks of
# every piece; alone its ranks read 45.6 % of the checkpoint each, less
# than the whole pieces they would share (50 %): they read alone
target=(4 --grad-accum 3 --tp 2 --dp 2 --zero 1)
pct=48
other one 1 --grad-accum 6
# the last piece of each damaged: the second rank of the group reads it,
# names it, and the job resumes from step 2 (to the saving layout's losses)
for case in "one:rank-0.bin:2 --grad-accum 3" "tp2:rank-1.bin:2 --grad-accum 3" \
    "one:rank-0.bin:2 --grad-accum 6 --tp 2"; do
    IFS=: read -r name f t <<<"$case"
    read -ra target <<<"$t"
    at=$(($(pieces_end "$work/ck-$name/step-4/$f") - 100))
    damage "$work/ck-$name" "$f" "$at"
    resume_bad "$f" "rank 1\\].*" "$name -> $t, byte $at of $f damaged (read by rank 1)"
    resumed "$work/$name-whole" "$work/bad" 4
    echo "ok $name -> $t, byte $at of $f damaged: rank 1 refused it, resumed from step 2"
done
echo "shared reads: ok"
