#!/usr/bin/env bash
# train_gpt --export-safetensors and --init-from (docs/checkpoint.md
# "safetensors names"): an export loaded back and exported again is the same
# file byte for byte, in one process and between one process and a tp 2 x
# pp 2 mesh both ways (and through cp 2 x tp 2 and dp 2 x tp 2 ZeRO-1), the
# next steps' losses equal across layouts; a ZeRO-3 export equals one
# process's, and ZeRO-3 loads its shards; a resume's weights export and win
# over --init-from; BF16 weights load widened; a MoE model's experts go out and
# back through ep, tp and pp; and files that lie (a wrong shape or dtype,
# offsets that overlap, leave a gap or run past the end, a truncated file, a
# header length past the file, a missing or a foreign tensor) are refused
# before training with exit 2 and a message naming the file and the tensor.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --grad-accum 2 --corpus-bytes 8192)
msrun_n() {
    local n=$1 job=st-$$-$RANDOM
    shift
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "$@"
}
one() { timeout 60 "$bin/train_gpt" "${small[@]}" "$@"; }
same() { cmp -s "$1" "$2" || fail "$1 and $2 differ ($3)"; }
W=$work

# check_losses A B: the --loss-log files hold 3 losses each, equal to 1e-5
check_losses() {
    timeout 30 /usr/bin/env python3 - "$1" "$2" <<'EOF'
import sys
def losses(p):
    return [float.fromhex(l.split()[3]) for l in open(p)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("losses:", a, "and", b)
sys.exit(0 if len(a) == 3 and len(b) == 3 and all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)) else 1)
EOF
}

# one process: trained weights out, in, out again
one --steps 3 --export-safetensors "$W/a.st" >/dev/null 2>"$W/err" || fail "export: $(cat "$W/err")"
grep -q "exported 52 tensors to $W/a.st" "$W/err" || fail "no export line: $(cat "$W/err")"
[[ ! -e "$W/a.st.tmp" ]] || fail "the temporary file was left behind"
one --steps 0 --init-from "$W/a.st" --export-safetensors "$W/b.st" >/dev/null 2>"$W/err" ||
    fail "init-from: $(cat "$W/err")"
same "$W/a.st" "$W/b.st" "one process round trip"
# the loaded weights are the ones trained on: not the seed's
one --steps 0 --export-safetensors "$W/seed.st" >/dev/null 2>&1
cmp -s "$W/a.st" "$W/seed.st" && fail "the export after 3 steps equals the initial weights"

# --steps 0 after --resume exports the resumed weights, and the checkpoint
# --resume finds wins over --init-from
msrun_n 1 "${small[@]}" --steps 2 --ckpt-dir "$W/ck" --export-safetensors "$W/r1.st" >/dev/null \
    2>"$W/err" || fail "checkpoint: $(cat "$W/err")"
msrun_n 1 "${small[@]}" --steps 0 --ckpt-dir "$W/ck" --resume --init-from "$W/seed.st" \
    --export-safetensors "$W/r2.st" >/dev/null 2>"$W/err" || fail "resume: $(cat "$W/err")"
same "$W/r1.st" "$W/r2.st" "--resume's weights exported"

# tp 2 x pp 2 (ZeRO-2) loads one process's weights and exports them unchanged ...
msrun_n 4 "${small[@]}" --tp 2 --pp 2 --zero 2 --steps 0 --init-from "$W/a.st" \
    --export-safetensors "$W/c.st" >/dev/null 2>"$W/err" || fail "tp2 x pp2: $(cat "$W/err")"
same "$W/a.st" "$W/c.st" "one process -> tp 2 x pp 2 -> export"
# ... trains, and its export loads into one process bitwise
msrun_n 4 "${small[@]}" --tp 2 --pp 2 --steps 2 --export-safetensors "$W/d.st" >/dev/null \
    2>"$W/err" || fail "tp2 x pp2 training: $(cat "$W/err")"
one --steps 0 --init-from "$W/d.st" --export-safetensors "$W/e.st" >/dev/null 2>"$W/err" ||
    fail "tp2 x pp2 -> one: $(cat "$W/err")"
same "$W/d.st" "$W/e.st" "tp 2 x pp 2 -> one process"
# ... and the same weights train the same in either layout: the losses of
# three steps (1e-5 relative; the first is the loaded weights' own loss)
one --steps 3 --init-from "$W/d.st" --loss-log "$W/l1" >/dev/null 2>&1 || fail "one from d.st"
msrun_n 4 "${small[@]}" --tp 2 --pp 2 --steps 3 --init-from "$W/d.st" --loss-log "$W/l4" \
    >/dev/null 2>"$W/err" || fail "tp2 x pp2 from d.st: $(cat "$W/err")"
check_losses "$W/l1" "$W/l4" || fail "the losses differ between one process and tp 2 x pp 2"

# context parallel and ZeRO-1 over dp: only cp and dp rank 0 write, every
# rank loads
msrun_n 4 "${small[@]}" --cp 2 --tp 2 --steps 0 --init-from "$W/a.st" \
    --export-safetensors "$W/cp.st" >/dev/null 2>"$W/err" || fail "cp2 x tp2: $(cat "$W/err")"
same "$W/a.st" "$W/cp.st" "one process -> cp 2 x tp 2 -> export"
msrun_n 4 "${small[@]}" --dp 2 --tp 2 --zero 1 --steps 0 --init-from "$W/a.st" \
    --export-safetensors "$W/dp.st" >/dev/null 2>"$W/err" || fail "dp2 x tp2: $(cat "$W/err")"
same "$W/a.st" "$W/dp.st" "one process -> dp 2 x tp 2 ZeRO-1 -> export"

# ZeRO-3 gathers its shards for the export: the seed's weights, as one process's
msrun_n 2 "${small[@]}" --zero 3 --steps 0 --export-safetensors "$W/z.st" >/dev/null 2>"$W/err" ||
    fail "zero 3 export: $(cat "$W/err")"
same "$W/seed.st" "$W/z.st" "ZeRO-3 export"
# ZeRO-3 loads each rank's own shards: exported unchanged, and it trains the
# same losses as one process from the same weights
msrun_n 2 "${small[@]}" --zero 3 --global-batch 4 --steps 0 --init-from "$W/a.st" \
    --export-safetensors "$W/z2.st" >/dev/null 2>"$W/err" || fail "zero 3 init: $(cat "$W/err")"
same "$W/a.st" "$W/z2.st" "one process -> dp 2 ZeRO-3 -> export"
msrun_n 2 "${small[@]}" --zero 3 --global-batch 4 --steps 3 --init-from "$W/d.st" \
    --loss-log "$W/l3" >/dev/null 2>"$W/err" || fail "zero 3 from d.st: $(cat "$W/err")"
check_losses "$W/l1" "$W/l3" || fail "the losses differ between one process and ZeRO-3"

# edit FILE OUT PYTHON: rewrites the header (h) and data (d) of FILE
edit() {
    timeout 30 /usr/bin/env python3 - "$1" "$2" "$3" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h, d, raw = json.loads(b[8:8 + n]), b[8 + n:], None
exec(sys.argv[3])
if raw is None:
    t = json.dumps(h).encode()
    raw = struct.pack("<Q", len(t)) + t + d
open(sys.argv[2], "wb").write(raw)
EOF
}
# BF16: every tensor rounded down to bf16 loads widened to exactly those values
edit "$W/a.st" "$W/bf.st" '
import array
f = array.array("f", d)
u = array.array("I", f.tobytes())
pieces = []
for k, v in h.items():
    if k == "__metadata__": continue
    b0, e0 = v["data_offsets"]
    pieces.append((b0, k))
out, at = bytearray(), 0
for b0, k in sorted(pieces):
    v = h[k]
    lo, hi = v["data_offsets"][0] // 4, v["data_offsets"][1] // 4
    out += b"".join(struct.pack("<H", x >> 16) for x in u[lo:hi])
    v["dtype"] = "BF16"
    v["data_offsets"] = [at, len(out)]
    at = len(out)
d = bytes(out)'
one --steps 0 --init-from "$W/bf.st" --export-safetensors "$W/bf32.st" >/dev/null 2>"$W/err" ||
    fail "bf16 init-from: $(cat "$W/err")"
edit "$W/a.st" "$W/trunc16.st" '
import array
u = array.array("I", d)
d = array.array("I", [x & 0xFFFF0000 for x in u]).tobytes()'
one --steps 0 --init-from "$W/trunc16.st" --export-safetensors "$W/t32.st" >/dev/null 2>&1
same "$W/t32.st" "$W/bf32.st" "BF16 widened"
cmp -s "$W/a.st" "$W/bf32.st" && fail "the BF16 weights equal the F32 ones"

# refuse NAME PATTERN FILE [ARGS]: exit 2 before training, the message matching
refuse() {
    local rc=0
    one --steps 1 --init-from "$3" "${@:4}" >"$W/out" 2>"$W/err" || rc=$?
    [[ $rc -eq 2 ]] || fail "$1: exit $rc, want 2: $(cat "$W/err")"
    grep -q -- "$2" "$W/err" || fail "$1: no '$2' in: $(cat "$W/err")"
    grep -q "$3" "$W/err" || fail "$1: the file is not named: $(cat "$W/err")"
    ! grep -q "^step" "$W/out" || fail "$1: it trained"
}
edit "$W/a.st" "$W/x.st" 'h["wpe"]["shape"] = [8, 64]'
refuse "wrong shape" "tensor 'wpe' has shape (8, 64); the model's is (16, 32)" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'h["lnfb"]["dtype"] = "I32"'
refuse "wrong dtype" "tensor 'lnfb' is I32" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'h["lnfb"]["dtype"] = "F64"; h["lnfb"]["shape"] = [16]'
refuse "F64" "tensor 'lnfb' has shape (16)" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'h["lnfb"]["data_offsets"][0] -= 4; h["lnfb"]["shape"] = [33]'
refuse "overlap" "tensor 'lnfb' begins at .* (an overlap)" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'h["lnfb"]["data_offsets"] = [x + 4 for x in h["lnfb"]["data_offsets"]]; d += bytes(4)'
refuse "gap" "tensor 'lnfb' begins at .* (a gap)" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'h["lnfb"]["data_offsets"][1] += 4; h["lnfb"]["shape"] = [33]'
refuse "past the end" "the last is 'lnfb'.*past the end of the file" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'raw = b[:-10]'
refuse "truncated" "past the end of the file" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'raw = struct.pack("<Q", len(b) - 7) + b[8:]'
refuse "header length past the file" "header length .* runs past the end" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'del h["lnfb"]; d = d[:-128]'
refuse "missing tensor" "no tensor 'lnfb'" "$W/x.st"
edit "$W/a.st" "$W/x.st" 'h["h9.ln1w"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(d), len(d) + 4]}; d += bytes(4)'
refuse "foreign tensor" "tensor 'h9.ln1w' is not one of this model's" "$W/x.st"
refuse "no file" "No such file" "$W/none.st"
# the same refusal from every rank of a mesh: exit 2, no hang
rc=0
msrun_n 4 "${small[@]}" --tp 2 --pp 2 --steps 1 --init-from "$W/x.st" >/dev/null 2>"$W/err" || rc=$?
[[ $rc -ne 0 ]] || fail "tp2 x pp2 loaded a foreign tensor"
grep -q "h9.ln1w" "$W/err" || fail "tp2 x pp2: no tensor named: $(cat "$W/err")"
# a Mixture-of-Experts model: its experts come from the rank of each replica
# group that holds them, and load into any ep, tp and pp
moe=(--layers 2 --experts 4 --top-k 2 --moe-every 2)
one "${moe[@]}" --steps 3 --export-safetensors "$W/m1.st" >/dev/null 2>"$W/err" ||
    fail "MoE export: $(cat "$W/err")"
grep -q "exported 41 tensors" "$W/err" || fail "MoE: not 41 tensors: $(cat "$W/err")"
grep -q '"h1.e3.fcprojw":{"dtype":"F32","shape":\[32,128\]' "$W/m1.st" || fail "MoE: no h1.e3.fcprojw"
msrun_n 4 "${small[@]}" "${moe[@]}" --dp 4 --ep 2 --steps 0 --init-from "$W/m1.st" \
    --export-safetensors "$W/m2.st" >/dev/null 2>"$W/err" || fail "MoE ep 2: $(cat "$W/err")"
same "$W/m1.st" "$W/m2.st" "MoE one process -> dp 4 x ep 2 -> export"
msrun_n 4 "${small[@]}" "${moe[@]}" --pp 2 --tp 2 --steps 2 --export-safetensors "$W/m3.st" \
    >/dev/null 2>"$W/err" || fail "MoE pp2 x tp2: $(cat "$W/err")"
one "${moe[@]}" --steps 0 --init-from "$W/m3.st" --export-safetensors "$W/m4.st" >/dev/null \
    2>"$W/err" || fail "MoE pp2 x tp2 -> one: $(cat "$W/err")"
same "$W/m3.st" "$W/m4.st" "MoE pp 2 x tp 2 -> one process"
edit "$W/m1.st" "$W/x.st" 'h["h1.e4.fcb"] = {"dtype": "F32", "shape": [1], "data_offsets": [len(d), len(d) + 4]}; d += bytes(4)'
refuse "an expert too many" "tensor 'h1.e4.fcb' is not one of this model's" "$W/x.st" "${moe[@]}"

# --dump-logits needs the whole model on rank 0: refused before training
rc=0
msrun_n 4 "${small[@]}" "${moe[@]}" --dp 4 --ep 2 --dump-logits "$W/l.bin" >/dev/null 2>"$W/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q "not with --tp, --pp, --cp or --ep > 1" "$W/err" ||
    fail "--dump-logits with --ep 2: exit $rc: $(cat "$W/err")"

echo "train_gpt_safetensors: ok"
