# A real etcd for a test, on free ports (of loopback unless ETCD_HOST says)
# with its data in the test's directory (sourced after lib.sh). It carries
# the test's marker, so lib.sh's cleanup kills it whatever happens. Skips
# the test (exit 77) without etcd, or without etcdctl, with which it checks
# that etcd answers and reads what msrun wrote (before: "etcd did not
# start").
ETCD_BIN=$(command -v etcd || true)
if [ -z "$ETCD_BIN" ]; then
    echo "SKIP: no etcd (Debian: apt-get install etcd-server)"
    exit 77
fi
if ! command -v etcdctl >/dev/null; then
    echo "SKIP: no etcdctl (Debian: apt-get install etcd-client)"
    exit 77
fi

# Where etcd runs: ETCD_HOST, the address it listens on (loopback unless
# set), and ETCD_NS, a network namespace to run it and etcdctl in
# (netns.sh; none unless set).
ETCD_HOST=${ETCD_HOST:-127.0.0.1}
ETCD_NS=${ETCD_NS:-}

# etcd_in CMD...: runs CMD where etcd runs
etcd_in() {
    if [ -n "$ETCD_NS" ]; then ip netns exec "$ETCD_NS" "$@"; else "$@"; fi
}

# start_etcd: starts etcd (ETCD_PID) answering at ETCD_EP (host:port), with
# a short election timeout so that 1 s leases are granted as asked.
start_etcd() {
    ETCD_CPORT=${ETCD_CPORT:-$(free_port)}
    ETCD_PPORT=${ETCD_PPORT:-$(free_port)}
    ETCD_EP="$ETCD_HOST:$ETCD_CPORT"
    mkdir -p "$TMP/etcd"
    # ip and env exec etcd: ETCD_PID is etcd's own
    local in=()
    [ -z "$ETCD_NS" ] || in=(ip netns exec "$ETCD_NS")
    "${in[@]}" env MSRUN_TEST_MARKER="$MARKER" ETCD_UNSUPPORTED_ARCH= "$ETCD_BIN" --name t \
        --data-dir "$TMP/etcd/data" \
        --listen-client-urls "http://$ETCD_EP" --advertise-client-urls "http://$ETCD_EP" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PPORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PPORT" \
        --initial-cluster "t=http://127.0.0.1:$ETCD_PPORT" \
        --heartbeat-interval 50 --election-timeout 500 \
        >>"$TMP/etcd/log" 2>&1 &
    ETCD_PID=$!
    local i
    for ((i = 0; i < 200; i++)); do
        if etcd_in env ETCDCTL_API=3 etcdctl --endpoints "$ETCD_EP" --dial-timeout 1s \
            endpoint health >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$ETCD_PID" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$TMP/etcd/log" >&2
    fail "etcd did not start at $ETCD_EP"
}

stop_etcd() {
    kill -9 "$ETCD_PID" 2>/dev/null
    wait "$ETCD_PID" 2>/dev/null
}

etcd_get() {
    etcd_in env ETCDCTL_API=3 etcdctl --endpoints "$ETCD_EP" --dial-timeout 2s \
        --command-timeout 3s get "$@"
}
