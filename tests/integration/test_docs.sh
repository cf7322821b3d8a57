#!/bin/bash
# docs/usage.md carries `msrun --help` verbatim.
. "$(dirname "$0")/lib.sh"
SRC=${MSRUN_SOURCE:?}
"$MSRUN" --help >"$TMP/help"
sed -n '/^<!-- msrun --help -->$/,/^<!-- end of msrun --help -->$/p' "$SRC/docs/usage.md" |
    sed '1,2d;$d' | sed '$d' >"$TMP/doc"
diff -u "$TMP/doc" "$TMP/help" >"$TMP/diff" || { cat "$TMP/diff"; fail "docs/usage.md differs from msrun --help"; }
ok "docs/usage.md matches msrun --help"
