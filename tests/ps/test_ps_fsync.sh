#!/bin/bash
# msr_ps_durable_fsync: a durable server's log is synced (fdatasync) every N
# records and never with N = 0; with N > 0 each checkpoint and its
# directory are synced too (the directory also once for the layout file,
# at the first start). The syncs are counted under strace, by the
# file they name: 12 pushes at N = 0, 1, 5, 12 (the bound) and 13 (one
# past), a checkpoint every 4 pushes synced or not. Then the log's format:
# an empty log is a new one, a log of another format is refused by name
# (tests/ps/ps_worker fsync).
. "$(dirname "$0")/../integration/lib.sh"
PSW=$BUILD/tests/ps_worker
command -v strace >/dev/null || { echo "SKIP: no strace"; exit 77; }
strace -f -qq --seccomp-bpf -e trace=fsync -o /dev/null true 2>/dev/null ||
    { echo "SKIP: strace cannot trace here"; exit 77; }
# LeakSanitizer cannot run under ptrace: a sanitizer build's traced
# processes keep address checking and leave leak checking out
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0

# synced N CKPT: runs 12 pushes with the log synced every N records and a
# checkpoint every CKPT pushes, the syncs traced into $TMP/trace
synced() {
    rm -rf "$TMP/shards" "$TMP/trace"
    CODE=0
    timeout -k 5 60 strace -f -qq -y --seccomp-bpf -e trace=fdatasync,fsync -o "$TMP/trace" \
        env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=2 --local_worker_num=2 \
        --ps_servers=1 --grace_period=5 "$PSW" fsync "$TMP/shards" "$1" 12 "$2" \
        >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_code 0 "12 pushes, synced every $1, a checkpoint every $2"
    expect_in "ok fsync" "$TMP/out" "12 pushes, synced every $1"
}

# count CALL FILE: CALL(fd<.../FILE>) lines in the trace
count() {
    grep -c -- "$1([0-9]*<$TMP/shards$2>)" "$TMP/trace" || :
}

# expect_syncs CALL FILE N WHAT: count CALL FILE is N (WHAT: the case, for the message)
expect_syncs() {
    local got
    got=$(count "$1" "$2")
    [ "$got" = "$3" ] || fail "$4: $got $1 of ${2:-the directory}, want $3"
}

for n in 0 1 5 12 13; do
    synced "$n" 1000000
    want=0
    [ "$n" -gt 0 ] && want=$((12 / n))
    expect_syncs fdatasync /ps-s0.log "$want" "synced every $n"
done
ok "the log synced every N records: 12 pushes at N 0, 1, 5, 12, 13"

synced 1 4
expect_syncs fdatasync /ps-s0.log 12 "synced every record, checkpoints every 4"
expect_syncs fsync /ps-s0.ckpt.tmp 3 "synced every record, checkpoints every 4"
# the directory: after each checkpoint's rename, and once after the layout
# file's (written, synced, at the first start on a new directory)
expect_syncs fsync "" 4 "synced every record, checkpoints every 4 (the directory)"
expect_syncs fsync /ps-layout.tmp.0 1 "the layout, at the first start"
synced 0 4
expect_syncs fsync /ps-s0.ckpt.tmp 0 "never synced, checkpoints every 4"
expect_syncs fsync "" 1 "never synced, checkpoints every 4 (the directory: the layout's alone)"
[ -f "$TMP/shards/ps-s0.ckpt" ] || fail "no checkpoint written"
ok "checkpoints and their directory synced when the log is, not otherwise"

# the log's format: empty, a new log; another format, refused
rm -rf "$TMP/shards" && mkdir -m 700 "$TMP/shards" && : >"$TMP/shards/ps-s0.log"
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 "$PSW" fsync "$TMP/shards" 0 3 100
expect_code 0 "an empty log"
expect_in "fsync: server restored 0 pushes" "$TMP/out" "an empty log"
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 "$PSW" fsync "$TMP/shards" 0 3 100
expect_code 0 "the log of the run before"
expect_in "fsync: server restored 3 pushes" "$TMP/out" "the log of the run before"
printf 'MSRPSLG1........' >"$TMP/shards/ps-s0.log"
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 --grace_period=5 "$PSW" fsync \
    "$TMP/shards" 0 3 100
[ "$CODE" != 0 ] || fail "a log of another format was taken"
expect_in "not a parameter server log of this version" "$TMP/err" "a log of another format"
ok "an empty log is a new one; a log of another format is refused"
no_leftovers "fsync"
exit "$FAILED"
