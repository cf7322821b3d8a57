#!/bin/bash
# A server killed with SIGKILL under load (2 workers pushing as fast as they
# can) loses no acknowledged push: msrun --max_restarts=1 starts the job
# again, the server restores its shard from its checkpoint and log
# (msr_ps_durable), and the workers find every push they saw acknowledged
# in it (tests/ps/ps_worker durable). PS_DURABLE=sync: the same in the
# synchronous mode, where the log holds each step's summed gradients and
# no acknowledged step may be lost.
. "$(dirname "$0")/../integration/lib.sh"
PSW=$BUILD/tests/ps_worker
dir=$TMP/durable
mode=${PS_DURABLE:-async}
what=pushes
[ "$mode" = sync ] && what=steps

start_msrun --worker_num=3 --local_worker_num=3 --ps_servers=1 --max_restarts=1 \
    --grace_period=5 "$PSW" durable "$dir" "$mode"

# acked_at_least N: both workers have N acknowledged pushes
acked_at_least() {
    local f
    for f in "$dir/acked-0" "$dir/acked-1"; do
        [ "$(cat "$f" 2>/dev/null || echo 0)" -ge "$1" ] || return 1
    done
}
for ((i = 0; i < 600; i++)); do
    acked_at_least 50 && break
    kill -0 "$BG_PID" 2>/dev/null || fail "msrun ended before the kill"
    sleep 0.05
done
acked_at_least 50 || fail "the workers did not reach 50 acknowledged pushes in 30 s"

# the server: rank 2 of this test's job, the worker program itself
server=
for p in $(leftovers); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "MSR_RANK=2" || continue
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q "ps_worker durable" && server=$p
done
[ -n "$server" ] || fail "no server process found"
before=$(cat "$dir/acked-0")+$(cat "$dir/acked-1")
kill -KILL "$server"
echo "killed the server (pid $server) at $before acknowledged pushes ($mode)"

wait_pid "$BG_PID" 90
expect_code 0 "the restarted job"
expect_in "generation 1" "$TMP/err" "the restart"
expect_in "durable: server restored 0 $what (generation 0)" "$TMP/out" "a fresh server"
expect_in "durable: server restored [1-9][0-9]* $what (generation 1)" "$TMP/out" \
    "the restarted server"
for w in 0 1; do
    expect_in "durable: worker $w: the restored row holds" "$TMP/out" "worker $w's check"
done
expect_not_in "FAIL" "$TMP/err" "the workers' checks"
[ -f "$dir/ps-s0.ckpt" ] || fail "no checkpoint was written"
for f in "$dir/ps-s0.ckpt" "$dir/ps-s0.log"; do
    [ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f"), not 600"
done
grep "restored\|the restored row" "$TMP/out"
no_leftovers "durable"
ok "a server killed under load came back with every acknowledged update ($mode)"
exit "$FAILED"
