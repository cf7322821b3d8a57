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

# the 3 newest steps are kept across world sizes: 4 ranks save 1..5, 2 ranks
# 6..7 (their window holds 5 of the world before), 4 ranks 8 (the newer
# steps of 2 ranks count, this world's 5 goes)
steps_left() { (cd "$TMP/ckw" && ls -d step-* | sort -t- -k2 -n | tr '\n' ' '); }
for run in "4 1 5" "2 6 7" "4 8 8"; do
    set -- $run
    run_msrun --worker_num="$1" --local_worker_num="$1" "$WORKER" ckpt_steps "$TMP/ckw" "$2" "$3"
    expect_code 0 "saving steps $2..$3 on $1 ranks"
    case $3 in
    5) want="step-3 step-4 step-5 " ;;
    7) want="step-5 step-6 step-7 " ;;
    8) want="step-6 step-7 step-8 " ;;
    esac
    [ "$(steps_left)" = "$want" ] || fail "after steps $2..$3 on $1 ranks: '$(steps_left)' left, want '$want'"
done
ok "the 3 newest steps are kept across world sizes, whichever world saved them"
no_leftovers "ckpt"
