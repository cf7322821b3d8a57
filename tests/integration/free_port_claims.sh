#!/bin/bash
# scripts/free_port.py's claims (MSRUN_PORT_CLAIMS): a port handed to one
# test is not handed to another while the first one's shell lives, even
# when neither has bound it yet (tests run side by side, ctest -j2); a dead
# owner's ports are taken over; claimers that run at once get distinct
# ports. Played in a range of a few ports (MSRUN_PORT_RANGE) so that a
# collision would be sure, not one in thousands.
. "$(dirname "$0")/lib.sh"
FP=$MSRUN_SOURCE/scripts/free_port.py
export MSRUN_PORT_CLAIMS=$TMP/claims
owners=()
test_cleanup() {
    local p
    for p in "${owners[@]}"; do kill "$p" 2>/dev/null; done
}
# owner: a process that stands for a test's shell, its pid in $OWNER
owner() {
    sleep 300 &
    OWNER=$!
    owners+=("$OWNER")
}
# a range of N ports, all free now: "LO:HI"
free_range() {
    local lo i
    for ((i = 0; i < 50; i++)); do
        lo=$(free_port) || continue
        python3 - "$lo" "$1" <<'PY' && echo "$lo:$((lo + $1 - 1))" && return 0
import socket, sys
lo, n = int(sys.argv[1]), int(sys.argv[2])
for p in range(lo, lo + n):
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
PY
    done
    fail "no $1 free ports in a row"
}
claim() { # claim OWNER N: N ports of $RANGE for OWNER, one a line
    MSRUN_PORT_RANGE=$RANGE MSRUN_PORT_OWNER=$1 python3 "$FP" "$2"
}
in_range() { # in_range PORT...
    local p
    for p in "$@"; do
        [ "$p" -ge "${RANGE%:*}" ] && [ "$p" -le "${RANGE#*:}" ] || return 1
    done
}

RANGE=$(free_range 4)
owner
a=$OWNER
owner
b=$OWNER
pa=$(claim "$a" 2) || fail "the first 2 ports of 4"
pb=$(claim "$b" 2) || fail "the last 2 ports of 4"
in_range $pa $pb || fail "ports outside $RANGE: $pa $pb"
[ "$(printf '%s\n' $pa $pb | sort -u | wc -l)" = 4 ] || fail "a port handed out twice: $pa / $pb"
# every port claimed by a live owner: none left, exactly at the bound
claim "$b" 1 >/dev/null 2>&1 && fail "a fifth port out of 4 claimed ones"
# the first owner ends: its two ports are free to take
kill "$a"
wait "$a" 2>/dev/null
pc=$(claim "$b" 2) || fail "a dead owner's ports not taken over"
[ "$(printf '%s\n' $pc | sort)" = "$(printf '%s\n' $pa | sort)" ] || fail "took $pc, want $pa"
ok "claims: 4 ports, 2 + 2 distinct, none past them, a dead owner's taken over"

# eight claimers at once in a range of eight: eight distinct ports
RANGE=$(free_range 8)
owner
pids=()
for i in 1 2 3 4 5 6 7 8; do
    claim "$OWNER" 1 >"$TMP/p$i" 2>&1 &
    pids+=($!)
done
for p in "${pids[@]}"; do wait_pid "$p" 30; done
got=$(cat "$TMP"/p[1-8])
[ "$(printf '%s\n' $got | grep -c '^[0-9]*$')" = 8 ] || fail "not 8 ports: $got"
in_range $got || fail "ports outside $RANGE: $got"
[ "$(printf '%s\n' $got | sort -u | wc -l)" = 8 ] || fail "a port handed out twice at once: $got"
ok "8 claimers at once: 8 distinct ports"

# --consecutive N: N ports in a row, all of the range at exactly its size;
# one claimed in the middle leaves no 3 in a row of 4, but 1 still
RANGE=$(free_range 4)
owner
pr=$(MSRUN_PORT_RANGE=$RANGE MSRUN_PORT_OWNER=$OWNER python3 "$FP" --consecutive 4) ||
    fail "4 consecutive ports of 4"
[ "$(printf '%s\n' $pr | tr '\n' ' ')" = "$(seq -s ' ' "${RANGE%:*}" "${RANGE#*:}") " ] ||
    fail "--consecutive 4 of $RANGE gave $pr"
kill "$OWNER"
wait "$OWNER" 2>/dev/null
owner
mid=$((${RANGE%:*} + 1))
echo "$OWNER" >"$MSRUN_PORT_CLAIMS/$mid"
owner
MSRUN_PORT_RANGE=$RANGE MSRUN_PORT_OWNER=$OWNER python3 "$FP" --consecutive 3 >/dev/null 2>&1 &&
    fail "3 consecutive ports of 4 with the second claimed"
pr=$(MSRUN_PORT_RANGE=$RANGE MSRUN_PORT_OWNER=$OWNER python3 "$FP" --consecutive 2) ||
    fail "2 consecutive ports after the claimed one"
[ "$(printf '%s\n' $pr | tr '\n' ' ')" = "$((mid + 1)) $((mid + 2)) " ] ||
    fail "--consecutive 2 gave $pr, want $((mid + 1)) $((mid + 2))"
ok "--consecutive: 4 in a row of 4; a claimed port splits the run"
