#!/usr/bin/env bash
# train_gpt --arch llama (docs/model.md "Llama"): its options' limits and
# the layouts it does not have yet are refused before training (exit 2,
# with the reason); dp 2 with ZeRO 0, 1, 2 and 3 print the losses and
# gradient norms of one process over 10 steps (1e-5 relative); with
# --precision bf16 one process stays within loss / 128 of fp32 and dp 2 of
# one process; a
# checkpoint saved by dp 2 with ZeRO 1 at step 4 is exported by msrun ckpt
# export as the run's own --export-safetensors (Hugging Face's names),
# which --init-from reads back unchanged (a GPT's file refused), and
# resumes in one process with ZeRO 0 and in dp 2 with ZeRO 3 to the same
# 10 steps; --generate from that checkpoint equals --generate from its
# export; a Llama's checkpoint is refused by a Llama of other kv heads.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_prefix=llama
W=$work
# G = 8 sequences a step in every layout
model=(--arch llama --layers 3 --channels 32 --heads 4 --kv-heads 2 --ffn 40 --seq 16
    --global-batch 8 --steps 10 --lr 3e-3 --rope-theta 500)
small=(--arch llama --layers 2 --channels 32 --heads 4 --seq 8 --micro-batch 2 --steps 1)
refuse 1 "not gpt or llama" --arch mamba
refuse 1 "are a Llama's: give --arch llama" --kv-heads 2
refuse 1 "are a Llama's: give --arch llama" --rope-theta 100
refuse 1 "kv-heads 3 does not divide --heads 4" "${small[@]}" --kv-heads 3
refuse 1 "kv-heads 5 does not divide --heads 4" "${small[@]}" --kv-heads 5
refuse 1 "ffn" "${small[@]}" --ffn 0
refuse 1 "ffn" "${small[@]}" --ffn 65537
refuse 1 "rope theta 1 is not in (1, 1e12]" "${small[@]}" --rope-theta 1
refuse 1 "head width 3 (channels 24 / heads 8) is odd" "${small[@]}" --channels 24 --heads 8
# the bounds themselves train: kv heads 1 and = heads, ffn 1
for extra in "--kv-heads 1" "--kv-heads 4" "--ffn 1"; do
    timeout 30 "$bin/train_gpt" "${small[@]}" $extra >"$W/out" 2>"$W/err" ||
        fail "$extra: $(cat "$W/err")"
    grep -q "^step 1 loss" "$W/out" || fail "$extra: $(cat "$W/out")"
done

timeout 60 "$bin/train_gpt" "${model[@]}" --micro-batch 4 --loss-log "$W/one" >/dev/null \
    2>"$W/err" || fail "one process: $(cat "$W/err")"
grep -q "llama: ffn 40, 2 kv heads, rope theta 500" "$W/err" || fail "$(cat "$W/err")"
for z in 0 1 2 3; do
    msrun_n 2 "${model[@]}" --micro-batch 2 --zero $z --loss-log "$W/dp2z$z" >/dev/null \
        2>"$W/err" || fail "dp 2 zero $z: $(cat "$W/err")"
    close "$W/dp2z$z" "$W/one" 10
done

# bf16 products (docs/model.md "bf16 training": the tolerance loss / 128):
# one process differs from fp32 but stays within it, dp 2 ZeRO 1 within it
# of one process in bf16
timeout 60 "$bin/train_gpt" "${model[@]}" --micro-batch 4 --precision bf16 \
    --loss-log "$W/one-bf16" >/dev/null 2>"$W/err" || fail "bf16: $(cat "$W/err")"
msrun_n 2 "${model[@]}" --micro-batch 2 --zero 1 --precision bf16 --loss-log "$W/dp2-bf16" \
    >/dev/null 2>"$W/err" || fail "dp 2 bf16: $(cat "$W/err")"
python3 - "$W/one-bf16" "$W/one" "$W/dp2-bf16" <<'PY' || fail "bf16 (above)"
import sys
b, f, d = [[float.fromhex(l.split()[3]) for l in open(p) if l.strip()] for p in sys.argv[1:4]]
assert len(b) == len(f) == len(d) == 10, (len(b), len(f), len(d))
assert b != f, "bf16 trains the fp32 numbers"
for i, (x, y, z) in enumerate(zip(b, f, d)):
    assert abs(x - y) <= y / 128, ("bf16 vs fp32", i + 1, x, y)
    assert abs(z - x) <= x / 128, ("dp 2 bf16 vs one process bf16", i + 1, z, x)
PY

# checkpoints: dp 2 ZeRO 1 saves at step 4; one process and dp 2 ZeRO 3 resume
msrun_n 2 "${model[@]}" --micro-batch 2 --zero 1 --steps 4 --ckpt-every 4 --ckpt-dir "$W/ck" \
    --export-safetensors "$W/s4.st" >/dev/null 2>"$W/err" || fail "saving: $(cat "$W/err")"
# msrun ckpt export writes the checkpoint's Llama as the run's own export
timeout -k 5 60 "$bin/msrun" ckpt export "$W/ck" --safetensors "$W/e4.st" >"$W/out" 2>"$W/err" ||
    fail "msrun ckpt export: $(cat "$W/err")"
cmp -s "$W/s4.st" "$W/e4.st" || fail "msrun ckpt export differs from the run's own export"
grep -q "model.layers.2.mlp.down_proj.weight" "$W/e4.st" || fail "no Hugging Face names"
# msrun ckpt inspect reads the Llama's table out of the checkpoint's settings
timeout -k 5 60 "$bin/msrun" ckpt inspect "$W/ck" >"$W/out" 2>"$W/err" ||
    fail "msrun ckpt inspect: $(cat "$W/err")"
grep -q "h2.wk .*(16, 32)" "$W/out" && grep -q "lm_head .*(256, 32)" "$W/out" ||
    fail "msrun ckpt inspect: $(cat "$W/out")"
# --init-from reads it back (dp 2 ZeRO 3 reading its owned pieces): the same file out
msrun_n 2 "${model[@]}" --micro-batch 2 --zero 3 --steps 0 --init-from "$W/e4.st" \
    --export-safetensors "$W/i4.st" >/dev/null 2>"$W/err" || fail "init-from: $(cat "$W/err")"
cmp -s "$W/e4.st" "$W/i4.st" || fail "--init-from then --export-safetensors changed the weights"
# a GPT's file is not a Llama's weights
timeout 60 "$bin/train_gpt" --layers 3 --channels 32 --heads 4 --seq 16 --steps 0 \
    --export-safetensors "$W/gpt.st" >/dev/null 2>"$W/err" || fail "gpt export: $(cat "$W/err")"
refuse 1 "no tensor 'model.embed_tokens.weight'" "${model[@]}" --micro-batch 4 --steps 0 \
    --init-from "$W/gpt.st"
tail -n 6 "$W/one" >"$W/one-tail"
for layout in "1 --micro-batch 4" "2 --micro-batch 2 --zero 3"; do
    spec=($layout)
    cp -r "$W/ck" "$W/ck-r"
    msrun_n "${spec[0]}" "${model[@]}" "${spec[@]:1}" --ckpt-dir "$W/ck-r" --resume \
        --loss-log "$W/res" >/dev/null 2>"$W/err" || fail "resume $layout: $(cat "$W/err")"
    grep -q "resumed from step 4" "$W/err" || fail "$layout did not resume: $(cat "$W/err")"
    close "$W/res" "$W/one-tail" 6
    rm -rf "$W/ck-r" "$W/res"
done
# --generate from the dp 2 ZeRO 1 checkpoint (into one process) = from its
# export; greedy twice the same
gen() {
    local job=llama-$$-$RANDOM
    jobs_started+=("$job")
    timeout -k 5 30 "${msrun_cmd[@]}" --worker_num=1 --local_worker_num=1 --job_id="$job" \
        --tag_output=0 "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --micro-batch 4 "$@"
}
gen --ckpt-dir "$W/ck" --generate 10 --prompt "the " --sample-seed 3 >"$W/g-ck" 2>"$W/err" ||
    fail "generate from the checkpoint: $(cat "$W/err")"
grep -q "resumed from step 4" "$W/err" || fail "did not load step 4: $(cat "$W/err")"
timeout 30 "$bin/train_gpt" "${model[@]}" --init-from "$W/e4.st" --generate 10 --prompt "the " \
    --sample-seed 3 >"$W/g-st" 2>"$W/err" || fail "generate from the export: $(cat "$W/err")"
cmp -s "$W/g-ck" "$W/g-st" || fail "checkpoint and export generate differently"
[[ $(wc -c <"$W/g-st") -eq 11 ]] || fail "not 10 bytes and a newline: $(od -c "$W/g-st")"
for i in 1 2; do
    timeout 30 "$bin/train_gpt" "${model[@]}" --init-from "$W/e4.st" --generate 10 \
        --prompt-tokens 116,104 --temperature 0 >"$W/greedy$i" 2>"$W/err" ||
        fail "greedy: $(cat "$W/err")"
done
cmp -s "$W/greedy1" "$W/greedy2" || fail "greedy differs between runs"
# another Llama (kv heads 4) does not resume it
rc=0
msrun_n 1 "${model[@]}" --micro-batch 4 --kv-heads 4 --ckpt-dir "$W/ck" --resume >"$W/out" \
    2>"$W/err" || rc=$?
[[ $rc -ne 0 ]] || fail "kv heads 4 resumed kv heads 2's checkpoint: $(cat "$W/err")"
grep -q "kv-heads 2" "$W/err" || fail "the refusal does not name the setting: $(cat "$W/err")"
echo "train_gpt_llama: ok"
