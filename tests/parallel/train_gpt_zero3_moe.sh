#!/usr/bin/env bash
# ZeRO-3 with a MoE model (docs/model.md "Mixture-of-Experts and expert
# parallel"): the dense parts sharded over the replica group and gathered
# around each use, and so the experts where their replica group (the dp /
# ep x cp ranks holding the same experts) has more than one rank: each
# keeps its shard of every block's experts, a block's are gathered around
# each use (the next block's gather started while one computes: 9 of
# the 10 a rank makes in a traced dp 2 step of 4 blocks and 2
# micro-batches are "experts prefetch" spans) and its gradients reduce-scattered
# into the shards. dp 2 x tp
# 2 with ep 2, dp 2 x pp 2 with ep 2 under 1F1B, under the interleaved
# schedule (4 layers, 2 virtual stages) and under GPipe with full
# recompute, dp 2 x cp 2 with ep 2, tp 2 with sp and selective recompute,
# a Llama's SwiGLU experts in dp 2 x tp 2 with sp and ep 2, and with the
# experts sharded (replica groups of 2 and 4) dp 4 and dp 4 x ep 2 on the
# data-parallel path, dp 2 x tp 2, dp 2 x pp 2 and a Llama's dp 2 x tp 2
# with sp print the losses and gradient norms of one process over 10
# steps (1e-5 relative) with the same routing; ZeRO-2 gives the same bits
# in the tp and pp layouts with ep 2; in bf16, dp 2 x tp 2 with ep 2 and
# dp 2 x tp 2 (experts sharded) stay within loss / 128 of one process in
# bf16 (train_gpt_bf16.sh's derived bound); each rank of dp 4 reports a
# quarter of the experts' parameters and gradients resident (a hand
# count); the tp and pp layouts' checkpoints, the sharded ones of dp 2 x
# tp 2 and dp 4 x ep 2 too, resume bitwise in their layout and reshard
# into one process, and the dp 4 x ep 2 one into dp 2 x tp 2 x ep 2 under
# ZeRO-1; the export of the sharded experts at step 0 is one process's
# file byte for byte, and --init-from that file exports it again;
# --auto with ZeRO-3 and pp 2 fixed trains; --report's counts of every
# rank, experts included, equal plan_gpt --ranks's to the byte for dp 2 x
# tp 2 x ep 2, dp 2 x pp 2 x ep 2 and, with the experts sharded, dp 2 x
# tp 2, dp 2 x pp 2, dp 4 x ep 2 and cp 2.
# (plan_report_lib.sh: set -euo pipefail, $bin, job_env.sh, $work, check)
source "$(dirname "$0")/plan_report_lib.sh"
job_prefix=zero3moe
W=$work
# every block MoE, capacity 1.0: choices drop every step; G = 8 in micro-batches
# of 2 in every layout (an expert's capacity is counted per micro-batch)
model=(--layers 2 --channels 16 --heads 2 --seq 16 --experts 4 --top-k 2 --moe-every 1
    --capacity-factor 1.0 --aux-loss 0.01 --global-batch 8 --steps 10 --lr 3e-3 --report)
z3=(--zero 3 --zero-min-bytes 0 --bucket-mb 0.002)
routing() { grep -o "moe step .*" "$1"; }
# layout NAME ONE N ARGS...: N processes train as ARGS say under ZeRO-3,
# the losses and norms and the routing of the one-process log ONE
layout() {
    local name=$1 one=$2 n=$3
    shift 3
    msrun_n "$n" "${model[@]}" "${z3[@]}" "$@" --loss-log "$W/$name" >/dev/null \
        2>"$W/$name.err" || fail "$name: $(cat "$W/$name.err")"
    grep -q "zero 3" "$W/$name.err" || fail "$name: not ZeRO-3: $(cat "$W/$name.err")"
    close "$W/$name" "$W/$one" 10 "$name"
    diff <(routing "$W/$one.err") <(routing "$W/$name.err") >/dev/null ||
        fail "$name routes otherwise: $(diff <(routing "$W/$one.err") <(routing "$W/$name.err"))"
}
# same_bits NAME N ARGS...: the layout NAME under ZeRO-2 gives its bits
same_bits() {
    local name=$1 n=$2
    shift 2
    msrun_n "$n" "${model[@]}" "${z3[@]}" --zero 2 "$@" --loss-log "$W/$name-z2" >/dev/null \
        2>"$W/err" || fail "$name under ZeRO-2: $(cat "$W/err")"
    diff "$W/$name" "$W/$name-z2" || fail "ZeRO-3 and ZeRO-2 differ in $name"
}
one() {
    local name=$1
    shift
    timeout 60 "$bin/train_gpt" "${model[@]}" --micro-batch 2 "$@" --loss-log "$W/$name" \
        >"$W/$name.out" 2>"$W/$name.err" || fail "$name, one process: $(cat "$W/$name.err")"
    [[ $(routing "$W/$name.err" | wc -l) -gt 0 ]] || fail "$name: no routing report"
}
one one
one one4 --layers 4

layout tp2-ep2 one 4 --dp 2 --ep 2 --tp 2 --micro-batch 2 --grad-accum 2
grep -q "mesh dp 2 x pp 1 x cp 1 x tp 2" "$W/tp2-ep2.err" || fail "tp2-ep2: not tp 2"
same_bits tp2-ep2 4 --dp 2 --ep 2 --tp 2 --micro-batch 2 --grad-accum 2
layout pp2-1f1b one 4 --dp 2 --ep 2 --pp 2 --micro-batch 2 --grad-accum 2
grep -q "mesh dp 2 x pp 2 x cp 1 x tp 1; schedule 1f1b" "$W/pp2-1f1b.err" ||
    fail "pp2-1f1b: not pp 2 under 1F1B: $(cat "$W/pp2-1f1b.err")"
same_bits pp2-1f1b 4 --dp 2 --ep 2 --pp 2 --micro-batch 2 --grad-accum 2
layout pp2-int one4 4 --layers 4 --dp 2 --ep 2 --pp 2 --micro-batch 2 --grad-accum 2 \
    --schedule interleaved --virtual-stages 2
grep -q "schedule interleaved, 2 virtual stages" "$W/pp2-int.err" ||
    fail "pp2-int: not interleaved: $(cat "$W/pp2-int.err")"
layout pp2-gpipe-full one 4 --dp 2 --ep 2 --pp 2 --micro-batch 2 --grad-accum 2 \
    --schedule gpipe --recompute full
layout cp2-ep2 one 4 --dp 2 --ep 2 --cp 2 --micro-batch 2 --grad-accum 2
grep -q "mesh dp 2 x pp 1 x cp 2 x tp 1" "$W/cp2-ep2.err" || fail "cp2-ep2: not cp 2"
layout tp2-sp-selective one 2 --tp 2 --sp --micro-batch 2 --grad-accum 4 \
    --recompute selective
# a Llama with Mixtral's SwiGLU experts: dp 2 (ep 2) x tp 2 with sp
one llama1 --arch llama --kv-heads 1 --ffn 24
layout llama-tp2-sp llama1 4 --arch llama --kv-heads 1 --ffn 24 --dp 2 --ep 2 --tp 2 --sp \
    --micro-batch 2 --grad-accum 2

# the experts sharded: replica groups of 4 (dp 4), of 2 (dp 4 x ep 2) on
# the data-parallel path, of 2 in the model-parallel runtime
layout dp4 one 4 --dp 4 --micro-batch 2
layout dp4-ep2 one 4 --dp 4 --ep 2 --micro-batch 2
layout tp2-rep2 one 4 --dp 2 --tp 2 --micro-batch 2 --grad-accum 2
layout pp2-rep2 one 4 --dp 2 --pp 2 --micro-batch 2 --grad-accum 2
layout llama-tp2-rep2 llama1 4 --arch llama --kv-heads 1 --ffn 24 --dp 2 --tp 2 --sp \
    --micro-batch 2 --grad-accum 2
# the experts' prefetch in the trace (dp 2, replicas 2, 4 MoE blocks, 2
# micro-batches, the model-parallel runtime): the last step's spans on
# each rank's communication row: the first micro-batch gathers its 4
# blocks forward and 2 backward (the last two kept from forward), the
# second 2 and 2 (the first two kept from the first one's backward): 10
# gathers, each waited for ("experts wait K"), every block among them;
# all but the first started ahead ("experts prefetch K": 9, one
# "experts gather K")
msrun_n 2 "${model[@]}" "${z3[@]}" --layers 4 --dp 2 --micro-batch 2 --grad-accum 2 \
    --recompute selective --trace "$W/ez.json" --loss-log "$W/ez" >/dev/null 2>"$W/err" ||
    fail "trace of the experts' gathers: $(cat "$W/err")"
close "$W/ez" "$W/one4" 10 "traced dp 2"
python3 - "$W/ez.json" <<'PY' || fail "the experts' gathers in the trace: $(head -c 2000 "$W/ez.json")"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
for r in range(2):
    got = lambda what: [e["name"].split()[2] for e in ev if e["pid"] == r and e["cat"] == "comm"
                        and e["name"].startswith("experts " + what + " ")]
    assert len(got("wait")) == 10 and len(set(got("wait"))) == 4, (r, got("wait"))
    assert len(got("prefetch")) == 9 and len(got("gather")) == 1, (r, got("prefetch"), got("gather"))
    assert sorted(got("prefetch") + got("gather")) == sorted(got("wait")), r
PY

# by hand: an expert is 8C^2 + 5C = 2128 floats, 4 of them in each of 2
# blocks; dp 4 keeps a quarter of each block: 2 x 2128 floats = 17024
# bytes of parameters and as many of gradients, twice that of moments (the
# store whole would be 68096); the work space adds two blocks' parameters
# and one's gradients (3 x 8512 floats)
# to the MoE state's buffers
[[ $(grep -c "experts: 4 of 4 per MoE block held here: params 17024 grads 17024 optim 34048 bytes" \
    "$W/dp4.err") -eq 4 ]] || fail "dp4: the experts are not a quarter on each rank: $(grep experts: "$W/dp4.err")"

# bf16: within loss / 128 of one process in bf16 at every step
one one-bf16 --precision bf16
bf16() {
    local name=$1
    shift
    msrun_n 4 "${model[@]}" "${z3[@]}" --precision bf16 "$@" --micro-batch 2 --grad-accum 2 \
        >"$W/bf16.out" 2>"$W/err" || fail "bf16 $name: $(cat "$W/err")"
    paste <(grep -o 'step [0-9]* loss [0-9.]*' "$W/one-bf16.out" | awk '{ print $2, $4 }') \
        <(grep -o 'step [0-9]* loss [0-9.]*' "$W/bf16.out" | awk '{ print $2, $4 }') |
        awk -v name="$name" '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > $2 / 128) bad = 1
               if (d > m) m = d; n++ }
             END { printf "bf16 %s: max |loss difference| %.6f over %d steps\n", name, m, n
                   exit bad || n != 10 }' ||
        fail "bf16 $name is not within loss / 128 of one process: $(paste "$W/one-bf16.out" "$W/bf16.out")"
}
bf16 tp2-ep2 --dp 2 --ep 2 --tp 2
bf16 tp2-rep2 --dp 2 --tp 2

# checkpoints: dp 2 x tp 2 x ep 2 and dp 2 x pp 2 x ep 2 stopped at step 4
# and resumed in their layout give steps 5..10 bitwise; resumed by one
# process (ZeRO-0, every expert), those of the run that never stopped
# (1e-5). ckpt NAME ARGS...: the layout of the uninterrupted run NAME.
ckpt() {
    local name=$1
    shift
    rm -rf "$W/ck" "$W/ck1" "$W/ck2" "$W/first" "$W/second" "$W/alone"
    msrun_n 4 "${model[@]}" "${z3[@]}" "$@" --steps 4 --ckpt-every 4 --ckpt-dir "$W/ck" \
        --loss-log "$W/first" >/dev/null 2>"$W/err" || fail "$name, first part: $(cat "$W/err")"
    cp -r "$W/ck" "$W/ck1"
    cp -r "$W/ck" "$W/ck2" # for another layout
    msrun_n 4 "${model[@]}" "${z3[@]}" "$@" --ckpt-dir "$W/ck" --resume --loss-log "$W/second" \
        >/dev/null 2>"$W/err" || fail "$name, resumed: $(cat "$W/err")"
    grep -q "resumed from step 4" "$W/err" || fail "$name: no resume: $(cat "$W/err")"
    diff "$W/$name" <(cat "$W/first" "$W/second") ||
        fail "$name: the resumed run differs from the uninterrupted one"
    msrun_n 1 "${model[@]}" --micro-batch 2 --ckpt-dir "$W/ck1" --resume --loss-log "$W/alone" \
        >/dev/null 2>"$W/err" || fail "$name, resharded into one process: $(cat "$W/err")"
    grep -q "resumed from step 4" "$W/err" ||
        fail "$name: one process did not resume: $(cat "$W/err")"
    resumed "$W/one" "$W/alone" 6
}
ckpt tp2-ep2 --dp 2 --ep 2 --tp 2 --micro-batch 2 --grad-accum 2
ckpt pp2-1f1b --dp 2 --ep 2 --pp 2 --micro-batch 2 --grad-accum 2
ckpt tp2-rep2 --dp 2 --tp 2 --micro-batch 2 --grad-accum 2
ckpt dp4-ep2 --dp 4 --ep 2 --micro-batch 2
# the sharded dp 4 x ep 2 checkpoint in another layout: dp 2 x tp 2 x ep 2
# under ZeRO-1 (each rank reads the shards of its experts' blocks)
msrun_n 4 "${model[@]}" --dp 2 --tp 2 --ep 2 --micro-batch 2 --grad-accum 2 --zero 1 \
    --ckpt-dir "$W/ck2" --resume --loss-log "$W/other" >/dev/null 2>"$W/err" ||
    fail "dp4-ep2 resumed in dp 2 x tp 2 x ep 2: $(cat "$W/err")"
grep -q "resumed from step 4" "$W/err" || fail "dp 2 x tp 2 x ep 2 did not resume: $(cat "$W/err")"
resumed "$W/one" "$W/other" 6

# the safetensors export gathers the shards: at step 0 one process's file
# byte for byte; --init-from reads each rank's shards back out of it
timeout 60 "$bin/train_gpt" "${model[@]}" --micro-batch 2 --steps 0 \
    --export-safetensors "$W/seed.st" >/dev/null 2>"$W/err" || fail "export: $(cat "$W/err")"
msrun_n 4 "${model[@]}" "${z3[@]}" --dp 4 --micro-batch 2 --steps 0 \
    --export-safetensors "$W/z.st" >/dev/null 2>"$W/err" || fail "dp4 export: $(cat "$W/err")"
cmp -s "$W/seed.st" "$W/z.st" || fail "dp4's export of the sharded experts differs from one process's"
msrun_n 4 "${model[@]}" "${z3[@]}" --dp 4 --micro-batch 2 --steps 0 --init-from "$W/seed.st" \
    --export-safetensors "$W/z2.st" >/dev/null 2>"$W/err" || fail "dp4 --init-from: $(cat "$W/err")"
cmp -s "$W/seed.st" "$W/z2.st" || fail "dp4 --init-from did not load the experts' shards"

# --auto with ZeRO-3 and pp 2 fixed: the search plans a MoE model's
# ZeRO-3 beside pp (and ep) and the runtime trains the plan it takes
msrun_n 4 "${model[@]}" --steps 2 --auto --zero 3 --pp 2 \
    --cluster "$(dirname "$0")/plan_cluster.txt" >"$W/out" 2>"$W/err" ||
    fail "--auto ZeRO-3 pp 2: $(cat "$W/err")"
grep -q "train_gpt: --auto: plan 1 of [0-9]*: dp 2 tp 1 pp 2 cp 1 ep [12] .*zero 3 " "$W/err" ||
    fail "--auto did not take a ZeRO-3 pp 2 plan: $(cat "$W/err")"
grep -q "step 2 loss" "$W/out" || fail "--auto ZeRO-3 pp 2 did not train: $(cat "$W/err")"

# the planner's count of every rank, the experts' bytes included
shape=(--channels 16 --heads 2 --seq 16)
moe=(--experts 4 --top-k 2 --moe-every 1)
check 2 dp=2,tp=2,pp=1,sp=0,zero=3,recompute=none,micro_batch=2,ep=2 --tp 2 --ep 2 --zero 3 \
    --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
check 2 dp=2,tp=1,pp=2,sp=0,zero=3,recompute=none,micro_batch=2,ep=2,schedule=1f1b --pp 2 \
    --ep 2 --zero 3 --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
# the experts sharded over replica groups of 2
check 2 dp=2,tp=2,pp=1,sp=0,zero=3,recompute=none,micro_batch=2,ep=1 --tp 2 --zero 3 \
    --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
check 2 dp=2,tp=1,pp=2,sp=0,zero=3,recompute=none,micro_batch=2,ep=1,schedule=1f1b --pp 2 \
    --zero 3 --grad-accum 2 --bucket-mb 0.01 --zero-min-bytes 0
check 2 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2,ep=2 --ep 2 --zero 3 \
    --bucket-mb 0.01 --zero-min-bytes 0
check 2 dp=2,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2,ep=1,cp=2 --cp 2 --zero 3 \
    --bucket-mb 0.01 --zero-min-bytes 0
echo "train_gpt_zero3_moe: ok"
