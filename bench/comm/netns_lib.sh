# Sourced by bench/comm/netns_bench.sh and tests/comm/netns_2nodes.sh: an
# emulated cluster network on one host. Each "node" is a network namespace
# (NS_PREFIX-nI, address 10.77.0.(I+1)/24 on its eth0) joined by a veth pair
# to a bridge in a hub namespace (NS_PREFIX-hub), so nothing touches the
# host's own network. Each node's link is limited to the same rate in both
# directions by a token bucket (tbf) on each end's egress: tbf on the node's
# eth0 shapes what the node sends, tbf on the hub's end what it receives.
#
# NS_PREFIX holds the owner's pid (msrnb<pid>), so a set whose owner died is
# found and removed by the next run (netns_remove_stale) and two runs
# beside each other never share a name. Deleting a namespace deletes the
# veths and the bridge in it; netns_down first kills every process that
# still runs inside (ip netns pids: exactly the processes of that network,
# which this harness started).
#
# Functions return non-zero and print the reason on failure; none exits.

# shellcheck shell=bash
NS_BASE=msrnb
NS_PREFIX=$NS_BASE$$
NS_NET=10.77.0

# netns_usable: 0 when this shell may build the network (root, ip, tc, a
# namespace can be made and a tbf qdisc attached); otherwise prints why and
# returns 1.
netns_usable() {
    local t=${NS_PREFIX}-probe
    if [ "$(id -u)" != 0 ]; then
        echo "needs root (network namespaces, veth pairs and tc qdiscs)"
        return 1
    fi
    local c
    for c in ip tc unshare; do
        command -v "$c" >/dev/null 2>&1 || { echo "no '$c' command on this host"; return 1; }
    done
    if ! ip netns add "$t" 2>/dev/null; then
        echo "'ip netns add' fails here (no network namespaces or no privilege)"
        return 1
    fi
    local ok=1
    if ! ip -n "$t" link add probe0 type veth peer name probe1 2>/dev/null; then
        echo "no veth pairs on this kernel"
        ok=0
    elif ! tc -n "$t" qdisc add dev probe0 root tbf rate 1gbit burst 256kb latency 20ms 2>/dev/null; then
        echo "no tbf qdisc on this kernel (needed to limit the link's rate)"
        ok=0
    elif ! unshare --uts true 2>/dev/null; then
        echo "'unshare --uts' fails here (each node needs its own hostname)"
        ok=0
    fi
    ip netns del "$t" 2>/dev/null
    [ $ok = 1 ]
}

# netns_has_qdisc KIND: whether tc can attach that qdisc (netem adds delay)
netns_has_qdisc() {
    local t=${NS_PREFIX}-q ok=1
    ip netns add "$t" 2>/dev/null || return 1
    ip -n "$t" link add q0 type veth peer name q1 2>/dev/null &&
        tc -n "$t" qdisc add dev q0 root "$1" 2>/dev/null || ok=0
    ip netns del "$t" 2>/dev/null
    [ $ok = 1 ]
}

# netns_kill NS: SIGTERM, then after up to 3 s SIGKILL, every process in NS
netns_kill() {
    local pids p i
    pids=$(ip netns pids "$1" 2>/dev/null)
    [ -z "$pids" ] && return 0
    for p in $pids; do kill -TERM "$p" 2>/dev/null; done
    for ((i = 0; i < 30; i++)); do
        pids=$(ip netns pids "$1" 2>/dev/null)
        [ -z "$pids" ] && return 0
        sleep 0.1
    done
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
    for ((i = 0; i < 30; i++)); do
        [ -z "$(ip netns pids "$1" 2>/dev/null)" ] && return 0
        sleep 0.1
    done
    echo "netns: processes $(ip netns pids "$1" | tr '\n' ' ')outlive SIGKILL in $1" >&2
}

# netns_remove PREFIX: kill the processes of every namespace of that set and
# delete the namespaces (their veths and bridge go with them)
netns_remove() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$1-"); do
        netns_kill "$ns"
        ip netns del "$ns" 2>/dev/null
    done
}

# netns_down: remove this run's set
netns_down() { netns_remove "$NS_PREFIX"; }

# netns_remove_stale: remove the sets left by earlier runs that died (their
# owner pid is gone or a zombie); prints what it removed
netns_remove_stale() {
    local owner
    for owner in $(ip netns list 2>/dev/null | sed -n "s/^$NS_BASE\([0-9][0-9]*\)-.*/\1/p" | sort -u); do
        [ "$owner" = $$ ] && continue
        # alive, and not a zombie whose parent has yet to reap it
        [ -r "/proc/$owner/stat" ] && [ "$(sed 's/.*) //' "/proc/$owner/stat" 2>/dev/null | cut -d' ' -f1)" != Z ] &&
            continue
        echo "netns: removing the stale set of run $owner"
        netns_remove "$NS_BASE$owner"
    done
}

# netns_rate_bps RATE: tc's rate syntax (10gbit, 500mbit, 2gbit) in bits/s
netns_rate_bps() {
    echo "$1" | awk '{
        r = tolower($0); m = 1
        if (r ~ /gbit$/) { m = 1e9; sub(/gbit$/, "", r) }
        else if (r ~ /mbit$/) { m = 1e6; sub(/mbit$/, "", r) }
        else if (r ~ /kbit$/) { m = 1e3; sub(/kbit$/, "", r) }
        else if (r ~ /bit$/) { sub(/bit$/, "", r) }
        else { exit 1 }
        if (r !~ /^[0-9]+(\.[0-9]+)?$/ || r + 0 <= 0) exit 1
        printf "%.0f\n", r * m }'
}

# netns_up N RATE: N node namespaces on a bridge, each link limited to RATE
# (tc syntax) both ways. The token bucket holds 200 us of traffic, at least
# 256 KiB: more than one 64 KiB TSO segment, which tbf would otherwise cut
# (costly on a veth), and little enough that bursts barely exceed the rate.
netns_up() {
    local n=$1 rate=$2 bps burst hub=${NS_PREFIX}-hub i ns
    bps=$(netns_rate_bps "$rate") || { echo "netns: bad rate '$rate' (e.g. 10gbit, 500mbit)"; return 1; }
    burst=$((bps / 8 / 5000))
    [ $burst -lt 262144 ] && burst=262144
    ip netns add "$hub" || return 1
    ip -n "$hub" link set lo up &&
        ip -n "$hub" link add br0 type bridge &&
        ip -n "$hub" link set br0 up || return 1
    for ((i = 0; i < n; i++)); do
        ns=${NS_PREFIX}-n$i
        ip netns add "$ns" || return 1
        ip -n "$hub" link add "v$i" type veth peer name eth0 netns "$ns" &&
            ip -n "$hub" link set "v$i" master br0 &&
            ip -n "$hub" link set "v$i" up &&
            ip -n "$ns" link set lo up &&
            ip -n "$ns" addr add "$NS_NET.$((i + 1))/24" dev eth0 &&
            ip -n "$ns" link set eth0 up &&
            tc -n "$ns" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 20ms &&
            tc -n "$hub" qdisc add dev "v$i" root tbf rate "$rate" burst "$burst" latency 20ms ||
            return 1
    done
    # the bridge forwards once its ports are up (no STP: at once): wait
    # for that, at most 5 s
    for ((i = 0; i < n; i++)); do
        local t
        for ((t = 0; t < 50; t++)); do
            ip -n "$hub" -br link show "v$i" | grep -q ' UP ' && break
            sleep 0.1
        done
        [ $t -lt 50 ] || { echo "netns: node $i's link does not come up"; return 1; }
    done
}

# netns_addr I: node I's address
netns_addr() { echo "$NS_NET.$(($1 + 1))"; }

# netns_bytes I [tx|rx]: bytes node I's link carried so far: sent (tx),
# received (rx) or both (default)
netns_bytes() {
    local s=/sys/class/net/eth0/statistics expr
    case ${2:-both} in
    tx | rx) expr="\$(cat $s/${2}_bytes)" ;;
    *) expr="\$((\$(cat $s/tx_bytes) + \$(cat $s/rx_bytes)))" ;;
    esac
    ip netns exec "${NS_PREFIX}-n$1" sh -c "echo $expr"
}

# netns_exec I CMD...: run CMD in node I: its network namespace and a UTS
# namespace of its own whose hostname is nodeI (so no library takes the
# "nodes" for one machine by name)
netns_exec() {
    local i=$1
    shift
    ip netns exec "${NS_PREFIX}-n$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$i" "$@"
}
