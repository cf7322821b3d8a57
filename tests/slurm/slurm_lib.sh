# A real Slurm of the test's own on this host (sourced after
# tests/integration/lib.sh): munged, slurmctld and two slurmd nodes n1 and
# n2 on loopback, every file under $TMP/slurm, the configuration through
# SLURM_CONF. start_slurm exits 77 (skipped) with the reason when not root
# or when Slurm or munge is missing; stop_slurm (from test_cleanup) stops
# them all, jobs first. Ports: SLURM_TEST_PORT (slurmctld, default 17000)
# and the two after it (the slurmd nodes).

slurm_skip() {
    echo "SKIP: $*"
    exit 77
}

start_slurm() {
    [ "$(id -u)" = 0 ] || slurm_skip "a real Slurm needs root (slurmd runs jobs as their users)"
    local b
    for b in slurmctld slurmd srun sbatch squeue scancel sinfo scontrol munged munge; do
        command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] ||
            slurm_skip "$b is not installed (Debian: slurmctld slurmd slurm-client munge)"
    done
    start_munged
    SD=$TMP/slurm
    mkdir -p "$SD/state" "$SD/spool"
    local host port=${SLURM_TEST_PORT:-17000} i
    host=$(hostname -s)
    export SLURM_CONF=$SD/slurm.conf
    cat >"$SLURM_CONF" <<CONF
ClusterName=msrt
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MSRUN_MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$SD/state
SlurmdSpoolDir=$SD/spool/%n
SlurmctldPidFile=$SD/slurmctld.pid
SlurmdPidFile=$SD/slurmd-%n.pid
SlurmctldLogFile=$SD/slurmctld.log
SlurmdLogFile=$SD/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Slurm's default: scancel's SIGKILL comes 30 s after its SIGTERM, so
# msrun's own --grace_period (5 s) for its workers fits before it
KillWait=30
InactiveLimit=0
NodeName=n[1-2] NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 1))-$((port + 2)) CPUs=2 State=UNKNOWN
PartitionName=msrt Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
CONF
    slurmctld -D -i -f "$SLURM_CONF" >"$SD/slurmctld.out" 2>&1 &
    SLURMCTLD_PID=$!
    slurmd -D -N n1 -f "$SLURM_CONF" >"$SD/slurmd-n1.out" 2>&1 &
    SLURMD1_PID=$!
    slurmd -D -N n2 -f "$SLURM_CONF" >"$SD/slurmd-n2.out" 2>&1 &
    SLURMD2_PID=$!
    for ((i = 0; i < 300; i++)); do
        [ "$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle$')" = 2 ] && return 0
        sleep 0.1
    done
    tail -n 20 "$SD"/*.log "$SD"/*.out >&2
    sinfo -N 2>&1 >&2
    fail "the Slurm nodes were not idle within 30 s"
}

stop_slurm() {
    [ -n "${SLURMCTLD_PID:-}" ] || { stop_munged; return 0; }
    scancel --full -u root >/dev/null 2>&1
    local p i
    for p in "$SLURMD1_PID" "$SLURMD2_PID" "$SLURMCTLD_PID"; do kill "$p" 2>/dev/null; done
    for ((i = 0; i < 100; i++)); do
        kill -0 "$SLURMD1_PID" 2>/dev/null || kill -0 "$SLURMD2_PID" 2>/dev/null ||
            kill -0 "$SLURMCTLD_PID" 2>/dev/null || break
        sleep 0.1
    done
    for p in "$SLURMD1_PID" "$SLURMD2_PID" "$SLURMCTLD_PID"; do
        kill -9 "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    # slurmstepd of a job slurmd did not end
    for p in $(pgrep -f "slurmstepd: \[" 2>/dev/null); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" &&
            kill -9 "$p" 2>/dev/null
    done
    SLURMCTLD_PID=
    stop_munged
}
