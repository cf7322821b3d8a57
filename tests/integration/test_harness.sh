#!/bin/bash
# The harness itself. lib.sh's EXIT trap cleans up in the test's own shell
# only: bash runs the trap in a child forked for a background command and
# killed before its exec too, and a cleanup there killed the test's
# processes and removed its $TMP under it (it_dashboard's stop of a
# coordinator that had not yet started).
. "$(dirname "$0")/lib.sh"

# 1. Children killed before their exec leave the test as it was.
env MSRUN_TEST_MARKER="$MARKER" sleep 60 &
held=$!
: >"$TMP/keep"
{
    for ((i = 0; i < 200; i++)); do
        env true 2>"$TMP/child" &
        kill "$!"
        wait "$!"
    done
} 2>/dev/null
[ -f "$TMP/keep" ] || fail "a killed child removed the test's directory"
kill -0 "$held" 2>/dev/null || fail "a killed child killed the test's process"
kill "$held"
wait_pid "$held" 10
ok "200 children killed before their exec: the test's files and processes stay"

# 2. The test's own shell still cleans up at its exit, after a failure too.
for how in "exit 0" "fail deliberately"; do
    bash -c '. "$1/lib.sh"; echo "$TMP $MARKER"
        env MSRUN_TEST_MARKER="$MARKER" sleep 60 &
        '"$how" _ "$(dirname "$0")" >"$TMP/inner" 2>/dev/null
    read -r dir marker <"$TMP/inner"
    [ -n "$dir" ] && [ ! -e "$dir" ] || fail "$how: the inner test's directory '$dir' stayed"
    left=$(grep -l -z -x -F -- "MSRUN_TEST_MARKER=$marker" /proc/[0-9]*/environ 2>/dev/null)
    [ -z "$left" ] || fail "$how: the inner test's process stayed: $left"
done
ok "the test's own shell removes its directory and kills its processes at exit"

# 3. A child not yet at its exec at the exit carries no marker: the shell's
# exit kills it all the same (it waits here for a file this test makes only
# after the inner shell is gone, so it is always caught before its exec).
go=$TMP/go
bash -c '. "$1/lib.sh"
    ( until [ -e "$2" ]; do sleep 0.02; done
      exec env MSRUN_TEST_MARKER="$MARKER" sleep 60 ) &
    echo "$! $MARKER"
    exit 0' _ "$(dirname "$0")" "$go" >"$TMP/inner" 2>/dev/null
read -r child marker <"$TMP/inner"
[ -n "$child" ] || fail "the inner test printed no child"
# running: its pid there and not a zombie (a killed orphan stays one until
# whatever reaps orphans here gets to it)
running() {
    local st
    st=$(sed -n 's/^.*) \([A-Za-z]\).*$/\1/p' "/proc/$1/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
for ((i = 0; i < 200; i++)); do
    running "$child" || break
    sleep 0.05
done
alive=0
running "$child" && alive=1
: >"$go"
if [ $alive = 1 ]; then
    kill -9 "$child" 2>/dev/null
    for p in $(grep -l -z -x -F -- "MSRUN_TEST_MARKER=$marker" /proc/[0-9]*/environ 2>/dev/null |
        sed -n 's|^/proc/\([0-9]*\)/environ$|\1|p'); do kill -9 "$p"; done
    fail "a child of the inner test not yet at its exec outlived the inner test's exit"
fi
ok "a child not yet at its exec is killed at the test's exit"
exit $FAILED
