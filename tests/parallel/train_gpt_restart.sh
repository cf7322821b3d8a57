#!/usr/bin/env bash
# A worker killed mid-run under msrun --max_restarts 1: msrun restarts the
# job (generation 1), train_gpt --resume picks up the last complete
# checkpoint by itself, and the job ends with exactly the losses of a run
# that was never killed (bitwise, from --loss-log).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job=restart-$$-$RANDOM
jobs_started=("$job" "$job-ref")
fail_log=$work/log
steps=300
args=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --zero 2 --bucket-mb 0.02
    --steps $steps --ckpt-every 5 --ckpt-keep 2 --resume)

# the reference: the same job, never killed
timeout -k 5 100 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job-ref" \
    "${worker_env[@]}" "$bin/train_gpt" "${args[@]}" --ckpt-dir "$work/ref" \
    --loss-log "$work/ref.log" >/dev/null 2>&1 || fail "the reference run failed"
[[ $(wc -l <"$work/ref.log") -eq $steps ]] || fail "reference: $(wc -l <"$work/ref.log") steps"

timeout -k 5 100 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
    --max_restarts=1 "${worker_env[@]}" "$bin/train_gpt" "${args[@]}" --ckpt-dir "$work/ck" \
    --loss-log "$work/kill.log" >"$work/log" 2>&1 &
msrun_pid=$!
# once a checkpoint is complete (the first is step 5's), kill rank 1 (found
# by its job id and rank)
have_ckpt() { compgen -G "$work/ck/step-*/MANIFEST" >/dev/null; }
for _ in $(seq 1 2000); do
    have_ckpt && break
    sleep 0.01
done
have_ckpt || fail "no checkpoint appeared"
victim=""
for p in $(grep -lsa "MSR_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
    if grep -qsa "MSR_RANK=1" "/proc/$p/environ" && grep -qsa train_gpt "/proc/$p/cmdline"; then
        victim=$p
    fi
done
[[ -n "$victim" ]] || fail "no rank 1 to kill (did the run end before the kill?)"
kill -KILL "$victim"
rc=0
wait "$msrun_pid" || rc=$?
[[ $rc -eq 0 ]] || fail "msrun exited $rc after the restart"
grep -q "restart 1 of .* after rank 1 on node 0 ([^,]*, pid $victim) was killed by SIGKILL" "$work/log" ||
    fail "the kill was not seen"
grep -q "generation 1: started 2 workers" "$work/log" || fail "no restart"
grep -q -E "resumed from step [0-9]*[05] under" "$work/log" ||
    fail "generation 1 did not resume from a checkpoint"
# steps repeated after the restart print what they printed before; the last
# line of every step is the reference's
awk '{ last[$2] = $0 } END { for (s in last) print last[s] }' "$work/kill.log" | sort -k2,2n \
    >"$work/kill.last"
diff "$work/ref.log" "$work/kill.last" >/dev/null ||
    fail "the killed run ended differently: $(diff "$work/ref.log" "$work/kill.last" | head -5)"
awk '{ if (($2 in seen) && seen[$2] != $0) bad = 1; seen[$2] = $0 } END { exit bad }' \
    "$work/kill.log" || fail "a repeated step differs from its first run"
echo "restart: rank 1 killed after a checkpoint, $(grep -o 'resumed from step [0-9]*' "$work/log"), losses equal to the uninterrupted run"
