#!/usr/bin/env bash
# Data parallel and ZeRO on this machine, under the real msrun:
#   1. tokens/s of train_gpt for dp 1, 2, 4 (micro-batch 8 per rank, so the
#      global batch grows with dp), stages 0, 1 and 3 (default model);
#   2. the overlap: with each bucket reduced as soon as it is ready
#      (--overlap 1) and with every bucket started after backward (0), the
#      exposed communication (the post-backward wait of the last rank to
#      finish backward) and the share of it the overlap hides;
#   3. ZeRO: the bytes a rank holds for each stage (dp 4) against the
#      formula (fp32: parameters 4P, gradients 4P, AdamW 8P; sharded 1/dp).
# The machine is shared and noisy: every configuration runs REPS times,
# interleaved with the others, and the tables give medians.
#
# usage: bench/train/dp_bench.sh [BUILD_DIR] [STEPS] [REPS]
# Prints markdown tables; docs/model.md has the results and what they mean.
set -euo pipefail
build=${1:-build}
steps=${2:-12}
reps=${3:-3}
bin="$build/bin"
[[ -x "$bin/train_gpt" && -x "$bin/msrun" ]] || { echo "no $bin/train_gpt: build first" >&2; exit 1; }
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
default="--layers 4 --channels 128 --heads 4 --seq 64 --micro-batch 8"
large="--layers 6 --channels 256 --heads 8 --seq 128 --micro-batch 8"
deep="--layers 16 --channels 128 --heads 4 --seq 64 --micro-batch 8"

# run N ARGS...: train_gpt on N workers with --report; stderr in $tmp/err
run() {
    local n=$1
    shift
    # shellcheck disable=SC2068
    timeout 900 "$bin/msrun" --worker_num="$n" --local_worker_num="$n" "$bin/train_gpt" \
        --steps "$steps" --report $@ >"$tmp/out" 2>"$tmp/err"
}
# field NAME: the mean over ranks of "NAME <value>" in the report lines
field() {
    grep ' zero [0-3]: params' "$tmp/err" |
        awk -v k="$1" '{ for (i = 1; i < NF; i++) if ($i == k) { s += $(i + 1); n++ } }
                       END { printf "%.1f", n ? s / n : 0 }'
}
tok_s() { sed -n 's/.*after the first: .* ms\/step, \([0-9]*\) tok\/s/\1/p' "$tmp/err"; }
ms_step() { sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

declare -A R # results: "config|metric" -> "v1 v2 ..."
add() { R["$1|$2"]="${R["$1|$2"]:-} $3"; }
get() { echo "${R["$1|$2"]}" | median; }

echo "# dp_bench: $(date -u +%FT%TZ), $(nproc) CPUs, steps $steps, reps $reps, load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((r = 0; r < reps; r++)); do
    for shape in default large; do
        for dp in 1 2 4; do
            for zero in 0 1 3; do
                [[ $shape == large && $zero != 0 ]] && continue
                run $dp "${!shape}" --zero $zero
                add "t|$shape|$dp|$zero" tok "$(tok_s)"
                add "t|$shape|$dp|$zero" ms "$(ms_step)"
            done
        done
    done
    for mb in 1 4 25; do
        for ov in 0 1; do
            run 2 "$large" --bucket-mb $mb --overlap $ov
            for f in backward exposed bucket-wait; do add "o|$mb|$ov" $f "$(field $f)"; done
            add "o|$mb|$ov" ms "$(ms_step)"
            add "o|$mb|$ov" buckets "$(grep -m1 -o 'buckets [0-9]*' "$tmp/err" | cut -d' ' -f2)"
        done
    done
done

echo
echo "## 1. Throughput (global tokens per second, micro-batch 8 per rank; medians)"
echo
echo "| model | dp | zero | ms/step | tok/s | vs dp 1 |"
echo "|---|---|---|---|---|---|"
for shape in default large; do
    base=$(get "t|$shape|1|0" tok)
    for dp in 1 2 4; do
        for zero in 0 1 3; do
            [[ $shape == large && $zero != 0 ]] && continue
            t=$(get "t|$shape|$dp|$zero" tok)
            printf '| %s | %d | %d | %s | %s | %s |\n' $shape $dp $zero \
                "$(get "t|$shape|$dp|$zero" ms)" "$t" \
                "$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')"
        done
    done
done

echo
echo "## 2. Overlap (dp 2, stage 0, large model; ms per step; medians)"
echo
echo "| bucket MiB | buckets | overlap | step | backward | mean wait | exposed | hidden |"
echo "|---|---|---|---|---|---|---|---|"
for mb in 1 4 25; do
    e0=$(get "o|$mb|0" exposed)
    for ov in 0 1; do
        e=$(get "o|$mb|$ov" exposed)
        hidden=$([[ $ov == 1 ]] && awk -v a="$e" -v b="$e0" 'BEGIN { printf "%.0f%%", 100 * (1 - a / b) }' || echo -)
        printf '| %s | %s | %d | %s | %s | %s | %s | %s |\n' $mb "$(get "o|$mb|$ov" buckets)" $ov \
            "$(get "o|$mb|$ov" ms)" "$(get "o|$mb|$ov" backward)" \
            "$(get "o|$mb|$ov" bucket-wait)" "$e" "$hidden"
    done
done

echo
echo "## 3. ZeRO: bytes per rank (dp 4; means over ranks)"
echo
echo "| model | bucket MiB | zero | params | grads | AdamW | formula (params / grads / AdamW) | transient peak | peak RSS KiB |"
echo "|---|---|---|---|---|---|---|---|---|"
for cfg in "default 25" "default 0.25" "deep 0.25"; do
    set -- $cfg
    for zero in 0 1 2 3; do
        steps_saved=$steps
        steps=3
        run 4 "${!1}" --zero $zero --bucket-mb "$2"
        steps=$steps_saved
        P=$(sed -n 's/.* of \([0-9]*\) elements.*/\1/p' "$tmp/err" | head -1)
        Rp=$(sed -n 's/.*, \([0-9]*\) replicated.*/\1/p' "$tmp/err" | head -1)
        S=$(awk -v p="$P" -v r="$Rp" 'BEGIN { printf "%.0f", (p - r) / 4 + r }')
        case $zero in
        0) f="$((4 * P)) / $((4 * P)) / $((8 * P))" ;;
        1) f="$((4 * P)) / $((4 * P)) / $((8 * S))" ;;
        2) f="$((4 * P)) / $((4 * S)) / $((8 * S))" ;;
        3) f="$((4 * S)) / $((4 * S)) / $((8 * S))" ;;
        esac
        printf '| %s (P %s) | %s | %d | %.0f | %.0f | %.0f | %s | %.0f | %.0f |\n' "$1" "$P" "$2" \
            $zero "$(field params)" "$(field grads)" "$(field optim)" "$f" \
            "$(field transient-peak)" "$(field RSS)"
    done
done
echo
echo "(S = (P - R)/4 + R with R the replicated elements, segments under --zero-min-bytes: the final norm's 2C)"
