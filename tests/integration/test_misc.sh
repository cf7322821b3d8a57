#!/bin/bash
# msrun status, --bind_core, --standalone, --rdzv_endpoint, --join.
. "$(dirname "$0")/lib.sh"
use_token_file

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# msrun status against a running job
port=$(free_port)
cat >"$TMP/sleep.sh" <<'SH'
#!/bin/sh
echo "rank $RANK up"
sleep 3
SH
chmod +x "$TMP/sleep.sh"
start_msrun --master_addr=127.0.0.1 --master_port="$port" --worker_num=2 --job_id=statusjob \
    "$TMP/sleep.sh"
wait_count "up" "$TMP/out" 2 20 || fail "job started"
timeout 20 "$MSRUN" status --master_addr=127.0.0.1 --master_port="$port" --job_id=statusjob \
    >"$TMP/status" 2>&1 || { cat "$TMP/status"; fail "msrun status"; }
grep -q "job statusjob: running, generation 0, 1 nodes, 2 workers, restarts 0 of 0" "$TMP/status" ||
    { cat "$TMP/status"; fail "status line"; }
grep -qE "node 0 +127.0.0.1 +pid [0-9]+ +2 workers +running" "$TMP/status" || fail "node line"
CODE=0
timeout 20 "$MSRUN" status --master_addr=127.0.0.1 --master_port="$port" --token=wrong \
    >"$TMP/status" 2>&1 || CODE=$?
[ "$CODE" = 1 ] && grep -q "token" "$TMP/status" || fail "status with a wrong token is refused"
wait_pid "$BG_PID" 30
expect_code 0 "status job"
ok "msrun status shows the job and its nodes; a wrong token is refused"

# --bind_core: each worker gets its share of the allowed cores
ncpu=$(nproc)
cat >"$TMP/cpus.sh" <<'SH'
#!/bin/sh
echo "cpus $(grep Cpus_allowed_list /proc/self/status | awk '{print $2}')"
SH
chmod +x "$TMP/cpus.sh"
run_msrun --worker_num="$ncpu" --bind_core "$TMP/cpus.sh"
expect_code 0 "bind_core"
[ "$(grep -o 'cpus [0-9]*$' "$TMP/out" | sort -u | wc -l)" = "$ncpu" ] ||
    fail "each of $ncpu workers pinned to its own core: $(grep cpus "$TMP/out")"
run_msrun --worker_num=2 "$TMP/cpus.sh"
[ "$(grep -c 'cpus [0-9]*$' "$TMP/out")" = 0 ] || [ "$ncpu" = 1 ] || fail "no pinning without --bind_core"
ok "--bind_core pins each worker to its share of the cores"
# several cores each (needs 4 cores; test_cpu_share covers any size): two
# workers get disjoint halves of the allowed cores
if [ "$ncpu" -ge 4 ]; then
    run_msrun --worker_num=2 --bind_core "$TMP/cpus.sh"
    expect_code 0 "bind_core, 2 workers"
    python3 - "$TMP/out" "$ncpu" <<'PY' || fail "disjoint shares: $(grep cpus "$TMP/out")"
import re, sys
sets = []
for line in open(sys.argv[1]):
    m = re.search(r"cpus (\S+)$", line)
    if m:
        s = set()
        for part in m.group(1).split(","):
            a, _, b = part.partition("-")
            s.update(range(int(a), int(b or a) + 1))
        sets.append(s)
share = int(sys.argv[2]) // 2
assert len(sets) == 2 and all(len(s) == share for s in sets), sets
assert not (sets[0] & sets[1]), sets
PY
    ok "--bind_core gives two workers disjoint shares of $((ncpu / 2)) cores"
else
    echo "skip --bind_core with several cores per worker: $ncpu cores (test_cpu_share covers it)"
fi

# --standalone ignores master_addr/port; --rdzv_endpoint sets both; --join is accepted
run_msrun --standalone --master_addr=10.255.255.1 --master_port=1 --nproc-per-node=2 \
    --join=true "$WORKER" env
expect_code 0 "standalone"
expect_in "ENV 1 MSR_COORDINATOR=127.0.0.1:" "$TMP/out" "standalone on loopback"
port=$(free_port)
run_msrun --rdzv_endpoint="127.0.0.1:$port" --worker_num=2 "$WORKER" env
expect_code 0 "rdzv_endpoint"
expect_in "ENV 0 MSR_COORDINATOR=127.0.0.1:$port" "$TMP/out" "rdzv_endpoint"
ok "--standalone, --rdzv_endpoint, --join"
no_leftovers "misc"
