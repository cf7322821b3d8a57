#!/usr/bin/env bash
# cpack -G DEB makes two Debian packages of the built tree: msrun (the
# runtime: the launcher, libmsrun.so.N, libmsrun-grpc.so that libmsrun
# loads for direct mode, the Python package) and msrun-dev
# (headers, libmsrun.a, the libmsrun.so link, msrun.pc, the CMake package,
# depending on msrun of the same version), and where the torch.distributed
# backend was built a third, msrun-torch (its module and msrun/torch.py,
# depending on msrun and PyTorch). Together they install what
# `cmake --install` does, under /usr, the libraries in the multiarch
# directory (usr/lib/<arch>); neither depends on CUDA or NCCL (libmsrun
# loads them with dlopen when a device communicator is asked for). Nothing
# is installed (no root): the packages are listed and unpacked.
# Skipped (77) where cpack or dpkg-deb is missing, and where the build
# tree is older than its sources (cpack would build it under the tests
# running beside this one).
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
for tool in cpack dpkg-deb; do
    if ! command -v "$tool" >/dev/null; then
        echo "skipped: no $tool here"
        exit 77
    fi
done
version=$(sed -n 's/^#define MSR_VERSION_STRING *"\(.*\)"/\1/p' "$SRC/include/msrun/base.h")
major=${version%%.*}
LIB=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
LIB=${LIB:-lib}
arch=$(sed -n 's/^set(CMAKE_C_LIBRARY_ARCHITECTURE *"\(.*\)")$/\1/p' "$BUILD"/CMakeFiles/*/CMakeCCompiler.cmake 2>/dev/null | head -n 1)
# the multiarch directory wherever CMake knows the architecture
if [ -n "$arch" ] && [ "$LIB" != "lib/$arch" ]; then
    fail "CMAKE_INSTALL_LIBDIR=$LIB, not lib/$arch (a build directory configured before the" \
        "multiarch default: cmake -UCMAKE_INSTALL_LIBDIR BUILD)"
fi

# cpack first builds the tree's preinstall target, which builds every
# target out of date: beside the other tests (ctest -j) that would relink
# the programs they are running. A tree older than its sources is left
# alone, and the test skipped, saying so.
gen=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$BUILD/CMakeCache.txt")
stale=0
case $gen in
"Unix Makefiles") make -C "$BUILD" -n all 2>/dev/null | grep -qE "Building |Linking " && stale=1 ;;
Ninja) ninja -C "$BUILD" -n 2>/dev/null | grep -q "no work to do" || stale=1 ;;
esac
if [ "$stale" = 1 ]; then
    echo "skipped: $BUILD is older than its sources, and cpack would build it while other" \
        "tests run: build it first"
    exit 77
fi
(cd "$TMP" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$TMP/pkg") >"$TMP/cpack.log" 2>&1 ||
    fail "cpack -G DEB: $(tail -n 15 "$TMP/cpack.log")"
deb=$(echo "$TMP"/pkg/msrun_"$version"_*.deb)
dev=$(echo "$TMP"/pkg/msrun-dev_"$version"_*.deb)
[ -f "$deb" ] || fail "no msrun_${version}_*.deb: $(ls "$TMP/pkg")"
[ -f "$dev" ] || fail "no msrun-dev_${version}_*.deb: $(ls "$TMP/pkg")"
# a third, msrun-torch, where the torch.distributed backend was built
npkg=2
torchmod=$(find "$BUILD/lib" -maxdepth 1 -name '_msrun_c10d*.so' -printf '%f\n' 2>/dev/null | head -n 1)
[ -n "$torchmod" ] && npkg=3
[ "$(find "$TMP/pkg" -maxdepth 1 -name '*.deb' | wc -l)" = "$npkg" ] ||
    fail "not $npkg packages: $(ls "$TMP/pkg")"
ok "cpack -G DEB: $(basename "$deb") and $(basename "$dev")"

[ "$(dpkg-deb -f "$deb" Package)" = msrun ] || fail "Package: $(dpkg-deb -f "$deb" Package)"
[ "$(dpkg-deb -f "$dev" Package)" = msrun-dev ] || fail "Package: $(dpkg-deb -f "$dev" Package)"
for d in "$deb" "$dev"; do
    [ "$(dpkg-deb -f "$d" Version)" = "$version" ] || fail "$(basename "$d") Version: $(dpkg-deb -f "$d" Version)"
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
if grep -Eqi "cuda|nccl|cublas|nvidia" <<<"$depends$(dpkg-deb -f "$dev" Depends)"; then
    fail "a package depends on CUDA: $depends"
fi
for lib in libc6 libgrpc libprotobuf-c libucx libevent-core libhwloc libmunge; do
    grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
[ "$(dpkg-deb -f "$dev" Depends)" = "msrun (= $version)" ] ||
    fail "msrun-dev Depends: $(dpkg-deb -f "$dev" Depends)"
ok "Depends: msrun the runtime libraries, no CUDA or NCCL; msrun-dev msrun (= $version)"
if [ -n "$torchmod" ]; then
    tdeb=$(echo "$TMP"/pkg/msrun-torch_"$version"_*.deb)
    [ -f "$tdeb" ] || fail "no msrun-torch_${version}_*.deb: $(ls "$TMP/pkg")"
    tdep=$(dpkg-deb -f "$tdeb" Depends)
    grep -q "msrun (= $version)" <<<"$tdep" || fail "msrun-torch Depends lacks msrun (= $version): $tdep"
    grep -q "libtorch" <<<"$tdep" || fail "msrun-torch Depends lacks libtorch: $tdep"
    grep -qi "torch" <<<"$depends" && fail "msrun depends on PyTorch: $depends"
    dpkg-deb -c "$tdeb" | awk '{print $6}' | sed 's|^\./||' | grep -v '/$' | sort >"$TMP/tfiles"
    printf '%s\n' "usr/$LIB/$torchmod" usr/lib/python3/dist-packages/msrun/torch.py | sort >"$TMP/twant"
    diff "$TMP/twant" "$TMP/tfiles" >"$TMP/d" || fail "msrun-torch's files (want < > got): $(cat "$TMP/d")"
    ok "msrun-torch: the backend's module and msrun/torch.py, depending on msrun (= $version) and libtorch; msrun not on PyTorch"
fi

list() { dpkg-deb -c "$1" | awk '{print $6}' | sed 's|^\./||' | grep -v '/$' | sort; }
list "$deb" >"$TMP/files"
list "$dev" >"$TMP/devfiles"
L=usr/$LIB
PY=usr/lib/python3/dist-packages/msrun
printf '%s\n' usr/bin/msrun "$L/libmsrun.so.$major" "$L/libmsrun.so.$version" \
    "$L/libmsrun-grpc.so" $PY/__init__.py $PY/_args.py $PY/_buffers.py $PY/_comm.py \
    $PY/_context.py $PY/_errors.py $PY/_install.py $PY/_lib.py $PY/_request.py $PY/ps.py |
    sort >"$TMP/want"
diff "$TMP/want" "$TMP/files" >"$TMP/d" || fail "msrun's files (want < > got): $(cat "$TMP/d")"
for f in "$L/libmsrun.so" "$L/libmsrun.a" usr/include/msrun/msrun.h usr/include/msrun/base.h \
    "$L/pkgconfig/msrun.pc" "$L/cmake/msrun/msrunConfig.cmake" \
    "$L/cmake/msrun/msrunConfigVersion.cmake" "$L/cmake/msrun/msrunTargets.cmake"; do
    grep -qx "$f" "$TMP/devfiles" || fail "msrun-dev lacks /$f"
done
grep -v -e "^usr/include/msrun/[a-z_]*\.h$" -e "^$L/libmsrun\.\(so\|a\)$" -e "^$L/pkgconfig/msrun\.pc$" \
    -e "^$L/cmake/msrun/msrun[A-Za-z-]*\.cmake$" "$TMP/devfiles" >"$TMP/extra" &&
    fail "msrun-dev holds more than development files: $(cat "$TMP/extra")"
ok "split: msrun holds /usr/bin/msrun, /$L/libmsrun.so.$major{,.$version}, python/msrun; msrun-dev the headers, libmsrun.a, the .so link, msrun.pc, the CMake package"

# the packaged files are those cmake --install writes, and usable in place
dpkg-deb -x "$deb" "$TMP/root"
dpkg-deb -x "$dev" "$TMP/root"
if readelf -d "$TMP/root/$L/libmsrun.so.$version" | grep -E "NEEDED.*(cuda|nccl)"; then
    fail "the packaged libmsrun.so needs a CUDA library"
fi
[ "$(PKG_CONFIG_PATH=$TMP/root/$L/pkgconfig pkg-config --modversion msrun)" = "$version" ] ||
    fail "the packaged msrun.pc"
"$TMP/root/usr/bin/msrun" --version >"$TMP/out" 2>&1 || fail "the packaged msrun --version"
expect_in "msrun $version" "$TMP/out" "packaged msrun --version"
ok "the packaged libmsrun needs no CUDA library; msrun.pc and msrun run from the unpacked tree"
# the Python package of the unpacked tree loads the unpacked libmsrun
if [ -x /usr/bin/python3 ]; then
    got=$(cd "$TMP" && env -u MSRUN_LIBRARY PYTHONPATH="$TMP/root/usr/lib/python3/dist-packages" \
        /usr/bin/python3 -c 'import msrun; print(msrun.library_path(), msrun.version())' 2>&1)
    [ "$got" = "$TMP/root/$L/libmsrun.so.$major $version" ] ||
        fail "the packaged python/msrun: $got"
    ok "the packaged python/msrun loads the packaged libmsrun $version"
fi
exit "$FAILED"
