#!/usr/bin/env bash
# train_gpt --arch llama with fewer kv heads than tp ranks (docs/model.md
# "Llama"): each rank holds the kv head its query heads use, replicated on
# tp / kv-heads ranks, and the replicas' gradients are summed over them.
# tp 2 with 1 kv head, tp 4 with 1 and 2 kv heads (with sp, and full
# recompute), cp 2 x tp 2 + sp, tp 2 x pp 2 and tp 2 x dp 2 ZeRO-2 with 1
# kv head print the losses and gradient norms of one process over 10 steps
# (1e-5 relative); a
# checkpoint of tp 4 / 1 kv head resumes in one process and back, and
# msrun ckpt export of it is one process's export byte for byte; tp 4 x
# pp 1 reads and exports one process's safetensors file unchanged. Kv
# heads that neither divide tp nor are divided by it (3 and 6 of 12 heads
# on tp 4) are refused by name; 2 of them train.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_prefix=llamakv
job_test_setup
W=$work
# G = 8 sequences a step in every layout
base=(--arch llama --layers 4 --channels 32 --heads 4 --ffn 40 --seq 16 --global-batch 8
    --steps 10 --lr 3e-3 --rope-theta 500)

# kv heads against tp 4, of 12 heads: 3 and 6 refused, 2 trains (4, split,
# as train_gpt_llama_mp.sh's kv heads = tp)
small=(--arch llama --layers 2 --channels 48 --heads 12 --ffn 16 --seq 8 --micro-batch 2
    --steps 1 --tp 4)
for kv in 3 6; do
    refuse 4 "llama: $kv kv heads neither divide among tp 4 ranks nor divide tp" "${small[@]}" \
        --kv-heads $kv
done
for kv in 2; do
    msrun_n 4 "${small[@]}" --kv-heads $kv >"$W/out" 2>"$W/err" ||
        fail "--kv-heads $kv on tp 4: $(cat "$W/err")"
done

for kv in 1 2; do
    timeout 60 "$bin/train_gpt" "${base[@]}" --kv-heads $kv --micro-batch 4 \
        --loss-log "$W/one$kv" >/dev/null 2>"$W/err" || fail "one process: $(cat "$W/err")"
done
# layout NAME KV N ARGS...: N processes train the model of KV kv heads
layout() {
    local name=$1 kv=$2 n=$3
    shift 3
    msrun_n "$n" "${base[@]}" --kv-heads "$kv" "$@" --loss-log "$W/$name" >/dev/null \
        2>"$W/err" || fail "$name: $(cat "$W/err")"
    close "$W/$name" "$W/one$kv" 10
}
layout tp2-kv1 1 2 --tp 2 --micro-batch 4
layout tp4-kv1-sp 1 4 --tp 4 --sp --micro-batch 4
layout tp4-kv2-sp-full 2 4 --tp 4 --sp --micro-batch 4 --recompute full
layout cp2-tp2-sp-kv1 1 4 --cp 2 --tp 2 --sp --micro-batch 4
layout tp2-pp2-kv1 1 4 --tp 2 --pp 2 --micro-batch 2 --schedule 1f1b
# ZeRO-2 (the runtime's model parallel takes ZeRO 0-2): a block's gradient,
# summed over the kv head's ranks, is reduce-scattered from a temporary
layout tp2-dp2-zero2-kv1 1 4 --tp 2 --dp 2 --micro-batch 2 --zero 2 --bucket-mb 0.02 \
    --zero-min-bytes 2000

# resharding: tp 4 / 1 kv head saves at step 4 (each replicated kv row by
# the first of its ranks), one process resumes it to the same steps 5..8
# and saves, and tp 4 resumes that to 9..10 (and its own to 5..6). msrun ckpt export of tp 4's
# checkpoint is the run's own export and a one-process resume's, byte for
# byte.
model=("${base[@]}" --kv-heads 1)
msrun_n 4 "${model[@]}" --tp 4 --micro-batch 4 --steps 4 --ckpt-every 4 --ckpt-dir "$W/ck" \
    --export-safetensors "$W/train4.st" >/dev/null 2>"$W/err" || fail "tp 4 saving: $(cat "$W/err")"
"$bin/msrun" ckpt export "$W/ck" --safetensors "$W/e4.st" >/dev/null 2>"$W/err" ||
    fail "export of tp 4: $(cat "$W/err")"
cmp -s "$W/train4.st" "$W/e4.st" || fail "tp 4: msrun ckpt export differs from the run's"
# each element once, but for the norms every tp rank saves: the 4 payloads'
# pieces (a payload: libmsrun's 48-byte header, then the shard's header of
# hl bytes, 12 bytes an element, then 12 bytes of chunk CRCs for each
# piece's 1024 elements or part) hold the model's 42272 elements
# (2VC + C + L (2C^2 + 2 KVC C + 2C + 3FC)) and 3 more copies of the
# (2L + 1) C norm elements; each kv row saved by its 4 ranks would add
# 3 x 2 x L x HS x C = 6144
python3 - "$W/ck" <<'PY' || fail "tp 4's checkpoint holds other elements (above)"
import glob, struct, sys
n = 0
files = glob.glob(sys.argv[1] + "/step-4/rank-*.bin")
assert len(files) == 4, files
for f in files:
    b = open(f, "rb").read()[48:]
    assert b[:8] == b"MSRTRN04", (f, b[:8])
    hl, = struct.unpack_from("<I", b, 12)
    np, = struct.unpack_from("<I", b, 68)
    counts = [struct.unpack_from("<I", b, hl - 16 * (np - k) + 8)[0] for k in range(np)]
    assert len(b) == hl + sum(12 * c + 12 * ((c + 1023) // 1024) for c in counts), (f, len(b))
    n += sum(counts)
assert n == 42272 + 3 * 9 * 32, n
PY
cp -r "$W/ck" "$W/ck1"
msrun_n 1 "${model[@]}" --micro-batch 4 --steps 0 --resume --ckpt-dir "$W/ck1" \
    --export-safetensors "$W/r4.st" >/dev/null 2>"$W/err" || fail "one process: $(cat "$W/err")"
cmp -s "$W/r4.st" "$W/e4.st" || fail "tp 4: msrun ckpt export differs from one process's"
# tp 4 resumes its own checkpoint: ranks 1..3 read their kv rows from rank
# 0's payload, not only their own
msrun_n 4 "${model[@]}" --tp 4 --micro-batch 4 --steps 6 --ckpt-dir "$W/ck1" --resume \
    --loss-log "$W/res44" >/dev/null 2>"$W/err" || fail "tp 4 own resume: $(cat "$W/err")"
msrun_n 1 "${model[@]}" --micro-batch 4 --steps 8 --ckpt-every 4 --ckpt-dir "$W/ck" --resume \
    --loss-log "$W/res" >/dev/null 2>"$W/err" || fail "one process resume: $(cat "$W/err")"
grep -q "resumed from step 4" "$W/err" || fail "one process did not resume: $(cat "$W/err")"
msrun_n 4 "${model[@]}" --tp 4 --micro-batch 4 --ckpt-dir "$W/ck" --resume \
    --loss-log "$W/res4" >/dev/null 2>"$W/err" || fail "tp 4 resume: $(cat "$W/err")"
grep -q "resumed from step 8" "$W/err" || fail "tp 4 did not resume: $(cat "$W/err")"
resumed "$W/one1" "$W/res" 4 "$W/res4" 2 "$W/res44" 2

# tp 4 reads one process's safetensors file and exports it unchanged
msrun_n 1 "${model[@]}" --micro-batch 4 --steps 2 --export-safetensors "$W/one.st" \
    >/dev/null 2>"$W/err" || fail "one process export: $(cat "$W/err")"
msrun_n 4 "${model[@]}" --tp 4 --micro-batch 4 --steps 0 --init-from "$W/one.st" \
    --export-safetensors "$W/tp4.st" >/dev/null 2>"$W/err" || fail "tp 4 export: $(cat "$W/err")"
cmp -s "$W/one.st" "$W/tp4.st" || fail "tp 4 changed the weights it read"
echo "train_gpt_llama_kvrep: ok"
