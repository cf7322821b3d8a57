#!/usr/bin/env bash
# The planner's runtime accounting for train_gpt --precision bf16 and for
# a vocabulary other than 256, against the runtime's own count: for bf16
# layouts of 4 ranks (dp, ZeRO-3, tp with sp, pp with the head on one
# stage only, interleaved with an uneven split, cp alone, with tp and with
# pp on a long sequence,
# Mixture-of-Experts with ep on the data-parallel path and with pp) and
# for a token file of V = 384 (scripts/make_tokens.py; V the file's own,
# then given with --vocab), train_gpt --report runs under msrun and every
# rank's counts, the bf16 operand scratch among them, must equal plan_gpt
# --ranks's (--precision bf16-runtime, --vocab) to the byte. Then
# train_gpt --plan --explain 1 must count the job's precision and V as
# plan_gpt does.
source "$(dirname "$0")/plan_report_lib.sh"

s=schedule
plan_extra=(--precision bf16-runtime)
train_extra=(--precision bf16)
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2
check 4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2 --zero 3 --bucket-mb 0.02 \
    --zero-min-bytes 20000
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=selective,micro_batch=2 --tp 2 --sp --zero 1 \
    --recompute selective
check 6 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --pp 4 --grad-accum 4
# the chunked head: its product's operands are a chunk's rows, less than
# the whole head's (the largest product here without it)
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2 --head-chunk 48
check 8 dp=1,tp=2,pp=2,sp=1,zero=1,recompute=none,micro_batch=2,$s=interleaved,virtual_stages=2 \
    --tp 2 --pp 2 --sp --schedule interleaved --virtual-stages 2 --grad-accum 4 --zero 1 \
    --pp-layers 1,3,3,1
check 4 dp=1,tp=1,pp=1,cp=4,sp=0,zero=2,recompute=selective,micro_batch=1 --cp 4 --zero 2 \
    --grad-accum 2 --recompute selective --bucket-mb 0.01
check 4 dp=1,tp=2,pp=1,cp=2,sp=1,zero=0,recompute=selective,micro_batch=2 --cp 2 --tp 2 --sp \
    --recompute selective
# a long sequence on a narrow model: the ring's q.k of half chunks (S x S,
# S = 512 / cp / 2) outgrows every linear layer's operands on the first
# stage (no head there)
shape=(--channels 8 --heads 2 --seq 512)
check 2 dp=1,tp=1,pp=2,cp=2,sp=0,zero=0,recompute=none,micro_batch=1,$s=1f1b --cp 2 --pp 2 \
    --grad-accum 2
shape=(--channels 32 --heads 4 --seq 16)
moe=(--experts 4 --top-k 2 --moe-every 2)
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=2,ep=2 --ep 2 --zero 1 \
    --bucket-mb 0.01
check 4 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=none,micro_batch=1,ep=2,$s=1f1b --pp 2 --ep 2 \
    --grad-accum 2 --zero 1 --bucket-mb 0.01
# every block MoE and every token to every expert: the experts' products,
# N rows each, are the first stage's largest
moe=(--experts 4 --top-k 4 --moe-every 1)
check 4 dp=2,tp=1,pp=2,sp=0,zero=0,recompute=none,micro_batch=2,ep=2,$s=1f1b --pp 2 --ep 2 \
    --grad-accum 2
moe=()

# a token file whose V is 384 (100 merges: tokens up to 355, rounded up to
# a multiple of 128): the head and embedding are V x C, the logits N x V
python3 "$MSRUN_SOURCE/scripts/make_tokens.py" "$work/tokens.bin" --merges 100 \
    --max-tokens 3000 >/dev/null 2>&1 || fail "make_tokens.py failed"
plan_extra=(--vocab 384)
train_extra=(--data "$work/tokens.bin")
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=none,micro_batch=2 --tp 2 --sp --zero 1
plan_extra=(--precision bf16-runtime --vocab 384)
train_extra=(--precision bf16 --data "$work/tokens.bin" --vocab 384)
check 6 dp=1,tp=2,pp=2,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --tp 2 --pp 2 \
    --grad-accum 2

# train_gpt --plan counts the precision and V the job asks for: its
# --explain 1 (the fastest plan, its bytes by kind) is plan_gpt's with the
# same precision and V, on a cluster written by hand
cp "$(dirname "$0")/plan_cluster.txt" "$work/cluster"
explain() { # explain NAME PLAN_GPT_ARGS... -- TRAIN_GPT_ARGS...
    local name=$1 p=() job=plan-$$-$RANDOM
    shift
    while [[ $1 != -- ]]; do
        p+=("$1")
        shift
    done
    shift
    local model=(--layers 4 --channels 32 --heads 4 --seq 16 --global-batch 8)
    "$bin/plan_gpt" "${model[@]}" --world 4 --cluster "$work/cluster" --explain 1 "${p[@]}" \
        >"$work/$name.plan" 2>&1 || fail "plan_gpt $name: $(cat "$work/$name.plan")"
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --plan --cluster "$work/cluster" \
        --explain 1 "$@" >"$work/$name.out" 2>"$work/$name.err" ||
        fail "train_gpt --plan $name: $(cat "$work/$name.err")"
    local plan_said
    plan_said() { sed 's/^\[node [0-9]* rank [0-9]*\] //' "$1" | sed -n '/^plan 1:/,$p'; }
    [[ -n "$(plan_said "$work/$name.out")" ]] || fail "--plan $name: $(cat "$work/$name.out")"
    diff <(plan_said "$work/$name.plan") <(plan_said "$work/$name.out") >"$work/$name.diff" ||
        fail "train_gpt --plan $name differs from plan_gpt: $(cat "$work/$name.diff")"
    echo "$name: train_gpt --plan --explain 1 equals plan_gpt's"
}
explain bf16 --precision bf16-runtime -- --precision bf16
grep -q "bf16 operand scratch" "$work/bf16.out" || fail "--plan bf16: no bf16 operand scratch"
explain v384 --vocab 384 -- --data "$work/tokens.bin"
echo "ok: $checked layouts, every rank's count equals the plan; --plan's too"
