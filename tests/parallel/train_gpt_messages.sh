#!/usr/bin/env bash
# train_gpt's words: the model's parameter count (not one rank's) under
# tensor and pipeline parallel, the loss's unit (nats per byte) in the
# header and --help, and a missing --data file said once.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job=msg-$$-$RANDOM
jobs_started=("$job")
small=(--layers 2 --channels 32 --heads 2 --seq 32 --micro-batch 4)

# alone: the header names the model's parameters and the loss's unit
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 1 >"$work/out" 2>"$work/err" ||
    fail "train_gpt alone: $(cat "$work/err")"
grep -q "^train_gpt: model of [0-9]* parameters (layers 2 " "$work/err" ||
    fail "no model parameter count: $(cat "$work/err")"
grep -q "; loss in nats per byte$" "$work/err" || fail "no loss unit: $(cat "$work/err")"
total=$(sed -n 's/^train_gpt: model of \([0-9]*\) parameters.*/\1/p' "$work/err")
# V*C + maxT*C + L*(12C^2 + 13C) + 2C with V 256, C 32, T 32, L 2
want=$((256 * 32 + 32 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32))
[[ "$total" == "$want" ]] || fail "model of $total parameters, want $want"
echo "ok   the header names the model's $total parameters and the loss's unit"

timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q "in nats per byte" "$work/help" || fail "--help does not say the loss's unit"
echo "ok   --help says the loss's unit"

# a missing --data file: one line, the reason said once
rc=0
timeout 30 "$bin/train_gpt" --data "$work/missing" >"$work/out" 2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] || fail "--data missing exited $rc, want 2"
[[ $(wc -l <"$work/err") -eq 1 ]] || fail "want one line: $(cat "$work/err")"
[[ $(grep -o "missing" "$work/err" | wc -l) -eq 1 ]] || fail "the path twice: $(cat "$work/err")"
grep -q "not found:" "$work/err" && fail "the status word repeats the reason: $(cat "$work/err")"
grep -q "^train_gpt: no data: .*cannot open $work/missing: No such file or directory$" \
    "$work/err" || fail "$(cat "$work/err")"
echo "ok   a missing --data file is said once"

# tp 2 x pp 2 over 4 ranks: the model's count as alone, rank 0's labelled
timeout -k 5 90 "${msrun_cmd[@]}" --worker_num=4 --local_worker_num=4 --job_id="$job" \
    "${worker_env[@]}" "$bin/train_gpt" "${small[@]}" --tp 2 --pp 2 --dp 1 --grad-accum 2 --steps 1 \
    >"$work/out" 2>"$work/err" || fail "tp 2 pp 2: $(tail -5 "$work/err")"
grep -q "train_gpt: model of $total parameters (layers 2 " "$work/err" ||
    fail "tp 2 pp 2: not the model's $total parameters: $(grep parameters "$work/err")"
held=$(sed -n "s/.*rank 0 holds \([0-9]*\) of the model's parameters$/\1/p" "$work/err")
[[ -n "$held" && "$held" -lt "$total" ]] ||
    fail "rank 0's share not labelled: $(grep parameters "$work/err")"
echo "ok   tp 2 x pp 2: the model's $total parameters, rank 0 holds $held"
