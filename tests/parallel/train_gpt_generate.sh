#!/usr/bin/env bash
# train_gpt --generate end to end (docs/model.md "Generation"): a model
# trained by 2 ranks in tp 2 generates, from its checkpoint loaded into one
# process, exactly what the same weights generate from --init-from; greedy
# and seeded sampling are repeatable; every bad value is refused with exit
# 2 at its bound and one past. So do a MoE model trained with ep 2 (its
# checkpoint's global batch taken without --global-batch) and a bf16 run's
# model, generated with bf16 products: seeded samples repeat and equal the
# export's.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job=gen-$$-$RANDOM
jobs_started=("$job" "$job-1" "$job-2")
model=(--layers 2 --channels 20 --heads 2 --seq 16 --micro-batch 2 --corpus-bytes 4096)

# trained in tp 2 over 2 ranks; the same weights exported to safetensors
timeout -k 5 50 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
    "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --tp 2 --steps 20 \
    --ckpt-dir "$work/ck" --export-safetensors "$work/m.st" >"$work/train.log" 2>&1 ||
    { cat "$work/train.log" >&2; fail "the tp 2 training failed"; }

gen() { timeout -k 5 20 "$bin/train_gpt" "${model[@]}" "$@"; }
gen_ckpt() {
    local j=$1
    shift
    timeout -k 5 30 "${msrun_cmd[@]}" --worker_num=1 --local_worker_num=1 --job_id="$j" --tag_output=0 \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --ckpt-dir "$work/ck" "$@"
}

# from the checkpoint (resharded into one process) = from the export
gen_ckpt "$job-1" --generate 12 --prompt "the " --sample-seed 5 >"$work/ck.out" 2>"$work/ck.err" ||
    { cat "$work/ck.err" >&2; fail "generation from the checkpoint failed"; }
grep -q "resumed from step 20" "$work/ck.err" || fail "did not load step 20's checkpoint"
gen --init-from "$work/m.st" --generate 12 --prompt "the " --sample-seed 5 >"$work/st.out"
cmp "$work/ck.out" "$work/st.out" || fail "checkpoint and export generate differently"

# greedy: repeatable, and top-k 1 is greedy; sampling: a function of the
# seed (the output: bytes, as this is a byte-level model)
g() {
    local out=$1
    shift
    gen --init-from "$work/m.st" --prompt-tokens 116,104,101,32 --generate 12 "$@" \
        >"$work/$out" 2>"$work/err" || fail "$*: $(cat "$work/err")"
}
g greedy --temperature 0
g greedy2 --temperature 0
g top1 --sample-top-k 1 --sample-seed 9
g s5 --temperature 2 --sample-seed 5
g s5b --temperature 2 --sample-seed 5
g s6 --temperature 2 --sample-seed 6
cmp -s "$work/greedy" "$work/greedy2" || fail "greedy is not repeatable"
cmp -s "$work/greedy" "$work/top1" || fail "top-k 1 is not greedy"
cmp -s "$work/s5" "$work/s5b" || fail "seed 5 twice differs"
! cmp -s "$work/s5" "$work/s6" || fail "seeds 5 and 6 agree"
[[ $(wc -c <"$work/s5") -eq 13 ]] || fail "not 12 bytes and a newline"

# bounds: seq 16, V 256; prompt "abcd" is 4 tokens
ok() { gen "$@" >/dev/null 2>"$work/err" || fail "refused: $* ($(cat "$work/err"))"; }
bad() {
    local rc=0
    gen "$@" >/dev/null 2>"$work/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "$* exited $rc, not 2"
    grep -q "train_gpt: " "$work/err" || fail "$*: no reason given"
}
ok --generate 12 --prompt abcd
bad --generate 13 --prompt abcd
ok --generate 0 --prompt abcd
bad --generate -1 --prompt abcd
ok --generate 0 --prompt 0123456789abcdef
bad --generate 0 --prompt 0123456789abcdefg
ok --generate 1 --prompt a --temperature 0
bad --generate 1 --prompt a --temperature -0.001
ok --generate 1 --prompt a --sample-top-k 256
bad --generate 1 --prompt a --sample-top-k 257
ok --generate 1 --prompt-tokens 255
bad --generate 1 --prompt-tokens 256
bad --generate 1 --prompt-tokens 1,,2
bad --generate 1 --prompt ""
bad --generate 1
# one process without the model-parallel path: the option given is named
bad --generate 1 --prompt a --recompute selective
grep -q -- "--recompute" "$work/err" || fail "--recompute not named: $(cat "$work/err")"
# a MoE model generates too (from the seed's weights: it runs)
ok --generate 4 --prompt a --experts 4 --top-k 2 --moe-every 2
# a directory without a checkpoint
mkdir "$work/empty"
rc=0
timeout -k 5 30 "${msrun_cmd[@]}" --worker_num=1 --local_worker_num=1 --job_id="$job-2" \
    "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --ckpt-dir "$work/empty" --generate 1 \
    --prompt a >/dev/null 2>"$work/err" || rc=$?
[[ $rc -ne 0 ]] && grep -q "no checkpoint under" "$work/err" ||
    fail "an empty --ckpt-dir was not refused (rc $rc)"
# a token model: --prompt-tokens in, token ids out; --prompt refused
python3 "$MSRUN_SOURCE/scripts/make_tokens.py" "$work/t.bin" --merges 100 --max-tokens 3000 \
    2>/dev/null || fail "make_tokens.py failed"
tok=(--data "$work/t.bin" --vocab 384)
gen "${tok[@]}" --generate 5 --prompt-tokens 300,383 --temperature 0 >"$work/ids" 2>"$work/err" ||
    fail "token generation: $(cat "$work/err")"
grep -qxE '[0-9]+(,[0-9]+){4}' "$work/ids" || fail "token ids expected: $(cat "$work/ids")"
bad "${tok[@]}" --generate 5 --prompt-tokens 384
bad "${tok[@]}" --generate 5 --prompt abc
bad "${tok[@]}" --generate 5 --prompt-tokens 1 --sample-top-k 385
ok "${tok[@]}" --generate 5 --prompt-tokens 1 --sample-top-k 384

# from_trained NAME JOB TRAIN_ARGS... -- GEN_ARGS...: trains the model with
# TRAIN_ARGS on 2 ranks into $work/NAME.ck (and its export NAME.st), then
# generates with GEN_ARGS from the checkpoint, loaded into one process
# without --global-batch (the checkpoint's is taken), twice with the same
# seed, and from the export: all three the same text
from_trained() {
    local name=$1 j=$2 t=() g=() k
    shift 2
    while [[ $1 != -- ]]; do
        t+=("$1")
        shift
    done
    shift
    g=("$@")
    jobs_started+=("$j" "$j-g1" "$j-g2")
    timeout -k 5 50 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$j" \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" "${t[@]}" --steps 10 \
        --ckpt-dir "$work/$name.ck" --export-safetensors "$work/$name.st" \
        >"$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; fail "$name: training failed"; }
    for k in 1 2; do
        timeout -k 5 30 "${msrun_cmd[@]}" --worker_num=1 --local_worker_num=1 \
            --job_id="$j-g$k" --tag_output=0 "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" \
            "${g[@]}" --ckpt-dir "$work/$name.ck" >"$work/$name.$k.out" 2>"$work/$name.err" ||
            fail "$name: generation from the checkpoint: $(cat "$work/$name.err")"
        grep -q "resumed from step 10 .* (saved by 2 ranks)" "$work/$name.err" ||
            fail "$name: did not load step 10: $(cat "$work/$name.err")"
    done
    gen "${g[@]}" --init-from "$work/$name.st" >"$work/$name.st.out" 2>"$work/$name.err" ||
        fail "$name: generation from the export: $(cat "$work/$name.err")"
    [[ $(wc -c <"$work/$name.1.out") -eq 13 ]] || fail "$name: not 12 bytes and a newline"
    cmp -s "$work/$name.1.out" "$work/$name.2.out" || fail "$name: the same seed twice differs"
    cmp -s "$work/$name.1.out" "$work/$name.st.out" ||
        fail "$name: checkpoint and export generate differently"
}
sampled=(--generate 12 --prompt "the " --temperature 2 --sample-seed 5)
# a MoE model trained with expert parallel (ep 2 over dp 2: global batch 4)
moe=(--experts 4 --top-k 2 --moe-every 1)
from_trained moe "$job-moe" "${moe[@]}" --ep 2 -- "${moe[@]}" "${sampled[@]}"
# a bf16 run's checkpoint (tp 2), generated with bf16 products
from_trained bf16 "$job-bf16" --precision bf16 --tp 2 -- --precision bf16 "${sampled[@]}"
echo "ok: generation from a tp 2, a MoE (ep 2) and a bf16 checkpoint, the sampler and the bounds"
