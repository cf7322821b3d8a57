#!/usr/bin/env bash
# Python programs the way MindSpore's msrun and torchrun run them: a
# PROGRAM ending in .py runs under python3, -m runs a module, --no_python
# runs the program as given, --python / MSRUN_PYTHON pick the interpreter;
# a Python worker's lines arrive while it runs; a script whose interpreter
# is missing says so.
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
cd "$TMP"
cat >train.py <<'PY'
import os, sys
print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"], " ".join(sys.argv[1:]))
PY
run_msrun --worker_num=2 --local_worker_num=2 train.py --lr 3e-4
expect_code 0 "a .py program"
expect_in "\[node 0 rank 0\] rank 0 of 2 --lr 3e-4" "$TMP/out" "a .py program runs under python3"
expect_in "\[node 0 rank 1\] rank 1 of 2 --lr 3e-4" "$TMP/out" "a .py program runs under python3"
ok "PROGRAM.py runs as python3 PROGRAM.py ARGS"

mkdir -p pkg && : >pkg/__init__.py
printf 'import os, sys\nprint("module", os.environ["RANK"], sys.argv[1:])\n' >pkg/mod.py
PYTHONPATH=$TMP run_msrun --worker_num=1 --local_worker_num=1 -m pkg.mod --x 1
expect_code 0 "-m"
expect_in "module 0 \['--x', '1'\]" "$TMP/out" "-m runs a module"
ok "-m MODULE runs python3 -m MODULE"

printf '#!/bin/sh\necho "as given: $*"\n' >direct.py
chmod +x direct.py
run_msrun --worker_num=1 --local_worker_num=1 --no-python ./direct.py a
expect_code 0 "--no-python"
expect_in "as given: a" "$TMP/out" "--no-python runs the program itself"
ok "--no_python / --no-python run the program as given"

run_msrun --worker_num=1 --local_worker_num=1 --python /no/such/python train.py
expect_code 2 "a missing interpreter"
expect_in "Python interpreter '/no/such/python' does not exist" "$TMP/err" "--python checked"
MSRUN_PYTHON=/no/such/python3 run_msrun --worker_num=1 --local_worker_num=1 train.py
expect_code 2 "MSRUN_PYTHON"
expect_in "'/no/such/python3' does not exist" "$TMP/err" "MSRUN_PYTHON is the interpreter"
run_msrun --worker_num=1 --local_worker_num=1 --no_python -m pkg.mod
expect_code 2 "-m with --no_python"
run_msrun --worker_num=1 --local_worker_num=1 missing.py
expect_code 2 "a missing script"
expect_in "program 'missing.py' does not exist" "$TMP/err" "a missing script"
ok "the interpreter and the script are checked before any worker starts"

printf '#!/no/such/interpreter\necho hi\n' >bad.sh
chmod +x bad.sh
run_msrun --worker_num=1 --local_worker_num=1 ./bad.sh
[ "$CODE" != 0 ] || fail "a script with a missing interpreter succeeded"
expect_in "cannot execute './bad.sh': interpreter '/no/such/interpreter' not found" "$TMP/err" \
    "a bad shebang"
ok "a missing interpreter is named"

# Live output: Python block-buffers stdout on a pipe; the line must reach
# msrun's terminal while the worker still runs (the user's shell may not
# set PYTHONUNBUFFERED).
printf 'import time\nprint("early line")\ntime.sleep(30)\n' >slow.py
: >"$TMP/out" # emptied here, not by the child's redirection (lib.sh's start_msrun)
env -u PYTHONUNBUFFERED MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=1 \
    --local_worker_num=1 slow.py >"$TMP/out" 2>"$TMP/err" &
BG_PID=$!
wait_for "early line" "$TMP/out" 15 || fail "a Python worker's line did not arrive while it ran"
# while it ran: msrun (which ends with its worker) is still there, whatever
# the machine's speed made of the 15 s above (the worker's 30 s sleep only
# outlasts the check; the SIGTERM below ends it)
ps -o stat= -p "$BG_PID" | grep -qv '^Z' || fail "a Python worker's line arrived only when it ended"
kill -TERM "$BG_PID"
wait_pid "$BG_PID" 20
ok "a Python worker's output arrives as it is written"
no_leftovers "python tests"
exit $FAILED
