#!/usr/bin/env bash
# Relays of a --hostfile launch (issue 40): the launching msrun knows every
# host and node rank, so it gives each host's msrun --relays K and its
# group's host (--relays_host), and --dry_run prints the plan. A stand-in
# for ssh runs each host's command here (the hosts are addresses of this
# machine: 127.0.0.2-5), so this needs no sshd: a group of exactly K nodes
# and K + 1, the reasons for none, the relay's port at 65535 and one past,
# a job whose nodes join through their groups' relays at their groups'
# hosts (over mutual TLS where openssl makes the certificates), and a relay
# that does not answer (its group joins directly).
. "$(dirname "$0")/lib.sh"
unset MSRUN_MASTER_ADDR MSRUN_MASTER_PORT MSRUN_TOKEN MSRUN_TOKEN_FILE MSRUN_JOB_ID MSRUN_RELAY \
    MSRUN_RELAYS MSRUN_RELAYS_HOST
cat >"$TMP/ssh" <<'EOF'
#!/bin/sh
# a stand-in for ssh: runs COMMAND (the last argument) here
for a; do cmd=$a; done
exec sh -c "$cmd"
EOF
chmod +x "$TMP/ssh"
cat >"$TMP/hold.sh" <<EOF
#!/bin/sh
while [ ! -e "$TMP/stop" ]; do sleep 0.05; done
EOF
chmod +x "$TMP/hold.sh"
printf '127.0.0.2\n127.0.0.3\nme@127.0.0.4\n' >"$TMP/hosts3"
printf '127.0.0.2\n127.0.0.3\n127.0.0.4\n127.0.0.5\n' >"$TMP/hosts4"

# node_cmd N: the command of node N in $TMP/out (a --dry_run's)
node_cmd() { grep "^node $1: " "$TMP/out"; }

# 1. a group of exactly K = 3 nodes: one relay, on host 0, for all three;
#    user@host: the host's address only
run_msrun --hostfile "$TMP/hosts3" --relays=3 --master_port=40000 --dry_run "$TMP/hold.sh"
expect_code 0 "3 hosts, --relays 3"
expect_in "^relay-0: served by node 0 for nodes 0 to 2 on 127.0.0.2:40002$" "$TMP/out" "K nodes"
expect_not_in "^relay-1" "$TMP/out" "K nodes: one group"
for n in 0 1 2; do
    node_cmd $n | grep -q -- "--relays=3 --relays_host='127.0.0.2' " ||
        fail "node $n of 3 is not given relay-0's host"
done
#    K + 1 = 4 nodes: the last node is a group of its own, on its host
run_msrun --hostfile "$TMP/hosts4" --relays=3 --master_port=40000 --dry_run "$TMP/hold.sh"
expect_in "^relay-0: served by node 0 for nodes 0 to 2 on 127.0.0.2:40002$" "$TMP/out" "K + 1 nodes"
expect_in "^relay-1: served by node 3 for nodes 3 to 3 on 127.0.0.5:40003$" "$TMP/out" "K + 1 nodes"
node_cmd 2 | grep -q -- "--relays_host='127.0.0.2' " || fail "node 2 is not in group 0"
node_cmd 3 | grep -q -- "--relays_host='127.0.0.5' " || fail "node 3 is not given its own host"
run_msrun -H 'me@127.0.0.4,127.0.0.3' --relays=1 --master_port=40000 --dry_run "$TMP/hold.sh"
expect_in "^relay-0: served by node 0 for nodes 0 to 0 on 127.0.0.4:40002$" "$TMP/out" "user@host"
node_cmd 0 | grep -q -- "--relays_host='127.0.0.4' " || fail "user@host: the relay's host"
ok "--hostfile: groups of exactly K and K + 1 nodes, each given its group's host"

# 2. no relays, and why: a small job, --relays off, --relay, TLS; the
#    remote msruns are told so (--relays=off), whatever their environment
off() { # off WHY ARGS...
    local why=$1
    shift
    run_msrun --hostfile "$TMP/hosts4" --master_port=40000 --dry_run "$@" "$TMP/hold.sh"
    expect_code 0 "relays off: $why"
    expect_in "^relays: off ($why)$" "$TMP/out" "relays off: $why"
    [ "$(grep -c -- "--relays=off " "$TMP/out")" = 4 ] || fail "$why: not every node told --relays=off"
    expect_not_in "relays_host" "$TMP/out" "$why"
}
off "the job is small"
off "--relays off" --relays=off
off "--relay names this node's relay" --relays=2 --relay=127.0.0.9:5
off "with TLS a relay serves with --tls_cert and --tls_key, not given" --relays=2 --tls_ca="$TMP/hosts4"
MSRUN_RELAYS=2 run_msrun --hostfile "$TMP/hosts4" --master_port=40000 --dry_run "$TMP/hold.sh"
[ "$(grep -c -- "--relays=2 --relays_host" "$TMP/out")" = 4 ] ||
    fail "MSRUN_RELAYS is not passed to the hosts"
run_msrun -H 127.0.0.2 --relays_host=127.0.0.2 --dry_run "$TMP/hold.sh"
expect_code 2 "--relays_host with --host"
expect_in "^msrun: error: --relays_host cannot be given with --hostfile/--host" "$TMP/err" \
    "--relays_host refused"
ok "relays off: the reason printed, every host told"

# 3. the last group's relay port: 65535 accepted, one past refused
run_msrun --hostfile "$TMP/hosts4" --relays=2 --master_port=65532 --dry_run "$TMP/hold.sh"
expect_code 0 "the last relay on 65535"
expect_in "^relay-1: served by node 2 for nodes 2 to 3 on 127.0.0.4:65535$" "$TMP/out" "port 65535"
run_msrun --hostfile "$TMP/hosts4" --relays=2 --master_port=65533 --dry_run "$TMP/hold.sh"
expect_code 2 "the last relay on 65536"
expect_in "would listen on port 65536 (master_port + 2 + its group 1), past 65535" "$TMP/err" \
    "port 65536"
ok "the last relay's port: 65535 accepted, 65536 refused"

# 4. one node's --dry_run: its plan from --relays_host, or why none
run_msrun --master_addr=127.0.0.1 --master_port=40000 --nnodes=4 --node_rank=3 --relays=2 \
    --relays_host=10.0.0.7 --dry_run "$TMP/hold.sh"
expect_in "^relays = relay-1@10.0.0.7:40003 (derived: nodes 2 to 3, served by its first node)$" \
    "$TMP/out" "a node's plan"
run_msrun --master_addr=127.0.0.1 --master_port=40000 --nnodes=4 --node_rank=2 --relays=2 \
    --dry_run "$TMP/hold.sh"
expect_in "^relays = relay-1@127.0.0.1:40003 (derived: nodes 2 to 3, served by this node)$" \
    "$TMP/out" "a relay's node's plan"
# relay-0 beside torch's port on node 0: master_port + 1 stays torch's
run_msrun --master_addr=127.0.0.1 --master_port=40000 --nnodes=4 --node_rank=0 --relays=2 \
    --dry_run "$TMP/hold.sh"
expect_in "^torch_port = 40001 (derived: master_port + 1)$" "$TMP/out" "torch's port on node 0"
expect_in "^relays = relay-0@127.0.0.1:40002 (derived: nodes 0 to 1, served by this node)$" \
    "$TMP/out" "relay-0 not on torch's port"
run_msrun --master_addr=127.0.0.1 --nnodes=4 --relays=2 --dry_run "$TMP/hold.sh"
expect_in "^relays = off (derived: the node has no --node_rank)$" "$TMP/out" "no node rank"
ok "a node's --dry_run prints its relay plan"

# new_ports: $PORT for the coordinator, torch's PORT + 1, the relays on
# the 2 after
new_ports() {
    PORT=$(free_port --consecutive 4)
    PORT=${PORT%%$'\n'*}
}
# run_job ARGS...: the launcher over $TMP/hosts4 in the background, 1
# worker a host, the coordinator on $PORT and the relays above it
run_job() {
    rm -f "$TMP/stop"
    start_msrun --hostfile "$TMP/hosts4" --ssh "$TMP/ssh" --forward_env=MSRUN_TEST_MARKER \
        --master_port="$PORT" --cluster_time_out=60 "$@" "$TMP/hold.sh"
}
end_job() { # end_job WHAT: the workers stop, the launcher exits 0
    touch "$TMP/stop"
    wait_pid "$BG_PID" 60
    expect_code 0 "$1"
    no_leftovers "$1"
}

# 5. 4 hosts, K = 2: nodes 0, 1 through relay-0 on host 0; 2, 3 through
#    relay-1 on host 2 (127.0.0.4, not the coordinator's host); over
#    mutual TLS (every host has the CA, a certificate for the 4 addresses
#    and its key: the relays serve with them) where openssl can make the
#    certificates, else in plaintext
TLS=()
if command -v openssl >/dev/null; then
    C=$TMP/certs
    mkdir -m 700 "$C"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$C/ca.key" -out "$C/ca.pem" -days 2 -subj "/CN=ca" 2>/dev/null ||
        fail "making the CA"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$C/node.key" \
        -out "$C/node.csr" -subj "/CN=node" 2>/dev/null || fail "making the node's request"
    printf 'subjectAltName=IP:127.0.0.2,IP:127.0.0.3,IP:127.0.0.4,IP:127.0.0.5\n' >"$C/node.ext"
    openssl x509 -req -in "$C/node.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial \
        -out "$C/node.pem" -days 2 -extfile "$C/node.ext" 2>/dev/null || fail "signing the node's"
    TLS=(--tls_cert="$C/node.pem" --tls_key="$C/node.key" --tls_ca="$C/ca.pem")
else
    echo "skip: relays over TLS: openssl is not installed (scripts/deps.sh test); in plaintext"
fi
new_ports
run_job --relays=2 --job_id=hf2 "${TLS[@]}"
poll_status 60 "rel == {0: 'relay-0', 1: 'relay-0', 2: 'relay-1', 3: 'relay-1'}" --job_id hf2 "${TLS[@]}" ||
    fail "the hosts did not join through their groups' relays"
for n in 0 1; do
    expect_in "node $n joins and heartbeats through relay-0 at 127.0.0.2:$((PORT + 2))$" "$TMP/err" \
        "node $n's relay"
done
for n in 2 3; do
    expect_in "node $n joins and heartbeats through relay-1 at 127.0.0.4:$((PORT + 3))$" "$TMP/err" \
        "node $n's relay"
done
expect_in "serving relay-1 for nodes 2 to 3 on port $((PORT + 3))$" "$TMP/err" "relay-1"
end_job "relays over a hostfile"
grep -qE "relay-1: stopping after relaying [1-9][0-9]* calls" "$TMP/err" || fail "relay-1 relayed nothing"
expect_not_in "no answer from relay" "$TMP/err" "relays over a hostfile"
ok "--hostfile, --relays 2: each group joined through its relay on its first host${TLS:+, over TLS}"

# 6. relay-1's port taken by a listener that never answers: node 2 cannot
#    serve it and joins directly; node 3 gets no answer there and joins the
#    coordinator directly too; group 0 is unchanged
new_ports
python3 -c "import socket, sys, time
s = socket.socket()
s.bind(('0.0.0.0', int(sys.argv[1])))
s.listen(16)
open(sys.argv[2], 'w').close()
while True:
    time.sleep(1)" "$((PORT + 3))" "$TMP/blocking" &
BLOCKER=$!
test_cleanup() { kill "$BLOCKER" 2>/dev/null; }
for ((i = 0; i < 600; i++)); do [ -e "$TMP/blocking" ] && break; sleep 0.05; done
[ -e "$TMP/blocking" ] || fail "the listener on relay-1's port did not start"
run_job --relays=2 --job_id=hfdead
poll_status 60 "rel == {0: 'relay-0', 1: 'relay-0', 2: '', 3: ''}" --job_id hfdead ||
    fail "relay-1's group did not join the coordinator directly"
# a node's line can come after the status shows it running: waited for
wait_for "cannot serve relay-1 on 0.0.0.0:$((PORT + 3))" "$TMP/err" 30 ||
    fail "relay-1 not served: its line not in err"
wait_for "no answer from relay-1 at 127.0.0.4:$((PORT + 3)) (.*): joining the coordinator at 127.0.0.2:$PORT directly$" \
    "$TMP/err" 30 || fail "node 3's message not in err"
[ "$(grep -c "no answer from relay-0" "$TMP/err")" = 0 ] || fail "group 0 lost its relay"
end_job "a relay that does not answer"
kill "$BLOCKER"
wait "$BLOCKER" 2>/dev/null
ok "a relay that does not answer: its group joined the coordinator directly"

