#!/bin/bash
# --log_max_bytes: a worker's log file rotates to NAME.1 past the bound (at
# exactly the bound it does not), a line longer than the bound is cut with a
# marker (whether it arrives whole or in pieces), and the option's bounds.
. "$(dirname "$0")/lib.sh"

# the worker: for each argument N, a line of N bytes with its newline
# ("after": the line "after")
cat >"$TMP/lines.sh" <<'SH'
#!/bin/sh
for n in "$@"; do
    case $n in
    after) echo after ;;
    *) head -c $((n - 1)) /dev/zero | tr '\0' a && echo ;;
    esac
done
SH
chmod +x "$TMP/lines.sh"
N=1024
size() { stat -c %s "$1"; }
# run JOB LINES...: one worker, logs in $TMP/logs/JOB
run() {
    local job=$1
    shift
    run_msrun --worker_num=1 --job_id="$job" --log_dir="$TMP/logs" --log_max_bytes=$N \
        "$TMP/lines.sh" "$@"
    expect_code 0 "job $job"
    LOG=$TMP/logs/$job/worker_0.log
}
# the generation's start line comes first: its length is fixed
# ("=== msrun: generation 0 started 2026-11-24T18:31:51.577Z ===")
H=61

# 1. at exactly the bound: one file of N bytes
run exact $((N - H))
[ "$(size "$LOG")" = $N ] || fail "the file holds $(size "$LOG") bytes, want $N"
[ ! -e "$LOG.1" ] || fail "a file of exactly --log_max_bytes rotated"
[ "$(head -c $H "$LOG" | grep -c '^=== msrun: generation 0 started ')" = 1 ] ||
    fail "the start line is $H bytes: $(head -1 "$LOG")"
ok "a log of exactly --log_max_bytes stays one file"

# 2. one byte past: the line starts a new file, the old one is NAME.1
run past $((N - H + 1))
[ "$(size "$LOG.1")" = $H ] || fail "NAME.1 holds $(size "$LOG.1") bytes, want the start line"
[ "$(size "$LOG")" = $((N - H + 1)) ] || fail "the new file holds $(size "$LOG") bytes"
ok "one byte past --log_max_bytes rotates to NAME.1 at the line's start"

# 3. many lines: one old file is kept, no file is over the bound, the
#    newest lines are in NAME and the ones before them in NAME.1
run many $(for i in $(seq 1 40); do echo 100; done) after
# (the run's history.jsonl beside them has a bound of its own)
[ "$(ls "$TMP/logs/many" | grep '^worker_')" = "$(printf 'worker_0.log\nworker_0.log.1')" ] ||
    fail "files: $(ls "$TMP/logs/many")"
for f in "$LOG" "$LOG.1"; do
    [ "$(size "$f")" -le $N ] || fail "$f holds $(size "$f") bytes, over $N"
done
[ "$(tail -1 "$LOG")" = after ] || fail "the last line is in the new file"
[ "$(size "$LOG.1")" -gt $((N - 100)) ] || fail "NAME.1 was full: $(size "$LOG.1") bytes"
ok "a log that keeps growing rotates and keeps one old file"

# 4. a line longer than the bound, whole (held as one line) and streamed
#    (longer than msrun holds a line for: it comes in pieces): cut to the
#    bound with the marker, its rest dropped, the next line in a new file
for len in $((3 * N)) 200000; do
    run cut$len $len after
    [ "$(size "$LOG.1")" = $N ] || fail "the cut line's file holds $(size "$LOG.1") bytes"
    [ "$(tail -1 "$LOG.1")" = "$(head -c $((N - 38)) /dev/zero | tr '\0' a) [msrun: line cut at --log_max_bytes]" ] ||
        fail "the cut line: $(tail -c 80 "$LOG.1")"
    [ "$(cat "$LOG")" = after ] || fail "after the cut line: $(head -c 80 "$LOG")"
    expect_in "$(head -c 2000 /dev/zero | tr '\0' a)" "$TMP/out" "the terminal still shows the whole line"
done
ok "a line longer than --log_max_bytes is cut with a marker, whole or in pieces"

# 5. a rotation that fails (a directory planted at NAME.1) is reported
#    once, and the output goes on into the file there is: nothing is lost
cat >"$TMP/plant.sh" <<SH
#!/bin/sh
mkdir -p "$TMP/logs/rotfail/worker_0.log.1/x" && exec "$TMP/lines.sh" \$(seq -s ' ' 1000 1 1019) after
SH
chmod +x "$TMP/plant.sh"
run_msrun --worker_num=1 --job_id=rotfail --log_dir="$TMP/logs" --log_max_bytes=$N "$TMP/plant.sh"
expect_code 0 "a job whose log cannot rotate"
LOG=$TMP/logs/rotfail/worker_0.log
expect_in "cannot move log file .*worker_0.log to worker_0.log.1" "$TMP/err" "the failed rotation"
[ "$(grep -c "cannot move log file" "$TMP/err")" = 1 ] || fail "the failed rotation is reported once"
[ "$(grep -c '^a*$' "$LOG")" = 20 ] && [ "$(tail -1 "$LOG")" = after ] ||
    fail "every line is in the file: $(grep -c '^a*$' "$LOG") of 20"
ok "a rotation that fails is reported once and loses no output"

# 6. the bounds: 0 (no limit) keeps the long line whole; 1K is the least
run_msrun --worker_num=1 --job_id=nolimit --log_dir="$TMP/logs" --log_max_bytes=0 \
    "$TMP/lines.sh" $((3 * N))
expect_code 0 "--log_max_bytes=0"
[ "$(size "$TMP/logs/nolimit/worker_0.log")" = $((H + 3 * N)) ] || fail "0 is no limit"
run_msrun --worker_num=1 --log_max_bytes=1K /bin/true
expect_code 0 "--log_max_bytes=1K"
run_msrun --worker_num=1 --log_max_bytes=1023 /bin/true
expect_code 2 "--log_max_bytes=1023"
expect_in "log_max_bytes 1023 is below 1024 bytes" "$TMP/err" "the refusal"
ok "--log_max_bytes: 0 is no limit, 1K accepted, 1023 refused"
no_leftovers "log_max"
