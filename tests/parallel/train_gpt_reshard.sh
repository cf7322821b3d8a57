#!/usr/bin/env bash
# Resharding: a checkpoint saved in one layout resumes in another layout
# and world size. For each pair A -> B, layout A trains 3 steps and saves;
# layout B resumes from it and trains 10 more; the same layout B resumed
# from the checkpoint one process saved at step 3 must print the same 10
# losses (1e-5 relative). Then bad input: a truncated payload, one that
# ends early while it is read, a damaged range table or piece, another
# model's checkpoint: exit 2 naming the file (and the piece's tensor) or
# both settings, no step trained. Usage: train_gpt_reshard.sh GROUP (dense, moe).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
group=${1:-dense}
# the model, the options every msrun_n starts with (job_env.sh); G = 12
# sequences a step in every layout: micro-batch x grad-accum x dp
train_args=(--layers 6 --channels 32 --heads 4 --seq 16 --steps 13 --global-batch 12 --lr 3e-3)
if [[ $group == moe ]]; then
    train_args+=(--experts 4 --top-k 2 --moe-every 2)
fi
job_prefix=reshard
# the layouts, by name: ranks, then train_gpt's options
declare -A L=(
    [one]="1 --micro-batch 2 --grad-accum 6"
    [dp4z3]="4 --micro-batch 3 --grad-accum 1 --zero 3"
    [dp4z1]="4 --micro-batch 3 --grad-accum 1 --zero 1"
    [dp2z2]="2 --micro-batch 2 --grad-accum 3 --zero 2"
    [tp2pp2]="4 --micro-batch 2 --grad-accum 6 --tp 2 --pp 2 --zero 1"
    [pp2int]="2 --micro-batch 2 --grad-accum 6 --pp 2 --schedule interleaved --virtual-stages 2"
    [pp4uneven]="4 --micro-batch 3 --grad-accum 4 --pp 4 --pp-layers 2,1,1,2"
    [tp2sp]="2 --micro-batch 2 --grad-accum 6 --tp 2 --sp"
    [cp2]="2 --micro-batch 2 --grad-accum 6 --cp 2"
    [mesh8]="8 --micro-batch 2 --grad-accum 3 --dp 2 --pp 2 --tp 2 --zero 2"
    [pp3]="3 --micro-batch 2 --grad-accum 6 --pp 3"
    [ep2]="2 --micro-batch 2 --grad-accum 3 --ep 2"
    [ep4]="4 --micro-batch 3 --grad-accum 1 --ep 4 --zero 1"
    [ep2tp2]="4 --micro-batch 2 --grad-accum 3 --dp 2 --ep 2 --tp 2"
)
# run NAME CKPT_DIR LOSS_LOG [more options]: layout NAME with checkpoints in CKPT_DIR
run() {
    local spec=(${L[$1]}) dir=$2 log=$3
    shift 3
    rm -f "$log" # --loss-log appends
    msrun_n "${spec[0]}" "${spec[@]:1}" --ckpt-dir "$dir" --loss-log "$log" "$@" >/dev/null \
        2>"$work/err" || fail "layout $1 ($*): $(cat "$work/err")"
}
# the checkpoint of one process at step 3
run one "$work/ck-one" "$work/log-one" --steps 3 --ckpt-every 3
# pair A B: A saves at step 3, B resumes from it and from one process's
close_losses() {
    python3 - "$1" "$2" <<'PY'
import sys
a, b = [[l.split() for l in open(f) if l.strip()] for f in sys.argv[1:3]]
assert len(a) == len(b) == 10, (len(a), len(b))
for x, y in zip(a, b):  # step N loss L norm G (hexadecimal floats)
    assert x[:2] == y[:2] and x[2] == "loss", (x, y)
    u, v = float.fromhex(x[3]), float.fromhex(y[3])
    assert abs(u - v) <= 1e-5 * abs(v), (x, y)
PY
}
pair() {
    local a=$1 b=$2 d="$work/ck-$1-$2"
    run "$a" "$d" "$work/log-$a" --steps 3 --ckpt-every 3
    cp -r "$work/ck-one" "$d-ref"
    run "$b" "$d" "$work/log-ab" --resume
    grep -q "resumed from step 3" "$work/err" || fail "$a -> $b did not resume: $(cat "$work/err")"
    cp "$work/err" "$work/err-ab"
    run "$b" "$d-ref" "$work/log-1b" --resume
    close_losses "$work/log-ab" "$work/log-1b" ||
        fail "$a -> $b: $(paste "$work/log-ab" "$work/log-1b")"
    echo "ok $a -> $b"
}
if [[ $group == dense ]]; then
    pair tp2pp2 dp4z3
    pair dp4z3 tp2pp2
    pair pp2int pp4uneven
    pair tp2sp cp2
    pair mesh8 pp3
    # pp 3's rank 0 holds a third of the layers: it reads only the pieces of
    # them out of the 8 shards, not the shards
    read_bytes=$(sed -n 's/.*rank 0 read \([0-9]*\) bytes .* of shards of \([0-9]*\) bytes.*/\1 \2/p' \
        "$work/err-ab")
    [[ -n $read_bytes ]] && (( ${read_bytes% *} * 2 < ${read_bytes#* } )) ||
        fail "mesh8 -> pp3: rank 0 read '$read_bytes' (read, of): $(cat "$work/err-ab")"
    echo "ok mesh8 -> pp3: rank 0 read $read_bytes (bytes read, of)"
    pair dp4z1 dp2z2
    pair one dp4z1
    # parts of pieces: a model of 128 channels, whose pieces span many
    # chunks (1024 elements), saved by dp 2 at ZeRO 2; dp 4 at ZeRO 3 reads
    # only the chunks of its shards, at ZeRO 1 every parameter and its
    # shards' moments, and tp 2 + sp the chunks of its slices, each
    # chunk run checked by its chunks' CRCs, with the losses of the same
    # layout resumed from one process's checkpoint
    keep_args=("${train_args[@]}")
    train_args=(--layers 2 --channels 128 --heads 4 --seq 16 --steps 13 --global-batch 12
        --lr 3e-3)
    run one "$work/big-one" "$work/log-big-one" --steps 3 --ckpt-every 3
    run dp2z2 "$work/big" "$work/log-big" --steps 3 --ckpt-every 3
    for b in dp4z3 dp4z1 tp2sp; do
        rm -rf "$work/big-b" "$work/big-one-b"
        cp -r "$work/big" "$work/big-b"
        cp -r "$work/big-one" "$work/big-one-b"
        run $b "$work/big-b" "$work/log-ab" --resume
        grep -q "resumed from step 3" "$work/err" || fail "big -> $b did not resume: $(cat "$work/err")"
        read_bytes=$(sed -n 's/.*rank 0 read \([0-9]*\) bytes .* of shards of \([0-9]*\) bytes.*/\1 \2/p' \
            "$work/err")
        run $b "$work/big-one-b" "$work/log-1b" --resume
        close_losses "$work/log-ab" "$work/log-1b" ||
            fail "big -> $b: $(paste "$work/log-ab" "$work/log-1b")"
        # ZeRO 3 over 4: a quarter of the pieces' bytes and their chunk
        # tables; ZeRO 1: the parameters and a quarter of the moments, a
        # half; tp 2: about half (the layer norms whole) and not all
        case $b in dp4z3) limit=35 ;; dp4z1) limit=60 ;; *) limit=75 ;; esac
        [[ -n $read_bytes ]] && (( ${read_bytes% *} * limit < ${read_bytes#* } * 100 )) ||
            fail "big -> $b: rank 0 read '$read_bytes' (read, of), want under $limit %"
        echo "ok big -> $b: rank 0 read $read_bytes (bytes read, of)"
    done
    # damaged DIR FILE AT PIECE: a copy of DIR with byte AT of FILE damaged,
    # resumed by dp 4 at ZeRO 3: exit 2 naming the file and PIECE (a
    # pattern of the piece's tensor and elements), nothing trained
    damaged() {
        local rc=0 spec=(${L[dp4z3]})
        rm -rf "$work/big-b" && cp -r "$1" "$work/big-b"
        printf '\x55' | dd of="$work/big-b/$2" bs=1 seek="$3" conv=notrunc 2>/dev/null
        msrun_n "${spec[0]}" "${spec[@]:1}" --ckpt-dir "$work/big-b" --resume >"$work/out" \
            2>"$work/err" || rc=$?
        [[ $rc -eq 2 ]] || fail "byte $3 of $2 damaged: exit $rc, want 2: $(cat "$work/err")"
        grep -q "$2: the piece of tensor $4 of the whole model) does not match its CRC" \
            "$work/err" || fail "byte $3 of $2 damaged: the piece not named: $(cat "$work/err")"
        ! grep -q "^step" "$work/out" || fail "trained from a damaged checkpoint: $(cat "$work/out")"
    }
    # a damaged float in a chunk a shard reads, a damaged chunk crc, and a
    # damaged header field that only the pieces' CRCs cover (the writer's
    # ZeRO stage: byte 64 of the payload, after libmsrun's 48)
    f=step-3/rank-1.bin
    end=$(pieces_end "$work/big/$f")
    for at in $((end - 7)) $((end + 5)) $((48 + 64)); do
        damaged "$work/big" $f $at "[a-z0-9.]* (elements \[[0-9]*, [0-9]*)"
    done
    # one process's checkpoint: a damaged float of its first chunk (wte's
    # first row, which rank 0 reads in part, its run's CRC finding it), and
    # the header field again
    f=step-3/rank-0.bin
    first=$(python3 -c 'import struct,sys; print(48 + struct.unpack_from("<I", open(sys.argv[1], "rb").read(), 60)[0])' \
        "$work/big-one/$f")
    for at in $((first + 21)) $((48 + 64)); do
        damaged "$work/big-one" $f $at "wte (elements \[0, [0-9]*)"
    done
    echo "ok a damaged chunk, chunk crc and header field: refused naming the piece"
    train_args=("${keep_args[@]}")
else
    pair ep2 ep4
    pair ep2tp2 one
fi

# bad input, resumed in another layout: exit 2, the reason, nothing trained
# (refuse NAME DIR PATTERN [more options]; layout NAME)
refuse() {
    local spec=(${L[$1]}) dir=$2 pattern=$3 rc=0
    shift 3
    msrun_n "${spec[0]}" "${spec[@]:1}" --ckpt-dir "$dir" --resume "$@" >"$work/out" \
        2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "resume from $dir exited $rc, want 2: $(cat "$work/err")"
    grep -q -- "$pattern" "$work/err" || fail "no '$pattern' in: $(cat "$work/err")"
    ! grep -q "^step" "$work/out" || fail "trained from a bad checkpoint: $(cat "$work/out")"
}
if [[ $group == dense ]]; then
    run tp2pp2 "$work/bad" "$work/log-bad" --steps 3
    cp -r "$work/bad" "$work/bad-cut"
    # cut short inside its last piece: refused when opened (its length is
    # not its header's), before any piece is read, by another layout and
    # by the same one
    truncate -s -100 "$work/bad-cut/step-3/rank-1.bin"
    refuse dp2z2 "$work/bad-cut" "step-3/rank-1.bin is not rank 1's state of step 3"
    refuse tp2pp2 "$work/bad-cut" "step-3/rank-1.bin is not rank 1's state of step 3"
    # cut short inside its last piece while it is read, past that check (a
    # preloaded pread, read_cut_shim.c): the failed read names the file,
    # the piece's tensor and the read's own error, in another layout (whose
    # pieces here are of one chunk each: read whole, the chunk table after
    # them) and in the same one; not under a sanitizer, whose runtime must
    # be preloaded first
    if [[ -z ${MSRUN_SANITIZE:-} ]]; then
        end=$(pieces_end "$work/bad/step-3/rank-1.bin")
        keep_env=("${worker_env[@]}")
        worker_env=(env "LD_PRELOAD=$MSRUN_BUILD/tests/read_cut_shim.so"
            MSR_TEST_CUT_FILE=/step-3/rank-1.bin "MSR_TEST_CUT_AT=$((end - 100))")
        for layout in dp2z2 tp2pp2; do
            refuse $layout "$work/bad" \
                "step-3/rank-1.bin: reading the piece of tensor h2.fcprojw (elements \["
            grep -q "step-3/rank-1.bin ends early" "$work/err" ||
                fail "$layout: no 'ends early' in: $(cat "$work/err")"
        done
        worker_env=("${keep_env[@]}")
    fi
    # a damaged range table, then a damaged piece: another layout reads
    # only headers and pieces, each checked by its own CRC
    cp -r "$work/bad" "$work/bad-flip"
    printf '\x55' | dd of="$work/bad-flip/step-3/rank-1.bin" bs=1 seek=3000 conv=notrunc 2>/dev/null
    refuse dp2z2 "$work/bad-flip" "step-3/rank-1.bin has ranges that do not fit"
    cp -r "$work/bad" "$work/bad-piece"
    end=$(pieces_end "$work/bad-piece/step-3/rank-1.bin") # its last piece's end
    printf '\x55' | dd of="$work/bad-piece/step-3/rank-1.bin" bs=1 seek=$((end - 100)) \
        conv=notrunc 2>/dev/null
    refuse dp2z2 "$work/bad-piece" "step-3/rank-1.bin: the piece of tensor h2.fcprojw (elements"
    # the same layout reads its own payload whole, under its CRC
    refuse tp2pp2 "$work/bad-piece" "step-3/rank-1.bin does not match its CRC"
    train_args[1]=4 # --layers 4: another model
    refuse dp2z2 "$work/bad" "written with other settings; checkpoint: layers 6"
    echo "ok bad input refused"
    # kill -9 while saving: tp 2 x pp 2 saves every step, the whole job is
    # killed once step 2 is complete; dp 2 resumes from the newest complete
    # step, whatever the kill interrupted
    job=reshard-kill-$$
    jobs_started+=("$job")
    spec=(${L[tp2pp2]})
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${train_args[@]}" "${spec[@]:1}" --steps 100000 \
        --ckpt-every 1 --ckpt-dir "$work/kill" >/dev/null 2>&1 &
    deadline=$((SECONDS + 30))
    while [[ ! -e "$work/kill/step-2/MANIFEST" && $SECONDS -lt $deadline ]]; do sleep 0.05; done
    [[ -e "$work/kill/step-2/MANIFEST" ]] || fail "no complete step 2 within 30 s"
    kill_job "$job"
    wait || true
    run dp2z2 "$work/kill" "$work/log-kill" --resume
    grep -q "resumed from step [0-9]" "$work/err" || fail "no resume after kill -9: $(cat "$work/err")"
    echo "ok kill -9 during saves: $(grep -o 'resumed from step [0-9]*' "$work/err")"
fi
