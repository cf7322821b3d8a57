#!/bin/bash
# Worker output: prefixes, stdout/stderr kept apart, log files, --show_ranks.
. "$(dirname "$0")/lib.sh"

run_msrun --worker_num=3 --local_worker_num=3 --log_dir="$TMP/logs" "$WORKER" output 200
expect_code 0 "output job"
for r in 0 1 2; do
    [ "$(grep -c "^\[node 0 rank $r\] out line [0-9]* of rank $r\$" "$TMP/out")" = 200 ] ||
        fail "rank $r: 200 prefixed stdout lines"
    [ "$(grep -c "^\[node 0 rank $r\] err line [0-9]* of rank $r\$" "$TMP/err")" = 200 ] ||
        fail "rank $r: 200 prefixed stderr lines"
    expect_in "^\[node 0 rank $r\] no newline at the end\$" "$TMP/out" "rank $r last fragment"
    f="$TMP/logs/latest/worker_$r.log"
    [ -f "$f" ] || fail "log file $f"
    [ "$(grep -c "^out line [0-9]* of rank $r\$" "$f")" = 200 ] || fail "rank $r: log stdout"
    [ "$(grep -c "^err line [0-9]* of rank $r\$" "$f")" = 200 ] || fail "rank $r: log stderr"
    expect_not_in "\[node" "$f" "log files have no prefix"
    [ "$(grep -c "^=== msrun: generation" "$f")" = 1 ] || fail "rank $r: the generation's start"
done
expect_not_in "err line" "$TMP/out" "stderr stays on stderr"
expect_not_in "out line" "$TMP/err" "stdout stays on stdout"
ok "prefixed, separated and logged output"

run_msrun --worker_num=3 --show_ranks=1 --log_dir="$TMP/logs2" "$WORKER" output 5
expect_code 0 "show_ranks"
expect_in "rank 1\] out line 4" "$TMP/out" "rank 1 shown"
expect_not_in "rank 0\]" "$TMP/out" "rank 0 hidden"
expect_not_in "rank 2\]" "$TMP/err" "rank 2 hidden"
expect_in "out line 4 of rank 2" "$TMP/logs2/latest/worker_2.log" "hidden ranks still logged"
ok "--show_ranks"
no_leftovers "output"
