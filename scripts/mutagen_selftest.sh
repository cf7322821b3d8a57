#!/bin/bash
# Checks scripts/mutagen.py itself on a tiny throwaway CMake project: the
# sites it finds, the score and survivors it reports, that the file under
# mutation is restored byte for byte, and that a run killed outright
# (SIGKILL) is repaired by the next run before that one reads the file.
# Needs cmake, a C compiler and python3-clang; about a minute on one core.
# Exit 0 when every check passes, 1 otherwise, 77 without python3-clang.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
"$PY" -c 'import clang.cindex' 2>/dev/null || { echo "skip: python3-clang is not installed"; exit 77; }
T=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    rm -rf "$T"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }

mkdir -p "$T/scripts"
cp "$SRC/scripts/mutagen.py" "$T/scripts/"
cat >"$T/lib.c" <<'EOF'
/* the library under mutation */
#include <stdio.h>
int clamp(int x, int lo, int hi)
{
    if (x < lo)
        return lo;
    if (x > hi)
        return hi;
    return x;
}
int next_even(int x)
{
    char buf[16];
    if (x < 0) {
        fprintf(stderr, "next_even: %d < 0\n", x + 1);
        return -1;
    }
#if 0
    if (x == 7)
        return 9;
#endif
    snprintf(buf, sizeof buf, "%d", x);
    return (x % 2 == 0) ? x + 2 : x + 1;
}
EOF
cat >"$T/t.c" <<'EOF'
int clamp(int x, int lo, int hi);
int next_even(int x);
int main(void)
{
    return clamp(5, 0, 10) != 5 || clamp(-1, 0, 10) != 0 || clamp(11, 0, 10) != 10 ||
           next_even(3) != 4 || next_even(-3) != -1;
}
EOF
cat >"$T/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(selftest C)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
enable_testing()
add_executable(t t.c lib.c)
target_compile_options(t PRIVATE -Wall -Werror)
add_test(NAME t COMMAND t)
EOF
echo 'lib.c ^t$ t' >"$T/scripts/mutagen_tests.txt"
cat >"$T/scripts/mutagen_equivalent.txt" <<'EOF'
lib.c:5:11 relational:<= x == lo returns lo either way
lib.c:4:11 relational:<= a line that moved: names no mutant
EOF
(cd "$T" && cmake -S . -B b >/dev/null && cmake --build b >/dev/null) || { echo "FAIL the project does not build"; exit 1; }
sum=$(sha256sum <"$T/lib.c")
run() { (cd "$T" && "$PY" scripts/mutagen.py --build b "$@"); }

# Sites: 3 relational (2 mutants each), 1 equality, 2 "x + 1"/"x + 2" (only
# "+ 1" is off_by_one: 2 mutants), 1 error return (2 mutants), constants
# 0, 2, 2, 0 (the 1 of "+ 1" and buf's size are not). Nothing from the
# fprintf(stderr) message, nothing from #if 0, one equivalent.
run --list >"$T/list" 2>&1
n=$(grep -c ': \(relational\|equality\|off_by_one\|return\|constant\): ' "$T/list")
[ "$n" = 16 ] && ok "16 mutants listed" || { cat "$T/list"; fail "want 16 mutants listed, got $n"; }
grep -q 'lib.c:5:11: relational: < -> <=  \[equivalent' "$T/list" && ok "the equivalent is named" ||
    fail "the equivalent is not named"
grep -q 'lib.c:4:11 relational:<= matches no mutant' "$T/list" && ok "a stale entry is named" ||
    fail "the stale entry is not named"
grep -q 'lib.c:5:11 relational:<= matches no mutant' "$T/list" && fail "a used entry called stale" ||
    ok "the used entry is not called stale"
grep -q '^lib.c:1[59]:' "$T/list" && fail "a site inside fprintf(stderr) or #if 0" || ok "no site in a message or #if 0"
grep -q '^lib.c:13:' "$T/list" && fail "an array's size was mutated" || ok "array sizes are left alone"

run >"$T/out" 2>&1
rc=$?
[ "$rc" = 1 ] && ok "below the goal: exit 1" || fail "want exit 1 below the goal, got $rc"
grep -qE '^lib.c +15 +11 +0 +4 +0 +73%' "$T/out" && ok "15 run, 11 caught, 4 survived: 73%" ||
    { cat "$T/out"; fail "the score row"; }
grep -q '^  lib.c:7:11: relational: > -> >=$' "$T/out" && ok "a survivor named" || fail "survivor 7:11 missing"
[ "$(sha256sum <"$T/lib.c")" = "$sum" ] && ok "lib.c restored byte for byte" || fail "lib.c changed"

# Killed outright while a mutant is in place: the next run puts lib.c back
# before parsing it (else its sites would be the mutant's).
(cd "$T" && exec "$PY" scripts/mutagen.py --build b --no-baseline >"$T/killed" 2>&1) &
pid=$!
for _ in $(seq 600); do
    [ -e "$T/b/mutagen/lib.c.orig" ] && [ "$(sha256sum <"$T/lib.c")" != "$sum" ] && break
    sleep 0.05
done
kill -KILL "$pid"
wait "$pid" 2>/dev/null
pid=
[ "$(sha256sum <"$T/lib.c")" != "$sum" ] && ok "killed with a mutant in place" || fail "no mutant in place"
run --list >"$T/list2" 2>&1
grep -q 'restored lib.c' "$T/list2" && ok "the next run restores it" || fail "no restore message"
[ "$(sha256sum <"$T/lib.c")" = "$sum" ] && ok "lib.c back byte for byte" || fail "lib.c not restored"
cmp -s <(grep -v 'restored lib.c' "$T/list2") "$T/list" && ok "its sites are the original's" ||
    fail "the sites differ from the original's"
[ "$fails" = 0 ] && echo "mutagen self-test: all checks pass" && exit 0
echo "mutagen self-test: $fails check(s) failed"
exit 1
