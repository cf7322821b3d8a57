#!/bin/bash
# Runs tests/ps/ps_worker $PS_MODE under the real msrun with $PS_NP ranks of
# which the last $PS_SERVERS are servers (and msrun's options $PS_LAUNCH),
# and checks that it ends well: exit
# 0, "ok MODE" from rank 0, no FAIL, nothing left behind (lib.sh kills and
# removes whatever is left, also on failure).
. "$(dirname "$0")/../integration/lib.sh"
PSW=$BUILD/tests/ps_worker
mode=${PS_MODE:?PS_MODE is not set}
np=${PS_NP:?PS_NP is not set}
servers=${PS_SERVERS:?PS_SERVERS is not set}

# shellcheck disable=SC2086 # the mode's argument is a word of its own
# shellcheck disable=SC2086 # PS_LAUNCH: more of msrun's options, split
run_msrun --worker_num="$np" --local_worker_num="$np" --ps_servers="$servers" \
    --grace_period=5 ${PS_LAUNCH:-} "$PSW" $mode
cat "$TMP/out"
expect_code 0 "ps_worker $mode"
expect_not_in "FAIL" "$TMP/err" "ps_worker $mode"
expect_in "ok ${mode%% *}" "$TMP/out" "ps_worker $mode"
no_leftovers "ps_worker $mode"
ok "$mode with $np ranks, $servers servers"
exit "$FAILED"
