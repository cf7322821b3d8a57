#!/usr/bin/env bash
# scripts/quickstart.sh builds every file the README names under build/
# (build/bin/msrun, build/bin/plan_gpt, ...) and every file `cmake
# --install` copies from the build tree (libmsrun.a among them), and
# installs python3-numpy when the README's Python example imports numpy.
# Cheap: nothing is built; the quick start's `cmake --build` line is read.
# Building `all` (no --target) covers every file the test build holds; a
# --target list must name each file's own target.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
qs=$SRC/scripts/quickstart.sh

# the files: the README's build/bin/X and build/lib/X, and what install copies
grep -o 'build/\(bin\|lib\)/[A-Za-z0-9_.+-]\+' "$SRC/README.md" | sed 's|^build/||' >"$TMP/need"
find "$BUILD" -name cmake_install.cmake -exec grep -ho "\"$BUILD/\(bin\|lib\)/[^\"]*\"" {} + |
    tr -d '"' | sed "s|^$BUILD/||" >>"$TMP/need"
sort -u -o "$TMP/need" "$TMP/need"
grep -qx 'bin/msrun' "$TMP/need" && grep -q 'lib/libmsrun\.a' "$TMP/need" ||
    fail "the list of needed files lacks bin/msrun or lib/libmsrun.a: $(tr '\n' ' ' <"$TMP/need")"

line=$(grep -E '^[^#]*cmake --build' "$qs") || fail "$qs runs no cmake --build"
if grep -q -- '--target' <<<"$line"; then
    # shellcheck disable=SC2001
    targets=" $(sed 's/.*--target//' <<<"$line") "
    while read -r f; do
        base=$(basename "$f")
        name=${base#lib}
        name=${name%%.*}
        # the target whose OUTPUT_NAME is the file's name, or of that name
        cands=" $base $name $(grep -rhoE "set_target_properties\(([a-z_]+) PROPERTIES OUTPUT_NAME $name\b" \
            --include=CMakeLists.txt --include='*.cmake' "$SRC" | awk '{print substr($1, 23)}' | tr '\n' ' ')"
        found=0
        for t in $cands; do
            [[ "$targets" == *" $t "* ]] && found=1
        done
        [ "$found" = 1 ] || fail "$qs builds only$targets: nothing builds build/$f (targets:$cands)"
    done <"$TMP/need"
else
    while read -r f; do
        [ -e "$BUILD/$f" ] || fail "the default target does not build $f"
    done <"$TMP/need"
fi
ok "quickstart.sh builds $(wc -l <"$TMP/need") files: $(tr '\n' ' ' <"$TMP/need")"

# the README's Python example imports numpy: the quick start installs it
if grep -q '^import numpy' "$SRC/README.md"; then
    what=$(sed -n 's|^[^#]*scripts/deps.sh \([a-z]*\).*|\1|p' "$qs" | head -n 1)
    [ -n "$what" ] || fail "$qs does not run scripts/deps.sh"
    pkgs=$(bash -c "sed -n '/^[a-z]*=(/,/)/p' '$SRC/scripts/deps.sh'" | tr -d '\n')
    grep -q "$what=([^)]*python3-numpy" <<<"$pkgs" ||
        fail "the README's Python example imports numpy; scripts/deps.sh $what does not install python3-numpy"
    ok "scripts/deps.sh $what installs python3-numpy, which the README's Python example imports"
fi
exit "$FAILED"
