#!/usr/bin/env bash
# train_gpt --resume against damaged checkpoints (2 ranks, steps 5 and 10
# saved): a corrupt newest step is refused and the job falls back to step 5
# and says so; a step edited consistently in one rank's file (payload and
# CRC) makes every rank fail with a message instead of hanging; leftover
# .tmp files are removed; files are 0600 and folders 0700; a symbolic link
# planted as a step folder is not written through.
# A step another world size saved (any) gets the same fallback: its shards
# are checked whole (index, every piece's CRC, every file's, and that the
# pieces cover the model) before it is chosen.
# A run resumed from a checkpoint whose values are NaN names that checkpoint
# when its loss goes bad. A load that failed part way never leaves its
# state to train on (partial): the only step damaged ends the resume (exit
# 2), and with an older intact step the run resumes from it bitwise as if
# the damaged step had never been written (dp 2 ZeRO-3, tp 2).
# A resume initialises no parameters before the load, and does when there
# is nothing to resume (init: ZeRO 3, 0 and 1 over dp 2).
# A rank whose save fails (savefail: its file past its size limit) ends
# every rank's save at once, the others naming it; the step before resumes.
#   train_gpt_ckpt_faults.sh fallback|edit|leftovers|link|nan|partial|any|init|savefail
set -euo pipefail
case_name=${1:?which case: fallback, edit, leftovers, link, nan, partial, any, init or savefail}
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job=ckfault-$$-$RANDOM
jobs_started=("$job")
fail_log=$work/log
ranks=2
args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --bucket-mb 0.02
    --ckpt-every 5 --resume)
# train DIR STEPS [ARGS...]: runs the job on $ranks workers (60 s at most);
# $rc gets msrun's status
train() {
    rc=0
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num="$ranks" --local_worker_num="$ranks" \
        --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${args[@]}" --ckpt-dir "$1" --steps "$2" "${@:3}" \
        >"$work/log" 2>&1 || rc=$?
    [[ $rc -ne 124 && $rc -ne 137 ]] || fail "the job hung (killed after 60 s)"
}
# set_u64 FILE OFFSET VALUE: writes VALUE there and fixes the file's CRC
# (libmsrun's header: 48 bytes, the CRC-32 of the rest at offset 40)
set_u64() {
    python3 - "$@" <<'PY'
import struct, sys, zlib
path, off, val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(path, "rb").read())
assert zlib.crc32(bytes(b[48:])) == struct.unpack_from("<I", b, 40)[0], "not zlib's CRC"
struct.pack_into("<Q", b, off, val)
struct.pack_into("<I", b, 40, zlib.crc32(bytes(b[48:])))
open(path, "wb").write(b)
PY
}
# damage FILE OFFSET: flips the bits of the byte there (nothing fixed up)
damage() {
    python3 - "$@" <<'PY'
import sys
path, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(path, "rb").read())
b[off] ^= 0xFF
open(path, "wb").write(b)
PY
}
# padding FILE: the offset of a padding byte after the settings' text of a
# rank file (libmsrun's header of 48 bytes, then the payload: meta_len at
# its byte 72, the text at 100, its NUL, zeros to a multiple of 8): covered
# by the file's CRC alone, no piece's
padding() {
    python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
end = 48 + 100 + struct.unpack_from("<I", b, 48 + 72)[0] + 1
assert end % 8 != 0 and b[end] == 0, "no padding after the settings' text: change --seed"
print(end)
PY
}

case $case_name in
partial)
    args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --bucket-mb 0.02
        --ckpt-every 5 --resume --seed 1)
    # the only step, damaged two thirds into rank 1's file (its earlier
    # pieces loaded first): exit 2 naming the file and the tensor, nothing
    # trained; in its last byte: its last piece's tensor named (not only the
    # file); in a byte only the file's CRC covers: refused too, not loaded
    train "$work/a" 5
    [[ $rc -eq 0 ]] || fail "the first run failed ($rc)"
    cp -r "$work/a" "$work/a0"
    f=step-5/rank-1.bin
    # only_step AT PATTERN: byte AT of $f damaged, the resume ends with
    # exit 2 saying PATTERN and why, and trains nothing
    only_step() {
        rm -rf "$work/a" "$work/a.loss" && cp -r "$work/a0" "$work/a" && damage "$work/a/$f" "$1"
        train "$work/a" 10 --loss-log "$work/a.loss"
        [[ $rc -eq 2 ]] || fail "byte $1 of $f damaged, the only step: exit $rc, want 2"
        grep -q "$2" "$work/log" || fail "byte $1 of $f damaged: no '$2'"
        grep -q "not resuming: step 5 under $work/a is damaged (above) and no older step is" \
            "$work/log" || fail "byte $1 of $f damaged: the refusal was not said"
        [[ ! -s "$work/a.loss" ]] && ! grep -qF "rank 0] step " "$work/log" ||
            fail "byte $1 of $f damaged, the only step: the run trained"
    }
    only_step $(($(stat -c %s "$work/a/$f") * 2 / 3)) \
        "$f: the piece of tensor [a-z0-9.]* (elements \[[0-9]*, [0-9]*) of the whole model) does not"
    # its last byte: the read that reaches the file's end finds its CRC
    # wrong, and the last piece's own CRC names the tensor
    only_step $(($(stat -c %s "$work/a/$f") - 1)) \
        "$f: the piece of tensor lnf[wb] (elements \[[0-9]*, [0-9]*) of the whole model) does not"
    only_step "$(padding "$work/a/$f")" "$f does not match its CRC"
    echo "ok   the only step damaged after a partial load: exit 2, nothing trained"
    # two steps, the newer damaged late in rank 1's file: the losses after
    # the fallback equal a resume from the older step alone, bitwise
    for layout in "--dp 2 --zero 3 --zero-min-bytes 0" "--tp 2"; do
        rm -rf "$work/b" "$work/old" "$work"/*.loss
        train "$work/b" 10 $layout
        [[ $rc -eq 0 ]] || fail "$layout: the first run failed ($rc)"
        cp -r "$work/b" "$work/old" && rm -rf "$work/old/step-10"
        train "$work/old" 15 $layout --loss-log "$work/old.loss"
        [[ $rc -eq 0 ]] || fail "$layout: the resume from step 5 alone failed ($rc)"
        f=$work/b/step-10/rank-1.bin
        damage "$f" $(($(stat -c %s "$f") * 9 / 10))
        train "$work/b" 15 $layout --loss-log "$work/b.loss"
        [[ $rc -eq 0 ]] || fail "$layout: the resume past the damaged step failed ($rc)"
        grep -q "resumed from step 5 under" "$work/log" || fail "$layout: not resumed from step 5"
        [[ $(wc -l <"$work/b.loss") -eq 10 ]] || fail "$layout: $(wc -l <"$work/b.loss") steps logged"
        cmp -s "$work/old.loss" "$work/b.loss" || fail "$layout: the losses after the fallback" \
            "differ from step 5's alone: $(diff "$work/old.loss" "$work/b.loss" | head -4)"
        echo "ok   $layout: newer step damaged late, resumed from step 5 bitwise as if alone"
    done
    ;;
any)
    # steps 5 and 10 saved by 4 ranks (dp 2 x tp 2), resumed by 2 in
    # another layout (dp 2, ZeRO-3): the resharded load reads only the
    # pieces it needs, so the checked search is what refuses a damaged step
    args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 4
        --bucket-mb 0.02 --ckpt-every 5 --resume --seed 1)
    resumed=(--dp 2 --zero 3 --zero-min-bytes 0)
    ranks=4 train "$work/a" 10 --dp 2 --tp 2
    [[ $rc -eq 0 ]] || fail "the 4-rank run failed ($rc)"
    cp -r "$work/a" "$work/old" && rm -rf "$work/old/step-10"
    train "$work/old" 15 "${resumed[@]}" --loss-log "$work/old.loss"
    [[ $rc -eq 0 && $(wc -l <"$work/old.loss") -eq 10 ]] || fail "the resume from step 5 alone failed ($rc)"
    # fallback CASE: the resume of $work/b ends at step 15 after refusing
    # step 10 with a message that says CASE, its losses those of step 5's
    fallback() {
        rm -f "$work/b.loss" # --loss-log appends
        train "$work/b" 15 "${resumed[@]}" --loss-log "$work/b.loss"
        [[ $rc -eq 0 ]] || fail "$1: the resume past the damaged step failed ($rc)"
        grep -q "refusing step 10 under $work/b" "$work/log" &&
            grep -q "falling back to step 5 under $work/b" "$work/log" &&
            grep -q "resumed from step 5 under $work/b" "$work/log" ||
            fail "$1: the fallback to step 5 was not said"
        cmp -s "$work/old.loss" "$work/b.loss" || fail "$1: the losses after the fallback" \
            "differ from step 5's alone: $(diff "$work/old.loss" "$work/b.loss" | head -4)"
        echo "ok   $1: step 10 refused, resumed from step 5 bitwise as if alone"
    }
    f=step-10/rank-1.bin
    piece="$f: the piece of tensor [a-z0-9.]* (elements \[[0-9]*, [0-9]*) of the whole model) does"
    rm -rf "$work/b" && cp -r "$work/a" "$work/b" && damage "$work/b/$f" $(($(stat -c %s "$work/b/$f") * 9 / 10))
    fallback "damaged late in $f"
    grep -q "$piece not match its CRC" "$work/log" || fail "the damaged piece was not named"
    # the last byte of a file: its last piece, named by its tensor too
    rm -rf "$work/b" && cp -r "$work/a" "$work/b" && damage "$work/b/$f" $(($(stat -c %s "$work/b/$f") - 1))
    fallback "the last byte of $f damaged"
    grep -q "$piece not match its CRC" "$work/log" || fail "the last piece was not named"
    # every file intact, every CRC right, but an element no shard holds: the
    # pieces that start at it moved one element on (each CRC made right)
    rm -rf "$work/b" && cp -r "$work/a" "$work/b"
    python3 - "$work/b/step-10" <<'PY'
import struct, sys, zlib
d = sys.argv[1]
files = [bytearray(open(f"{d}/rank-{r}.bin", "rb").read()) for r in range(4)]
hls = [struct.unpack_from("<I", b, 48 + 12)[0] for b in files]
def table(r):  # [(entry offset, lo, n, data offset)] of rank r's range table
    b, hl = files[r], hls[r]
    n, t, at = struct.unpack_from("<I", b, 48 + 68)[0], [], 48 + hl
    for k in range(n):
        e = 48 + hl - 16 * (n - k)
        lo, c = struct.unpack_from("<QI", b, e)
        t.append((e, lo, c, at))
        at += 12 * c
    return t
tabs = [table(r) for r in range(4)]
P = struct.unpack_from("<Q", files[0], 48 + 48)[0]
def movable(r, k):  # piece k of rank r may start one element later
    t = tabs[r]
    return t[k][1] + t[k][2] + 1 <= (t[k + 1][1] if k + 1 < len(t) else P)
for e in range(P):
    holders = [(r, k) for r in range(4) for k, p in enumerate(tabs[r]) if p[1] <= e < p[1] + p[2]]
    if not holders or not all(tabs[r][k][1] == e and movable(r, k) for r, k in holders):
        continue
    for r, k in holders:
        b, (ent, lo, c, at) = files[r], tabs[r][k]
        struct.pack_into("<Q", b, ent, lo + 1)
        head = zlib.crc32(bytes(b[48 + 16:48 + 100]))
        crc = zlib.crc32(bytes(b[at:at + 12 * c]), zlib.crc32(bytes(b[ent:ent + 12]), head))
        struct.pack_into("<I", b, ent + 12, crc)
        struct.pack_into("<I", b, 40, zlib.crc32(bytes(b[48:])))
        open(f"{d}/rank-{r}.bin", "wb").write(b)
    sys.exit(0)
sys.exit("no piece to move")
PY
    fallback "an element no shard holds"
    grep -q "no shard of step 10 holds element" "$work/log" || fail "the missing element was not named"
    # the only step, damaged: exit 2 naming the file and the tensor, nothing trained
    rm -rf "$work/b" "$work/b.loss" && cp -r "$work/a" "$work/b" && rm -rf "$work/b/step-5"
    damage "$work/b/$f" $(($(stat -c %s "$work/b/$f") * 9 / 10))
    train "$work/b" 15 "${resumed[@]}" --loss-log "$work/b.loss"
    [[ $rc -eq 2 ]] || fail "the only step damaged: exit $rc, want 2"
    grep -q "$piece not match its CRC" "$work/log" || fail "the only step: the piece was not named"
    grep -q "not resuming: step 10 under $work/b is damaged (above) and no older step is" \
        "$work/log" || fail "the only step damaged: the refusal was not said"
    [[ ! -s "$work/b.loss" ]] && ! grep -qF "rank 0] step " "$work/log" ||
        fail "the only step damaged: the run trained"
    echo "ok   the only step of another world size damaged: exit 2, nothing trained"
    ;;
init)
    # a resume leaves its parameters to the load (no random ones first):
    # with nothing to resume they are set after all, the run the same as
    # one without --resume; resumed, the same as never stopped (ZeRO 0's
    # replicas each read both shards, ZeRO 1's gather the parameters)
    for zero in 3 0 1; do # (--loss-log appends: a file per stage)
        args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --bucket-mb 0.02
            --seed 1 --dp 2 --zero "$zero" --zero-min-bytes 0)
        train "$work/plain$zero" 3 --loss-log "$work/plain$zero.loss"
        [[ $rc -eq 0 ]] || fail "ZeRO-$zero: the run without --resume failed ($rc)"
        train "$work/none$zero" 3 --resume --loss-log "$work/none$zero.loss"
        [[ $rc -eq 0 ]] && grep -q "no complete checkpoint under $work/none$zero" "$work/log" ||
            fail "ZeRO-$zero: the resume with nothing to resume failed ($rc) or did not say so"
        cmp -s "$work/plain$zero.loss" "$work/none$zero.loss" || fail "ZeRO-$zero: nothing to resume:" \
            "the losses differ from a run without --resume:" \
            "$(diff "$work/plain$zero.loss" "$work/none$zero.loss" | head -4)"
        echo "ok   ZeRO-$zero, nothing to resume: initialised, bitwise as without --resume"
        train "$work/s$zero" 10 --ckpt-every 5 --loss-log "$work/straight$zero.loss"
        [[ $rc -eq 0 ]] || fail "ZeRO-$zero: the straight run failed ($rc)"
        rm -rf "$work/s$zero/step-10"
        train "$work/s$zero" 10 --ckpt-every 5 --resume --loss-log "$work/resumed$zero.loss"
        [[ $rc -eq 0 ]] && grep -q "resumed from step 5 under $work/s$zero" "$work/log" ||
            fail "ZeRO-$zero: the resume from step 5 failed ($rc)"
        tail -n 5 "$work/straight$zero.loss" | cmp -s - "$work/resumed$zero.loss" ||
            fail "ZeRO-$zero resumed: steps 6..10 differ from the run never stopped"
        echo "ok   ZeRO-$zero resumed without initialising first: bitwise as never stopped"
    done
    ;;
fallback)
    # the newest step corrupt on rank 1: fall back to step 5, and say so
    train "$work/a" 10
    [[ $rc -eq 0 ]] || fail "the first run failed ($rc)"
    [[ -f "$work/a/step-10/rank-1.bin" && -f "$work/a/step-5/rank-1.bin" ]] || fail "no checkpoints"
    printf '\xff' | dd of="$work/a/step-10/rank-1.bin" bs=1 seek=300 conv=notrunc status=none
    train "$work/a" 15
    [[ $rc -eq 0 ]] || fail "the run after the corruption failed ($rc)"
    grep -q "refusing step 10" "$work/log" || fail "the refusal of step 10 was not said"
    grep -q "rank 1.*does not match its CRC" "$work/log" || fail "the reason was not said"
    grep -q "falling back to step 5" "$work/log" || fail "the fallback was not said"
    grep -q "resumed from step 5 under" "$work/log" || fail "did not resume from step 5"
    echo "ok   corrupt newest checkpoint: $(grep -o 'falling back to step 5[^(]*' "$work/log" | head -1)"
    ;;
leftovers)
    train "$work/a" 10
    [[ $rc -eq 0 ]] || fail "the first run failed ($rc)"
    # files 0600, folders 0700
    [[ $(stat -c %a "$work/a/step-10") == 700 ]] || fail "step folder mode $(stat -c %a "$work/a/step-10")"
    for f in "$work"/a/step-10/*; do
        [[ $(stat -c %a "$f") == 600 ]] || fail "$f has mode $(stat -c %a "$f")"
    done
    echo "ok   checkpoint files 0600, folders 0700"
    # a wider mode when asked (the umask may narrow it: clear it here)
    (umask 022 && MSR_CKPT_MODE=0640 train "$work/g" 5)
    [[ $(stat -c %a "$work/g/step-5") == 750 ]] || fail "MSR_CKPT_MODE: folder $(stat -c %a "$work/g/step-5")"
    [[ $(stat -c %a "$work/g/step-5/rank-0.bin") == 640 ]] ||
        fail "MSR_CKPT_MODE: file $(stat -c %a "$work/g/step-5/rank-0.bin")"
    echo "ok   MSR_CKPT_MODE=0640: files 0640, folders 0750"
    # leftovers of writes killed mid-way, by both ranks
    touch "$work/a/step-10/rank-1.bin.tmp.99999" "$work/a/step-5/rank-0.commit.tmp.4242" \
        "$work/a/step-10/MANIFEST.tmp.31337"
    train "$work/a" 15
    [[ $rc -eq 0 ]] || fail "the resumed run failed ($rc)"
    left=$(find "$work/a" -name '*.tmp.*' | wc -l)
    [[ $left -eq 0 ]] || fail "leftover .tmp files remain: $(find "$work/a" -name '*.tmp.*')"
    echo "ok   leftover .tmp files removed"
    ;;
edit)
    # a consistent edit of one rank's step: every rank fails with a message
    train "$work/b" 10
    [[ $rc -eq 0 ]] || fail "the first run of b failed ($rc)"
    set_u64 "$work/b/step-10/rank-0.bin" $((48 + 16)) 7 # the payload's step
    train "$work/b" 15
    [[ $rc -ne 0 ]] || fail "a rank resumed from a shard whose step was edited"
    grep -q "says it is of step 7" "$work/log" || fail "no message names the edited step"
    # its file checks out, so the step before is not taken in its place
    [[ $rc -eq 2 ]] && grep -q "not resuming: step 10 under $work/b does not load" "$work/log" ||
        fail "an edited step that reads back intact: exit $rc, or the refusal was not said"
    echo "ok   edited step: every rank failed ($rc) with a message, no hang"
    # the same with the optimizer step (the shard's step intact): the ranks
    # compare their shards
    train "$work/c" 10
    [[ $rc -eq 0 ]] || fail "the first run of c failed ($rc)"
    set_u64 "$work/c/step-10/rank-1.bin" $((48 + 24)) 3 # the payload's AdamW step
    train "$work/c" 15
    [[ $rc -ne 0 ]] || fail "the ranks resumed from shards that disagree"
    grep -q "checkpoint shards disagree" "$work/log" || fail "no message says the shards disagree"
    echo "ok   edited optimizer step: every rank failed ($rc) with a message, no hang"
    ;;
link)
    # a symbolic link planted as the next step's folder is not written through
    train "$work/a" 5
    [[ $rc -eq 0 ]] || fail "the first run failed ($rc)"
    mkdir -p "$work/elsewhere"
    ln -s "$work/elsewhere" "$work/a/step-10"
    train "$work/a" 10
    [[ $rc -ne 0 ]] || fail "the job wrote its checkpoint through a symbolic link"
    grep -q "step-10 is a symbolic link" "$work/log" || fail "the refusal was not said"
    [[ -z $(ls -A "$work/elsewhere") ]] ||
        fail "files appeared where the link points: $(ls "$work/elsewhere")"
    echo "ok   symbolic link at a checkpoint path: refused, nothing written through it"
    ;;
nan)
    train "$work/a" 10
    [[ $rc -eq 0 ]] || fail "the first run failed ($rc)"
    for r in 0 1; do
        python3 - "$work/a/step-10/rank-$r.bin" <<'PY'
import struct, sys, zlib
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
hl = struct.unpack_from("<I", b, 48 + 12)[0]  # the payload's header bytes
n = struct.unpack_from("<I", b, 48 + 68)[0]
counts = [struct.unpack_from("<I", b, 48 + hl - 16 * (n - k) + 8)[0] for k in range(n)]
table = 48 + hl + 12 * sum(counts)  # the chunk table after the pieces
b[48 + hl:table] = b"\xff" * (table - 48 - hl)  # every float NaN
# every checksum made to match (a load checks each piece's, its chunks' and
# the file's): a piece's CRC runs from the header's (its bytes 16..99) over
# its (lo, n) as in the range table, then its parameters and moments; a
# chunk's (1024 floats of one array, the last shorter) over its bytes
head = zlib.crc32(bytes(b[48 + 16:48 + 100]))
at = 48 + hl
for k, count in enumerate(counts):
    e = 48 + hl - 16 * (n - k)
    crc = zlib.crc32(bytes(b[at:at + 12 * count]), zlib.crc32(bytes(b[e:e + 12]), head))
    struct.pack_into("<I", b, e + 12, crc)
    for a in range(3):
        for c in range(0, count, 1024):
            x = at + 4 * (a * count + c)
            struct.pack_into("<I", b, table, zlib.crc32(bytes(b[x:x + 4 * min(1024, count - c)])))
            table += 4
    at += 12 * count
assert table == len(b), (table, len(b))
struct.pack_into("<I", b, 40, zlib.crc32(bytes(b[48:])))
open(path, "wb").write(b)
PY
    done
    train "$work/a" 15
    [[ $rc -ne 0 ]] || fail "a NaN model trained on"
    grep -q "after resuming from the checkpoint of step 10 under $work/a" "$work/log" ||
        fail "the bad loss does not name the checkpoint"
    echo "ok   NaN after a resume: $(grep -o 'the loss of step.*' "$work/log" | head -1)"
    ;;
savefail)
    # rank 1's save of step 10 fails (its file past its size limit: EFBIG;
    # UCX over tcp, whose shared memory the limit would refuse too): every
    # rank ends at once, rank 0 naming rank 1, none at the store's
    # deadline (60 s, a guard); step 10 leaves no file and step 5 resumes
    cat >"$work/limit.sh" <<'SH'
#!/usr/bin/env bash
if [[ $MSR_RANK == 1 ]]; then trap '' XFSZ; ulimit -f 200; fi
exec "$@"
SH
    chmod +x "$work/limit.sh"
    worker_env=(env MSR_TIMEOUT=60 UCX_TLS=self,tcp "${worker_env[@]:1}")
    train "$work/a" 5
    [[ $rc -eq 0 ]] || fail "the first run failed ($rc): $(cat "$work/log")"
    for mode in sync async; do
        more=()
        [[ $mode == sync ]] || more=(--ckpt-async)
        worker_env+=("$work/limit.sh")
        train "$work/a" 10 "${more[@]}"
        unset 'worker_env[-1]'
        [[ $rc -eq 1 ]] || fail "$mode: rank 1's failed save: exit $rc, want 1: $(cat "$work/log")"
        ! grep -Eq "TIMEOUT|deadline passed" "$work/log" ||
            fail "$mode: a rank waited for the store's deadline: $(cat "$work/log")"
        grep -q "rank 1\] train_gpt: checkpoint of step 10 .*: File too large" "$work/log" ||
            fail "$mode: rank 1 does not say why: $(cat "$work/log")"
        grep -q "rank 0\] train_gpt: checkpoint of step 10 .*rank 1 could not write step 10 under $work/a (file too large; its log says why)" "$work/log" ||
            fail "$mode: rank 0 does not name rank 1: $(cat "$work/log")"
        [[ ! -e $work/a/step-10 ]] || fail "$mode: step 10 left: $(ls -la "$work/a/step-10")"
        echo "ok   $mode: rank 1's failed save ended both ranks, rank 0 naming it"
    done
    train "$work/a" 10
    [[ $rc -eq 0 ]] && grep -q "resumed from step 5 under $work/a" "$work/log" ||
        fail "no resume from step 5 after the failed saves ($rc): $(cat "$work/log")"
    [[ -e $work/a/step-10/MANIFEST ]] || fail "step 10 not saved after the resume"
    echo "ok   step 5 resumed after the failed saves, step 10 saved"
    ;;
*)
    fail "unknown case $case_name"
    ;;
esac
