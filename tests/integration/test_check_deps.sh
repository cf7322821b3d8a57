#!/bin/bash
# The module dependency check passes on the project and fails on includes
# that cross the architecture's lines.
. "$(dirname "$0")/lib.sh"
SRC=${MSRUN_SOURCE:?}
CHECK=$SRC/scripts/check-deps.sh

"$CHECK" "$SRC" >"$TMP/out" || fail "the project itself passes"
ok "the project passes"

make_tree() {
    rm -rf "$TMP/tree"
    mkdir -p "$TMP/tree/include/msrun" "$TMP/tree/base" "$TMP/tree/comm" "$TMP/tree/msrun" \
        "$TMP/tree/cluster" "$TMP/tree/parallel" "$TMP/tree/rendezvous" "$TMP/tree/model" \
        "$TMP/tree/planner" "$TMP/tree/programs" "$TMP/tree/layout"
    for h in base.h store.h comm.h; do echo '#include "msrun/base.h"' >"$TMP/tree/include/msrun/$h"; done
    echo '/* ok */' >"$TMP/tree/include/msrun/base.h"
}

crossing() {
    local file="$1" line="$2" want="$3"
    make_tree
    echo "$line" >"$TMP/tree/$file"
    if "$CHECK" "$TMP/tree" >"$TMP/out"; then
        fail "'$line' in $file was not refused"
    fi
    grep -q -- "$want" "$TMP/out" || fail "'$line' in $file: message '$want' missing"
    ok "refused: $line in $file"
}

crossing comm/x.c '#include "cluster/coord.h"' "comm/ may not depend on cluster/"
crossing comm/x.c '#include "msrun/agent.h"' "comm/ may not depend on msrun/"
crossing parallel/x.c '#include "rendezvous/rpc.h"' "parallel/ may not depend on rendezvous/"
crossing base/x.c '#include "rendezvous/rpc.h"' "base/ may not depend on rendezvous/"
crossing msrun/x.c '#include "comm/comm.h"' "msrun/ may not depend on comm/"
crossing msrun/x.c '#include "msrun/comm.h"' "may not use the public msrun/comm.h"
crossing msrun/x.c '#include <ucp/api/ucp.h>' "UCX belongs to comm/ only"
crossing cluster/x.c '#include <nccl.h>' "CUDA/NCCL belongs to"
crossing comm/x.c '#include <grpc/grpc.h>' "gRPC belongs to"
# the training side: programs -> planner -> parallel -> model -> comm -> base
crossing model/x.c '#include "parallel/train.h"' "model/ may not depend on parallel/"
crossing model/x.c '#include "planner/plan.h"' "model/ may not depend on planner/"
crossing parallel/x.c '#include "planner/plan.h"' "parallel/ may not depend on planner/"
crossing parallel/x.c '#include "programs/train_gpt/train_gpt.h"' "parallel/ may not depend on programs/"
crossing planner/x.c '#include "parallel/dp.h"' "planner/ may not depend on parallel/"
crossing layout/x.c '#include "model/gpt.h"' "layout/ may not depend on model/"
crossing planner/x.c '#include "model/gpt.h"' "planner/ may not depend on model/"
crossing planner/x.c '#include "msrun/comm.h"' "may not use the public msrun/comm.h"
crossing comm/x.c '#include "model/gpt.h"' "comm/ may not depend on model/"
crossing parallel/x.c '#include <cblas.h>' "BLAS belongs to"
# the launcher's own headers are "launcher/x.h"; "msrun/x.h" is public only
crossing msrun/x.c '#include "msrun/agent.h"' "are included as launcher/agent.h"
crossing comm/x.c '#include "launcher/agent.h"' "comm/ may not depend on msrun/"

# indirect: an include the module may use that brings in one it may not
indirect() {
    local file="$1" line="$2" header="$3" hline="$4" want="$5"
    make_tree
    echo "$line" >"$TMP/tree/$file"
    echo "$hline" >"$TMP/tree/$header"
    if "$CHECK" "$TMP/tree" >"$TMP/out"; then
        fail "'$line' in $file, through $header, was not refused"
    fi
    grep -q -- "$want" "$TMP/out" || { cat "$TMP/out"; fail "$file through $header: '$want' missing"; }
    ok "refused: $line in $file, through $header"
}
indirect parallel/x.c '#include "comm/ok.h"' comm/ok.h '#include "rendezvous/rpc.h"' \
    "through comm/ok.h -> rendezvous/rpc.h: parallel/ may not depend on rendezvous/"
indirect msrun/x.c '#include "msrun/store.h"' include/msrun/store.h '#include "msrun/comm.h"' \
    "through msrun/store.h -> msrun/comm.h: msrun/ may not use the public msrun/comm.h"
make_tree
echo '#include <ucp/api/ucp.h>' >"$TMP/tree/rendezvous/a2.h"
echo '#include "rendezvous/a.h"' >"$TMP/tree/cluster/x.c"
echo '#include "a2.h"' >"$TMP/tree/rendezvous/a.h"
"$CHECK" "$TMP/tree" >"$TMP/out" && fail "a system library two headers deep was not refused"
grep -q -- "cluster/x.c:1: #include \"rendezvous/a.h\": through rendezvous/a.h -> a2.h -> ucp/api/ucp.h: UCX" \
    "$TMP/out" || { cat "$TMP/out"; fail "two headers deep: message missing"; }
ok "refused: a system library two headers deep"

make_tree
echo '#include "base/log.h"' >"$TMP/tree/comm/ok.c"
echo '#include "comm/ok.h"' >"$TMP/tree/parallel/ok.c"
echo '#include "layout/layout.h"' >"$TMP/tree/planner/ok.c"
echo '#include "model/gpt.h"' >"$TMP/tree/parallel/ok2.c"
echo '#include "planner/plan.h"' >"$TMP/tree/programs/ok.c"
"$CHECK" "$TMP/tree" >"$TMP/out" || { cat "$TMP/out"; fail "allowed includes pass"; }
ok "allowed includes pass"

# The build enforces the same lines: a module's sources are compiled with the
# include roots of the modules it may depend on only (never the whole tree),
# so an include that crosses a line does not compile.
CC_JSON=$MSRUN_BUILD/compile_commands.json
[ -f "$CC_JSON" ] || fail "$CC_JSON missing (CMAKE_EXPORT_COMPILE_COMMANDS is on)"
python3 - "$CHECK" "$SRC" "$MSRUN_BUILD" "$TMP" >"$TMP/out" 2>&1 <<'PY' || { cat "$TMP/out"; fail "include roots"; }
import importlib.machinery, json, os, shlex, subprocess, sys
check, src, build, tmp = sys.argv[1:]
deps = importlib.machinery.SourceFileLoader("deps", check).load_module()
src, roots = os.path.realpath(src), os.path.realpath(os.path.join(build, "module_roots"))
bad, modules, probes = [], set(), {}
for e in json.load(open(os.path.join(build, "compile_commands.json"))):
    path = os.path.realpath(os.path.join(e["directory"], e["file"]))
    rel = os.path.relpath(path, src)
    module = rel.split("/")[0]
    # a module's file compiled by the module's own target (tests compile
    # some into their programs, with the whole tree): the target's folder
    # is where its object goes (Ninja runs every command from the top)
    args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    obj = args[args.index("-o") + 1] if "-o" in args else ""
    owner = os.path.relpath(os.path.realpath(os.path.join(e["directory"], obj)),
                            os.path.realpath(build))
    if rel.startswith("..") or module not in deps.ALLOWED or owner.split("/")[0] != module:
        continue
    incs = [a[2:] for a in args if a.startswith("-I")]
    for d in map(os.path.realpath, incs):
        if d == src:
            bad.append(f"{rel}: compiled with the whole tree ({d}) on its include path")
        elif d.startswith(roots + "/"):
            seen = d[len(roots) + 1:].split("/")[0]
            if seen not in deps.ALLOWED[module]:
                bad.append(f"{rel}: sees {seen}/, which {module}/ may not include")
    modules.add(module)
    # the module's file with the most include roots (its main target's)
    if module not in probes or len(incs) > probes[module][2]:
        probes[module] = (e["directory"], args, len(incs))
if bad:
    print("\n".join(bad))
    sys.exit(1)


def compiles(module, line):
    """Whether a file of module holding line compiles with its flags."""
    d, args, _ = probes[module]
    with open(os.path.join(tmp, "cross.c"), "w") as f:
        f.write(line + "\n")
    cmd = [args[0]]
    for i, a in enumerate(args[1:], 1):
        if a.startswith(("-I", "-D")):
            cmd.append(a)
        elif a == "-isystem":
            cmd += [a, args[i + 1]]
    cmd += ["-fsyntax-only", os.path.join(tmp, "cross.c")]
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    return r.returncode == 0, r.stderr


# real compiles: a file that includes across a line fails, one that
# includes what its module may use compiles
for module, line, want in [
        ("comm", '#include "cluster/coord.h"', False),
        ("model", '#include "parallel/train.h"', False),
        ("model", '#include "planner/plan.h"', False),
        ("parallel", '#include "planner/plan.h"', False),
        ("planner", '#include "parallel/dp.h"', False),
        ("planner", '#include "model/gpt.h"', False),
        ("layout", '#include "model/gpt.h"', False),
        ("planner", '#include "layout/layout.h"', True),
        ("parallel", '#include "model/gpt.h"', True)]:
    ok, err = compiles(module, line)
    if ok != want:
        print(f"a {module}/ file with {line} {'did not compile' if want else 'compiled'}:", err)
        sys.exit(1)
print("modules:", " ".join(sorted(modules)))
PY
ok "the build gives each module only its own and its dependencies' include roots"
