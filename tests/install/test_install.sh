#!/usr/bin/env bash
# msrun installed like a library: `cmake --install` of the build tree into a
# temporary prefix (moved afterwards: nothing may point back at the place it
# was installed to) holds bin/msrun, libmsrun.so with a versioned SONAME and
# no CUDA library among what it needs, libmsrun.a, the public headers (each
# compiling on its own), msrun.pc and the CMake package. A worker built
# outside the tree with `pkg-config --cflags --libs msrun`, one linked with
# libmsrun.a and `pkg-config --static`, and one built with find_package(msrun)
# run under the installed msrun, 2 ranks each.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
CC=${CC:-cc}

cmake --install "$BUILD" --prefix "$TMP/staged" >"$TMP/install.log" 2>&1 ||
    fail "cmake --install: $(tail -n 5 "$TMP/install.log")"
mv "$TMP/staged" "$TMP/p"
P=$TMP/p
MSRUN=$P/bin/msrun # run_msrun runs the installed launcher
version=$(sed -n 's/^#define MSR_VERSION_STRING *"\(.*\)"/\1/p' "$SRC/include/msrun/base.h")
major=${version%%.*}
# lib, or lib/<multiarch> where the build was configured for /usr
LIB=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
LIB=${LIB:-lib}

# ---- the files
for f in bin/msrun "$LIB/libmsrun.so" "$LIB/libmsrun.so.$major" "$LIB/libmsrun.so.$version" \
    "$LIB/libmsrun.a" "$LIB/pkgconfig/msrun.pc" "$LIB/cmake/msrun/msrunConfig.cmake" \
    "$LIB/cmake/msrun/msrunConfigVersion.cmake" "$LIB/cmake/msrun/msrunTargets.cmake"; do
    [ -e "$P/$f" ] || fail "install: no $f"
done
[ "$(readlink "$P/$LIB/libmsrun.so")" = "libmsrun.so.$major" ] || fail "libmsrun.so -> $(readlink "$P/$LIB/libmsrun.so")"
[ "$(readlink "$P/$LIB/libmsrun.so.$major")" = "libmsrun.so.$version" ] ||
    fail "libmsrun.so.$major -> $(readlink "$P/$LIB/libmsrun.so.$major")"
readelf -d "$P/$LIB/libmsrun.so.$version" >"$TMP/dyn"
grep -q "Library soname: \[libmsrun.so.$major\]" "$TMP/dyn" || fail "SONAME: $(grep SONAME "$TMP/dyn")"
# libmsrun loads CUDA and NCCL only when a device communicator is asked for
if grep -E "NEEDED.*(cuda|nccl|cublas)" "$TMP/dyn"; then fail "libmsrun.so needs a CUDA library"; fi
grep -q "RPATH\|RUNPATH" "$TMP/dyn" && fail "installed libmsrun.so keeps a build path: $(grep PATH "$TMP/dyn")"
diff <(cd "$SRC/include/msrun" && ls ./*.h) <(cd "$P/include/msrun" && ls ./*.h) >"$TMP/hdiff" ||
    fail "installed headers differ from include/msrun: $(cat "$TMP/hdiff")"
ok "files: bin/msrun, libmsrun.so -> .so.$major -> .so.$version (SONAME libmsrun.so.$major, no CUDA), libmsrun.a, headers, msrun.pc, CMake package"

# ---- every public header compiles on its own, as C11 and as C++
for h in "$P"/include/msrun/*.h; do
    name=msrun/$(basename "$h")
    printf '#include <%s>\n' "$name" |
        $CC -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$P/include" -x c - \
            >"$TMP/hdr" 2>&1 || fail "$name alone (C): $(head -n 5 "$TMP/hdr")"
    if command -v c++ >/dev/null; then
        printf '#include <%s>\n' "$name" |
            c++ -Wall -Wextra -Werror -fsyntax-only -I"$P/include" -x c++ - >"$TMP/hdr" 2>&1 ||
            fail "$name alone (C++): $(head -n 5 "$TMP/hdr")"
    fi
done
ok "each installed header compiles on its own"

# run_worker WHAT EXE: the installed msrun runs EXE as 2 ranks, which load
# the installed libmsrun (when they link it) without LD_LIBRARY_PATH
run_worker() {
    local what=$1 exe=$2
    if readelf -d "$exe" | grep -q "NEEDED.*libmsrun"; then
        env -u LD_LIBRARY_PATH ldd "$exe" | grep -q "libmsrun.so.$major => $P/$LIB/" ||
            fail "$what: does not load the installed libmsrun: $(ldd "$exe" | grep msrun)"
    fi
    CODE=0
    timeout -k 5 60 env -u LD_LIBRARY_PATH MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --worker_num=2 \
        "$exe" >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_code 0 "$what"
    expect_in "\[node 0 rank 0\] rank 0 of 2: libmsrun $version, barrier passed" "$TMP/out" "$what"
    expect_in "\[node 0 rank 1\] rank 1 of 2: libmsrun $version, barrier passed" "$TMP/out" "$what"
    no_leftovers "$what"
}

# ---- pkg-config (the prefix is found from the .pc file's place)
export PKG_CONFIG_PATH=$P/$LIB/pkgconfig
[ "$(pkg-config --modversion msrun)" = "$version" ] || fail "pkg-config --modversion msrun"
libdir=$(pkg-config --variable=libdir msrun)
[ "$(cd "$libdir" && pwd -P)" = "$(cd "$P/$LIB" && pwd -P)" ] || fail "pkg-config libdir $libdir"
# shellcheck disable=SC2046 # pkg-config's words
$CC -std=c11 -Wall -Wextra -Werror "$SRC/tests/install/worker.c" -o "$TMP/w_pc" \
    $(pkg-config --cflags --libs msrun) -Wl,-rpath,"$libdir" >"$TMP/cc" 2>&1 ||
    fail "cc with pkg-config: $(head -n 5 "$TMP/cc")"
run_worker "pkg-config worker" "$TMP/w_pc"
ok "pkg-config --cflags --libs msrun: a worker built outside the tree runs under the installed msrun"

# libmsrun.a whole (every object, so every dependency must resolve) with
# what pkg-config --static adds
static_libs=$(pkg-config --static --libs msrun)
static_libs=${static_libs/-lmsrun/-Wl,--whole-archive -l:libmsrun.a -Wl,--no-whole-archive}
# shellcheck disable=SC2046,SC2086
$CC -std=c11 "$SRC/tests/install/worker.c" -o "$TMP/w_static" $(pkg-config --cflags msrun) \
    $static_libs >"$TMP/cc" 2>&1 || fail "static link with pkg-config --static: $(head -n 5 "$TMP/cc")"
readelf -d "$TMP/w_static" | grep -q "NEEDED.*libmsrun" && fail "the static worker needs libmsrun.so"
run_worker "static worker" "$TMP/w_static"
ok "libmsrun.a with pkg-config --static: the static worker runs"

# ---- find_package(msrun) and msrun::msrun
cmake -S "$SRC/tests/install/consumer" -B "$TMP/consumer" -DCMAKE_PREFIX_PATH="$P" \
    -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$TMP/cmake.log" 2>&1 ||
    fail "find_package(msrun): $(tail -n 15 "$TMP/cmake.log")"
cmake --build "$TMP/consumer" >>"$TMP/cmake.log" 2>&1 || fail "build with msrun::msrun: $(tail -n 15 "$TMP/cmake.log")"
run_worker "find_package worker" "$TMP/consumer/worker"
ok "find_package(msrun) + msrun::msrun: the worker runs under the installed msrun"
# the version file refuses another major version
if cmake -S "$SRC/tests/install/consumer" -B "$TMP/consumer99" -DCMAKE_PREFIX_PATH="$P" \
    -DMSRUN_WANT=99 >"$TMP/cmake99.log" 2>&1; then
    fail "find_package(msrun 99) found msrun $version"
fi
grep -q "msrunConfig.cmake, version: $version" "$TMP/cmake99.log" ||
    fail "find_package(msrun 99): $(tail -n 15 "$TMP/cmake99.log")"
ok "msrunConfigVersion.cmake: $version found, 99 refused"
# ---- the Python package, installed beside the library: the installed msrun
# runs it as 2 ranks on /usr/bin/python3 with neither PYTHONPATH nor
# MSRUN_LIBRARY nor LD_LIBRARY_PATH set (msrun gives its workers both, from
# its own place), and they load the installed libmsrun and allreduce
PYDIR=$(sed -n 's/^MSRUN_PYTHON_DIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
PYDIR=$P/${PYDIR:-lib/python3/dist-packages}
for f in __init__.py _lib.py _install.py; do
    [ -f "$PYDIR/msrun/$f" ] || fail "install: no $PYDIR/msrun/$f"
done
if [ -x /usr/bin/python3 ]; then
    # without msrun: the package finds the installed library through its
    # _install.py alone
    got=$(cd "$TMP" && env -u LD_LIBRARY_PATH -u MSRUN_LIBRARY PYTHONPATH="$PYDIR" /usr/bin/python3 \
        -c 'import msrun; print(msrun.library_path())' 2>&1)
    [ "$got" = "$P/$LIB/libmsrun.so.$major" ] || fail "the installed package alone loads: $got"
    cat >"$TMP/w.py" <<'PYEOF'
import os
import msrun
ctx = msrun.init()
buf = bytearray((ctx.rank + 1).to_bytes(4, "little"))
ctx.allreduce(buf, dtype="i32")
print("rank %d of %d: sum %d, python loads %s from %s" % (
    ctx.rank, ctx.world_size, int.from_bytes(buf, "little"), msrun.library_path(),
    os.path.dirname(os.path.dirname(os.path.abspath(msrun.__file__)))))
ctx.finalize()
PYEOF
    CODE=0
    (cd "$TMP" && timeout -k 5 60 env -u LD_LIBRARY_PATH -u MSRUN_LIBRARY -u PYTHONPATH \
        MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --python /usr/bin/python3 --worker_num=2 "$TMP/w.py") \
        >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_code 0 "python worker"
    for r in 0 1; do
        expect_in "rank $r of 2: sum 3, python loads $P/$LIB/libmsrun.so.$major from $PYDIR\$" \
            "$TMP/out" "python worker"
    done
    no_leftovers "python worker"
    ok "python/msrun installed in ${PYDIR#"$P"/}: 2 ranks import it with no PYTHONPATH, load the installed libmsrun, allreduce"
else
    ok "python/msrun installed in ${PYDIR#"$P"/} (no /usr/bin/python3 to run it)"
fi
exit "$FAILED"
