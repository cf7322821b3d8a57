#!/usr/bin/env bash
# train_gpt's planner front ends: --plan prints the ranked table (10 rows,
# least step time first, every row a layout of the job's ranks), --plan-all
# every plan, --explain N one plan's breakdown; --auto on 4 ranks trains
# with plan 1 of --plan's table and says which, with the cluster from a
# file and measured in memory; bad input (an unreadable or malformed
# --cluster, options that conflict, fixes that leave no layout, a budget
# nothing fits) is one line and exit status 2, alone and under msrun. A
# Mixture-of-Experts model's plans include expert parallel, and --auto
# trains with plan 1's. --auto --offload-dir trains with the offload the
# planner turns to (the moments'; under ZeRO 2 the gradient shard's too).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
export XDG_CACHE_HOME="$work/cache" # the calibration cache: never the user's own
model=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --steps 2)

msrun_n() { # msrun_n N ARGS...
    local n=$1 job=tgplan-$$-$RANDOM
    shift
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "$@"
}

# a cluster of this machine's order, written by hand so the plans are fixed
cp "$(dirname "$0")/plan_cluster.txt" "$work/cluster"

# rows FILE: the table's rows (msrun's prefix dropped), "# dp tp pp cp ep
# sp zero recompute micro accum schedule ... step_ms ..."
rows() { sed 's/^\[node [0-9]* rank [0-9]*\] //' "$1" | grep -E '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[01] '; }

# --plan alone and under msrun: 10 rows numbered 1..10, step time not
# decreasing, each a factorization of the world
for n in 1 4; do
    if ((n == 1)); then
        timeout 30 "$bin/train_gpt" "${model[@]}" --plan --cluster "$work/cluster" \
            >"$work/plan$n" 2>"$work/err" || fail "--plan alone: $(cat "$work/err")"
    else
        msrun_n 4 "${model[@]}" --plan --cluster "$work/cluster" >"$work/plan$n" 2>"$work/err" ||
            fail "--plan under msrun: $(tail -5 "$work/err")"
    fi
    rows "$work/plan$n" >"$work/rows$n"
    [[ $(wc -l <"$work/rows$n") -eq 10 ]] || fail "--plan on $n: not 10 rows: $(cat "$work/plan$n")"
    awk -v n="$n" '{ if ($1 != NR || $2 * $3 * $4 * $5 != n) exit 1 }' "$work/rows$n" ||
        fail "--plan on $n: rows not numbered or not $n ranks: $(cat "$work/rows$n")"
    grep -q "step_ms" "$work/plan$n" || fail "--plan on $n: no header: $(cat "$work/plan$n")"
    grep -q "10 of [0-9]* plans shown (exhaustive search, $n ranks" "$work/plan$n" ||
        fail "--plan on $n: no summary: $(cat "$work/plan$n")"
    col=$(sed 's/^\[node [0-9]* rank [0-9]*\] //' "$work/plan$n" | grep -m1 step_ms |
        awk '{ for (i = 1; i <= NF; i++) if ($i == "step_ms") print i + 1 }')
    awk -v c="$col" '{ print $c }' "$work/rows$n" | sort -c -g ||
        fail "--plan on $n: not least step time first: $(cat "$work/rows$n")"
done
grep -q "rank [1-3]\]" "$work/plan4" && fail "ranks other than 0 printed: $(cat "$work/plan4")"
# the same table as plan_gpt's for the same model, world, batch and
# cluster (--micro-batch given fixes it): every key of the file reaches
# every rank's plan
gb=$(sed -n 's/.*plans shown (exhaustive search, 4 ranks, global batch \([0-9]*\).*/\1/p' \
    "$work/plan4" | head -1)
[[ -n $gb ]] || fail "no global batch in --plan's summary: $(cat "$work/plan4")"
"$bin/plan_gpt" --layers 4 --channels 32 --heads 4 --seq 16 --vocab 256 --global-batch "$gb" \
    --world 4 --cluster "$work/cluster" --fix micro_batch=2 >"$work/plan_gpt" || fail "plan_gpt failed"
rows "$work/plan_gpt" >"$work/rows_pg"
diff "$work/rows4" "$work/rows_pg" >/dev/null ||
    fail "train_gpt --plan and plan_gpt differ: $(diff "$work/rows4" "$work/rows_pg")"
# with --offload: plan_gpt --offload's table, the optimizer's buffers in
# place of its moments, and full recompute only under the activations'
off=(--offload "optimizer=disk:$work,activations=disk:$work" --offload-chunk 8192)
timeout 30 "$bin/train_gpt" "${model[@]}" --plan "${off[@]}" --cluster "$work/cluster" \
    >"$work/plan_off" || fail "--plan --offload"
"$bin/plan_gpt" --layers 4 --channels 32 --heads 4 --seq 16 --vocab 256 --global-batch 2 \
    --world 1 --cluster "$work/cluster" --fix micro_batch=2 --offload optimizer,activations \
    --offload-chunk 8192 >"$work/plan_gpt_off" || fail "plan_gpt --offload failed"
diff <(rows "$work/plan_off") <(rows "$work/plan_gpt_off") >/dev/null ||
    fail "--plan --offload and plan_gpt differ: $(diff "$work/plan_off" "$work/plan_gpt_off")"
rows "$work/plan_off" | awk '$9 != "full" { exit 1 }' ||
    fail "--plan --offload activations: not full recompute: $(cat "$work/plan_off")"
cmp -s <(rows "$work/plan_off") <(rows "$work/plan1") &&
    fail "--plan --offload: the same table as without"

# --plan-all: every plan the summary counts (the micro-batch free: more
# than the table's 10)
timeout 30 "$bin/train_gpt" --layers 4 --channels 32 --heads 4 --seq 16 --global-batch 4 \
    --plan-all --cluster "$work/cluster" >"$work/all" ||
    fail "--plan-all"
total=$(sed -n 's/^\([0-9]*\) of \([0-9]*\) plans shown.*/\1 \2/p' "$work/all")
[[ -n "$total" && ${total% *} == "${total#* }" && ${total% *} -gt 10 ]] ||
    fail "--plan-all: shown/found '$total'"
[[ $(rows "$work/all" | wc -l) -eq ${total% *} ]] || fail "--plan-all: rows != ${total% *}"

# --explain 2: plan 2's breakdown against plan 1
timeout 30 "$bin/train_gpt" "${model[@]}" --explain 2 --cluster "$work/cluster" >"$work/explain" ||
    fail "--explain 2"
grep -q "^plan 2: dp=" "$work/explain" || fail "--explain: $(cat "$work/explain")"
grep -q "against plan 1" "$work/explain" || fail "--explain 2: no comparison"

# --auto on 4 ranks with the file: plan 1 of --plan's table, trained
msrun_n 4 "${model[@]}" --auto --cluster "$work/cluster" >"$work/out" 2>"$work/err" ||
    fail "--auto --cluster: $(tail -5 "$work/err")"
[[ $(grep -c "train_gpt: --auto: plan 1 of" "$work/err") -eq 1 ]] ||
    fail "--auto: not one plan line: $(cat "$work/err")"
grep -q "step 2 loss" "$work/out" || fail "--auto did not train: $(cat "$work/out" "$work/err")"
read -r _ dp tp pp cp _ sp zero rc mb accum sched _ <"$work/rows4"
want="dp $dp tp $tp pp $pp cp $cp$( ((sp)) && echo " sp" || true) zero $zero recompute $rc micro-batch $mb"
want+=" grad-accum $accum schedule $sched"
grep -q "plan 1 of [0-9]*: $want " "$work/err" ||
    fail "--auto took another plan than --plan's first ($want): $(grep -- --auto "$work/err")"
# and the runtime runs that layout
grep -q "batch $((dp * mb * accum)) = micro $mb x accum $accum x dp $dp" "$work/err" ||
    fail "--auto: the run's batch: $(cat "$work/err")"

# the split of layers: a head heavier than a layer (8 channels, 256 bytes
# of vocabulary: the head's 2NCV FLOPs are 1.6 blocks') makes plan 1 of pp
# 4 with 1F1B uneven; --auto takes that split and the runtime runs it
uneven=(--layers 16 --channels 8 --heads 2 --seq 32 --global-batch 8 --steps 2 --schedule 1f1b
    --cluster "$work/cluster")
msrun_n 4 "${uneven[@]}" --pp 4 --plan >"$work/uplan" 2>"$work/err" || fail "--plan uneven: $(cat "$work/err")"
split=$(rows "$work/uplan" | awk 'NR == 1 { print $NF }')
[[ "$split" =~ ^[0-9]+,[0-9]+,[0-9]+,[0-9]+$ ]] || fail "plan 1 not split unevenly: $(cat "$work/uplan")"
msrun_n 4 "${uneven[@]}" --pp 4 --auto >"$work/out" 2>"$work/err" || fail "--auto uneven: $(cat "$work/err")"
grep -q "train_gpt: --auto: plan 1 of .* virtual-stages 1 pp-layers $split; predicted" "$work/err" ||
    fail "--auto did not take the split $split: $(cat "$work/err")"
grep -q "train_gpt: layers per virtual stage $split (uneven split)" "$work/err" ||
    fail "the runtime did not run the split $split: $(cat "$work/err")"
grep -q "step 2 loss" "$work/out" || fail "--auto uneven did not train: $(cat "$work/err")"
# --pp-layers given fixes the split
msrun_n 4 "${uneven[@]}" --pp-layers 5,4,4,3 --plan >"$work/fplan" 2>"$work/err" ||
    fail "--plan --pp-layers: $(cat "$work/err")"
[[ $(rows "$work/fplan" | awk '$NF != "5,4,4,3"' | wc -l) -eq 0 && $(rows "$work/fplan" | wc -l) -gt 0 ]] ||
    fail "--pp-layers 5,4,4,3 not kept: $(cat "$work/fplan")"

# a Mixture-of-Experts model: the plans include expert parallel (ep a
# divisor of dp, ep x tp dividing the experts, no cp), and --auto trains
# plan 1 with its ep
moe=(--layers 2 --channels 16 --heads 2 --seq 16 --experts 4 --top-k 2 --global-batch 8 --steps 2
    --cluster "$work/cluster")
msrun_n 4 "${moe[@]}" --plan >"$work/mplan" 2>"$work/err" || fail "--plan MoE: $(cat "$work/err")"
rows "$work/mplan" >"$work/mrows"
[[ $(wc -l <"$work/mrows") -gt 0 ]] || fail "--plan MoE: no rows: $(cat "$work/mplan")"
awk '{ if ($2 % $6 != 0 || 4 % ($6 * $3) != 0 || $5 != 1 || $2 * $3 * $4 != 4) exit 1 }' \
    "$work/mrows" || fail "--plan MoE: a row breaks the MoE rules: $(cat "$work/mrows")"
awk '$6 > 1 { f = 1 } END { exit !f }' "$work/mrows" ||
    fail "--plan MoE: no plan with expert parallel: $(cat "$work/mplan")"
msrun_n 4 "${moe[@]}" --auto >"$work/out" 2>"$work/err" || fail "--auto MoE: $(cat "$work/err")"
read -r _ dp tp pp _ ep _ zero _ mb accum _ <"$work/mrows"
grep -q "train_gpt: --auto: plan 1 of [0-9]*: dp $dp tp $tp pp $pp cp 1 ep $ep .*zero $zero .*micro-batch $mb grad-accum $accum " \
    "$work/err" || fail "--auto MoE took another plan than --plan's first: $(cat "$work/err")"
grep -q "train_gpt: MoE: 4 experts .* on rank 0; ep $ep" "$work/err" ||
    fail "--auto MoE: the runtime's ep is not $ep: $(cat "$work/err")"
grep -q "step 2 loss" "$work/out" || fail "--auto MoE did not train: $(cat "$work/err")"
msrun_n 4 "${moe[@]}" --plan --ep 2 >"$work/mplan2" 2>"$work/err" ||
    fail "--plan --ep 2: $(cat "$work/err")"
[[ $(rows "$work/mplan2" | awk '$6 != 2' | wc -l) -eq 0 ]] ||
    fail "--ep 2 not kept: $(cat "$work/mplan2")"

# --auto on 4 ranks measuring the cluster in memory, with a fix (the
# plan taken: the simplest within the measured noise, not always plan 1)
msrun_n 4 "${model[@]}" --auto --zero 1 >"$work/out" 2>"$work/err" ||
    fail "--auto measured: $(tail -5 "$work/err")"
grep -q "train_gpt: calibrated 4 ranks in" "$work/err" || fail "no calibration: $(cat "$work/err")"
grep -q "train_gpt: --auto: plan [0-9]* of [0-9]*: dp [0-9]* tp [0-9]* pp [0-9]*.* zero 1 .*(cluster: measured now)" \
    "$work/err" || fail "--auto measured: $(cat "$work/err")"
grep -q "step 2 loss" "$work/out" || fail "--auto measured did not train: $(cat "$work/err")"

# bad input alone: one line, exit 2, nothing on stdout
refuse() { # refuse PATTERN ARGS...
    local pattern=$1 rc=0
    shift
    timeout 30 "$bin/train_gpt" "$@" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "train_gpt $* exited $rc, want 2: $(cat "$work/err")"
    [[ ! -s "$work/out" ]] || fail "train_gpt $* printed: $(cat "$work/out")"
    [[ $(wc -l <"$work/err") -eq 1 ]] || fail "train_gpt $*: not one line: $(cat "$work/err")"
    grep -q -- "^train_gpt: .*$pattern" "$work/err" ||
        fail "train_gpt $*: no '$pattern' in: $(cat "$work/err")"
}
printf 'ranks_per_node = 4\npeak_flops = 1\n' >"$work/badkey"
printf 'ranks_per_node = 4\nmem_gib = 0.0001\n' >"$work/tiny"
refuse "--cluster $work/none: No such file or directory" "${model[@]}" --plan --cluster "$work/none"
refuse "--cluster $work: " "${model[@]}" --auto --cluster "$work"
refuse "--cluster $work/badkey: line 2: unknown key 'peak_flops'" "${model[@]}" --plan \
    --cluster "$work/badkey"
refuse "--auto trains and --plan, --plan-all and --explain print: choose one" --auto --plan
refuse "--cluster is for --plan" --cluster "$work/cluster"
# --auto --offload-dir: a model whose state is about 1.2 times the budget
# trains with the optimizer's moments on disk, a small one without
sed 's/^mem_gib = .*/mem_gib = 0.04/' "$work/cluster" >"$work/c40"
big=(--layers 4 --channels 256 --heads 4 --seq 32 --global-batch 2 --steps 1 --cluster "$work/c40")
refuse "over 0.04 GiB per rank .*; --offload-dir DIR lets --auto offload (none given)" \
    "${big[@]}" --auto
refuse "--offload-dir is for --auto without --offload" "${big[@]}" --offload-dir "$work"
refuse "--offload-dir is for --auto without --offload" "${big[@]}" --auto --offload-dir "$work" \
    --offload "optimizer=disk:$work"
mkdir "$work/off"
timeout 60 "$bin/train_gpt" "${big[@]}" --auto --offload-dir "$work/off" --offload-chunk 65536 \
    --report >"$work/out" 2>"$work/err" || fail "--auto --offload-dir: $(cat "$work/err")"
# trained with the moments on disk: 4 chunks of 64 KiB and their CRCs held
grep -q "^train_gpt: rank 0 zero 0: .* optim $((4 * 65536 + 4 * ((3233280 + 8191) / 8192 + 1))) " \
    "$work/err" || fail "--auto --offload-dir: the moments not offloaded: $(cat "$work/err")"
grep -q "^train_gpt: --auto: offload: optimizer (--offload optimizer=disk:$work/off): no layout fits in 0.04 GiB per rank without it; the plan holds [1-9][0-9]* bytes less" \
    "$work/err" || fail "--auto --offload-dir: no reason: $(cat "$work/err")"
grep -q "^step 1 loss" "$work/out" || fail "--auto --offload-dir: no step: $(cat "$work/out")"
[[ -z "$(ls -A "$work/off")" ]] || fail "--auto --offload-dir left $(ls "$work/off")"
timeout 60 "$bin/train_gpt" "${big[@]}" --layers 1 --channels 32 --auto --offload-dir "$work/off" \
    >"$work/out" 2>"$work/err" || fail "--auto --offload-dir, small: $(cat "$work/err")"
grep -q "^train_gpt: --auto: offload: none: plans fit in 0.04 GiB" "$work/err" ||
    fail "--auto --offload-dir offloads a small model: $(cat "$work/err")"
# under ZeRO 2 on 0.03 GiB nothing fits with the moments, the block inputs
# and the blocks' parameters on disk: --auto adds the gradient shard, trains
# with it (three chunks of 64 KiB: in use, behind, ahead; a CRC and a flag
# per chunk, a moments' chunk of floats held) and says why
sed 's/^mem_gib = .*/mem_gib = 0.03/' "$work/cluster" >"$work/c30"
timeout 60 "$bin/train_gpt" "${big[@]}" --cluster "$work/c30" --zero 2 --auto \
    --offload-dir "$work/off" --offload-chunk 65536 --report >"$work/out" 2>"$work/err" ||
    fail "--auto --offload-dir, ZeRO 2: $(cat "$work/err")"
grep -q "^train_gpt: --auto: offload: optimizer,params,grads (--offload optimizer=disk:$work/off,params=disk:$work/off,grads=disk:$work/off): no layout fits in 0.03 GiB per rank without it" \
    "$work/err" || fail "--auto --offload-dir, ZeRO 2: not the gradients': $(cat "$work/err")"
grep -q "^train_gpt: rank 0 zero 2: .* grads $((3 * 65536 + 5 * ((3233280 + 16383) / 16384 + 1) + 32768)) " \
    "$work/err" || fail "--auto --offload-dir: the gradient shard not offloaded: $(cat "$work/err")"
grep -q "^step 1 loss" "$work/out" || fail "--auto --offload-dir, ZeRO 2: no step: $(cat "$work/out")"
[[ -z "$(ls -A "$work/off")" ]] || fail "--auto --offload-dir left $(ls "$work/off")"
# a MoE model in one process (no replica shares its experts) on 0.025
# GiB: --auto adds the gradients' mode, the experts' parameters and
# gradients go to their files beside the blocks' (each of the 8 MoE blocks
# written at the start and by the update, read for the forward, the
# backward and the update), and it trains; on 0.01 GiB not even that fits
sed 's/^mem_gib = .*/mem_gib = 0.025/' "$work/cluster" >"$work/c25"
moe=(--layers 8 --channels 128 --heads 4 --seq 32 --global-batch 2 --steps 1 --experts 4
    --moe-every 1 --zero 2 --auto --offload-dir "$work/off" --offload-chunk 65536)
timeout 60 "$bin/train_gpt" "${moe[@]}" --cluster "$work/c25" --report >"$work/out" 2>"$work/err" ||
    fail "--auto --offload-dir, MoE: $(cat "$work/err")"
grep -q "^train_gpt: --auto: offload: optimizer,params,grads (--offload optimizer=disk:$work/off,params=disk:$work/off,grads=disk:$work/off): no layout fits in 0.025 GiB per rank without it" \
    "$work/err" || fail "--auto --offload-dir, MoE: not the gradients': $(cat "$work/err")"
for what in parameter gradient; do
    grep -q "^train_gpt: rank 0 experts' $what offload: 16 written, 24 read back, 0 not read ahead" \
        "$work/err" || fail "--auto --offload-dir, MoE: the experts' ${what}s: $(cat "$work/err")"
done
grep -q "^step 1 loss" "$work/out" || fail "--auto --offload-dir, MoE: no step: $(cat "$work/out")"
[[ -z "$(ls -A "$work/off")" ]] || fail "--auto --offload-dir left $(ls "$work/off")"
sed 's/^mem_gib = .*/mem_gib = 0.01/' "$work/cluster" >"$work/c10"
refuse "over 0.01 GiB per rank .*; nor with any of --offload-dir's offloads" "${moe[@]}" \
    --cluster "$work/c10"
refuse "--calibrate measures and exits" --calibrate "$work/c" --auto
refuse "not with --device cuda" --auto --device cuda
refuse "the job's 1 ranks do not divide into dp 2" --auto --dp 2
refuse "dp 2 x tp 1 x pp 1 x cp 1 = 2 ranks, but the job has 1" --plan --dp 2 --tp 1 --pp 1 --cp 1 \
    --cluster "$work/cluster"
refuse "--explain 100000: there are [0-9]* plans" "${model[@]}" --explain 100000 \
    --cluster "$work/cluster"
refuse "no layout of 1 ranks and global batch 7 with the options given: [1-9][0-9]* refused by the runtime's rules (the first .*)" \
    "${model[@]}" --auto --global-batch 7 --micro-batch 2 --cluster "$work/cluster"
refuse "no layout .* over 0.0001 GiB per rank (the first .*over the budget" "${model[@]}" --plan \
    --cluster "$work/tiny"
refuse "--schedule 'zigzag' is not one of" --auto --schedule zigzag
refuse "--pp-layers 3,x: entry 2 'x' is not a layer count" --plan --pp-layers 3,x
refuse "no layout .*--pp-layers has 2 entries, pp 1 x 1 virtual stages are 1" "${model[@]}" \
    --auto --pp-layers 2,2 --cluster "$work/cluster"

# under msrun: the job exits 2; each rank that says why says the same line
# (the first to exit ends the job, so not every rank may get to say it)
msrun_refuse() { # msrun_refuse PATTERN ARGS...
    local pattern=$1 rc=0
    shift
    msrun_n 4 "$@" >"$work/out" 2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "msrun train_gpt $* exited $rc, want 2: $(cat "$work/err")"
    sed -n 's/^\[node [0-9]* rank [0-9]*\] \(train_gpt: \)/\1/p' "$work/err" | sort -u >"$work/lines"
    [[ $(wc -l <"$work/lines") -eq 1 ]] ||
        fail "msrun train_gpt $*: not one line: $(cat "$work/err")"
    grep -q -- "^train_gpt: .*$pattern" "$work/lines" ||
        fail "msrun train_gpt $*: no '$pattern' in: $(cat "$work/err")"
}
msrun_refuse "the job's 4 ranks do not divide into dp 3" "${model[@]}" --auto --dp 3
msrun_refuse "dp 2 x tp 2 x pp 2 = 8 ranks, but the job has 4" "${model[@]}" --auto --dp 2 \
    --tp 2 --pp 2
msrun_refuse "--cluster $work/none: No such file" "${model[@]}" --auto --cluster "$work/none"
echo "train_gpt --plan, --plan-all, --explain and --auto: ok"
