# What the plan_gpt tests share (source it): refuse PATTERN ARGS... checks
# that plan_gpt ARGS exits 2 with one line on stderr matching PATTERN and
# nothing on stdout. Needs $bin, $work and fail.
refuse() {
    local pattern=$1 rc=0
    shift
    timeout 30 "$bin/plan_gpt" "$@" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "plan_gpt $* exited $rc, want 2"
    [[ ! -s "$work/out" ]] || fail "plan_gpt $* printed: $(cat "$work/out")"
    [[ $(wc -l <"$work/err") -eq 1 ]] || fail "plan_gpt $*: not one line: $(cat "$work/err")"
    grep -q "^plan_gpt: error: .*$pattern" "$work/err" ||
        fail "plan_gpt $*: no '$pattern' in: $(cat "$work/err")"
}
