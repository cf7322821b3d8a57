#!/usr/bin/env bash
# Bad input in a resume (issue 41 point 6), by whose fault it is
# (docs/checkpoint.md, "Exit status"): the checkpoint's (exit 2) or the
# machine's (exit 1), for train_gpt --resume and msrun ckpt inspect.
# A file cut short is refused when opened, and the message says where the
# cut falls: inside the first piece, at a piece's first byte exactly, one
# byte short of the end, inside the header and index (the sizes, and the
# piece by its tensor and elements, which this script finds from the
# file's own index), and inside libmsrun's header before the payload (the
# file named); the same layout's search for an older intact step says the
# same in its refusal of the step, and msrun ckpt inspect. A shard missing
# from a complete step: exit 2. An I/O error reading an intact file (a preloaded
# pread, read_cut_shim.c): exit 1.
# The checked search for an intact step with one rank's allocations failed
# in turn (ckpt_whole_worker, on 2 and 3 workers): every round either finds
# the step a search without failures finds, or ends on every rank at once
# (exit 1, the rank out of memory saying so, the others naming it), none
# waiting; the checkpoint's files are left as they were.
# Checkpoints of tp 2 (2 ranks), resumed by tp 2, by dp 2 ZeRO-3 (another
# layout) and by one process (another world size: train_gpt's own search).
#   train_gpt_ckpt_bad.sh
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
source "$(dirname "$0")/ckpt_worker_env.sh"
job_test_setup
job_prefix=ckbad
train_args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --grad-accum 2)
# the layouts: ranks, then train_gpt's options
tp2=(2 --tp 2)
dp2=(2 --zero 3)
one=(1 --grad-accum 4)
msrun_n "${tp2[@]}" --steps 3 --ckpt-every 3 --ckpt-dir "$work/good" >/dev/null \
    2>"$work/err" || fail "saving: $(cat "$work/err")"
file=step-3/rank-1.bin
size=$(stat -c %s "$work/good/$file")

# pieces FILE: "payload table", the payload's first byte and its chunk
# table's (after the pieces), then "lo offset bytes" of each piece (its
# first element, its first byte in the file, its bytes), from the index as
# docs/checkpoint.md lays it out
pieces() {
    python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
at = b.find(b"MSRTRN04")
hl, = struct.unpack_from("<I", b, at + 12)
n, = struct.unpack_from("<I", b, at + 68)
rows = []
off = at + hl
for k in range(n):
    lo, cnt, _ = struct.unpack_from("<QII", b, at + hl - 16 * n + 16 * k)
    rows.append("%d %d %d" % (lo, off, 12 * cnt))
    off += 12 * cnt
print(at, off)
print("\n".join(rows))
PY
}
mapfile -t idx < <(pieces "$work/good/$file")
(( ${#idx[@]} >= 3 )) || fail "rank 1's shard has fewer than 2 pieces: ${idx[*]}"
read -r payload table <<<"${idx[0]}"
read -r lo0 off0 len0 <<<"${idx[1]}"
read -r lo1 off1 _ <<<"${idx[2]}"
read -r lol _ <<<"${idx[-1]}"
(( off0 + len0 == off1 )) || fail "pieces 0 and 1 do not follow: ${idx[*]}"

# cut_to AT: a copy of the checkpoint with rank 1's file cut to AT bytes
cut_to() {
    rm -rf "$work/cut"
    cp -r "$work/good" "$work/cut"
    truncate -s "$1" "$work/cut/$file"
}
# bad RC PATTERN N ARGS...: train_gpt --resume ARGS on N workers exits RC
# with PATTERN on stderr, nothing trained
bad() {
    local want=$1 pattern=$2 rc=0
    shift 2
    msrun_n "$@" --steps 5 --resume >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq $want ]] || fail "resume $* exited $rc, want $want: $(cat "$work/err")"
    grep -q -- "$pattern" "$work/err" || fail "resume $*: no '$pattern' in: $(cat "$work/err")"
    ! grep -q "^step" "$work/out" || fail "resume $* trained: $(cat "$work/out")"
}
# all RC PATTERN DIR: bad, resumed by tp 2 (the same layout), dp 2, one
all() {
    bad "$1" "$2" "${tp2[@]}" --ckpt-dir "$3"
    bad "$1" "$2" "${dp2[@]}" --ckpt-dir "$3"
    bad "$1" "$2" "${one[@]}" --ckpt-dir "$3"
}
sizes="is cut short: %s bytes, its index gives $size; the cut falls"
cut_to $((off0 + 4))
all 2 "$(printf "$sizes" $((off0 + 4))) inside the piece of tensor .* (elements \[$lo0, " \
    "$work/cut"
# the same layout's checked search for an intact step (msr_ckpt_latest)
# names the step, the file and the tensor in its refusal too
bad 2 "step 3 is not usable on rank 1: .*$file is not rank 1's state of step 3.*: $file \
$(printf "$sizes" $((off0 + 4))) inside the piece of tensor .* (elements \[$lo0, " \
    "${tp2[@]}" --ckpt-dir "$work/cut"
cut_to "$off1"
all 2 "$(printf "$sizes" "$off1") at the start of the piece of tensor .* (elements \[$lo1, " \
    "$work/cut"
cut_to $((table - 1))
all 2 "$(printf "$sizes" $((table - 1))) inside the piece of tensor .* (elements \[$lol, " \
    "$work/cut"
cut_to $((size - 1))
all 2 "$(printf "$sizes" $((size - 1))) inside the chunk table after its pieces (bytes \[$table, $size) of the file)" \
    "$work/cut"
grep -q "$file is not rank 1's state of step 3" "$work/err" ||
    fail "the refusal itself is not kept: $(cat "$work/err")"
cut_to $((payload + 40))
all 2 "$file is cut short inside its header and index: $((payload + 40)) bytes" "$work/cut"
cut_to $((payload - 8)) # libmsrun's own header: no payload to say more from
all 2 "$file is not rank 1's state of step 3" "$work/cut"
echo "ok cut short: the piece or the header named"

# a shard missing from a complete step (its MANIFEST written): exit 2
cut_to "$size"
rm "$work/cut/$file"
bad 2 "rank-1.bin does not exist" "${tp2[@]}" --ckpt-dir "$work/cut"
bad 2 "rank-1.bin does not exist" "${one[@]}" --ckpt-dir "$work/cut"
echo "ok a missing shard: exit 2"

# msrun ckpt inspect: the same rule, and the same words for a cut
inspect() { # inspect RC PATTERN DIR: PATTERN on its stdout or stderr
    local rc=0
    timeout 30 "$bin/msrun" ckpt inspect "$3" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq $1 ]] || fail "inspect $3 exited $rc, want $1: $(cat "$work/out" "$work/err")"
    cat "$work/out" "$work/err" | grep -q -- "$2" ||
        fail "inspect $3: no '$2' in: $(cat "$work/out" "$work/err")"
}
cut_to $((off0 + 4))
inspect 2 "$file is not rank 1's state of step 3: .*$(printf "$sizes" $((off0 + 4))) inside the \
piece of tensor .* (elements \[$lo0, " "$work/cut"
cut_to "$off1"
inspect 2 "$(printf "$sizes" "$off1") at the start of the piece of tensor .* (elements \[$lo1, " \
    "$work/cut"
# rank 0's own file, whose settings name the tensors: the elements alone
cp -r "$work/good" "$work/cut0"
mapfile -t idx0 < <(pieces "$work/good/step-3/rank-0.bin")
read -r _ table0 <<<"${idx0[0]}"
truncate -s $((table0 - 1)) "$work/cut0/step-3/rank-0.bin"
inspect 2 "step-3/rank-0.bin is cut short: .* inside the piece (elements \[" "$work/cut0"
# cut inside its chunk table
cp "$work/good/step-3/rank-0.bin" "$work/cut0/step-3/rank-0.bin"
truncate -s -1 "$work/cut0/step-3/rank-0.bin"
inspect 2 "step-3/rank-0.bin is cut short: .* inside the chunk table after its pieces" "$work/cut0"

# an I/O error reading an intact file (EIO past its first piece): the
# machine's fault, exit 1, the error named; not under a sanitizer, whose
# runtime must be preloaded first
if [[ -z ${MSRUN_SANITIZE:-} ]]; then
    eio=(LD_PRELOAD="$MSRUN_BUILD/tests/read_cut_shim.so" MSR_TEST_CUT_FILE=/$file
        MSR_TEST_CUT_AT=$((off1 + 4)) MSR_TEST_CUT_EIO=1)
    keep_env=("${worker_env[@]}")
    worker_env=(env "${eio[@]}")
    bad 1 "Input/output error" "${tp2[@]}" --ckpt-dir "$work/good"
    bad 1 "Input/output error" "${one[@]}" --ckpt-dir "$work/good"
    worker_env=("${keep_env[@]}")
    rc=0
    env "${eio[@]}" timeout 30 "$bin/msrun" ckpt inspect "$work/good" >"$work/out" \
        2>"$work/err" || rc=$?
    [[ $rc -eq 1 ]] || fail "inspect with EIO exited $rc, want 1: $(cat "$work/err")"
    grep -q "Input/output error" "$work/err" || fail "inspect: no EIO in: $(cat "$work/err")"
    echo "ok an I/O error: exit 1"
fi
inspect 0 "every checksum matches, every element present" "$work/good"

# out of memory in the checked search: steps 3 and 6, 6 damaged in a piece
msrun_n "${tp2[@]}" --steps 6 --ckpt-every 3 --ckpt-dir "$work/two" >/dev/null \
    2>"$work/err" || fail "saving steps 3 and 6: $(cat "$work/err")"
printf '\x55' | dd of="$work/two/step-6/$(basename "$file")" bs=1 seek=$((table - 100)) \
    conv=notrunc 2>/dev/null
(cd "$work/two" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$work/sums"
whole() { # whole RANKS NOMEM: the worker's rounds in $work/log
    local rc=0
    ckpt_worker "$1" 60 ckpt_whole_worker "$work/two" 6 \
        "layers 2 channels 32 heads 4 seq 16 vocab 256" "$2" || rc=$?
    [[ $rc -eq 0 ]] || fail "$1 ranks, rank $2 out of memory: exit $rc: $(cat "$work/log")"
    python3 - "$work/log" "$1" "$2" <<'PY' || fail "$1 ranks, rank $2 out of memory (above)"
import re, sys
ranks, nomem = int(sys.argv[2]), int(sys.argv[3])
rounds = {}
for line in open(sys.argv[1]):
    m = re.search(r"\[node 0 rank (\d+)\] round (\d+): (.*)", line)
    if m:
        rounds.setdefault(int(m[2]), {})[int(m[1])] = m[3]
last = max(rounds)
assert sorted(rounds) == list(range(last + 1)), sorted(rounds)
failed = 0
for i, said in sorted(rounds.items()):
    assert sorted(said) == list(range(ranks)), (i, said)
    if i == last or not said[nomem].startswith("failed"):
        assert all(v == f"step 3 of 2 ranks" for v in said.values()), (i, said)
        continue
    failed += 1
    assert all(v.startswith("failed: ") and "(exit 1)" in v for v in said.values()), (i, said)
    assert "out of memory" in said[nomem], (i, said)
    for r, v in said.items():
        assert r == nomem or f"rank {nomem} " in v, (i, r, v)
assert failed > 0, "no round failed"
print(f"{ranks} ranks, rank {nomem} out of memory: {last} rounds, {failed} failed on every rank")
PY
}
whole 2 1
whole 3 0
(cd "$work/two" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | cmp -s - "$work/sums" ||
    fail "the checked search changed the checkpoint's files"
echo "ok"
