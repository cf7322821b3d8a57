#!/bin/bash
# Live output and logs (docs/usage.md, "Output and logs"): progress lines
# with '\r' forwarded as they come, --pty, long lines whole, --tee and
# --redirects, --tag_output, --timestamps, a log directory per run with
# generation marks, --worker_log_name, --tail_worker_log, a bad --log_dir.
. "$(dirname "$0")/lib.sh"

# 1. a progress bar: each '\r' segment reaches the terminal before the line
#    ends (the worker waits, at most 20 s, until the test has seen 50%)
cat >"$TMP/bar.sh" <<SH
#!/bin/bash
for p in 10 50; do printf '\r%d%%|bar' \$p >&2; done
for ((i = 0; i < 400; i++)); do [ -f "$TMP/seen.\$MSR_RANK" ] && break; sleep 0.05; done
printf '\r100%%|bar\n' >&2
SH
chmod +x "$TMP/bar.sh"
start_msrun --worker_num=2 "$TMP/bar.sh"
for r in 0 1; do
    wait_for "rank $r\] 50%|bar" "$TMP/err" 20 || fail "rank $r's 50% is not shown before its newline"
    touch "$TMP/seen.$r"
done
wait_pid "$BG_PID" 30
expect_code 0 "progress bar job"
tr '\r' '\n' <"$TMP/err" >"$TMP/segments"
for r in 0 1; do
    grep -q "$(printf '\r')\[node 0 rank $r\] 50%|bar" "$TMP/err" ||
        fail "rank $r: a '\\r' is forwarded as '\\r' + prefix + segment"
    expect_in "^\[node 0 rank $r\] 100%|bar\$" "$TMP/segments" "rank $r's last state"
done
ok "carriage-return progress lines are forwarded live"

# 2. --pty: the worker's stdout and stderr are a terminal (one stream), the
#    worker keeps its own process group and is no session leader, and a
#    SIGTERM to msrun still stops its whole group
cat >"$TMP/tty.sh" <<'SH'
#!/bin/bash
[ -t 1 ] && echo "stdout is a tty"
[ -t 2 ] && echo "stderr is a tty" >&2
read -r pid pgid sid < <(ps -o pid=,pgid=,sid= -p $$)
[ "$pgid" = "$$" ] && echo "own process group"
[ "$sid" != "$$" ] && echo "no session leader"
if [ "${1:-}" = wait ]; then sleep 60 & echo "child $!"; wait; fi
SH
chmod +x "$TMP/tty.sh"
run_msrun --worker_num=1 --pty "$TMP/tty.sh"
expect_code 0 "pty job"
for s in "stdout is a tty" "stderr is a tty" "own process group" "no session leader"; do
    expect_in "^\[node 0 rank 0\] $s\$" "$TMP/out" "--pty: $s (on msrun's stdout)"
done
if command -v python3 >/dev/null; then
    run_msrun --worker_num=1 --pty python3 -c 'import sys; print(sys.stdout.isatty())'
    expect_in "rank 0\] True\$" "$TMP/out" "python sees a terminal"
fi
run_msrun --worker_num=1 "$TMP/tty.sh"
expect_not_in "is a tty" "$TMP/out" "without --pty, pipes"
start_msrun --worker_num=1 --pty --grace_period=2 "$TMP/tty.sh" wait
wait_for "child [0-9]" "$TMP/out" 20 || fail "the pty worker did not start its child"
kill -TERM "$BG_PID"
wait_pid "$BG_PID" 20
no_leftovers "a SIGTERM stops the pty worker's process group"
ok "--pty gives a terminal, keeps the process group"

# 3. a line longer than msrun's buffers arrives whole, with one prefix
run_msrun --worker_num=1 --log_dir="$TMP/long" python3 -c 'print("y" * 200000); print("end")'
expect_code 0 "long line"
[ "$(grep -c "^\[node 0 rank 0\] y*\$" "$TMP/out")" = 1 ] || fail "the long line is cut"
[ "$(awk 'NR == 1 { print length($0) }' "$TMP/out")" = $((200000 + 16)) ] ||
    fail "the long line's length: $(awk 'NR == 1 { print length($0) }' "$TMP/out")"
expect_in "^\[node 0 rank 0\] end\$" "$TMP/out" "the next line"
[ "$(grep -c '^y*$' "$TMP/long/latest/worker_0.log")" = 1 ] || fail "the long line in the log"
ok "a long line arrives whole"

# ... and when another rank's line comes in the middle of it, the long line
# goes on in a line of its own marked "..." after the prefix, never glued to
# the other rank's output nor cut without a mark: rank 0 writes 100 kB (more
# than msrun holds back waiting for a line's end) without a newline, rank 1
# then prints a line, then rank 0 ends its line. Each rank writes its part
# once the test has seen msrun show what came before (the flag files, 60 s at
# most), not after a fixed pause that a slow machine can outlast.
cat >"$TMP/cut.py" <<'PY'
import os, sys, time
flags = sys.argv[1]
def wait(name):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(flags, name)) and time.monotonic() < deadline:
        time.sleep(0.01)
if os.environ["MSR_RANK"] == "0":
    sys.stdout.write("a" * 100000)
    sys.stdout.flush()
    wait("other")
    print("b" * 10)
else:
    wait("a")
    print("other")
    sys.stdout.flush()
PY
mkdir "$TMP/cut"
start_msrun --worker_num=2 python3 "$TMP/cut.py" "$TMP/cut"
wait_for '^\[node 0 rank 0\] aaaa' "$TMP/out" 30 ||
    fail "rank 0's long line is not shown before its end"
touch "$TMP/cut/a"
wait_for '^\[node 0 rank 1\] other$' "$TMP/out" 30 || fail "rank 1's line is not shown"
touch "$TMP/cut/other"
wait_pid "$BG_PID" 60
expect_code 0 "a long line cut by another rank's"
printf '%s\n' '^\[node 0 rank 0\] a*$' '^\[node 0 rank 1\] other$' \
    '^\[node 0 rank 0\] \.\.\.a*b\{10\}$' >"$TMP/cut.want"
[ "$(wc -l <"$TMP/out")" = 3 ] || fail "the cut long line: 3 lines, not $(wc -l <"$TMP/out")"
for k in 1 2 3; do
    sed -n "${k}p" "$TMP/out" | grep -q "$(sed -n "${k}p" "$TMP/cut.want")" ||
        fail "the cut long line's line $k: $(sed -n "${k}p" "$TMP/out" | cut -c1-40)"
done
[ "$(sed 's/^\[node 0 rank [01]\] //' "$TMP/out" | tr -cd a | wc -c)" = 100000 ] ||
    fail "rank 0's 100000 a's, all of them"
ok "a long line cut by another rank's line goes on after '...'"

# 4. --redirects and --tee per local rank (torchrun's values)
cat >"$TMP/both.sh" <<'SH'
#!/bin/sh
echo "out of rank $MSR_RANK"
echo "err of rank $MSR_RANK" >&2
SH
chmod +x "$TMP/both.sh"
run_msrun --worker_num=2 --log_dir="$TMP/std" --redirects=0:1 --tee=1:2 "$TMP/both.sh"
expect_code 0 "redirects and tee"
l0=$TMP/std/latest/worker_0.log l1=$TMP/std/latest/worker_1.log
expect_in "^out of rank 0" "$l0" "redirected stdout in the file"
expect_not_in "out of rank 0" "$TMP/out" "redirected stdout off the terminal"
expect_in "rank 0\] err of rank 0" "$TMP/err" "rank 0's stderr on the terminal"
expect_not_in "err of rank 0" "$l0" "rank 0's stderr not in the file"
expect_in "^err of rank 1" "$l1" "teed stderr in the file"
expect_in "rank 1\] err of rank 1" "$TMP/err" "teed stderr on the terminal"
expect_in "rank 1\] out of rank 1" "$TMP/out" "rank 1's stdout on the terminal"
expect_not_in "out of rank 1" "$l1" "rank 1's stdout not in the file"
run_msrun --worker_num=2 --log_dir="$TMP/std3" --redirects=3 "$TMP/both.sh"
[ ! -s "$TMP/out" ] || fail "--redirects=3: nothing on stdout: $(cat "$TMP/out")"
expect_not_in "of rank" "$TMP/err" "--redirects=3: no worker output on stderr"
expect_in "err of rank 1" "$TMP/std3/latest/worker_1.log" "--redirects=3: all in the file"
ok "--redirects and --tee"

# 5. --tag_output=0 and --timestamps
run_msrun --worker_num=2 --tag_output=0 "$TMP/both.sh"
expect_in "^out of rank 1\$" "$TMP/out" "--tag_output=0: no prefix"
expect_not_in "\[node" "$TMP/out" "--tag_output=0"
ts='[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\.[0-9]\{3\}Z'
run_msrun --worker_num=2 --timestamps --log_dir="$TMP/ts" "$TMP/both.sh"
expect_in "^$ts \[node 0 rank 1\] out of rank 1\$" "$TMP/out" "a timestamp on the terminal"
expect_in "^$ts err of rank 0\$" "$TMP/ts/latest/worker_0.log" "a timestamp in the file"
ok "--tag_output=0 and --timestamps"

# 6. each run gets a directory of its own, latest points at the newest, an
#    earlier run's files are never appended to; restarts are marked
run_msrun --worker_num=2 --job_id=same --log_dir="$TMP/runs" "$TMP/both.sh"
expect_code 0 "first run"
run_msrun --worker_num=2 --job_id=same --log_dir="$TMP/runs" "$TMP/both.sh"
expect_code 0 "second run"
[ "$(grep -c "out of rank 0" "$TMP/runs/same/worker_0.log")" = 1 ] || fail "the first run's log"
[ "$(grep -c "out of rank 0" "$TMP/runs/same.1/worker_0.log")" = 1 ] || fail "the second run's log"
[ "$(readlink "$TMP/runs/latest")" = same.1 ] || fail "latest -> $(readlink "$TMP/runs/latest")"
cat >"$TMP/once.sh" <<SH
#!/bin/sh
echo "attempt of rank \$MSR_RANK"
[ "\$MSR_RANK" = 1 ] && [ ! -f "$TMP/failed" ] && touch "$TMP/failed" && exit 3
exit 0
SH
chmod +x "$TMP/once.sh"
run_msrun --worker_num=2 --max_restarts=2 --job_id=restart --log_dir="$TMP/runs" "$TMP/once.sh"
expect_code 0 "restarted job"
f=$TMP/runs/restart/worker_1.log
expect_in "^=== msrun: generation 0 started $ts ===\$" "$f" "the first generation's mark"
expect_in "^=== msrun: generation 1 started $ts (restart 1 of 2) ===\$" "$f" "the restart's mark"
[ "$(grep -c "attempt of rank 1" "$f")" = 2 ] || fail "both generations in one file"
ok "a log directory per run, generations marked"

# 7. --worker_log_name (ours and MindSpore's form) and --tail_worker_log
run_msrun --worker_num=2 --worker_log_name='w{node_rank}-{local_rank}.txt' --log_dir="$TMP/names" \
    "$TMP/both.sh"
expect_in "out of rank 1" "$TMP/names/latest/w0-1.txt" "the pattern's name"
run_msrun --worker_num=2 --worker_log_name=mine --log_dir="$TMP/names2" "$TMP/both.sh"
expect_in "out of rank 1" "$TMP/names2/latest/mine_1.log" "MindSpore's form: _<rank>.log added"
run_msrun --worker_num=3 --tail_worker_log=1 "$TMP/both.sh"
expect_in "rank 1\] out of rank 1" "$TMP/out" "--tail_worker_log=1 shows rank 1"
expect_not_in "rank [02]\]" "$TMP/out" "--tail_worker_log=1 hides the others"
run_msrun --worker_num=3 --tail_worker_log=1,2 --show_ranks=0-1 "$TMP/both.sh"
expect_in "rank 1\] out" "$TMP/out" "both lists hold rank 1"
expect_not_in "rank [02]\]" "$TMP/out" "a rank is shown when both lists hold it"
ok "--worker_log_name and --tail_worker_log"

# 8. bad input: one line, exit 2, no worker started
printf '#!/bin/sh\ntouch "%s/started.$MSR_RANK"\n' "$TMP" >"$TMP/prog.sh"
chmod +x "$TMP/prog.sh"
echo file >"$TMP/afile"
bad() {
    local want="$1"
    shift
    run_msrun "$@"
    expect_code 2 "msrun $*"
    grep -q -- "$want" "$TMP/err" || fail "msrun $*: message '$want' missing"
    [ "$(wc -l <"$TMP/err")" = 1 ] || fail "msrun $*: one line"
    expect_in "^msrun: error: " "$TMP/err" "msrun $*"
    ls "$TMP"/started.* >/dev/null 2>&1 && fail "msrun $*: a worker started"
    ok "$want"
}
bad "Not a directory" --worker_num=1 --log_dir="$TMP/afile" "$TMP/prog.sh"
bad "Not a directory" --worker_num=1 --log_dir="$TMP/afile/sub" "$TMP/prog.sh"
if [ "$(id -u)" != 0 ]; then
    mkdir -m 500 "$TMP/ro"
    bad "Permission denied" --worker_num=1 --log_dir="$TMP/ro" "$TMP/prog.sh"
fi
bad "--redirects needs --log_dir" --worker_num=1 --redirects=3 "$TMP/prog.sh"
bad "--tee=4: give 0" --worker_num=1 --log_dir="$TMP/x" --tee=4 "$TMP/prog.sh"
bad "local rank 2 is out of range" --worker_num=2 --log_dir="$TMP/x" --tee=2:1 "$TMP/prog.sh"
bad "unknown placeholder" --worker_num=1 --log_dir="$TMP/x" --worker_log_name='w{pid}' "$TMP/prog.sh"
bad "not a file name" --worker_num=1 --log_dir="$TMP/x" --worker_log_name='a/{rank}' "$TMP/prog.sh"
bad "--tail_worker_log=7: rank 7 is out of range" --worker_num=2 --tail_worker_log=7 "$TMP/prog.sh"
no_leftovers "logs"
