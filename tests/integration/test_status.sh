#!/bin/bash
# msrun status finds this machine's jobs by itself (the runtime directory),
# prints them as text or JSON, counts an elastic job's nodes right, shows a
# node not yet admitted as waiting; --error_file reports a success too.
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID
# a runtime directory of this test's own: other jobs of this user stay out
export XDG_RUNTIME_DIR=$TMP/xdg
mkdir -m 700 "$XDG_RUNTIME_DIR"
RUN=$XDG_RUNTIME_DIR/msrun

mode() { stat -c %a "$1"; }

# A worker that says it is up and runs until $TMP/stop appears (60 s at most).
cat >"$TMP/hold.sh" <<SH
#!/bin/sh
echo "rank \$RANK up"
i=0
while [ ! -e "$TMP/stop" ] && [ \$i -lt 600 ]; do sleep 0.1; i=\$((i + 1)); done
SH
chmod +x "$TMP/hold.sh"

# 1. a standalone job: found without an address, text and JSON
rm -f "$TMP/stop"
start_msrun --job_id=solo --worker_num=2 "$TMP/hold.sh"
wait_count "up" "$TMP/out" 2 20 || fail "the job started"
status
[ "$CODE" = 0 ] || { cat "$TMP/st" "$TMP/st.err"; fail "msrun status without an address: exit $CODE"; }
expect_in "^job solo: running, generation 0, 1 nodes, 2 workers, restarts 0 of 0$" "$TMP/st" \
    "status finds the job"
grep -qE "^  node 0 +127.0.0.1 +pid $BG_PID +2 workers +running" "$TMP/st" ||
    { cat "$TMP/st"; fail "status shows the node"; }
ok "msrun status finds a job of this machine without being told where"

status --json
[ "$CODE" = 0 ] || fail "status --json: exit $CODE"
check_json "
assert isinstance(j, list) and len(j) == 1, j
s = j[0]
assert s['job_id'] == 'solo' and s['state'] == 'running' and s['generation'] == 0, s
assert s['restarts'] == 0 and s['world_size'] == 2 and s['node_count'] == 1, s
n = s['nodes']
assert len(n) == 1 and n[0]['node_rank'] == 0 and n[0]['workers'] == 2, n
assert n[0]['state'] == 'running' and n[0]['pid'] == $BG_PID and n[0]['host'] == '127.0.0.1', n
" || fail "status --json"
coord=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[0]["coordinator"])' "$TMP/st")
# --json is a flag: another option may follow it, a value only after '='
status --json --job_id solo
[ "$CODE" = 0 ] && check_json "assert j['job_id'] == 'solo' and j['world_size'] == 2, j" ||
    fail "--json followed by --job_id"
status --job-id=solo --json=true
[ "$CODE" = 0 ] && check_json "assert j['job_id'] == 'solo', j" || fail "--job-id= --json=true"
status --json=false --job_id=solo
[ "$CODE" = 0 ] || fail "--json=false prints text: exit $CODE"
expect_in "^job solo: running" "$TMP/st" "--json=false prints text"
status --json true
[ "$CODE" = 2 ] || fail "--json true: exit $CODE, want 2 (a flag takes no next word)"
expect_in "unexpected argument 'true'" "$TMP/st.err" "--json true refused"
status --job_id=nosuch
[ "$CODE" = 1 ] || fail "an unknown --job_id: exit $CODE"
expect_in "no job nosuch" "$TMP/st.err" "an unknown --job_id"
ok "--json is a flag; --job_id picks a job"

# the runtime directory is private, the record 0600 and named by msrun's pid
[ "$(mode "$RUN")" = 700 ] || fail "the runtime directory has mode $(mode "$RUN")"
[ -f "$RUN/$BG_PID.job" ] || fail "no record $RUN/$BG_PID.job: $(ls -la "$RUN")"
[ "$(mode "$RUN/$BG_PID.job")" = 600 ] || fail "the record has mode $(mode "$RUN/$BG_PID.job")"
ok "the runtime directory is 0700 and the record 0600"

# the same coordinator by address, spelled with dashes or underscores: the
# token comes from this machine's record; a wrong one is refused
port=${coord##*:}
status --master-addr 127.0.0.1 --master-port "$port"
[ "$CODE" = 0 ] || fail "status by address (dashes): exit $CODE"
expect_in "^job solo: running" "$TMP/st" "status by address (dashes)"
status --master_addr=127.0.0.1 --master_port="$port" --json
[ "$CODE" = 0 ] && check_json "assert j['job_id'] == 'solo', j" || fail "status by address --json"
status --master_port="$port" --job_id=other
[ "$CODE" = 1 ] || fail "a wrong --job_id: exit $CODE"
expect_in "serves job solo, not other" "$TMP/st.err" "a wrong --job_id"
status --master_addr=127.0.0.1 --master_port="$port" --token=wrong
[ "$CODE" = 1 ] || fail "a wrong token is refused: exit $CODE"
expect_in "token" "$TMP/st.err" "a wrong token is refused"
ok "status by address, with the token of the job recorded here"

touch "$TMP/stop"
wait_pid "$BG_PID" 30
expect_code 0 "the held job"
[ ! -e "$RUN/$BG_PID.job" ] || fail "the record outlived its msrun"
status
[ "$CODE" = 1 ] || fail "no job left: exit $CODE"
expect_in "no msrun job" "$TMP/st.err" "no job left"
status --json
[ "$CODE" = 1 ] && check_json "assert j == [], j" || fail "no job: an empty JSON array"
ok "the record is gone when msrun ends"

# 2. a msrun killed with SIGKILL leaves its record; status ignores it and
#    removes it
rm -f "$TMP/stop"
start_msrun --job_id=killed --worker_num=1 "$TMP/hold.sh"
wait_count "up" "$TMP/out" 1 20 || fail "the job to kill started"
[ -f "$RUN/$BG_PID.job" ] || fail "the job to kill is recorded"
kill -9 "$BG_PID"
wait "$BG_PID" 2>/dev/null
no_leftovers "the killed job"
status
[ "$CODE" = 1 ] || { cat "$TMP/st"; fail "status shows a dead msrun's job"; }
[ ! -e "$RUN/$BG_PID.job" ] || fail "status left a dead msrun's record"
ok "a dead msrun's record is ignored and removed"

# 3. an elastic job of two nodes (--nnodes 1:3): its size is what formed
use_token_file
rm -f "$TMP/stop"
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --nnodes=1:3 --local_worker_num=2
    --job_id=elastic --last_call=2 "$TMP/hold.sh")
start_node 0 "${common[@]}"
start_node 1 "${common[@]}"
poll_status 30 "j[0]['state'] == 'running' and len([n for n in j[0]['nodes'] if n['state'] == 'running']) == 2" ||
    fail "the elastic job runs on two nodes"
check_json "
assert len(j) == 1, j
s = j[0]
assert s['job_id'] == 'elastic' and s['min_nodes'] == 1 and s['max_nodes'] == 3, s
assert s['node_count'] == 2 and s['world_size'] == 4 and s['local_worker_num'] == 2, s
assert sorted(n['node_rank'] for n in s['nodes']) == [0, 1], s['nodes']
assert all(n['workers'] == 2 for n in s['nodes']), s['nodes']
" || fail "elastic counts"
status
expect_in "^job elastic: running, generation [0-9]*, 2 nodes, 4 workers" "$TMP/st" "elastic text"
expect_in "elastic: 1 to 3 nodes of 2 workers" "$TMP/st" "the elastic range"
touch "$TMP/stop"
wait_pid "$PID0" 30
expect_code 0 "elastic node 0"
wait_pid "$PID1" 30
expect_code 0 "elastic node 1"
ok "an elastic job of two nodes shows 2 nodes and 4 workers"

# 4. a node not yet admitted shows as waiting: a job of two nodes with one
#    started, then the other
rm -f "$TMP/stop"
port=$(free_port)
common=(--master_addr=127.0.0.1 --master_port="$port" --worker_num=4 --local_worker_num=2
    --job_id=pair --cluster_time_out=60 "$TMP/hold.sh")
start_node 0 "${common[@]}"
poll_status 20 "len(j[0]['nodes']) == 1 and j[0]['nodes'][0]['state'] == 'waiting'" ||
    fail "the first node shows as waiting"
check_json "
s = j[0]
assert s['state'] == 'waiting' and s['world_size'] == 0 and s['node_count'] == 0, s
assert s['expected_nodes'] == 2 and s['ready_nodes'] == 1, s
assert s['nodes'][0]['node_rank'] is None and s['nodes'][0]['pid'] == $PID0, s
" || fail "a waiting job"
status --job_id=pair
expect_in "forming: 1 of 2 nodes ready" "$TMP/st" "the forming line"
grep -qE "^  node - +127.0.0.1 +pid $PID0 +2 workers +waiting" "$TMP/st" ||
    { cat "$TMP/st"; fail "the waiting node's line"; }
expect_not_in "node -1" "$TMP/st" "no 'node -1'"
start_node 1 "${common[@]}"
poll_status 30 "j[0]['state'] == 'running'" ||
    fail "the job runs once its second node is in"
check_json "
s = j[0]
assert s['world_size'] == 4 and s['node_count'] == 2, s
assert sorted(n['node_rank'] for n in s['nodes']) == [0, 1], s['nodes']
assert all(n['state'] == 'running' for n in s['nodes']), s['nodes']
" || fail "the job with both nodes"
touch "$TMP/stop"
wait_pid "$PID0" 30
expect_code 0 "pair node 0"
wait_pid "$PID1" 30
expect_code 0 "pair node 1"
ok "a node not yet admitted shows as waiting, then running"
unset MSRUN_TOKEN_FILE

# 5. a runtime directory others may enter is refused: the job runs, status
#    says why
chmod 750 "$RUN"
run_msrun --worker_num=1 /bin/true
expect_code 0 "a job beside a runtime directory of mode 0750"
expect_in "mode 0750" "$TMP/err" "msrun says why it cannot record the job"
status
[ "$CODE" = 1 ] || fail "status refuses the directory: exit $CODE"
expect_in "mode 0750" "$TMP/st.err" "status refuses the directory"
chmod 700 "$RUN"
ok "a runtime directory with group access is refused"

# 6. --error_file: a report on success too, "status" on failure
cat >"$TMP/ok.sh" <<'SH'
#!/bin/sh
exit ${EXIT_CODE:-0}
SH
chmod +x "$TMP/ok.sh"
run_msrun --worker_num=2 --job_id=good --error_file="$TMP/ok.json" "$TMP/ok.sh"
expect_code 0 "a job that succeeds"
[ -f "$TMP/ok.json" ] || fail "no error file after a success"
[ "$(mode "$TMP/ok.json")" = 600 ] || fail "the report has mode $(mode "$TMP/ok.json")"
python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["status"] == "ok" and j["job_id"] == "good", j
assert j["generations"] == 1 and j["restarts"] == 0, j
assert isinstance(j["duration_s"], float) and j["duration_s"] >= 0, j' "$TMP/ok.json" ||
    { cat "$TMP/ok.json"; fail "the success report"; }
export EXIT_CODE=3
run_msrun --worker_num=1 --job_id=bad --error_file="$TMP/bad.json" "$TMP/ok.sh"
unset EXIT_CODE
expect_code 3 "a job that fails"
python3 -c 'import json, sys
j = json.load(open(sys.argv[1]))
assert j["status"] == "failed" and j["exit_code"] == 3 and j["rank"] == 0, j' "$TMP/bad.json" ||
    { cat "$TMP/bad.json"; fail "the failure report"; }
ok "--error_file: status ok on success, status failed on failure"
no_leftovers "status"
exit $FAILED
