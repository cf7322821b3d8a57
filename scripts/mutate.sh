#!/usr/bin/env bash
# A mutation pass: one deliberate bug at a time, the tests that should notice
# it run against each, and the survivors (bugs no test noticed) reported.
#
# Each mutation in the list at the bottom names a file, an exact snippet of
# it (which must occur exactly once), its replacement, and a ctest regex
# of the tests that should catch it. For each: the snippet is replaced, the
# build is brought up to date (incremental: only what the file feeds), the
# tests run with a timeout, and the file is put back as it was, also when
# the build or a test fails or the pass is interrupted. A mutation whose
# snippet is not found exactly once is STALE: an error, not a survivor, so
# the list cannot quietly go out of date as the code changes (the CTest test
# mutate_list runs `--check` in every build). Mutations marked `equivalent`
# cannot change behaviour (the reason is given); they are listed but not run
# or counted.
#
# Usage: scripts/mutate.sh [--list] [--check] [--build DIR] [--only REGEX]
#                          [--timeout S] [--no-baseline] [--goal PCT]
#   --list         print the mutations and exit
#   --check        only check that every snippet occurs exactly once
#   --build DIR    the build directory (default: build, configured already)
#   --only REGEX   run only the mutations whose name matches (grep -E)
#   --timeout S    ctest's timeout per test (default 240)
#   --no-baseline  skip the first run of every named test without mutation
#   --goal PCT     exit 1 when fewer are caught (default 90)
#
# The working tree's files are restored byte for byte from a copy taken
# before each mutation (uncommitted edits survive). At the end the build is
# brought back up to date with the unmutated sources. Not run by CI: the
# whole pass takes about 8-11 minutes on 2 cores (467 s for 46 mutations
# when measured); one mutation takes from a few seconds (unit tests) to
# about two minutes (a mutant that hangs a test until its limit).
#
# Exit status: 0 when nothing is stale, every mutant built, and at least
# the goal's share was caught; 1 otherwise; 2 on bad usage.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

build=build
only=
timeout=240
baseline=1
goal=90
mode=run
while [ $# -gt 0 ]; do
    case $1 in
    --list) mode=list ;;
    --check) mode=check ;;
    --build) build=$2; shift ;;
    --build=*) build=${1#*=} ;;
    --only) only=$2; shift ;;
    --only=*) only=${1#*=} ;;
    --timeout) timeout=$2; shift ;;
    --timeout=*) timeout=${1#*=} ;;
    --no-baseline) baseline=0 ;;
    --goal) goal=$2; shift ;;
    --goal=*) goal=${1#*=} ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "mutate.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done

LIST=$(mktemp)
WORK=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$LIST" "$WORK"; }' EXIT
# The list: everything after the __MUTATIONS__ line of this script.
sed -n '/^__MUTATIONS__$/,/^__END__$/p' "$0" | sed '1d;$d' >"$LIST"

# mut CMD [ARGS]: the list's parser (python3): list, check, apply N, field N KEY.
mut() {
    python3 - "$LIST" "$ROOT" "$@" <<'PY'
import sys, os
path, root, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
muts, cur, section = [], None, None
for line in open(path).read().split("\n"):
    if section in ("orig", "repl"):
        if line == "===" and section == "orig":
            section = "repl"
            continue
        if line == ">>>":
            section = None
            continue
        cur[section].append(line)
        continue
    if line.startswith("@ "):
        cur = {"name": line[2:].strip(), "file": "", "test": "", "build": "",
               "equivalent": "", "orig": [], "repl": []}
        muts.append(cur)
    elif line == "<<<":
        section = "orig"
    elif line.strip() == "" or line.startswith("#"):
        continue
    elif ":" in line and cur is not None:
        k, v = line.split(":", 1)
        cur[k.strip()] = v.strip()
    else:
        sys.exit("mutate.sh: cannot parse list line: " + line)
for m in muts:
    m["orig"] = "\n".join(m["orig"])
    m["repl"] = "\n".join(m["repl"])
    if not m["file"] or not m["orig"] or (not m["test"] and not m["equivalent"]):
        sys.exit("mutate.sh: mutation %s lacks file, snippet or test" % m["name"])

def count(m):
    try:
        return open(os.path.join(root, m["file"])).read().count(m["orig"])
    except OSError:
        return -1

if cmd == "list":
    for i, m in enumerate(muts):
        kind = "equivalent" if m["equivalent"] else "run"
        print("\t".join([str(i), m["name"], m["file"], m["test"] or "-", kind]))
elif cmd == "check":
    bad = 0
    for m in muts:
        n = count(m)
        if n != 1:
            bad += 1
            print("STALE %s: its snippet occurs %d times in %s" % (m["name"], max(n, 0), m["file"]))
    names = [m["name"] for m in muts]
    for n in set(names):
        if names.count(n) > 1:
            bad += 1
            print("DUPLICATE name %s" % n)
    print("%d mutations, %d stale or duplicate" % (len(muts), bad))
    sys.exit(1 if bad else 0)
elif cmd == "field":
    print(muts[int(args[0])][args[1]])
elif cmd == "apply":
    m = muts[int(args[0])]
    p = os.path.join(root, m["file"])
    text = open(p).read()
    if text.count(m["orig"]) != 1:
        sys.exit(3)
    open(p, "w").write(text.replace(m["orig"], m["repl"]))
PY
}

if [ "$mode" = list ]; then
    mut list | awk -F'\t' '{printf "%-3s %-44s %-28s %-10s %s\n", $1, $2, $3, $5, $4}'
    exit $?
fi
if [ "$mode" = check ]; then
    mut check
    exit $?
fi

[ -f "$build/CMakeCache.txt" ] || {
    echo "mutate.sh: $build is not a configured build directory (cmake -B $build first)" >&2
    exit 2
}
command -v python3 >/dev/null || { echo "mutate.sh: needs python3" >&2; exit 2; }

# The file being mutated and its saved copy; restored on any exit.
CUR_FILE=
restore() {
    if [ -n "$CUR_FILE" ]; then
        # a plain copy (new mtime), so the next build recompiles it
        cat "$WORK/saved" >"$ROOT/$CUR_FILE"
        CUR_FILE=
    fi
}
on_exit() {
    restore
    rm -rf "$LIST" "$WORK"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { on_exit; }' EXIT
trap 'echo "mutate.sh: interrupted: restoring the file" >&2; exit 130' INT TERM

jobs=$(nproc)
build_all() { # incremental: only what the changed file feeds is redone
    cmake --build "$build" -j"$jobs" >"$WORK/build.log" 2>&1
}
run_tests() { # $1: regex; the ctest status
    (cd "$build" && ctest -R "$1" --timeout "$timeout" --output-on-failure) >"$WORK/test.log" 2>&1
}

mapfile -t rows < <(mut list)
[ ${#rows[@]} -gt 0 ] || { echo "mutate.sh: the list is empty" >&2; exit 1; }

echo "== stale check"
mut check || { echo "mutate.sh: fix the stale mutations above first" >&2; exit 1; }

start=$SECONDS
echo "== build"
build_all || { tail -n 30 "$WORK/build.log"; echo "mutate.sh: the unmutated build fails" >&2; exit 1; }

if [ $baseline = 1 ]; then
    regexes=()
    for row in "${rows[@]}"; do
        IFS=$'\t' read -r i name file test kind <<<"$row"
        [ "$kind" = run ] || continue
        [ -z "$only" ] || grep -qE -- "$only" <<<"$name" || continue
        regexes+=("$test")
    done
    all=$(printf '%s\n' "${regexes[@]}" | sort -u | paste -sd'|')
    echo "== baseline: the named tests without mutation ($all)"
    if ! run_tests "$all"; then
        grep -E "tests passed|Failed|\*\*\*" "$WORK/test.log" | tail -n 20
        echo "mutate.sh: tests fail without any mutation: nothing to measure" >&2
        exit 1
    fi
fi

results=()
caught=0 survived=0 errors=0 equivalent=0
for row in "${rows[@]}"; do
    IFS=$'\t' read -r i name file test kind <<<"$row"
    [ -z "$only" ] || grep -qE -- "$only" <<<"$name" || continue
    if [ "$kind" = equivalent ]; then
        equivalent=$((equivalent + 1))
        results+=("$name|$file|EQUIVALENT|-|$(mut field "$i" equivalent)")
        continue
    fi
    t0=$SECONDS
    cp "$ROOT/$file" "$WORK/saved"
    CUR_FILE=$file
    mut apply "$i"
    rc=$?
    if [ $rc = 3 ]; then
        CUR_FILE=
        errors=$((errors + 1))
        results+=("$name|$file|STALE|0|snippet not found exactly once")
        printf '%-44s STALE\n' "$name"
        continue
    elif [ $rc != 0 ]; then
        restore
        errors=$((errors + 1))
        results+=("$name|$file|ERROR|0|could not apply")
        continue
    fi
    if ! build_all; then
        restore
        errors=$((errors + 1))
        results+=("$name|$file|NO-BUILD|$((SECONDS - t0))|$(grep -m1 'error' "$WORK/build.log")")
        printf '%-44s NO-BUILD\n' "$name"
        continue
    fi
    if run_tests "$test"; then
        verdict=SURVIVED
        survived=$((survived + 1))
        why="no test of '$test' failed"
    else
        verdict=caught
        caught=$((caught + 1))
        why=$(grep -oE '^[[:space:]]*[0-9]+ - [^ ]+' "$WORK/test.log" | awk '{print $3}' |
            paste -sd' ')
        why="failed: ${why:-?}"
    fi
    restore
    results+=("$name|$file|$verdict|$((SECONDS - t0))|$why")
    printf '%-44s %-9s %4d s  %s\n' "$name" "$verdict" $((SECONDS - t0)) "$why"
done

echo "== rebuilding without mutations"
build_all || echo "mutate.sh: the final rebuild failed: see $build" >&2

echo
echo "| mutation | file | result | seconds | notes |"
echo "|---|---|---|---|---|"
for r in "${results[@]}"; do
    IFS='|' read -r a b c d e <<<"$r"
    echo "| $a | $b | $c | $d | $e |"
done
total=$((caught + survived))
pct=0
[ $total = 0 ] || pct=$((100 * caught / total))
echo
echo "caught $caught of $total ($pct%); $equivalent equivalent (not counted); $errors stale or not built; $((SECONDS - start)) s"
[ $errors = 0 ] && [ $pct -ge "$goal" ] || exit 1
exit 0

# The mutations. Each block:
#   @ name
#   file: path from the repository root
#   test: ctest regex of the tests that must catch it
#   equivalent: why it cannot change behaviour (then it is not run)
#   <<<
#   the exact original lines (must occur exactly once)
#   ===
#   the replacement lines
#   >>>
# The list is a here-document, so `bash -n` does not read it as commands.
: <<'__END__'
__MUTATIONS__
# ---- observing a job (docs/observe.md): the straggler detector, the metric line, the dashboard's token
@ straggler.upper_median
file: cluster/straggler.c
test: ^test_progress$
<<<
    double m = v[(k - 1) / 2];
===
    double m = v[k / 2];
>>>

@ straggler.factor_ignored
file: cluster/straggler.c
test: ^test_progress$
<<<
        slow[i] = factor > 1 && median >= MSR_STRAGGLER_MIN_SECONDS && means[i] >= factor * median;
===
        slow[i] = factor > 0 && median >= MSR_STRAGGLER_MIN_SECONDS && means[i] > median;
>>>

@ straggler.no_floor
file: cluster/straggler.c
test: ^test_progress$
<<<
        slow[i] = factor > 1 && median >= MSR_STRAGGLER_MIN_SECONDS && means[i] >= factor * median;
===
        slow[i] = factor > 1 && median > 0 && means[i] >= factor * median;
>>>

@ members.negative_node_rank
file: cluster/members.c
test: ^test_coord$
<<<
    if (req->node_rank < -1) { /* -1 alone means "assign by arrival" */
===
    if (req->node_rank < -1000000000) {
>>>

@ rpc.nul_key_cut
file: rendezvous/rpc_msg.c
test: ^test_rpc$
<<<
            if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, n) != NULL)
===
            if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, n) == p + i + n)
>>>

@ progress.metric_line_repeated_name
file: rendezvous/progress.c
test: ^test_progress$
<<<
        for (size_t j = 0; j < m.n; j++)
            if (strlen(m.names[j]) == nlen && memcmp(m.names[j], tok, nlen) == 0)
                return 0;
===
>>>

@ observe.straggler_named_again
file: cluster/observe.c
test: ^it_observe$
<<<
        if (r->straggler)
            continue;
===
        if (0)
            continue;
>>>

@ http.no_token_check
file: cluster/http_routes.c
test: ^it_observe$
<<<
    if (!msr_http_authorized(h, req)) {
===
    if (0 && !msr_http_authorized(h, req)) {
>>>

# ---- the store core (rendezvous/store_*.c, the coordinator's store): every call's generation guard
@ coord.set.no_generation_check
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "set", req->key) ||
===
    if (!check_key(c, call, "set", req->key) ||
>>>

@ coord.get.no_generation_check
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "get", req->key))
===
    if (!check_key(c, call, "get", req->key))
>>>

@ coord.add.no_generation_check
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "add", req->key))
===
    if (!check_key(c, call, "add", req->key))
>>>

@ coord.compare_set.no_generation_check
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) ||
        !check_key(c, call, "compare-set", req->key) ||
===
    if (!check_key(c, call, "compare-set", req->key) ||
>>>

@ coord.delete.no_generation_check
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "delete", req->key) ||
===
    if (!check_key(c, call, "delete", req->key) ||
>>>

@ coord.barrier.no_generation_check
file: rendezvous/store_gather.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "barrier", req->name))
===
    if (!check_key(c, call, "barrier", req->name))
>>>

@ coord.allgather.no_generation_check
file: rendezvous/store_gather.c
test: ^test_coord$
<<<
    if (!check_generation(c, call, req->generation) || !check_key(c, call, "allgather", req->name))
===
    if (!check_key(c, call, "allgather", req->name))
>>>

@ coord.generation.older_accepted
file: rendezvous/store_core_impl.h
test: ^test_coord$
<<<
    if (generation == current)
        return 1;
===
    if (generation <= current)
        return 1;
>>>

# ---- compare-set matching
@ coord.compare_set.prefix_matches
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
                    : (v != NULL && v->len == req->expected.len &&
                       (v->len == 0 || memcmp(v->data, req->expected.data, v->len) == 0));
===
                    : (v != NULL && v->len >= req->expected.len &&
                       (req->expected.len == 0 || memcmp(v->data, req->expected.data, req->expected.len) == 0));
>>>

@ coord.compare_set.empty_matches_absent
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
                    : (v != NULL && v->len == req->expected.len &&
                       (v->len == 0 || memcmp(v->data, req->expected.data, v->len) == 0));
===
                    : (v == NULL ? req->expected.len == 0 : v->len == req->expected.len &&
                       (v->len == 0 || memcmp(v->data, req->expected.data, v->len) == 0));
>>>

@ coord.compare_set.no_empty_shortcut
file: rendezvous/store_kv.c
equivalent: memcmp of 0 bytes is 0 anyway; the shortcut only keeps a NULL data pointer of an empty value away from memcmp
<<<
                       (v->len == 0 || memcmp(v->data, req->expected.data, v->len) == 0));
===
                       (memcmp(v->data, req->expected.data, v->len) == 0));
>>>

# ---- a new generation starts from nothing
@ coord.reset.keeps_barriers
file: rendezvous/store_core.c
test: ^test_coord$
<<<
    msr_map_cleanup(&c->barriers, barrier_free);
===
>>>

@ coord.reset.keeps_gathers
file: rendezvous/store_core.c
test: ^test_coord$
<<<
    msr_map_cleanup(&c->gathers, gather_free);
===
>>>

@ coord.reset.keeps_keys
file: rendezvous/store_core.c
test: ^test_coord$
<<<
    msr_map_cleanup(&c->store, kv_free);
    msr_map_cleanup(&c->getwait, getwait_free);
===
    msr_map_cleanup(&c->getwait, getwait_free);
>>>

# ---- add's limits, barriers and allgathers
@ coord.add.overflow_off_by_one
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    if ((req->delta > 0 && value > INT64_MAX - req->delta) ||
===
    if ((req->delta > 0 && value >= INT64_MAX - req->delta) ||
>>>

@ coord.add.underflow_off_by_one
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
        (req->delta < 0 && value < INT64_MIN - req->delta)) {
===
        (req->delta < 0 && value <= INT64_MIN - req->delta)) {
>>>

@ coord.barrier.released_one_early
file: rendezvous/store_gather.c
test: ^test_coord$
<<<
    if (b->arrived < b->count)
===
    if (b->arrived + 1 < b->count)
>>>

@ coord.barrier.weight_check_off_by_one
file: rendezvous/store_gather.c
test: ^test_coord$
<<<
    if (weight <= room)
===
    if (weight < room)
>>>

@ coord.allgather.duplicate_in_request
file: rendezvous/store_gather.c
test: ^test_coord$
<<<
        if (ge->present)
            return MSR_ERR_INVALID_ARG;
===
>>>

@ coord.allgather.completes_one_early
file: rendezvous/store_gather.c
test: ^test_coord$
<<<
    if (st == MSR_OK && g->received == g->count) {
===
    if (st == MSR_OK && g->received + 1 >= g->count) {
>>>

@ coord.set.waiters_not_woken
file: rendezvous/store_kv.c
test: ^test_coord$
<<<
    wake_getters(c, key, v);
===
    (void)wake_getters;
>>>

# ---- the node's store proxy (msrun/proxy.c, proxy_up.c)
@ proxy.barrier.weight_lost
file: msrun/proxy_up.c
test: ^(it_store|it_multinode)$
<<<
        r.weight = g->arrived;
===
        r.weight = 1;
>>>

@ proxy.group.capacity_off_by_one
file: msrun/proxy_up.c
test: ^(it_store|it_multinode)$
<<<
    if (weight > g->local_count - g->arrived || g->ncalls == g->local_count) {
===
    if (weight >= g->local_count - g->arrived || g->ncalls == g->local_count) {
>>>

@ proxy.allgather.last_entry_dropped
file: msrun/proxy_up.c
test: ^(it_store|it_multinode)$
<<<
            Msr__AllgatherRequest *q = (Msr__AllgatherRequest *)g->reqs[i];
            for (size_t k = 0; k < q->n_entries && n < g->arrived; k++)
===
            Msr__AllgatherRequest *q = (Msr__AllgatherRequest *)g->reqs[i];
            for (size_t k = 0; k + 1 < q->n_entries && n < g->arrived; k++)
>>>

@ proxy.barrier.not_grouped_for_two
file: msrun/proxy.c
test: ^(it_store|it_multinode)$
<<<
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->count >= r->local_count) {
===
        if (r->local_count > 2 && msr_rpc_key_valid(r->name) && r->count >= r->local_count) {
>>>

@ proxy.barrier.grouping_removed
file: msrun/proxy.c
test: ^(it_store|it_multinode)$
<<<
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->count >= r->local_count) {
===
        if (0 && r->local_count > 1 && msr_rpc_key_valid(r->name) && r->count >= r->local_count) {
>>>

@ proxy.group.sent_when_full
file: msrun/proxy_up.c
equivalent: arrived never exceeds local_count (a call that would is refused above), so == and >= agree
<<<
    if (g->arrived == g->local_count)
        group_send(p, g);
===
    if (g->arrived >= g->local_count)
        group_send(p, g);
>>>

# ---- checkpoints (rendezvous/checkpoint.c and checkpoint_read.c)
@ ckpt.agree.skips_last_rank
file: rendezvous/checkpoint_read.c
test: ^it_ckpt$
<<<
        for (int r = 1; r < world && everywhere; r++) {
===
        for (int r = 1; r < world - 1 && everywhere; r++) {
>>>

@ ckpt.agree.skips_rank_1
file: rendezvous/checkpoint_read.c
test: ^it_ckpt$
<<<
        for (int r = 1; r < world && everywhere; r++) {
===
        for (int r = 2; r < world && everywhere; r++) {
>>>

@ ckpt.agree.newest_only
file: rendezvous/checkpoint_read.c
test: ^it_ckpt$
<<<
    for (int k = 0; k < CKPT_OFFER && agreed < 0 && st == MSR_OK; k++) {
===
    for (int k = 0; k < 1 && agreed < 0 && st == MSR_OK; k++) {
>>>

@ ckpt.have_step.commit_ignored
file: rendezvous/checkpoint_read.c
test: ^it_ckpt$
<<<
    if (access(path, F_OK) != 0)
        return 0;
    snprintf(path, sizeof path, "%s/rank-%d.bin", sd, msr_rank(ctx));
===
    snprintf(path, sizeof path, "%s/rank-%d.bin", sd, msr_rank(ctx));
>>>

@ ckpt.reader.reopen_keeps_crc
file: rendezvous/checkpoint_reader.c
test: ^test_ckpt_prefault$
<<<
    r->crc_at = 0;
    r->crc = 0;
===
    r->crc = 0;
>>>

@ ckpt.reader.reopen_keeps_stage_at
file: rendezvous/checkpoint_reader.c
test: ^test_ckpt_prefault$
<<<
    r->stage_at = 0;
    r->stage_len = 0;
    r->next = -1;
    if (r->stage != NULL) /* the same staging buffers, already faulted in */
===
    r->next = -1;
    if (r->stage != NULL) /* the same staging buffers, already faulted in */
>>>

@ ckpt.reader.bytes_ahead_uncounted
file: rendezvous/checkpoint_reader.c
test: ^test_ckpt_prefault$
<<<
        if (got > 0) /* read, whether taken or dropped later */
            atomic_fetch_add(&r->disk_bytes, (uint64_t)got);
===
        if (got > 0) /* read, whether taken or dropped later */
            (void)0;
>>>

@ ckpt.reader.bytes_asked_not_read
file: rendezvous/checkpoint_reader.c
test: ^test_ckpt_prefault$
<<<
        got = pread_full(r->dfd, r->stage, (size_t)(e - a), a);
        if (got > 0)
            atomic_fetch_add(&r->disk_bytes, (uint64_t)got);
===
        got = pread_full(r->dfd, r->stage, (size_t)(e - a), a);
        if (got > 0)
            atomic_fetch_add(&r->disk_bytes, (uint64_t)want);
>>>

@ ckpt.reader.whole_crc_ignored
file: rendezvous/checkpoint_reader.c
test: ^it_ckpt$
<<<
    if (r->crc != r->h.crc)
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s does not match its CRC", r->path);
===
    if (0)
        return msr_err(MSR_ERR_CORRUPT, "checkpoint: %s does not match its CRC", r->path);
>>>

@ crc32.fold_lane_constant
file: base/crc32.c
test: ^test_crc32$
<<<
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
===
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd5);
>>>

# ---- one CRC pass on load (issue 41: the reader's and the restore's CRCs combined)
@ ckpt.reader.combine_length_off
file: rendezvous/checkpoint_reader.c
test: ^it_ckpt$
<<<
        r->crc = msr_crc32_combine(r->crc, *chunk_crc, len);
===
        r->crc = msr_crc32_combine(r->crc, *chunk_crc, len - 1);
>>>

@ train.restore.read_crc_ignored
file: parallel/train_ckpt_read.c
test: ^test_parallel_ckpt_read_crc$
<<<
        *crc = msr_crc32_combine(*crc, chunk, n);
===
        *crc = msr_crc32(*crc, b + at, n);
>>>

# ---- the collectives (comm/)
@ coll.reduce_chain_leaf_sends_partial
file: comm/ucx/coll_rooted.c
test: ^comm_collectives_np(3|8)$
<<<
    return leaf ? ucx_at(a->sendbuf, off, r->es) : ucx_at(reduce_chain_partial(r), off, r->es);
===
    return leaf && !leaf ? ucx_at(a->sendbuf, off, r->es) : ucx_at(reduce_chain_partial(r), off, r->es);
>>>

@ coll.pipe_sends_before_data
file: comm/ucx/coll_ring.c
test: ^comm_collectives_np(3|8)$
<<<
        while (p->sends_posted < f->sends && p->sends_posted < f->first_sends + p->recvs_done &&
===
        while (p->sends_posted < f->sends && p->sends_posted < f->first_sends + p->recvs_posted &&
>>>

@ comm.shm_slots.reverse_fold
file: comm/ucx/shm_slots.c
test: ^comm_determinism_np4$
<<<
        fold_n(a, a->recvbuf, input_of(s, r, 0, k, in) + off, input_of(s, r, 1, k, in) + off,
               a->count);
        for (int j = 2; j < r->n; j++)
===
        fold_n(a, a->recvbuf, input_of(s, r, r->n - 1, k, in) + off,
               input_of(s, r, r->n - 2, k, in) + off, a->count);
        for (int j = r->n - 3; j >= 0; j--)
>>>

@ comm.shm_tiles.reverse_fold
file: comm/ucx/shm_tiles.c
test: ^comm_determinism_np4$
<<<
    msr_reduce(a->op, a->dtype, dst, src[0], src[1], count);
    for (int j = 2; j < n; j++)
===
    msr_reduce(a->op, a->dtype, dst, src[n - 1], src[n - 2], count);
    for (int j = n - 3; j >= 0; j--)
>>>

@ comm.direct.reverse_fold
file: comm/ucx/coll_rounds.c
test: ^comm_determinism_np4$
<<<
    const void *x0 = r->me == 0 ? own : slots;
    const void *x1 = r->me == 1 ? own : slots + stride;
    msr_reduce(a->op, a->dtype, dst, x0, x1, count);
    for (int j = 2; j < r->n; j++)
===
    int l = r->n - 1;
    const void *x0 = r->me == l ? own : slots + (size_t)l * stride;
    const void *x1 = r->me == l - 1 ? own : slots + (size_t)(l - 1) * stride;
    msr_reduce(a->op, a->dtype, dst, x0, x1, count);
    for (int j = l - 2; j >= 0; j--)
>>>

@ comm.avg.not_divided_for_two
file: comm/reduce.c
test: ^(test_comm_reduce|comm_collectives_np3)$
<<<
    if (op != MSR_OP_AVG || n <= 1)
===
    if (op != MSR_OP_AVG || n <= 2)
>>>

# ---- data parallel (parallel/)
@ train.gradient_not_divided_by_dp
file: parallel/train.c
test: ^test_parallel_dp_np(2|4)$
<<<
    float dloss = (float)(1.0 / ((double)G * (double)T));
===
    float dloss = (float)(1.0 / ((double)(G / (uint64_t)c->dp) * (double)T));
>>>

@ dp.gradients_averaged_twice
file: parallel/dp_hooks.c
test: ^test_parallel_dp_np(2|4)$
<<<
                                 MSR_DTYPE_F32, MSR_OP_SUM, &B->req[0]);
    } else if ((st = msr_dp_sync(dp)) != MSR_OK) { /* the packing's copies */
===
                                 MSR_DTYPE_F32, MSR_OP_AVG, &B->req[0]);
    } else if ((st = msr_dp_sync(dp)) != MSR_OK) { /* the packing's copies */
>>>

@ device.zero_bytes_passed_on
file: comm/device.c
test: ^test_device(_fake)?$
<<<
    if (bytes == 0)
        return MSR_OK;
    if (dst == NULL || src == NULL)
===
    if (dst == NULL || src == NULL)
>>>

@ mp.device_memory_accepted
file: parallel/mp.c
test: ^test_parallel_mp_device$
<<<
    if (!msr_device_is_host(dev)) {
===
    if (0 && !msr_device_is_host(dev)) {
>>>

@ mp.device_named_ignored
file: parallel/mp.c
test: ^test_parallel_mp_device$
<<<
    const msr_device_t *dev = cfg->device != NULL ? cfg->device : msr_device_cpu();
===
    const msr_device_t *dev = msr_device_cpu();
>>>

@ device.cuda_copy_on_default_stream
file: comm/device_cuda.c
test: ^test_device_fake$
<<<
               : api_of(dev)->copy_async(api_of(dev), dst, src, bytes, kinds[kind], raw(stream));
===
               : api_of(dev)->copy_async(api_of(dev), dst, src, bytes, kinds[kind], (raw(stream), NULL));
>>>

@ dp.norm.replicated_counted_on_every_rank
file: parallel/dp_step.c
test: ^test_parallel_dp_np(2|4)$
<<<
        if (u->own_n == 0 || (u->replicated && dp->rank != 0))
===
        if (u->own_n == 0)
>>>

@ dp.loss.local_only
file: parallel/dp_step.c
test: ^test_parallel_dp_np(2|4)$
<<<
    *loss_sum_p = red[0];
===
    *loss_sum_p = loss_local;
>>>

# ---- AdamW (model/adamw.c)
@ adamw.eps_inside_sqrt
file: model/adamw.c
test: ^test_parallel_adamw$
<<<
        float denom = sqrtf(v[i]) / k->bc2_sqrt + k->eps;
===
        float denom = sqrtf(v[i] / (k->bc2_sqrt * k->bc2_sqrt) + k->eps);
>>>

@ adamw.bias_correction_1_inverted
file: model/adamw.c
test: ^test_parallel_adamw$
<<<
    opt->step_size = (float)((double)lr / bc1);
===
    opt->step_size = (float)((double)lr * bc1);
>>>

@ adamw.decay_on_every_tensor
file: model/adamw.c
test: ^test_parallel_adamw$
<<<
        k.keep = sp->decay ? opt->decay_keep : 1.0f;
===
        k.keep = opt->decay_keep;
>>>

@ adamw.clip_at_exactly_one
file: model/adamw.c
equivalent: at coef == 1.0 both branches give 1.0f
<<<
    return coef < 1.0 ? (float)coef : 1.0f;
===
    return coef <= 1.0 ? (float)coef : 1.0f;
>>>

@ adamw.avx2_wrong_moment_constant
file: model/adamw.c
test: ^test_parallel_adamw$
<<<
    const __m256 one_b2 = _mm256_set1_ps(k->one_b2), bc2 = _mm256_set1_ps(k->bc2_sqrt);
===
    const __m256 one_b2 = _mm256_set1_ps(k->one_b1), bc2 = _mm256_set1_ps(k->bc2_sqrt);
>>>

@ adamw.sumsq_tail_dropped
file: model/adamw.c
test: ^test_parallel_adamw$
<<<
    for (; i < n; i++)
        lanes[(at + i) % MSR_SUMSQ_LANES] += (double)x[i] * (double)x[i];
}
===
    for (; i < n; i++)
        lanes[(at + i) % MSR_SUMSQ_LANES] += 0.0;
}
>>>

@ adamw.sumsq_avx2_lanes_swapped
file: model/adamw.c
test: ^test_parallel_adamw$
<<<
    _mm256_storeu_pd(lanes, lo);
    _mm256_storeu_pd(lanes + 4, hi);
===
    _mm256_storeu_pd(lanes, hi);
    _mm256_storeu_pd(lanes + 4, lo);
>>>

# ---- the layers' kernels and the bf16 products (model/layers_impl.h, model/layers_bf16.c)
@ layers.backward_set_adds
file: model/layers.c
test: ^test_parallel_layers_bf16_set$
<<<
    msr_linear_backward(pr, 0.0f, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
===
    msr_linear_backward(pr, 1.0f, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
>>>

@ layers.ring_forward_mask_lost
file: model/layers_impl.h
test: ^test_parallel_mp_cp$
<<<
                row[j] = kpos[j] <= qpos[i] ? row[j] : -INFINITY;
===
                row[j] = kpos[j] <= qpos[i] ? row[j] : R(0);
>>>

@ layers.ring_backward_mask_lost
file: model/layers_impl.h
test: ^test_parallel_mp_cp$
<<<
                prow[j] = kpos[j] <= qpos[i] ? prow[j] : -INFINITY;
===
                prow[j] = kpos[j] <= qpos[i] ? prow[j] : R(0);
>>>

@ layers.attention_set_kv_adds
file: model/layers_impl.h
test: ^test_parallel_layers_bf16_set$
<<<
            real kv_beta = h % G == 0 ? beta : R(1); /* the group's later heads add */
===
            real kv_beta = R(1); /* the group's later heads add */
>>>

@ layers.gelu_set_not_zeroed
file: model/layers_bf16.c
test: ^test_parallel_layers_bf16_set$
<<<
        if (set)
            memset(dinp + i, 0, m * sizeof *dinp);
===
        if (set && i > 0)
            memset(dinp + i, 0, m * sizeof *dinp);
>>>

@ layers.bias_grad_block_once
file: model/layers_impl.h
test: ^test_parallel_layers$
<<<
                dbias[j0 + j] += d[j0 + j];
===
                dbias[j0 + j] += d[j];
>>>

@ layers.attention_dv_block_short
file: model/layers_impl.h
test: ^test_parallel_layers$
<<<
                GEMM(pr, CblasTrans, CblasNoTrans, m, HS, T - c0, R(1), a + at, T,
===
                GEMM(pr, CblasTrans, CblasNoTrans, m, HS, T - c0 - (c0 > 0), R(1), a + at, T,
>>>

@ products.block_handover_one_past
file: model/layers_bf16.c
test: ^test_parallel_attention_bf16$
<<<
    ready = ready && off <= p->ready_n && extent <= p->ready_n - off;
===
    ready = ready && off <= p->ready_n && extent <= p->ready_n - off + 1;
>>>

@ products.hold_one_past
file: model/layers_bf16.c
test: ^test_parallel_attention_bf16$
<<<
        if (off <= h->n && extent <= h->n - off)
===
        if (off <= h->n && extent <= h->n - off + 1)
>>>

@ products.hold_never_released
file: model/layers_bf16.c
test: ^test_parallel_attention_bf16$
<<<
        p->holds[slot].src = NULL;
===
        (void)p->holds[slot].src;
>>>

# ---- GELU (model/gelu.c)
@ gelu.exp_coefficient_off
file: model/gelu.c
test: ^test_parallel_gelu$
<<<
#define EXP_P2      8.3334519073e-3f
===
#define EXP_P2      8.33e-3f
>>>

@ gelu.exp_clamp_low
file: model/gelu.c
test: ^test_parallel_gelu$
<<<
    float c = x < EXP_HI ? x : EXP_HI;
===
    float c = x < 88.0f ? x : 88.0f;
>>>

@ gelu.vector_backward_wrong_constant
file: model/gelu_impl.h
test: ^test_parallel_gelu$
<<<
        vec du = GELU_S * (1.0f + GELU_3A * x * x);
===
        vec du = GELU_S * (1.0f + GELU_A * x * x);
>>>

@ gelu.softmax_sum_one_lane
file: model/gelu_impl.h
test: ^test_parallel_gelu$
<<<
            acc[k] = acc[k] + e;
===
            acc[0] = acc[0] + e;
>>>

@ gelu.softmax_fold_reversed
file: model/gelu.c
test: ^test_parallel_gelu$
<<<
    for (int l = 0; l < EXP_SUM_LANES; l++)
        sum += lane[l];
===
    for (int l = EXP_SUM_LANES - 1; l >= 0; l--)
        sum += lane[l];
>>>

@ gelu.softmax_tail_first_lost
file: model/gelu.c
test: ^test_parallel_gelu$
<<<
    for (size_t j = 0; j < n; j++)
        sum += tail[j];
===
    for (size_t j = 1; j < n; j++)
        sum += tail[j];
>>>

@ gelu.swiglu_vector_up_gradient
file: model/gelu_impl.h
test: ^test_parallel_gelu$
<<<
            du = du + d * a * s;
===
            du = du + d * u * s;
>>>

@ gelu.swiglu_scalar_sign
file: model/gelu.c
test: ^test_parallel_gelu$
<<<
        o[i] = a[i] / (1.0f + msr_gelu_exp(-a[i])) * u[i];
===
        o[i] = a[i] / (1.0f + msr_gelu_exp(a[i])) * u[i];
>>>

@ gelu.vector_exp_clamp_high
file: model/gelu_impl.h
test: ^test_parallel_gelu$
<<<
    vec c = PATH(select)(x < EXP_HI, x, SPLAT(EXP_HI));
===
    vec c = PATH(select)(x < 88.0f, x, SPLAT(88.0f));
>>>

@ gelu.vector_nan_not_kept
file: model/gelu_impl.h
equivalent: a NaN x makes the GELU's x / (1 + e) and its gradient NaN whatever exp gives
<<<
    return PATH(select)(x != x, x, e); /* a NaN comes back as itself */
===
    return e; /* a NaN comes back as itself */
>>>

# ---- the launcher (msrun/)
@ agent.stderr_tail.not_rotated
file: msrun/report.c
test: ^it_exit$
<<<
        int start = w->tail_count < MSR_TAIL_LINES ? 0 : w->tail_next;
===
        int start = 0;
>>>

@ node.interrupted.exit_code_off_by_one
file: msrun/node.c
test: ^(test_node|fuzz_node_corpus)$
<<<
        msr_node_finish(n, n->interrupted > 0 ? 128 + n->interrupted : n->exit_code, NULL);
===
        finish(n, n->interrupted > 0 ? 127 + n->interrupted : n->exit_code, NULL);
>>>

@ node.ps_replace.budget_off_by_one
file: msrun/node.c
test: ^test_node$
<<<
    if (n->replaced >= n->max_restarts) {
===
    if (n->replaced > n->max_restarts) {
>>>

@ node.ps_replace.incarnation_forgotten
file: msrun/node.c
test: ^test_node$
<<<
    w->incarnation = incarnation;
===
    w->incarnation = 0 * incarnation;
>>>

@ node.ps_replace.servers_replaced
file: msrun/node.c
test: ^test_node$
<<<
        n->worker_generation != n->generation || w->rank >= n->world_size - n->cfg.ps_servers ||
===
        n->worker_generation != n->generation ||
>>>

@ node.spawn.while_old_workers_run
file: msrun/node.c
test: ^(test_node|fuzz_node_corpus)$
<<<
        if (n->nrunning > 0 && n->worker_generation != n->generation)
===
        if (0 && n->nrunning > 0 && n->worker_generation != n->generation)
>>>

@ node.spawn_slice.never_pauses
file: msrun/node.c
test: ^(test_node_spawn|it_oversub)$
<<<
    return now >= began && now - began >= MSR_NODE_SPAWN_SLICE_MS * NS_PER_MS;
===
    return 0 && now >= began && now - began >= MSR_NODE_SPAWN_SLICE_MS * NS_PER_MS;
>>>

@ node.spawn_slice.resumed_from_the_first
file: msrun/node.c
test: ^(test_node_spawn|fuzz_node_corpus)$
<<<
    a->local = n->spawn_next;
===
    a->local = 0;
>>>

@ node.spawn_slice.not_cancelled_by_a_stop
file: msrun/node.c
test: ^(test_node_spawn|fuzz_node_corpus)$
<<<
    n->spawn_at = 0; /* a paused spawn is not resumed */
===
    /* a paused spawn is not resumed */
>>>

@ cpus.bind_core.overlapping_shares
file: msrun/cpus.c
test: ^(test_cpu_share|it_bind)$
<<<
            give_core(t, u->order[u->start[node] + used[node]++], &places[r]);
===
            give_core(t, u->order[u->start[node] + i], &places[r]);
>>>

@ cpus.bind_core.all_on_first_core
file: msrun/cpus.c
test: ^(test_cpu_share|it_bind)$
<<<
            give_core(t, u.order[r % u.total], &p[r]);
===
            give_core(t, u.order[0], &p[r]);
>>>

@ cpus.bind_core.straddles_numa_nodes
file: msrun/cpus.c
test: ^test_cpu_share$
<<<
    while (k > 1 && capacity(t, u, k) < nranks)
===
    while (k > 1 && capacity(t, u, k) < 0)
>>>

@ cpus.bind_core.gpu_ignored
file: msrun/cpus.c
test: ^test_cpu_share$
<<<
        if (n >= 0 && used[n] < u->count[n] / k) {
===
        if (0 && n >= 0 && used[n] < u->count[n] / k) {
>>>

@ cpus.bind_core.not_restricted_to_allowed
file: msrun/cpus.c
test: ^(test_cpu_share|it_bind)$
<<<
    CPU_AND(&threads, &t->cores[c].pus, &t->allowed);
===
    CPU_OR(&threads, &t->cores[c].pus, &t->cores[c].pus);
>>>

@ cpus.bind_numa.threads_not_shared
file: msrun/cpus.c
test: ^(test_cpu_share|it_bind)$
<<<
        int share = u->count[places[r].numa] / sharing[places[r].numa];
===
        int share = u->count[places[r].numa];
>>>

@ workers.omp_num_threads_not_cores
file: msrun/workers.c
test: ^it_bind$
<<<
                 e->places ? e->places[local_rank].cores : 1);
===
                 1);
>>>

@ cpus_hwloc.gpu_locality_lost
file: msrun/cpus_hwloc.c
test: ^it_bind$
<<<
        near[r] = at && at->cpuset ? numa_of(topo, at->cpuset) : -1;
===
        near[r] = at && at->cpuset ? -1 : -1;
>>>

@ cpus_hwloc.gpus_not_in_bus_order
file: msrun/cpus_hwloc.c
test: ^it_bind$
<<<
        for (; i > 0 && pci_before(o, gpus[i - 1]); i--)
===
        for (; 0 && pci_before(o, gpus[i - 1]); i--)
>>>

@ cpus_hwloc.visible_devices_ignored
file: msrun/cpus_hwloc.c
test: ^it_bind$
<<<
        hwloc_obj_t gpu = gpus[visible[r % nvisible]];
===
        hwloc_obj_t gpu = gpus[(r + 0 * visible[0]) % ngpus];
>>>

@ moe.tp_gate_grads_not_summed
file: model/moe_pass.c
test: ^test_parallel_train_gpt_moe$
<<<
    if (moe->tp_comm != NULL) {
        uint64_t a = msr_now_ns();
===
    if (moe->tp_comm != NULL && 0) {
        uint64_t a = msr_now_ns();
>>>

@ moe.router_dx_on_every_tp_rank
file: model/moe_pass.c
test: ^test_parallel_train_gpt_moe$
<<<
    if (moe->tp_rank == 0) {
        k->matmul_backward(moe->prod, dx, g->routerw, NULL, moe->dprobs, x, p->routerw, N, C, E);
===
    if (moe->tp_rank >= 0) {
        k->matmul_backward(moe->prod, dx, g->routerw, NULL, moe->dprobs, x, p->routerw, N, C, E);
>>>

@ moe.llama_gates_not_renormalised
file: model/moe_kernels.c
test: ^test_parallel_moe_llama$|^test_parallel_kernels$
<<<
        if (renorm)
            normalise_gates(gate + (size_t)t * K, K);
===
        if (renorm && 0)
            normalise_gates(gate + (size_t)t * K, K);
>>>

@ moe.llama_gates_backward_skipped
file: model/moe_kernels.c
test: ^test_parallel_moe_llama$|^test_parallel_kernels$
<<<
        if (renorm)
            gates_backward(dgate + t * K, gate + t * K, pr, choice + t * K, K);
===
        if (renorm && 0)
            gates_backward(dgate + t * K, gate + t * K, pr, choice + t * K, K);
>>>

@ moe.dropped_choice_gate_grad_kept
file: model/moe_kernels.c
test: ^test_parallel_moe$|^test_parallel_kernels$
<<<
            dgate[tj] = 0.0f;
===
            (void)dgate;
>>>

@ moe.cp_capacity_per_chunk
file: model/moe_pass.c
test: ^test_parallel_train_gpt_moe_cp$
<<<
                count[e] += count[e] < cap;
===
                count[e] += 0 * (count[e] < cap);
>>>

@ moe.cp_aux_probs_of_own_tokens
file: model/moe_pass.c
test: ^test_parallel_train_gpt_moe_cp$
<<<
    if (moe->cp_comm != NULL) {
        uint64_t a = msr_now_ns();
        msr_status_t st = msr_comm_allreduce(moe->cp_comm, MSR_IN_PLACE, P, (uint64_t)E,
===
    if (moe->cp_comm != NULL && 0) {
        uint64_t a = msr_now_ns();
        msr_status_t st = msr_comm_allreduce(moe->cp_comm, MSR_IN_PLACE, P, (uint64_t)E,
>>>

@ train.experts_not_summed_over_cp
file: parallel/train.c
test: ^test_parallel_train_gpt_moe_cp$
<<<
        reps *= mesh->cp;
===
        reps *= 1;
>>>

@ train.expert_norm_counted_by_every_cp_rank
file: parallel/train.c
test: ^test_parallel_train_gpt_moe_cp$
<<<
(tr->mesh == NULL || tr->mesh->cp_rank == 0);
===
(tr->mesh == NULL || tr->mesh->cp_rank >= 0);
>>>

@ mp.moe_recompute_counts_routing
file: parallel/mp_run.c
test: ^test_parallel_train$
<<<
        return block_forward(mp, m, l, p, la, x, 0);
===
        return block_forward(mp, m, l, p, la, x, 1);
>>>

@ mp.moe_aux_loss_of_last_stage_only
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_moe$
<<<
    *loss_p = (mp->pr == mp->pp - 1 ? mp->loss_sum : 0.0) + mp->aux_sum;
===
    *loss_p = mp->pr == mp->pp - 1 ? mp->loss_sum + mp->aux_sum : 0.0;
>>>

@ mp.tp_overlap_copy1_reduced_past_its_rows
file: parallel/mp_tp_copy.c
test: ^test_parallel_train_gpt_tpoverlap$
<<<
        h[i].projl += (size_t)i * Nl * C;
===
        h[i].projl += (size_t)i * N * C;
>>>

@ mp.tp_overlap_sp_gathers_ahead_out_of_order
file: parallel/mp_tp_copy.c
test: ^test_parallel_train_gpt_tpoverlap$
<<<
    const float *src[4] = {a[0].ln2, a[1].ln2, a[0].ln1, a[1].ln1};
===
    const float *src[4] = {a[0].ln2, a[0].ln1, a[1].ln2, a[1].ln1};
>>>

@ mp.tp_overlap_sp_forward_gather_laid_out_from_copy0
file: parallel/mp_tp_copy.c
test: ^test_parallel_train_gpt_tpoverlap$
<<<
        st = msr_mp_seq_permute(mp, mp->d.B / 2, copy_perm(c), gbuf, 1);
===
        st = msr_mp_seq_permute(mp, mp->d.B / 2, mp->w.perm, gbuf, 1);
>>>

@ mp.zero3_tied_wte_sent_ungathered
file: parallel/mp_tied.c
test: ^test_parallel_train_gpt_zero3_mp$
<<<
    int z3 = mp->cfg.zero >= 3;
===
    int z3 = 0;
>>>
@ train.moe_router_grad_summed_twice_under_sp
file: parallel/train.c
test: ^test_parallel_train_gpt_moe$
<<<
        lay.router_once = tr->cfg.mp.sp;
===
        lay.router_once = 0;
>>>

@ train.moe_one_frame_for_the_pipeline
file: parallel/train.c
test: ^test_parallel_train_gpt_moe$
<<<
        int frames = tr->cfg.mp.recompute == MSR_MP_RECOMPUTE_FULL ? 1 : cfg->grad_accum;
===
        int frames = 1;
>>>

@ layout.selective_keeps_gelu
file: layout/layout.c
test: ^test_parallel_(mp|layout)$
<<<
        n = N * (size_t)d->Hl;
        kept = all;
        break;
    case MSR_ACT_RES3:
===
        n = N * (size_t)d->Hl;
        kept = all || sel;
        break;
    case MSR_ACT_RES3:
>>>

@ layout.last_bucket_off_by_one
file: layout/layout.c
test: ^test_parallel_(layout|dp_np2)$
<<<
    return P <= fb ? 1 : 1 + (P - fb + bb - 1) / bb;
===
    return P <= fb ? 1 : 1 + (P - fb) / bb;
>>>

@ layout.replicated_at_threshold
file: layout/layout.c
test: ^test_parallel_layout$
<<<
    return zero_min_bytes > 0 && seg_elems * sizeof(float) < zero_min_bytes;
===
    return zero_min_bytes > 0 && seg_elems * sizeof(float) <= zero_min_bytes;
>>>

@ layout.whole_table_drops_proj
file: layout/layout.c
test: ^test_parallel_(gpt|plan_report)$
<<<
    case MSR_ACT_WHOLE_LNF:
    case MSR_ACT_PROJ:
        return N * C;
===
    case MSR_ACT_WHOLE_LNF:
        return N * C;
>>>

@ layout.units_run_from_inside_a_bucket
file: layout/units.c
test: ^test_parallel_layout$
<<<
    if (b < 1 || bhi < bb || pos != bhi - bb || lim <= pos || (lim - pos) / bb < 2)
===
    if (b < 1 || bhi < bb || lim <= pos || (lim - pos) / bb < 2)
>>>

@ layout.units_run_swallows_last_bucket
file: layout/units.c
test: ^test_parallel_layout$
<<<
    *repeat_p = (lim - pos) / bb - 1;
===
    *repeat_p = (lim - pos) / bb;
>>>

@ layout.work_ring_without_cp
file: layout/layout.c
test: ^test_parallel_layout$
<<<
    size_t N = d->N, Nl = d->Nl, C = (size_t)d->C, ring = d->cp > 1;
===
    size_t N = d->N, Nl = d->Nl, C = (size_t)d->C, ring = d->cp > 0;
>>>

@ pipe_order.one_f_one_b_warmup_too_long
file: layout/pipe_order.c
test: ^test_parallel_(plan_sim|mp)$
<<<
        *warm_p = p - r - 1 < M ? p - r - 1 : M;
===
        *warm_p = p - r < M ? p - r : M;
>>>

@ plan_mem.experts_sharded_over_all_dp
file: planner/plan_mem.c
test: ^test_parallel_plan_report$
<<<
    uint64_t cp = (uint64_t)msr_plan_cp(l), reps = (uint64_t)(l->dp / ep) * cp, lo = 0, hi = count;
===
    uint64_t cp = (uint64_t)msr_plan_cp(l), reps = (uint64_t)l->dp * cp, lo = 0, hi = count;
>>>

@ plan_mem.experts_not_sharded_over_cp
file: planner/plan_mem.c
test: ^test_parallel_plan_report$
<<<
    uint64_t cp = (uint64_t)msr_plan_cp(l), reps = (uint64_t)(l->dp / ep) * cp, lo = 0, hi = count;
===
    uint64_t cp = (uint64_t)msr_plan_cp(l), reps = (uint64_t)(l->dp / ep) * 1, lo = 0, hi = count;
>>>

@ plan_mem.experts_z3_counted_whole
file: planner/plan_mem.c
test: ^test_parallel_train_gpt_zero3_moe$
<<<
        resident = hi;
===
        resident = count;
>>>

@ train_experts.backward_gradients_not_zeroed
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_zero3_moe$
<<<
                               tr->ez_blk * (size_t)tr->rep_size * sizeof(float), NULL);
===
                               0, NULL);
>>>

@ train_experts.gathered_blocks_kept_past_the_update
file: parallel/train_experts.c
equivalent: the next step's start (msr_train_experts_zero) and msr_trainer_experts_whole forget the blocks too, and nothing reads them in between (eval gathers a whole model); the forget here only finishes a prefetch in flight before the step returns, which the next forget would
<<<
    msr_status_t st = slots_forget(tr); /* the update changes the shards next */
===
    msr_status_t st = MSR_OK;
>>>

@ train_experts.no_prefetch
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_zero3_moe$
<<<
    return msr_train_experts_next_in_chunk(tr, s, pass == MSR_GPT_FORWARD ? 1 : -1);
===
    return pass == MSR_GPT_FORWARD ? -1 : -1;
>>>

@ train_experts.setup_failure_not_agreed
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_experts_oom$
<<<
    int64_t first = st != MSR_OK ? me : INT64_MAX;
===
    int64_t first = INT64_MAX + 0 * me;
>>>

@ train.create_failure_not_agreed
file: parallel/dp.c
test: ^test_parallel_train_create_oom$
<<<
    int64_t v = st != MSR_OK ? (int64_t)msr_comm_rank(comm) * 256 + code : INT64_MAX;
===
    int64_t v = INT64_MAX + 0 * code;
>>>

@ mp_tied.zero3_gather_not_reserved
file: parallel/mp_tied.c
test: ^test_parallel_train_create_oom$
<<<
    return msr_dp_gather_reserve(mp->dp, mp->model->seg_embed);
===
    return MSR_OK;
>>>

@ dp.create_alone_not_agreed
file: parallel/dp.c
test: ^test_parallel_train_create_oom$
<<<
    msr_status_t st = msr_dp_agree(comm, msr_dp_create(cfg, comm, model, adamw, seed, &dp), "dp",
===
    msr_status_t st = msr_dp_agree(NULL, msr_dp_create(cfg, comm, model, adamw, seed, &dp), "dp",
>>>

@ plan_acts.bf16_expert_rows_at_capacity
file: planner/plan_acts.c
test: ^test_parallel_plan_report_bf16$
<<<
        uint64_t rows = msr_plan_min_u64(md.cap, N);
===
        uint64_t rows = md.cap;
>>>

@ plan_acts.bf16_ring_chunk_whole
file: planner/plan_acts.c
test: ^test_parallel_plan_report_bf16$
<<<
        uint64_t S = msr_plan_cp(l) > 1 ? T / 2 : T; /* the ring's chunks, or all of T */
===
        uint64_t S = T;
>>>

@ train_gpt_plan.vocab_of_bytes
file: programs/train_gpt/train_gpt_plan.c
test: ^test_parallel_plan_report_bf16$
<<<
    *V_p = ds->vocab;
===
    *V_p = MSR_GPT_VOCAB;
>>>

# the planner's count of the runtime's Llama (plan_report_llama.sh)
@ plan_acts.llama_mlp_as_gpt
file: planner/plan_acts.c
test: ^test_parallel_plan_report_llama$
<<<
        d.glu = 1;
===
        d.glu = 0;
>>>

@ plan_acts.bf16_llama_qkv_as_gpt
file: planner/plan_acts.c
test: ^test_parallel_plan_report_llama$
<<<
        qkv = Cl + 2 * (uint64_t)msr_plan_kv_heads_local(m, l->tp) * HS;
===
        qkv = 3 * Cl;
>>>

@ plan_acts.bf16_llama_gate_up_as_fc
file: planner/plan_acts.c
test: ^test_parallel_plan_report_llama$
<<<
    uint64_t qkv = 3 * Cl, fc = d.glu ? 2 * Hl : Hl;
===
    uint64_t qkv = 3 * Cl, fc = Hl;
>>>

@ plan_acts.llama_ring_repeat_one_buffer
file: planner/plan_acts.c
test: ^test_parallel_plan_report_llama$
<<<
    return 2 * (uint64_t)(d->T / 2) * 2 * (uint64_t)d->Cl;
===
    return (uint64_t)(d->T / 2) * 2 * (uint64_t)d->Cl;
>>>

@ plan.time.kv_replicas_split
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
        s->kv_rep = 2 * N * C * 2 * (s->kvl - C * s->KV / s->NH / s->t);
===
        s->kv_rep = 0;
>>>

@ plan.time.kv_sum_once_under_zero2
file: planner/plan_time.c
test: ^test_parallel_plan_time$
<<<
    return (l->zero >= 2 ? l->micros : 1) * msr_plan_t_allreduce(&tpn, bytes, l->tp);
===
    return msr_plan_t_allreduce(&tpn, bytes, l->tp);
>>>

@ plan.time.llama_ring_gpt_width
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
        double kv = msr_plan_t_p2p(&cpn, s->N * 2 * s->kvl * s->eb);
===
        double kv = msr_plan_t_p2p(&cpn, s->N * 2 * s->C / s->t * s->eb);
>>>

@ plan.offload.io_drops_write_half
file: planner/plan_time.c
test: ^test_parallel_plan_offload_io$
<<<
    double oio = msr_plan_disk_ms(c, (double)r.offload_optim_io, (double)r.offload_optim_io);
===
    double oio = msr_plan_disk_ms(c, (double)r.offload_optim_io, 0);
>>>

@ plan.offload.reads_hidden_by_forward
file: planner/plan_time.c
test: ^test_parallel_plan_offload_io$
<<<
                 msr_plan_io_exposed_ms(nf * sc.bwd, fetch + pread + e.bwd);
===
                 msr_plan_io_exposed_ms(nf * sc.fwd, fetch + pread + e.bwd);
>>>

@ plan.offload.experts_norm_hidden
file: planner/plan_time.c
test: ^test_parallel_plan_offload_experts$
<<<
    *exposed_p = firsts + gio + e.norm + msr_plan_io_exposed_ms(optim, oio + pupd + e.upd) +
===
    *exposed_p = firsts + gio + msr_plan_io_exposed_ms(optim, oio + pupd + e.upd + e.norm) +
>>>

@ plan.offload.experts_grads_io_in_update
file: planner/plan_time.c
test: ^test_parallel_plan_offload_experts$
<<<
    o->bwd = msr_plan_disk_ms(c, n * (b + g), n * g);
===
    o->bwd = msr_plan_disk_ms(c, n * b, 0);
>>>

@ plan.offload.params_first_reads_free
file: planner/plan_time.c
test: ^test_parallel_plan_offload_io$
<<<
    double firsts = blocks > 0 ? (2 * (double)l->micros * l->chunks + 1) * first : 0;
===
    double firsts = blocks > 0 ? (2 * (double)l->micros + 1) * first : 0;
>>>

@ mp.params_backward_reads_forward_first_block
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_offload_pp$
<<<
    if (st != MSR_OK || (st = dp_micro(mp)) != MSR_OK || (st = params_ahead(mp, c, 1)) != MSR_OK)
===
    if (st != MSR_OK || (st = dp_micro(mp)) != MSR_OK || (st = params_ahead(mp, c, 0)) != MSR_OK)
>>>

@ plan.offload.io_exposed_at_equality
file: planner/plan_offload.c
test: ^test_parallel_plan_offload_io$
<<<
    return io_ms > compute_ms ? io_ms - compute_ms : 0;
===
    return io_ms >= compute_ms ? io_ms - compute_ms + 1e-9 : 0;
>>>

@ plan.offload.last_chunk_partial
file: planner/plan_mem.c
test: ^test_parallel_plan_offload_io$
<<<
    return msr_plan_ceil_div(count, c / (2 * MSR_PLAN_F32)) * c;
===
    return (void)c, 2 * count * MSR_PLAN_F32;
>>>

@ plan.offload.auto_slower_taken
file: planner/plan_offload.c
test: ^test_parallel_plan_offload_io$
<<<
    if (n > 0 && (best_ms == 0 || plans[0].t.step_ms < best_ms)) {
===
    if (n > 0 && best_ms == best_ms) {
>>>

@ plan.offload.grads_shard_resident
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$|^test_parallel_plan_offload_io$
<<<
        rank_grads_offload(l, S, o);
===
        (void)rank_grads_offload;
>>>

@ plan.offload.grads_crc_uncounted
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$|^test_parallel_plan_offload_io$
<<<
    return 3 * g + (chunks + 1) * (sizeof(uint32_t) + 1) +
===
    return 3 * g + (chunks + 1) * sizeof(uint32_t) +
>>>

@ offload_grads.ahead_unchecked
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
        if ((st = slot_wait(g, SLOT_AHEAD, k)) == MSR_OK && !fill)
            st = crc_check(g, k, g->buf[b]);
===
        if ((st = slot_wait(g, SLOT_AHEAD, k)) == MSR_OK && fill)
            st = crc_check(g, k, g->buf[b]);
>>>

@ offload_grads.read_before_its_write
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
    if (g->behind_b >= 0 && g->behind_k == k) { /* its failure met here */
===
    if (0 && g->behind_b >= 0 && g->behind_k == k) { /* its failure met here */
>>>

@ offload_grads.held_not_taken_back
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
        b = held_buf(g, k);
===
        b = -1;
>>>

@ offload_grads.fresh_after_a_set_in_use
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
        g->flags[k] &= (uint8_t)~F_FRESH; /* set in part now: no longer fresh */
===
        (void)0; /* set in part now: no longer fresh */
>>>

@ offload_grads.next_call_not_read_ahead
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
    if (put_reads(g, j, off, n, g->then_reads))
        ahead_start(g, j);
===
    if (0 && put_reads(g, j, off, n, g->then_reads))
        ahead_start(g, j);
>>>

@ offload_params.restore_reads_each_block
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_zero$
<<<
    if (!dp->pload_seen[k]) {
===
    if (0 && !dp->pload_seen[k]) {
>>>

@ offload_params.restore_second_entry_unread
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_zero$|^test_parallel_train_gpt_offload_params$|^test_parallel_dp_offload_restore$
<<<
        dp->pload_seen[k] = 1;
===
        dp->pload_seen[k] = 0;
>>>

@ offload_acts.spill_beside_its_read
file: parallel/offload_acts.c
test: ^test_parallel_offload_params$|^test_parallel_train_gpt_offload_zero$|^test_parallel_train_gpt_offload_params$
<<<
        if (t == s || a->key[t] != k || (a->state[t] != BUF_WRITING && a->state[t] != BUF_READING))
===
        if (1 || t == s || a->key[t] != k)
>>>

@ store.allgather_no_part_in_place
file: rendezvous/client_store.c
test: ^test_parallel_ckpt_save_fail$
<<<
    if (st == MSR_ERR_NO_MEMORY) {
        /* memory inside the call: this rank's part may not have reached
===
    if (0 && st == MSR_ERR_NO_MEMORY) {
        /* memory inside the call: this rank's part may not have reached
>>>

@ offload_grads.hooks_tell_nothing
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_grads$
<<<
    grads_then(dp, u);
===
    (void)grads_then;
>>>

@ offload_grads.first_micro_reads_back
file: parallel/dp_step.c
test: ^test_parallel_train_gpt_offload_grads$
<<<
        msr_grads_fresh(dp->grads_off);
===
        (void)0;
>>>

@ offload_grads.ahead_of_its_write
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
        (g->behind_b >= 0 && g->behind_k == j) || held_buf(g, j) >= 0)
===
        held_buf(g, j) >= 0)
>>>

@ offload_grads.ahead_of_a_held_copy
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
        (g->behind_b >= 0 && g->behind_k == j) || held_buf(g, j) >= 0)
===
        (g->behind_b >= 0 && g->behind_k == j))
>>>

@ offload_grads.ahead_always_up
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$
<<<
        ahead = from == k + 1 ? k - 1 : k + 1;
===
        ahead = ((void)from, k + 1);
>>>

@ offload_grads.norm_of_the_increment
file: parallel/offload_grads.c
test: ^test_parallel_offload_grads$|^test_parallel_train_gpt_offload_grads$
<<<
            msr_sumsq_add(lanes, dst, c, at - off);
===
            msr_sumsq_add(lanes, s, c, at - off);
>>>

@ offload_grads.norm_at_the_first_micro
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_grads$
<<<
    if (!dp->last_micro || !norm_counts(dp, u)) {
===
    if (!dp->first_micro || !norm_counts(dp, u)) {
>>>

@ plan.offload.grads_update_reads_free
file: planner/plan_mem.c
test: ^test_parallel_plan_offload_io$
<<<
    *read_p = chunks <= 1 ? 0 : m * chunks * g;
===
    *read_p = chunks <= 1 ? 0 : (m - 1) * chunks * g;
>>>

@ plan.offload.grads_io_hidden
file: planner/plan_time.c
test: ^test_parallel_plan_offload_io$
<<<
    *exposed_p = firsts + gio +
===
    *exposed_p = firsts +
>>>

@ plan.offload.grads_never_tried
file: planner/plan_offload.c
test: ^test_parallel_plan_offload_io$|^test_parallel_train_gpt_plan$
<<<
        int bits = k == 0 ? q->offload : modes[(k - 1) % 7];
===
        int bits = k == 0 ? q->offload : k == 6 || k == 7 ? modes[4] : modes[(k - 1) % 7];
>>>

@ plan.offload.grads_at_zero1
file: planner/plan_check.c
test: ^test_parallel_plan_cli$|^test_parallel_plan_offload_io$
<<<
        : l->zero < 2 ? "below ZeRO 2 (no gradient shard: the flat gradients are whole)"
===
        : l->zero < 1 ? "below ZeRO 2 (no gradient shard: the flat gradients are whole)"
>>>

@ plan.offload.grads_without_optimizer
file: planner/plan_offload.c
test: ^test_parallel_plan_cli$
<<<
    if ((bits & MSR_PLAN_OFFLOAD_GRADS) && !(bits & MSR_PLAN_OFFLOAD_OPTIM))
===
    if (0)
>>>

@ train_gpt.auto_offload_drops_grads
file: programs/train_gpt/train_gpt_fit.c
test: ^test_parallel_train_gpt_plan$
<<<
    for (int k = 0; k < 4; k++) /* bit k: MSR_PLAN_OFFLOAD_OPTIM, _ACTS, _PARAMS, _GRADS */
===
    for (int k = 0; k < 3; k++) /* bit k: MSR_PLAN_OFFLOAD_OPTIM, _ACTS, _PARAMS, _GRADS */
>>>

@ layout.whole_dfch_act_4c
file: layout/layout.c
test: ^test_parallel_plan_report_llama$
<<<
    case MSR_WORK_WHOLE_DFCH_GELU:
        return N * (size_t)d->Hl;
===
    case MSR_WORK_WHOLE_DFCH_GELU:
        return N * 4 * C;
>>>

@ plan_mem.moe_block_keeps_mlp
file: planner/plan_part.c
test: ^test_parallel_plan$|^test_parallel_plan_report$
<<<
    return p->moe_blocks > 0 && msr_plan_is_moe(p->m, part_layer(p, k)) ? p->moe_block : p->block;
===
    return p->moe_blocks > 0 && msr_plan_is_moe(p->m, part_layer(p, k)) ? p->block : p->block;
>>>

@ python.free_forgotten
file: python/msrun/_args.py
test: ^python_unit$
<<<
        _lib.free(ptr)
===
        pass
>>>

@ python.sum_is_max
file: python/msrun/_buffers.py
test: ^python_(api|torch)_np2$
<<<
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
===
OPS = {"sum": 3, "prod": 1, "min": 2, "max": 3, "avg": 4}
>>>

@ python.strided_accepted
file: python/msrun/_buffers.py
test: ^python_(api|torch)_np2$
<<<
        if not view.c_contiguous:
===
        if False:
>>>

@ python.int_size_ignored
file: python/msrun/_buffers.py
test: ^python_api_np2$
<<<
        return I32 if view.itemsize == 4 else I64
===
        return I64
>>>

@ python.last_error_dropped
file: python/msrun/_errors.py
test: ^python_api_np2$
<<<
    raise _make(status, call, message or status_str(status))
===
    raise _make(status, call, status_str(status))
>>>

@ python.install_libpath_wrong
file: cmake/MsrunInstall.cmake
test: ^it_install$
<<<
  file(RELATIVE_PATH MSRUN_PY_LIBRARY /prefix/${MSRUN_PYTHON_DIR}/msrun
===
  file(RELATIVE_PATH MSRUN_PY_LIBRARY /prefix/${MSRUN_PYTHON_DIR}
>>>

@ observe.stragglers_latest_windows
file: cluster/observe.c
test: ^test_coord$
<<<
        means[i] = o->ranks[i].seen ? msr_step_window_mean_at(w, common) : 0;
===
        means[i] = o->ranks[i].seen ? msr_step_window_mean(w) : 0;
>>>

@ observe.history_never_thinned
file: cluster/observe.c
test: ^test_coord$
<<<
        h->stride *= 2;
===
        h->stride *= 1;
>>>

@ netns.nodes_share_one_network
file: bench/comm/netns_lib.sh
test: ^comm_netns_2nodes$
<<<
    ip netns exec "${NS_PREFIX}-n$i" unshare
===
    ip netns exec "${NS_PREFIX}-n0" unshare
>>>

@ comm_bench.check_input_wrong
file: bench/comm/comm_bench.c
test: ^comm_netns_2nodes$
<<<
        a[i] = check_value(me, i);
===
        a[i] = check_value(0, i);
>>>

@ outtail.bytes_unbounded
file: msrun/outtail.c
test: ^test_outtail$
<<<
    while (t->count > 0 && (t->count == MSR_OUT_TAIL_LINES || t->bytes + len > MSR_OUT_TAIL_BYTES))
===
    while (t->count > 0 && t->count == MSR_OUT_TAIL_LINES)
>>>

@ outtail.no_wrap
file: msrun/outtail.c
test: ^test_outtail$
<<<
    memcpy(t->data, line + head, len - head); /* wraps around */
===
    (void)head; /* no wrap: the line's end is lost */
>>>

@ outtail.long_line_kept
file: msrun/outtail.c
test: ^test_outtail$
<<<
    if (len > MSR_OUT_TAIL_LINE_MAX)
        len = MSR_OUT_TAIL_LINE_MAX;
    while
===
    while
>>>

@ workers.out_tail_stderr_only
file: msrun/output.c
test: ^it_tail$
<<<
    if (s->worker->out_tail) /* a progress line's last state, as on the screen */
===
    if (s->worker->out_tail && s->is_err)
>>>

@ agent.tails_not_sent
file: msrun/agent_calls.c
test: ^it_tail$
<<<
            req.n_outputs = tails_take(a, outs, outsp, lines, &text);
===
            tails_take(a, outs, outsp, lines, &text);
>>>

@ http.output_rank_unchecked
file: cluster/http_routes.c
test: ^it_tail$
<<<
        if (len > 0 && len <= 9 && strspn(v, "0123456789") == len)
===
        if (len > 0)
>>>

@ observe.output_rank_past_world
file: cluster/observe_output.c
test: ^test_coord$
<<<
    if (rank < 0 || rank >= world) {
===
    if (rank < 0 || rank > world) {
>>>

@ observe.output_bytes_raw
file: cluster/observe_output.c
test: ^test_coord$
<<<
            msr_buf_append(b, "\\ufffd", 6);
===
            msr_buf_append(b, (const char *)s + i, 1);
>>>

@ observe.output_not_waking
file: cluster/observe_output.c
test: ^test_coord$
<<<
        msr_coord_wake_node(c, n); /* its held heartbeat carries the ask */
===
        (void)0; /* the ask waits for the node's next heartbeat */
>>>

@ observe.output_any_node
file: cluster/observe_output.c
test: ^test_coord$
<<<
        if (!r->asked || !r->sent || strcmp(r->ask_node, n->id) != 0)
===
        if (!r->asked)
>>>

@ coord.output_ask_held
file: cluster/members.c
test: ^test_coord$
<<<
    if (req->generation != c->generation || (int)req->known_state != (int)c->state ||
        req->wait_ms == 0 || msr_coord_output_unsent(c, n)) {
===
    if (req->generation != c->generation || (int)req->known_state != (int)c->state ||
        req->wait_ms == 0) {
>>>

@ coord.root_cause_never_replaced
file: cluster/generation.c
test: ^test_coord$
<<<
    } else if ((e->exit_code != 0 || e->signal != 0) && !e->after_peer_lost &&
===
    } else if ((e->exit_code != 0 || e->signal != 0) && e->after_peer_lost &&
>>>

@ node.own_death_dropped_while_stopping
file: msrun/node.c
test: ^fault_root_cause$
<<<
    int own = sig > 0 && sig < 32 && !(w->sent_sigs & (1u << sig));
===
    int own = 0;
>>>

@ comm.peer_lost_not_noted
file: comm/comm.c
test: ^fault_root_cause$
<<<
    if (st == MSR_ERR_PEER_LOST)
        msr_note_peer_lost(comm->ctx);
===
>>>

# ---- addresses published and fetched on first use (docs/store.md, docs/comm.md)
@ store.fetch_not_advanced
file: rendezvous/store_kv.c
test: ^test_store_core$
<<<
            msr_list_remove(&w->held.link);
            fetch_advance(c, w);
===
            msr_list_remove(&w->held.link);
            waiter_free(c, w);
>>>

@ proxy.fetch_not_coalesced
file: msrun/proxy_fetch.c
test: ^test_proxy_fetch$
<<<
        if (msr_map_get(&p->fetch_cache, key) || msr_map_get(&p->fetch_inflight, key))
===
        if (msr_map_get(&p->fetch_cache, key))
>>>

@ proxy.fetch_not_cached
file: msrun/proxy_fetch.c
test: ^test_proxy_fetch$
<<<
    if (answer_cached(p, call, r->generation, r->name, n, r->indices, &p->fetch_hits))
===
    if (0)
>>>

@ proxy.fetch_retried_past_its_wait
file: msrun/proxy_fetch.c
test: ^test_proxy_fetch$
<<<
        uint64_t deadline = w->deadline;
===
        uint64_t deadline = msr_rpc_call_deadline(call);
>>>

@ proxy.publish_not_combined
file: msrun/proxy.c
test: ^test_proxy_fetch$
<<<
        if (r->local_count > 1 && msr_rpc_key_valid(r->name) && r->n_entries > 0 &&
===
        if (r->local_count > 99 && msr_rpc_key_valid(r->name) && r->n_entries > 0 &&
>>>

@ ucx.address_not_fetched
file: comm/ucx/engine_peers.c
test: ^comm_collectives_2nodes$
<<<
    if (p->addr == NULL) {
        /* first use: fetch its address
===
    if (0) {
        /* first use: fetch its address
>>>

@ accept.unauthenticated_never_expire
file: rendezvous/rpc_accept.c
test: ^sec_attack$
<<<
        if (c->deadline_ns > now) {
            next = c->deadline_ns;
===
        if (1) {
            next = c->deadline_ns;
>>>

# ---- collectives over several nodes in two levels (comm/ucx/hier*.c)
@ comm.hier.gather_offset_off_by_one
file: comm/ucx/hier_allreduce.c
test: ^comm_hier_2nodes$
<<<
            st = ucx_op_recv(r, &ops[4 * j + 2], peer, piece, len * es, phase + 1);
===
            st = ucx_op_recv(r, &ops[4 * j + 2], peer, piece - (off ? es : 0), len * es, phase + 1);
>>>

@ comm.hier.nodes_folded_backwards
file: comm/ucx/hier_allreduce.c
test: ^comm_hier_3nodes$
<<<
    const char *x0 = h->node == 0 ? dst : area;
    const char *x1 = h->node == 1 ? dst : area + piece;
    msr_reduce(x->op, x->dt, dst, x0, x1, len);
    for (int m = 2; m < nn; m++)
        msr_reduce(x->op, x->dt, dst, dst, area + (size_t)m * piece, len);
===
    memcpy(area + (size_t)h->node * piece, dst, piece);
    const char *x0 = area + (size_t)(nn - 1) * piece;
    const char *x1 = area + (size_t)(nn - 2) * piece;
    msr_reduce(x->op, x->dt, dst, x0, x1, len);
    for (int m = nn - 3; m >= 0; m--)
        msr_reduce(x->op, x->dt, dst, dst, area + (size_t)m * piece, len);
>>>

@ comm.hier.avg_divided_by_nodes
file: comm/ucx/hier_allreduce.c
test: ^comm_hier_2nodes$
<<<
        msr_reduce(x->op, x->dt, dst, dst, area + (size_t)m * piece, len);
    msr_reduce_finish(x->op, x->dt, dst, len, r->n);
===
        msr_reduce(x->op, x->dt, dst, dst, area + (size_t)m * piece, len);
    msr_reduce_finish(x->op, x->dt, dst, len, h->nnodes);
>>>

@ comm.hier.uneven_parts_as_equal_blocks
file: comm/ucx/shm_tiles.c
test: ^comm_hier_2nodes$
<<<
    if (r->tiles.parts) {
        ucx_part(r->tiles.parts, (uint64_t)r->n, (uint64_t)q, off, len);
===
    if (r->tiles.parts) {
        ucx_part(r->tiles.parts, (uint64_t)r->n, (uint64_t)q, off, len);
        *off = (uint64_t)q * r->pub.args.count;
>>>

@ comm.hier.bcast_passed_on_before_the_tiles_gave_it
file: comm/ucx/hier_chain.c
test: ^comm_hier_2nodes$
<<<
        uint64_t have = x->rs.tiles.copied * x->rs.tiles.tile_elems; /* of the vector */
===
        uint64_t have = UINT64_MAX;
>>>

@ comm.hier.chain_links_disagree_on_neighbours
file: comm/ucx/hier_chain.c
test: ^comm_hier_3nodes$
<<<
    return ucx_hier_seg_owner(h, x, t, (root_node + v) % h->nnodes);
===
    return ucx_hier_seg_owner(h, x, t, (root_node - v + h->nnodes) % h->nnodes);
>>>

@ comm.hier.reduce_unit_passed_on_before_reduced
file: comm/ucx/hier_chain.c
test: ^comm_hier_2nodes$
<<<
    uint64_t rs_ready = s->rs_done ? UINT64_MAX : x->rs.tiles.reduced * x->rs.tiles.tile_elems;
    msr_status_t st = chain_progress(r, leaf ? -1 : v + 1, v == 0 ? -1 : v - 1, rs_ready);
===
    uint64_t rs_ready = UINT64_MAX;
    msr_status_t st = chain_progress(r, leaf ? -1 : v + 1, v == 0 ? -1 : v - 1, rs_ready);
>>>

@ comm.hier.reduce_result_gathered_before_final
file: comm/ucx/hier_chain.c
test: ^comm_hier_2nodes$
<<<
    if (v == 0)
        chain_allgather(r, s->folded);
===
    if (v == 0)
        chain_allgather(r, x->nunits);
>>>

@ comm.hier.unit_leaves_before_reduced
file: comm/ucx/hier_allreduce.c
test: ^comm_hier_2nodes$
<<<
            if (un->off + un->len - x->my_off > rs_ready)
                break;
===
            (void)un;
            (void)rs_ready;
>>>

@ comm.hier.allgather_in_node_before_final
file: comm/ucx/hier_allreduce.c
test: ^comm_hier_2nodes$
<<<
    uint64_t d = r->hier.done;
===
    uint64_t d = r->hier.done;
    return UINT64_MAX;
>>>

@ comm.hier.relayed_block_in_wrong_place
file: comm/ucx/hier_route.c
test: ^comm_hier_2nodes$
<<<
            st = route_recv(r, &i, agent_of(h, my, s), dst, b, 2);
===
            st = route_recv(r, &i, agent_of(h, my, s), out, b, 2);
>>>

@ comm.hier.reduce_scatter_nodes_backwards
file: comm/ucx/hier_route.c
test: ^comm_hier_3nodes$
<<<
            x->pieces[m] = rs_node_partial(r, m) + off * es;
===
            x->pieces[m] = rs_node_partial(r, nn - 1 - m) + off * es;
>>>

@ comm.hier.reduce_scatter_partial_sent_early
file: comm/ucx/hier_route.c
test: ^comm_hier_2nodes$
<<<
        if (!done)
            break;
        rs_chunk(r, c, &off, &len);
        for (int j = 0, slot = 0; j < k; j++)
===
        (void)done;
        rs_chunk(r, c, &off, &len);
        for (int j = 0, slot = 0; j < k; j++)
>>>

@ comm.engine.host_peer_not_polled
file: comm/ucx/engine_peers.c
test: ^comm_kill_2nodes_host$
<<<
        return 0;
    }
    ucx_engine_rebuild_pollfds(e);
    return 1;
===
        return 0;
    }
    (void)e;
    return 1;
>>>

@ comm.nccl.split_not_settled_on_success
file: comm/nccl/gpu_ops.c
test: ^gpu_fake_nccl_np3$
<<<
            if (mine == MSR_OK || mine == MSR_IN_PROGRESS)
                mine = gpu_settle(gc, gc->nc, deadline);
===
            if (mine == MSR_IN_PROGRESS)
                mine = gpu_settle(gc, gc->nc, deadline);
>>>

@ comm.nccl.p2p_lengths_not_compared
file: comm/nccl/nccl.c
test: ^gpu_fake_lengths_np3$
<<<
    if (mine == peer)
        return MSR_OK;
===
    if (mine == peer || mine != peer)
        return MSR_OK;
>>>

@ comm.nccl.oom_does_not_give_up
file: comm/nccl/gpu_ops.c
test: ^gpu_fake_oom_np4$
<<<
err_give_up:
    if (st == MSR_ERR_NO_MEMORY)
        give_up_locked(gc, st);
===
err_give_up:
    if (st == MSR_ERR_INVALID_ARG)
        give_up_locked(gc, st);
>>>

@ plan.time.rows_cost_ignored
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
    return (N + h) / N * (N0 / (N0 + h));
===
    return (N + h) / N;
>>>

@ plan.time.ring_at_attention_rate
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
    *(cp > 1 ? &p->attn_f.rflops : &p->attn_f.aflops) = s->att / s->t;
===
    p->attn_f.aflops = s->att / s->t;
>>>

@ base.alloc.pages_kept_on_free
file: base/alloc.c
test: ^test_base$
<<<
    if (h->mapped)
        munmap(base, h->size + PAGES_HDR);
    else
        free(base);
===
    if (!h->mapped)
        free(base);
>>>

@ plan_mem.shm_slots_always_turn
file: planner/plan_mem.c
test: ^test_parallel_plan$
<<<
    if (rs_per_step > 0 && (rs_tiles + ag_tiles) % depth == 0)
===
    if (rs_per_step > 0 && (rs_tiles + ag_tiles) % depth == 0 && 0)
>>>

@ plan_mem.shm_result_in_allreduce_missed
file: planner/plan_mem.c
test: ^test_parallel_plan$
<<<
        return depth * (2 * t + (n - 1) * SHM_READ(t / n));
===
        return depth * (t + (n - 1) * SHM_READ(t / n));
>>>

@ plan.time.ring_chunk_ignored
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
    p->ring_cost = cp > 1 ? chunk_cost(c, s->S) : 1;
===
    p->ring_cost = cp > 1 ? chunk_cost(c, s->S) * 0 + 1 : 1;
>>>

@ plan.time.moe_rows_at_N
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
    double rc_e = s->E > 0 ? rows_cost(c, s->rows / s->E) : rc;
===
    double rc_e = rc;
>>>

@ plan.time.cold_below_from
file: planner/plan_time.c
test: ^test_parallel_plan_time$
<<<
    if (c->cold_ms_per_mib <= 0 || mib <= a)
===
    if (c->cold_ms_per_mib <= 0)
>>>

@ plan.time.cold_no_log_ramp
file: planner/plan_time.c
test: ^test_parallel_plan_time$
<<<
    return a > 0 ? log(mib / a) / log(b / a) : mib / b;
===
    return 1;
>>>

@ coord.port_taken_no_retry
file: msrun/coord_setup.c
test: ^it_multinode$
<<<
#define PORT_TAKEN_MS 10000
===
#define PORT_TAKEN_MS 0
>>>

@ plan.time.selective_no_gelu
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
        p->sel_f.act += dense * s->eb * 2 * s->N * s->F / s->t;
===
        p->sel_f.act += 0 * dense * s->eb * 2 * s->N * s->F / s->t;
>>>

@ plan.time.idle_lend_ignored
file: planner/plan_time.c
test: ^test_parallel_plan_time$
<<<
    return 1 + c->idle_lend * ((double)on_node / c->cores_per_node - 1);
===
    return (double)on_node / c->cores_per_node;
>>>

@ pipe.ops_to_peak_warmup_only
file: layout/pipe_order.c
test: ^test_parallel_plan_sim$
<<<
    int steady = total - warm < per ? total - warm : per;
===
    int steady = 0 * per;
>>>

@ plan.search.even_times_reused_always
file: planner/plan_search.c
test: ^test_parallel_plan_search$
<<<
    if (have_even && p->l.stage_layers == NULL)
===
    if (have_even)
>>>

@ plan.time.ring_step_backward_free
file: planner/plan_cost.c
test: ^test_parallel_plan_time$
<<<
        p->ring_b_ms = (cp - 1) * (kv > step_b ? kv - step_b : 0) + cp * (kv + hand);
===
        p->ring_b_ms = (cp - 1) * (kv > step_b ? kv - step_b : 0) + cp * kv + 0 * hand;
>>>

@ plan.time.cold_chunk_own_frame
file: planner/plan_time.c
test: ^test_parallel_plan_time$
<<<
        double bytes = (double)msr_plan_frame_bytes(m, l, prec, split_at(m, l, n, j), j == n - 1);
===
        double bytes = (double)msr_plan_frame_bytes(m, l, prec, split_at(m, l, n, j % l->pp), j == n - 1);
>>>


# ---- the state file (issue 38, item 3): corruption is not a torn tail
@ persist.corrupt_taken_for_torn
file: cluster/persist_load.c
test: ^fault_state_corrupt$
<<<
    if ((whole || after > 0) && !c->config.state_repair) {
===
    if (whole < 0 && !c->config.state_repair) {
>>>

@ persist.sequence_ignored
file: cluster/persist_load.c
test: ^fault_state_corrupt$
<<<
            if (!lg->v3 || seq == want) {
===
            if (1) {
>>>

@ persist.header_crc_unchecked
file: cluster/persist_load.c
test: ^fault_state_corrupt$
<<<
    if (lg->len - off < FRAME3_LEN || msr_crc32(0, h, 12) != get_u32(h + 12))
===
    if (lg->len - off < FRAME3_LEN)
>>>

@ persist.other_job_taken
file: cluster/persist_load.c
test: ^fault_state_corrupt$
<<<
    if (!job_id_ok(c, ps))
        return MSR_ERR_CONFLICT;
===
>>>

@ persist_etcd.gap_ignored
file: cluster/persist_etcd.c
test: ^fault_etcd_corrupt$
<<<
    if (l->n > 0 && seq != l->next_seq)
===
    if (0)
# ---- issue 38's survivors: limits at their bound and one past, multi-party calls given up in
# ---- different orders, parsers fed their boundaries (docs/testing.md)
@ store.barrier_withdraw_weight_one
file: rendezvous/store_core.c
test: ^test_store_core$
<<<
        b->arrived = b->arrived >= weight ? b->arrived - weight : 0;
===
        b->arrived = b->arrived >= weight ? b->arrived - 1 : 0;
>>>

@ store.gather_withdraw_everyones
file: rendezvous/store_gather.c
test: ^test_store_core$
<<<
        if (!ge->present || ge->call != call)
===
        if (!ge->present || (call == NULL && ge->call != call))
>>>

@ store.fetch_max_refused
file: rendezvous/store_kv.c
test: ^test_store_core$
<<<
    if (req->n_indices > MSR_FETCH_MAX) {
===
    if (req->n_indices >= MSR_FETCH_MAX) {
>>>

@ store.entry_bytes_no_key
file: rendezvous/store_limits.c
test: ^test_store_core$
<<<
    return (uint64_t)keylen + (uint64_t)len + MSR_STORE_ENTRY_OVERHEAD;
===
    return 0 * (uint64_t)keylen + (uint64_t)len + MSR_STORE_ENTRY_OVERHEAD;
>>>

@ rpc.unauth_one_extra_per_host
file: rendezvous/rpc_accept.c
test: ^test_rpc$
<<<
    else if (unauth_count(a, host) >= a->cfg.max_unauth_per_host)
===
    else if (unauth_count(a, host) > a->cfg.max_unauth_per_host)
>>>

@ persist.failed_save_no_snapshot
file: cluster/persist.c
test: ^test_coord$
<<<
    /* Whatever reached the file, the next save rewrites all of it. */
    c->need_snapshot = 1;
===
    /* Whatever reached the file, the next save rewrites all of it. */
    c->need_snapshot = 0;
>>>

@ observe.output_bytes_per_line
file: cluster/observe_output.c
test: ^test_coord$
<<<
            if (bytes + len > MSR_OUTPUT_BYTES)
===
            if (len > MSR_OUTPUT_BYTES)
>>>

@ straggler.repeated_step_kept
file: cluster/straggler.c
test: ^test_progress$
<<<
    if (w->n > 0 && step <= msr_step_window_last(w))
===
    if (w->n > 0 && step < msr_step_window_last(w))
>>>

@ token.mode_execute_bits_ignored
file: msrun/token.c
test: ^test_token$
<<<
    if (sb.st_mode & 077) {
===
    if (sb.st_mode & 066) {
>>>

@ hostlist.name_255_refused
file: msrun/hostlist.c
test: ^test_sched$
<<<
    if (name_len > MSR_HOSTLIST_NAME_MAX)
===
    if (name_len >= MSR_HOSTLIST_NAME_MAX)
>>>

@ sched.nodeid_unset_node_0
file: msrun/sched.c
test: ^test_sched$
<<<
    if (r > 0) {
        s->has_node_rank = 1;
        s->host_rank = s->node_rank;
        msr_origin_set(&s->node_rank_from, MSR_SRC_SLURM, "SLURM_NODEID");
===
    if (r >= 0) {
        s->has_node_rank = 1;
        s->host_rank = s->node_rank;
        msr_origin_set(&s->node_rank_from, MSR_SRC_SLURM, "SLURM_NODEID");
>>>

@ optparse.value_past_argv
file: base/optparse.c
test: ^(test_base|it_cli)$
<<<
    } else if (*i + 1 >= argc) {
===
    } else if (*i + 1 > argc) {
>>>

@ moe.capacity_floor
file: layout/layout.c
test: ^test_parallel_(moe|layout)$
<<<
    double c = ceil(F * (double)tokens * (double)K / (double)E);
===
    double c = floor(F * (double)tokens * (double)K / (double)E);
>>>

@ pipe.interleaved_m_equals_p_dropped
file: layout/pipe_order.c
test: ^test_parallel_plan_sim$
<<<
        *warm_p = M == p ? total : (w < total ? w : total);
===
        *warm_p = w < total ? w : total;
>>>

# ---- a node's proxy holds its workers' waiting calls to the client's bound
@ proxy.held_calls_unbounded
file: msrun/proxy_up.c
test: ^it_held_limits$
<<<
    if (!method_writes(method) && p->held_calls >= l->client_calls) {
===
    if (0 && p->held_calls >= l->client_calls) {
>>>

@ proxy.held_charge_kept
file: msrun/proxy_up.c
test: ^it_held_limits$
<<<
        h->proxy->held_calls--;
===
>>>

# ---- the run's history, msrun board and the dashboard's token line (issue 39)
@ history.rotates_at_the_bound
file: msrun/history.c
test: ^test_history$
<<<
    if (h->size > 0 && h->size + (int64_t)h->line.len > h->max)
===
    if (h->size > 0 && h->size + (int64_t)h->line.len >= h->max)
>>>

@ runview.script_end_unescaped
file: msrun/cmd_runview.c
test: ^it_runview$
<<<
        else if (c < 0x20 || c == '<' || c == '>' || c == '&' || c == 0x7f)
===
        else if (c < 0x20 || c == 0x7f)
>>>

@ dashboard.token_file_untold
file: msrun/coord_child.c
test: ^it_dashboard_api$
<<<
    msr_dashboard_token_tell("msrun", tf);
===
    (void)tf;
>>>

# ---- one command for a whole job: msrun over ssh (--hostfile, -H)
@ remote.token_in_ssh_env
file: msrun/remote.c
test: ^it_ssh$
<<<
    static const char *const drop[] = {"MSRUN_TOKEN", "MSR_TOKEN", NULL};
===
    static const char *const drop[] = {NULL};
>>>

@ remote.stdin_eof_ignored
file: msrun/agent.c
test: ^it_ssh$
<<<
    if (a->o->exit_on_stdin_eof) {
===
    if (0) {
>>>

@ remote.token_stdin_reads_ahead
file: msrun/token.c
test: ^it_ssh$
<<<
        ssize_t r = read(0, buf + n, 1);
===
        ssize_t r = read(0, buf + n, sizeof buf - 1 - n);
>>>

@ remote.partial_lines_passed
file: msrun/remote.c
test: ^it_ssh$
<<<
        if (nl == NULL && b->len - done >= REMOTE_LINE_MAX)
===
        if (nl == NULL && b->len - done >= 1)
>>>

@ remote.slots_one_short_accepted
file: msrun/remote_hosts.c
test: ^test_remote$
<<<
    if (n > sum)
===
    if (n > sum + 1)
>>>

@ remote.name_255_refused
file: msrun/remote_hosts.c
test: ^test_remote$
<<<
    if (n > MSR_REMOTE_NAME_MAX)
===
    if (n >= MSR_REMOTE_NAME_MAX)
>>>

@ plan_choose.within_bound_strict
file: planner/plan_choose.c
test: ^test_parallel_plan_choose$
<<<
    for (int64_t i = 1; i < n && plans[i].t.step_ms <= bound; i++) {
===
    for (int64_t i = 1; i < n && plans[i].t.step_ms < bound; i++) {
>>>

@ plan_choose.no_model_dims_key
file: planner/plan_choose.c
test: ^test_parallel_plan_choose$
<<<
    const int ka[] = {dims_of(a), model_dims_of(a),
===
    const int ka[] = {dims_of(a), model_dims_of(b),
>>>

@ plan_print.tried_leaves_out_over_memory
file: planner/plan_print.c
test: ^test_parallel_plan_model_cli$
<<<
            pr->found + pr->invalid + pr->over_memory, shown, pr->found - (uint64_t)shown,
===
            pr->found + pr->invalid, shown, pr->found - (uint64_t)shown,
>>>

@ calib.short_steps_off_by_one
file: programs/train_gpt/train_gpt_calib_kernels.c
test: ^test_parallel_train_gpt_auto$
<<<
    return o->calibrate == NULL && o->steps < CALIB_SHORT_STEPS;
===
    return o->calibrate == NULL && o->steps <= CALIB_SHORT_STEPS;
>>>

@ calib_cache.foreign_key_accepted
file: programs/train_gpt/train_gpt_calib_cache.c
test: ^test_parallel_train_gpt_auto$
<<<
    else if (strncmp(text, cc->key, kl) != 0 || text[kl] != '\n')
===
    else if (0 && text[kl] != '\n')
>>>

@ habits.hint_short_names
file: base/optparse.c
test: ^test_optparse_hints$
<<<
    int most = len < 3 ? 0 : len < 5 ? 1 : 2;
===
    int most = len < 3 ? 0 : 2;
>>>

@ habits.torch_port_master_port
file: msrun/options_habits.c
test: ^it_habits$
<<<
        o->torch_port = o->master_port + 1;
===
        o->torch_port = o->master_port;
>>>

@ habits.cuda_visible_stops
file: msrun/options_habits.c
test: ^it_habits$
<<<
        while (*p && *p != '-' && *p != ',') {
===
        while (*p && *p != ',') {
>>>

@ habits.error_file_unread
file: msrun/report.c
test: ^it_habits$
<<<
        if (raised[0]) /* "rank 1 on node 0 (...) raised ValueError: x, exited with code 1" */
===
        if (0) /* "rank 1 on node 0 (...) raised ValueError: x, exited with code 1" */
>>>

@ python.env_pythonpath_replaced
file: msrun/workers.c
test: ^python_noenv$
<<<
            snprintf(value, len, "%s:%s", pydir, old);
===
            snprintf(value, len, "%s", pydir);
>>>

@ python.foreign_world_size_ignored
file: rendezvous/client.c
test: ^test_singleton$
<<<
    if (singleton && init_check_foreign())
===
    if (!singleton && init_check_foreign())
>>>

@ python.bf16_tensor_refused
file: python/msrun/_buffers.py
test: ^python_torch_np2$
<<<
        obj, implied = bits, BF16
===
        implied = BF16
>>>

@ install.deb_not_split
file: cmake/MsrunInstall.cmake
test: ^it_deb$
<<<
set(CPACK_DEB_COMPONENT_INSTALL ON)
===
set(CPACK_DEB_COMPONENT_INSTALL OFF)
>>>

# ---- safetensors (model/safetensors.c, programs/train_gpt/train_gpt_st.c)
@ safetensors.zero3_shards_not_loaded
file: programs/train_gpt/train_gpt_st.c
test: ^test_parallel_safetensors_cli$
<<<
        if (read_st == MSR_OK)
            msr_dp_load_piece(tr->dp, &piece);
===
        if (read_st == MSR_OK && own.n == 0)
            msr_dp_load_piece(tr->dp, &piece);
>>>

@ safetensors.experts_from_every_replica
file: programs/train_gpt/train_gpt_st_export.c
test: ^test_parallel_safetensors_cli$
<<<
    return tr->model->moe != NULL && (mesh == NULL || mesh->cp_rank == 0) && tr->rep_rank == 0;
===
    return tr->model->moe != NULL && (mesh == NULL || mesh->cp_rank == 0) && tr->rep_rank >= 0 &&
           (mesh == NULL || mesh->dp_rank == 0);
>>>

@ safetensors.overlap_accepted
file: model/safetensors.c
test: ^test_parallel_safetensors$
<<<
        if (o[i]->begin != at)
===
        if (o[i]->begin > at)
>>>

@ safetensors.header_length_one_past
file: model/safetensors_io.c
test: ^test_parallel_safetensors$
<<<
    if (n > size - 8)
===
    if (n > size - 7)
>>>

@ safetensors.bf16_bytes_swapped
file: model/safetensors_io.c
test: ^test_parallel_safetensors$
<<<
    uint32_t u = (uint32_t)b[0] << 16 | (uint32_t)b[1] << 24;
===
    uint32_t u = (uint32_t)b[1] << 16 | (uint32_t)b[0] << 24;
>>>

@ safetensors.byte_count_unchecked
file: model/safetensors.c
test: ^test_parallel_safetensors$
<<<
        if (t[i].end - t[i].begin != bytes)
===
        if (t[i].end - t[i].begin != bytes && t[i].begin > t[i].end)
>>>

@ safetensors.duplicate_names_accepted
file: model/safetensors.c
test: ^test_parallel_safetensors$
<<<
        if (strcmp(o[i]->name, o[i - 1]->name) == 0)
===
        if (strcmp(o[i]->name, o[i - 1]->name) == 0 && i < 0)
>>>

@ safetensors.tp_slice_placed_as_whole
file: programs/train_gpt/train_gpt_st.c
test: ^test_parallel_safetensors_cli$
<<<
        uint64_t first = msr_gpt_tensor_full_index(t, i * cols) - t->full_offset;
===
        uint64_t first = i * cols;
>>>

@ safetensors.foreign_tensor_accepted
file: programs/train_gpt/train_gpt_st.c
test: ^test_parallel_safetensors_cli$
<<<
        if (train_gpt_st_names_find(nm, all[i].name) < 0) {
===
        if (train_gpt_st_names_find(nm, all[i].name) < 0 && i < 0) {
>>>

@ safetensors.zero3_segment_misplaced
file: programs/train_gpt/train_gpt_st_export.c
test: ^test_parallel_ckpt_export$
<<<
    s->st = write_tensors(&tr->cfg.model, t, nt, offset, offset + n, p - offset, NULL, s->experts,
===
    s->st = write_tensors(&tr->cfg.model, t, nt, offset, offset + n, p, NULL, s->experts,
>>>

@ train_experts.each_block_misplaced
file: parallel/train_experts.c
test: ^test_parallel_ckpt_export$
<<<
            st = fn(arg, at, dst, tr->ez_per);
===
            st = fn(arg, 0, dst, tr->ez_per);
>>>

@ safetensors.head_copy_not_synced
file: programs/train_gpt/train_gpt_st.c
test: ^test_parallel_safetensors_cli$
<<<
    if (tr->mp != NULL && (st = msr_mp_sync_tied(tr->mp)) != MSR_OK) {
===
    if (tr->mp != NULL && (st = MSR_OK) != MSR_OK) {
>>>

@ relay.no_flush_on_answer
file: cluster/relay.c
test: ^test_relay$
<<<
    else if (!b->flushing)
        batch_flush(b);
===
    else if (0)
        batch_flush(b);
>>>

@ relay.cancel_ignored
file: cluster/coord.c
test: ^test_relay$
<<<
    if (msr_coord_relay_cancel(c, call))
===
    if (0)
>>>

@ relay.node_twice_allowed
file: rendezvous/relay_check.c
test: ^test_relay$
<<<
        if (old != NULL) {
===
        if (0) {
>>>

@ relay.foreign_node_served
file: cluster/relay.c
test: ^test_relay$
<<<
    if (n != NULL && strcmp(n->relay, b->relay_id) != 0) {
===
    if (0) {
>>>

@ relay.subtree_unchecked
file: rendezvous/relay_check.c
test: ^test_relay$
<<<
    if (req->subtree > subtree_max || req->n_calls > req->subtree) {
===
    if (req->subtree > subtree_max) {
>>>

@ relay.levels_unbounded
file: rendezvous/relay_check.c
test: ^test_relay_tree$
<<<
    if ((uint64_t)req->depth + 1 + levels_above > MSR_RELAY_LEVELS_MAX) {
===
    if (0) {
>>>

@ relay.released_arrival_forgotten
file: rendezvous/store_released.c
test: ^test_relay_merge$|^test_store_core$
<<<
    return msr_map_get(&c->released.map, key) != NULL;
===
    return 0;
>>>

@ relay.all_withdrawn_arrival_counted
file: rendezvous/store_gather.c
test: ^test_relay_merge$
<<<
    if (gone >= weight) {
===
    if (gone > weight) {
>>>

@ relay.released_ring_whole_at_first
file: rendezvous/store_released.c
test: ^test_store_core$
<<<
    uint32_t cap = r->cap ? 2 * r->cap : MSR_BARRIER_RELEASED_FIRST;
===
    uint32_t cap = MSR_BARRIER_RELEASED_MAX;
>>>

@ relay.released_ring_in_local_store
file: rendezvous/store_released.c
test: ^test_store_core$
<<<
    if (client_id == 0 || request_id == 0 || c->ops.no_resends)
===
    if (client_id == 0 || request_id == 0)
>>>

@ relay.released_ring_grown_empty
file: rendezvous/store_released.c
test: ^test_store_core$
<<<
    if (r->n > 0)
        memcpy(ring, r->ring, 2 * (size_t)r->n * sizeof *ring);
===
    if (0)
        memcpy(ring, r->ring, 2 * (size_t)r->n * sizeof *ring);
>>>

@ relay.resend_answered_as_released
file: rendezvous/relay_merge.c
test: ^test_relay_merge$
<<<
        else if (resp != NULL && resp->resend)
===
        else if (0)
>>>

@ relay.early_withdrawal_refused
file: rendezvous/store_gather.c
test: ^test_relay_merge$|^test_store_core$
<<<
    if (released || sum != req->withdraw) {
===
    if (1) {
>>>

@ relay.withdrawn_part_noted_released
file: rendezvous/store_gather.c
test: ^test_relay_merge$
<<<
    for (size_t i = 0; i < req->n_parts; i++) /* not released with it */
===
    for (size_t i = req->n_parts; i < req->n_parts; i++)
>>>

@ relay.merge_over_answered_released
file: rendezvous/store_gather.c
test: ^test_relay_merge$|^test_store_core$
<<<
    r.over = 1;
===
    r.over = 0;
>>>

@ relay.lower_level_not_counted
file: rendezvous/relay_server.c
test: ^test_relay_tree$
<<<
        if (msr_relay_submit_from(s->relay, m, reqs[k], req->depth + 1, child_answered,
===
        if (msr_relay_submit_from(s->relay, m, reqs[k], req->depth, child_answered,
>>>

@ relay.same_node_in_one_batch
file: rendezvous/relay_batch.c
test: ^test_relay_tree$
<<<
        if ((e->method == MSR_RPC_PROGRESS) != progress || msr_map_get(&seen, e->key) != NULL)
===
        if ((e->method == MSR_RPC_PROGRESS) != progress)
>>>

@ relay.progress_beside_heartbeats
file: rendezvous/relay_batch.c
test: ^test_relay_rpc$
<<<
        if ((e->method == MSR_RPC_PROGRESS) != progress || msr_map_get(&seen, e->key) != NULL)
===
        if (progress < 0 || msr_map_get(&seen, e->key) != NULL)
>>>

@ relay.progress_mixed_accepted
file: rendezvous/relay_check.c
test: ^test_relay$
<<<
        if ((m == MSR_RPC_PROGRESS) != progress) {
===
        if (progress < 0) {
>>>

@ relay.progress_foreign_node
file: cluster/relay.c
test: ^test_relay$
<<<
    case MSR_RPC_PROGRESS:
        return ((const Msr__ProgressRequest *)req)->node_id;
===
    case MSR_RPC_PROGRESS:
        return NULL;
>>>

@ relay.batch_bound_off_by_one
file: rendezvous/relay_check.c
test: ^test_relay$
<<<
    if (req->n_calls == 0 || req->n_calls > MSR_RELAY_BATCH_MAX) {
===
    if (req->n_calls == 0 || req->n_calls >= MSR_RELAY_BATCH_MAX) {
>>>

@ relay.joined_through_not_recorded
file: cluster/members.c
test: ^test_relay$
<<<
    msr_coord_node_set_relay(c, n, c->relaying);
===
    msr_coord_node_set_relay(c, n, "");
>>>

@ relay.store_not_forwarded
file: rendezvous/relay_server.c
test: ^test_relay_store$
<<<
    if (msr_relay_method_forwarded(method)) {
===
    if (0 && msr_relay_method_forwarded(method)) {
>>>

@ relay.forward_cancel_not_passed_up
file: rendezvous/relay_server.c
test: ^test_relay_store$
<<<
        msr_rpc_async_cancel(&((forward_t *)nc)->async);
===
        (void)nc;
>>>

@ relay.stop_answers_cancelled
file: rendezvous/relay_server.c
test: ^test_relay_store$
<<<
        if (s->stopping && a->status == MSR_ERR_CANCELED)
===
        if (0 && s->stopping)
>>>

@ proxy.store_calls_not_through_relay
file: msrun/proxy_up.c
test: ^(test_relay_store|it_relay)$
<<<
    msr_rpc_channel_t *relay = p->relay_failed ? NULL : p->relay;
===
    msr_rpc_channel_t *relay = NULL;
>>>

@ proxy.dead_relay_kept
file: msrun/proxy_up.c
test: ^test_relay_store$
<<<
    if (!via_relay || a->status == MSR_OK || atomic_load(&p->stop))
===
    if (1 || !via_relay || a->status == MSR_OK || atomic_load(&p->stop))
>>>

@ elastic.join_hold_option_ignored
file: cluster/members.c
test: ^test_coord$
<<<
        c->join_hold_until = msr_now_ns() + (uint64_t)c->config.join_hold_ms * 1000000ull;
===
        c->join_hold_until = msr_now_ns() + (uint64_t)c->config.join_timeout_ms * 1000000ull;
>>>

@ elastic.join_time_not_saved
file: cluster/persist.c
test: ^test_coord$
<<<
    ps->join_wall_ns = c->join_wall_ns;
===
    ps->join_wall_ns = 0;
>>>

@ elastic.waiting_not_saved
file: cluster/generation.c
test: ^test_coord$
<<<
        msr_coord_key_changed(c, MSR_KEY_JOIN_WAITING);
===
        (void)0;
>>>

@ elastic.global_batch_cap_off_by_one
file: programs/train_gpt/train_gpt_elastic.c
test: ^test_parallel_train_gpt_meta$
<<<
g <= TRAIN_GPT_GLOBAL_BATCH_MAX ? (int64_t)g : 0;
===
g < TRAIN_GPT_GLOBAL_BATCH_MAX ? (int64_t)g : 0;
>>>

@ elastic.resume_ignores_saved_batch
file: programs/train_gpt/train_gpt_elastic.c
test: ^test_parallel_train_gpt_elastic$
<<<
    o->global_batch = G;
===
    (void)G;
>>>

@ train_gpt.meta_older_overflows_by_one
file: programs/train_gpt/train_gpt_elastic.c
test: ^test_parallel_train_gpt_meta$
<<<
        return n > 0 && (size_t)n < len;
===
        return n > 0 && (size_t)n <= len;
>>>

# ---- lined slots: each line's data carries its operation's number (issue 40)
@ comm.shm_slots.lined_last_line_unawaited
file: comm/ucx/shm_slots.c
test: ^comm_small_np3$
<<<
    size_t first = off / SHM_LINE_DATA, end = (off + len - 1) / SHM_LINE_DATA + 1;
===
    size_t first = off / SHM_LINE_DATA, end = (off + len - 1) / SHM_LINE_DATA;
>>>

# ---- two members: the peer's inline vector copied as its word shows it
@ comm.shm_slots.peer_copy_other_parity
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
    memcpy(r->slots.peer, data_of(s, p, k, in), in);
===
    memcpy(r->slots.peer, data_of(s, p, k + 1, in), in);
>>>

@ comm.shm_slots.peer_copy_unused
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
    return copied(r, j, in) ? r->slots.peer : data_of(s, j, k, in);
===
    return copied(r, j, in) ? data_of(s, r->me, k, in) : data_of(s, j, k, in);
>>>

@ comm.shm_slots.lined_fold_reversed
file: comm/ucx/shm_slots.c
test: ^comm_small_np3$
<<<
        fold_n(a, dst, lined_of(s, 0, k) + at, lined_of(s, 1, k) + at, count);
        for (int j = 2; j < r->n; j++)
            fold_n(a, dst, dst, lined_of(s, j, k) + at, count);
===
        fold_n(a, dst, lined_of(s, r->n - 1, k) + at, lined_of(s, r->n - 2, k) + at, count);
        for (int j = r->n - 3; j >= 0; j--)
            fold_n(a, dst, dst, lined_of(s, j, k) + at, count);
>>>

@ comm.shm_slots.lined_fold_reads_word
file: comm/ucx/shm_slots.c
test: ^comm_small_np3$
<<<
        size_t c = SHM_LINE_DATA - at % LINE;
===
        size_t c = LINE - at % LINE;
>>>

# ---- small broadcasts through the slots' ring (comm/ucx/shm_slots.c)
@ comm.shm_slots.bcast_root_unguarded
file: comm/ucx/shm_slots.c
test: ^comm_bcast_ahead_np8$
<<<
    return r->me != a->root || last == 0 || last < s->ring_seen || ring_readers_past(s, r, last);
===
    return 1 || r->me != a->root || last == 0 || last < s->ring_seen || ring_readers_past(s, r, last);
>>>

@ comm.shm_slots.bcast_root_trusts_stale_seen
file: comm/ucx/shm_slots.c
test: ^comm_bcast_stress_np8$
<<<
    s->ring_seen = least;
===
    s->ring_seen = UINT64_MAX;
>>>

@ comm.shm_slots.bcast_ignores_shared_slots
file: comm/ucx/shm_slots.c
test: ^comm_bcast_stress_np8$
<<<
    if (s->data_op[p] > last)
===
    if (0 && s->data_op[p] > last)
>>>

@ comm.shm_slots.bcast_ignores_other_stride
file: comm/ucx/shm_slots.c
test: ^comm_bcast_stress_np8$
<<<
    if (s->ring_other[p] > last)
===
    if (0 && s->ring_other[p] > last)
>>>

@ comm.shm_slots.bcast_lined_root_one_early
file: comm/ucx/shm_slots.c
test: ^comm_bcast_ahead_np8$
<<<
        last = k > SHM_BCAST_LINES ? k - SHM_BCAST_LINES : 0;
===
        last = k > SHM_BCAST_LINES + 1 ? k - SHM_BCAST_LINES - 1 : 0;
>>>

@ comm.shm_slots.bcast_lined_reader_does_not_wait
file: comm/ucx/shm_slots.c
test: ^comm_bcast_stress_np2$
<<<
        seen &= w[i] == k;
===
        seen &= w[i] + 999 >= k;
>>>

@ members.lost_while_forming_no_form
file: cluster/members.c
test: ^fault_etcd_elastic$
<<<
         * re-form waited for the last call's end (or the join timeout) */
        msr_coord_try_form(c);
===
         * re-form waited for the last call's end (or the join timeout) */
>>>

# ---- token data, epochs and validation (docs/model.md "Token data")
@ tokens.count_short_ok
file: model/data_tokens.c
test: ^test_parallel_data_tokens$
<<<
    if (count <= 0 || (uint64_t)count * (uint64_t)width != body) {
===
    if (count <= 0 || (uint64_t)count * (uint64_t)width > body) {
>>>

@ tokens.vocab_off_by_one
file: model/data_tokens.c
test: ^test_parallel_data_tokens$
<<<
        if (t >= V || t < 0) { /* a uint32 token past INT_MAX reads negative */
===
        if (t > V || t < 0) { /* a uint32 token past INT_MAX reads negative */
>>>

@ tokens.perm_identity
file: model/data_tokens.c
test: ^test_parallel_data_tokens$
<<<
        uint64_t f = msr_rng_u64(seed, PERM_STREAM + epoch * PERM_ROUNDS + round, r) & mask;
===
        uint64_t f = msr_rng_u64(seed, PERM_STREAM + epoch * PERM_ROUNDS + round, r) & mask & 0;
>>>

@ tokens.epochs_ignored
file: model/data_tokens.c
test: ^test_parallel_data_tokens$
<<<
    if (!ds->epochs)
===
    if (1)
>>>

@ tokens.eval_rows_twice
file: parallel/eval.c
test: ^test_parallel_train_gpt_tokens$
<<<
    for (uint64_t c = (uint64_t)rank; c < chunks && st == MSR_OK; c += (uint64_t)size) {
===
    for (uint64_t c = (uint64_t)rank % 1; c < chunks && st == MSR_OK; c += (uint64_t)size / (uint64_t)size) {
>>>

@ tokens.moe_eval_micro_batch
file: parallel/eval.c
test: ^test_parallel_train_gpt_tokens$
<<<
    int chunk = tr->cfg.model.moe.experts > 0 ? 1 : B;
===
    int chunk = tr->cfg.model.moe.experts > 0 ? B : B;
>>>

@ tokens.meta_without_epochs
file: programs/train_gpt/train_gpt_run.c
test: ^test_parallel_train_gpt_tokens$
<<<
        snprintf(meta + used, len - used, "; epochs");
===
        (void)used;
>>>

@ offload.crc_unchecked
file: parallel/offload.c
test: ^test_parallel_offload$
<<<
    if (crc == off->crc[k])
===
    if (1 || crc == off->crc[k])
>>>

@ offload.short_read_taken
file: parallel/offload.c
test: ^test_parallel_offload$
<<<
    if (err != 0 || done != off->chunk_bytes)
===
    if (err != 0)
>>>

@ offload.restore_whole_flat
file: parallel/dp_params.c
test: ^test_parallel_train_gpt_offload_zero$
<<<
    if (!read) /* a restore: its pieces fill a block at a time */
===
    if (0 && !read) /* a restore: its pieces fill a block at a time */
>>>

@ offload.restore_block_not_gathered
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_zero$
<<<
            st = msr_dp_params_gather_range(dp, a, b, dp->pload_buf);
===
            st = MSR_OK;
>>>

@ offload.zero_unit_skipped
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload$
<<<
        if (u->own_n == 0 || a >= b)
===
        if (u->own_n == 0 || a >= b || k == 1)
>>>

@ offload.snapshot_moments_not_streamed
file: parallel/train_ckpt.c
test: ^test_parallel_ckpt_stream$
<<<
            st = saved_moments_get(tr, x, (size_t)at, c, m, m + c);
===
            (void)m;
>>>

@ offload.restore_moments_not_put
file: parallel/dp_pieces.c
test: ^test_parallel_ckpt_dp_cover$
<<<
    msr_status_t st = msr_offload_put(dp->offload, mo + (a - lo), e - a, piece->m + (a - piece->lo),
                                      piece->v + (a - piece->lo));
===
    msr_status_t st = MSR_OK;
>>>

@ offload.restore_put_error_dropped
file: parallel/dp_pieces.c
test: ^test_parallel_ckpt_dp_cover$
<<<
    if (st != MSR_OK)
        dp->cover->io_st = st;
    else
        mark(dp, a, e - a, COVER_MOMENTS);
===
    (void)st;
    mark(dp, a, e - a, COVER_MOMENTS);
>>>

@ offload.range_put_not_written
file: parallel/offload.c
test: ^test_parallel_offload$
<<<
            put_chunk(off, 0, k);
            st = slot_wait(off, 0);
===
            off->crc[k] = msr_crc32(0, off->buf[0], off->chunk_bytes);
>>>

@ offload.restore_not_written_back
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_ckpt$
<<<
    msr_status_t wst = msr_dp_offload_drop(tr->dp, st == MSR_OK);
===
    msr_status_t wst = msr_dp_offload_drop(tr->dp, 0);
>>>

@ crc32.combine_fast_table_shifted
file: base/crc32.c
test: ^test_crc32$
<<<
            fast_table[t][i] = gf2_mulmod(fast, i << (8 * t));
===
            fast_table[t][i] = gf2_mulmod(fast, i << (8 * t) >> 1);
>>>

@ ckpt.chunks_ok.last_chunk_skipped
file: parallel/ckpt.c
test: ^test_parallel_ckpt$
<<<
        msr_tckpt_chunks_crc(crcs, r->n, 0, 3 * msr_tckpt_chunks(r->n)), 12 * r->n);
===
        msr_tckpt_chunks_crc(crcs, r->n, 0, 3 * msr_tckpt_chunks(r->n) - 1), 12 * r->n);
>>>

@ ckpt.encode.m_chunks_over_params
file: parallel/ckpt.c
test: ^test_parallel_ckpt$
<<<
    crc = array_crc(crc, m, n, table + 4 * k);
===
    crc = array_crc(crc, m, n, table);
>>>

@ ckpt.read_part.run_unchecked
file: parallel/train_ckpt_read.c
test: ^(test_parallel_ckpt_read_crc|test_parallel_reshard_dense)$
<<<
        if (got != msr_tckpt_chunks_crc(crcs, r->n, x, e)) {
===
        if (got != msr_tckpt_chunks_crc(crcs, r->n, x, e) && got == 0xdeadbeefu) {
>>>

@ ckpt.read_part.chunks_ok_skipped
file: parallel/train_ckpt_read.c
test: ^(test_parallel_ckpt_read_crc|test_parallel_reshard_dense)$
<<<
        if (crcs != NULL && !msr_tckpt_chunks_ok(&p->h, &r, crcs)) {
===
        if (crcs != NULL && !msr_tckpt_chunks_ok(&p->h, &r, crcs) && r.n == 0) {
>>>

@ ckpt.read_whole.chunks_unchecked
file: parallel/train_ckpt_read.c
test: ^test_parallel_ckpt_read_crc$
<<<
        st = msr_train_ckpt_chunks_check(tr, map, p, src, rank);
===
        st = ((void)msr_train_ckpt_chunks_check, MSR_OK);
>>>

@ ckpt.share.received_unmarked
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
    if (it->in_place) {
        msr_dp_load_mark(s->tr->dp, c->local, it->r.n);
===
    if (it->in_place) {
        if (mine)
            msr_dp_load_mark(s->tr->dp, c->local, it->r.n);
>>>

@ ckpt.share.buffered_unapplied
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
    msr_train_ckpt_apply(s->tr, s->map, &one, NULL);
===
    if (mine)
        msr_train_ckpt_apply(s->tr, s->map, &one, NULL);
>>>

@ ckpt.share.piece_unchecked
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
        *read_st = msr_train_ckpt_piece_check(s->tr, s->map, it->p, it->file, &it->r, c->crc);
===
        *read_st = msr_train_ckpt_piece_check(s->tr, s->map, it->p, it->file, &it->r, it->r.crc);
>>>

@ ckpt.share.segment_offset
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
        uint64_t off = it->r.offset + ((uint64_t)c->a * n + c->o) * sizeof(float);
===
        uint64_t off = it->r.offset + ((uint64_t)c->a * n) * sizeof(float);
>>>

@ ckpt.share.table_chunks_unchecked
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
            read_st = msr_train_ckpt_chunks_check(tr, map, p0, src, first);
===
            read_st = ((void)msr_train_ckpt_chunks_check, MSR_OK);
>>>

@ ckpt.share.split_to_first
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
            while (q + 1 < s->size && done * (size_t)s->size >= bytes * (size_t)(q + 1))
===
            while (q + 1 < s->size && done * (size_t)s->size >= bytes * (size_t)(q + 1) && 0)
>>>

@ ckpt.share.batch_unpacked_by_reader_only
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
    for (int64_t k = c->j; k < e && (!mine || *read_st == MSR_OK); at += 3 * it[k++].r.n) {
===
    for (int64_t k = c->j; k < e && (mine && *read_st == MSR_OK); at += 3 * it[k++].r.n) {
>>>

@ ckpt.share.batch_unchecked
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
                : msr_train_ckpt_piece_check(s->tr, s->map, it[k].p, it[k].file, &it[k].r, crc);
===
                : msr_train_ckpt_piece_check(s->tr, s->map, it[k].p, it[k].file, &it[k].r, it[k].r.crc);
>>>

@ ckpt.share.never
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
    if (st == MSR_OK && can) {
===
    if (st == MSR_OK && can && 0) {
>>>

@ ckpt.share.never_resharded
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
        *ok_p = st == MSR_OK && can;
===
        *ok_p = st == MSR_OK && can && 0;
>>>

@ dp.load_needs.params_own_only
file: parallel/dp_pieces.c
test: ^test_parallel_reshard_dense$
<<<
            need(fn, arg, 0, lo, n, u->lo, u->n);
===
            need(fn, arg, 0, lo, n, u->own_lo, u->own_n);
>>>

@ ckpt.save.chunk_crc_not_kept
file: parallel/train_ckpt_save.c
test: ^test_parallel_reshard_dense$
<<<
            memcpy(s->table + s->table_at, &s->chunk_crc, 4);
===
            memset(s->table + s->table_at, 0, 4);
>>>

@ ckpt.stream_piece_crc_not_set
file: parallel/train_ckpt_save.c
test: ^test_parallel_ckpt_stream$
<<<
        msr_tckpt_head_set_crc(s->head, s->hl, s->n, j, s->crc);
===
        (void)s->crc;
>>>

@ ckpt.stream_moments_not_read
file: parallel/train_ckpt_save.c
test: ^test_parallel_ckpt_stream$
<<<
        st = saved_moments_get(s->tr, x, (size_t)at, c, s->mv, s->mv + c);
===
        memset(s->mv, 0, 2 * c * sizeof(float));
>>>

@ ckpt.stream_blocks_not_read
file: parallel/dp_offload.c
test: ^test_parallel_ckpt_stream$
<<<
    if (q < a || q >= a + count * sizeof(float)) /* not the blocks' buffer: in place */
===
    if (q < a || q >= a + count * sizeof(float) || q != 0)
>>>

@ ckpt.writer_head_not_in_crc
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_stream$
<<<
        crc = msr_crc32_combine(msr_crc32(0, head, w->head_len), w->crc, w->len);
===
        crc = w->crc;
>>>

@ ckpt.save_fail.verdict_ignored
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_save_fail$
<<<
        if (st == MSR_OK)
            continue;
        int e = (int)(int64_t)v[V_ERRNO];
===
        if (st == MSR_OK || r >= 0)
            continue;
        int e = (int)(int64_t)v[V_ERRNO];
>>>

@ ckpt.save_fail.commit_not_agreed
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_save_fail$
<<<
    if ((st = save_agree(w, 0, 0, "commit", 1, NULL)) == MSR_OK)
===
    if (st == MSR_OK)
>>>

@ ckpt.save_fail.file_kept
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_save_fail$
<<<
    snprintf(path, sizeof path, "%s/rank-%d.bin", w->sd, rank);
    unlink(path);
===
    snprintf(path, sizeof path, "%s/rank-%d.bin", w->sd, rank);
>>>

@ offload_acts.read_ahead_ascending
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_offload_acts$
<<<
    for (int i = layers - 1; i >= MSR_MAX(layers - MSR_ACTS_AHEAD, 0) && st == MSR_OK; i--)
===
    for (int i = 0; i < MSR_MIN(MSR_ACTS_AHEAD, layers) && st == MSR_OK; i++)
>>>

@ offload_acts.crc_unchecked
file: parallel/offload_acts.c
test: ^test_parallel_train_gpt_offload_acts$
<<<
    if ((st = check_crc(a, k, a->buf[s])) != MSR_OK) {
===
    if (0 && (st = check_crc(a, k, a->buf[s])) != MSR_OK) {
>>>

@ offload_acts.recompute_output_stale
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_offload_acts$
<<<
    if (out != NULL)
        f->layers[i].res3 = out;
===
    if (out != NULL && i < 0)
        f->layers[i].res3 = out;
>>>

@ wchan.frame_bound
file: rendezvous/wchan_server.c
test: ^test_wchan$
<<<
    if (h.len > limit) {
===
    if (h.len >= limit) {
>>>

@ wchan.conn_bound
file: rendezvous/wchan_server.c
test: ^test_wchan$
<<<
    if (s->nconns < s->max_conns && (c = msr_calloc(1, sizeof *c)) != NULL) {
===
    if (s->nconns <= s->max_conns && (c = msr_calloc(1, sizeof *c)) != NULL) {
>>>

@ wchan.token_unchecked
file: rendezvous/wchan_server.c
test: ^test_wchan$
<<<
    return diff == 0;
===
    return diff == 0 || 1;
>>>


@ ckpt.commit_agree.drop_unknown
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_save_fail$
<<<
    if (st != MSR_OK && committed && !known && w->st == MSR_OK)
===
    if (st != MSR_OK && committed && !known && w->st == MSR_OK && 0)
>>>

@ ckpt.commit_agree.mismatch_unknown
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_save_fail$
<<<
        *known_p = st == MSR_ERR_INVALID_ARG; /* msr_allgather: the lengths differ */
===
        *known_p = 0;
>>>

@ ps.reshard.only_same_rank
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
        if ((uint64_t)s % g == (uint64_t)ps->role_rank % g)
===
        if ((uint64_t)s % g == (uint64_t)ps->role_rank % g && s == ps->role_rank)
>>>

@ ps.reshard.missing_ckpt_taken
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
    if (f == NULL && errno == ENOENT && d->gen > 0) /* a reshard wrote every one */
===
    if (f == NULL && errno == ENOENT && d->gen > 0 && 0) /* a reshard wrote every one */
>>>

@ ps.reshard.logs_unseen
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
    msr_status_t st = old_logs_seen(ps, old);
===
    msr_status_t st = MSR_OK;
    (void)old_logs_seen;
>>>

@ ps.reshard.new_workers
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
    sh.workers = (int)old->workers;
===
    sh.workers = ps->workers;
>>>

@ ps.reshard.no_wait
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
    if (st == MSR_OK)
        st = reshard_wait(ps, now.gen);
===
    if (st == MSR_OK && 0)
        st = reshard_wait(ps, now.gen);
>>>

@ ps.reshard.row_of
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
        uint64_t r = j * old_servers + s;
===
        uint64_t r = j * old_servers + s * 0;
>>>

@ ps.reshard.state_dropped
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
        if (t->steps)
            t->steps[i] = o->steps[j];
===
        if (t->steps && 0)
            t->steps[i] = o->steps[j];
>>>

@ ps.reshard.keep_previous
file: ps/ps_durable.c
test: ^test_ps_reshard$
<<<
            generations_drop(ps, l.gen ? l.gen - 1 : 0, l.gen);
===
            generations_drop(ps, l.gen, l.gen);
>>>

@ ps.reshard.same_only_servers
file: ps/ps_durable.c
test: ^ps_reshard$
<<<
    int same =
        st == MSR_OK && l.servers == (uint64_t)ps->servers && l.workers == (uint64_t)ps->workers;
===
    int same = st == MSR_OK && l.servers == (uint64_t)ps->servers;
>>>

@ ps.sync_step_unlogged
file: ps/ps_server.c
test: ^ps_durable_sync$
<<<
    if (ps->durable && t->ntouched > 0 &&
===
    if (0 && ps->durable && t->ntouched > 0 &&
>>>

@ ps.fsync_every_off_by_one
file: ps/ps_durable.c
test: ^ps_fsync$
<<<
    if (d->sync_every && ++d->unsynced >= d->sync_every) {
===
    if (d->sync_every && ++d->unsynced > d->sync_every) {
>>>

@ ps.log_magic_unchecked
file: ps/ps_durable.c
test: ^ps_fsync$
<<<
        if (magic == LOG_MAGIC)
===
        if (magic == LOG_MAGIC || 1)
>>>

# ---- a resume whose load failed part way (issue 41, docs/checkpoint.md)
@ resume.fallback_skips_reload
file: programs/train_gpt/train_gpt_resume.c
test: ^test_parallel_ckpt_partial$
<<<
            st = restore_step(t, job, o, meta, same, job->world, 1, &f);
===
            st = MSR_OK;
>>>

@ resume.damaged_only_step_starts_over
file: programs/train_gpt/train_gpt_resume.c
test: ^test_parallel_ckpt_partial$
<<<
        any = same;
    }
===
        any = same;
        if (same < 0)
            return MSR_OK;
    }
>>>

@ store.num_keys_off_by_one
file: rendezvous/store_kv.c
test: ^(test_store_core|test_num_keys)$
<<<
    r.keys = c->store.count;
===
    r.keys = c->store.count + 1;
>>>

@ client.num_keys_old_coordinator_unchecked
file: rendezvous/client_store.c
test: ^test_num_keys$
<<<
    msr_status_t st = coordinator_counts(ctx);
===
    msr_status_t st = MSR_OK;
    (void)coordinator_counts;
>>>

@ rpc.unknown_never_requested
file: rendezvous/rpc_server.c
test: ^test_rpc_unknown$
<<<
    msr_rpc_unknown_start(s->unknown);
===
    (void)msr_rpc_unknown_start;
>>>

@ rpc.unknown_request_not_reposted
file: rendezvous/rpc_unknown.c
test: ^test_rpc_unknown$
<<<
    if (!atomic_load(&u->stopped))
        unknown_post(u);
===
    if (!atomic_load(&u->stopped) && 0)
        unknown_post(u);
>>>

@ rpc.unknown_token_unchecked
file: rendezvous/rpc_unknown.c
test: ^test_rpc_unknown$
<<<
    if (!msr_rpc_token_matches(u->token, &c->md)) {
===
    if (0) {
>>>

@ comm.anysrc.sender_wrong_bits
file: comm/ucx/ucx_impl.h
test: ^comm_anysrc_np3$
<<<
    return (int)((tag >> UCX_TAG_SRC_SHIFT) & ((1ull << UCX_TAG_SRC_BITS) - 1));
===
    return (int)((tag >> (UCX_TAG_SRC_SHIFT + 1)) & ((1ull << UCX_TAG_SRC_BITS) - 1));
>>>

@ comm.anysrc.sender_as_job_rank
file: comm/ucx/coll_rounds.c
test: ^comm_anysrc_np4$
<<<
        *a->src = ucx_tag_src(r->ops[0].sender_tag);
===
        *a->src = r->uc->comm->world_ranks[ucx_tag_src(r->ops[0].sender_tag)];
>>>

@ comm.p2p.recv_completed_at_once
file: comm/ucx/coll_ops.c
test: ^comm_p2p_np3$
<<<
    int p2p = (tag >> 62) == UCX_TAG_P2P;
===
    int p2p = 0;
>>>

@ comm.anysrc.cut_names_no_sender
file: comm/ucx/coll_ops.c
test: ^comm_anysrc_np3$
<<<
            peer = ucx_tag_src(info.sender_tag);
===
            peer = -1;
>>>

@ comm.p2p.shorter_message_taken
file: comm/ucx/coll_ops.c
test: ^comm_p2p_np3$
<<<
    else if (op->recv && info.length != op->len)
===
    else if (op->recv && info.length > op->len)
>>>

@ relay.direct_heartbeat_keeps_relay
file: cluster/members.c
test: ^test_relay_tree$
<<<
    if (n->relay[0] && c->relaying[0] == '\0') {
===
    if (0) {
>>>

@ relay.idle_lower_relay_kept
file: rendezvous/relay_server.c
test: ^test_relay_tree$
<<<
    if (strcmp(why, MSR_RELAY_NO_MEMORY) == 0 || lower_reclaim(s) == 0)
===
    if (strcmp(why, MSR_RELAY_NO_MEMORY) == 0 || 1 || lower_reclaim(s) == 0)
>>>

@ relay.merged_withdraw_ignored
file: rendezvous/store_gather.c
test: ^test_relay_merge$
<<<
    b->arrived -= req->withdraw;
===
    (void)0;
>>>

@ relay.merged_stop_cancelled
file: rendezvous/relay_group.c
test: ^test_relay_merge$
<<<
    if (s->stopping && a->status == MSR_ERR_CANCELED) {
===
    if (a == NULL) {
>>>

@ relay.merged_add_delta_of_its_own
file: rendezvous/relay_add.c
test: ^test_relay_add$
<<<
    r.delta = 0;
===
    r.delta = pp[0]->delta;
>>>

@ relay.merged_add_part_not_deduped
file: rendezvous/store_kv.c
test: ^(test_relay_add|test_coord)$
<<<
    if (seen != 0)
        return seen > 0;
===
    if (seen < 0)
        return 0;
>>>

@ python.wait_change_delete_raises
file: python/msrun/_context.py
test: ^python_api_np2$
<<<
        if st == _NOT_FOUND and old is not None:
===
        if False:
>>>

@ comm.anysrc.lost_peer_not_failed
file: comm/ucx/engine_fail.c
test: ^comm_killanysrc_np3$
<<<
        if (r->uc == uc) /* the message says which operation it ended */
===
        if (r->uc == uc && !r->pub.args.any)
>>>

@ moe.device.load_counts_on_the_device
file: model/moe.c
test: ^test_parallel_ep_device$
<<<
           w == MSR_MOE_WORK_USED || w == MSR_MOE_WORK_GCHOICE || w == MSR_MOE_WORK_LOAD;
===
           w == MSR_MOE_WORK_USED || w == MSR_MOE_WORK_GCHOICE;
>>>

@ moe.device.host_table_freed_as_the_devices
file: model/moe.c
test: ^test_parallel_moe_device$|^test_parallel_ep_device$
<<<
    if (work_on_host(w))
        msr_device_host_free(moe->dev, p);
===
    if (work_on_host(w) && 0)
        msr_device_host_free(moe->dev, p);
>>>

@ train.model_buffers_off_the_device
file: parallel/train.c
test: ^test_parallel_ep_device$
<<<
    st = msr_gpt_create_on(model_device(cfg->mp.device), &cfg->model, &part, 0,
===
    st = msr_gpt_create_on(NULL, &cfg->model, &part, 0,
>>>

@ model.buffers_freed_to_the_heap
file: model/gpt.c
test: ^test_parallel_moe_device$
<<<
    if (m->dev == NULL)
        msr_free(p);
===
    if (m->dev != (void *)1)
        msr_free(p);
>>>

@ model.kernels.moe_dispatch_past_table
file: model/moe_pass.c
test: ^test_parallel_kernels$|^test_parallel_ep_device$
<<<
    k->moe_dispatch(moe->send, x, s->row, N, K, C);
===
    msr_moe_dispatch(moe->send, x, s->row, N, K, C);
>>>

@ model.kernels.moe_route_backward_past_table
file: model/moe_pass.c
test: ^test_parallel_kernels$|^test_parallel_ep_device$
<<<
    k->moe_route_backward(moe->dprobs, moe->dgate, s->probs, s->gate, s->choice, s->frac, daux, N,
                          E, K, moe->glu);
===
    msr_moe_route_backward(moe->dprobs, moe->dgate, s->probs, s->gate, s->choice, s->frac, daux, N,
                          E, K, moe->glu);
>>>

@ moe.dispatch_row_of_other_tp_rank
file: model/moe_pass.c
test: ^test_parallel_train_gpt_moe$
<<<
            if (q < 0)
                continue;
            filled[q] = mine[e];
===
            if (q < 0) {
                s->row[tj] = slot;
                continue;
            }
            filled[q] = mine[e];
>>>

@ moe.device.layout_device_ignored
file: model/moe.c
test: ^test_parallel_moe_device$|^test_parallel_ep_device$
<<<
    const msr_device_t *dev = lay->device != NULL ? lay->device : msr_device_cpu();
===
    const msr_device_t *dev = msr_device_cpu();
>>>

@ comm.waiting.beside_oversubscribed
file: comm/ucx/engine.c
test: ^it_bind$
<<<
    int beside = !oversubscribed && msr_env_i64("MSR_COMM_BESIDE_COMPUTE", 0, 0, 1);
===
    int beside = msr_env_i64("MSR_COMM_BESIDE_COMPUTE", 0, 0, 1);
>>>

@ comm.waiting.beside_no_poll
file: comm/ucx/engine.c
test: ^it_bind$
<<<
    int64_t spin_us = oversubscribed ? 0 : beside ? 1000 : 20000;
===
    int64_t spin_us = oversubscribed || beside ? 0 : 20000;
>>>

@ comm.drain.after_close
file: comm/ucx/engine.c
test: ^comm_unreceived_np3$
<<<
    drain_messages(e, 0, 0, e->saw_loss, deadline, &notices, &others);
    close_endpoints(e);
===
    close_endpoints(e);
    drain_messages(e, 0, 0, 0, deadline, &notices, &others);
>>>

@ comm.drain.leaves_long
file: comm/ucx/engine.c
test: ^comm_unreceived_np3$
<<<
    drain_messages(e, 0, 0, e->saw_loss, deadline, &notices, &others);
===
    drain_messages(e, 0, 0, 1, deadline, &notices, &others);
>>>

@ comm.drain.notices_only
file: comm/ucx/engine.c
test: ^comm_make_oom$
<<<
    if (length <= DRAIN_EAGER_BYTES)
        return 0;
===
    if ((tag >> 62) == UCX_TAG_CTRL && length > 0)
        return 0;
    if (tag >> 62 != 9)
        return 1;
>>>

@ comm.dup_own.addresses_through_store
file: comm/ucx/comm_ucx.c
test: ^comm_make_oom$
<<<
        if (flags & MSR_COMM_SPLIT_DUP) /* its addresses over comm, no store */
===
        if (0)
>>>

@ rpc.close.watch_held
file: rendezvous/rpc_server.c
test: ^test_rpc$
<<<
    if (c->owned) /* held: it stays valid on the hold's reference */
        call_watch_close(c);
===
    if (c->owned) /* held: it stays valid on the hold's reference */
        (void)call_watch_close;
>>>

@ store.limits.for_job
file: rendezvous/store_core_impl.h
test: ^test_store_core$
<<<
    if (n != UINT32_MAX && n > c->ranks) {
===
    if (n != UINT32_MAX && n > c->ranks && 0) {
>>>

@ store.limits.shrink
file: rendezvous/store_core_impl.h
test: ^test_store_core$
<<<
    if (n != UINT32_MAX && n > c->ranks) {
===
    if (n != UINT32_MAX && n != c->ranks) {
>>>

@ ckpt.snap.gate_after_update
file: parallel/train.c
test: ^test_parallel_ckpt_snap$
<<<
    msr_train_gate(tr); /* the state is written from here on */
    st = msr_dp_update(dp, lr, c->grad_clip, loss_sum, &total, &norm);
===
    st = msr_dp_update(dp, lr, c->grad_clip, loss_sum, &total, &norm);
    msr_train_gate(tr); /* the state is written from here on */
>>>

@ ckpt.snap.restore_ungated
file: parallel/train_ckpt.c
test: ^test_parallel_ckpt_snap$
<<<
    msr_train_gate(tr);
    msr_status_t st = msr_dp_offload_hold(tr->dp, 0, tr->cfg.par.zero == 0);
===
    msr_status_t st = msr_dp_offload_hold(tr->dp, 0, tr->cfg.par.zero == 0);
>>>

@ ckpt.snap.offloaded_copied
file: parallel/train_ckpt_save.c
test: ^test_parallel_ckpt_snap$
<<<
    if (s->l.offloaded || msr_dp_params_block_floats(tr->dp) > 0 || tr->epf != NULL) {
===
    if (msr_dp_params_block_floats(tr->dp) > 0 || tr->epf != NULL) {
>>>

@ ckpt.snap.params_copied
file: parallel/train_ckpt_save.c
test: ^test_parallel_ckpt_snap$
<<<
    if (s->l.offloaded || msr_dp_params_block_floats(tr->dp) > 0 || tr->epf != NULL) {
===
    if (s->l.offloaded || tr->epf != NULL) {
>>>

@ ckpt.snap.shared_read_unchecked
file: parallel/offload_acts.c
test: ^test_parallel_ckpt_snap$
<<<
        return msr_offload_io_error(a->path, 0, a->what, k, done, a->slot, err);
    return check_crc(a, k, buf);
===
        return msr_offload_io_error(a->path, 0, a->what, k, done, a->slot, err);
    return MSR_OK;
>>>

@ ckpt.snap.read_done_early
file: parallel/train_ckpt_save.c
test: ^test_parallel_ckpt_snap$
<<<
    uint32_t j = 0;
    for (size_t k = 0; k < l->n && st == MSR_OK; k++)
===
    uint32_t j = 0;
    if (done != NULL)
        done(arg), done = NULL;
    for (size_t k = 0; k < l->n && st == MSR_OK; k++)
>>>

@ ckpt.snap.read_done_skipped_on_failure
file: parallel/train_ckpt_save.c
test: ^test_parallel_ckpt_snap$
<<<
    if (done != NULL)
        done(arg);
===
    if (done != NULL && st == MSR_OK)
        done(arg);
>>>

@ ckpt.share.tp_never
file: parallel/train_ckpt.c
test: ^test_parallel_ckpt_share$
<<<
        group = tr->mesh->tp_comm;
===
        group = NULL;
>>>

@ ckpt.share.overlap_ignored
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
                      (double)alone >= SHARE_OVERLAP * (double)bytes;
===
                      (double)alone >= 0 * SHARE_OVERLAP * (double)bytes;
>>>

@ ckpt.share.union_local
file: parallel/train_ckpt_share.c
test: ^test_parallel_ckpt_share$
<<<
        st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, flags, 2 * (uint64_t)total, MSR_DTYPE_I32,
                                MSR_OP_MAX);
===
        st = msr_comm_allreduce(s->comm, MSR_IN_PLACE, flags, 2 * (uint64_t)total, MSR_DTYPE_I32,
                                MSR_OP_MIN);
>>>

@ ckpt.writer.parts_crc_from_last
file: rendezvous/checkpoint.c
test: ^test_parallel_ckpt_stream$
<<<
        *crc_p = w->crc ^ msr_crc32_combine(start, 0, len);
===
        *crc_p = w->crc ^ msr_crc32_combine(start, 0, len - (len > 1));
>>>

@ host_adamw.grads_unwaited
file: parallel/host_adamw.c
test: ^test_parallel_host_adamw$
<<<
        if ((st = msr_device_event_sync(h->dev, h->got[c & 1])) != MSR_OK)
===
        if (0 && (st = msr_device_event_sync(h->dev, h->got[c & 1])) != MSR_OK)
>>>

@ host_adamw.uploads_unwaited
file: parallel/host_adamw.c
test: ^test_parallel_host_adamw$
<<<
    msr_status_t ust = msr_device_stream_sync(h->dev, h->up);
===
    msr_status_t ust = MSR_OK;
>>>

@ host_adamw.step_host_chunk_misread
file: parallel/host_adamw.c
test: ^test_parallel_host_adamw$
<<<
        msr_adamw_update_range(h->opt, off, n, h->params + off, grads + off);
===
        msr_adamw_update_range(h->opt, off, n, h->params + off, grads);
>>>

@ host_embed.chunk_unwaited
file: parallel/host_embed.c
test: ^test_parallel_host_embed$
<<<
    if ((st = msr_device_event_sync(he->cfg.dev, he->got[c & 1])) != MSR_OK)
===
    if (0 && (st = msr_device_event_sync(he->cfg.dev, he->got[c & 1])) != MSR_OK)
>>>

@ host_embed.grad_unwaited
file: parallel/host_embed.c
test: ^test_parallel_host_embed$
<<<
    msr_status_t st = msr_device_event_sync(he->cfg.dev, he->out[b]);
===
    msr_status_t st = MSR_OK;
>>>

@ host_embed.fold_each_chunk_first
file: parallel/host_embed.c
test: ^test_parallel_host_embed$
<<<
    msr_vocab_fold(M, S, Z, he->hst, he->hst + N, (size_t)N, first);
===
    msr_vocab_fold(M, S, Z, he->hst, he->hst + N, (size_t)N, first | 1);
>>>

@ host_embed.chunk_grad_kept
file: parallel/host_embed.c
test: ^test_parallel_host_embed$
<<<
        k->zero(he->dw[b], (size_t)n * C);
===
        if (c < 2)
            k->zero(he->dw[b], (size_t)n * C);
>>>

@ head_chunk.fold_target_lost
file: model/split_ends.c
test: ^test_parallel_vocab_fold$|^test_parallel_host_embed$
<<<
            M[n] = m[n];
            Z[n] += z[n];
===
            M[n] = m[n];
            Z[n] = z[n];
>>>

@ host_embed.last_chunk_not_added
file: parallel/host_embed.c
test: ^test_parallel_host_embed$
<<<
    if (st == MSR_OK)
        st = add_grad(he, chunks - 1);
===
    if (st == MSR_OK && chunks == 1)
        st = add_grad(he, chunks - 1);
>>>

@ host_adamw.set_copies_to_no_device
file: parallel/host_adamw.c
test: ^test_parallel_host_adamw$
<<<
    if (params_dev == NULL)
        return MSR_OK;
===
    if (params_dev == NULL && h->count == 0)
        return MSR_OK;
>>>

@ host_adamw.one_buffer
file: parallel/host_adamw.c
test: ^test_parallel_host_adamw$
<<<
        msr_adamw_update_range(h->opt, off, n, h->params + off, h->grads[c & 1]);
===
        msr_adamw_update_range(h->opt, off, n, h->params + off, h->grads[0]);
>>>

@ device.alloc_zero_unzeroed
file: comm/device.c
test: ^test_device_fake$
<<<
    if ((st = dev->ops->memset(dev, p, 0, bytes, NULL)) == MSR_OK &&
===
    if ((st = MSR_OK) == MSR_OK &&
>>>

@ device.alloc_zero_cpu_touches
file: comm/device.c
test: ^test_device$
<<<
    .alloc_zero = cpu_alloc, /* msr_pages_alloc's memory is zero: mapped pages untouched */
===
    .alloc_zero = NULL, /* msr_pages_alloc's memory is zero: mapped pages untouched */
>>>

@ dp_params.z3_seeded_whole
file: parallel/dp.c
test: ^test_parallel_train_gpt_offload_z3$
<<<
    if (!msr_dp_init_left(cfg) && cfg->params_offload.mode == MSR_OFFLOAD_NONE)
===
    if (!msr_dp_init_left(cfg) && (cfg->params_offload.mode == MSR_OFFLOAD_NONE || cfg->zero >= 3))
>>>

@ dp.shard_zeroed_by_writing
file: parallel/dp.c
test: ^test_parallel_train_gpt_offload_z3$
<<<
    return msr_device_alloc_zero(dp->dev, (dp->shard_count + 1) * sizeof(float), (void **)p_p);
===
    msr_status_t st = msr_device_alloc(dp->dev, (dp->shard_count + 1) * sizeof(float), (void **)p_p);
    return st == MSR_OK ? msr_device_memset(dp->dev, *p_p, 0, (dp->shard_count + 1) * sizeof(float), NULL) : st;
>>>

@ dp_params.z3_seed_tail_offset
file: parallel/dp_seed.c
test: ^test_parallel_train_gpt_offload_z3$
<<<
                               tmp + (u->shard_off - dp->pz_off[b]));
===
                               tmp + (u->shard_off - dp->pz_off[0]));
>>>

@ dp_params.z3_restore_whole_shard
file: parallel/dp_params.c
test: ^test_parallel_train_gpt_offload_z3$
<<<
    if (!read) /* a restore: its pieces fill a block at a time */
===
    if (!read && dp->pz_off == NULL) /* a restore: its pieces fill a block at a time */
>>>

@ dp_offload.z3_load_block_search
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_z3$
<<<
            while (dp->pz_off[k] > s)
===
            while (k > 0 && dp->pz_off[k] >= s)
>>>

@ proxy.published.refused_kept
file: msrun/proxy_up.c
test: ^test_proxy_fetch$
<<<
    if (a->method == MSR_RPC_PUBLISH && a->status == MSR_OK && a->grpc_code == 0) {
===
    if (a->method == MSR_RPC_PUBLISH) {
>>>

@ proxy.published.group_not_kept
file: msrun/proxy_up.c
test: ^test_proxy_fetch$
<<<
                    msr_proxy_fetch_published(p, (Msr__PublishRequest *)f->group->reqs[i]);
===
                    (void)i;
>>>

@ coord.machine_ranks.partly_told
file: cluster/generation.c
test: ^test_coord$
<<<
        if (c->nodes[i]->rank >= 0 && c->nodes[i]->machine == 0)
            untold = 1;
===
        if (c->nodes[i]->rank >= 0 && c->nodes[i]->machine == 0)
            untold = 0;
>>>

@ comm.machine_ranks.not_taken
file: comm/ucx/engine_peers.c
test: ^it_bind$
<<<
            told = msr_env_i64("MSR_MACHINE_RANKS", 0, 0, INT32_MAX);
===
            told = 0;
>>>

@ node.machine_ranks.lost_within_generation
file: msrun/node.c
test: ^test_node$
<<<
        if (u->machine_ranks > 0 || u->generation != n->machine_generation)
===
        if (u->machine_ranks > 0 || u->generation != n->generation)
>>>

@ coord.persist.machine_ranks_lost
file: cluster/persist.c
test: ^test_coord$
<<<
        pn->machine_ranks = n->machine_ranks;
===
        pn->machine_ranks = 0;
>>>

@ coord.persist.machine_ranks_unbounded
file: cluster/persist_load.c
test: ^test_coord$
<<<
        else if (n->machine_ranks < 0 || n->machine_ranks > ps->worker_num)
===
        else if (n->machine_ranks < 0 || n->machine_ranks > ps->worker_num + 1)
>>>

@ relay.fetch.write_kept
file: rendezvous/relay_fetch.c
test: ^test_relay_store$
<<<
    drop_key(s, ckey);
}
===
    (void)ckey;
}
>>>

@ relay.fetch.bound_one_short
file: rendezvous/relay_fetch.c
test: ^test_relay_store$
<<<
        if (atomic_load(&s->fetch_bytes) + cost > max)
===
        if (atomic_load(&s->fetch_bytes) + cost >= max)
>>>

@ relay.publish.bound_one_short
file: rendezvous/relay_publish.c
test: ^test_relay_publish$
<<<
    if (m != NULL && m->bytes + len > MSR_RELAY_PUBLISH_BYTES)
===
    if (m != NULL && m->bytes + len >= MSR_RELAY_PUBLISH_BYTES)
>>>

@ relay.publish.refused_not_alone
file: rendezvous/relay_publish.c
test: ^test_relay_publish$
<<<
            } else if (r != NULL || (r = member_request(mb)) != NULL) {
===
            } else if (0) {
>>>

@ relay.publish.gave_up_published
file: rendezvous/relay_publish.c
test: ^test_relay_publish$
<<<
            continue; /* gave up before it was sent: not applied */
===
            (void)0;
>>>

@ model.onednn.missing_ignored
file: model/gemm_bf16.c
test: ^test_parallel_bf16$
<<<
    else if ((missing = onednn_missing_why()) != NULL)
===
    else if (0 && (missing = onednn_missing_why()) != NULL)
>>>

@ model.onednn.eager
file: model/gemm_bf16.c
test: ^test_parallel_bf16$
<<<
    const char *env = getenv("MSRUN_BF16_GEMM"), *why = NULL, *missing = NULL;
===
    const char *env = getenv("MSRUN_BF16_GEMM"), *why = NULL,
               *missing = msr_gemm_bf16_onednn_ops != NULL ? onednn_missing_why() : NULL;
>>>

@ model.corpus.digit
file: model/data.c
test: ^test_parallel_data$
<<<
        digits[--k] = (char)('0' + n % 10);
===
        digits[--k] = (char)('0' + n % 9);
>>>

@ model.kernels.residual_past_table
file: model/block.c
test: ^test_parallel_kernels$
<<<
    K(b)->residual(out, x, r, b->Nl * (size_t)b->C);
===
    msr_residual_forward(out, x, r, b->Nl * (size_t)b->C);
>>>

@ model.kernels.colsum_past_table
file: model/block.c
test: ^test_parallel_kernels$
<<<
        K(b)->add_colsum(db, dres, b->Nl, b->C);
===
        for (size_t n = 0; n < b->Nl; n++)
            for (int c = 0; c < b->C; c++)
                db[c] += dres[n * (size_t)b->C + c];
>>>

@ model.kernels.mp_blocks_cpu
file: parallel/mp_tp.c
test: ^test_parallel_kernels$
<<<
        .k = mp->model->kernels,
===
        .k = NULL,
>>>

@ model.kernels.trainer_ignores_config
file: parallel/train.c
test: ^test_parallel_kernels$
<<<
    msr_status_t st = msr_gpt_set_kernels(tr->model, tr->cfg.kernels);
===
    msr_status_t st = msr_gpt_set_kernels(tr->model, NULL);
>>>

@ model.kernels.selective_gelu_past_table
file: parallel/mp_run.c
test: ^test_parallel_kernels$
<<<
            k->gelu_forward(la->fch_gelu, NULL, la->fch, d->N * (size_t)d->Hl);
===
            msr_gelu_forward(la->fch_gelu, la->fch, d->N * (size_t)d->Hl);
>>>

@ model.kernels.moe_gelu_past_table
file: model/moe_pass.c
test: ^test_parallel_kernels$
<<<
            k->gelu_forward(s->fch_g + r0 * H, NULL, s->fch + r0 * H, (size_t)n * H);
===
            msr_gelu_forward(s->fch_g + r0 * H, s->fch + r0 * H, (size_t)n * H);
>>>

@ model.kernels.moe_state_cpu
file: model/gpt.c
test: ^test_parallel_kernels$
<<<
        msr_moe_set_kernels(m->moe, k);
===
        (void)k;
>>>

@ model.kernels.ring_delta_past_table
file: parallel/mp_cp.c
test: ^test_parallel_mp_cp$
<<<
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_delta(w->delta, dout, out, (int)d->N, d->Cl, d->NHl);
===
    msr_attention_ring_delta(w->delta, dout, out, (int)d->N, d->Cl, d->NHl);
>>>

@ model.kernels.tp_bias_past_table
file: model/block.c
test: ^test_parallel_mp_tp$
<<<
        K(b)->add_bias(r, bias, b->Nl, b->C);
===
        for (size_t n = 0; n < b->Nl; n++)
            for (int c = 0; c < b->C; c++)
                r[n * (size_t)b->C + c] += bias[c];
>>>

@ model.kernels.vocab_loss_past_table
file: parallel/mp_tp.c
test: ^test_parallel_mp_tp$
<<<
    k->vocab_loss(f->probs, w->losses, w->rmax, w->red, N, d->Vl);
===
    msr_vocab_loss(f->probs, w->losses, w->rmax, w->red, N, d->Vl);
>>>

@ head_chunk.fold_no_rescale
file: model/split_ends.c
test: ^test_parallel_vocab_fold$
<<<
            S[n] = S[n] * expf(M[n] - m[n]) + s[n];
===
            S[n] = S[n] + s[n];
>>>

@ head_chunk.fold_smaller_max_unscaled
file: model/split_ends.c
test: ^test_parallel_vocab_fold$
<<<
            S[n] += s[n] * expf(m[n] - M[n]);
===
            S[n] += s[n];
>>>

@ head_chunk.fold_past_table
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
        k->vocab_fold(M, S, S + N, w->rmax, w->red, N, c == 0);
===
        msr_vocab_fold(M, S, S + N, w->rmax, w->red, N, c == 0);
>>>

@ head_chunk.last_chunk_whole
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
    return d->Vl - v0 < d->hc ? d->Vl - v0 : d->hc;
===
    return d->hc;
>>>

@ head_chunk.chunk_from_slice_start
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
    const float *W = msr_mp_head_weights(mp, 0) + (size_t)v0 * (size_t)d->C;
===
    const float *W = msr_mp_head_weights(mp, 0) + (size_t)(v0 & 0) * (size_t)d->C;
>>>

@ head_chunk.targets_of_slice_start
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
        k->vocab_exp_sums(w->dlogits, w->red, w->logits, w->rmax, targets, lo + v0, N, n);
===
        k->vocab_exp_sums(w->dlogits, w->red, w->logits, w->rmax, targets, lo, N, n);
>>>

@ head_chunk.tp_sums_not_rescaled
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
    k->vocab_fold(M, S, S + N, w->rmax, w->red, N, 0);
===
    k->vocab_fold(M, S, S + N, w->rmax, w->red, N, 1);
>>>

@ head_chunk.tp_not_combined
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
    if (d->tp > 1 && (st = tp_combine(mp, M, S)) != MSR_OK)
===
    if (d->tp < 1 && (st = tp_combine(mp, M, S)) != MSR_OK)
>>>

@ head_chunk.backward_probs_unnormalised
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
        k->vocab_loss(w->dlogits, w->losses, M, S, N, n);
===
        (void)S;
>>>

@ head_chunk.backward_stale_gradient
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
        if ((st = msr_mp_zero(mp, w->logits, N * (size_t)n)) != MSR_OK ||
===
        if ((st = MSR_OK) != MSR_OK ||
>>>

@ head_chunk.weights_grad_chunk_zero
file: parallel/mp_head.c
test: ^test_parallel_mp_head$
<<<
        k->matmul_backward(mp->model->prod, w->dln, dW + (size_t)v0 * C, NULL, w->logits, g,
===
        k->matmul_backward(mp->model->prod, w->dln, dW, NULL, w->logits, g,
>>>

@ head_chunk.layout_probs_kept_whole
file: layout/layout.c
test: ^test_parallel_layout$
<<<
        return d->hc > 0 ? 3 * d->N : d->N * (size_t)d->Vl;
===
        return d->N * (size_t)d->Vl;
>>>

@ head_chunk.layout_clamp_missing
file: layout/layout.c
test: ^test_parallel_layout$
<<<
    d->hc = rows <= 0 ? 0 : rows < d->Vl ? rows : d->Vl;
===
    d->hc = rows <= 0 ? 0 : rows;
>>>

@ head_chunk.plan_whole_path
file: planner/plan_acts.c
test: ^test_parallel_plan$
<<<
           l->recompute == MSR_PLAN_RC_NONE && l->head_chunk == 0;
===
           l->recompute == MSR_PLAN_RC_NONE;
>>>

@ head_chunk.plan_chunk_unpriced
file: planner/plan_time.c
test: ^test_parallel_plan_head$
<<<
        rc += 2 * (double)l.micro_batch * m->seq * m->channels * m->vocab;
===
        rc += 0;
>>>

@ head_chunk.plan_backward_pass_unpriced
file: planner/plan_cost.c
test: ^test_parallel_plan_head$
<<<
        p->head_rc.flops = p->head_f.flops;
===
        p->head_rc.flops = 0;
>>>

@ head_chunk.plan_second_pass_as_compute
file: planner/plan_time.c
test: ^test_parallel_plan_head$
<<<
        if (with & WITH_RC) /* the chunked head's logits again */
===
        if (1) /* the chunked head's logits again */
>>>

@ head_chunk.trainer_whole_path
file: parallel/train.c
test: ^test_parallel_train_gpt_head_chunk$
<<<
           cfg->mp.head_chunk != 0 || cfg->mp_always;
===
           cfg->mp_always;
>>>

@ head_chunk.fit_never_tried
file: planner/plan_offload.c
test: ^test_parallel_plan_head$|^test_parallel_train_gpt_auto_head$
<<<
        if (k == 0 ? head == 0 : k < 8 ? !offload : head == 0 || !offload || found > 0)
===
        if (k == 0 ? 1 : k < 8 ? !offload : head == 0 || !offload || found > 0)
>>>

@ head_chunk.fit_beside_offload_without_head
file: planner/plan_offload.c
test: ^test_parallel_plan_head$
<<<
        int64_t got = try_fit(m, prec, c, q, bits, k == 0 || k >= 8 ? head : q->head_chunk, keep,
===
        int64_t got = try_fit(m, prec, c, q, bits, k == 0 ? head : q->head_chunk, keep,
>>>

@ head_chunk.fit_beside_offload_first
file: planner/plan_offload.c
test: ^test_parallel_plan_head$
<<<
        if (k == 0 ? head == 0 : k < 8 ? !offload : head == 0 || !offload || found > 0)
===
        if (k == 0 ? head == 0 : k < 8 ? !offload || found == 0 : head == 0 || !offload || found > 0)
>>>

@ head_chunk.fit_kept_when_slower
file: planner/plan_offload.c
test: ^test_parallel_plan_head$
<<<
        double best = found > 0 ? (*plans_p)[0].t.step_ms : 0;
===
        double best = found > 0 && k > 0 ? (*plans_p)[0].t.step_ms : 0;
>>>

@ head_chunk.fit_why_other_lets
file: planner/plan_offload.c
test: ^test_parallel_plan_head$
<<<
    else if (pr->plain_ms <= 0) /* the other let plans fit, and this one alone did not */
===
    else if (0)
>>>

@ head_chunk.fit_cost_whole_vocab
file: planner/plan_offload.c
test: ^test_parallel_plan_head$
<<<
    *flops_p = p->l.head_chunk == 0 ? 0 : 2 * N * m->channels * m->vocab / p->l.tp * p->l.micros;
===
    *flops_p = p->l.head_chunk == 0 ? 0 : 2 * N * m->channels * m->vocab * p->l.micros;
>>>

@ head_chunk.fit_cost_saves_nothing
file: planner/plan_offload.c
test: ^test_parallel_plan_head$
<<<
    l.head_chunk = 0;
===
    l.head_chunk = p->l.head_chunk;
>>>

@ head_chunk.auto_not_applied
file: programs/train_gpt/train_gpt_fit.c
test: ^test_parallel_train_gpt_auto_head$
<<<
    o->head_chunk = p->l.head_chunk;
===
    (void)0;
>>>

@ head_chunk.auto_given_replaced
file: programs/train_gpt/train_gpt_plan.c
test: ^test_parallel_train_gpt_auto_head$
<<<
    int fit = o->offload_dir == NULL ? MSR_PLAN_FIT_HEAD : MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD;
===
    o->head_chunk = 0;
    int fit = o->offload_dir == NULL ? MSR_PLAN_FIT_HEAD : MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD;
>>>

@ head_chunk.plan_not_fitted
file: programs/train_gpt/train_gpt_plan.c
test: ^test_parallel_train_gpt_auto_head$
<<<
    int fit = o->offload_dir == NULL ? MSR_PLAN_FIT_HEAD : MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD;
===
    int fit = !o->auto_plan ? 0 : o->offload_dir == NULL ? MSR_PLAN_FIT_HEAD : MSR_PLAN_FIT_HEAD | MSR_PLAN_FIT_OFFLOAD;
>>>

@ head_chunk.whole_fold_every_first
file: model/gpt_pass.c
test: ^test_parallel_gpt_chunked$|^test_parallel_train_gpt_head_chunk$
<<<
        k->vocab_fold(M, S, Z, rmax, red, n_, v0 == 0);
===
        k->vocab_fold(M, S, Z, rmax, red, n_, 1);
>>>

@ head_chunk.whole_probs_short
file: layout/layout.c
test: ^test_parallel_gpt_chunked$
<<<
        return d->hc > 0 ? 6 * N : N * V;
===
        return d->hc > 0 ? 5 * N : N * V;
>>>

@ head_chunk.whole_rows_unclamped
file: model/gpt.c
test: ^test_parallel_gpt_chunked$
<<<
    m->head_chunk = head_chunk < cfg->vocab ? head_chunk : cfg->vocab;
===
    m->head_chunk = head_chunk;
>>>

@ model.split_ends.cp_positions_ignored
file: model/split_ends.c
test: ^test_parallel_mp_cp$
<<<
    return pos != NULL ? pos[t] : t0 + t;
===
    return pos != NULL ? pos[0] + t : t0 + t;
>>>

@ model.kernels.table_hole_accepted
file: model/gpt.c
test: ^test_parallel_kernels$
<<<
    const char *missing = k != NULL ? msr_kernels_missing(k) : NULL;
===
    const char *missing = NULL;
>>>

@ train_experts.offload_update_skipped
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_experts$
<<<
    msr_adamw_update_moments(u->opt, off, n, u->params + off, u->grads + off, m, v);
===
    (void)u, (void)off, (void)n, (void)m, (void)v;
>>>

@ train_experts.offload_chunk_offset
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_experts$
<<<
    msr_adamw_update_moments(u->opt, off, n, u->params + off, u->grads + off, m, v);
===
    msr_adamw_update_moments(u->opt, off, n, u->params, u->grads, m, v);
>>>

@ train_ckpt.experts_offloaded_moments_not_streamed
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_experts$
<<<
        bad = x.n > 0 && range_push(&l, x, tr->eoff != NULL ? s : NO_MOFF, 1, s) != 0;
===
        bad = x.n > 0 && range_push(&l, x, NO_MOFF, 1, s) != 0;
>>>

@ train_ckpt.experts_offloaded_moments_from_dp_file
file: parallel/train_ckpt_impl.h
test: ^test_parallel_train_gpt_offload_experts$
<<<
    if (x->experts)
        return msr_offload_get(tr->eoff, x->moff + at, n, m, v);
===
    if (x->experts && 0)
        return msr_offload_get(tr->eoff, x->moff + at, n, m, v);
>>>

@ train_ckpt.experts_offloaded_moments_not_restored
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_experts$
<<<
                                  : msr_offload_put(tr->eoff, at, n, r->m + from, r->v + from);
===
                                  : MSR_OK;
>>>

@ train_ckpt.experts_restore_offset
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_experts$
<<<
        size_t at = s + (lo - mine.lo); /* in the shard */
===
        size_t at = lo - mine.lo; /* in the shard */
>>>

@ plan_mem.experts_offload_not_counted
file: planner/plan_mem.c
test: ^test_parallel_plan_offload_experts$|^test_parallel_plan_report_offload$
<<<
        o->expert_optim = msr_plan_offload_optim_bytes(hi - lo, l->offload_chunk);
===
        (void)0;
>>>

@ plan_mem.experts_offload_io_not_priced
file: planner/plan_mem.c
test: ^test_parallel_plan_offload_experts$
<<<
        o->offload_optim_io += msr_plan_offload_optim_io(hi - lo, l->offload_chunk);
===
        (void)0;
>>>

@ plan_time.experts_update_from_resident_bytes
file: planner/plan_time.c
test: ^test_parallel_plan_offload_experts$
<<<
    double elems = (double)(l.zero >= 1 ? r.shard_elems : r.part_params) + (double)r.expert_shard;
===
    double elems = (double)(l.zero >= 1 ? r.shard_elems : r.part_params) + (double)r.expert_optim / 8;
>>>

@ model.kernels.ring_fold_past_table
file: parallel/mp_cp.c
test: ^test_parallel_mp_cp$
<<<
    msr_kernels_or_cpu(mp->model->kernels)
        ->ring_fold_kv(dkv, dx, S, mp->d.Cl, mp->d.NHl, mp->blk.NKVl);
===
    msr_kernels_cpu()->ring_fold_kv(dkv, dx, S, mp->d.Cl, mp->d.NHl, mp->blk.NKVl);
>>>

@ model.kernels.ring_add_rows_past_table
file: parallel/mp_cp.c
test: ^test_parallel_mp_cp$
<<<
    msr_kernels_or_cpu(mp->model->kernels)
        ->add_rows(dqkv + Cl, Cl + 2 * KV, w->dkv[mp->cp % 2], 2 * KV, d->N, 2 * KV);
===
    msr_kernels_cpu()->add_rows(dqkv + Cl, Cl + 2 * KV, w->dkv[mp->cp % 2], 2 * KV, d->N, 2 * KV);
>>>

@ model.kernels.ring_fold_wrong_group
file: model/kernels.c
test: ^test_parallel_kernels$|^test_parallel_mp_cp$
<<<
                float *g = dkv + n * 2 * KV + part * KV + h / G * HS;
===
                float *g = dkv + n * 2 * KV + part * KV + h % (G * (size_t)KVH / G) * HS;
>>>

@ offload.moe_block_updated_whole
file: parallel/dp_params_update.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        msr_adamw_update_range(dp->opt, dp->pf_off[k], msr_dp_pf_count(dp, k), buf,
===
        msr_adamw_update_range(dp->opt, dp->pf_off[k], dp->pblk_n, buf,
>>>

@ offload.moe_block_found_past_its_end
file: parallel/dp_impl.h
test: ^test_parallel_train_gpt_offload_moe$
<<<
    while (dp->pf_off[k + 1] <= s)
===
    while (dp->pf_off[k + 1] < s)
>>>

@ offload.moe_store_block_the_last
file: parallel/dp_params.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        dp->pblk_n = MSR_MAX(dp->pblk_n, S->count);
===
        dp->pblk_n = MSR_MAX(dp->pblk_n, S->count) - (l == 2);
>>>

@ plan_offload.params_slot_dense_block
file: planner/plan_part.c
test: ^test_parallel_plan_offload_experts$|^test_parallel_plan_report_offload$
<<<
    uint64_t most = p->blocks > p->moe_blocks ? p->block : 0;
===
    uint64_t most = p->block;
>>>
@ experts_disk.z3_no_turn_prefetch
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (tr->epf == NULL || tr->ez_guess >= 0)
        return MSR_OK;
===
    if (tr->epf != NULL || tr->ez_guess >= 0)
        return MSR_OK;
>>>

@ experts_disk.z3_share_of_block_0
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (st == MSR_OK && (st = msr_params_acquire(tr->epf, (size_t)k, dir, &buf)) == MSR_OK) {
===
    if (st == MSR_OK && (st = msr_params_acquire(tr->epf, 0, dir, &buf)) == MSR_OK) {
>>>

@ experts_disk.z3_seeded_from_block_start
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    msr_status_t st = store_make(tr, "experts-params", 1, tr->ez_per, tr->ez_lo, &tr->epf);
===
    msr_status_t st = store_make(tr, "experts-params", 1, tr->ez_per, 0, &tr->epf);
>>>

@ experts_disk.z3_init_piece_misplaced
file: programs/train_gpt/train_gpt_st.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
                st = msr_trainer_fill(tr, 1, at, c, buf);
===
                st = msr_trainer_fill(tr, 1, at - (a - lo), c, buf);
>>>

@ plan.experts_z3_shares_resident
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$
<<<
        n = msr_plan_min_u64(per, a + blk) - a; /* this rank's share of a block */
===
        n = per + 0 * (msr_plan_min_u64(per, a + blk) - a);
>>>

@ experts_disk.z12_gather_part_misplaced
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
                memcpy(buf + lo, tr->ed_gath + (size_t)r * m, n * sizeof(float));
===
                memcpy(buf, tr->ed_gath + (size_t)r * m, n * sizeof(float));
>>>

@ experts_disk.z2_reduce_part_from_block_start
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    memcpy(g + lo, sum + lo, n * sizeof(float));
===
    memcpy(g + lo, sum, n * sizeof(float));
>>>

@ plan.experts_update_reads_every_block
file: planner/plan_time.c
test: ^test_parallel_plan_offload_experts$
<<<
    o->upd = msr_plan_disk_ms(c, b + own, b);
===
    o->upd = msr_plan_disk_ms(c, b + g + 0 * own, b);
>>>

@ plan.experts_reduce_rewrites_every_block
file: planner/plan_time.c
test: ^test_parallel_plan_offload_experts$
<<<
    o->norm = msr_plan_disk_ms(c, g, rewrites ? own : 0);
===
    o->norm = msr_plan_disk_ms(c, g, rewrites ? g : 0);
>>>

@ experts_disk.z12_restore_at_shard_space
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
                    : msr_train_experts_disk_load(tr, tr->eshard_lo + at, n, r->params + from);
===
                    : msr_train_experts_disk_load(tr, at, n, r->params + from);
>>>

@ experts_disk.z12_saved_at_shard_space
file: parallel/train_ckpt_save.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
            ? msr_train_experts_spans(s->tr, s->tr->eshard_lo + x->es + at, c, &s->eblk, stream_out,
===
            ? msr_train_experts_spans(s->tr, x->es + at, c, &s->eblk, stream_out,
>>>

@ experts_disk.z12_update_at_shard_space
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        size_t at = tr->eshard_lo + off; /* in the store */
===
        size_t at = off; /* in the store */
>>>

@ moe.shared_slots_not_asked
file: parallel/train.c
test: ^test_parallel_plan_report$
<<<
        lay.shared = tr->cfg.mp.recompute == MSR_MP_RECOMPUTE_FULL;
===
        lay.shared = 0;
>>>

@ plan.moe_shared_slots_per_block
file: planner/plan_acts.c
test: ^test_parallel_plan_report$
<<<
    int slots = l->recompute == MSR_PLAN_RC_FULL && blocks > 0 ? 1 : blocks;
===
    int slots = blocks;
>>>

@ moe.shared_slot_per_block
file: model/moe_pass.c
test: ^test_parallel_moe$
<<<
    int i = moe->shared ? 0 : (l + 1) / moe->every - 1;
===
    int i = (l + 1) / moe->every - 1;
>>>

@ experts_disk.update_not_written_back
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        tr->ed_pc.dirty = 1;
        if (m != NULL) {
===
        tr->ed_pc.dirty = 0;
        if (m != NULL) {
>>>

@ experts_disk.load_not_written_back
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        memcpy(tr->ed_pc.buf + in, src, take * sizeof(float));
        tr->ed_pc.dirty = 1;
===
        memcpy(tr->ed_pc.buf + in, src, take * sizeof(float));
        tr->ed_pc.dirty = 0;
>>>

@ experts_disk.block_gradients_of_block_0
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    float *g = tr->ed_grads != NULL ? tr->ed_grads + (size_t)k * tr->ed_per : NULL;
===
    float *g = tr->ed_grads != NULL ? tr->ed_grads : NULL;
>>>

@ experts_disk.no_turn_prefetch
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    int turn = pass == MSR_GPT_FORWARD ? k == last : k == 0;
===
    int turn = (pass == MSR_GPT_FORWARD ? k == last : k == 0) && k < 0;
>>>

@ experts_disk.save_span_from_block_start
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        st = fn(arg, blk->buf + in, take);
===
        st = fn(arg, blk->buf, take);
>>>

@ experts_disk.grads_not_zeroed
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        memset(tr->ed_grads, 0, (size_t)held(tr) * tr->ed_per * sizeof(float));
===
        memset(tr->ed_grads, 0, 0 * (size_t)held(tr) * tr->ed_per * sizeof(float));
>>>

@ experts_disk.file_grads_not_zeroed
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    else if (tr->egf != NULL)
        memset(tr->ed_fresh, 1, (size_t)held(tr));
===
    else if (tr->egf != NULL)
        memset(tr->ed_fresh, 0, (size_t)held(tr));
>>>

@ experts_disk.file_grads_not_written_back
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        msr_status_t gst = msr_params_release(tr->egf, (size_t)k, gbuf, 1);
===
        msr_status_t gst = msr_params_release(tr->egf, (size_t)k, gbuf, 0);
>>>

@ experts_disk.file_grads_under_replicas
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    int gdisk = tr->cfg.par.grads_offload.mode == MSR_OFFLOAD_DISK;
===
    int gdisk = tr->cfg.par.grads_offload.mode == MSR_OFFLOAD_DISK && tr->rep_size == 1;
>>>

@ experts_disk.file_grads_norm_skipped
file: parallel/train.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (tr->egf != NULL) { /* read back a block at a time */
===
    if (tr->egf == NULL && tr->egf != NULL) { /* read back a block at a time */
>>>

@ plan_offload.experts_grads_store_under_replicas
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$
<<<
        if (l->offload & MSR_PLAN_OFFLOAD_GRADS) {
===
        if ((l->offload & MSR_PLAN_OFFLOAD_GRADS) && reps == 1) {
>>>

@ experts_disk.z12_blocks_past_shard_not_gathered
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (st == MSR_OK) /* the blocks past the shard's */
        st = gather_to(tr, held(tr));
===
    if (st == MSR_OK) /* the blocks past the shard's */
        st = MSR_OK;
>>>

@ experts_disk.export_blocks_not_held
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_params$
<<<
    return msr_dp_offload_hold(tr->dp, 1, 0);
===
    return tr == NULL ? msr_dp_offload_hold(tr->dp, 1, 0) : MSR_OK;
>>>

@ plan_offload.experts_z12_gather_whole_block
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$
<<<
            gather = reps * msr_plan_min_u64(zblk, per);
===
            gather = zblk * reps;
>>>

@ plan_offload.experts_store_one_buffer_short
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$
<<<
        o->expert_params = msr_plan_offload_params_bytes(n * MSR_PLAN_F32, blocks);
===
        o->expert_params = msr_plan_offload_params_bytes(n * MSR_PLAN_F32, blocks) - slot;
>>>
@ experts_disk.snapshot_not_streamed
file: parallel/train_ckpt_save.c
equivalent: tr->epf is made only under the parameters' disk offload, whose blocks' store streams the snapshot already (every part holds a block: msr_dp_params_block_floats > 0); the test keeps a snapshot of the experts' file streamed should that change
<<<
    if (s->l.offloaded || msr_dp_params_block_floats(tr->dp) > 0 || tr->epf != NULL) {
===
    if (s->l.offloaded || msr_dp_params_block_floats(tr->dp) > 0) {
>>>
@ init_from.flat_blocks_not_filled
file: parallel/dp_offload.c
test: ^test_parallel_train_gpt_offload_params$
<<<
    if (dp->pload_buf != NULL && dp->pz_off == NULL)
        return msr_dp_params_load(dp, lo, n, src);
===
    if (dp->pload_buf != NULL && dp->pz_off != NULL)
        return msr_dp_params_load(dp, lo, n, src);
>>>

@ init_from.experts_not_through_store
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (experts && tr->epf != NULL)
        return msr_train_experts_disk_load(tr, lo, n, src);
===
    if (experts && tr->epf == NULL)
        return msr_train_experts_disk_load(tr, lo, n, src);
>>>

@ init_from.experts_last_block_dropped
file: parallel/train_ckpt.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        if (!write)
            tr->ed_pc.dirty = 0; /* the block it was filling: dropped */
===
        tr->ed_pc.dirty = 0; /* the block it was filling: dropped */
>>>

@ export.flat_blocks_read_in_place
file: programs/train_gpt/train_gpt_st_export.c
test: ^test_parallel_train_gpt_offload_params$
<<<
                         msr_dp_params_block_floats(tr->dp) > 0 ? NULL : tr->model->params,
===
                         tr->model->params,
>>>

@ export.experts_read_in_place
file: programs/train_gpt/train_gpt_st_export.c
equivalent: with the experts in their file their store is external (model/moe.c store_alloc), so msr_moe_params is NULL and the export reads through the trainer either way; the check says so rather than lean on it
<<<
    if (tr->model->moe != NULL && tr->epf == NULL)
        from.experts = msr_moe_params(tr->model->moe);
===
    if (tr->model->moe != NULL)
        from.experts = msr_moe_params(tr->model->moe);
>>>

@ export.experts_block_buffer_short
file: programs/train_gpt/train_gpt_st_export.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    size_t en = f->experts == NULL ? msr_trainer_experts_block_floats(f->tr) : 0;
===
    size_t en = f->experts == NULL ? msr_trainer_experts_block_floats(f->tr) / 2 : 0;
>>>
@ experts_disk.shares_grads_fresh_kept
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (tr->ed_fresh[k]) { /* read, but this step's zeros */
===
    if (0 && tr->ed_fresh[k]) { /* read, but this step's zeros */
>>>

@ experts_disk.shares_grads_not_written
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    st = msr_params_release(tr->egf, (size_t)k, g, 1);
===
    st = msr_params_release(tr->egf, (size_t)k, g, 0);
>>>

@ experts_disk.shares_grads_norm_skipped
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (tr->egf != NULL) {              /* read back a block at a time, in the same order */
===
    if (0 && tr->egf != NULL) {         /* read back a block at a time, in the same order */
>>>

@ plan_mem.experts_grads_shares_resident
file: planner/plan_mem.c
test: ^test_parallel_plan_report_offload$
<<<
        if (l->offload & MSR_PLAN_OFFLOAD_GRADS) {
===
        if ((l->offload & MSR_PLAN_OFFLOAD_GRADS) && (reps == 1 || l->zero >= 3)) {
>>>
@ experts_disk.z2_reduce_part_of_rank_0
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    size_t lo, n = owned_in(tr, tr->rep_rank, k, &lo);
    memcpy(g + lo, sum + lo, n * sizeof(float));
===
    size_t lo, n = owned_in(tr, 0, k, &lo);
    memcpy(g + lo, sum + lo, n * sizeof(float));
>>>
@ experts_disk.z2_reduce_not_written
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        if ((n = owned_in(tr, tr->rep_rank, k, &lo)) > 0)
            tr->ed_gc.dirty = 1;
===
        if ((n = owned_in(tr, tr->rep_rank, k, &lo)) > 0)
            tr->ed_gc.dirty = 0;
>>>

@ experts_disk.z2_reduce_norm_lost
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
            sumsq += (double)g[lo + i] * g[lo + i];
===
            sumsq += (double)g[lo + i];
>>>

@ plan_mem.experts_grads_owned_blocks
file: planner/plan_mem.c
test: ^test_parallel_plan_offload_experts$
<<<
            uint64_t ob = zblk == 0 ? blocks : hi > lo ? (hi - 1) / per - lo / per + 1 : 0;
===
            uint64_t ob = blocks;
>>>

@ eval.visit_table_kept
file: parallel/dp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    dp->any_order = 1;
===
    dp->any_order = dp->any_order;
>>>

@ eval.any_order_not_restored
file: parallel/dp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    dp->any_order = dp->eval_any_order;
===
    (void)dp->eval_any_order;
>>>

@ eval.first_block_not_read_ahead
file: parallel/dp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    msr_status_t st = dp->pnb > 0 ? msr_dp_params_ahead(dp, dp->pfb) : MSR_OK;
===
    msr_status_t st = MSR_OK;
>>>

@ eval.z3_next_step_not_read_ahead
file: parallel/dp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    if (dp->pz_off != NULL && dp->pnb > 0)
===
    if (0)
>>>

@ eval.pfirst_not_restored
file: parallel/dp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    dp->pfirst = dp->eval_pfirst;
===
    (void)dp->eval_pfirst;
>>>

@ eval.mp_rows_of_replica0
file: parallel/eval.c
test: ^test_parallel_train_gpt_eval$
<<<
        uint64_t first = (uint64_t)b * G + (uint64_t)c->dp_rank * (uint64_t)A * (uint64_t)B;
===
        uint64_t first = (uint64_t)b * G;
>>>

@ eval.mp_loss_every_tp_rank
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    *loss_p = mp->tr != 0 ? 0.0 : one ? sum / B : sum;
===
    *loss_p = one ? sum / B : sum;
>>>

@ eval.mp_cp_all_positions
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    if (mp->cp > 1) {
        /* this rank's positions of every pass, as a step's */
===
    if (0) {
        /* this rank's positions of every pass, as a step's */
>>>

@ eval.mp_next_step_not_read_ahead
file: parallel/mp_eval.c
equivalent: under model parallel dp's hooks are in any-order mode already (msr_dp_set_model_parallel), and the step reads each chunk's first block ahead itself before any hook, the dense blocks' and the experts' (params_ahead: msr_dp_params_ahead, msr_dp_extra_ahead), so neither the embeddings' flag nor the next step's first reads change what is read or when
test: ^test_parallel_train_gpt_eval$
<<<
    msr_status_t est = msr_dp_eval_end(dp);
===
    msr_status_t est = MSR_OK;
>>>

@ eval.mp_traced
file: parallel/mp_eval.c
equivalent: train_gpt turns tracing off right after the traced step (and writes the trace then), before any validation; msr_mp_eval's own switch keeps that true for another caller
test: ^test_parallel_train_gpt_eval$
<<<
    mp->tracing = 0; /* the step's trace is the step's */
===
    mp->tracing = tracing; /* the step's trace is the step's */
>>>

@ eval.copy_moments_written
file: parallel/ckpt_full.c
test: ^test_parallel_(ckpt_full|train_gpt_tokens)$
<<<
                if (m != NULL)
                    memcpy(m + g->lo, g->m, g->n * sizeof(float));
===
                memcpy(m + g->lo, g->m, g->n * sizeof(float));
>>>

@ eval.acts_spilled
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_eval$
<<<
    if (mp->evaluating) { /* no backward reads it */
===
    if (0) { /* no backward reads it */
>>>

@ eval.moe_routing_counted
file: parallel/eval.c
test: ^test_parallel_train_gpt_eval$
<<<
            msr_moe_select(model->moe, 0, 0);
===
            msr_moe_select(model->moe, 0, 1);
>>>

@ eval.mp_moe_routing_counted
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_eval$
<<<
    msr_moe_select(mp->model->moe, m, count && !mp->evaluating);
===
    msr_moe_select(mp->model->moe, m, count);
>>>

@ eval.mp_moe_aux_left_out
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    double sum = (mp->pr == mp->pp - 1 ? mp->loss_sum : 0.0) + mp->aux_sum;
===
    double sum = (mp->pr == mp->pp - 1 ? mp->loss_sum : 0.0);
>>>

@ eval.experts_not_read_ahead
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_eval$
<<<
    if (k < 0)
        return MSR_OK;
    return msr_params_prefetch(tr->epf, (size_t)k);
===
    if (k < 0 || 1)
        return MSR_OK;
    return msr_params_prefetch(tr->epf, (size_t)k);
>>>

@ eval.experts_ahead_upward_only
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_eval$
<<<
        k = msr_train_experts_next_in_chunk(tr, s, dir);
===
        k = msr_train_experts_next_in_chunk(tr, s, dir * dir);
>>>

@ eval.mp_moe_passes_of_micro_batch
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    int B = mp->cfg.micro_batch, one = mp->model->moe != NULL && B > 1, overlap = 0;
===
    int B = mp->cfg.micro_batch, one = 0, overlap = 0;
>>>

@ eval.mp_moe_sum_of_passes
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    *loss_p = mp->tr != 0 ? 0.0 : one ? sum / B : sum;
===
    *loss_p = mp->tr != 0 ? 0.0 : sum;
>>>

@ eval.mp_moe_overlap_kept
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
        mp->cfg.tp_overlap = 0;
===
        (void)mp->cfg.tp_overlap;
>>>

@ eval.mp_moe_dims_kept
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
        mp->d = mp->d_step;
===
        (void)mp->d_step;
>>>

@ eval.mp_moe_block_not_repointed
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    msr_mp_point_block(mp);
}
===
}
>>>

@ eval.mp_frames_sized_as_now
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_eval$
<<<
    const dims_t *ds = &mp->d_step;
===
    const dims_t *ds = &mp->d;
>>>

@ eval.mp_moe_overlap_not_restored
file: parallel/mp_eval.c
test: ^test_parallel_train_gpt_eval$
<<<
        mp->cfg.tp_overlap = *overlap;
===
        (void)*overlap;
>>>

@ offload.reads_never_given_up
file: parallel/offload_acts.c
test: ^test_parallel_offload_params$
<<<
    if (w < 0 && r < 0)
===
    if (w < 0)
>>>

@ offload.given_up_newest
file: parallel/offload_acts.c
test: ^test_parallel_offload_params$
<<<
        if (a->state[s] == BUF_READING && (r < 0 || a->seq[s] < a->seq[r]))
===
        if (a->state[s] == BUF_READING && (r < 0 || a->seq[s] > a->seq[r]))
>>>

@ mp.chunk_experts_not_read_ahead
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_eval$
<<<
    return st != MSR_OK ? st : msr_dp_extra_ahead(mp->dp, s, backward ? -1 : 1);
===
    return st;
>>>

@ mp.chunk_experts_read_ahead_forward
file: parallel/mp_run.c
test: ^test_parallel_train_gpt_eval$
<<<
    return st != MSR_OK ? st : msr_dp_extra_ahead(mp->dp, s, backward ? -1 : 1);
===
    return st != MSR_OK ? st : msr_dp_extra_ahead(mp->dp, s, 1);
>>>

@ eval.stats_gathers_not_counted
file: parallel/eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    tr->eval_stats.gathers += after.gathers - before.gathers;
===
    tr->eval_stats.gathers += after.gathers;
>>>

@ eval.stats_param_reads_not_counted
file: parallel/eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    tr->eval_stats.param_reads += after.param_reads - before.param_reads;
===
    (void)before.param_reads;
>>>

@ eval.stats_expert_reads_not_counted
file: parallel/eval.c
test: ^test_parallel_train_gpt_eval$
<<<
    tr->eval_stats.expert_reads += after.expert_reads - before.expert_reads;
===
    (void)before.expert_reads;
>>>

@ dp_params.guess_past_chunk_end
file: parallel/dp_params.c
test: ^test_parallel_train_gpt_offload_pp$
<<<
    return msr_dp_pf_seg(dp, t) >= 0 && seg[t].group == seg[s].group ? dp->pdir : 0;
===
    return msr_dp_pf_seg(dp, t) >= 0 && seg[t].group == seg[t].group ? dp->pdir : 0;
>>>

@ experts_disk.guess_past_chunk_end
file: parallel/train_experts_disk.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    return msr_train_experts_next_in_chunk(tr, s, dir) == k + dir ? dir : 0;
===
    return dir + 0 * msr_train_experts_next_in_chunk(tr, s, dir) * k;
>>>

@ offload_params.no_read_ahead_refused
file: parallel/offload_params.c
test: ^test_parallel_offload_params$
<<<
    if (dir < -1 || dir > 1)
===
    if (dir != 1 && dir != -1)
>>>

@ dp_params.z3_share_guess_past_chunk_end
file: parallel/dp_params.c
test: ^test_parallel_train_gpt_offload_pp$
<<<
    msr_status_t st = msr_params_acquire(dp->params_off, k, next_dir(dp, s), &buf);
===
    msr_status_t st = msr_params_acquire(dp->params_off, k, dp->pdir, &buf);
>>>

@ experts.z3_share_not_read_ahead_by_runtime
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (tr->epf == NULL || k < 0 || slot_of(tr, k) >= 0)
===
    if (tr->epf != NULL || k < 0 || slot_of(tr, k) >= 0)
>>>

@ experts.z3_share_guess_past_chunk_end
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
    if (seg < 0 || msr_train_experts_next_in_chunk(tr, seg, dir) != k + dir)
===
    if (seg < 0)
>>>

@ experts.next_block_past_chunk_end
file: parallel/train_experts.c
test: ^test_parallel_train_gpt_offload_moe$
<<<
        if (seg[t].group != seg[s].group)
            return -1;
===
        if (seg[t].group != seg[s].group && 0)
            return -1;
>>>

@ comm.shm_slots.turn_trusts_peer_one_short
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
        s->peer_seq >= k - 1)
===
        s->peer_seq >= k - 2)
>>>

@ comm.shm_slots.turn_shortcut_for_lined
file: comm/ucx/shm_slots.c
equivalent: peer_seq only ever holds a number the peer's word showed, so the shortcut is the turn's own test answered from an earlier look; for lined vectors it changes when the word is read (the line's transfers), never what is allowed
test: ^comm_small_np2$
<<<
    if (a->coll != MSR_COLL_BROADCAST && r->n == 2 && slot_bytes(r) <= SHM_INLINE &&
===
    if (a->coll != MSR_COLL_BROADCAST && r->n == 2 && slot_bytes(r) <= 4 * SHM_INLINE &&
>>>

@ comm.shm_slots.peer_seq_not_kept
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
    s->peer_seq = atomic_load_explicit(&s->ctl[p].c[C_SEQ], memory_order_acquire);
    if (s->peer_seq < k)
===
    uint64_t seq = atomic_load_explicit(&s->ctl[p].c[C_SEQ], memory_order_acquire);
    s->peer_seq = seq + 1;
    if (seq < k)
>>>

@ comm.shm_slots.own_inline_input_in_place_of_many
file: comm/ucx/shm_slots.c
equivalent: input_of serves only members 0 and 1 of the first fold, which reads each element before it writes it (in place too); members from 2 on are read from their places (data_of), so the input is whole wherever it is read; only where the bytes are read changes
test: ^comm_small_np(3|4|8)$
<<<
    if (j == r->me && r->n == 2 && in > 0 && in <= SHM_INLINE)
===
    if (j == r->me && in > 0 && in <= SHM_INLINE)
>>>

@ comm.shm_slots.own_lined_allgather_short
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
                memcpy((char *)a->recvbuf + (size_t)j * r->bytes, a->sendbuf, in);
===
                memcpy((char *)a->recvbuf + (size_t)j * r->bytes, a->sendbuf, in - 1);
>>>

# ---- lined broadcasts of several lines; a two-member reduce-scatter's half (issue 40)
@ comm.shm_slots.bcast_lined_first_line_only
file: comm/ucx/shm_slots.c
test: ^comm_bcast_stress_np2$
<<<
    size_t lines = shm_lines(bytes);
===
    size_t lines = bytes > 0;
>>>

@ comm.shm_slots.bcast_lined_half_width
file: comm/ucx/shm_slots.c
test: ^comm_bcast_ahead_np3$
<<<
           r->bytes <= SHM_BCAST_WIDTH * SHM_LINE_DATA && s->bcast != NULL;
===
           r->bytes <= SHM_BCAST_WIDTH / 2 * SHM_LINE_DATA && s->bcast != NULL;
>>>

@ comm.shm_slots.lined_put_lines_adjacent
file: comm/ucx/shm_slots.c
test: ^comm_bcast_ahead_np3$
<<<
    for (size_t off = 0; off < len; off += SHM_LINE_DATA, area += stride) {
===
    for (size_t off = 0; off < len; off += SHM_LINE_DATA, area += stride / stride * LINE) {
>>>

@ comm.shm_slots.lined_get_lines_adjacent
file: comm/ucx/shm_slots.c
test: ^comm_bcast_ahead_np3$
<<<
    for (size_t o = off % SHM_LINE_DATA; len; o = 0, area += stride) {
===
    for (size_t o = off % SHM_LINE_DATA; len; o = 0, area += LINE) {
>>>

@ comm.shm_slots.rs_half_publishes_own_block
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
                      (const char *)a->sendbuf + (size_t)(1 - r->me) * r->bytes, r->bytes, k);
===
                      (const char *)a->sendbuf + (size_t)r->me * r->bytes, r->bytes, k);
>>>

@ comm.shm_slots.rs_half_own_block_unshifted
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
        const char *mine =
            (const char *)a->sendbuf + (lined_half(r) ? (size_t)r->me * r->bytes : 0);
===
        const char *mine = (const char *)a->sendbuf;
>>>

@ comm.shm_slots.pair_allgather_into_own_block
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
        return (char *)a->recvbuf + (size_t)(1 - r->me) * r->bytes;
===
        return (char *)a->recvbuf + (size_t)r->me * r->bytes;
>>>

@ comm.shm_slots.pair_copies_whole_last_line
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
        if (len - o >= SHM_LINE_DATA)
            memcpy(dst + o, line, SHM_LINE_DATA);
===
        if (len - o >= 1)
            memcpy(dst + o, line, SHM_LINE_DATA);
>>>

@ comm.shm_slots.pair_resumes_past_unseen_line
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
            sl->first_line = i;
            return 0;
===
            sl->first_line = i + 1;
            return 0;
>>>

@ comm.shm_slots.pair_takes_stale_line
file: comm/ucx/shm_slots.c
test: ^comm_small_np2$
<<<
        if (atomic_load_explicit(line_word(area, i), memory_order_acquire) != k) {
            sl->first_line = i;
===
        if (atomic_load_explicit(line_word(area, i), memory_order_acquire) + 2 < k) {
            sl->first_line = i;
>>>

__END__
