#!/usr/bin/env bash
# `msrun --worker_num=2 w.py` with `import msrun` in w.py and neither
# PYTHONPATH nor MSRUN_LIBRARY nor LD_LIBRARY_PATH set: msrun of the build
# tree gives its workers the source tree's python/ first on PYTHONPATH and
# MSRUN_LIBRARY=BUILD/lib/libmsrun.so, and they allreduce. A PYTHONPATH the
# user set stays, after msrun's; an MSRUN_LIBRARY the user set wins.
# (tests/install/test_install.sh checks the same from an installed prefix.)
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../integration/lib.sh"
# shellcheck disable=SC2034 # read by py_env.sh
SRC=${MSRUN_SOURCE:?MSRUN_SOURCE must point at the source directory}
. "$here/py_env.sh"
py_setup numpy
src=$(cd "$SRC" && pwd -P)
lib=$(realpath "$BUILD/lib/libmsrun.so")

# run WHAT [VAR=VALUE...]: the job of 2 workers, in an environment without
# the three variables, plus those given
run() {
    local what=$1
    shift
    CODE=0
    timeout -k 5 60 env -u PYTHONPATH -u MSRUN_LIBRARY -u LD_LIBRARY_PATH "$@" \
        MSRUN_TEST_MARKER="$MARKER" "$MSRUN" --python "$PY" --worker_num=2 \
        "$here/worker_noenv.py" >"$TMP/out" 2>"$TMP/err" || CODE=$?
    expect_code 0 "$what"
    no_leftovers "$what"
}

run "nothing set"
for r in 0 1; do
    expect_in "rank $r of 2: sum ok lib $lib package $src/python PYTHONPATH $SRC/python\$" \
        "$TMP/out" "nothing set"
done
ok "nothing set: 2 ranks import msrun from $SRC/python, load build/lib/libmsrun.so, allreduce"

mkdir -p "$TMP/user"
echo 'X = 1' >"$TMP/user/usermod.py"
run "the user's PYTHONPATH" PYTHONPATH="$TMP/user" NOENV_USER_MODULE=1
for r in 0 1; do
    expect_in "rank $r of 2: sum ok lib $lib package $src/python PYTHONPATH $SRC/python:$TMP/user\$" \
        "$TMP/out" "the user's PYTHONPATH"
    expect_in "rank $r: the user's PYTHONPATH kept" "$TMP/out" "the user's PYTHONPATH"
done
ok "PYTHONPATH=DIR: msrun's package first, DIR kept after it"

mkdir -p "$TMP/copy"
cp "$lib" "$TMP/copy/libmsrun.so"
mine=$(realpath "$TMP/copy/libmsrun.so")
run "the user's MSRUN_LIBRARY" MSRUN_LIBRARY="$mine"
for r in 0 1; do
    expect_in "rank $r of 2: sum ok lib $mine package" "$TMP/out" "the user's MSRUN_LIBRARY"
done
ok "MSRUN_LIBRARY=COPY (the user's) is kept"
exit "$FAILED"
