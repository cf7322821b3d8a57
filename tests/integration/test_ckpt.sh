#!/bin/bash
# libmsrun's checkpoints with 4 real workers.
. "$(dirname "$0")/lib.sh"
run_msrun --worker_num=4 --local_worker_num=4 "$WORKER" ckpt "$TMP/ck"
expect_code 0 "checkpoint job"
[ "$(grep -c "checkpoint checks passed" "$TMP/out")" = 4 ] || fail "all 4 ranks passed"
[ -d "$TMP/ck/step-3" ] && [ ! -e "$TMP/ck/step-2" ] || fail "the 3 newest steps are kept"
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); assert m['step']==5 and m['world_size']==4 and len(m['shards'])==4" \
    "$TMP/ck/step-5/MANIFEST" || fail "MANIFEST"
ok "save, prune, agree on the latest complete step, load, detect corruption"

# agreement reads the last rank's offer too (3 workers: rank 2 loses a commit)
run_msrun --worker_num=3 --local_worker_num=3 "$WORKER" ckpt_last "$TMP/ck3"
expect_code 0 "last-rank checkpoint job"
[ "$(grep -c "last-rank checkpoint checks passed" "$TMP/out")" = 3 ] || fail "all 3 ranks passed"
ok "agreement counts every rank's commits, the last rank's too"
no_leftovers "ckpt"
