#!/usr/bin/env bash
# Model parallel figures of train_gpt under msrun (docs/performance.md):
#   1. the pipeline bubble measured (1 - busy / step, averaged over the
#      ranks; busy = forward and backward work without the time blocked in
#      pipeline receives) against (p-1)/(m+p-1) for GPipe and 1F1B and
#      (p-1)/(v*m+p-1) for interleaved 1F1B with v chunks per rank;
#   2. the peak activation bytes rank 0 keeps, per recompute mode, against
#      the count from the shapes (see docs/model.md), and rank 0's peak RSS;
#   3. tokens per second of each layout of 4 ranks on the same global batch;
#   4. with a third argument, an SVG of a traced 1F1B step on 4 stages there.
#
# usage: bench/train/mp_bench.sh [BUILD_DIR] [STEPS] [SVG]
# Prints markdown tables. Every rank runs with one OpenBLAS thread.
set -euo pipefail
build=${1:-build}
steps=${2:-8}
svg=${3:-}
bin="$build/bin"
[[ -x "$bin/train_gpt" && -x "$bin/msrun" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
err=$(mktemp)
trace=$(mktemp)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -f "$err" "$trace"; }' EXIT

run() { # run NP ARGS... : stdout to /dev/null, stderr to $err
    local n=$1
    shift
    timeout 600 "$bin/msrun" --worker_num="$n" --local_worker_num="$n" "$bin/train_gpt" \
        --threads 1 --steps "$steps" --report "$@" >/dev/null 2>"$err"
}

echo "### Pipeline bubble"
echo
model=(--layers 8 --channels 128 --heads 4 --seq 64 --micro-batch 2)
echo "model: ${model[*]}, tp 1, dp 1"
echo
printf '| %2s | %-11s | %2s | %2s | %8s | %8s | %10s |\n' p schedule v m measured formula \
    "acts rank 0"
echo '|----|-------------|----|----|----------|----------|------------|'
for cfg in "2 gpipe 1 4" "2 1f1b 1 4" "2 interleaved 2 4" "2 gpipe 1 8" "2 1f1b 1 8" \
    "2 interleaved 2 8" "4 gpipe 1 8" "4 1f1b 1 8" "4 interleaved 2 8" "4 1f1b 1 16"; do
    read -r p s v m <<<"$cfg"
    run "$p" "${model[@]}" --pp "$p" --schedule "$s" --virtual-stages "$v" --grad-accum "$m"
    bubble=$(grep -o 'bubble [0-9.]*' "$err" | awk '{ s += $2; n++ } END { printf "%.3f", s / n }')
    acts=$(sed -n 's/.*rank 0 mp:.*activations peak \([0-9]*\) bytes.*/\1/p' "$err")
    formula=$(awk -v p="$p" -v m="$m" -v v="$v" 'BEGIN { printf "%.3f", (p - 1) / (v * m + p - 1) }')
    printf '| %2s | %-11s | %2s | %2s | %8s | %8s | %10s |\n' "$p" "$s" "$v" "$m" "$bubble" \
        "$formula" "$acts"
done

echo
echo "### Activation memory per recompute mode"
echo
B=4 T=128 C=256 NH=8 L=4 V=256
model=(--layers $L --channels $C --heads $NH --seq $T --micro-batch $B)
echo "model: ${model[*]}; 1F1B with 4 micro-batches; rank 0 is the first stage (no head)"
echo
printf '| %-12s | %-9s | %12s | %12s | %12s |\n' layout recompute measured analytic "peak RSS KiB"
echo '|--------------|-----------|--------------|--------------|--------------|'
for lay in "1 1 0" "2 1 0" "2 2 0" "2 2 1"; do
    read -r pp tp sp <<<"$lay"
    n=$((pp * tp))
    # --trace runs even pp 1 tp 1 through the model-parallel runtime, whose
    # counter this reads
    extra=(--pp "$pp" --tp "$tp" --dp 1 --grad-accum 4 --trace "$trace")
    [[ $sp -eq 1 ]] && extra+=(--sp)
    for rc in none selective full; do
        run "$n" "${model[@]}" "${extra[@]}" --recompute "$rc"
        meas=$(sed -n 's/.*rank 0 mp:.*activations peak \([0-9]*\) bytes.*/\1/p' "$err")
        rss=$(sed -n 's/.*rank 0 zero.*peak RSS \([0-9]*\) KiB.*/\1/p' "$err")
        # the count from the shapes (floats): per block and micro-batch,
        # N = B T rows, Nl = N / tp with sp, Cl = C / tp, Hl = 4 C / tp
        ana=$(awk -v B=$B -v T=$T -v C=$C -v NH=$NH -v L=$L -v V=$V -v pp="$pp" -v tp="$tp" \
            -v sp="$sp" -v rc="$rc" 'BEGIN {
            N = B * T; Nl = sp ? N / tp : N; Cl = C / tp; Hl = 4 * C / tp; NHl = NH / tp
            kept = 4 * Nl * C + 4 * Nl + 3 * N * Cl + N * Cl + N * Hl  # ln1 res2 ln2 res3, stats, qkv atty fch
            if (rc == "none") kept += B * NHl * T * T + N * Hl        # attention probabilities, gelu
            if (rc == "full") kept = Nl * C                           # the block output only
            layers = L / pp; frame = Nl * C + layers * kept           # the chunk input too
            live = pp                                                 # 1F1B: rank 0 holds p micro-batches
            if (pp == 1) { live = 1; frame += Nl * C + 2 * Nl + N * V / tp }  # and the head
            printf "%d", 4 * live * frame }')
        printf '| %-12s | %-9s | %12s | %12s | %12s |\n' "pp $pp tp $tp$([[ $sp -eq 1 ]] && echo ' sp')" \
            "$rc" "$meas" "$ana" "$rss"
    done
done

echo
echo "### Tokens per second, layouts of 4 ranks"
echo
model=(--layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 4 --global-batch 32)
echo "model: ${model[*]}; 1F1B; ZeRO 0"
echo
printf '| %-22s | %8s | %8s |\n' layout "ms/step" tok/s
echo '|------------------------|----------|----------|'
for lay in "4 1 1" "2 2 1" "2 1 2" "1 4 1" "1 1 4" "1 2 2" "1 2 2 --sp" "1 1 4 --sp"; do
    read -r dp pp tp more <<<"$lay"
    # shellcheck disable=SC2086
    run 4 "${model[@]}" --dp "$dp" --pp "$pp" --tp "$tp" $more
    line=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step, \([0-9]*\) tok\/s.*/\1 \2/p' "$err")
    printf '| %-22s | %8s | %8s |\n' "dp $dp pp $pp tp $tp ${more:-}" ${line}
done

if [[ -n "$svg" ]]; then
    # a real trace of one 1F1B step on 4 stages, 8 micro-batches
    run 4 --layers 8 --channels 128 --heads 4 --seq 64 --micro-batch 2 --pp 4 --grad-accum 8 \
        --trace "$trace"
    python3 "$(dirname "$0")/trace_svg.py" "$trace" "$svg" \
        "train_gpt --pp 4 --schedule 1f1b --grad-accum 8: one step, 4 ranks on 2 cores"
fi
