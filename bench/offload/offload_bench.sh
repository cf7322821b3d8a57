#!/usr/bin/env bash
# train_gpt's step time with AdamW's moments offloaded to disk (--offload
# optimizer=disk:DIR) against the same run in memory, for both I/O engines
# and a few chunk sizes, with the disk's own bandwidth measured by dd in the
# same run and the bound max(compute, bytes / bandwidth): the step reads and
# writes the moments (8 bytes per parameter) once each, so the I/O alone
# takes M / read bandwidth + M / write bandwidth.
#
# With PART=activations: the activation offload instead (--recompute full
# --offload activations=disk:DIR) against the same run with the block inputs
# in memory, GPipe with 8 micro-batches (every frame waits for its
# backward): step time, --report's activations peak and the peak RSS, for
# both engines. PART=both runs the two tables.
#
# usage: [PART=optimizer|activations|both] bench/offload/offload_bench.sh [BUILD_DIR] [DIR] [STEPS] [MODEL ARGS...]
#   DIR: where the moments go (a directory on the disk to measure; default
#   a new one under $TMPDIR); the default model has moments of about 320 MB
#   (PART=activations: block inputs of 256 KiB, 64 of them per step).
# Prints a table; docs/performance.md "Optimizer offload" and "Activation
# offload" have results.
set -euo pipefail
build=${1:-build}
dir=${2:-}
steps=${3:-6}
shift $(($# < 3 ? $# : 3))
model=("$@")
part=${PART:-optimizer}
case $part in optimizer | activations | both) ;; *) echo "PART=$part: not optimizer, activations or both" >&2; exit 2 ;; esac
amodel=("${model[@]}")
[[ ${#model[@]} -gt 0 ]] || model=(--layers 8 --channels 640 --heads 8 --seq 64 --micro-batch 2)
[[ ${#amodel[@]} -gt 0 ]] || amodel=(--layers 8 --channels 128 --heads 4 --seq 128 --micro-batch 4)
bin="$build/bin/train_gpt"
[[ -x "$bin" ]] || { echo "no $bin: build first" >&2; exit 1; }
own=""
if [[ -z "$dir" ]]; then
    dir=$(mktemp -d)
    own=$dir
fi
tmp=$(mktemp -d)
cleanup() {
    rm -rf "$tmp" "$dir/dd.bin"
    [[ -z "$own" ]] || rm -rf "$own"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT

# one run: prints "ms/step update-ms optim-bytes peak-rss-KiB params"
run() {
    timeout 1200 "$bin" "${model[@]}" --steps "$steps" --report "$@" >/dev/null 2>"$tmp/err" ||
        { echo "train_gpt $* failed: $(tail -3 "$tmp/err")" >&2; exit 1; }
    local ms upd optim rss params
    ms=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
    upd=$(sed -n 's/.* update \([0-9.]*\) .*/\1/p' "$tmp/err")
    optim=$(sed -n 's/.* optim \([0-9]*\) .*/\1/p' "$tmp/err")
    rss=$(sed -n 's/.*peak RSS \([0-9]*\) KiB.*/\1/p' "$tmp/err")
    params=$(sed -n 's/^train_gpt: model of \([0-9]*\) parameters.*/\1/p' "$tmp/err")
    echo "$ms $upd $optim $rss $params"
}

# the activation offload: "ms/step acts-peak peak-rss-KiB written read-back not-ahead"
arun() {
    timeout 1200 "$bin" "${amodel[@]}" --grad-accum 8 --schedule gpipe --recompute full \
        --steps "$steps" --report "$@" >/dev/null 2>"$tmp/err" ||
        { echo "train_gpt $* failed: $(tail -3 "$tmp/err")" >&2; exit 1; }
    local ms peak rss w r m
    ms=$(sed -n 's/.*after the first: \([0-9.]*\) ms\/step.*/\1/p' "$tmp/err")
    peak=$(sed -n 's/.*activations peak \([0-9]*\) bytes.*/\1/p' "$tmp/err")
    rss=$(sed -n 's/.*peak RSS \([0-9]*\) KiB.*/\1/p' "$tmp/err")
    read -r w r m < <(sed -n 's/.*activation offload: \([0-9]*\) written, \([0-9]*\) read back, \([0-9]*\) not.*/\1 \2 \3/p' "$tmp/err") || true
    echo "$ms $peak $rss ${w:--} ${r:--} ${m:--}"
}
activations() {
    echo "activations: ${amodel[*]} --grad-accum 8 --schedule gpipe --recompute full, $steps steps"
    printf '| %-8s | %-14s | %9s | %16s | %13s | %9s | %9s | %10s |\n' mode engine "ms/step" \
        "acts peak bytes" "peak RSS KiB" written "read back" "not ahead"
    printf '|%s|%s|%s|%s|%s|%s|%s|%s|\n' ---------- ---------------- ----------- \
        ------------------ --------------- ----------- ----------- ------------
    local io ms peak rss w r m
    read -r ms peak rss w r m < <(arun)
    printf '| %-8s | %-14s | %9.1f | %16d | %13d | %9s | %9s | %10s |\n' memory - "$ms" "$peak" \
        "$rss" "$w" "$r" "$m"
    for io in threads uring; do
        read -r ms peak rss w r m < <(arun --offload "activations=disk:$dir" --offload-io "$io")
        printf '| %-8s | %-14s | %9.1f | %16d | %13d | %9s | %9s | %10s |\n' disk "$io" "$ms" \
            "$peak" "$rss" "$w" "$r" "$m"
    done
}
if [[ $part == activations ]]; then
    activations
    exit 0
fi

read -r base_ms base_upd base_optim base_rss params < <(run)
M=$((8 * params)) # the moments' bytes
# the disk's bandwidth for as many bytes, direct I/O, in this run
mb=$(((M + 4194303) / 4194304))
dd_s() { sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p'; }
w_s=$(dd if=/dev/zero of="$dir/dd.bin" bs=4M count="$mb" oflag=direct conv=fsync 2>&1 | dd_s)
r_s=$(dd if="$dir/dd.bin" of=/dev/null bs=4M iflag=direct 2>&1 | dd_s)
rm -f "$dir/dd.bin"
bytes=$((mb * 4194304))
awk -v b="$bytes" -v w="$w_s" -v r="$r_s" -v M="$M" 'BEGIN {
    printf "disk (dd, direct, %d MiB): write %.0f MB/s, read %.0f MB/s; moments %.1f MB: I/O %.0f ms per step\n",
        b / 1048576, b / w / 1e6, b / r / 1e6, M / 1e6, 1000 * (M / (b / w) + M / (b / r)) }'
io_ms=$(awk -v b="$bytes" -v w="$w_s" -v r="$r_s" -v M="$M" \
    'BEGIN { printf "%.1f", 1000 * (M / (b / w) + M / (b / r)) }')
printf '| %-8s | %-12s | %9s | %9s | %10s | %13s | %13s | %9s | %6s |\n' mode engine chunk \
    "ms/step" "update ms" "optim bytes" "peak RSS KiB" "bound ms" "x bound"
printf '|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n' ---------- -------------- ----------- ----------- \
    ------------ --------------- --------------- ----------- --------
row() { # mode engine chunk ms upd optim rss
    awk -v m="$1" -v e="$2" -v c="$3" -v ms="$4" -v u="$5" -v o="$6" -v r="$7" -v base="$base_ms" \
        -v io="$io_ms" 'BEGIN { b = (m == "memory") ? base : (base > io ? base : io);
        printf "| %-8s | %-12s | %9s | %9.1f | %10.1f | %13d | %13d | %9.1f | %6.2f |\n",
            m, e, c, ms, u, o, r, b, ms / b }'
}
row memory - - "$base_ms" "$base_upd" "$base_optim" "$base_rss"
for io in threads uring; do
    for chunk in 1048576 4194304 16777216; do
        read -r ms upd optim rss _ < <(run --offload "optimizer=disk:$dir" --offload-io "$io" \
            --offload-chunk "$chunk")
        row disk "$io" "$chunk" "$ms" "$upd" "$optim" "$rss"
    done
done
echo "bound: max(the in-memory step, the moments' read + write at dd's bandwidth)"
[[ $part != both ]] || activations
