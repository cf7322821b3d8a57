#!/usr/bin/env bash
# train_gpt --tp-overlap (docs/model.md "Tensor-parallel overlap"): the
# layouts it does not cover are refused before training (exit 2, with the
# reason); tp 2, tp 4 with selective recompute, tp 2 x pp 2 with full
# recompute, a Llama and a MoE model train to the losses and gradient norms
# of the same run without it within 1e-5 relative (OpenBLAS sums a
# product's terms in an order that follows the number of rows, and on more
# than 2 ranks the allreduce's algorithm follows the message's size: the
# halves change both, and backward sums the weights' gradients over each
# copy's rows apart); with sequence parallel (each copy's reduce-scatter
# in flight, forward's gathers too) over 10 steps on tp 2, tp 4 with selective recompute,
# tp 2 x pp 2 with full recompute, a Llama, dp 2 x tp 2 under ZeRO-2, the
# same within 1e-5; with context parallel (each copy's ring attention on
# its B/2 sequences) tp 2 x cp 2, with sp and full recompute, and a Llama,
# 10 steps within 1e-5; dp 2 x tp 2 under ZeRO-3 too (each block's
# parameters gathered around the two copies), and bitwise ZeRO-2's run
# with the overlap; with the bf16 products' AVX-512 kernel (whose rows
# do not depend on each other) on tp 2 (a sum of two operands has one
# order) step 1's loss (forward's alone) is bitwise the same, with sp too;
# tp 2 and 4, without and with sp, recompute off and full train to one
# process's losses within 1e-5; the trace holds each rank's "start tp" and
# "wait tp" spans, under ZeRO-3 and with sp and cp too, and with sp the
# "start gather" and "wait gather" spans of forward's gathers and of
# backward's started ahead; a copy's reduction into rows
# not its own is an internal error (the runtime checks it).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=tpoverlap
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 4 --steps 4)
refuse 1 "it needs tp > 1" "${small[@]}" --tp-overlap
refuse 2 "it needs an even micro-batch, not 3" "${small[@]}" --tp 2 --micro-batch 3 --tp-overlap
refuse 2 "it needs an even micro-batch, not 1" "${small[@]}" --tp 2 --micro-batch 1 --tp-overlap
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "--tp-overlap" "$work/help" || fail "--help has no --tp-overlap"

# same N NAME ARGS...: ARGS on N ranks with and without --tp-overlap; the
# loss logs within 1e-5 relative
same() {
    local n=$1 name=$2
    shift 2
    msrun_n "$n" "$@" --loss-log "$work/$name.off" >/dev/null 2>"$work/err" ||
        fail "$name: $(cat "$work/err")"
    msrun_n "$n" "$@" --tp-overlap --loss-log "$work/$name.on" >/dev/null 2>"$work/err" ||
        fail "$name with --tp-overlap: $(cat "$work/err")"
    close "$work/$name.on" "$work/$name.off" "${close_steps:-4}" "$name"
}
same 2 "tp 2" "${small[@]}" --tp 2 --grad-accum 2
same 4 "tp 4, selective recompute" "${small[@]}" --tp 4 --recompute selective
same 4 "tp 2 x pp 2, full recompute" "${small[@]}" --tp 2 --pp 2 --grad-accum 2 --recompute full
same 2 "llama tp 2" --arch llama --layers 2 --channels 32 --heads 4 --kv-heads 2 --ffn 40 \
    --seq 16 --micro-batch 2 --steps 4 --tp 2
same 2 "moe tp 2" --layers 2 --channels 16 --heads 2 --seq 16 --micro-batch 2 --steps 4 \
    --experts 4 --top-k 2 --moe-every 2 --tp 2

# sequence parallel: a copy's rows are its B/2 sequences' T/tp positions,
# gathered before the column-parallel products and reduce-scattered after
# the row-parallel ones (the reduce-scatters in flight)
sp=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 4 --steps 10 --sp)
close_steps=10
same 2 "sp tp 2" "${sp[@]}" --tp 2 --grad-accum 2
same 4 "sp tp 4, selective recompute" "${sp[@]}" --tp 4 --recompute selective
same 4 "sp tp 2 x pp 2, full recompute" "${sp[@]}" --tp 2 --pp 2 --grad-accum 2 --recompute full
same 2 "sp llama tp 2" --arch llama --layers 2 --channels 32 --heads 4 --kv-heads 2 --ffn 40 \
    --seq 16 --micro-batch 2 --steps 10 --tp 2 --sp
same 4 "sp dp 2 x tp 2, ZeRO-2" "${sp[@]}" --dp 2 --tp 2 --zero 2 --zero-min-bytes 0

# context parallel: each copy's attention is the ring over its B/2
# sequences' chunks
cp=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 4 --steps 10 --tp 2 --cp 2)
same 4 "cp tp 2 x cp 2" "${cp[@]}" --grad-accum 2
same 4 "cp tp 2 x cp 2, sp, full recompute" "${cp[@]}" --sp --recompute full
same 4 "cp llama tp 2 x cp 2" --arch llama --layers 2 --channels 32 --heads 4 --kv-heads 2 \
    --ffn 40 --seq 16 --micro-batch 2 --steps 10 --tp 2 --cp 2
close_steps=4

# against one process: tp 2 and 4, without and with sp (where forward's
# gathers run in flight too, each copy's behind the other copy's
# products), recompute off and full (the split forward run again)
msrun_n 1 "${small[@]}" --loss-log "$work/one" >/dev/null 2>"$work/err" ||
    fail "one process: $(cat "$work/err")"
for tp in 2 4; do
    for v in "" --sp; do
        for rc in none full; do
            name="one process: tp $tp $v, recompute $rc"
            msrun_n "$tp" "${small[@]}" --tp "$tp" $v --recompute "$rc" --tp-overlap \
                --loss-log "$work/one.$tp$v$rc" >/dev/null 2>"$work/err" ||
                fail "$name: $(cat "$work/err")"
            close "$work/one.$tp$v$rc" "$work/one" 4 "$name"
        done
    done
done

# ZeRO-3 on dp 2 x tp 2, every segment sharded (buckets of 2000 bytes):
# the copies run inside their block's acquire, on its gathered parameters;
# traced (its spans below). The gathers copy the parameters and the
# gradients go ZeRO-2's way: ZeRO-2's run with the overlap has its bits.
z3=("${small[@]}" --dp 2 --tp 2 --grad-accum 2 --zero-min-bytes 0 --bucket-mb 0.002)
msrun_n 4 "${z3[@]}" --zero 3 --loss-log "$work/z3.off" >/dev/null 2>"$work/err" ||
    fail "ZeRO-3: $(cat "$work/err")"
msrun_n 4 "${z3[@]}" --zero 3 --tp-overlap --trace "$work/z3.json" --loss-log "$work/z3.on" \
    >/dev/null 2>"$work/err" || fail "ZeRO-3 with --tp-overlap: $(cat "$work/err")"
grep -q "zero 3" "$work/err" || fail "not ZeRO-3: $(cat "$work/err")"
close "$work/z3.on" "$work/z3.off" 4 "dp 2 x tp 2, ZeRO-3"
msrun_n 4 "${z3[@]}" --zero 2 --tp-overlap --loss-log "$work/z2.on" >/dev/null 2>"$work/err" ||
    fail "ZeRO-2 with --tp-overlap: $(cat "$work/err")"
diff "$work/z3.on" "$work/z2.on" || fail "with --tp-overlap, ZeRO-3 and ZeRO-2 differ"

# bitwise: row-independent products and a sum of two operands
if "$bin/msrun" --version | grep -q "cpu:.* avx512_bf16" && [[ "${MSRUN_CPU_DISABLE:-}" != *avx512* ]]; then
    for v in "" --sp; do
        # (the loss log appends: a file each)
        b=("${small[@]}" --precision bf16 --tp 2 --grad-accum 2 $v)
        msrun_n 2 "${b[@]}" --loss-log "$work/bf$v.off" >/dev/null 2>"$work/err" ||
            fail "$(cat "$work/err")"
        msrun_n 2 "${b[@]}" --tp-overlap --loss-log "$work/bf$v.on" >/dev/null 2>"$work/err" ||
            fail "$(cat "$work/err")"
        # step 1's loss is forward's alone; backward sums the weights'
        # gradients over the copies' rows in two parts, so the norms and the
        # later steps differ in the last bits (within 1e-5, the close above)
        [[ $(head -1 "$work/bf$v.off" | cut -d' ' -f4) == $(head -1 "$work/bf$v.on" | cut -d' ' -f4) ]] ||
            fail "bf16 tp 2 $v: step 1's loss not bitwise: $(head -1 "$work/bf$v.off" "$work/bf$v.on")"
        close "$work/bf$v.on" "$work/bf$v.off" 4 "bf16 tp 2 $v"
        echo "bf16 tp 2 $v: step 1's loss bitwise"
    done
fi

# the trace: every rank starts and waits for its copies' allreduces, 2
# copies x 2 products x 4 blocks x 2 micro-batches, forward and backward
msrun_n 2 "${small[@]}" --tp 2 --grad-accum 2 --tp-overlap --trace "$work/trace.json" \
    >/dev/null 2>"$work/err" || fail "trace: $(cat "$work/err")"
# (ZeRO-3's: the same on each of its 4 ranks); with sp the blocks'
# reduce-scatters are those spans too, and only the embedding's forward
# and the head's backward reduce-scatter blocking (one each a micro-batch)
msrun_n 2 "${small[@]}" --tp 2 --sp --grad-accum 2 --tp-overlap --trace "$work/sp.json" \
    >/dev/null 2>"$work/err" || fail "trace with sp: $(cat "$work/err")"
msrun_n 4 "${small[@]}" --tp 2 --cp 2 --grad-accum 2 --tp-overlap --trace "$work/cp.json" \
    >/dev/null 2>"$work/err" || fail "trace with cp: $(cat "$work/err")"
# With sp forward's gathers (ln1's and ln2's of each copy) and backward's
# of the saved norm outputs (the same four) run in flight: "start gather"
# and "wait gather" spans, 8 a block, 4 blocks x 2 micro-batches, none
# without sp; the blocking "allgather seq" left are backward's of the
# projections' output gradients (2 a copy and block) and the embedding's
# and head's (3 a micro-batch): 38.
for t in trace:2:0:0:0 z3:4:0:0:0 sp:2:4:64:38 cp:4:0:0:0; do
    IFS=: read -r f ranks rs ga ag <<<"$t"
    f="$work/$f.json"
    python3 - "$f" "$ranks" "$rs" "$ga" "$ag" <<'PY' || fail "trace: $(head -c 2000 "$f")"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for r in range(int(sys.argv[2])):
    count = lambda name: sum(1 for e in ev if e["pid"] == r and e["cat"] == "comm" and e["name"] == name)
    for name in ("start tp", "wait tp"):
        assert count(name) == 2 * 2 * 4 * 2 * 2, (r, name, count(name))
    assert count("reduce-scatter seq") == int(sys.argv[3]), (r, count("reduce-scatter seq"))
    for name in ("start gather", "wait gather"):
        assert count(name) == int(sys.argv[4]), (r, name, count(name))
    assert count("allgather seq") == int(sys.argv[5]), (r, count("allgather seq"))
PY
done
# the planner: with --tp-overlap, --explain's tp collectives are fewer
# (the blocks' partly hidden) but more than a quarter (each pass's last
# allreduce of half the rows stays, at least half of one of all of them), and
# --plan ranks only the layouts it runs on (tp 2 of 2 ranks)
cp "$(dirname "$0")/plan_cluster.txt" "$work/cluster"
export XDG_CACHE_HOME="$work/cache"
pm=(--layers 4 --channels 256 --heads 4 --seq 64 --micro-batch 4 --steps 2 --cluster "$work/cluster")
tpms() { sed -n 's/.*tp collectives *\([0-9.e+-]*\) ms.*/\1/p' "$1"; }
# (with sp the reduce-scatters and allgathers are hidden so, both ways:
# on this cluster, whose compute hides a gather of half the rows whole,
# 3/16 of the blocks' collectives' time without the overlap stays,
# forward's first gather and last reduce-scatter and backward's last,
# each of half the rows, and the embedding's and head's whole: at least
# 3/16, less than 3/8, which forward's allgathers blocking came to)
for v in "" --sp; do
    msrun_n 2 "${pm[@]}" --tp 2 $v --explain 1 >"$work/x.off" 2>&1 || fail "$(cat "$work/x.off")"
    msrun_n 2 "${pm[@]}" --tp 2 $v --tp-overlap --explain 1 >"$work/x.on" 2>&1 ||
        fail "$(cat "$work/x.on")"
    want=allreduces lo=0.25 hi=1
    [ -z "$v" ] || want="reduce-scatters and allgathers partly behind"
    [ -z "$v" ] || lo=0.1875 hi=0.375
    grep -q "tp collectives.*$want.*(tp overlap)" "$work/x.on" ||
        fail "explain $v: want $want: $(cat "$work/x.on")"
    off=$(tpms "$work/x.off") on=$(tpms "$work/x.on")
    awk -v a="$on" -v b="$off" -v lo="$lo" -v hi="$hi" 'BEGIN { exit !(a < b * hi && a > b * lo) }' ||
        fail "tp collectives $v: $on ms with --tp-overlap, $off ms without"
    echo "planner $v: tp collectives $off ms, with --tp-overlap $on ms"
done
msrun_n 2 "${pm[@]}" --tp-overlap --plan >"$work/plan" 2>&1 || fail "$(cat "$work/plan")"
sed 's/^\[node [0-9]* rank [0-9]*\] //' "$work/plan" |
    awk '/^ +[0-9]+ +[0-9]+ +[0-9]+ / { n++; if ($3 != 2) bad = 1 } END { exit bad || n == 0 }' ||
    fail "--plan --tp-overlap: a layout without tp: $(cat "$work/plan")"
echo "train_gpt tensor-parallel overlap: ok"
