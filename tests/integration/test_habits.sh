#!/bin/bash
# What torchrun and mpirun users type (issue 39): the workers' MASTER_PORT
# is the user's (--torch_port, else master_port + 1), one worker per
# visible GPU (else 1) by default, mpirun's -np/-n/-x, torchrun's
# --nproc_per_node words, --rdzv_backend=c10d, --rdzv_conf, --local_addr,
# --local_ranks_filter, --monitor_interval, --start_method, a did-you-mean
# for unknown options, and TORCHELASTIC_ERROR_FILE read back on a failure.
. "$(dirname "$0")/lib.sh"

# The worker: prints what it was given, one line per variable.
cat >"$TMP/show.sh" <<'EOF'
#!/bin/sh
for v in RANK WORLD_SIZE MASTER_ADDR MASTER_PORT HABIT_A HABIT_B TORCHELASTIC_ERROR_FILE; do
    eval "echo SHOW $RANK $v=\${$v-unset}"
done
EOF
chmod +x "$TMP/show.sh"

# run_env ENV-ARGS... -- MSRUN-ARGS...: run_msrun under env(1)'s arguments
# (-u VAR, VAR=VALUE)
run_env() {
    local e=()
    while [ "$1" != "--" ]; do e+=("$1"); shift; done
    shift
    CODE=0
    timeout -k 5 60 env "${e[@]}" MSRUN_TEST_MARKER="$MARKER" "$MSRUN" "$@" >"$TMP/out" \
        2>"$TMP/err" || CODE=$?
}

# refused WANT ARGS...: exit 2 with WANT on stderr
refused() {
    local want="$1"
    shift
    run_msrun "$@"
    expect_code 2 "msrun $*"
    expect_in "$want" "$TMP/err" "msrun $*"
}

# ---- item 4: MASTER_PORT is the user's ----
port=$(free_port)
run_msrun --master_port="$port" --worker_num=2 "$TMP/show.sh"
expect_code 0 "--master_port"
expect_in "SHOW 0 MASTER_PORT=$((port + 1))\$" "$TMP/out" "MASTER_PORT is master_port + 1"
expect_in "SHOW 1 MASTER_PORT=$((port + 1))\$" "$TMP/out" "every rank"
port=$(free_port)
run_msrun --rdzv-endpoint="127.0.0.1:$port" --rdzv-backend=c10d --worker_num=1 "$TMP/show.sh"
expect_code 0 "--rdzv-endpoint with c10d"
expect_in "SHOW 0 MASTER_PORT=$((port + 1))\$" "$TMP/out" "--rdzv-endpoint's port + 1"
read -r port tport <<<"$(free_port 2 | tr "\n" " ")"
run_msrun --master_port="$port" --torch_port="$tport" --worker_num=1 "$TMP/show.sh"
expect_code 0 "--torch_port"
expect_in "SHOW 0 MASTER_PORT=$tport\$" "$TMP/out" "--torch_port is MASTER_PORT"
run_msrun --torch-master-port="$tport" --worker_num=1 "$TMP/show.sh"
expect_in "SHOW 0 MASTER_PORT=$tport\$" "$TMP/out" "--torch-master-port, standalone"
ok "MASTER_PORT: master_port + 1, --torch_port"

# the derived port taken: msrun refuses to start, naming it and the option
port=$(free_port)
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
open(sys.argv[2], "w").close()
time.sleep(60)' "$((port + 1))" "$TMP/bound" &
holder=$!
test_cleanup() { kill "$holder" 2>/dev/null; }
for ((i = 0; i < 200; i++)); do [ -e "$TMP/bound" ] && break; sleep 0.05; done
[ -e "$TMP/bound" ] || fail "the port holder did not listen within 10 s"
run_msrun --master_port="$port" --worker_num=1 "$TMP/show.sh"
expect_code 2 "a taken torch port"
expect_in "torch's port $((port + 1)) (the workers' MASTER_PORT, master_port + 1) cannot be used on this host: it is in use; free it or choose another with --torch_port PORT" \
    "$TMP/err" "the taken port named"
expect_not_in "SHOW" "$TMP/out" "no worker started"
run_msrun --master_port="$port" --torch_port="$((port + 1))" --worker_num=1 "$TMP/show.sh"
expect_code 2 "a taken --torch_port"
expect_in "torch's port $((port + 1)) (the workers' MASTER_PORT, --torch_port)" "$TMP/err" \
    "the taken --torch_port named"
kill "$holder"
wait "$holder" 2>/dev/null
ok "a taken torch port is refused with the port and --torch_port named"

# bounds: master_port 65534 gives 65535; 65535 leaves none
run_msrun --master_port=65534 --worker_num=1 --dry_run true
expect_code 0 "--master_port=65534"
expect_in "^torch_port = 65535 (derived: master_port + 1)" "$TMP/out" "65535 is a port"
refused "master_port 65535 leaves no port above it for torch's store (the workers' MASTER_PORT is master_port + 1): give --torch_port PORT" \
    --master_port=65535 --worker_num=1 true
run_msrun --master_port=65535 --torch_port=65534 --worker_num=1 --dry_run true
expect_code 0 "--master_port=65535 with --torch_port"
refused "is not a port number (1..65535)" --torch_port=65536 --worker_num=1 true
refused "is not a port number (1..65535)" --torch_port=0 --worker_num=1 true
refused "--torch_port 29400 is master_port" --master_port=29400 --torch_port=29400 true
ok "torch port bounds"

# ---- item 6: one worker per visible GPU, else 1 ----
gpus=$(ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l)
[ "$gpus" -gt 0 ] || gpus=$(ls -d /dev/nvidia[0-9]* 2>/dev/null | wc -l)
[ "$gpus" -gt 0 ] || gpus=1
run_env -u CUDA_VISIBLE_DEVICES -- "$TMP/show.sh"
expect_code 0 "no count given"
expect_in "SHOW 0 WORLD_SIZE=$gpus\$" "$TMP/out" "the machine's GPUs, else 1 ($gpus)"
expect_not_in "SHOW $gpus " "$TMP/out" "no more workers than that"
run_env CUDA_VISIBLE_DEVICES=0,1 -- "$TMP/show.sh"
expect_code 0 "CUDA_VISIBLE_DEVICES=0,1"
expect_in "SHOW 1 WORLD_SIZE=2\$" "$TMP/out" "two GPUs visible: 2 workers"
expect_not_in "SHOW 2 " "$TMP/out" "not 8"
run_env CUDA_VISIBLE_DEVICES= -- --dry_run true
expect_in "^worker_num = 1 (derived" "$TMP/out" "no GPU visible: 1 worker"
run_env CUDA_VISIBLE_DEVICES=0,-1,2 -- --dry_run true
expect_in "^local_worker_num = 1 (derived: one per visible GPU)" "$TMP/out" "CUDA stops at -1"
ok "the default worker count: visible GPUs, else 1"

# ---- item 7: what torchrun and mpirun users type ----
run_env CUDA_VISIBLE_DEVICES=0,1,2 -- --nproc_per_node=gpu --dry_run true
expect_in "^local_worker_num = 3 " "$TMP/out" "--nproc_per_node=gpu"
run_env CUDA_VISIBLE_DEVICES= -- --nproc_per_node=gpu true
expect_code 2 "gpu without one"
expect_in "local_worker_num (nproc_per_node) is gpu, but no GPU is visible (CUDA_VISIBLE_DEVICES='')" "$TMP/err" \
    "gpu without a GPU"
run_env CUDA_VISIBLE_DEVICES=0,1 -- --nproc-per-node auto --dry_run true
expect_in "^local_worker_num = 2 " "$TMP/out" "--nproc-per-node auto"
if command -v taskset >/dev/null; then
    CODE=0
    taskset -c 0 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --nproc_per_node=cpu --dry_run true \
        >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_in "^local_worker_num = 1 " "$TMP/out" "--nproc_per_node=cpu on one CPU"
fi
refused "--local_worker_num=gpus is not a positive integer or one of auto, gpu, cpu" \
    --nproc_per_node=gpus true
ok "--nproc_per_node=auto|gpu|cpu"

run_msrun -np 3 "$TMP/show.sh"
expect_code 0 "-np 3"
expect_in "SHOW 2 WORLD_SIZE=3\$" "$TMP/out" "-np is the world size"
run_msrun -n 2 --dry_run true
expect_in "^worker_num = 2 (option: --worker_num)" "$TMP/out" "-n is the world size"
ok "-np and -n"

run_env HABIT_B=from-msrun -- -n 2 -x HABIT_A=one=two -x HABIT_B "$TMP/show.sh"
expect_code 0 "-x"
expect_in "SHOW 1 HABIT_A=one=two\$" "$TMP/out" "-x VAR=VALUE"
expect_in "SHOW 1 HABIT_B=from-msrun\$" "$TMP/out" "-x VAR"
run_env -u HABIT_B -- -n 1 -x HABIT_B true
expect_code 2 "-x of an unset variable"
expect_in "-x HABIT_B: HABIT_B is not set here; give -x HABIT_B=VALUE" "$TMP/err" "-x unset"
refused "'1A' is not a variable name" -n 1 -x 1A=2 true
ok "-x VAR and -x VAR=VALUE"

# c10d is msrun's own coordinator
run_msrun --rdzv_backend=c10d --worker_num=1 --dry_run true
expect_in "^rdzv_backend = static " "$TMP/out" "c10d is static"
ok "--rdzv_backend=c10d"

# --rdzv_conf: join_timeout is cluster_time_out (node 1 never comes)
use_token_file
port=$(free_port)
start=$SECONDS
run_msrun --rdzv-conf=join_timeout=2,read_timeout=60 --nnodes=2 --nproc_per_node=1 \
    --master_addr=127.0.0.1 --master_port="$port" --node_rank=0 "$TMP/show.sh"
expect_code 124 "join_timeout=2 with node 1 missing"
[ $((SECONDS - start)) -lt 30 ] || fail "join_timeout=2 took $((SECONDS - start)) s"
unset MSRUN_TOKEN_FILE
refused "--rdzv_conf: unknown key 'joint_timeout' (known: join_timeout, timeout, last_call_timeout, heartbeat, is_host, read_timeout, close_timeout)" \
    --rdzv_conf=joint_timeout=5 true
refused "--rdzv_conf join_timeout=0 is not a number of seconds of at least 0.001" \
    --rdzv_conf=join_timeout=0 true
refused "--rdzv_conf heartbeat=0.009 is not a number of seconds of at least 0.01" \
    --rdzv_conf=heartbeat=0.009 true
run_msrun --rdzv_conf=heartbeat=0.01,join_timeout=0.001 --worker_num=1 --dry_run true
expect_code 0 "rdzv_conf at its bounds"
refused "--rdzv_conf: 'is_host' is not KEY=VALUE" --rdzv_conf=is_host true
ok "--rdzv_conf"

# --monitor_interval: accepted, one warning; --start_method: accepted
run_msrun --monitor-interval 5 --start-method=fork --worker_num=1 --dry_run true
expect_code 0 "--monitor-interval, --start-method"
[ "$(grep -c "warning: --monitor_interval is ignored" "$TMP/err")" = 1 ] ||
    fail "one warning for --monitor_interval"
refused "--start_method=thread is not one of spawn, fork, forkserver" --start_method=thread true
ok "--monitor_interval and --start_method"

# --local_ranks_filter: only these local ranks reach the terminal
run_msrun --worker_num=3 --local-ranks-filter=1 "$TMP/show.sh"
expect_code 0 "--local-ranks-filter"
expect_in "SHOW 1 RANK=1" "$TMP/out" "local rank 1 shown"
expect_not_in "SHOW 0 " "$TMP/out" "local rank 0 hidden"
expect_not_in "SHOW 2 " "$TMP/out" "local rank 2 hidden"
run_msrun --worker_num=3 --local-ranks-filter=2 --dry_run true
expect_code 0 "the last local rank"
refused "--local_ranks_filter=3: local rank 3 is out of range (this node has 3 workers)" \
    --worker_num=3 --local_ranks_filter=3 true
refused "--local_ranks_filter=x is not a list like 0,2-3" --local_ranks_filter=x true
ok "--local_ranks_filter"

# --local_addr: the address this node advertises (node 0's is MASTER_ADDR)
run_msrun --worker_num=1 --local_addr=127.0.0.9 "$TMP/show.sh"
expect_code 0 "--local_addr"
expect_in "SHOW 0 MASTER_ADDR=127.0.0.9\$" "$TMP/out" "MASTER_ADDR is --local_addr"
ok "--local_addr"

# did you mean: at distance 1 and 2, or a name's start; none at 3
refused "unknown option '--nproc_per_nod' (did you mean --nproc_per_node?)" --nproc_per_nod=2 true
refused "unknown option '--master-prot' (did you mean --master-port?)" --master-prot=2 true
refused "unknown option '--rdzv_endp' (did you mean --rdzv_endpoint?)" --rdzv_endp=x true
run_msrun --mastr-prot=2 true
expect_code 2 "distance 3"
expect_in "unknown option '--mastr-prot' (see msrun --help)" "$TMP/err" "no hint at distance 3"
if [ -x "$BUILD/bin/train_gpt" ]; then
    "$BUILD/bin/train_gpt" --stepz 3 >"$TMP/out" 2>"$TMP/err" && fail "train_gpt --stepz ran"
    expect_in "(did you mean --steps?)" "$TMP/err" "every program's options"
fi
ok "did you mean"

# ---- TORCHELASTIC_ERROR_FILE ----
cat >"$TMP/raise.sh" <<'EOF'
#!/bin/sh
# as torch's @record does: the exception as JSON, then a failed exit
d=$(dirname "$TORCHELASTIC_ERROR_FILE")
echo "MODE $RANK $(stat -c %a "$d")"
[ "$RANK" = 1 ] || exit 0
printf '{"message": {"message": "ValueError: bad \\"shape\\" (3, 4)\\nTraceback ...", "extraInfo": {"py_callstack": "x", "timestamp": "1764374400"}}}' \
    >"$TORCHELASTIC_ERROR_FILE"
exit 3
EOF
chmod +x "$TMP/raise.sh"
run_msrun --worker_num=2 "$TMP/raise.sh"
expect_code 3 "a worker that raised"
expect_in "job failed (generation 0): rank 1 on node 0 (127.0.0.1, pid [0-9]*) raised ValueError: bad \"shape\" (3, 4), exited with code 3" \
    "$TMP/err" "the exception named"
expect_in "MODE 1 700" "$TMP/out" "a private directory"
run_msrun --worker_num=2 --log_dir="$TMP/logs" --job_id=habits "$TMP/raise.sh"
expect_code 3 "with --log_dir"
[ -f "$TMP/logs/habits/error_1.json" ] || fail "the error file is in the run's log directory"
expect_in "raised ValueError" "$TMP/err" "named with --log_dir"
run_msrun --worker_num=1 "$WORKER" exit 4
expect_in "rank 0 on node 0 (127.0.0.1, pid [0-9]*) exited with code 4" "$TMP/err" \
    "no error file: as before"
ok "TORCHELASTIC_ERROR_FILE: the exception in the failure report"

# torch's own @record: test_habits_torch.sh
no_leftovers "habits"
exit $FAILED
