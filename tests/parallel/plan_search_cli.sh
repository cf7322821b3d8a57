#!/usr/bin/env bash
# plan_gpt's search options: --cluster (its budget prunes, its errors are
# one line), --search exhaustive|fast, --top, --all, --explain, --even-split,
# and kv's pp_layers where the split is uneven. Bad input: one line
# "plan_gpt: error: ..." on stderr, nothing on stdout, exit 2.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
m=(--layers 4 --channels 32 --heads 4 --seq 16 --global-batch 8 --world 4)
source "$(dirname "$0")/plan_lib.sh"
printf 'mem_gib = 1\nbogus = 3\n' >"$work/bad_key"
printf 'mem_gib = -1\n' >"$work/bad_value"
printf 'mem_gib = 0.0001\n' >"$work/tiny"
printf '# a budget some layouts pass\nmem_gib = 0.0012\n' >"$work/small"
refuse "--search slow: not exhaustive or fast" "${m[@]}" --search slow
refuse "--top 0" "${m[@]}" --top 0
refuse "--explain x" "${m[@]}" --explain x
refuse "--cluster $work/none: No such file or directory" "${m[@]}" --cluster "$work/none"
refuse "line 2: unknown key 'bogus'" "${m[@]}" --cluster "$work/bad_key"
# the whole list of keys, not cut short
refuse "unknown key 'bogus' (ranks_per_node, mem_gib, .*, idle_lend, ring_step_us, disk_read_gbs, disk_write_gbs)\$" "${m[@]}" \
    --cluster "$work/bad_key"
refuse "--cluster $work/bad_value: line 1" "${m[@]}" --cluster "$work/bad_value"
# the reader's own faults: over 64 KiB, a NUL byte, a directory
head -c 70000 /dev/zero | tr '\0' '#' >"$work/huge"
printf 'mem_gib = 1\n\0\n' >"$work/binary"
refuse "--cluster $work/huge: over 65536 bytes: not a cluster file" "${m[@]}" --cluster "$work/huge"
refuse "--cluster $work/binary: not a text file" "${m[@]}" --cluster "$work/binary"
refuse "--cluster $work: is not a regular file (a directory)" "${m[@]}" --cluster "$work"
refuse "no layout of 4 ranks fits in 0.0001 GiB per rank" "${m[@]}" --cluster "$work/tiny"
refuse "--explain 1000: only [0-9]* plans found" "${m[@]}" --explain 1000

field() { # field NAME < kv lines: the values of NAME=
    sed -n "s/.* $1=\([^ ]*\).*/\1/p"
}

# the table: 10 rows by default, numbered, and the summary
"$bin/plan_gpt" "${m[@]}" >"$work/table"
rows=$(grep -Ec '^ +[0-9]+ +[0-9]+ ' "$work/table")
[[ $rows -eq 10 ]] || fail "$rows rows, not 10: $(cat "$work/table")"
grep -q '^ *# .*step_ms .*tokens/s .*bubble .*exposed_ms' "$work/table" || fail "no header"
grep -q '^10 of [0-9]* plans shown (exhaustive search, 4 ranks' "$work/table" ||
    fail "no summary: $(cat "$work/table")"

# --all and --top against the search line's count; the budget prunes
"$bin/plan_gpt" "${m[@]}" --format kv --all --cluster "$work/small" >"$work/all"
found=$(grep '^search ' "$work/all" | field found)
over=$(grep '^search ' "$work/all" | field over_memory)
[[ $(grep -c '^plan ' "$work/all") -eq $found ]] || fail "--all printed not the $found found"
((over > 0)) || fail "a budget of 0.0012 GiB pruned nothing"
max=$(grep '^plan ' "$work/all" | field peak_bytes | sort -n | tail -1)
((max <= 1288490)) || fail "a plan of $max bytes over the budget"
"$bin/plan_gpt" "${m[@]}" --format kv --top 3 --cluster "$work/small" >"$work/top"
[[ $(grep -c '^plan ' "$work/top") -eq 3 ]] || fail "--top 3: $(cat "$work/top")"
diff <(grep '^plan ' "$work/top") <(grep '^plan ' "$work/all" | head -3) >/dev/null ||
    fail "--top 3 is not the first 3 of --all"

# the search tries ZeRO-3 beside tp, pp and cp too, as the runtime runs it,
# for a MoE model too (with ep)
moe=(--experts 4 --top-k 2)
for fix in tp=2 pp=2,tp=1 "tp=2 moe" "pp=2,tp=1,ep=2 moe" "cp=2,ep=2 moe"; do
    extra=()
    [[ $fix == *moe ]] && extra=("${moe[@]}")
    fix=${fix% moe}
    "$bin/plan_gpt" "${m[@]}" "${extra[@]}" --format kv --all --fix "$fix" >"$work/z3"
    n=$(grep -c '^plan .* zero=3 ' "$work/z3" || true)
    ((n > 0)) || fail "--fix $fix ${extra[*]}: no ZeRO-3 plan: $(grep '^plan ' "$work/z3" | field zero | sort -u)"
done

# --explain: the plan's breakdown after the table
"$bin/plan_gpt" "${m[@]}" --explain 2 >"$work/explain"
for want in "^plan 2: dp=" "memory of rank" "activations" "time of a step" "bubble" \
    "data parallel" "against plan 1"; do
    grep -q "$want" "$work/explain" || fail "--explain 2 has no '$want': $(cat "$work/explain")"
done

# an uneven split where the head outweighs layers; --even-split keeps the runtime's
g=(--layers 16 --channels 512 --heads 8 --seq 1024 --vocab 65536 --global-batch 32 --world 4
    --fix pp=4,tp=1)
"$bin/plan_gpt" "${g[@]}" --format kv --top 1 >"$work/uneven"
split=$(grep '^plan ' "$work/uneven" | field pp_layers)
[[ -n $split ]] || fail "no pp_layers: $(cat "$work/uneven")"
sum=$(tr ',' '\n' <<<"$split" | awk '{ s += $1 } END { print s }')
[[ $sum -eq 16 ]] || fail "pp_layers=$split does not sum to 16"
"$bin/plan_gpt" "${g[@]}" --format kv --top 1 --even-split >"$work/even"
grep -q pp_layers "$work/even" && fail "--even-split printed a split: $(cat "$work/even")"
slow=$(grep '^plan ' "$work/even" | field step_ms)
fast=$(grep '^plan ' "$work/uneven" | field step_ms)
awk -v a="$fast" -v b="$slow" 'BEGIN { exit !(a < b) }' ||
    fail "the balanced split ($fast ms) is not faster than the even one ($slow ms)"

# --search fast: fewer layouts tried, its plans among the exhaustive ones
b=(--layers 24 --channels 2048 --heads 16 --seq 2048 --vocab 51200 --precision bf16
    --global-batch 256 --world 64)
"$bin/plan_gpt" "${b[@]}" --format kv --all >"$work/ex"
"$bin/plan_gpt" "${b[@]}" --format kv --all --search fast >"$work/fa"
ne=$(grep -c '^plan ' "$work/ex")
nf=$(grep -c '^plan ' "$work/fa")
((nf > 0 && nf < ne)) || fail "fast found $nf plans, exhaustive $ne"
missing=$(grep '^plan ' "$work/fa" | grep -vxFf <(grep '^plan ' "$work/ex") | head -1 || true)
[[ -z $missing ]] || fail "a fast plan the exhaustive search lacks: $missing"
echo "ok: plan_gpt's search options ($ne exhaustive, $nf fast plans)"
