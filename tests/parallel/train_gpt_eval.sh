#!/usr/bin/env bash
# The validation loss is computed on the trainer's own model
# (parallel/eval.c, dp_eval.c, mp_eval.c: its segments got through the
# hooks as a step's forward gets them, a model-parallel job's on its
# parts, a MoE model's one sequence a pass in every layout), not on a
# whole copy gathered from the ranks' payloads: at step 0 it is one
# process's (bitwise under data and pipeline parallel, within the split
# sums' rounding under tp, cp and the chunked head), at ZeRO 0-3, with
# the offloads, for a GPT, a Llama and their MoE models; the steps after
# it are bitwise those of a run without it, and its reads are all read
# ahead; a job's peak memory does not grow with it (the gathered copy
# with its moments tripled it).
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
job_tokens
mkdir "$work/off"
train_args=(--layers 2 --channels 32 --heads 4 --seq 16 --global-batch 12 --lr 3e-3
    --data "$work/train.bin" --epochs --threads 1)
job_prefix=eval
val=(--val-data "$work/val.bin")
# val_of LOG: the val lines of a loss log
val_of() { grep '^val ' "$1" || true; }

# step 0: every layout's validation loss; in place on the whole model
# (one process, dp 2 at each ZeRO stage, the parameters on disk) and on
# the pipeline's parts (the activations' offload too), bitwise one
# process's; tensor and context parallel and the chunked head split the
# sums (within 1e-6)
# same0 ARCH LAYOUT REF TOL: the layout's step-0 loss in $got, within TOL
# (relative, 0: bitwise) of REF
same0() {
    local l
    read -r -a l <<<"$2"
    rm -f "$work/s0.log"
    msrun_n "${l[0]}" --micro-batch 2 "${l[@]:1}" --arch "$1" --steps 0 "${val[@]}" \
        --loss-log "$work/s0.log" >/dev/null 2>"$work/s0.err" ||
        fail "$1 $2 at step 0: $(tail -3 "$work/s0.err")"
    got=$(val_of "$work/s0.log")
    [[ $got == "val step 0 loss "* ]] || fail "$1 $2: no val line: $got"
    [[ -z $3 ]] && return
    python3 - "${got##* }" "${3##* }" "$4" <<'PY' || fail "$1 $2: '$got', one process '$3'"
import sys
a, b, tol = float.fromhex(sys.argv[1]), float.fromhex(sys.argv[2]), float(sys.argv[3])
assert abs(a - b) <= tol * abs(b), (a, b)
PY
}
for arch in gpt llama; do
    same0 "$arch" 1 "" 0
    ref=$got
    for layout in "2 --zero 0" "2 --zero 1" "2 --zero 2" "2 --zero 3 --zero-min-bytes 0" \
        "3 --zero 3 --zero-min-bytes 0" "2 --zero 3 --offload params=disk:$work/off" \
        "2 --zero 3 --zero-min-bytes 0 --offload params=disk:$work/off" \
        "2 --offload params=disk:$work/off" "2 --pp 2" "2 --pp 2 --recompute full" \
        "4 --pp 2 --dp 2 --zero 3 --zero-min-bytes 0 --offload params=disk:$work/off" \
        "2 --pp 2 --schedule gpipe" "2 --recompute full --offload activations=disk:$work/off" \
        "2 --pp 2 --recompute full --offload activations=disk:$work/off"; do
        same0 "$arch" "$layout" "$ref" 0
    done
    for layout in "2 --tp 2" "2 --tp 2 --sp --tp-overlap" "2 --cp 2" "4 --tp 2 --pp 2" \
        "2 --pp 2 --head-chunk 100" \
        "4 --tp 2 --dp 2 --zero 3 --zero-min-bytes 0 --head-chunk 64"; do
        same0 "$arch" "$layout" "$ref" 1e-6
    done
done

# a MoE model validates one sequence a forward pass: in place under data
# parallel (expert parallel, ZeRO-3 over the replicas, the experts on
# disk) and under pipeline parallel with micro-batches of one sequence,
# on the gathered copy under pipeline parallel with more; alike but for
# the order the ranks' sums of 48 sequences' losses are added in (1e-12)
moe=(--experts 4 --top-k 2 --moe-every 1)
same0 gpt "1 ${moe[*]}" "" 0
ref=$got
for layout in "2 --zero 2" "2 --ep 2" "4 --ep 2 --zero 3 --zero-min-bytes 0 --micro-batch 3" \
    "2 --offload params=disk:$work/off" "2 --pp 2" "4 --pp 2 --ep 2 --micro-batch 3" \
    "2 --pp 2 --micro-batch 1" "4 --pp 2 --ep 2 --micro-batch 1 --zero 3 --zero-min-bytes 0" \
    "2 --pp 2 --recompute full --offload activations=disk:$work/off"; do
    same0 gpt "$layout ${moe[*]}" "$ref" 1e-12
done
for layout in "2 --cp 2" "2 --cp 2 --micro-batch 1" "4 --tp 2 --pp 2" \
    "4 --pp 2 --cp 2 --micro-batch 3" "2 --pp 2 --head-chunk 100 --micro-batch 3"; do
    same0 gpt "$layout ${moe[*]}" "$ref" 1e-6
done
# a dense block beside the MoE one: tensor parallel's overlap (two
# copies of half the micro-batch's sequences) is off for the passes
moe2=(--experts 4 --top-k 2 --moe-every 2)
same0 gpt "1 ${moe2[*]}" "" 0
same0 gpt "2 --tp 2 --sp --tp-overlap ${moe2[*]}" "$got" 1e-6
# a Llama's experts (Mixtral's gates, SwiGLU)
same0 llama "1 ${moe[*]}" "" 0
ref=$got
same0 llama "2 --pp 2 ${moe[*]}" "$ref" 1e-12
same0 llama "2 --tp 2 ${moe[*]}" "$ref" 1e-6

# the steps after an in-place validation are those of a run without it,
# bitwise, and every block read is read ahead (the passes leave the hooks
# as a step's forward expects them)
for layout in "2 --zero 2" "2 --zero 3 --zero-min-bytes 0" "2 --tp 2 --sp" \
    "4 --pp 2 --tp 2 --zero 3 --zero-min-bytes 0 --offload params=disk:$work/off" \
    "2 --pp 2 --layers 4 --schedule interleaved --virtual-stages 2 --recompute full --head-chunk 100" \
    "2 --cp 2 --recompute selective" \
    "2 --pp 2 --recompute full --offload activations=disk:$work/off,params=disk:$work/off" \
    "2 --ep 2 --zero 2 ${moe[*]}" "1 --layers 3 --offload params=disk:$work/off ${moe[*]}" \
    "4 --pp 2 --ep 2 --micro-batch 1 ${moe[*]}" "2 --pp 2 ${moe[*]}" \
    "2 --tp 2 --sp --tp-overlap ${moe2[*]}" "2 --cp 2 --offload params=disk:$work/off ${moe[*]}" \
    "2 --pp 2 --layers 12 --schedule interleaved --virtual-stages 2 --offload params=disk:$work/off ${moe2[*]}" \
    "2 --zero 2 --offload params=disk:$work/off,optimizer=disk:$work/off,grads=disk:$work/off ${moe[*]}" \
    "2 --zero 3 --zero-min-bytes 20000 --offload params=disk:$work/off" \
    "2 --zero 3 --zero-min-bytes 0 --offload params=disk:$work/off,optimizer=disk:$work/off" \
    "2 --arch llama --offload params=disk:$work/off" "1 --zero 3 --layers 1 --offload params=disk:$work/off"; do
    read -r -a l <<<"$layout"
    rm -f "$work/a.log" "$work/b.log"
    msrun_n "${l[0]}" --micro-batch 2 "${l[@]:1}" --steps 4 --report --loss-log "$work/a.log" \
        >/dev/null 2>"$work/a.err" || fail "$layout without validation: $(tail -3 "$work/a.err")"
    msrun_n "${l[0]}" --micro-batch 2 "${l[@]:1}" --steps 4 "${val[@]}" --val-every 1 --report \
        --loss-log "$work/b.log" >/dev/null 2>"$work/b.err" ||
        fail "$layout with validation: $(tail -3 "$work/b.err")"
    [[ $(val_of "$work/b.log" | wc -l) -eq 4 ]] || fail "$layout: val lines: $(cat "$work/b.log")"
    # a MoE model's routing counts are the steps' alone
    cmp -s <(grep -o 'moe step .*' "$work/a.err") <(grep -o 'moe step .*' "$work/b.err") ||
        fail "$layout: validating changed the routing counts"
    cmp -s "$work/a.log" <(grep '^step' "$work/b.log") ||
        fail "$layout: validating changed the steps: $(diff "$work/a.log" "$work/b.log")"
    # ZeRO-3 sharding every segment: the validation's gathers are one per
    # visit of its forwards (the embeddings, 2 blocks, the final norm, the
    # head), 12 forwards a rank each of the 4 times; the steps' are as
    # many as without it (the visit table's: the head's segment kept from
    # the forward's end to the backward's start)
    if [[ $layout == "2 --zero 3 --zero-min-bytes 0"* ]]; then
        ga=$(sed -n 's/.*rank 0 zero 3: .*; gathers \([0-9]*\)$/\1/p' "$work/a.err")
        gb=$(sed -n 's/.*rank 0 zero 3: .*; gathers \([0-9]*\)$/\1/p' "$work/b.err")
        [[ -n $ga && -n $gb ]] || fail "$layout: no gathers in the reports: $(cat "$work/b.err")"
        ((gb - ga == 4 * 12 * 5)) || fail "$layout: $gb gathers with validation, $ga without"
    fi
    # --report's validation line: 4 runs, and what the job's counts gained
    # by them (ZeRO-3's gathers, the parameters' and the experts' reads)
    python3 - "$work/a.err" "$work/b.err" <<'PY' || fail "$layout: the validation's counts"
import re, sys
def counts(path):
    c = {}
    for line in open(path):
        m = re.search(r"rank (\d+) (zero \d+|parameter offload|experts' parameter offload"
                      r"|validation): (.*)", line)
        if m:
            c[(int(m.group(1)), m.group(2).split()[0])] = m.group(3)
    return c
a, b = counts(sys.argv[1]), counts(sys.argv[2])
ranks = {r for r, k in b if k == "zero"}
for r in ranks:
    v = re.match(r"4 runs: gathers (\d+), parameter blocks read (\d+), "
                 r"experts' blocks read (\d+) ", b[(r, "validation")]).groups()
    g = lambda c: int(re.search(r"gathers (\d+)$", c[(r, "zero")]).group(1))
    assert g(b) - g(a) == int(v[0]), (r, g(a), g(b), v)
    for k, n in (("parameter", v[1]), ("experts'", v[2])):
        rd = lambda c: int(re.search(r"(\d+) read back", c[(r, k)]).group(1)) if (r, k) in c else 0
        assert rd(b) - rd(a) == int(n), (r, k, rd(a), rd(b), n)
    assert (r, "validation") not in a
PY
    # the validation's frames are carved from the steps' buffers
    frames() { sed -n "s/.*\(rank [0-9]*\) mp: .*\(frames' buffers [0-9]*\).*/\1 \2/p" "$1" | sort; }
    [[ $layout != *--[tpc]p\ * || -n $(frames "$work/b.err") ]] || fail "$layout: no frames' buffers"
    [[ $(frames "$work/a.err") == "$(frames "$work/b.err")" ]] ||
        fail "$layout: '$(frames "$work/b.err")' with validation, '$(frames "$work/a.err")' without"
    # the activations' offload writes and reads only the steps' blocks
    if [[ $layout == *activations=disk* ]]; then
        wa=$(grep -o "rank 0 activation offload: [0-9]* written, [0-9]* read back" "$work/a.err")
        wb=$(grep -o "rank 0 activation offload: [0-9]* written, [0-9]* read back" "$work/b.err")
        [[ -n $wa && $wa == "$wb" ]] || fail "$layout: '$wb' with validation, '$wa' without"
    fi
    # every read is read ahead, the validation's and the steps' (an
    # interleaved pipeline's too, which takes a MoE model's experts out
    # of the order each block's read guesses)
    if [[ $layout == *params=disk* ]]; then
        misses() {
            sed -n 's/.*\(rank [0-9]* .*parameter offload:\) .* read back, \([0-9]*\) not.*/\1 \2/p' \
                "$1" | sort
        }
        [[ -n $(misses "$work/b.err") && $(misses "$work/a.err") == "$(misses "$work/b.err")" ]] ||
            fail "$layout: reads not read ahead: $(misses "$work/b.err"), without: $(misses "$work/a.err")"
        ! grep "parameter offload: " "$work/b.err" | grep -qv "read back, 0 not read ahead" ||
            fail "$layout: reads not read ahead: $(grep 'parameter offload' "$work/b.err")"
    fi
done

# --trace's last step is the step's alone: the same spans with validation
# (which runs after it) as without
for v in no yes; do
    extra=()
    [[ $v == yes ]] && extra=("${val[@]}" --val-every 1)
    msrun_n 2 --pp 2 --micro-batch 2 --steps 3 --trace "$work/trace-$v.json" "${extra[@]}" \
        >/dev/null 2>"$work/t.err" || fail "--trace, validation $v: $(tail -3 "$work/t.err")"
done
python3 - "$work/trace-no.json" "$work/trace-yes.json" <<'PY' || fail "validating changed the trace"
import collections, json, sys
def names(p):
    d = json.load(open(p))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    return collections.Counter(e.get("name", "").split(" ")[0] for e in ev)
a, b = names(sys.argv[1]), names(sys.argv[2])
assert a == b and a["recv"] > 0, (a, b)
PY

# a job of 14.2M parameters (57 MB a copy), ZeRO-3 on dp 2 and tp 2 x pp
# 2, and a MoE model of 9.0M on ep 2 and on pp 2 (micro-batches of one
# sequence): validating adds less than a copy to
# its peak, which varies by about 12 MiB from run to run either way (the
# gathered copy, with its moments and every rank's payload, added about
# 30 bytes a parameter: 2.8 and 4.5 times the jobs' own)
if [[ -n "${MSRUN_SANITIZE:-}" ]]; then
    echo "peak memory not checked: the sanitizer's shadow, not the program, sets it"
    exit 0
fi
peak() { sed -n 's/.*rank 0 .*peak RSS \([0-9]*\) KiB.*/\1/p' "$1" | head -1; }
big=(--layers 2 --channels 768 --heads 8 --seq 16 --global-batch 8 --micro-batch 2 --zero 3
    --zero-min-bytes 0 --steps 2 --report)
for layout in "2" "4 --tp 2 --pp 2" "2 --ep 2 --experts 8 --channels 256" \
    "2 --pp 2 --experts 8 --channels 256 --micro-batch 1" "2 --pp 2 --experts 8 --channels 256"; do
    read -r -a l <<<"$layout"
    msrun_n "${l[0]}" "${big[@]}" "${l[@]:1}" >/dev/null 2>"$work/p0" ||
        fail "$layout without validation: $(tail -3 "$work/p0")"
    msrun_n "${l[0]}" "${big[@]}" "${l[@]:1}" "${val[@]}" --val-every 1 --val-batches 1 >/dev/null \
        2>"$work/p1" || fail "$layout with validation: $(tail -3 "$work/p1")"
    grep -q "rank 0 zero 3: .*(shard [0-9]* of [0-9]* elements, 0 replicated)" "$work/p0" ||
        fail "$layout: not sharded: $(grep 'zero 3' "$work/p0")"
    p0=$(peak "$work/p0")
    p1=$(peak "$work/p1")
    [[ -n $p0 && -n $p1 ]] || fail "$layout: no peak RSS in the reports: $(cat "$work/p1")"
    ((p1 <= p0 + 24576)) ||
        fail "$layout: validating peaked at $p1 KiB, over the $p0 KiB without it + 24 MiB"
    echo "ZeRO-3 on $layout ranks: peak $p1 KiB with validation, $p0 KiB without: ok"
done
