#!/usr/bin/env bash
# msrun --profile_launch: the launch timeline names every phase of msrun
# and of every worker, once, with durations that fit in the total; past 4
# workers it prints min/median/max; a job that only uses the store never
# creates a UCX context (no ucx_* phase), one with a communicator does;
# without the option the workers are not asked to record.
. "$(dirname "$0")/lib.sh"

LW=$BUILD/tests/launch_worker
AGENT_PHASES="parse token coordinator setup join rendezvous workers job_end leave teardown"

# table FILE: the timeline's rows "phase process start duration" (a
# worker's process is "rank N": one word "rank:N" here)
table() { sed -n '/^msrun: launch timeline/,/^  total /p' "$1" | sed '1,2d; s/ rank \([0-9]*\) / rank:\1 /'; }

# check_fits FILE: every row starts and ends within the total, and the
# phases of msrun, and of each worker, do not add up past it
check_fits() {
    table "$1" | awk '
        $1 == "total" { total = $4; next }
        { end = $3 + $4; if (end > maxend) maxend = end; sum[$2] += $4 }
        END {
            if (total <= 0) { print "no total"; exit 1 }
            if (maxend > total + 0.002) { print "a phase ends at " maxend " past the total " total; exit 1 }
            for (p in sum) if (sum[p] > total + 0.002) { print p "s phases add up to " sum[p] " past " total; exit 1 }
        }' || fail "the timeline's durations do not fit in the total"
}

# 1. four store-only workers: every phase, once; no UCX
run_msrun --worker_num=4 --profile_launch --log_level=warn "$LW" store
expect_code 0
t=$(table "$TMP/err")
for p in $AGENT_PHASES; do
    [ "$(echo "$t" | awk -v p="$p" '$1 == p && $2 == "msrun"' | wc -l)" = 1 ] ||
        fail "msrun's phase $p is not in the timeline once"
done
for r in 0 1 2 3; do
    for p in fork exec store_connect first_barrier finalize exit; do
        [ "$(echo "$t" | awk -v p="$p" -v w="rank:$r" '$1 == p && $2 == w' | wc -l)" = 1 ] ||
            fail "rank $r's phase $p is not in the timeline once"
    done
done
ok "4 workers: every phase of msrun and of each worker, once"
check_fits "$TMP/err"
ok "4 workers: the phases fit in the total"
echo "$t" | grep -qE '^(ucx_context|ucx_worker|shared_memory) ' &&
    fail "a store-only worker created UCX or shared memory"
ok "a store-only job never creates a UCX context"
[ "$(grep -c 'recording=yes' "$TMP/out")" = 4 ] || fail "not every worker was asked to record"

# 2. a communicator: its UCX context, worker and shared memory, per rank
run_msrun --worker_num=2 --profile_launch --log_level=warn "$LW" comm
expect_code 0
t=$(table "$TMP/err")
for r in 0 1; do
    for p in ucx_context ucx_worker shared_memory first_barrier; do
        [ "$(echo "$t" | awk -v p="$p" -v w="rank:$r" '$1 == p && $2 == w' | wc -l)" = 1 ] ||
            fail "rank $r's phase $p is not in the timeline of a communicator's job"
    done
done
check_fits "$TMP/err"
ok "a communicator's job: ucx_context, ucx_worker, shared_memory per rank"

# 3. five workers, one past the listed 4: one row per phase, over all
run_msrun --worker_num=5 --profile_launch --log_level=warn "$LW" store
expect_code 0
for p in fork exec store_connect first_barrier finalize exit; do
    grep -qE "^  $p +5 ranks  start [0-9.]+/[0-9.]+/[0-9.]+  duration [0-9.]+/[0-9.]+/[0-9.]+$" \
        "$TMP/err" || fail "5 workers: no min/median/max row of $p over 5 ranks"
done
table "$TMP/err" | grep -q ' rank:[0-9]' && fail "5 workers: a worker listed one by one"
ok "5 workers: min/median/max of each phase"

# 4. off: no table, and the workers are not asked, even when msrun's own
# environment says so
MSR_PROFILE_LAUNCH=$TMP/stray run_msrun --worker_num=2 --log_level=warn "$LW" store
expect_code 0
grep -q "launch timeline" "$TMP/err" && fail "a timeline without --profile_launch"
[ "$(grep -c 'recording=no' "$TMP/out")" = 2 ] || fail "a worker was asked to record"
ls "$TMP"/stray* >/dev/null 2>&1 && fail "a worker wrote a profile file"
ok "without --profile_launch: no table, nothing recorded"

# 5. the job's directory goes, the workers' timeline files with it; and a
# directory left by a msrun that is gone goes at the next launch whatever
# it holds (a file of a name msrun does not know included)
mkdir -m 0700 "$TMP/rt"
top=$TMP/rt/msrun-$(id -u)
mkdir -m 0700 "$top"
true &
gone=$!
wait "$gone"
mkdir -m 0700 "$top/job-old-$gone"
echo x >"$top/job-old-$gone/profile.0"
echo x >"$top/job-old-$gone/some.file"
TMPDIR=$TMP/rt run_msrun --worker_num=2 --profile_launch --log_level=warn "$LW" store
expect_code 0
left=$(ls -A "$top")
[ -z "$left" ] || fail "left in the runtime directory after the job: $left"
ok "the job's directory is removed with its timeline files; a gone msrun's is swept"
no_leftovers
