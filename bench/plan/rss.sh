#!/usr/bin/env bash
# The planner's peak memory against peak RSS (docs/plan.md "Peak RSS"):
# for layouts of 4 and 8 ranks (dp, tp, pp, sp, ZeRO 0-3, recompute,
# each schedule) train_gpt --report runs a few steps under msrun, and the
# largest 'peak RSS' of any rank is compared with plan_gpt's peak bytes
# plus the process's own footprint: the peak RSS of the same world
# training a model too small to count (1 layer, 8 channels, 1 head,
# sequence 64). Prints a markdown table; exits 1 when a layout is off by
# more than 10%.
#
# usage: bench/plan/rss.sh [BUILD_DIR]     (about a minute on 2 cores)
set -euo pipefail
build=${1:-build}
bin="$build/bin"
for p in msrun train_gpt plan_gpt; do
    [[ -x "$bin/$p" ]] || { echo "no $bin/$p: build first" >&2; exit 1; }
done
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
model=(--layers 4 --channels 256 --heads 8 --seq 128)
gb=16
mb=2

# the largest peak RSS (KiB) any rank reported in $1
max_rss() { grep -o 'peak RSS [0-9]*' "$1" | awk '$3 > m { m = $3 } END { print m + 0 }'; }

# run W ARGS...: train_gpt under msrun with W workers; stderr to $tmp/err
run() {
    local w=$1
    shift
    timeout 300 "$bin/msrun" --worker_num="$w" --local_worker_num="$w" "$bin/train_gpt" \
        --threads 1 --steps 3 --report "$@" >/dev/null 2>"$tmp/err" ||
        { echo "train_gpt $*: $(tail -3 "$tmp/err")" >&2; exit 1; }
}

# train_gpt's options for plan_gpt's --fix
train_args() {
    local kv k v out=()
    IFS=, read -ra kv <<<"$1"
    for k in "${kv[@]}"; do
        v=${k#*=}
        case ${k%%=*} in
        dp | tp | pp | cp | zero | recompute | schedule) out+=("--${k%%=*}" "$v") ;;
        sp) ((v)) && out+=(--sp) ;;
        virtual_stages) out+=(--virtual-stages "$v") ;;
        esac
    done
    echo "${out[@]}"
}

layouts=(
    "4 dp=4,tp=1,pp=1,sp=0,zero=0,recompute=none"
    "4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=none"
    "4 dp=4,tp=1,pp=1,sp=0,zero=2,recompute=none"
    "4 dp=4,tp=1,pp=1,sp=0,zero=3,recompute=none"
    "4 dp=4,tp=1,pp=1,sp=0,zero=1,recompute=full"
    "4 dp=2,tp=2,pp=1,sp=1,zero=1,recompute=none"
    "4 dp=1,tp=4,pp=1,sp=1,zero=0,recompute=selective"
    "4 dp=1,tp=2,pp=2,sp=0,zero=0,recompute=none,schedule=1f1b"
    "4 dp=1,tp=1,pp=4,sp=0,zero=0,recompute=full,schedule=gpipe"
    "4 dp=2,tp=1,pp=2,sp=0,zero=1,recompute=none,schedule=interleaved,virtual_stages=2"
    "8 dp=8,tp=1,pp=1,sp=0,zero=0,recompute=none"
    "8 dp=8,tp=1,pp=1,sp=0,zero=3,recompute=none"
    "8 dp=4,tp=1,pp=2,sp=0,zero=2,recompute=none,schedule=gpipe"
    "8 dp=2,tp=2,pp=2,sp=1,zero=1,recompute=selective,schedule=1f1b"
    "8 dp=1,tp=8,pp=1,sp=1,zero=0,recompute=none"
    "8 dp=2,tp=1,pp=4,sp=0,zero=2,recompute=full,schedule=1f1b"
    "8 dp=1,tp=4,pp=2,sp=0,zero=1,recompute=none,schedule=interleaved,virtual_stages=2"
)

declare -A base
for w in 4 8; do
    run "$w" --layers 1 --channels 8 --heads 1 --seq 64 --micro-batch "$mb"
    base[$w]=$(max_rss "$tmp/err")
done
echo "Model ${model[*]}, micro-batch $mb, global batch $gb, --threads 1; footprint" \
    "(1 layer, 8 channels): ${base[4]} KiB on 4 ranks, ${base[8]} KiB on 8."
echo
echo "| ranks | layout | planned peak KiB | + footprint | peak RSS KiB | error |"
echo "|---|---|---|---|---|---|"
bad=0
for row in "${layouts[@]}"; do
    w=${row%% *}
    fix="${row#* },micro_batch=$mb,cp=1"
    # shellcheck disable=SC2046
    run "$w" "${model[@]}" --micro-batch "$mb" --global-batch "$gb" $(train_args "$fix")
    rss=$(max_rss "$tmp/err")
    peak=$("$bin/plan_gpt" "${model[@]}" --vocab 256 --world "$w" --global-batch "$gb" \
        --fix "$fix" --format kv | sed -n 's/^plan .*peak_bytes=\([0-9]*\).*/\1/p')
    pred=$((peak / 1024 + base[$w]))
    err=$(awk -v p="$pred" -v r="$rss" 'BEGIN { printf "%+.1f%%", 100 * (p - r) / r }')
    awk -v p="$pred" -v r="$rss" 'BEGIN { e = (p - r) / r; exit !(e > 0.1 || e < -0.1) }' &&
        bad=$((bad + 1))
    echo "| $w | ${row#* } | $((peak / 1024)) | $pred | $rss | $err |"
done
((bad == 0)) || { echo "$bad layouts off by more than 10%" >&2; exit 1; }
