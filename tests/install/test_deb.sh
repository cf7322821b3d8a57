#!/usr/bin/env bash
# cpack -G DEB makes a Debian package of the built tree that installs what
# `cmake --install` does, under /usr, and does not depend on CUDA or NCCL
# (libmsrun loads them with dlopen when a device communicator is asked for).
# Skipped (77) where cpack or dpkg-deb is missing.
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
# lib, or lib/<multiarch> where the build was configured for /usr
LIB=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
LIB=${LIB:-lib}

(cd "$TMP" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$TMP/pkg") >"$TMP/cpack.log" 2>&1 ||
    fail "cpack -G DEB: $(tail -n 15 "$TMP/cpack.log")"
debs=("$TMP"/pkg/msrun_"$version"_*.deb)
[ -f "${debs[0]}" ] || fail "no msrun_${version}_*.deb: $(ls "$TMP/pkg")"
deb=${debs[0]}
ok "cpack -G DEB: $(basename "$deb")"

[ "$(dpkg-deb -f "$deb" Package)" = msrun ] || fail "Package: $(dpkg-deb -f "$deb" Package)"
[ "$(dpkg-deb -f "$deb" Version)" = "$version" ] || fail "Version: $(dpkg-deb -f "$deb" Version)"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
if grep -Eqi "cuda|nccl|cublas|nvidia" <<<"$depends"; then fail "the package depends on CUDA: $depends"; fi
for lib in libc6 libgrpc libprotobuf-c libucx libevent-core libhwloc libmunge; do
    grep -q "$lib" <<<"$depends" || fail "Depends lacks $lib: $depends"
done
ok "Depends: the runtime libraries, no CUDA or NCCL"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./||' >"$TMP/files"
L=usr/$LIB
for f in usr/bin/msrun "$L/libmsrun.so" "$L/libmsrun.so.$major" "$L/libmsrun.so.$version" \
    "$L/libmsrun.a" usr/include/msrun/msrun.h usr/include/msrun/base.h "$L/pkgconfig/msrun.pc" \
    "$L/cmake/msrun/msrunConfig.cmake" "$L/cmake/msrun/msrunConfigVersion.cmake" \
    "$L/cmake/msrun/msrunTargets.cmake" usr/lib/python3/dist-packages/msrun/__init__.py \
    usr/lib/python3/dist-packages/msrun/_install.py; do
    grep -qx "$f" "$TMP/files" || fail "the package lacks /$f"
done
ok "contents: /usr/bin/msrun, libmsrun.so.$version and its links, libmsrun.a, headers, msrun.pc, CMake package, python/msrun"

# the packaged files are those cmake --install writes, and usable in place
dpkg-deb -x "$deb" "$TMP/root"
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
