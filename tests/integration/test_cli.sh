#!/bin/bash
# What the command line means, as a torchrun or MindSpore user types it: a
# flag's value only after '=', IPv6 coordinator addresses.
. "$(dirname "$0")/lib.sh"
use_token_file

# a flag never takes the next word: `--standalone true` runs the program
# `true` (before: "no program given", true being taken as the flag's value)
run_msrun --worker_num=2 --standalone true
expect_code 0 "--standalone true"
expect_in "generation 0: started 2 workers" "$TMP/err" "the program ran"
run_msrun --worker_num=1 --standalone --bind_core "$WORKER" exit 0
expect_code 0 "two flags in a row"
run_msrun --worker_num=1 --standalone=false --bind_core=0 "$WORKER" exit 0
expect_code 0 "flags with values after '='"
ok "a flag takes a value only after '=': the next word is the program"

# the hint names the flag that was given (before: always --bind_core=0)
run_msrun --worker_num=1 --tag_output 0
expect_code 2 "--tag_output 0"
expect_in "program '0' not found in PATH (a flag takes a value only after '=', e.g. --tag_output=0)" \
    "$TMP/err" "the hint names --tag_output"
expect_not_in "bind_core" "$TMP/err" "no other flag named"
run_msrun --worker_num=1 --tag-output True
expect_in "e.g. --tag-output=True)" "$TMP/err" "the flag as it was typed"
# a word that only looks like a boolean, after no flag: no hint
run_msrun --worker_num=1 --log_dir --tag_output 0
expect_code 2 "--log_dir --tag_output 0"
expect_not_in "a flag takes a value" "$TMP/err" "no flag came before the program"
ok "the '=' hint names the flag given just before the program"

# an option last on the line without its value: refused with the option's
# name (before: argv[argc] read as its value, "(null)")
run_msrun --worker_num
expect_code 2 "--worker_num last"
expect_in "option --worker_num needs a value" "$TMP/err" "the missing value named"
expect_not_in "null" "$TMP/err" "no value read past the line"
run_msrun --standalone --worker_num=1 --log_dir
expect_code 2 "--log_dir last"
expect_in "option --log_dir needs a value" "$TMP/err" "the missing value named"
ok "an option given last without its value is refused"

# --master_addr may hold the port, as --rdzv_endpoint does: HOST:PORT and
# [v6]:PORT (before: "cannot resolve '[::1]:29500'"); a different
# --master_port given too is refused, the same one accepted
port=$(free_port)
run_msrun --master_addr="127.0.0.1:$port" --worker_num=1 "$WORKER" env
expect_code 0 "--master_addr=127.0.0.1:PORT"
expect_in "ENV 0 MSR_COORDINATOR=127.0.0.1:$port" "$TMP/out" "the port given with the address"
run_msrun --master_addr='[::1]:29500' --master_port=29501 --worker_num=1 true
expect_code 2 "two different ports"
expect_in "error: --master_addr=\[::1\]:29500 and --master_port=29501 name different ports" \
    "$TMP/err" "the conflict named"
run_msrun --master_addr='[::1]:29500' --master_port=29500 --worker_num=1 --dry_run true
expect_code 0 "the same port twice"
expect_in "^master_addr = ::1 " "$TMP/out" "the address without its port"
expect_in "^master_port = 29500 " "$TMP/out" "the port"
run_msrun --master_addr='[::1]:' --worker_num=1 true
expect_code 2 "an empty port"
expect_in "\[::1\]: is not HOST:PORT" "$TMP/err" "an empty port refused"
ok "--master_addr=HOST:PORT and [v6]:PORT give the port; a different --master_port is refused"

# IPv6: ::1, [::1] and [::1]:PORT reach an embedded coordinator on ::1
if ! python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1", 0))' 2>/dev/null
then
    echo "skip IPv6: this machine has no ::1 (IPv6 is disabled)"
else
    port=$(free_port)
    run_msrun --master_addr=::1 --master_port="$port" --worker_num=2 "$WORKER" env
    expect_code 0 "--master_addr=::1"
    expect_in "ENV 1 MSR_COORDINATOR=\[::1\]:$port" "$TMP/out" "the coordinator's address"
    expect_in "ENV 0 MASTER_ADDR=::1" "$TMP/out" "torch's MASTER_ADDR"
    port=$(free_port)
    run_msrun --master_addr="[::1]:$port" --worker_num=2 "$WORKER" env
    expect_code 0 "--master_addr=[::1]:PORT"
    expect_in "ENV 1 MSR_COORDINATOR=\[::1\]:$port" "$TMP/out" "the coordinator's address and port"
    expect_in "ENV 0 MASTER_ADDR=::1" "$TMP/out" "MASTER_ADDR without the port"
    port=$(free_port)
    run_msrun --rdzv_endpoint="[::1]:$port" --worker_num=2 "$WORKER" barrier
    expect_code 0 "--rdzv_endpoint=[::1]:PORT"
    # two nodes on ::1: the second gives the address in brackets
    port=$(free_port)
    start_msrun --master_addr=::1 --master_port="$port" --nnodes=2 --local_worker_num=2 \
        --node_rank=0 "$WORKER" barrier
    node0=$BG_PID
    CODE=0
    timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --master_addr="[::1]" \
        --master_port="$port" --nnodes=2 --local_worker_num=2 --node_rank=1 "$WORKER" barrier \
        >"$TMP/out1" 2>"$TMP/err1" || CODE=$?
    expect_code 0 "node 1 over IPv6 ($(cat "$TMP/err1"))"
    wait_pid "$node0" 30
    expect_code 0 "node 0 over IPv6"
    ok "IPv6 coordinator addresses: ::1, [::1], [::1]:PORT (both options), two nodes"
fi
no_leftovers "cli"
