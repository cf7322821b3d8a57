#!/usr/bin/env bash
# plan_gpt's command line: bad input is one line "plan_gpt: error: ..." on
# stderr, nothing on stdout, exit 2; --format kv prints the model line and
# one plan line per layout with the issue's fields, least step time first;
# --fix narrows the layouts. The search's own options: plan_search_cli.sh.
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
refuse "needed" --layers 4
refuse "--layers x" "${m[@]}" --layers x
refuse "unknown option '--bogus'" "${m[@]}" --bogus 1
refuse "--arch rnn" "${m[@]}" --arch rnn
refuse "--precision fp8" "${m[@]}" --precision fp8
refuse "--format json" "${m[@]}" --format json
refuse "are for --arch llama" "${m[@]}" --kv-heads 2
refuse "unknown key 'foo'" "${m[@]}" --fix foo=1
refuse "schedule=zigzag" "${m[@]}" --fix schedule=zigzag
refuse "30 channels do not divide into 4 heads" "${m[@]}" --channels 30
refuse "--ranks needs --fix to leave one layout" "${m[@]}" --ranks
refuse "too large to count" --layers 65536 --channels 1048576 --heads 16 --seq 4096 \
    --global-batch 8 --world 1
refuse "no valid layout" "${m[@]}" --fix tp=3
# ZeRO-3 with pipeline parallel is planned (plan_report.sh checks its counts)
"$bin/plan_gpt" "${m[@]}" --fix zero=3,pp=2 --format kv >"$work/z3pp" 2>&1 ||
    fail "--fix zero=3,pp=2: $(cat "$work/z3pp")"
grep -q "^plan .* pp=2 .* zero=3 " "$work/z3pp" || fail "--fix zero=3,pp=2: $(cat "$work/z3pp")"
# and so is a MoE model's (train_gpt_zero3_moe.sh checks its counts)
"$bin/plan_gpt" "${m[@]}" --experts 4 --fix zero=3,tp=2 --format kv >"$work/z3moe" 2>&1 ||
    fail "--experts 4 --fix zero=3,tp=2: $(cat "$work/z3moe")"
grep -q "^plan .* tp=2 .* zero=3 " "$work/z3moe" || fail "MoE ZeRO-3 tp 2: $(cat "$work/z3moe")"
refuse "top-k 5 is not in \[1, 4 experts\]" "${m[@]}" --experts 4 --top-k 5
refuse "moe-every 9 is not in \[1, 4 layers\]" "${m[@]}" --experts 4 --moe-every 9
refuse "--capacity-factor 0" "${m[@]}" --experts 4 --capacity-factor 0
refuse "4 experts do not divide among ep 3 ranks" "${m[@]}" --world 3 --global-batch 3 \
    --experts 4 --fix ep=3
refuse "expert parallel needs at least 1 and a MoE model" "${m[@]}" --fix ep=2
refuse "4 experts do not divide among ep 2 x tp 4 ranks" "${m[@]}" --world 8 --experts 4 \
    --fix tp=4,ep=2
# --offload: train_gpt's list and --offload-chunk's bounds
refuse "'bogus' is not optimizer, activations, params or grads" "${m[@]}" --offload bogus
refuse "--offload needs a non-empty value" "${m[@]}" --offload ''
refuse "'optimizer,' is not optimizer" "${m[@]}" --offload optimizer,
refuse "optimizer named twice" "${m[@]}" --offload optimizer,optimizer=disk:/d
refuse "'activations=host' is not activations" "${m[@]}" --offload activations=host
refuse "'optimizer=disk:' is not optimizer" "${m[@]}" --offload optimizer=disk:
refuse "--offload-chunk needs --offload optimizer" "${m[@]}" --offload-chunk 4096
refuse "--offload-chunk" "${m[@]}" --offload optimizer --offload-chunk 4095
refuse "--offload-chunk 8191: not a multiple of 4096" "${m[@]}" --offload optimizer \
    --offload-chunk 8191
refuse "--offload-chunk" "${m[@]}" --offload optimizer --offload-chunk $(((1 << 30) + 4096))
# a MoE model's experts' moments go to a file of their own beside the flat
# buffer's: the optimizer's offload is taken, and --explain says so
"$bin/plan_gpt" "${m[@]}" --experts 4 --offload optimizer --explain 1 >"$work/moeoff" 2>&1 ||
    fail "--experts 4 --offload optimizer: $(cat "$work/moeoff")"
grep -q "experts' Adam moments.*in a file of their own" "$work/moeoff" ||
    fail "--experts 4 --offload optimizer: the experts' moments not in their file: $(cat "$work/moeoff")"
refuse "spills full recompute's block inputs: recompute selective" "${m[@]}" \
    --offload activations --fix recompute=selective
# the parameters' offload: tp, sp, cp, pp, ZeRO 3 and a MoE model taken
"$bin/plan_gpt" "${m[@]}" --offload params --fix dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none \
    >/dev/null || fail "--offload params at pp 4 refused"
"$bin/plan_gpt" "${m[@]}" --experts 4 --offload params \
    --fix dp=1,tp=1,pp=1,sp=0,zero=0,recompute=none >/dev/null ||
    fail "--offload params with --experts 4 refused"
"$bin/plan_gpt" "${m[@]}" --offload params,optimizer --fix dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none \
    >/dev/null || fail "--offload params,optimizer at dp 4 under ZeRO 3 refused"
"$bin/plan_gpt" "${m[@]}" --offload params,optimizer --fix dp=2,tp=2,pp=1,sp=1,zero=2 >/dev/null ||
    fail "--offload params,optimizer at tp 2 with sp and ZeRO 2 refused"
"$bin/plan_gpt" "${m[@]}" --offload params --fix dp=2,tp=1,pp=1,cp=2,sp=0,zero=0,recompute=none \
    >/dev/null || fail "--offload params at dp 2 x cp 2 refused"
# the gradients' offload: beside the optimizer's, ZeRO 2 and 3 under data
# parallel alone (train_gpt's rules, each refusal saying which)
refuse "grads=disk needs optimizer=disk beside it" "${m[@]}" --offload grads=disk:/g
refuse "grads=disk needs optimizer=disk beside it" "${m[@]}" --offload params,grads
refuse "'grads=host' is not grads" "${m[@]}" --offload optimizer,grads=host
refuse "grads named twice" "${m[@]}" --offload optimizer,grads,grads=disk:/g
refuse "not below ZeRO 2" "${m[@]}" --offload optimizer,grads --fix dp=4,tp=1,pp=1,sp=0,zero=1
refuse "not under tp, pp or cp" "${m[@]}" --offload optimizer,grads \
    --fix dp=2,tp=2,pp=1,sp=0,zero=2
refuse "not under tp, pp or cp" "${m[@]}" --offload optimizer,grads \
    --fix dp=2,tp=1,pp=2,sp=0,zero=3
refuse "not under tp, pp or cp" "${m[@]}" --offload optimizer,grads \
    --fix dp=2,tp=1,pp=1,cp=2,sp=0,zero=2
for z in 2 3; do
    "$bin/plan_gpt" "${m[@]}" --offload 'grads=disk:/a,b,optimizer=disk:/c' \
        --fix dp=4,tp=1,pp=1,sp=0,zero=$z >/dev/null || fail "--offload grads at ZeRO $z refused"
done
one=("${m[@]}" --fix dp=4,tp=1,pp=1,sp=0,zero=1,recompute=full,micro_batch=2 --ranks)
for c in 4096 $((1 << 30)); do
    "$bin/plan_gpt" "${one[@]}" --offload optimizer --offload-chunk $c >/dev/null ||
        fail "--offload-chunk $c refused"
done
ranks() { "$bin/plan_gpt" "${one[@]}" "$@" | grep '^rank'; }
# a directory may hold commas; optimizer=host moves nothing
[[ "$(ranks --offload 'activations=disk:/a,b,optimizer=disk:/c,d')" == \
    "$(ranks --offload optimizer,activations)" ]] || fail "--offload with DIRs of commas"
[[ "$(ranks --offload optimizer=host)" == "$(ranks)" ]] || fail "--offload optimizer=host"
[[ "$(ranks --offload optimizer)" != "$(ranks)" ]] || fail "--offload optimizer counts nothing"
# the activations' offload: only layouts of full recompute
"$bin/plan_gpt" "${m[@]}" --format kv --all --offload activations >"$work/kv"
grep -q "recompute=full" "$work/kv" || fail "--offload activations: no plan"
! grep -q "recompute=none\|recompute=selective" "$work/kv" ||
    fail "--offload activations planned without full recompute"
# --offload auto: a model whose state (16 bytes a parameter) is about 1.2
# times the budget fits only with the optimizer's moments on disk; a small
# one needs no offload
sed 's/^mem_gib = .*/mem_gib = 0.04/' "$(dirname "$0")/plan_cluster.txt" >"$work/c40"
big=(--layers 4 --channels 256 --heads 4 --seq 32 --global-batch 2 --world 1 --cluster "$work/c40")
refuse "no layout of 1 ranks fits in 0.04 GiB" "${big[@]}"
"$bin/plan_gpt" "${big[@]}" --offload auto --offload-chunk 65536 --format kv --all >"$work/auto"
P=$(sed -n 's/^model params=//p' "$work/auto")
# every 65536-byte chunk (8192 elements' moments) read and written whole
io=$((2 * ((P + 8191) / 8192) * 65536))
grep -q "^offload mode=optimizer saved_bytes=[1-9][0-9]* io_bytes_per_step=$io io_ms=[0-9.e+-]* io_exposed_ms=[0-9.e+-]*$" \
    "$work/auto" || fail "--offload auto: not the optimizer's: $(cat "$work/auto")"
awk '/^plan / { for (i = 1; i <= NF; i++) if ($i ~ /^peak_bytes=/) { split($i, v, "=");
     if (v[2] > 0.04 * 2^30) exit 1 } }' "$work/auto" || fail "--offload auto: over the budget"
"$bin/plan_gpt" "${big[@]}" --offload auto --offload-chunk 65536 --top 1 | grep -q \
    "^offload: optimizer: no layout fits in 0.04 GiB per rank without it; plan 1 holds [0-9]* bytes less.* per step: [0-9.e+-]* ms at 3 GB/s read, 1.5 GB/s write, [0-9.e+-]* ms of it in step_ms" ||
    fail "--offload auto: no reason"
# --explain prices the I/O: a disk a thousand times slower than the
# update needs puts it in the step
cp "$work/c40" "$work/slow"
printf 'disk_read_gbs = 1e-6\ndisk_write_gbs = 1e-6\n' >>"$work/slow"
big_slow=("${big[@]}" --cluster "$work/slow")
"$bin/plan_gpt" "${big_slow[@]}" --offload auto --offload-chunk 65536 --top 1 --explain 1 \
    >"$work/explain" || fail "--explain with a slow disk"
grep -q "^    offload I/O  .* ms  *[1-9][0-9.]*%  what compute does not hide of [0-9.e+]* ms at 1e-06/1e-06 GB/s$" \
    "$work/explain" || fail "--explain: no offload I/O row: $(cat "$work/explain")"
grep -q "^offload: optimizer: .* [1-9][0-9.e+]* ms of it in step_ms" "$work/explain" ||
    fail "--offload auto: the slow disk's I/O not in the step: $(grep ^offload "$work/explain")"
"$bin/plan_gpt" "${big[@]}" --layers 1 --channels 32 --offload auto --format kv >"$work/auto"
grep -q "^offload mode=none saved_bytes=0 io_bytes_per_step=0 io_ms=0 io_exposed_ms=0$" "$work/auto" ||
    fail "--offload auto offloads a model that fits: $(cat "$work/auto")"

# --head-chunk auto: a head whose (N, V) buffers are most of the model
# (V 4,096 against C 32) fits 0.004 GiB only in chunks of 1,024 rows, each
# plan's kv line saying so; 0.01 GiB fits without; 0.002 GiB not even so
hv=(--layers 2 --channels 32 --heads 4 --seq 64 --vocab 4096 --global-batch 4 --world 1)
for g in 0.002 0.004 0.01; do
    sed "s/^mem_gib = .*/mem_gib = $g/" "$(dirname "$0")/plan_cluster.txt" >"$work/c$g"
done
refuse "no layout of 1 ranks fits in 0.004 GiB per rank ([0-9]* over it); " "${hv[@]}" \
    --cluster "$work/c0.004"
"$bin/plan_gpt" "${hv[@]}" --cluster "$work/c0.004" --head-chunk auto --format kv --all >"$work/auto"
grep -q "^head chunk_rows=1024 saved_bytes=[1-9][0-9]* added_flops_per_step=6.71089e+07$" \
    "$work/auto" || fail "--head-chunk auto: $(cat "$work/auto")"
[[ $(grep -c '^plan ' "$work/auto") -gt 0 &&
    $(grep '^plan ' "$work/auto" | grep -vc ' head_chunk=1024$') -eq 0 ]] ||
    fail "--head-chunk auto: plans without the chunk: $(cat "$work/auto")"
"$bin/plan_gpt" "${hv[@]}" --cluster "$work/c0.004" --head-chunk auto --top 1 | grep -q \
    "^head: chunks of 1024 vocabulary rows: no layout fits in 0.004 GiB per rank without it; plan 1 holds [1-9][0-9]* bytes less on its fullest rank and computes the head's logits again in backward, 0.06711 GFLOP a step per rank$" ||
    fail "--head-chunk auto: no reason"
"$bin/plan_gpt" "${hv[@]}" --cluster "$work/c0.004" --head-chunk auto --explain 1 >"$work/explain"
grep -q "^  head: chunks of 1024 of the rank's 4096 vocabulary rows (4 chunks): " "$work/explain" &&
    grep -q "^    work space .*a head chunk's logits" "$work/explain" ||
    fail "--explain does not name the chunked head: $(cat "$work/explain")"
"$bin/plan_gpt" "${hv[@]}" --cluster "$work/c0.01" --head-chunk auto --top 1 | grep -q \
    "^head: whole: plans fit in 0.01 GiB per rank without it and none with a chunked head is faster$" ||
    fail "--head-chunk auto chunks a head that fits"
refuse "no layout of 1 ranks fits in 0.002 GiB per rank ([0-9]* over it, nor with a chunked head, nor with any offload); " \
    "${hv[@]}" --cluster "$work/c0.002" --head-chunk auto --offload auto
refuse "--head-chunk 1073741825: not an integer in \[0, 1073741824\] nor auto" "${hv[@]}" \
    --head-chunk 1073741825
"$bin/plan_gpt" "${hv[@]}" --head-chunk 1073741824 --format kv | grep -q ' head_chunk=1073741824$' ||
    fail "--head-chunk 1073741824 (the bound) refused"
refuse "--head-chunk -1: not an integer" "${hv[@]}" --head-chunk -1
refuse "--head-chunk Auto: not an integer" "${hv[@]}" --head-chunk Auto

"$bin/plan_gpt" "${m[@]}" --format kv --all --even-split >"$work/kv"
[[ $(head -1 "$work/kv") == "model params=59584" ]] || fail "model line: $(head -1 "$work/kv")"
n=$(grep -c '^plan ' "$work/kv")
((n > 100)) || fail "only $n plans for 4 ranks"
line='^plan dp=[0-9]+ tp=[0-9]+ pp=[0-9]+ cp=[0-9]+ ep=1 sp=[01] zero=[0-3] recompute=(none|selective|full)'
line+=' micro_batch=[0-9]+ grad_accum=[0-9]+ schedule=(gpipe|1f1b|interleaved)'
line+=' virtual_stages=[0-9]+ params=[0-9]+ state_bytes=[0-9]+ activation_bytes=[0-9]+'
line+=' peak_bytes=[0-9]+ step_ms=[0-9.e+-]+ tokens_per_s=[0-9.e+-]+ tflops_per_rank=[0-9.e+-]+$'
grep '^plan ' "$work/kv" >"$work/plans"
bad=$(grep -Evc "$line" "$work/plans" || true)
[[ $bad -eq 0 ]] || fail "$bad malformed plan lines: $(grep -Ev "$line" "$work/plans" | head -2)"
sed 's/.*step_ms=\([^ ]*\) .*/\1/' "$work/plans" | sort -c -g || fail "not least step time first"
# every plan is a factorization of 4 with batch 8
awk '{
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (v["dp"] * v["tp"] * v["pp"] * v["cp"] != 4 || v["dp"] * v["micro_batch"] * v["grad_accum"] != 8)
        { print; exit 1 } }' "$work/plans" || fail "a plan that is not 4 ranks with batch 8"
"$bin/plan_gpt" "${m[@]}" --format kv --all --fix dp=2,tp=2,zero=2 | grep '^plan ' >"$work/fixed"
[[ -s "$work/fixed" ]] || fail "--fix dp=2,tp=2,zero=2 left nothing"
grep -v "dp=2 tp=2 pp=1 cp=1 .*zero=2 " "$work/fixed" && fail "--fix not applied"
# context parallel: --fix cp=2 keeps cp 2 in every plan; cp=3 (6 chunks of
# a 16-position sequence) is refused with the reason; --explain of a cp
# plan shows the ring's time and what a rank keeps
"$bin/plan_gpt" "${m[@]}" --format kv --all --fix cp=2 | grep '^plan ' >"$work/cp"
[[ -s "$work/cp" ]] || fail "--fix cp=2 left nothing"
grep -v " cp=2 " "$work/cp" && fail "--fix cp=2 not applied"
grep -q "dp=2 tp=1 pp=1 cp=2 " "$work/cp" || fail "--fix cp=2: no dp 2 x cp 2: $(head -3 "$work/cp")"
"$bin/plan_gpt" "${m[@]}" --world 3 --global-batch 3 --fix cp=3 >"$work/cp3" 2>&1 &&
    fail "--fix cp=3 planned: $(cat "$work/cp3")"
grep -q "does not divide into 2 x cp 3 chunks" "$work/cp3" || fail "--fix cp=3: $(cat "$work/cp3")"
"$bin/plan_gpt" "${m[@]}" --fix cp=2,dp=2 --explain 1 >"$work/cpx"
grep -q "^plan 1: dp=2 tp=1 pp=1 cp=2 " "$work/cpx" || fail "--explain cp: $(cat "$work/cpx")"
grep -q "cp ring " "$work/cpx" || fail "--explain: no ring: $(cat "$work/cpx")"
grep -q "context parallel 2: a rank keeps its 8 of the 16 positions" "$work/cpx" ||
    fail "--explain: no cp memory: $(cat "$work/cpx")"
# Mixture-of-Experts: the model's parameters are the dense blocks', the
# MoE blocks' attention and router, and every expert (8C^2 + 5C each): L 4,
# C 32, V 256, T 16, 4 experts in blocks 1 and 3; in every plan ep divides
# dp and ep x tp the experts, and some plans have cp 2 (MoE runs under
# cp); --explain shows the experts' bytes and the alltoalls
C=32
want=$((256 * C + 16 * C + 2 * C + 2 * (12 * C * C + 13 * C) + 2 * (4 * C * C + 8 * C + 4 * C) +
    2 * 4 * (8 * C * C + 5 * C)))
"$bin/plan_gpt" "${m[@]}" --experts 4 --moe-every 2 --format kv --all >"$work/moe"
[[ $(head -1 "$work/moe") == "model params=$want" ]] || fail "MoE params: $(head -1 "$work/moe"), want $want"
awk '/^plan / {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    if (v["dp"] % v["ep"] != 0 || 4 % (v["ep"] * v["tp"]) != 0) { print; exit 1 }
    if (v["dp"] == 4) seen[v["ep"]] = 1
    if (v["cp"] == 2) cp2 = 1 }
    END { if (!(1 in seen) || !(2 in seen) || !(4 in seen) || !cp2) exit 1 }' "$work/moe" ||
    fail "MoE plans: ep not dividing dp, ep x tp not the experts, no dp 4 with ep 1, 2, 4 or no cp 2: $(head -3 "$work/moe")"
"$bin/plan_gpt" "${m[@]}" --experts 4 --moe-every 2 --fix dp=4,ep=2,zero=1 --explain 1 >"$work/moex"
grep -q "^plan 1: dp=4 tp=1 pp=1 cp=1 ep=2 " "$work/moex" || fail "--explain ep: $(cat "$work/moex")"
grep -q "experts' parameters .*2 of the 4 experts of each MoE block (ep 2)" "$work/moex" ||
    fail "--explain: no experts' bytes: $(cat "$work/moex")"
grep -q "experts' Adam moments .*sharded over the ranks holding the same experts" "$work/moex" ||
    fail "--explain: experts' moments not sharded: $(cat "$work/moex")"
grep -q "ep alltoalls .*dispatch and combine" "$work/moex" || fail "--explain: no alltoalls"
# Llama 3 8B's parameter count
"$bin/plan_gpt" --layers 32 --channels 4096 --heads 32 --seq 4096 --vocab 128256 --arch llama \
    --ffn 14336 --kv-heads 8 --precision bf16 --global-batch 64 --world 8 --fix tp=8 \
    --format kv >"$work/llama"
[[ $(head -1 "$work/llama") == "model params=8030261248" ]] ||
    fail "Llama 3 8B: $(head -1 "$work/llama")"
echo "ok: plan_gpt's refusals, $n plans for 4 ranks"
