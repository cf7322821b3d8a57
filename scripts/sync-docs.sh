#!/bin/bash
# Refreshes the copy of `msrun --help` in docs/usage.md from
# ${MSRUN_BUILD:-build}/bin/msrun (tests/integration
# test_docs.sh fails while they differ).
set -euo pipefail
cd "$(dirname "$0")/.."
help=$("${MSRUN_BUILD:-build}"/bin/msrun --help)
python3 - "$help" <<'PY'
import sys
help_text = sys.argv[1]
path = "docs/usage.md"
s = open(path).read()
start = s.index("<!-- msrun --help -->\n```\n") + len("<!-- msrun --help -->\n```\n")
end = s.index("```\n<!-- end of msrun --help -->")
open(path, "w").write(s[:start] + help_text + "\n" + s[end:])
PY
echo "docs/usage.md: msrun --help refreshed"
