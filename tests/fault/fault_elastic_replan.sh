#!/bin/bash
# An elastic model-parallel job re-plans itself (docs/checkpoint.md
# "Elastic jobs"): 3 msrun agents (--nnodes=2:3, 2 workers each) train
# train_gpt --auto --tp 2 with checkpoints; the cluster file's memory
# budget leaves tp 2 x pp 3 on 6 ranks. kill -9 of one agent: the job
# re-forms on 2 nodes, the planner picks tp 2 x pp 2 for 4 ranks, and the
# job resumes from the last complete checkpoint with the same global batch
# (6 sequences: the first world's, not the 4 that the same command gives
# 4 ranks) and ends with exit 0. The steps after the resume equal (1e-5
# relative) those of a 4-rank run resumed from the same checkpoint.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh" # wait_coordinator, elastic_train
use_token_file
STEPS=60
elastic_train "$STEPS" --ckpt-every 4 --resume
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=2:3 --local_worker_num=2
    --max_restarts=3 --node_timeout=2 --last_call=5 --log_level=info)
for n in 0 1 2; do
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "${train[@]}" --ckpt-dir "$TMP/ck" \
        --loss-log "$TMP/loss" >"$TMP/n$n.out" 2>"$TMP/n$n.err" &
    eval "p$n=$!"
    [ $n = 0 ] && wait_coordinator 127.0.0.1 "$port"
done
# the 3 nodes form generation 0 together: it forms as soon as the third is
# in, so the last call is only a deadline for its msrun to start (at 2 s a
# loaded machine started it later, and generation 0 ran on 4 ranks)
wait_for "generation 0: started 2 workers (ranks [0-9.]* of 6)" "$TMP/n0.err" 40 ||
    fail "3 nodes formed generation 0"
# a checkpoint of the 6 ranks is complete (its MANIFEST is written last)
for ((i = 0; i < 800; i++)); do
    grep -qs '"world_size": 6' "$TMP"/ck/step-*/MANIFEST && break
    sleep 0.05
done
grep -qs '"world_size": 6' "$TMP"/ck/step-*/MANIFEST || fail "no checkpoint of 6 ranks in 40 s"
kill -9 "$p2" || fail "node 2's msrun was gone before the kill"
wait "$p2" 2>/dev/null
grep -q "^step $STEPS " "$TMP/loss" && fail "the job ended before the kill: nothing tested"
wait_for "generation [1-9]: started 2 workers (ranks [0-9.]* of 4)" "$TMP/n0.err" 30 ||
    fail "re-formed on 2 nodes"
# the training left and the reference run take several times longer on a
# loaded core: their deadlines only catch a hang (ctest's limit bounds the
# whole test), and end as soon as the run does
for n in 0 1; do
    eval "pid=\$p$n"
    wait_pid "$pid" 150
    [ "$CODE" = 0 ] || { tail -n 20 "$TMP/n$n.err" >&2; fail "node $n exited $CODE"; }
done
cat "$TMP/n0.err" "$TMP/n1.err" >"$TMP/err"
# the plans: tp 2 x pp 3 on 6 ranks, then tp 2 x pp 2 on 4, each printed
grep -q -- "--auto: plan 1 of [0-9]*: dp 1 tp 2 pp 3 " "$TMP/err" ||
    fail "no tp 2 x pp 3 plan on 6 ranks"
grep -q -- "--auto: plan 1 of [0-9]*: dp 1 tp 2 pp 2 .* grad-accum 3 " "$TMP/err" ||
    fail "no tp 2 x pp 2 plan on 4 ranks with 3 micro-batches (global batch 6)"
grep -q "resuming with the checkpoint's global batch of 6 sequences (step [0-9]*, saved by 6 ranks; this job has 4)" \
    "$TMP/err" || fail "the global batch was not kept"
from=$(sed -n 's/.*train_gpt: resumed from step \([0-9]*\) under .* (saved by 6 ranks)$/\1/p' \
    "$TMP/err" | tail -n 1)
[ -n "$from" ] && [ "$from" -ge 4 ] || fail "no resume from a checkpoint of 6 ranks"
grep -q "^step $STEPS " "$TMP/loss" || fail "step $STEPS not reached"
# the reference: 4 ranks resumed from a copy of that checkpoint alone
mkdir -p "$TMP/ref"
cp -r "$TMP/ck/step-$from" "$TMP/ref/" || fail "no step-$from to copy"
timeout -k 5 150 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=4 --local_worker_num=4 \
    "${train[@]}" --ckpt-dir "$TMP/ref" --loss-log "$TMP/ref.loss" >/dev/null 2>"$TMP/ref.err" ||
    { tail -n 20 "$TMP/ref.err" >&2; fail "the reference run"; }
grep -q "resumed from step $from under" "$TMP/ref.err" || fail "the reference did not resume"
python3 - "$TMP/loss" "$TMP/ref.loss" "$from" "$STEPS" <<'PY' || fail "losses after the resume differ"
import sys
def steps(path):  # the last line of each step: the resumed run's
    out = {}
    for line in open(path):
        w = line.split()  # step N loss L norm G (hexadecimal floats)
        if len(w) >= 4 and w[0] == "step" and w[2] == "loss":
            out[int(w[1])] = float.fromhex(w[3])
    return out
job, ref = steps(sys.argv[1]), steps(sys.argv[2])
lo, hi = int(sys.argv[3]) + 1, int(sys.argv[4])
for s in range(lo, hi + 1):
    a, b = job[s], ref[s]
    assert abs(a - b) <= 1e-5 * abs(b), (s, a, b)
print("steps %d..%d equal the reference's" % (lo, hi))
PY
# refused clearly (exit 2, no step), from the same checkpoint on 4 ranks: a
# layout given that does not divide them (it says that --auto re-plans),
# and a checkpoint whose rank-0 shard is cut short (the file named)
refused() { # refused NAME PATTERN DIR [train_gpt options...]
    local name=$1 pat=$2 dir=$3 rc=0
    shift 3
    timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=4 --local_worker_num=4 \
        "$BUILD/bin/train_gpt" --layers 6 --channels 32 --heads 4 --seq 16 --micro-batch 2 \
        --steps "$STEPS" --resume --ckpt-dir "$dir" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
        rc=$?
    [ "$rc" = 2 ] || fail "$name: exit $rc, want 2: $(tail -n 5 "$TMP/$name.err")"
    grep -q -- "$pat" "$TMP/$name.err" || fail "$name: no '$pat': $(tail -n 5 "$TMP/$name.err")"
    grep -q "step [0-9]* loss" "$TMP/$name.out" && fail "$name: trained a step"
}
refused layout "do not divide into tp 2 x pp 3 x cp 1; an elastic job .* needs --auto to re-plan" \
    "$TMP/ref" --tp 2 --pp 3
mkdir -p "$TMP/cut"
cp -r "$TMP/ck/step-$from" "$TMP/cut/"
truncate -s 10 "$TMP/cut/step-$from/rank-0.bin"
refused cut "the global batch of the checkpoint under $TMP/cut: .*rank-0" "$TMP/cut" --auto --tp 2 \
    --cluster "$TMP/cluster"
no_leftovers "elastic re-plan"
ok "elastic re-plan: tp 2 x pp 3 on 6 ranks, killed, resumed as tp 2 x pp 2 on 4"
