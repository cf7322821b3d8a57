# Helpers for tests that need several hosts: network namespaces joined by a
# veth pair, each with an address of its own. Sourced after lib.sh.
NS_A="msrt-a-$$"
NS_B="msrt-b-$$"
NET="10.$((200 + $$ % 50)).$(($$ % 250)).0"
ADDR_A="${NET%.0}.1"
ADDR_B="${NET%.0}.2"

netns_available() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "not root"
        return 1
    fi
    if ! command -v ip >/dev/null; then
        echo "no ip command (iproute2)"
        return 1
    fi
    if ! ip netns add "$NS_A.probe" 2>/dev/null; then
        echo "cannot create network namespaces here"
        return 1
    fi
    ip netns del "$NS_A.probe" 2>/dev/null
    return 0
}

netns_up() {
    ip netns add "$NS_A" && ip netns add "$NS_B" &&
        ip link add "va$$" type veth peer name "vb$$" &&
        ip link set "va$$" netns "$NS_A" && ip link set "vb$$" netns "$NS_B" &&
        ip -n "$NS_A" addr add "$ADDR_A/24" dev "va$$" &&
        ip -n "$NS_B" addr add "$ADDR_B/24" dev "vb$$" &&
        ip -n "$NS_A" link set lo up && ip -n "$NS_B" link set lo up &&
        ip -n "$NS_A" link set "va$$" up && ip -n "$NS_B" link set "vb$$" up
}

netns_down() {
    ip netns del "$NS_A" 2>/dev/null
    ip netns del "$NS_B" 2>/dev/null
}

# in_ns NS CMD...: runs CMD inside namespace NS
in_ns() {
    local ns=$1
    shift
    ip netns exec "$ns" "$@"
}
