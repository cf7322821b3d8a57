#!/bin/bash
# An elastic job grows at a checkpoint, not by throwing steps away
# (docs/checkpoint.md "Elastic jobs"): 2 msrun agents (--nnodes=2:3, 2
# workers each) train train_gpt --auto --tp 2 (tp 2 x pp 2) with no
# periodic checkpoint; a third agent joins. The coordinator tells the
# workers (MSR_KEY_JOIN_WAITING) and holds the re-form; train_gpt saves
# the step it is at, says so (MSR_KEY_JOIN_READY), and the job re-forms
# on 6 ranks (tp 2 x pp 3) resuming from that step: every step is trained
# once, and the steps after the resume equal (1e-5 relative) those of a
# 6-rank run resumed from the same checkpoint. Exit 0 on every node.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
. "$MSRUN_SOURCE/tests/fault/lib_fault.sh" # wait_coordinator, elastic_train
use_token_file
STEPS=120
elastic_train "$STEPS" --resume
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=2:3 --local_worker_num=2
    --max_restarts=3 --node_timeout=2 --last_call=0.3 --log_level=info)
start() { # start N: agent N in the background, its pid in pN
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "${common[@]}" "${train[@]}" --ckpt-dir "$TMP/ck" \
        --loss-log "$TMP/loss" >"$TMP/n$1.out" 2>"$TMP/n$1.err" &
    eval "p$1=$!"
}
start 0
wait_coordinator 127.0.0.1 "$port"
start 1
wait_for "generation 0: started 2 workers (ranks [0-9.]* of 4)" "$TMP/n0.err" 30 ||
    fail "2 nodes formed generation 0"
wait_for "^step 3 " "$TMP/loss" 40 || fail "no step 3 on 4 ranks"
start 2
wait_for "generation [1-9]: started 2 workers (ranks [0-9.]* of 6)" "$TMP/n0.err" 30 ||
    fail "the late node was not taken in (6 ranks)"
# the training left and the reference run take several times longer on a
# loaded core: their deadlines only catch a hang (ctest's limit bounds the
# whole test), and end as soon as the run does
for n in 0 1 2; do
    eval "pid=\$p$n"
    wait_pid "$pid" 150
    [ "$CODE" = 0 ] || { tail -n 20 "$TMP/n$n.err" >&2; fail "node $n exited $CODE"; }
done
cat "$TMP"/n[012].err >"$TMP/err"
saved=$(sed -n 's/.*train_gpt: a node waits to join: saving step \([0-9]*\), then the job re-forms$/\1/p' \
    "$TMP/err" | head -n 1)
[ -n "$saved" ] || fail "train_gpt did not save for the joining node"
grep -q "train_gpt: resumed from step $saved under .* (saved by 4 ranks)$" "$TMP/err" ||
    fail "the 6 ranks did not resume from step $saved"
grep -q -- "--auto: plan 1 of [0-9]*: dp 1 tp 2 pp 3 " "$TMP/err" || fail "no tp 2 x pp 3 plan"
# every step trained once: none thrown away and trained again
python3 - "$TMP/loss" "$STEPS" <<'PY' || fail "steps trained twice or missing: $(cut -d' ' -f1,2 "$TMP/loss" | tr '\n' ' ')"
import sys
seen = [int(l.split()[1]) for l in open(sys.argv[1]) if l.startswith("step ")]
assert seen == list(range(1, int(sys.argv[2]) + 1)), seen
PY
# the reference: 6 ranks resumed from a copy of that checkpoint alone
mkdir -p "$TMP/ref"
cp -r "$TMP/ck/step-$saved" "$TMP/ref/" || fail "no step-$saved to copy"
timeout -k 5 150 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=6 --local_worker_num=6 \
    "${train[@]}" --ckpt-dir "$TMP/ref" --loss-log "$TMP/ref.loss" >/dev/null 2>"$TMP/ref.err" ||
    { tail -n 20 "$TMP/ref.err" >&2; fail "the reference run"; }
python3 - "$TMP/loss" "$TMP/ref.loss" "$saved" "$STEPS" <<'PY' || fail "losses after the resume differ"
import sys
def steps(path):
    return {int(w[1]): float.fromhex(w[3]) for w in (l.split() for l in open(path))
            if len(w) >= 4 and w[0] == "step" and w[2] == "loss"}
job, ref = steps(sys.argv[1]), steps(sys.argv[2])
for s in range(int(sys.argv[3]) + 1, int(sys.argv[4]) + 1):
    assert abs(job[s] - ref[s]) <= 1e-5 * abs(ref[s]), (s, job[s], ref[s])
PY
no_leftovers "elastic grow"
ok "elastic grow: saved step $saved for the joining node, resumed on 6 ranks, no step lost"
