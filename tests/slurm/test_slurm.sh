#!/bin/bash
# msrun under a real Slurm (tests/slurm/slurm_lib.sh starts munged,
# slurmctld and two slurmd nodes on this host, once for every case):
#   a. srun -N2: msrun's nodes authenticate with munge (no token) and run a
#      libmsrun barrier across both nodes;
#   b. the same job through sbatch;
#   c. scancel of a running job: everything stops, nothing is left behind
#      (no process, no shared-memory file, no job directory or run record);
#   d. kill -9 of one node's msrun: the node is lost and the (elastic) job
#      re-forms on the node left, as with any lost node.
# Needs root and Debian's slurmctld slurmd slurm-client munge; skipped (77)
# with the reason otherwise.
#
# msrun is given no option that says where the job is: the node rank, the
# node count, the job id, the master's address (the first host of
# SLURM_JOB_NODELIST, n1, which only Slurm's NodeAddr resolves) and munge
# authentication (no token) all come from Slurm.
. "$(dirname "$0")/../integration/lib.sh"
. "$(dirname "$0")/slurm_lib.sh"
. "$(dirname "$0")/../shm_files.sh"

test_cleanup() { stop_slurm; }
start_slurm
unset MSRUN_TOKEN MSRUN_TOKEN_FILE

# What srun starts on each node; srun and sbatch pass the environment on.
export MSRUN EXTRA=
cat >"$TMP/node.sh" <<'SH'
#!/bin/bash
# shellcheck disable=SC2086 # EXTRA: the case's own options, word-split
"$MSRUN" --local_worker_num=2 $EXTRA "$@"
echo "MSRUN-EXIT node $SLURM_NODEID code $?"
SH
cat >"$TMP/survivor.sh" <<'SH'
#!/bin/sh
echo "W node $MSR_NODE_RANK rank $MSR_RANK gen $MSR_GENERATION world $MSR_WORLD_SIZE"
[ "$MSR_GENERATION" = 0 ] && exec sleep 300
exit 0
SH
chmod +x "$TMP/node.sh" "$TMP/survivor.sh"

# srun_job NAME ARGS...: srun -N2 of node.sh in the background (the test's
# marker in its environment); $SRUN_PID is srun's pid.
srun_job() {
    local name=$1
    shift
    env MSRUN_TEST_MARKER="$MARKER" srun -J "$name" -N2 --ntasks-per-node=1 "$TMP/node.sh" "$@" \
        >"$TMP/$name.out" 2>"$TMP/$name.err" &
    SRUN_PID=$!
}

# what msrun resolves under srun, and from where
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 60 srun -N2 --ntasks-per-node=1 "$MSRUN" --dry_run \
    --local_worker_num=2 true >"$TMP/dry.out" 2>&1 || fail "srun msrun --dry_run: $(cat "$TMP/dry.out")"
for want in "node_rank = 1 (slurm" "nodes = 2 (slurm" "master_addr = 127.0.0.1 (slurm" \
    "job_id = slurm-[0-9]* (slurm" "auth = munge (slurm"; do
    grep -q "$want" "$TMP/dry.out" || fail "--dry_run under srun lacks '$want': $(cat "$TMP/dry.out")"
done
ok "srun msrun --dry_run: node rank, nodes, master (n1 through NodeAddr), job id, munge from Slurm"

# a. srun, munge authentication, a barrier across the nodes
srun_job a "$WORKER" barrier
wait_pid "$SRUN_PID" 90
expect_code 0 "srun job"
[ "$(grep -c "MSRUN-EXIT node . code 0" "$TMP/a.out")" = 2 ] || fail "srun: both msruns exit 0"
expect_in "authenticated to the coordinator at 127.0.0.1:[0-9]* with munge" "$TMP/a.err" \
    "srun: node 1 authenticated with munge"
no_leftovers "srun job"
ok "a. srun -N2 --ntasks-per-node=1 msrun --local_worker_num=2: no other option, munge, barrier passes"

# b. sbatch of the same job, waited for
cat >"$TMP/batch.sh" <<SH
#!/bin/bash
srun -N2 --ntasks-per-node=1 "$TMP/node.sh" "$WORKER" barrier
SH
CODE=0
env MSRUN_TEST_MARKER="$MARKER" timeout -k 5 90 sbatch --wait -J b -N2 --ntasks-per-node=1 \
    -o "$TMP/b.out" "$TMP/batch.sh" >"$TMP/sbatch.out" 2>&1 || CODE=$?
expect_code 0 "sbatch --wait"
[ "$(grep -c "MSRUN-EXIT node . code 0" "$TMP/b.out")" = 2 ] || fail "sbatch: both msruns exit 0"
no_leftovers "sbatch job"
ok "b. sbatch -N2 of the same job: both msruns exit 0"

# c. scancel of a running job: workers that communicate (shared memory on
#    this host), with the job's directories (TMPDIR) and run records
#    (XDG_RUNTIME_DIR) where the test can see them
mkdir -m 0700 "$TMP/c.tmp" "$TMP/c.run"
TMPDIR=$TMP/c.tmp XDG_RUNTIME_DIR=$TMP/c.run srun_job c "$BUILD/tests/fault_job" "$TMP/c.ck" \
    100000 10 4 "$TMP/c.res"
wait_count "start gen 0 " "$TMP/c.out" 4 60 || fail "scancel: the 4 workers started"
jobid=$(squeue -h -n c -o %i)
[ -n "$jobid" ] || fail "scancel: the job is in squeue"
# what must be gone after: each msrun's job directory and run record
[ "$(find "$TMP/c.tmp" -mindepth 2 -maxdepth 2 -type d -name "slurm-$jobid-*" | wc -l)" = 2 ] ||
    fail "scancel: no job directory of each msrun under TMPDIR: $(find "$TMP/c.tmp")"
[ "$(find "$TMP/c.run" -name '*.job' | wc -l)" = 2 ] ||
    fail "scancel: no run record of each msrun: $(find "$TMP/c.run")"
scancel "$jobid"
wait_pid "$SRUN_PID" 60
for ((i = 0; i < 100; i++)); do
    [ -z "$(squeue -h -j "$jobid" 2>/dev/null)" ] && break
    sleep 0.1
done
[ -z "$(squeue -h -j "$jobid" 2>/dev/null)" ] || fail "scancel: job $jobid still in squeue"
no_leftovers "scancel"
left=$(stale_shm | tr '\n' ' ')
[ -z "$left" ] || fail "scancel: files left in /dev/shm: $left"
left=$(find "$TMP/c.tmp" -mindepth 2; find "$TMP/c.run" -name '*.job')
[ -z "$left" ] || fail "scancel: left behind: $left"
ok "c. scancel of a running job: msrun, its coordinator and every worker are gone; no shared memory, job directory or run record is left"

# d. kill -9 of the msrun that does not host the coordinator: its node is
#    lost, the elastic job (1 to 2 nodes) re-forms on the node left at
#    generation 1 and ends there. (Both nodes are on this host, so both
#    try to start the coordinator: the second gets the job's token with
#    munge from the first's.)
EXTRA="--nnodes=1:2 --node_timeout=2 --max_restarts=1"
srun_job d "$TMP/survivor.sh"
wait_count "gen 0 world 4" "$TMP/d.out" 4 60 || fail "kill: the 4 workers started"
msruns=() coord_parent=
exe=$(readlink -f "$MSRUN")
for p in $(leftovers); do
    [ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" = "$exe" ] || continue
    if [ "$(tr '\0' '\n' <"/proc/$p/cmdline" | sed -n 2p)" = coordinator ]; then
        coord_parent=$(awk '/^PPid:/ {print $2}' "/proc/$p/status")
    else
        msruns+=("$p")
    fi
done
victim=
for p in "${msruns[@]}"; do [ "$p" = "$coord_parent" ] || victim=$p; done
[ ${#msruns[@]} = 2 ] && [ -n "$coord_parent" ] && [ -n "$victim" ] ||
    fail "kill: two msruns (${msruns[*]}) and the coordinator's parent ($coord_parent) found"
lost=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^SLURM_NODEID=//p')
kill -9 "$victim"
wait_pid "$SRUN_PID" 90
expect_in "W node 0 rank 0 gen 1 world 2" "$TMP/d.out" "kill: the job re-formed on the node left"
expect_in "MSRUN-EXIT node $((1 - lost)) code 0" "$TMP/d.out" "kill: the node left ends the job with 0"
expect_in "MSRUN-EXIT node $lost code 137" "$TMP/d.out" "kill: the killed msrun"
no_leftovers "kill -9"
ok "d. kill -9 of one node's msrun: the node is lost, the job re-forms on the other and ends"
