# shellcheck shell=bash
# Shared by tests/python's scripts (sourced after tests/integration/lib.sh):
# py_setup MODULES checks that /usr/bin/python3 imports MODULES (exits 77,
# skipped, with the reason otherwise), points Python at the package of the
# source tree and libmsrun of the build tree, and in a sanitizer build
# preloads the sanitizer's runtime (exits 77 when Python cannot load
# libmsrun even so). Sets PY.
PY=/usr/bin/python3

py_setup() {
    local needs=$1
    if [ ! -x "$PY" ]; then
        echo "SKIP: no $PY (Debian: python3)"
        exit 77
    fi
    if ! "$PY" -c "import $needs" >"$TMP/imports" 2>&1; then
        echo "SKIP: $PY cannot import $needs (Debian: python3-numpy, python3-torch):" \
            "$(tail -n 1 "$TMP/imports")"
        exit 77
    fi
    export PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH}
    export MSRUN_LIBRARY=$BUILD/lib/libmsrun.so
    export MSRUN_PYTEST_DIR=$TMP/shared
    mkdir -p "$MSRUN_PYTEST_DIR"
    [ -n "${MSRUN_SANITIZE:-}" ] || return 0
    # Python is not built with the sanitizer: its runtime is preloaded (into
    # msrun too, which links it anyway). Leaks are not checked: the
    # interpreter's own allocations would drown libmsrun's. UCX must not
    # hook malloc/mmap under ASan.
    local rt=
    case $MSRUN_SANITIZE in
    *address*) rt=libasan.so ;;
    *thread*) rt=libtsan.so ;;
    esac
    if [ -n "$rt" ]; then
        local rtpath
        rtpath=$(${MSRUN_CC:-cc} -print-file-name="$rt" 2>/dev/null)
        if [ ! -f "$rtpath" ]; then
            echo "SKIP: sanitizer build ($MSRUN_SANITIZE): no $rt to preload into Python"
            exit 77
        fi
        # with the C++ runtime too: Python does not link it, and ASan's
        # __cxa_throw interceptor must find it at start (torch's threads
        # throw and catch while Gloo connects)
        local cxx
        cxx=$(${MSRUN_CC:-cc} -print-file-name=libstdc++.so.6 2>/dev/null)
        [ -f "$cxx" ] && rtpath=$rtpath:$cxx
        export LD_PRELOAD=$rtpath${LD_PRELOAD:+:$LD_PRELOAD}
    fi
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
    export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_EVENTS=no
    if ! timeout 60 "$PY" -c "import $needs; import msrun; msrun.init().finalize()" \
        >"$TMP/probe" 2>&1; then
        echo "SKIP: sanitizer build ($MSRUN_SANITIZE): Python cannot load this libmsrun" \
            "with $rt preloaded: $(grep -m 1 -E 'ERROR|Error|error' "$TMP/probe")"
        exit 77
    fi
}
