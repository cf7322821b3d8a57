#!/bin/bash
# The run's history and `msrun board` (docs/usage.md): a job with --log_dir
# keeps every progress report of its ranks in history.jsonl (one JSON line a
# step and rank), bounded by --log_max_bytes with one rotated file, and
# `msrun board DIR...` writes one self-contained HTML page (mode 0600) with
# those runs' history embedded, safely (a name holding "</script>" cannot end
# the page's data), for one run, a --log_dir (its latest run) or several runs.
. "$(dirname "$0")/lib.sh"

REPORTER=$BUILD/tests/report_worker
export MSRUN_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

# board_data PAGE: the runs embedded in PAGE, as JSON, on stdout
board_data() {
    python3 - "$1" <<'PY'
import json, re, sys
page = open(sys.argv[1]).read()
m = re.findall(r'<script id="msrun-board" type="application/json">(.*?)</script>', page, re.S)
assert len(m) == 1, len(m)
print(json.dumps(json.loads(m[0])))
PY
}

# --- a job of 4 ranks, 20 steps each: 80 records ---
run_msrun --worker_num=4 --log_dir="$TMP/logs" --job_id=first "$REPORTER" 20 10
expect_code 0 "the job: $(cat "$TMP/err")"
H=$TMP/logs/first/history.jsonl
[ -f "$H" ] && [ "$(stat -c %a "$H")" = 600 ] || fail "no history.jsonl of mode 0600: $(ls -l "$TMP/logs/first")"
python3 - "$H" <<'PY' || fail "the history's records: $(head -c 2000 "$H")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert len(recs) == 80, len(recs)
for r in recs:
    assert set(r) == {"t", "gen", "node", "rank", "step", "step_ms", "scalars"}, r
    assert r["gen"] == 0 and r["node"] == 0 and 5 < r["step_ms"] < 1000 and r["t"] > 1.6e9, r
steps = {rk: sorted(r["step"] for r in recs if r["rank"] == rk) for rk in range(4)}
assert all(s == list(range(20)) for s in steps.values()), steps
# the scalars of each rank's last report (libmsrun sends the latest of each)
last = {r["rank"]: r for r in recs if r["step"] == 19}
assert all(last[rk]["scalars"] == {"loss": 10 - 19 * 0.125, "tok_s": 1000 + rk} for rk in range(4)), last
PY
ok "history.jsonl: one record a step and rank, with step times and scalars"

# --- msrun board DIR: the page next to the history, the runs embedded ---
CODE=0
"$MSRUN" board "$TMP/logs/first" >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 0 "msrun board: $(cat "$TMP/berr")"
P=$TMP/logs/first/board.html
expect_in "wrote $P (1 run)" "$TMP/bout" "msrun board's line"
[ "$(stat -c %a "$P")" = 600 ] || fail "the page's mode: $(stat -c %a "$P")"
board_data "$P" >"$TMP/data.json" || fail "the page's data"
json "$TMP/data.json" "len(j['runs']) == 1 and j['runs'][0]['name'] == 'first' and
    j['runs'][0]['history'] == open('$H').read()" | grep -qx True || fail "the embedded run"
grep -q 'id="charts"' "$P" && grep -q "function board(" "$P" || fail "the page's script"
ok "msrun board DIR writes a 0600 page with the run's history embedded"

# --- a second run in the same --log_dir, rotated at --log_max_bytes ---
run_msrun --worker_num=2 --log_dir="$TMP/logs" --job_id=second --log_max_bytes=1024 \
    "$REPORTER" 30 5
expect_code 0 "the second job: $(cat "$TMP/err")"
H2=$TMP/logs/second
[ -f "$H2/history.jsonl.1" ] || fail "no rotated history: $(ls -l "$H2")"
s0=$(stat -c %s "$H2/history.jsonl")
s1=$(stat -c %s "$H2/history.jsonl.1")
[ "$s0" -le 1024 ] && [ "$s1" -le 1024 ] && [ "$s1" -gt 900 ] || fail "sizes $s0 and $s1 against 1024"
n=$(cat "$H2/history.jsonl.1" "$H2/history.jsonl" | wc -l)
last=$(tail -n 1 "$H2/history.jsonl")
case "$last" in *'"step":29,'*) ;; *) fail "the last record: $last" ;; esac
ok "the history rotates at --log_max_bytes (files of $s1 and $s0 bytes, $n records kept)"

# the --log_dir itself: its latest run (the second); and both side by side
CODE=0
"$MSRUN" board --out "$TMP/latest.html" "$TMP/logs" >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 0 "msrun board LOG_DIR: $(cat "$TMP/berr")"
board_data "$TMP/latest.html" >"$TMP/data.json" || fail "the latest run's page"
json "$TMP/data.json" "[r['name'] for r in j['runs']] == ['second'] and
    j['runs'][0]['history'].count(chr(10)) == $n" | grep -qx True || fail "the latest run: both files"
CODE=0
"$MSRUN" board --out "$TMP/two.html" "$TMP/logs/first" "$TMP/logs/second" >"$TMP/bout" \
    2>"$TMP/berr" || CODE=$?
expect_code 0 "msrun board DIR1 DIR2: $(cat "$TMP/berr")"
expect_in "wrote $TMP/two.html (2 runs)" "$TMP/bout" "msrun board's line"
board_data "$TMP/two.html" >"$TMP/data.json" || fail "two runs' page"
json "$TMP/data.json" "[r['name'] for r in j['runs']] == ['first', 'second']" | grep -qx True ||
    fail "two runs: $(head -c 300 "$TMP/data.json")"
ok "msrun board LOG_DIR (its latest run) and DIR1 DIR2 side by side"

# --- a history line that tries to end the page's script ---
mkdir -m 0700 "$TMP/evil"
printf '{"rank":0,"step":1,"gen":0,"step_ms":1,"scalars":{"x</script><script>alert(1)</script>":1}}\n' \
    >"$TMP/evil/history.jsonl"
CODE=0
"$MSRUN" board "$TMP/evil" >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 0 "msrun board of a crafted history"
board_data "$TMP/evil/board.html" >"$TMP/data.json" || fail "the crafted page's data"
[ "$(grep -o '<script' "$TMP/evil/board.html" | wc -l)" = 2 ] ||
    fail "the crafted history added a script element"
json "$TMP/data.json" "'</script>' in j['runs'][0]['history']" | grep -qx True || fail "its text kept"
ok "a history's text cannot end the page's script (escaped, kept as text)"

# --- errors: no DIR, a directory without history, an unwritable page ---
CODE=0
"$MSRUN" board >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 2 "msrun board without DIR"
mkdir "$TMP/empty"
CODE=0
"$MSRUN" board "$TMP/empty" >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 1 "msrun board of a directory without history"
expect_in "no run history in $TMP/empty" "$TMP/berr" "its message"
CODE=0
"$MSRUN" board "$TMP/missing" >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 1 "msrun board of a missing directory"
expect_in "$TMP/missing: No such file or directory" "$TMP/berr" "its message"
CODE=0
"$MSRUN" board --out "$TMP/none/x.html" "$TMP/logs/first" >"$TMP/bout" 2>"$TMP/berr" || CODE=$?
expect_code 1 "msrun board --out into a missing directory"
expect_in "cannot write $TMP/none/x.html" "$TMP/berr" "its message"
ok "msrun board: 2 without DIR, 1 with a message for no history, no directory or an unwritable page"
exit $FAILED
