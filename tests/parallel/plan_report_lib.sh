# The check of the planner's runtime accounting against train_gpt --report
# (sourced by plan_report.sh and plan_report_bf16.sh): check LAYERS FIX
# TRAIN_ARGS... runs one layout of 4 ranks under msrun and compares every
# rank's counts with plan_gpt --ranks's to the byte. The caller sets moe
# (the MoE model's options, or none), shape (the model's width, heads and
# sequence), world (the ranks, 4 unless set), plan_extra (plan_gpt's options for
# the precision and vocabulary) and train_extra (train_gpt's for the same).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup

# check LAYERS FIX TRAIN_ARGS...: FIX is plan_gpt's --fix (with
# micro_batch), TRAIN_ARGS the same layout for train_gpt (a --pp-layers
# or --head-chunk among them goes to plan_gpt too).
checked=0 world=4
moe=() plan_extra=() train_extra=() shape=(--channels 32 --heads 4 --seq 16)
check() {
    local layers=$1 fix=$2 dp mb accum bucket=25 zmin=65536 a job=plan-$$-$RANDOM
    shift 2
    local args=("$@") split=() hchunk=()
    dp=$(sed -n 's/.*dp=\([0-9]*\).*/\1/p' <<<"$fix")
    mb=$(sed -n 's/.*micro_batch=\([0-9]*\).*/\1/p' <<<"$fix")
    accum=1
    for ((a = 0; a < ${#args[@]}; a++)); do
        case ${args[a]} in
        --grad-accum) accum=${args[a + 1]} ;;
        --bucket-mb) bucket=${args[a + 1]} ;;
        --zero-min-bytes) zmin=${args[a + 1]} ;;
        --pp-layers) split=(--pp-layers "${args[a + 1]}") ;;
        --head-chunk) hchunk=(--head-chunk "${args[a + 1]}") ;;
        esac
    done
    local model=(--layers "$layers" "${shape[@]}" "${moe[@]}")
    "$bin/plan_gpt" "${model[@]}" "${plan_extra[@]}" --world "$world" --global-batch $((dp * mb * accum)) \
        --bucket-mb "$bucket" --zero-min-bytes "$zmin" --fix "$fix" "${split[@]}" "${hchunk[@]}" --ranks \
        >"$work/plan" 2>"$work/plan.err" || fail "plan_gpt --fix $fix: $(cat "$work/plan.err")"
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num="$world" --local_worker_num="$world" --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --micro-batch "$mb" --dp "$dp" \
        --steps 1 --report "${train_extra[@]}" "${args[@]}" >"$work/out" 2>"$work/err" ||
        fail "train_gpt ${args[*]}: $(tail -5 "$work/err")"
    local r want got mp tpeak bound peaks="" scratch=""
    for ((r = 0; r < world; r++)); do
        want=$(grep "^rank $r " "$work/plan" | sed 's/ experts [0-9]* expert_params.*//')
        got=$(sed -n "s/.*train_gpt: rank $r zero [0-3]: params \([0-9]*\) grads \([0-9]*\) optim \([0-9]*\) transient-peak [0-9]* bytes (shard \([0-9]*\) of [0-9]* elements, \([0-9]*\) replicated);.*; buckets \([0-9]*\); work \([0-9]*\) bytes;.*/rank $r params \1 grads \2 optim \3 shard \4 replicated \5 buckets \6 work \7/p" "$work/err")
        [[ -n "$got" ]] || fail "${args[*]}: no report of rank $r: $(cat "$work/err")"
        # a MoE model's experts: held, their parameters, gradients, moments,
        # and the MoE state's work space (router, dispatch, combine, experts)
        if ((${#moe[@]} > 0)); then
            local ex wex
            ex=$(sed -n "s/.*train_gpt: rank $r experts: \([0-9]*\) of [0-9]* per MoE block held here: params \([0-9]*\) grads \([0-9]*\) optim \([0-9]*\) bytes; work space \([0-9]*\) bytes.*/experts \1 expert_params \2 expert_grads \3 expert_optim \4 moe_work \5/p" "$work/err")
            wex=$(grep "^rank $r " "$work/plan" | sed 's/.* \(experts [0-9]* expert_params [0-9]* expert_grads [0-9]* expert_optim [0-9]* moe_work [0-9]*\).*/\1/')
            [[ -n "$ex" && "$ex" == "$wex" ]] ||
                fail "train_gpt ${args[*]}: rank $r's experts: counted '$ex', planned '$wex'"
        fi
        # the bf16 products' operand scratch (--precision bf16)
        if [[ " ${plan_extra[*]} " == *" bf16-runtime "* ]]; then
            local sc wsc
            sc=$(sed -n "s/.*train_gpt: rank $r precision bf16: bf16 operand scratch \([0-9]*\) bytes.*/\1/p" "$work/err")
            wsc=$(grep "^rank $r " "$work/plan" | sed -n 's/.* bf16_scratch \([0-9]*\).*/\1/p')
            [[ -n "$sc" && "$sc" == "$wsc" ]] ||
                fail "train_gpt ${args[*]}: rank $r's bf16 scratch: counted '$sc', planned '$wsc'"
            scratch="$scratch $sc"
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
    echo "$fix: transient peak / planned, ranks 0-$((world - 1)):$peaks${scratch:+; bf16 scratch:$scratch}"
    checked=$((checked + 1))
}

# one_peak FIX TRAIN_ARGS...: one process alone (no other rank, so its
# temporaries' peak does not depend on timing), 4 layers of the model
# (moe, shape, plan_extra, train_extra) as FIX says (with micro_batch, and
# a --grad-accum among TRAIN_ARGS); its counts and its transient peak must
# be plan_gpt --world 1's to the byte
one_peak() {
    local fix=$1 mb accum=1 a
    shift
    local args=("$@") model=(--layers 4 "${shape[@]}" "${moe[@]}")
    mb=$(sed -n 's/.*micro_batch=\([0-9]*\).*/\1/p' <<<"$fix")
    for ((a = 0; a < ${#args[@]}; a++)); do
        [[ ${args[a]} == --grad-accum ]] && accum=${args[a + 1]}
    done
    "$bin/plan_gpt" "${model[@]}" "${plan_extra[@]}" --world 1 --global-batch $((mb * accum)) \
        --bucket-mb 0.02 --zero-min-bytes 0 --fix "$fix" --ranks >"$work/one.plan" 2>&1 ||
        fail "plan_gpt --world 1 --fix $fix: $(cat "$work/one.plan")"
    timeout -k 5 60 "$bin/train_gpt" "${model[@]}" "${train_extra[@]}" --micro-batch "$mb" \
        --steps 1 --report --bucket-mb 0.02 --zero-min-bytes 0 "${args[@]}" >"$work/one.out" \
        2>"$work/one.err" || fail "train_gpt ${args[*]}, one process: $(tail -5 "$work/one.err")"
    local want got
    want=$(sed -n 's/^\(rank 0 params .* work [0-9]*\) acts_peak .* transient_bound \([0-9]*\).*/\1 peak \2/p' \
        "$work/one.plan")
    got=$(sed -n 's/.*train_gpt: rank 0 zero [0-3]: params \([0-9]*\) grads \([0-9]*\) optim \([0-9]*\) transient-peak \([0-9]*\) bytes (shard \([0-9]*\) of [0-9]* elements, \([0-9]*\) replicated);.*; buckets \([0-9]*\); work \([0-9]*\) bytes;.*/rank 0 params \1 grads \2 optim \3 shard \5 replicated \6 buckets \7 work \8 peak \4/p' \
        "$work/one.err")
    [[ -n "$want" && "$got" == "$want" ]] || fail "one process, $fix: counted
  $got
planned
  $want"
    echo "one process, $fix: ${got##* peak } bytes of temporaries at the peak, as planned"
    checked=$((checked + 1))
}
