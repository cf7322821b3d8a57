#!/bin/bash
# train_rec (programs/train_rec) under msrun with 2 workers and 2 servers:
# it learns the synthetic click log (held-out AUC well above chance, and
# below the generating model's own), in synchronous and asynchronous mode;
# it equals the allreduce baselines (--mode dense, touched) with SGD; its
# options' bounds; and without --ps_servers it says why it cannot run.
. "$(dirname "$0")/../integration/lib.sh"
REC=$BUILD/bin/train_rec

# auc_ok MODE: the eval line's AUC is >= 0.65 and <= the generating model's
auc_ok() {
    local line auc best
    line=$(grep "eval: .* auc" "$TMP/out") || fail "$1: no eval line"
    auc=$(sed -n 's/.* auc \([0-9.]*\) (the generating model.s \([0-9.]*\)).*/\1/p' <<<"$line")
    best=$(sed -n 's/.* auc \([0-9.]*\) (the generating model.s \([0-9.]*\)).*/\2/p' <<<"$line")
    python3 -c "import sys; a, b = float('$auc'), float('$best'); sys.exit(0 if 0.65 <= a <= b else 1)" ||
        fail "$1: auc $auc (generating model $best): not in [0.65, $best]"
    ok "$1: $line"
}

run_msrun --worker_num=4 --local_worker_num=4 --ps_servers=2 "$REC" --steps 300 --log_every 100
expect_code 0 "train_rec, synchronous"
expect_in "step 300: loss" "$TMP/out" "train_rec, synchronous"
auc_ok "synchronous"

run_msrun --worker_num=4 --local_worker_num=4 --ps_servers=2 --ps_staleness=2 "$REC" --steps 300 \
    --log_every 100 --optim adam --lr 0.01
expect_code 0 "train_rec, asynchronous"
auc_ok "asynchronous, msrun --ps_staleness=2, adam"

# the same model without servers: synchronous SGD through the servers and
# the allreduce baselines (whole tables, touched rows) end alike
# eval_of: the eval line's "auc loss"
eval_of() { sed -n 's/.* auc \([0-9.]*\) (.*), loss \([0-9.]*\)$/\1 \2/p' "$TMP/out"; }
run_msrun --worker_num=3 --local_worker_num=3 --ps_servers=1 "$REC" --steps 100 --optim sgd \
    --lr 0.5 --rows 5000
expect_code 0 "train_rec --mode ps, sgd"
want=$(eval_of)
[ -n "$want" ] || fail "--mode ps: no eval line"
for mode in dense touched; do
    run_msrun --worker_num=2 --local_worker_num=2 "$REC" --mode $mode --steps 100 --optim sgd \
        --lr 0.5 --rows 5000
    expect_code 0 "train_rec --mode $mode"
    got=$(eval_of)
    python3 -c "import sys; a, b = '$want'.split(), '$got'.split(); \
sys.exit(0 if len(b) == 2 and all(abs(float(x) - float(y)) <= 2e-4 for x, y in zip(a, b)) else 1)" ||
        fail "--mode $mode ends at auc/loss '$got', the parameter server at '$want'"
    expect_in "bytes sent and .* received per step" "$TMP/out" "--mode $mode's traffic"
done
ok "sgd through the servers = allreduce of the whole tables = of the touched rows ($want)"
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 "$REC" --mode touched --steps 2
expect_code 1 "--mode touched with a server"
expect_in "has no servers" "$TMP/err" "--mode touched with a server"
run_msrun --worker_num=2 --local_worker_num=2 "$REC" --mode dense --steps 2 --optim adam
expect_code 1 "--mode dense --optim adam"
expect_in "takes --optim sgd only" "$TMP/err" "--mode dense --optim adam"

# --durable: a second run's servers start from the first's checkpoint and
# log (20 steps x 2 workers x 5 tables = 200 pushes; synchronous, 20 steps
# x 5 tables = 100 updates), the log synced at each record
for run in 1 2; do
    run_msrun --worker_num=3 --local_worker_num=3 --ps_servers=1 --ps_staleness=1 "$REC" \
        --steps 20 --eval 64 --durable "$TMP/shards"
    expect_code 0 "train_rec --durable, run $run"
done
expect_in "server 0: restored 200 updates from" "$TMP/out" "train_rec --durable's second run"
for run in 1 2; do
    run_msrun --worker_num=3 --local_worker_num=3 --ps_servers=1 "$REC" --steps 20 --eval 64 \
        --durable "$TMP/shards-sync" --fsync 1
    expect_code 0 "train_rec --durable --fsync 1, synchronous, run $run"
done
expect_in "server 0: restored 100 updates from" "$TMP/out" "train_rec --durable, synchronous"
ok "train_rec --durable: the servers restore what the run before pushed"

# the options' bounds: at the bound and one past
run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 "$REC" --steps 2 --fields 16 \
    --hidden 256 --dim 2 --eval 2
expect_code 0 "--fields 16 --hidden 256 --eval 2 (the bounds)"
for bad in "--fields 17" "--hidden 257" "--dim 257" "--eval 1" "--staleness -3" "--lr 0" \
    "--optim rmsprop" "--fsync -1" "--fsync 1"; do
    # shellcheck disable=SC2086 # an option and its value
    run_msrun --worker_num=2 --local_worker_num=2 --ps_servers=1 "$REC" $bad
    [ "$CODE" != 0 ] || fail "train_rec $bad: accepted"
    expect_in "train_rec: error: .*${bad%% *}" "$TMP/err" "train_rec $bad"
done
ok "train_rec's options: bounds taken, one past refused"

# no servers: a clear error, not a hang
run_msrun --worker_num=2 --local_worker_num=2 "$REC" --steps 2
[ "$CODE" != 0 ] || fail "train_rec without --ps_servers: exit 0"
expect_in "msr_ps_join: 0 servers" "$TMP/err" "train_rec without --ps_servers"
ok "train_rec without --ps_servers says why"
no_leftovers "train_rec"
exit "$FAILED"
