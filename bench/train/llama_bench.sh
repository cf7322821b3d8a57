#!/usr/bin/env bash
# Tokens per second of train_gpt's default GPT and of a Llama of about the
# same parameter count (--arch llama, --ffn 328, 4 kv heads: 832,640
# parameters against the GPT's 834,304), each beside the same model in
# plain PyTorch (bench/train/torch_train_bench.py: tests/parallel/
# torch_models.py's GPT and Llama, fp32, the same shapes, batch, sequence,
# AdamW, clipping and number of steps), side by side in one run.
#
# Each round runs the four one after the other (msrun GPT, PyTorch GPT,
# msrun Llama, PyTorch Llama), each pinned with taskset to the same one
# core, with one OpenBLAS/OpenMP/PyTorch thread (torch.set_num_threads(1)).
# A run's figure is the median step time after its first WARMUP steps; the
# table gives the median over the rounds (and the rounds' range), and
# msrun's tokens/s over PyTorch's: the median (and range) of the rounds'
# ratios, each of two runs next to each other, so under the same load. Fails, naming it, when a PyTorch model's
# parameter count differs from train_gpt's or a run prints no step time.
#
# usage: bench/train/llama_bench.sh [--smoke] [BUILD_DIR] [ROUNDS] [STEPS]
#   BUILD_DIR  the build with bin/train_gpt (build)
#   ROUNDS     rounds, >= 1 (5)
#   STEPS      steps of each run, > WARMUP (20)
#   --smoke    1 round of 2 steps, WARMUP 1: the script end to end, quickly
# Environment: CPU (the core every run is pinned to; default: the last CPU
# this shell may use), WARMUP (5), LLAMA_FFN (328), LLAMA_KV_HEADS (4),
# PYTHON (/usr/bin/python3). docs/model.md "Llama" has the results.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
usage() {
    echo "usage: $0 [--smoke] [BUILD_DIR] [ROUNDS] [STEPS]" >&2
    exit 2
}
smoke=0
if [[ ${1:-} == --smoke ]]; then
    smoke=1
    shift
fi
[[ ${1:-} == -* ]] && usage
(($# <= 3)) || usage
build=${1:-build}
rounds=${2:-5}
steps=${3:-20}
warmup=${WARMUP:-5}
((smoke)) && { rounds=1 steps=2 warmup=1; }
ffn=${LLAMA_FFN:-328}
kvh=${LLAMA_KV_HEADS:-4}
py=${PYTHON:-/usr/bin/python3}
for v in rounds steps warmup ffn kvh; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "llama_bench.sh: $v '${!v}' is not a number" >&2; exit 2; }
done
((rounds >= 1)) || { echo "llama_bench.sh: ROUNDS must be at least 1" >&2; exit 2; }
((steps > warmup)) || {
    echo "llama_bench.sh: STEPS ($steps) must exceed WARMUP ($warmup): no step would be timed" >&2
    exit 2
}
bin="$build/bin/train_gpt"
[[ -x "$bin" ]] || { echo "llama_bench.sh: no $bin: build first" >&2; exit 2; }
cpu=${CPU:-$(taskset -pc $$ | sed 's/.*: //; s/.*[,-]//')}
taskset -c "$cpu" true 2>/dev/null || { echo "llama_bench.sh: cannot pin to CPU '$cpu'" >&2; exit 2; }

# the default shape: --layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8
mb=8 seq=64
tokens=$((mb * seq))
llama=(--arch llama --ffn "$ffn" --kv-heads "$kvh")
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
names=(gpt_msrun gpt_torch llama_msrun llama_torch)

# run NAME: one pinned run; appends its median step time (ms) to $work/NAME
# and its parameter count to $work/NAME.params
run() {
    local name=$1 out="$work/$1.out" err="$work/$1.err" ms
    case $name in
    gpt_msrun) taskset -c "$cpu" timeout 600 "$bin" --steps "$steps" --threads 1 >"$out" 2>"$err" ;;
    llama_msrun) taskset -c "$cpu" timeout 600 "$bin" "${llama[@]}" --steps "$steps" --threads 1 \
        >"$out" 2>"$err" ;;
    llama_torch) taskset -c "$cpu" timeout 600 env -u PYTHONUNBUFFERED "$py" \
        "$here/bench/train/torch_train_bench.py" "${llama[@]}" --steps "$steps" >"$out" 2>"$err" ;;
    gpt_torch) taskset -c "$cpu" timeout 600 env -u PYTHONUNBUFFERED "$py" \
        "$here/bench/train/torch_train_bench.py" --arch gpt --steps "$steps" >"$out" 2>"$err" ;;
    esac || { echo "llama_bench.sh: $name failed: $(tail -3 "$err")" >&2; return 1; }
    sed -n 's/^\(train_gpt\|torch\): model of \([0-9]*\) parameters.*/\2/p' "$err" >"$work/$name.params"
    if [[ $name == *_torch ]]; then # its msrun twin ran before it
        local a b
        a=$(cat "$work/${name%_torch}_msrun.params") b=$(cat "$work/$name.params")
        [[ -n $a && $a == "$b" ]] || {
            echo "llama_bench.sh: the PyTorch ${name%_torch} has ${b:-no} parameters," \
                "train_gpt's ${a:-none}" >&2
            return 1
        }
    fi
    # step N loss L tok/s R (train_gpt) or step N loss L ms M (PyTorch)
    ms=$(awk -v w="$warmup" -v t="$tokens" '$1 == "step" && $2 > w {
            print ($5 == "tok/s" ? 1000 * t / $6 : $6) }' "$out" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.3f", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }')
    [[ -n $ms ]] || { echo "llama_bench.sh: $name printed no step after the warm-up" >&2; return 1; }
    echo "$ms" >>"$work/$name"
}

load0=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date -u '+%F %H:%M')
for ((r = 1; r <= rounds; r++)); do
    for name in "${names[@]}"; do
        run "$name"
    done
done

# median FILE [DIGITS]: the median of a file's numbers; range: min-max
median() {
    sort -g "$1" | awk -v d="${2:-1}" '{ v[NR] = $1 }
        END { printf "%.*f", d, (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2 }'
}
range() {
    sort -g "$1" | awk -v d="${2:-1}" 'NR == 1 { lo = $1 } { hi = $1 }
        END { printf "%.*f-%.*f", d, lo, d, hi }'
}
torch_v=$(sed -n 's/^torch: .*, torch \([^,]*\),.*/\1/p' "$work/gpt_torch.err")
echo "$start-$(date -u '+%H:%M') UTC; load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg)" \
    "at the end; CPU $cpu; torch $torch_v; rounds $rounds, steps $steps (the first $warmup of each" \
    "left out)"
echo
echo "| model | parameters | implementation | ms/step (rounds' range) | tokens/s | msrun / PyTorch (range) |"
echo "|---|---:|---|---:|---:|---:|"
for arch in gpt llama; do
    # each round's PyTorch time over msrun's (runs next to each other, so
    # under the same load), the median and range of the rounds
    paste "$work/${arch}_msrun" "$work/${arch}_torch" | awk '{ print $2 / $1 }' >"$work/$arch.ratio"
    ratio="$(median "$work/$arch.ratio" 2)x ($(range "$work/$arch.ratio" 2))"
    label="GPT, default shape" impl="train_gpt"
    if [[ $arch == llama ]]; then
        label="Llama, F = $ffn, KVH = $kvh" impl="train_gpt --arch llama"
    fi
    params=$(sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' "$work/${arch}_msrun.params")
    for f in "$work/${arch}_msrun" "$work/${arch}_torch"; do
        ms=$(median "$f")
        tok=$(awk -v t="$tokens" -v ms="$ms" 'BEGIN { printf "%.0f", 1000 * t / ms }')
        echo "| $label | $params | $impl | $ms ($(range "$f")) | $tok | $ratio |"
        impl="PyTorch ${torch_v%%a*}" ratio=""
    done
done
