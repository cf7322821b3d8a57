#!/usr/bin/env bash
# msrun's torch backend when a rank dies mid-collective (worker_torchkill.py):
# msrun exits with the victim's 137 and every survivor reports the loss
# (MSR_ERR_PEER_LOST) within the group's deadline. Exits 77 (skipped) with
# the reason when torch or msrun.torch cannot be loaded.
# Usage: run_torchkill.sh NP [LIMIT_SECONDS]
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
# shellcheck disable=SC2034 # read by py_env.sh
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
np=$1
limit=${2:-60}
. "$here/py_env.sh"
py_setup "torch, torch.distributed"

CODE=0
timeout -k 5 "$limit" env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --grace_period=30 --python "$PY" \
    --worker_num="$np" --local_worker_num="$np" "$here/worker_torchkill.py" \
    >"$TMP/out" 2>"$TMP/err" || CODE=$?
if [ "$CODE" = 77 ] && grep -q "SKIP:" "$TMP/out"; then
    grep -m 1 "SKIP:" "$TMP/out"
    exit 77
fi
expect_code 137 "worker_torchkill.py with $np ranks (the victim's SIGKILL)"
got=$(grep -c "survived: MSR_ERR_PEER_LOST" "$TMP/out")
[ "$got" = $((np - 1)) ] || fail "$got of $((np - 1)) survivors reported MSR_ERR_PEER_LOST"
grep "survived" "$TMP/out"
no_leftovers "worker_torchkill.py with $np ranks"
ok "a rank killed mid-allreduce: every survivor of $np ranks raised in time"
exit "$FAILED"
