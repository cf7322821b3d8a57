#!/bin/bash
# An unchanged PyTorch program (gloo, env://) under msrun on 1 and 2 nodes.
. "$(dirname "$0")/lib.sh"
use_token_file
SRC=${MSRUN_SOURCE:?}
PY=/usr/bin/python3
if ! "$PY" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
    echo "SKIP: $PY cannot import torch with gloo (install python3-torch)"
    exit 0
fi

run_msrun --worker_num=4 --local_worker_num=4 "$PY" "$SRC/examples/torch_allreduce.py"
expect_code 0 "torch on one node"
expect_in "allreduce over 4 ranks (local world 4, node 0) = 10, as expected" "$TMP/out" "result"
ok "torch gloo on 1 node, 4 workers"

port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2)
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 120 "$MSRUN" "${common[@]}" --node_rank=1 \
    "$PY" "$SRC/examples/torch_allreduce.py" >"$TMP/n1.out" 2>"$TMP/n1.err" &
n1=$!
run_msrun "${common[@]}" --node_rank=0 "$PY" "$SRC/examples/torch_allreduce.py"
c1=0
wait $n1 || c1=$?
expect_code 0 "torch node 0"
[ "$c1" = 0 ] || { cat "$TMP/n1.err" >&2; fail "torch node 1 exited $c1"; }
expect_in "allreduce over 4 ranks (local world 2, node 0) = 10, as expected" "$TMP/out" "result"
ok "torch gloo on 2 nodes of 2 workers"
no_leftovers "torch"
