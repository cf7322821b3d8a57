#!/usr/bin/env bash
# train_gpt with tensor, sequence and pipeline parallel: configurations that
# cannot work are refused before training (exit 2, with the reason); a
# 2 x 2 x 2 mesh prints the losses of one process; --trace writes a
# Chrome-trace JSON with every rank's spans; a checkpoint written by a
# pipeline + tensor parallel run with ZeRO-2 resumes in the same layout
# bitwise, and is refused with other settings.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=mpcli
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2)
refuse 1 "not one of gpipe, 1f1b, interleaved" --schedule zigzag
refuse 1 "not one of none, selective, full" --recompute some
refuse 1 "needs tp > 1" "${small[@]}" --sp
refuse 2 "3 heads do not divide among tp 2" "${small[@]}" --heads 3 --channels 30 --tp 2
refuse 3 "vocabulary of 256 does not divide among tp 3" --layers 2 --channels 36 --heads 6 \
    --seq 16 --micro-batch 2 --tp 3 --dp 1 --steps 1
refuse 2 "sequence of 15 does not divide among tp 2" "${small[@]}" --seq 15 --tp 2 --sp
refuse 2 "2 layers are fewer than the 4 pipeline stages" "${small[@]}" --layers 2 --pp 2 \
    --schedule interleaved --virtual-stages 2 --grad-accum 2
refuse 2 "1F1B needs at least as many micro-batches as stages: 1 micro-batches" \
    "${small[@]}" --pp 2 --grad-accum 1
refuse 2 "micro-batches a multiple of the stages: 3 micro-batches" "${small[@]}" --pp 2 \
    --schedule interleaved --virtual-stages 2 --grad-accum 3
refuse 2 "need the interleaved schedule" "${small[@]}" --pp 2 --virtual-stages 2 --grad-accum 2
refuse 1 "--trace $work/no/such/dir/t.json: No such file" "${small[@]}" --trace "$work/no/such/dir/t.json"
timeout 30 "$bin/train_gpt" --help >"$work/help" || fail "--help exited $?"
grep -q -- "--virtual-stages" "$work/help" || fail "--help"

# the 2 x 2 x 2 mesh (sp, selective recompute, ZeRO-1) prints the losses of
# one process on the same global batch (to the 6 printed decimals)
timeout 60 "$bin/train_gpt" "${small[@]}" --steps 4 --grad-accum 8 >"$work/one"
msrun_n 8 "${small[@]}" --steps 4 --grad-accum 4 --dp 2 --pp 2 --tp 2 --sp --recompute selective \
    --zero 1 --trace "$work/trace.json" >"$work/mesh" 2>"$work/err" || fail "2x2x2: $(cat "$work/err")"
same_losses "$work/one" "$work/mesh" 4 ||
    fail "2x2x2 differs from one process: $(paste "$work/one" "$work/mesh")"
grep -q "mesh dp 2 x pp 2 x cp 1 x tp 2 with sequence parallel" "$work/err" || fail "$(cat "$work/err")"
# the trace: valid JSON, forward and backward spans of all 8 ranks, 4
# micro-batches each, and communication spans
python3 - "$work/trace.json" <<'PY' || fail "trace: $(head -c 2000 "$work/trace.json")"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
for r in range(8):
    names = {e["name"] for e in x if e["pid"] == r and e["cat"] == "compute"}
    want = {f"{k}{m}.0" for k in "FB" for m in range(4)}
    assert want <= names, (r, sorted(names))
    assert any(e["pid"] == r and e["cat"] == "comm" for e in x), r
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in x)
PY

# checkpoints in the same layout: pp 2 x tp 2, ZeRO-2, interleaved, full
# recompute; stopped at step 3 and resumed, steps 4..5 are bitwise those of
# the run that never stopped
args=("${small[@]}" --steps 5 --grad-accum 2 --pp 2 --tp 2 --zero 2 --schedule interleaved
    --virtual-stages 2 --recompute full --bucket-mb 0.02)
msrun_n 4 "${args[@]}" --loss-log "$work/whole" >/dev/null 2>"$work/err" ||
    fail "uninterrupted: $(cat "$work/err")"
msrun_n 4 "${args[@]}" --steps 3 --ckpt-dir "$work/ck" --loss-log "$work/first" >/dev/null \
    2>"$work/err" || fail "first part: $(cat "$work/err")"
cp -r "$work/ck" "$work/ck2"
msrun_n 4 "${args[@]}" --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 3" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
# other settings are refused, whatever the layout (another layout of the
# same model resumes: train_gpt_reshard.sh)
refuse 4 "other settings" "${args[@]}" --seed 7 --ckpt-dir "$work/ck2" --resume
# with tp = pp = 1 the runtime (recompute, trace) keeps data parallel's
# checkpoints: dp 2 saved at step 3, resumed by one process with selective
# recompute on the same global batch, prints the losses of the run that
# never stopped
dpargs=("${small[@]}" --steps 5 --global-batch 8)
timeout 60 "$bin/train_gpt" "${dpargs[@]}" >"$work/dpwhole"
msrun_n 2 "${dpargs[@]}" --steps 3 --ckpt-dir "$work/ckdp" >/dev/null 2>"$work/err" ||
    fail "dp 2 part: $(cat "$work/err")"
msrun_n 1 "${dpargs[@]}" --recompute selective --ckpt-dir "$work/ckdp" --resume >"$work/dprest" \
    2>"$work/err" || fail "resume with recompute: $(cat "$work/err")"
grep -q "resumed from step 3 under .* (saved by 2 ranks)" "$work/err" || fail "$(cat "$work/err")"
same_losses <(tail -n 2 "$work/dpwhole") "$work/dprest" 2 ||
    fail "resumed with recompute: $(paste "$work/dpwhole" "$work/dprest")"
echo "train_gpt model parallel: ok"
