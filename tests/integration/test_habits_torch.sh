#!/bin/bash
# TORCHELASTIC_ERROR_FILE with torch's own @record (issue 39): the failure
# report names the exception torch wrote. Skipped (77) without torch; its
# own test, as importing torch takes seconds.
. "$(dirname "$0")/lib.sh"

PY=
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null &&
        "$p" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)' 2>/dev/null
    then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "SKIP: no python3 can import torch (Debian: python3-torch)"
    exit 77
fi
cat >"$TMP/rec.py" <<'PYEOF'
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    raise RuntimeError("torch recorded this")


main()
PYEOF
run_msrun --worker_num=1 --python "$PY" "$TMP/rec.py"
expect_code 1 "a worker that raised under @record"
expect_in "rank 0 on node 0 (127.0.0.1, pid [0-9]*) raised RuntimeError: torch recorded this, exited with code 1" \
    "$TMP/err" "torch's @record read back"
ok "torch's @record: the exception in the failure report"
no_leftovers "habits_torch"
exit $FAILED
