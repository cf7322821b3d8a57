#!/bin/bash
# libmsrun does not load gRPC: its DT_NEEDED entries and everything ldd
# resolves from them name no gRPC library, a worker under msrun runs
# without mapping one (it talks to its msrun over the worker channel), and
# direct mode loads libmsrun-grpc.so on demand, or says clearly that it
# cannot. Where the build linked the msrun executable with gRPC's static
# archives (MSRUN_STATIC_GRPC=1, from CMake), msrun maps no gRPC shared
# library either, its coordinator child and its workers included.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
LIB=$BUILD/lib/libmsrun.so.0
HELLO=$BUILD/bin/hello_store
GRPC='lib(grpc|gpr|absl|upb|re2|ssl)'

ldd "$LIB" >"$TMP/out" 2>"$TMP/err" || fail "ldd $LIB"
grep -q 'libprotobuf-c' "$TMP/out" || fail "ldd lists nothing of libmsrun's (protobuf-c missing)"
grep -Eq "$GRPC" "$TMP/out" && fail "libmsrun loads gRPC: $(grep -E "$GRPC" "$TMP/out" | head -3)"
if command -v readelf >/dev/null; then
    readelf -d "$LIB" | grep NEEDED >"$TMP/out"
    grep -Eq "$GRPC" "$TMP/out" && fail "libmsrun's DT_NEEDED names gRPC"
fi
ok "ldd of libmsrun lists no gRPC library"

# a job of two workers: no gRPC library mapped in either (the loader's
# own record of what it loaded, dlopen included)
mkdir -p "$TMP/ld"
run_msrun --worker_num=2 --local_worker_num=2 env LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/ld/w" \
    "$HELLO"
expect_code 0 "hello_store under msrun"
expect_in "2 ranks gathered" "$TMP/out" "the workers gathered through the store"
[ "$(cat "$TMP"/ld/w.* | grep -c 'file=libmsrun.so')" -ge 2 ] || fail "no loader record of libmsrun"
cat "$TMP"/ld/w.* | grep -E "file=$GRPC" >"$TMP/out" && fail "a worker loaded gRPC"
ok "workers under msrun run without gRPC"

if [ "${MSRUN_STATIC_GRPC:-0}" = 1 ]; then
    ldd "$MSRUN" >"$TMP/out" 2>"$TMP/err" || fail "ldd $MSRUN"
    grep -q 'libc.so' "$TMP/out" || fail "ldd lists nothing of msrun's (libc missing)"
    grep -Eq "$GRPC" "$TMP/out" && fail "msrun loads gRPC: $(grep -E "$GRPC" "$TMP/out" | head -3)"
    # the two abseil functions rendezvous/rpc.c finds with dlsym are in
    # msrun's dynamic symbol table (else the mutexes' deadlock detection
    # stays on and the frequency probe comes late, silently)
    if command -v nm >/dev/null; then
        nm -D --defined-only "$MSRUN" >"$TMP/out"
        for f in SetMutexDeadlockDetectionMode NominalCPUFrequency; do
            grep -q "_ZN4absl.*$f" "$TMP/out" || fail "msrun does not export abseil's $f"
        done
    fi
    # every process of a job (msrun, the coordinator it forks, the
    # workers): the loader's record names none
    mkdir -p "$TMP/ldm"
    LD_DEBUG=files LD_DEBUG_OUTPUT="$TMP/ldm/p" run_msrun --worker_num=2 --local_worker_num=2 "$HELLO"
    expect_code 0 "hello_store under msrun, msrun's loader recorded"
    [ "$(cat "$TMP"/ldm/p.* | grep -c 'file=libmunge')" -ge 1 ] || fail "no loader record of msrun"
    cat "$TMP"/ldm/p.* | grep -E "file=$GRPC" >"$TMP/out" &&
        fail "a process of the job loaded gRPC: $(head -3 "$TMP/out")"
    ok "msrun runs a job without gRPC's shared libraries (linked statically)"
else
    echo "skip: this build links msrun with gRPC's shared libraries (MSRUN_STATIC_GRPC)"
fi

# direct mode: the plugin is loaded (the call fails for want of a
# coordinator, not of gRPC) ...
port=$(free_port)
direct() {
    CODE=0
    timeout -k 5 30 env MSR_COORDINATOR="127.0.0.1:$port" MSR_TOKEN=t MSR_WORLD_SIZE=2 MSR_RANK=0 \
        MSR_CONNECT_TIMEOUT=1 MSR_TIMEOUT=2 "$@" "$HELLO" >"$TMP/out" 2>"$TMP/err" || CODE=$?
}
direct
[ "$CODE" = 1 ] || fail "direct mode without a coordinator exited $CODE"
expect_not_in "libmsrun-grpc" "$TMP/err" "the plugin was loaded"
expect_in "unreachable" "$TMP/err" "the coordinator is unreachable"
# ... and without it beside libmsrun, the error names it
mkdir -p "$TMP/lib"
cp "$LIB" "$TMP/lib/"
direct env LD_LIBRARY_PATH="$TMP/lib"
[ "$CODE" = 1 ] || fail "direct mode without the plugin exited $CODE"
expect_in "needs gRPC, from libmsrun-grpc.so, which cannot be loaded" "$TMP/err" \
    "the error names the plugin"
ok "direct mode loads libmsrun-grpc.so, or says it cannot"
no_leftovers "libmsrun deps"
