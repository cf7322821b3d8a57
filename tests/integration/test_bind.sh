#!/bin/bash
# --bind_to core|numa|none and MindSpore's --bind_core on this machine: each
# worker's CPUs (/proc/self/status) against the cores and NUMA nodes /sys
# shows, its OMP_NUM_THREADS, and the one line that says oversubscribed.
. "$(dirname "$0")/lib.sh"
unset OMP_NUM_THREADS MSRUN_BIND_TO MSRUN_BIND_CORE

cat >"$TMP/w.sh" <<'SH'
#!/bin/sh
echo "cpus $(grep Cpus_allowed_list /proc/self/status | awk '{print $2}') omp=$OMP_NUM_THREADS"
SH
chmod +x "$TMP/w.sh"

# check.py MODE WORKERS OUT [OMP]: the workers' lines in OUT against this
# machine (the CPUs this shell may use, as msrun may); OMP: the value every
# worker must see instead of the computed one.
cat >"$TMP/check.py" <<'PY'
import glob, re, sys

def cpus(text):
    s = set()
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            s.update(range(int(a), int(b or a) + 1))
    return s

mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
omp_given = sys.argv[4] if len(sys.argv) > 4 else None
allowed = cpus(re.search(r"Cpus_allowed_list:\s*(\S+)", open("/proc/self/status").read()).group(1))
cores = {}  # a core (its sibling threads) -> its allowed threads
for c in allowed:
    sib = open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list").read()
    cores.setdefault(frozenset(cpus(sib)), set()).add(c)
cores = [frozenset(t) for t in cores.values()]
nodes = [cpus(open(f).read()) & allowed for f in glob.glob("/sys/devices/system/node/node*/cpulist")]
nodes = [x for x in nodes if x] or [allowed]
got = {}
for line in open(out):
    m = re.match(r"\[node 0 rank (\d+)\] cpus (\S+) omp=(\S*)$", line)
    if m:
        got[int(m.group(1))] = (cpus(m.group(2)), m.group(3))
assert sorted(got) == list(range(n)), f"workers seen: {sorted(got)}"

def core_count(s):
    held = [c for c in cores if c & s]
    assert all(c <= s for c in held), f"{sorted(s)} holds part of a core"
    return len(held)

seen = set()
for r, (s, omp) in sorted(got.items()):
    assert s and s <= allowed, f"rank {r}: {sorted(s)} not within {sorted(allowed)}"
    if mode == "none":
        assert s == allowed, f"rank {r} bound without --bind_to: {sorted(s)}"
        want = 1
    elif mode == "numa":
        assert s in nodes, f"rank {r}: {sorted(s)} is not a NUMA node's CPUs"
        sharing = sum(1 for t, _ in got.values() if t == s)
        want = max(1, core_count(s) // sharing)
    else:
        want = core_count(s)
        assert any(s <= x for x in nodes), f"rank {r}: {sorted(s)} straddles NUMA nodes"
        if n == 1:
            assert s in nodes, f"one worker: {sorted(s)} is not all of a NUMA node"
        if n > len(cores):
            assert want == 1, f"rank {r}: {want} cores when oversubscribed"
        else:
            assert not (s & seen), f"rank {r}: {sorted(s)} overlaps another worker's"
            assert want == core_count(got[0][0]), f"rank {r}: unequal shares"
            seen |= s
    if omp_given is not None:
        want = omp_given
    assert omp == str(want), f"rank {r}: OMP_NUM_THREADS={omp}, want {want}"
if n == 0:
    print(len(cores))
PY
ncores=$(python3 "$TMP/check.py" none 0 /dev/null) || fail "cannot count this machine's cores"
check() { python3 "$TMP/check.py" "$@" || fail "$1 with $2 workers: $(grep cpus "$TMP/out")"; }
overs() { grep -c "oversubscribed" "$TMP/err"; }

# without binding: every worker may use all of msrun's CPUs, OMP_NUM_THREADS=1
run_msrun --worker_num=2 "$TMP/w.sh"
expect_code 0 "no binding"
check none 2 "$TMP/out"
ok "no binding: all CPUs, OMP_NUM_THREADS=1"

# 2 workers on whole cores: disjoint when there are 2 cores
run_msrun --worker_num=2 --bind-to core "$TMP/w.sh"
expect_code 0 "--bind-to core"
check core 2 "$TMP/out"
if [ "$(grep -o 'cpus [^ ]*' "$TMP/out" | sort -u | wc -l)" != 2 ]; then
    # one core only: both share it, and msrun says so
    [ "$(overs)" = 1 ] || fail "2 workers, one core: oversubscription not said once"
fi
ok "--bind-to core: whole cores each, disjoint, OMP_NUM_THREADS their count"

# MindSpore's flag is the same
cp "$TMP/out" "$TMP/core.out"
run_msrun --worker_num=2 --bind_core "$TMP/w.sh"
expect_code 0 "--bind_core"
check core 2 "$TMP/out"
[ "$(grep -o 'rank.*' "$TMP/out" | sort)" = "$(grep -o 'rank.*' "$TMP/core.out" | sort)" ] ||
    fail "--bind_core differs from --bind-to core"
ok "--bind_core is --bind-to core"

# ranks bound to a core each are not crowded: the communicator counts the
# CPUs of the node's ranks together (not each rank's own mask alone), so
# its waits poll rather than yield at once
if [ "$ncores" -ge 2 ]; then
    MSR_LOG_LEVEL=debug run_msrun --worker_num=2 --bind-to core "$BUILD/bin/comm_bench" \
        --op barrier --iters 10
    expect_code 0 "a communicator under --bind-to core"
    [ "$(grep -c "2 ranks on this machine's 2 cores" "$TMP/out" "$TMP/err" |
        awk -F: '{s += $2} END {print s}')" = 2 ] ||
        fail "bound ranks counted as crowded: $(grep -h 'a wait polls' "$TMP/out" "$TMP/err")"
    ok "--bind-to core: each rank's core counted, waits poll"
fi

# a rank whose calls wait beside its own computation (the torch backend
# sets MSR_COMM_BESIDE_COMPUTE=1): with a core per rank its waits poll
# 1 ms, then yield to the 20 ms they would have polled; more ranks than cores
# keep the shared cores' waits; a wait set by hand wins; a bad value is
# named and ignored
waits() { grep -h -o "a wait polls .*, then sleeps" "$TMP/out" "$TMP/err" | sort -u; }
beside() {
    MSR_LOG_LEVEL=debug MSR_COMM_BESIDE_COMPUTE="$1" run_msrun --worker_num="$2" \
        "$BUILD/bin/comm_bench" --op barrier --iters 10
    expect_code 0 "MSR_COMM_BESIDE_COMPUTE=$1 on $2 ranks"
}
if [ "$ncores" -ge 2 ]; then
    beside 1 2
    [ "$(waits)" = "a wait polls 1000 us, yields until 20000 us (20000 us in shared memory), then sleeps" ] ||
        fail "beside its computation, a core each: $(waits)"
    beside 0 2
    [ "$(waits)" = "a wait polls 20000 us, yields until 20000 us (20000 us in shared memory), then sleeps" ] ||
        fail "not beside, a core each: $(waits)"
    MSR_COMM_SPIN_US=100 beside 1 2
    [ "$(waits)" = "a wait polls 100 us, yields until 19100 us (19100 us in shared memory), then sleeps" ] ||
        fail "beside, MSR_COMM_SPIN_US=100: $(waits)"
    beside 2 2
    [ "$(waits)" = "a wait polls 20000 us, yields until 20000 us (20000 us in shared memory), then sleeps" ] ||
        fail "MSR_COMM_BESIDE_COMPUTE=2 taken: $(waits)"
    grep -q "ignoring MSR_COMM_BESIDE_COMPUTE=2: not an integer in \[0, 1\]" "$TMP/out" "$TMP/err" ||
        fail "MSR_COMM_BESIDE_COMPUTE=2 not named"
    beside 1 $((ncores + 1))
    [ "$(waits)" = "a wait polls 0 us, yields until 1000 us (5000 us in shared memory), then sleeps" ] ||
        fail "beside, $((ncores + 1)) ranks on $ncores cores: $(waits)"
    ok "MSR_COMM_BESIDE_COMPUTE=1: a core each polls 1 ms, then yields; oversubscribed, as before"
fi

# two msrun nodes on this machine, 2 workers each: the world's communicator
# counts the 4 ranks the machine runs as msrun's coordinator told them
# (MSR_MACHINE_RANKS, no store calls); workers without the variable count
# them through the store, the same 4; a sub-communicator counts through the
# store as before
machine() { # ARGS: the worker's command; both nodes' lines in $TMP/m.all
    local port
    port=$(free_port)
    start_node 0 --master_addr=127.0.0.1 --master_port="$port" --nnodes=2 \
        --local_worker_num=2 --node_rank=0 "$@"
    CODE=0
    timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --master_addr=127.0.0.1 \
        --master_port="$port" --nnodes=2 --local_worker_num=2 --node_rank=1 "$@" \
        >"$TMP/node1.out" 2>"$TMP/node1.err" || CODE=$?
    expect_code 0 "node 1 of two on this machine ($(tail -3 "$TMP/node1.err"))"
    wait_pid "$PID0" 30
    expect_code 0 "node 0 of two on this machine ($(tail -3 "$TMP/node0.err"))"
    cat "$TMP"/node[01].out "$TMP"/node[01].err >"$TMP/m.all"
}
counted() { grep -c "ranks on this machine, $1" "$TMP/m.all"; }
use_token_file
export MSR_LOG_LEVEL=debug
machine "$BUILD/bin/comm_bench" --op barrier --iters 10
[ "$(counted "as msrun's coordinator counted them")" = 4 ] && [ "$(counted "counted through")" = 0 ] ||
    fail "the coordinator's count not taken: $(grep -h 'ranks on this machine' "$TMP/m.all")"
[ "$(grep -c "4 ranks on this machine, as msrun's coordinator" "$TMP/m.all")" = 4 ] ||
    fail "two nodes of 2: $(grep -h 'ranks on this machine' "$TMP/m.all")"
cat >"$TMP/untold.sh" <<SH
#!/bin/sh
unset MSR_MACHINE_RANKS
exec "$BUILD/bin/comm_bench" --op barrier --iters 10
SH
chmod +x "$TMP/untold.sh"
machine "$TMP/untold.sh"
[ "$(grep -c "4 ranks on this machine, counted through the store" "$TMP/m.all")" = 4 ] &&
    [ "$(counted "as msrun's")" = 0 ] ||
    fail "without MSR_MACHINE_RANKS: $(grep -h 'ranks on this machine' "$TMP/m.all")"
unset MSR_LOG_LEVEL MSRUN_TOKEN_FILE
ok "two nodes on one machine: 4 ranks counted, by the coordinator or through the store"

# one worker: every core of its NUMA node, one OpenMP thread per core
run_msrun --worker_num=1 --bind-to core "$TMP/w.sh"
expect_code 0 "--bind-to core, one worker"
check core 1 "$TMP/out"
ok "--bind-to core, one worker: its node's cores, OMP_NUM_THREADS their count"

# more workers than cores: they share cores round-robin, said once
over=$((ncores + 2))
run_msrun --worker_num=$over --bind_to=core "$TMP/w.sh"
expect_code 0 "oversubscribed"
check core $over "$TMP/out"
[ "$(overs)" = 1 ] || fail "$over workers on $ncores cores: oversubscription said $(overs) times"
expect_in "$over workers on $ncores core" "$TMP/err" "the oversubscription line"
# ...also when the job restarts (generation 0 fails, generation 1 succeeds)
cat >"$TMP/fail0.sh" <<'SH'
#!/bin/sh
[ "$MSR_GENERATION" = 0 ] && exit 1
exec "$(dirname "$0")/w.sh"
SH
chmod +x "$TMP/fail0.sh"
run_msrun --worker_num=$over --bind_to=core --max_restarts=1 "$TMP/fail0.sh"
expect_code 0 "oversubscribed, restarted"
check core $over "$TMP/out"
expect_in "generation 1: started" "$TMP/err" "the restart"
[ "$(overs)" = 1 ] || fail "restarted: oversubscription said $(overs) times"
ok "$over workers on $ncores cores: shared round-robin, said once"

# a user's OMP_NUM_THREADS is kept
CODE=0
timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" OMP_NUM_THREADS=3 "$MSRUN" --worker_num=2 \
    --bind-to core "$TMP/w.sh" >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "user's OMP_NUM_THREADS"
check core 2 "$TMP/out" 3
ok "OMP_NUM_THREADS set by the user is kept"

# numa: all the cores of one node (this machine may have one)
run_msrun --worker_num=2 --bind-to numa "$TMP/w.sh"
expect_code 0 "--bind-to numa"
check numa 2 "$TMP/out"
ok "--bind-to numa: a NUMA node's CPUs each"

# restricted to msrun's own CPUs: under taskset, both workers share its one CPU
first=$(grep Cpus_allowed_list /proc/self/status | awk '{print $2}' | sed 's/[-,].*//')
if command -v taskset >/dev/null; then
    CODE=0
    timeout -k 5 60 env MSRUN_TEST_MARKER="$MARKER" taskset -c "$first" "$MSRUN" --worker_num=2 \
        --bind-to core "$TMP/w.sh" >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_code 0 "under taskset"
    [ "$(grep -c "cpus $first omp=1$" "$TMP/out")" = 2 ] ||
        fail "under taskset -c $first: $(grep cpus "$TMP/out")"
    [ "$(overs)" = 1 ] || fail "under taskset: oversubscription not said once"
    ok "--bind-to core keeps to the CPUs msrun may use"
fi

# GPUs, through a machine hwloc reads from XML (HWLOC_XMLFILE): two NUMA
# nodes of one core each (two CPUs this shell may use), device 0 on the PCI
# bus of node 1 and device 1 on node 0. A worker goes to its GPU's node.
read -r cpu_a cpu_b _ < <(python3 -c '
import re
s = re.search(r"Cpus_allowed_list:\s*(\S+)", open("/proc/self/status").read()).group(1)
c = []
for p in s.split(","):
    a, _, b = p.partition("-")
    c += range(int(a), int(b or a) + 1)
print(*c[:2], "x")')
if [ -n "$cpu_b" ] && [ "$cpu_b" != x ]; then
    python3 - "$cpu_a" "$cpu_b" >"$TMP/topo.xml" <<'PY'
import sys
a, b = int(sys.argv[1]), int(sys.argv[2])
def mask(*cpus):
    v = sum(1 << c for c in cpus)
    words = [(v >> (32 * i)) & 0xFFFFFFFF for i in range(max(cpus) // 32 + 1)]
    return ",".join("0x%08x" % w for w in reversed(words))
def sets(cpus, nodes):
    return (f'cpuset="{mask(*cpus)}" complete_cpuset="{mask(*cpus)}" '
            f'nodeset="{mask(*nodes)}" complete_nodeset="{mask(*nodes)}"')
def package(i, cpu, bus):
    g = 10 * (i + 1)
    return f"""
    <object type="Package" os_index="{i}" {sets([cpu], [i])} gp_index="{g}">
      <object type="NUMANode" os_index="{i}" {sets([cpu], [i])} gp_index="{g + 1}" local_memory="1073741824"/>
      <object type="Core" os_index="{cpu}" {sets([cpu], [i])} gp_index="{g + 2}">
        <object type="PU" os_index="{cpu}" {sets([cpu], [i])} gp_index="{g + 3}"/>
      </object>
      <object type="Bridge" gp_index="{g + 4}" bridge_type="0-1" depth="0" bridge_pci="0000:[{bus:02x}-{bus:02x}]">
        <object type="PCIDev" gp_index="{g + 5}" pci_busid="0000:{bus:02x}:00.0" pci_type="0302 [10de:2330] [10de:16c1] a1" pci_link_speed="0.000000"/>
      </object>
    </object>"""
print(f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" {sets([a, b], [0, 1])} allowed_cpuset="{mask(a, b)}" allowed_nodeset="{mask(0, 1)}" gp_index="1">{package(0, a, 0x80)}{package(1, b, 0x40)}
  </object>
</topology>""")
PY
    # gpu_run CUDA_VISIBLE_DEVICES|unset MODE WANT0 WANT1: ranks 0 and 1 on CPUs WANT0, WANT1
    gpu_run() {
        local cvd=(env)
        [ "$1" != unset ] && cvd=(env "CUDA_VISIBLE_DEVICES=$1")
        CODE=0
        timeout -k 5 60 "${cvd[@]}" MSRUN_TEST_MARKER="$MARKER" HWLOC_XMLFILE="$TMP/topo.xml" \
            "$MSRUN" --worker_num=2 --bind-to "$2" "$TMP/w.sh" >"$TMP/out" 2>"$TMP/err" || CODE=$?
        expect_code 0 "GPUs, CUDA_VISIBLE_DEVICES=$1, $2"
        expect_in "rank 0\] cpus $3 omp=1" "$TMP/out" "CUDA_VISIBLE_DEVICES=$1 $2: rank 0"
        expect_in "rank 1\] cpus $4 omp=1" "$TMP/out" "CUDA_VISIBLE_DEVICES=$1 $2: rank 1"
    }
    gpu_run unset core "$cpu_b" "$cpu_a"  # device 0 is on node 1
    gpu_run 1,0 core "$cpu_a" "$cpu_b"    # device 0 is the second GPU
    gpu_run 0 core "$cpu_b" "$cpu_a"      # one device: rank 1 finds node 1 full
    gpu_run unset numa "$cpu_b" "$cpu_a"
    gpu_run GPU-4f0c core "$cpu_a" "$cpu_b" # by UUID: not known, plain placement
    gpu_run "" numa "$cpu_a" "$cpu_b"       # no devices
    ok "--bind-to core and numa put workers on their GPU's NUMA node"
else
    echo "skip GPU placement: needs 2 CPUs"
fi

# bad values: one line, exit 2, no worker started
for bad in "--bind-to foo" "--bind_to=" "--bind_core --bind-to numa"; do
    # shellcheck disable=SC2086
    run_msrun --worker_num=1 $bad "$TMP/w.sh"
    expect_code 2 "$bad"
    [ "$(wc -l <"$TMP/err")" = 1 ] || fail "$bad: not one line"
    expect_in "^msrun: error: " "$TMP/err" "$bad"
    expect_not_in "cpus" "$TMP/out" "$bad started a worker"
done
ok "bad --bind-to values are refused"
no_leftovers "bind"
