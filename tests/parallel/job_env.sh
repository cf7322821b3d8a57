# Shared by the parallel tests that start msrun: the command line and
# environment for msrun and its workers, a way to end a job's processes,
# and the checks train_gpt's tests share (the end of this file).
# Expects MSRUN_BUILD; reads MSRUN_SANITIZE (set by CTest for sanitizer
# builds).
#
#   "${msrun_cmd[@]}" --worker_num=N ... "${worker_env[@]}" PROGRAM ARGS...
#   kill_job JOB_ID
msrun_cmd=(env "$MSRUN_BUILD/bin/msrun")
worker_env=()
train_args=()
if [[ -n "${MSRUN_SANITIZE:-}" ]]; then
    # UCX must not hook malloc/mmap under AddressSanitizer (they would fight
    # over the same symbols). Leaks are checked in the workers (this module's
    # code); msrun's own are the launcher's business.
    export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
    worker_env=(env "ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}")
    msrun_cmd=(env "ASAN_OPTIONS=detect_leaks=0" "$MSRUN_BUILD/bin/msrun")
fi

# Kills whatever is left of job $1 (found by the job id in its environment).
kill_job() {
    local p
    for p in $(grep -lsa "MSR_JOB_ID=$1" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3); do
        [[ "$p" != "$$" ]] && kill -KILL "$p" 2>/dev/null
    done
    return 0
}

# The usual start of a job test: a directory $work, removed at exit with
# every job named in jobs_started stopped first, and fail MESSAGE (which
# also prints the file fail_log names, when a test sets it).
job_test_setup() {
    work=$(mktemp -d)
    jobs_started=()
    # a child forked for a command and killed before its exec runs this
    # trap too: only the script's own shell cleans up
    trap '[[ $BASHPID == "$$" ]] && { job_test_cleanup; }' EXIT
}
job_test_cleanup() {
    local j
    for j in "${jobs_started[@]}"; do kill_job "$j"; done
    rm -rf "$work"
}
fail() {
    echo "FAIL: $*" >&2
    [[ -z "${fail_log:-}" ]] || cat "$fail_log" >&2 2>/dev/null || true
    exit 1
}

# job_tokens: a token file and a validation file of scripts/make_tokens.py
# (100 merges of the first 3000 tokens: V 356) in $work/train.bin and
# $work/val.bin
job_tokens() {
    python3 "$MSRUN_SOURCE/scripts/make_tokens.py" "$work/train.bin" --val "$work/val.bin" \
        --merges 100 --max-tokens 3000 2>/dev/null || fail "make_tokens.py failed"
}

# skip_without_torch: exits 77 (CTest's skip) when /usr/bin/python3 cannot
# import torch and numpy
skip_without_torch() {
    if ! timeout 60 /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
        echo "SKIP: /usr/bin/python3 cannot import torch and numpy (install python3-torch)"
        exit 77
    fi
}

# ---- the tests of train_gpt ----
# A script sets job_prefix to name its jobs, and train_args to the options
# that every train_gpt of msrun_n and refuse takes before their ARGS (none
# unless set).
#
#   msrun_n N ARGS...: train_gpt ARGS on N local workers under msrun (60 s
#   at most), as a job job_test_cleanup stops
msrun_n() {
    local n=$1 job=${job_prefix:-train}-$$-$RANDOM
    shift
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job" \
        "${worker_env[@]}" "$MSRUN_BUILD/bin/train_gpt" "${train_args[@]}" "$@"
}
# refuse N PATTERN ARGS...: train_gpt ARGS, alone (N = 1) or on N workers,
# exits 2 before training (no "step" on stdout) with PATTERN on stderr;
# leaves them in $work/out and $work/err
refuse() {
    local n=$1 pattern=$2 rc=0
    shift 2
    if [[ $n -eq 1 ]]; then
        timeout 30 "$MSRUN_BUILD/bin/train_gpt" "${train_args[@]}" "$@" >"$work/out" \
            2>"$work/err" || rc=$?
    else
        msrun_n "$n" "$@" >"$work/out" 2>"$work/err" || rc=$?
    fi
    [[ $rc -eq 2 ]] || fail "train_gpt $* on $n exited $rc, want 2: $(cat "$work/err")"
    grep -q -- "$pattern" "$work/err" || fail "train_gpt $*: no '$pattern' in: $(cat "$work/err")"
    grep -q "step" "$work/out" && fail "train_gpt $* trained: $(cat "$work/out")"
    return 0
}
# close A B N [NAME]: loss logs A and B (--loss-log: "step S loss L norm G",
# hexadecimal floats) hold N rows of the same steps, A's losses and norms
# within 1e-5 relative of B's; with NAME, prints the largest difference
close() {
    python3 - "$@" <<'PY' || fail "$1 and $2 differ (above)"
import sys
a, b = [[l.split() for l in open(f) if l.strip()] for f in sys.argv[1:3]]
assert len(a) == len(b) == int(sys.argv[3]), (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    assert x[:2] == y[:2] and x[2] == "loss" and x[4] == "norm", (x, y)
    for i in (3, 5):
        u, v = float.fromhex(x[i]), float.fromhex(y[i])
        assert abs(u - v) <= 1e-5 * abs(v), (x[:2], x[i - 1], u, v)
        worst = max(worst, abs(u - v) / abs(v))
if len(sys.argv) > 4:
    print(f"{sys.argv[4]}: max relative difference {worst:.3g}")
PY
}
# resumed ONE LOG N [LOG N]...: each LOG (--loss-log) holds N rows, each
# at a step of ONE (a run never stopped, from step 1) with the same step
# number and its loss and norm within 1e-5 relative of ONE's at that step
resumed() {
    python3 - "$@" <<'PY' || fail "resharded runs differ (above)"
import sys
one = [l.split() for l in open(sys.argv[1]) if l.strip()]
logs = [[l.split() for l in open(f) if l.strip()] for f in sys.argv[2::2]]
want = [int(n) for n in sys.argv[3::2]]
assert [len(a) for a in logs] == want, ([len(a) for a in logs], want)
for x in [x for a in logs for x in a]:
    y = one[int(x[1]) - 1]
    assert x[:2] == y[:2], (x, y)
    for i in (3, 5):
        u, v = float.fromhex(x[i]), float.fromhex(y[i])
        assert abs(u - v) <= 1e-5 * abs(v), (x[:2], x[i - 1], u, v)
PY
}
# same_losses A B N: the losses train_gpt printed ("step S loss L", 6
# decimals) in A and B agree to the printed decimals (2e-6) over N steps
same_losses() {
    paste <(grep -o 'step.*loss [0-9.]*' "$1") <(grep -o 'step.*loss [0-9.]*' "$2") |
        awk -v want="$3" '{ d = $4 - $8; if (d < 0) d = -d; if ($2 != $6 || d > 2e-6) bad = 1; n++ }
             END { exit bad || n != want }'
}
# kept DIR KIND N: --offload-keep left N store files DIR/msrun-KIND-rank*.bin,
# each 0600; then empties DIR
kept() {
    local f files=("$1/msrun-$2-rank"*.bin)
    [[ ${#files[@]} -eq $3 ]] || fail "--offload-keep left ${#files[@]} files, want $3"
    for f in "${files[@]}"; do
        [[ $(stat -c %a "$f") == 600 ]] || fail "$f has mode $(stat -c %a "$f")"
    done
    rm -f "$1"/*
}
# scribble DIR KIND WHAT K ARGS...: train_gpt ARGS runs in the background
# until its store file DIR/msrun-KIND-rank0-*.bin appears, then 4 KiB of
# random bytes go over block K of it until the run stops (30 s at most):
# the run must exit 1 naming "offload: WHAT K of FILE (bytes ...) changed
# underneath" and leave DIR empty; its output in $work/out and $work/err
scribble() {
    local dir=$1 kind=$2 what=$3 k=$4 pid f="" end rc=0
    shift 4
    "$MSRUN_BUILD/bin/train_gpt" "$@" >"$work/out" 2>"$work/err" &
    pid=$!
    for _ in $(seq 1 2000); do
        f=$(compgen -G "$dir/msrun-$kind-rank0-*.bin" | head -1) && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.01
    done
    [[ -n "$f" ]] || { kill $pid 2>/dev/null; fail "no $kind file appeared: $(cat "$work/err")"; }
    end=$((SECONDS + 30))
    while kill -0 $pid 2>/dev/null && [[ $SECONDS -lt $end ]]; do
        head -c 4096 /dev/urandom | dd of="$f" bs=4096 seek="$k" conv=notrunc,nocreat 2>/dev/null ||
            true
    done
    if kill -0 $pid 2>/dev/null; then
        kill $pid
        fail "a run whose $what $k was changed underneath went on for 30 s"
    fi
    wait $pid || rc=$?
    [[ $rc -eq 1 ]] || fail "$what $k changed underneath: exit $rc, want 1: $(tail -3 "$work/err")"
    grep -q "offload: $what $k of $f (bytes $((k * 4096))..$(((k + 1) * 4096))) changed underneath" \
        "$work/err" || fail "$what $k changed underneath: $(tail -3 "$work/err")"
    [[ -z "$(ls -A "$dir")" ]] || fail "the failed run left files: $(ls "$dir")"
}

# pieces_end FILE: the byte of a train_gpt state file (libmsrun's 48-byte
# header, then the payload: docs/checkpoint.md) where its pieces end and
# its chunk table begins
pieces_end() {
    python3 - "$1" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
assert b[48:56] == b"MSRTRN04", b[48:56]
hl, = struct.unpack_from("<I", b, 48 + 12)
n, = struct.unpack_from("<I", b, 48 + 68)
print(48 + hl + 12 * sum(struct.unpack_from("<I", b, 48 + hl - 16 * (n - k) + 8)[0]
                         for k in range(n)))
PY
}
