#!/bin/bash
# One command for a whole job (--hostfile, -H): msrun starts one msrun per
# host over the system's ssh. A real sshd of the test's own (a generated
# host key and client key) listens on 127.0.0.2, .3 and .4, three "hosts"
# of this machine: 3 hosts x 2 workers, a failing worker, a host whose ssh
# fails, Ctrl-C, the token kept off every command line. The host list's
# format and limits and the token on stdin come first and need no sshd;
# the rest is skipped (77) when sshd cannot run here.
. "$(dirname "$0")/lib.sh"

printf '# three hosts of this machine\n127.0.0.2 slots=2\n\n127.0.0.3 slots=2  # node 1\n127.0.0.4 slots=2\n' >"$TMP/hosts"

# Parts 1-3 need no sshd: they run everywhere.
# 1. slots: exactly the slots' sum is accepted, one more refused before any
#    ssh (a --ssh that would leave a file shows none ran)
printf '#!/bin/sh\ntouch %s/ssh-ran\n' "$TMP" >"$TMP/fake-ssh"
chmod +x "$TMP/fake-ssh"
run_msrun --hostfile "$TMP/hosts" --worker_num=6 --dry_run "$WORKER" env
expect_code 0 "worker_num = slots"
expect_in "^host 127.0.0.4: node 2, 2 workers (ranks 4..5)$" "$TMP/out" "the plan"
run_msrun --hostfile "$TMP/hosts" --worker_num=5 --dry_run "$WORKER" env
expect_in "^host 127.0.0.4: node 2, 1 worker (ranks 4..4)$" "$TMP/out" "slots filled in order"
run_msrun --hostfile "$TMP/hosts" --worker_num=7 --ssh "$TMP/fake-ssh" "$WORKER" env
expect_code 2 "worker_num > slots"
expect_in "^msrun: error: 7 workers asked for, but the hosts have only 6 slots in all$" "$TMP/err" "both numbers"
[ ! -e "$TMP/ssh-ran" ] || fail "ssh ran although the slots are too few"
ok "slots: 6 of 6 accepted, 7 of 6 refused before any ssh"

# 2. the host list's format and limits, each at its bound and one past
bad_hostfile() { # bad_hostfile CONTENT MESSAGE
    printf "$1" >"$TMP/bad"
    run_msrun --hostfile "$TMP/bad" --dry_run "$WORKER" env
    expect_code 2 "hostfile '$1'"
    expect_in "$2" "$TMP/err" "hostfile '$1'"
}
bad_hostfile 'a\n\n# x\nb slot=2\n' "hostfile .*bad, line 4: 'slot=2' is not understood"
bad_hostfile 'a slots=0\n' "line 1: slots '0' is not a number from 1 to 2147483647"
bad_hostfile 'a slots=2147483648\n' "line 1: slots '2147483648' is not a number"
bad_hostfile '# none\n\n' "names no host"
bad_hostfile "$(printf 'h%.0s' {1..256})\n" "line 1: the host name is longer than 255 characters"
printf 'a slots=1\n%s slots=2147483647\n' "$(printf 'h%.0s' {1..255})" >"$TMP/good"
run_msrun --hostfile "$TMP/good" --worker_num=3 --dry_run "$WORKER" env
expect_code 0 "slots=1, slots=2147483647 and a name of 255 characters"
run_msrun -H a:2147483647,a:1 --worker_num=1 --dry_run "$WORKER" env
expect_in "entry 2: host a has more than 2147483647 slots in all" "$TMP/err" "slots of a host named twice"
run_msrun -H a:1,b:x --dry_run "$WORKER" env
expect_in "entry 2: 'b:x' is not HOST or HOST:K" "$TMP/err" "-H's slots"
seq 1 4096 | sed 's/^/h/' >"$TMP/many"
run_msrun --hostfile "$TMP/many" --worker_num=1 --dry_run "$WORKER" env
expect_code 0 "4096 hosts"
expect_in "^4095 hosts without workers, not started (the first: h2)$" "$TMP/out" "4096 hosts"
echo h0 >>"$TMP/many"
run_msrun --hostfile "$TMP/many" --worker_num=1 --dry_run "$WORKER" env
expect_in "line 4097: more than 4096 hosts" "$TMP/err" "4097 hosts"
run_msrun -H a --nnodes=1 "$WORKER" env
expect_in "^msrun: error: --nnodes cannot be given with --hostfile/--host" "$TMP/err" "--nnodes"
run_msrun -H a --forward_env=A-B "$WORKER" env
expect_in "^msrun: error: --forward_env: 'A-B' is not a variable's name" "$TMP/err" "--forward_env"
run_msrun -H a --forward_env=PATH,MSRUN_TOKEN "$WORKER" env
expect_in "^msrun: error: --forward_env: MSRUN_TOKEN would put the job token on the remote command line" \
    "$TMP/err" "--forward_env=MSRUN_TOKEN"
run_msrun -H 'me@127.0.0.2:2' --dry_run "$WORKER" env
expect_in "--master_addr='127.0.0.2' " "$TMP/out" "user@host: the master address is the host"
ok "host lists: malformed lines named by number, every bound and one past"

# 3. --token_file=-: one line of stdin, nothing after it consumed; a token
#    of 255 characters and not one of 256
t255=$(printf 't%.0s' {1..255})
out=$( (printf '%s\nafter the token\n' "$t255" | {
    "$MSRUN" --token_file=- --dry_run "$WORKER" env >/dev/null && cat; }) 2>&1)
[ "$out" = "after the token" ] || fail "--token_file=- consumed what follows the token: '$out'"
CODE=0
printf '%sx\n' "$t255" | "$MSRUN" --token_file=- --dry_run "$WORKER" env >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 2 "a token of 256 characters on stdin"
expect_in "standard input (--token_file=-) must start with one token: 1 to 255" "$TMP/err" "256 on stdin"
ok "--token_file=-: one line read, the rest left; 255 characters and not 256"

# 3b. lines cut by the connection are whole again at the launcher: a
#     stand-in for ssh runs each host's msrun here with its stdout cut into
#     pieces of 5 bytes, while three hosts write at once
cat >"$TMP/cutting-ssh" <<'EOF'
#!/bin/bash
# a stand-in for ssh: runs COMMAND (the last argument) here, with its
# stdout cut into 5-byte pieces
set -o pipefail
cmd=${!#}
sh -c "$cmd" | python3 -c '
import os, time
while True:
    b = os.read(0, 65536)
    if not b:
        break
    for i in range(0, len(b), 5):
        os.write(1, b[i:i + 5])
        time.sleep(0.0002)
'
EOF
chmod +x "$TMP/cutting-ssh"
run_msrun --hostfile "$TMP/hosts" --ssh "$TMP/cutting-ssh" --forward_env=MSRUN_TEST_MARKER \
    --master_port="$(free_port)" "$WORKER" output 40
expect_code 0 "lines cut into pieces"
for r in 0 1 2 3 4 5; do
    [ "$(grep -c "^\[node $((r / 2)) rank $r\] out line [0-9]* of rank $r$" "$TMP/out")" = 40 ] ||
        fail "rank $r: 40 whole lines from pieces"
done
bad=$(grep -cvE '^\[node [0-2] rank [0-5]\] (out line [0-9]+ of rank [0-5]|no newline at the end)$' "$TMP/out")
[ "$bad" = 0 ] || fail "$bad lines of stdout mix pieces of several lines"
no_leftovers "lines cut into pieces"
ok "lines that reach the launcher in pieces leave it whole"

# Parts 4-7 need a real sshd: the test ends here (77) without one.
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
if [ ! -x "$SSHD" ] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
    echo "SKIP: sshd, ssh or ssh-keygen is not installed (Debian: openssh-server, openssh-client)"
    exit 77
fi
# sshd run by root needs its privilege separation directory, which the
# system's sshd service makes at boot; a user's sshd does not
if [ "$(id -u)" = 0 ] && [ ! -d /run/sshd ]; then
    mkdir -m 0755 /run/sshd || { echo "SKIP: cannot make /run/sshd for sshd run as root"; exit 77; }
fi

test_cleanup() {
    if [ -n "${SSHD_PID:-}" ]; then
        kill "$SSHD_PID" 2>/dev/null
        wait "$SSHD_PID" 2>/dev/null
    fi
}

D=$TMP/ssh
mkdir -m 0700 "$D"
ssh-keygen -q -t ed25519 -N '' -f "$D/host_key" || fail "ssh-keygen (host key)"
ssh-keygen -q -t ed25519 -N '' -f "$D/client_key" || fail "ssh-keygen (client key)"
cp "$D/client_key.pub" "$D/authorized_keys"
chmod 0600 "$D/authorized_keys"
SSH_PORT=$(free_port)
cat >"$D/sshd_config" <<EOF
ListenAddress 127.0.0.2
ListenAddress 127.0.0.3
ListenAddress 127.0.0.4
Port $SSH_PORT
HostKey $D/host_key
AuthorizedKeysFile $D/authorized_keys
PidFile none
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
LogLevel ERROR
EOF
if ! "$SSHD" -t -f "$D/sshd_config" 2>"$D/sshd_check"; then
    echo "SKIP: sshd cannot run here: $(head -c 300 "$D/sshd_check")"
    exit 77
fi
env MSRUN_TEST_MARKER="$MARKER" "$SSHD" -D -e -f "$D/sshd_config" 2>"$D/sshd.log" &
SSHD_PID=$!
SSH="ssh -p $SSH_PORT -i $D/client_key -o UserKnownHostsFile=$D/known_hosts -o StrictHostKeyChecking=no -o LogLevel=ERROR"
up=0
for ((i = 0; i < 100; i++)); do # sshd is ready once a login works (10 s at most)
    $SSH -o BatchMode=yes 127.0.0.4 true 2>/dev/null && up=1 && break
    kill -0 "$SSHD_PID" 2>/dev/null || break
    sleep 0.1
done
if [ $up = 0 ]; then
    kill -0 "$SSHD_PID" 2>/dev/null || { echo "SKIP: sshd exited: $(head -c 300 "$D/sshd.log")"; exit 77; }
    fail "no login through sshd on 127.0.0.4:$SSH_PORT within 10 s: $(head -c 300 "$D/sshd.log")"
fi

# each job's msruns and workers carry the marker, for leftovers
remote=(--ssh "$SSH" --forward_env=MSRUN_TEST_MARKER)

# 4. 3 hosts x 2 workers: every rank's collective calls, then 100 lines of
#    each rank on stdout and stderr: every line whole and tagged by its node
#    and rank, none lost, none cut into another through the launcher
printf '#!/bin/sh\n"%s" store && exec "%s" output 100\n' "$WORKER" "$WORKER" >"$TMP/job.sh"
chmod +x "$TMP/job.sh"
run_msrun --hostfile "$TMP/hosts" "${remote[@]}" --master_port="$(free_port)" "$TMP/job.sh"
expect_code 0 "3 hosts x 2 workers"
for r in 0 1 2 3 4 5; do
    tag="^\[node $((r / 2)) rank $r\]"
    expect_in "$tag store checks passed on rank $r of 6$" "$TMP/out" "rank $r"
    [ "$(grep -c "$tag out line [0-9]* of rank $r$" "$TMP/out")" = 100 ] || fail "rank $r: 100 whole lines on stdout"
    [ "$(grep -c "$tag err line [0-9]* of rank $r$" "$TMP/err")" = 100 ] || fail "rank $r: 100 whole lines on stderr"
done
bad=$(grep -cvE '^\[node [0-2] rank [0-5]\] (store checks passed on rank [0-5] of 6|out line [0-9]+ of rank [0-5]|no newline at the end)$' "$TMP/out")
[ "$bad" = 0 ] || fail "$bad lines of stdout are not one rank's whole line"
expect_in "^msrun: job .*: 6 workers on 3 hosts over ssh, coordinator on 127.0.0.2:" "$TMP/err" "the job's line"
no_leftovers "3 hosts x 2 workers"
ok "3 hosts x 2 workers over ssh: all 6 ranks, every line whole and tagged by node and rank"

# 5. a worker of node 1 exits 3: every host stops, the launcher exits 3
#    naming a host (the first whose msrun reported the failure)
run_msrun -H 127.0.0.2:2,127.0.0.3:2,127.0.0.4:2 "${remote[@]}" --master_port="$(free_port)" \
    "$WORKER" exit 3 3
expect_code 3 "a worker exits 3"
expect_in "rank 3 on node 1 .* exited with code 3" "$TMP/err" "the failing rank"
expect_in "^msrun: error: host 127\.0\.0\.[234] (node [012]): its msrun exited with status 3; stopping the other hosts$" \
    "$TMP/err" "the launcher names the host"
no_leftovers "a worker exits 3"
ok "a failing worker: every host stopped, exit 3, the host named"

# 6. a host whose ssh fails (nothing listens on 127.0.0.5): the others stop
run_msrun -H 127.0.0.2:2,127.0.0.5:2 "${remote[@]}" --master_port="$(free_port)" "$WORKER" sleep 30
expect_code 255 "ssh fails"
expect_in "^msrun: error: host 127.0.0.5 (node 1): ssh failed or lost the connection (exit 255" \
    "$TMP/err" "the host whose ssh failed"
no_leftovers "ssh fails"
ok "a host unreachable: exit 255 naming it, the others stopped"

# 7. Ctrl-C while the job runs: every remote msrun and worker is gone; the
#    token is on no command line and not in ssh's environment
# the token in MSRUN_TOKEN, which the launcher must keep out of ssh's
# environment (ssh could pass it on with SendEnv)
TOKEN=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export MSRUN_TOKEN=$TOKEN
start_msrun --hostfile "$TMP/hosts" "${remote[@]}" --master_port="$(free_port)" "$WORKER" sleep 60
wait_count "ready$" "$TMP/out" 6 30 || fail "6 workers ready within 30 s"
[ "$(leftovers | wc -w)" -ge 12 ] || fail "launcher, ssh, msruns and workers carry the marker"
on_cmdline=$(grep -laF -- "$TOKEN" /proc/[0-9]*/cmdline 2>/dev/null)
[ -z "$on_cmdline" ] || fail "the token is on a command line: $on_cmdline"
# the scan can see it: the workers hold it in their environment (MSR_TOKEN)
[ -n "$(grep -laF -- "$TOKEN" /proc/[0-9]*/environ 2>/dev/null)" ] || fail "no worker has the token"
for p in $(leftovers); do
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = ssh ] && grep -qaF -- "$TOKEN" "/proc/$p/environ" 2>/dev/null; then
        fail "the token is in ssh's environment (pid $p)"
    fi
done
grep -qaF -- "$TOKEN" "$TMP/out" "$TMP/err" && fail "the token was printed"
kill -INT "$BG_PID"
wait_pid "$BG_PID" 30
expect_code 130 "Ctrl-C"
expect_in "^msrun: SIGINT: stopping the job on every host$" "$TMP/err" "Ctrl-C said"
expect_in "standard input closed: stopping the job" "$TMP/err" "a remote msrun saw its stdin close"
no_leftovers "Ctrl-C"
unset MSRUN_TOKEN
ok "Ctrl-C: every remote msrun and worker gone; the token on no command line"

exit $FAILED
