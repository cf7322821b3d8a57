#!/usr/bin/env bash
# The planner's runtime accounting against the runtime's own count: for
# 27 layouts of 4 ranks (dp, tp with and without sp, pp with each
# schedule, even and uneven splits of the layers, ZeRO 0-3, the recompute
# modes, small buckets and replicated segments, context parallel alone and
# with tp and pp; Mixture-of-Experts with expert parallel, on the data-
# parallel path and with pp, tp and sp), train_gpt
# --report runs
# under msrun, and every rank's
# parameter, gradient and optimizer bytes, dp shard, replicated elements, buckets, work
# space, activation peak and frame sizes must equal plan_gpt --ranks's
# prediction to the byte; the runtime's temporary peak must not exceed the
# planner's replay of it (which lets no reduction finish before it must).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
work=$(mktemp -d)
jobs_started=()
cleanup() {
    local j
    for j in "${jobs_started[@]}"; do kill_job "$j"; done
    rm -rf "$work"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# check LAYERS FIX TRAIN_ARGS...: FIX is plan_gpt's --fix (with
# micro_batch), TRAIN_ARGS the same layout for train_gpt (a --pp-layers
# among them goes to plan_gpt too).
checked=0
check() {
    local layers=$1 fix=$2 dp mb accum bucket=25 zmin=65536 a job=plan-$$-$RANDOM
    shift 2
    local args=("$@") split=()
    dp=$(sed -n 's/.*dp=\([0-9]*\).*/\1/p' <<<"$fix")
    mb=$(sed -n 's/.*micro_batch=\([0-9]*\).*/\1/p' <<<"$fix")
    accum=1
    for ((a = 0; a < ${#args[@]}; a++)); do
        case ${args[a]} in
        --grad-accum) accum=${args[a + 1]} ;;
        --bucket-mb) bucket=${args[a + 1]} ;;
        --zero-min-bytes) zmin=${args[a + 1]} ;;
        --pp-layers) split=(--pp-layers "${args[a + 1]}") ;;
        esac
    done
    local model=(--layers "$layers" --channels 32 --heads 4 --seq 16 "${moe[@]}")
    "$bin/plan_gpt" "${model[@]}" --world 4 --global-batch $((dp * mb * accum)) \
        --bucket-mb "$bucket" --zero-min-bytes "$zmin" --fix "$fix" "${split[@]}" --ranks \
        >"$work/plan" 2>"$work/plan.err" || fail "plan_gpt --fix $fix: $(cat "$work/plan.err")"
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --micro-batch "$mb" --dp "$dp" \
        --steps 1 --report "${args[@]}" >"$work/out" 2>"$work/err" ||
        fail "train_gpt ${args[*]}: $(tail -5 "$work/err")"
    local r want got mp tpeak bound peaks=""
    for r in 0 1 2 3; do
        want=$(grep "^rank $r " "$work/plan" | sed 's/ experts [0-9]* expert_params.*//')
        got=$(sed -n "s/.*train_gpt: rank $r zero [0-3]: params \([0-9]*\) grads \([0-9]*\) optim \([0-9]*\) transient-peak [0-9]* bytes (shard \([0-9]*\) of [0-9]* elements, \([0-9]*\) replicated);.*; buckets \([0-9]*\); work \([0-9]*\) bytes;.*/rank $r params \1 grads \2 optim \3 shard \4 replicated \5 buckets \6 work \7/p" "$work/err")
        [[ -n "$got" ]] || fail "${args[*]}: no report of rank $r: $(cat "$work/err")"
        # a MoE model's experts: held, their parameters, gradients, moments
        if ((${#moe[@]} > 0)); then
            local ex wex
            ex=$(sed -n "s/.*train_gpt: rank $r experts: \([0-9]*\) of [0-9]* per MoE block held here: params \([0-9]*\) grads \([0-9]*\) optim \([0-9]*\) bytes.*/experts \1 expert_params \2 expert_grads \3 expert_optim \4/p" "$work/err")
            wex=$(grep "^rank $r " "$work/plan" | sed 's/.* \(experts [0-9]* expert_params [0-9]* expert_grads [0-9]* expert_optim [0-9]*\).*/\1/')
            [[ -n "$ex" && "$ex" == "$wex" ]] ||
                fail "train_gpt ${args[*]}: rank $r's experts: counted '$ex', planned '$wex'"
        fi
        mp=$(sed -n "s/.*train_gpt: rank $r mp: .*activations peak \([0-9]*\) bytes (a chunk's micro-batch keeps \([0-9]*\), with the head \([0-9]*\)).*/ acts_peak \1 frame \2 frame_head \3/p" "$work/err")
        if [[ -n "$mp" ]]; then
            got="$got$mp"
            want=${want% transient_bound *}
        else
            want=${want% acts_peak *}
        fi
        [[ "$got" == "$want" ]] ||
            fail "train_gpt ${args[*]}: rank $r counted
  $got
planned
  $want"
        tpeak=$(sed -n "s/.*train_gpt: rank $r zero [0-3]: .* transient-peak \([0-9]*\) bytes.*/\1/p" "$work/err")
        bound=$(grep "^rank $r " "$work/plan" | sed 's/.* transient_bound \([0-9]*\).*/\1/')
        ((tpeak <= bound)) ||
            fail "train_gpt ${args[*]}: rank $r transient peak $tpeak over the bound $bound"
        peaks="$peaks $tpeak/$bound"
    done
    echo "$fix: transient peak / planned, ranks 0-3:$peaks"
    checked=$((checked + 1))
}

s=schedule
moe=()
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2
check 4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=2 --zero 3 --bucket-mb 0.02 \
    --zero-min-bytes 20000
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=selective,micro_batch=1 --grad-accum 2 --zero 1 \
    --recompute selective --bucket-mb 0.01
check 4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=none,micro_batch=2 --tp 2 --sp --zero 1
check 4 dp=2,tp=2,pp=1,sp=0,zero=2,recompute=full,micro_batch=2 --tp 2 --zero 2 \
    --recompute full --bucket-mb 0.01
check 4 dp=1,tp=4,pp=1,sp=1,zero=0,recompute=selective,micro_batch=2 --tp 4 --sp \
    --recompute selective
check 6 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --pp 4 --grad-accum 4
check 8 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=full,micro_batch=1,$s=gpipe --pp 4 \
    --schedule gpipe --grad-accum 3 --recompute full
check 8 dp=2,tp=1,pp=2,sp=0,zero=2,recompute=none,micro_batch=2,$s=gpipe --pp 2 \
    --schedule gpipe --grad-accum 2 --zero 2 --bucket-mb 0.02
check 8 dp=1,tp=2,pp=2,sp=1,zero=1,recompute=selective,micro_batch=2,$s=interleaved,virtual_stages=2 \
    --tp 2 --pp 2 --sp --schedule interleaved --virtual-stages 2 --grad-accum 4 --zero 1 \
    --recompute selective
check 8 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=none,micro_batch=1,$s=interleaved,virtual_stages=4 \
    --pp 2 --schedule interleaved --virtual-stages 4 --grad-accum 2 --zero 1 --bucket-mb 0.01 \
    --zero-min-bytes 0
check 8 dp=1,tp=1,pp=4,sp=0,zero=2,recompute=none,micro_batch=1,$s=interleaved,virtual_stages=2 \
    --pp 4 --schedule interleaved --virtual-stages 2 --grad-accum 8 --zero 2
check 4 dp=1,tp=2,pp=2,sp=1,zero=2,recompute=full,micro_batch=2,$s=gpipe --tp 2 --pp 2 --sp \
    --schedule gpipe --grad-accum 2 --zero 2 --recompute full --bucket-mb 0.005 \
    --zero-min-bytes 30000
# uneven splits of the layers (--pp-layers): the end stages lighter or
# heavier, 1F1B, GPipe and interleaved, with tp, sp, recompute and ZeRO
check 8 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=none,micro_batch=2,$s=1f1b --pp 4 --grad-accum 4 \
    --pp-layers 1,3,3,1
check 8 dp=2,tp=1,pp=2,sp=0,zero=2,recompute=selective,micro_batch=1,$s=gpipe --pp 2 \
    --schedule gpipe --grad-accum 3 --zero 2 --recompute selective --bucket-mb 0.02 \
    --pp-layers 6,2
check 8 dp=1,tp=2,pp=2,sp=1,zero=1,recompute=none,micro_batch=2,$s=interleaved,virtual_stages=2 \
    --tp 2 --pp 2 --sp --schedule interleaved --virtual-stages 2 --grad-accum 4 --zero 1 \
    --pp-layers 1,3,3,1
check 10 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=full,micro_batch=1,$s=interleaved,virtual_stages=2 \
    --pp 4 --schedule interleaved --virtual-stages 2 --grad-accum 4 --recompute full \
    --pp-layers 2,1,1,1,1,1,2,1
# context parallel (--cp): the ring's positions, its logsumexp in place of
# the probabilities, its buffers in the work space, dp over dp x cp
check 4 dp=2,tp=1,pp=1,cp=2,sp=0,zero=1,recompute=none,micro_batch=2 --cp 2 --zero 1 \
    --bucket-mb 0.02
check 4 dp=1,tp=1,pp=1,cp=4,sp=0,zero=2,recompute=selective,micro_batch=1 --cp 4 --zero 2 \
    --grad-accum 2 --recompute selective --bucket-mb 0.01
check 4 dp=1,tp=2,pp=1,cp=2,sp=1,zero=0,recompute=selective,micro_batch=2 --cp 2 --tp 2 --sp \
    --recompute selective
check 4 dp=1,tp=1,pp=2,cp=2,sp=0,zero=2,recompute=full,micro_batch=1,$s=1f1b --cp 2 --pp 2 \
    --grad-accum 2 --zero 2 --recompute full --bucket-mb 0.01
# Mixture-of-Experts (train_gpt --experts): the blocks' routers in place of
# their MLPs, the experts E / ep a rank, their moments sharded over the
# ranks holding the same experts under ZeRO; every second block MoE
moe=(--experts 4 --top-k 2 --moe-every 2)
check 4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none,micro_batch=2,ep=1
check 4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none,micro_batch=2,ep=2 --ep 2 --zero 1 \
    --bucket-mb 0.01
check 4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none,micro_batch=1,ep=4 --ep 4 --zero 3 \
    --grad-accum 2 --bucket-mb 0.02 --zero-min-bytes 20000
# ... and in the model-parallel runtime: a stage holds its own MoE blocks'
# experts, tp ranks split them (E / (ep tp) each) and keep the router
check 4 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=none,micro_batch=1,ep=2,$s=1f1b --pp 2 --ep 2 \
    --grad-accum 2 --zero 1 --bucket-mb 0.01
check 4 dp=2,tp=2,pp=1,sp=1,zero=2,recompute=selective,micro_batch=2,ep=2 --tp 2 --sp --ep 2 \
    --zero 2 --recompute selective --bucket-mb 0.01
check 6 dp=1,tp=2,pp=2,sp=0,zero=0,recompute=full,micro_batch=1,$s=gpipe --tp 2 --pp 2 \
    --schedule gpipe --grad-accum 2 --recompute full
echo "ok: $checked layouts, every rank's count equals the plan"
