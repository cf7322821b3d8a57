#!/bin/bash
# A durable parameter server's state carried through layouts of other
# sizes, each a job of its own on one directory (as an elastic job
# re-forms, or a job started again with more or fewer servers): 2 servers
# and 2 workers (synchronous), 3 and 3 (synchronous), 1 and 2
# (asynchronous), 1 and 3 (asynchronous: the workers alone change, the
# last layout's logs replayed with its 2 workers). Each layout's workers
# find every row where the layouts before left it (tests/ps/ps_worker
# reshard), and the layout file names each (msr_ps_durable's resharding,
# docs/ps.md).
. "$(dirname "$0")/../integration/lib.sh"
PSW=$BUILD/tests/ps_worker
dir=$TMP/shards
steps=9

# layout SERVERS WORKERS STALENESS EXPECT: one job of that layout
layout() {
    local s=$1 w=$2 k=$3 e=$4
    run_msrun --worker_num=$((s + w)) --local_worker_num=$((s + w)) --ps_servers="$s" \
        --ps_staleness="$k" --grace_period=5 "$PSW" reshard "$dir" "$e" "$steps"
    expect_code 0 "$s servers, $w workers"
    expect_not_in "FAIL" "$TMP/err" "$s servers, $w workers"
    expect_in "ok reshard" "$TMP/out" "$s servers, $w workers"
    [ "$(grep -c "found every row at $e\$" "$TMP/out")" = "$w" ] ||
        fail "$s servers, $w workers: not every worker found the rows at $e"
    grep "restored\|found" "$TMP/out"
}
# the layout file: servers, workers, generation (after the magic)
layout_is() {
    local got
    got=$(od -An -t u8 -j 8 -N 24 "$dir/ps-layout" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
    [ "$got" = "$1" ] || fail "the layout holds '$got', want '$1'"
}

layout 2 2 -1 0
layout_is "2 2 0"
layout 3 3 -1 "$steps"
layout_is "3 3 1"
layout 1 2 0 $((2 * steps))
layout_is "1 2 2"
layout 1 3 0 $((2 * steps + 2 * steps))
layout_is "1 3 3"
for f in "$dir"/ps-*; do
    [ "$(stat -c %a "$f")" = 600 ] || fail "$f has mode $(stat -c %a "$f"), not 600"
done
ls "$dir"
no_leftovers "reshard"
ok "a durable state carried through 2, 3, 1 and 1 servers and 2, 3, 2 and 3 workers"
exit "$FAILED"
