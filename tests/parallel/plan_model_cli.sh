#!/usr/bin/env bash
# plan_gpt's presets and what it says around the table: --model list shows
# the eight published shapes; --model NAME plans that shape (its parameter
# count the published one), a shape option given beside it overrides that
# field only, an unknown name or a clashing --arch is one line naming the
# presets, exit 2; the first line describes the cluster assumed (the
# default, or the file given); the layouts tried add up: shown + fitting
# but not shown + refused + over the budget, in the table's line and kv's.
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
names="gpt2-124m gpt2-350m gpt2-1.5b llama2-7b llama2-13b llama2-70b llama3-8b llama3-70b"

timeout 30 "$bin/plan_gpt" --model list >"$work/list"
[[ $(awk '{ print $1 }' "$work/list" | paste -sd ' ') == "$names" ]] ||
    fail "--model list: $(cat "$work/list")"
grep -q "^llama3-8b .* 8030261248 parameters$" "$work/list" || fail "list: $(cat "$work/list")"

# a preset plans; bf16 Llama 3 8B on one node of 8
q=(--precision bf16 --global-batch 64 --world 8 --fix tp=8 --format kv)
timeout 30 "$bin/plan_gpt" --model llama3-8b "${q[@]}" >"$work/l8"
[[ $(head -1 "$work/l8") == "model params=8030261248" ]] || fail "llama3-8b: $(head -2 "$work/l8")"
grep -q "^cluster origin=default nodes=1 ranks_per_node=8 mem_gib=80 peak_tflops=312 " "$work/l8" ||
    fail "kv cluster line: $(sed -n 2p "$work/l8")"
# --layers 16 overrides the preset's 32 and nothing else: 16 blocks of
# 2 C^2 (q, o) + 2 C C/4 (k, v: 8 of 32 heads) + 3 C ffn + 2 C fewer
C=4096
block=$((2 * C * C + 2 * C * C / 4 + 3 * C * 14336 + 2 * C))
timeout 30 "$bin/plan_gpt" --model llama3-8b --layers 16 "${q[@]}" >"$work/l16"
[[ $(head -1 "$work/l16") == "model params=$((8030261248 - 16 * block))" ]] ||
    fail "--layers 16 over llama3-8b: $(head -1 "$work/l16"), want $((8030261248 - 16 * block))"

source "$(dirname "$0")/plan_lib.sh"
refuse "--model llama3-9b: not a preset (${names// /, }; --model list shows them)" \
    --model llama3-9b --world 8 --global-batch 8
refuse "--arch gpt: --model llama2-7b is --arch llama" --model llama2-7b --arch gpt --world 8 \
    --global-batch 8

# the table: the cluster first, then the counts that add up; 16 ranks
# have layouts refused and over the budget both
t=(--model llama3-8b --precision bf16 --global-batch 64 --world 16 --top 3)
timeout 60 "$bin/plan_gpt" "${t[@]}" >"$work/table"
head -1 "$work/table" | grep -q "^cluster (the default: DGX A100 80 GB nodes .*): 2 nodes of 8 ranks for 16 ranks; per rank 80 GiB, 312 TFLOP/s, 300 GB/s inside a node, 25 GB/s between nodes, 5 us a message$" ||
    fail "cluster line: $(head -1 "$work/table")"
sum=$(sed -n 's/^layouts tried: \([0-9]*\) = \([0-9]*\) shown + \([0-9]*\) fitting, not shown + \([0-9]*\) refused by the runtime.s rules + \([0-9]*\) over the memory budget$/\1 \2 \3 \4 \5/p' "$work/table")
read -r tried shown rest refused over <<<"$sum" || fail "no layouts tried line: $(cat "$work/table")"
((shown == 3 && refused > 0 && over > 0)) || fail "counts: $sum"
((shown + rest + refused + over == tried)) || fail "counts do not add up: $sum"
grep -q "^3 of $((shown + rest)) plans shown" "$work/table" || fail "shown line: $(cat "$work/table")"
grep -q "^left out: $refused refused by the runtime's rules, the first " "$work/table" ||
    fail "left out: $(cat "$work/table")"
grep -q "^left out: $over over the memory budget, the first " "$work/table" ||
    fail "left out: $(cat "$work/table")"
timeout 60 "$bin/plan_gpt" "${t[@]}" --format kv >"$work/kv"
awk '/^search / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    ok = v["found"] + v["invalid"] + v["over_memory"] == v["tried"] && v["tried"] == t; exit !ok }' \
    t="$tried" "$work/kv" || fail "kv counts: $(grep '^search ' "$work/kv")"

# a cluster file is named
printf 'ranks_per_node = 4\nmem_gib = 16\n' >"$work/cluster"
timeout 30 "$bin/plan_gpt" --model gpt2-124m --world 8 --global-batch 8 --top 1 \
    --cluster "$work/cluster" >"$work/file"
head -1 "$work/file" | grep -qF "cluster ($work/cluster): 2 nodes of 4 ranks for 8 ranks; per rank 16 GiB," ||
    fail "file cluster line: $(head -1 "$work/file")"
echo "ok: presets, the cluster line and the counts ($sum)"
