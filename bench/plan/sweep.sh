#!/usr/bin/env bash
# The planner's accuracy, measured (docs/plan.md "Accuracy"): for worlds of
# 4 and 8 ranks and three model shapes, calibrate this machine
# (train_gpt --calibrate, each key the median of 3 runs), plan every layout of the sweep's space
# (plan_gpt --all), train each under msrun for a few steps, and print
# predicted against measured step time and peak RSS; then, per world and
# shape, Spearman's rho between predicted and measured step times and the
# tokens/s of the plan --auto takes (the search's first over the whole
# space, run through train_gpt --auto) against the best measured layout.
#
# The sweep's space: every factorization dp x tp x pp x cp of the world, sp,
# every ZeRO stage, every schedule and virtual-stage count the runtime
# accepts, at micro-batch 2 without recompute (the full space, with every
# micro-batch and recompute mode, is several thousand runs: --auto still
# searches all of it). --quick keeps one shape and ZeRO 0 and 1.
#
# Predicted peak RSS = the plan's peak bytes + the process's own footprint,
# measured once per world as the peak RSS of a model too small to count
# (1 layer, 8 channels).
#
# Each layout runs PASSES times (default 2), every other pass in reverse
# order, and counts at the fastest of its passes' medians: on a shared
# machine noise only adds time, and a slow minute then hurts no layout
# twice. A run takes at least 9 steps, and more where the plan predicts
# short ones, so that the steps timed (all but the first) last about
# MEASURE_MS (default 1200) ms: the median of a few short steps is
# noisier than the layouts of a short-stepped model differ.
#
# Then head to head (confirm below): the CONFIRM (default 3) fastest
# layouts of the sweep and --auto run ROUNDS (default 3) times more each,
# in turn, and the goal's ratio is taken from those runs alone; the
# sweep's own ratio is printed beside it.
#
# usage: bench/plan/sweep.sh [--quick] [--passes N] [--confirm N]
#                            [--rounds N] [--measure-ms MS] [BUILD_DIR]
# Takes about 20 minutes a pass on 2 cores (--quick: about 6), 4 to
# calibrate and 3 head to head. Prints markdown.
set -euo pipefail
quick=0
passes=2
confirm_n=3
rounds=3
measure_ms=1200
while [[ ${1:-} == --* ]]; do
    case $1 in
    --quick) quick=1 ;;
    --passes)
        passes=${2:-}
        shift
        ;;
    --confirm)
        confirm_n=${2:-}
        shift
        ;;
    --rounds)
        rounds=${2:-}
        shift
        ;;
    --measure-ms)
        measure_ms=${2:-}
        shift
        ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
[[ $passes =~ ^[1-9][0-9]*$ ]] || { echo "--passes takes a count of 1 or more" >&2; exit 2; }
[[ $confirm_n =~ ^[1-9][0-9]*$ ]] || { echo "--confirm takes a count of 1 or more" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "--rounds takes a count of 1 or more" >&2; exit 2; }
[[ $measure_ms =~ ^[0-9]+$ ]] || { echo "--measure-ms takes milliseconds" >&2; exit 2; }
build=${1:-build}
bin="$build/bin"
for p in msrun train_gpt plan_gpt; do
    [[ -x "$bin/$p" ]] || { echo "no $bin/$p: build first" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "python3 is needed for the statistics" >&2; exit 1; }
tmp=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
steps=9
gb=16
# deep and narrow (pipeline's ground), wide on short sequences (tensor
# parallel's), narrow on long sequences (element-wise and attention work)
shapes=("--layers 8 --channels 128 --heads 8 --seq 64"
    "--layers 4 --channels 256 --heads 8 --seq 32"
    "--layers 2 --channels 64 --heads 4 --seq 256")
fix=micro_batch=2,recompute=none
if ((quick)); then
    shapes=("${shapes[0]}")
fi

# train W OUT ARGS...: msrun with W workers; their output to OUT
train() {
    local w=$1 out=$2
    shift 2
    timeout 600 "$bin/msrun" --worker_num="$w" --local_worker_num="$w" "$bin/train_gpt" \
        --threads 1 --steps "$steps" --report "$@" >"$out" 2>&1
}

# the largest peak RSS (KiB) any rank reported in OUT
max_rss() { grep -o 'peak RSS [0-9]*' "$1" | awk '$3 > m { m = $3 } END { print m + 0 }'; }
# rank 0's median ms per step after the first, from its per-step tok/s
# (the median: 8 ranks time-share 2 cores, and one step in a few is
# disturbed)
step_ms() {
    grep -o 'rank 0\] step [0-9]* loss [0-9.]* tok/s [0-9.]*' "$1" | awk -v tok="$tokens" '
        $4 > 1 { v[n++] = tok / $8 * 1000 }
        END { if (n == 0) exit 1
              for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
              printf "%.2f\n", n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2 }'
}

# steps for a run whose plan predicts PRED ms a step: at least 9, and the
# steps after the first about measure_ms in all
steps_for() {
    steps=$(awk -v p="$1" -v t="$measure_ms" \
        'BEGIN { n = p > 0 ? int(t / p + 0.999) + 1 : 9; print n < 9 ? 9 : n }')
}
# a kv line's predicted ms a step
pred_ms() { sed -n 's/.* step_ms=\([0-9.e+-]*\).*/\1/p' <<<"$1"; }

# whether NEW ms is faster than OLD (none yet, or failed, counts as slower)
faster() { [[ -z $2 || $2 == failed ]] || awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# a layout as one key, from a kv line or from --auto's words (dp 4 tp 1
# pp 1 cp 1 sp zero 3 recompute none micro-batch 8 grad-accum 1 schedule 1f1b
# virtual-stages 1 pp-layers 3,5)
kv_key() {
    awk '{ for (i = 2; i <= NF; i++) { split($i, a, "="); v[a[1]] = a[2] }
           printf "dp=%s tp=%s pp=%s cp=%s sp=%s zero=%s recompute=%s micro_batch=%s grad_accum=%s schedule=%s virtual_stages=%s pp_layers=%s\n",
               v["dp"], v["tp"], v["pp"], v["cp"], v["sp"], v["zero"], v["recompute"], v["micro_batch"],
               v["grad_accum"], v["schedule"], v["virtual_stages"], v["pp_layers"] }'
}
auto_key() {
    awk '{ v["sp"] = 0
           for (i = 1; i <= NF; i++) {
               if ($i == "sp") { v["sp"] = 1; continue }
               k = $i; gsub("-", "_", k); v[k] = $(i + 1); i++ }
           printf "dp=%s tp=%s pp=%s cp=%s sp=%s zero=%s recompute=%s micro_batch=%s grad_accum=%s schedule=%s virtual_stages=%s pp_layers=%s\n",
               v["dp"], v["tp"], v["pp"], v["cp"], v["sp"], v["zero"], v["recompute"], v["micro_batch"],
               v["grad_accum"], v["schedule"], v["virtual_stages"], v["pp_layers"] }'
}

# --auto itself (the plan it prints must be the search's first), once a
# pass: into auto_ms, auto_rss, auto_took, the fastest of the passes
run_auto() {
    local m r
    steps_for "$(pred_ms "$auto")"
    if train "$w" "$tmp/auto.err" "${shape[@]}" --global-batch "$gb" --auto \
        --cluster "$cluster"; then
        m=$(step_ms "$tmp/auto.err")
        faster "$m" "$auto_ms" && auto_ms=$m
        r=$(max_rss "$tmp/auto.err")
        ((r > auto_rss)) && auto_rss=$r
        auto_took=$(sed -n 's/.*train_gpt: --auto: plan 1 of [0-9]*: \([^;]*\);.*/\1/p' \
            "$tmp/auto.err" | head -1 | auto_key)
    fi
    return 0
}

# the train_gpt options of a kv line's layout, into args
layout_args() {
    local pair
    local -A kv=()
    for pair in $1; do
        [[ $pair == *=* ]] && kv[${pair%%=*}]=${pair#*=}
    done
    args=(--dp "${kv[dp]}" --tp "${kv[tp]}" --pp "${kv[pp]}" --cp "${kv[cp]}"
        --zero "${kv[zero]}"
        --recompute "${kv[recompute]}" --micro-batch "${kv[micro_batch]}"
        --grad-accum "${kv[grad_accum]}" --schedule "${kv[schedule]}"
        --virtual-stages "${kv[virtual_stages]}")
    [[ ${kv[sp]} == 1 ]] && args+=(--sp)
    [[ -n ${kv[pp_layers]:-} ]] && args+=(--pp-layers "${kv[pp_layers]}")
    return 0
}

# Head to head: the sweep's fastest is the least of many noisy runs, and
# so measured luckier than any one layout runs; --auto against it at the
# sweep's figures is biased against --auto. The sweep's CONFIRM fastest
# layouts and --auto each run ROUNDS times more, in turn, the order turned
# by one each round, and count at the fastest of those runs alone: every
# one the same number of tries at the same minutes.
confirm() {
    local order=() k i r c m
    mapfile -t order < <(for ((i = 0; i < n; i++)); do
        [[ ${best_ms[$i]} == failed ]] || echo "${best_ms[$i]} $i"
    done | sort -n | head -"$confirm_n" | awk '{ print $2 }')
    order+=(auto)
    local -A low=()
    for ((r = 0; r < rounds; r++)); do
        for ((k = 0; k < ${#order[@]}; k++)); do
            c=${order[$(((k + r) % ${#order[@]}))]}
            if [[ $c == auto ]]; then
                steps_for "$(pred_ms "$auto")"
                train "$w" "$tmp/h2h.err" "${shape[@]}" --global-batch "$gb" --auto \
                    --cluster "$cluster" || continue
            else
                layout_args "${plans[$c]}"
                steps_for "$(pred_ms "${plans[$c]}")"
                train "$w" "$tmp/h2h.err" "${shape[@]}" "${args[@]}" || continue
            fi
            m=$(step_ms "$tmp/h2h.err")
            faster "$m" "${low[$c]:-}" && low[$c]=$m
        done
    done
    for c in "${order[@]}"; do
        if [[ $c == auto ]]; then
            echo "$w $si h2h-auto ${low[$c]:-failed} auto" >>"$rows"
        else
            echo "$w $si h2h ${low[$c]:-failed} $(kv_key <<<"${plans[$c]}")" >>"$rows"
        fi
    done
}

rows="$tmp/rows"
: >"$rows"
for w in 4 8; do
    steps=9
    train "$w" "$tmp/base.err" --layers 1 --channels 8 --heads 1 --seq 64 --micro-batch 2 ||
        { echo "baseline run failed:" >&2; cat "$tmp/base.err" >&2; exit 1; }
    base_kib=$(max_rss "$tmp/base.err")
    for si in "${!shapes[@]}"; do
        read -r -a shape <<<"${shapes[$si]}"
        tokens=$((gb * $(sed 's/.*--seq \([0-9]*\).*/\1/' <<<"${shapes[$si]}")))
        cluster="$tmp/c$w-$si.cluster"
        train "$w" "$tmp/cal.err" "${shape[@]}" --micro-batch 2 --calibrate "$cluster" \
            --calibrate-runs 3 ||
            { echo "calibrate failed:" >&2; cat "$tmp/cal.err" >&2; exit 1; }
        plan_args=("${shape[@]}" --vocab 256 --global-batch "$gb" --world "$w" --cluster "$cluster")
        f="$fix"
        ((quick)) && f="$fix,zero=0"
        {
            "$bin/plan_gpt" "${plan_args[@]}" --all --format kv --fix "$f"
            if ((quick)); then
                "$bin/plan_gpt" "${plan_args[@]}" --all --format kv --fix "$fix,zero=1"
            fi
        } | grep '^plan ' >"$tmp/plans"
        # the plan --auto takes: the first of the whole space
        auto=$("$bin/plan_gpt" "${plan_args[@]}" --top 1 --format kv | grep '^plan ')
        mapfile -t plans <"$tmp/plans"
        n=${#plans[@]}
        declare -A best_ms=() top_rss=()
        auto_ms=failed auto_rss=0 auto_took=
        for ((pass = 0; pass < passes; pass++)); do
            # --auto first in forward passes and last in reverse ones: its
            # runs fall at different times too
            ((pass % 2)) || run_auto
            for ((k = 0; k < n; k++)); do
                i=$k
                ((pass % 2)) && i=$((n - 1 - k))
                layout_args "${plans[$i]}"
                steps_for "$(pred_ms "${plans[$i]}")"
                if train "$w" "$tmp/run.err" "${shape[@]}" "${args[@]}"; then
                    ms=$(step_ms "$tmp/run.err")
                    rss=$(max_rss "$tmp/run.err")
                    faster "$ms" "${best_ms[$i]:-}" && best_ms[$i]=$ms
                    ((rss > ${top_rss[$i]:-0})) && top_rss[$i]=$rss
                else
                    [[ -z ${best_ms[$i]:-} ]] && best_ms[$i]=failed
                fi
            done
            ((pass % 2)) && run_auto
        done
        for ((i = 0; i < n; i++)); do
            line=${plans[$i]}
            declare -A kv=()
            for pair in $line; do
                [[ $pair == *=* ]] && kv[${pair%%=*}]=${pair#*=}
            done
            ms=${best_ms[$i]}
            rss=${top_rss[$i]:-0}
            tag=sweep
            [[ $(kv_key <<<"$line") == "$(kv_key <<<"$auto")" ]] && tag=sweep+auto
            echo "$w $si $tag ${kv[step_ms]} $ms ${kv[peak_bytes]} $base_kib $rss ${line#plan }" >>"$rows"
            unset kv
        done
        confirm
        unset best_ms top_rss
        echo "$w $si auto - $auto_ms - $base_kib $auto_rss $auto_took | $(kv_key <<<"$auto")" >>"$rows"
        echo "world $w shape $si: $n layouts" >&2
    done
done

python3 - "$rows" "${shapes[@]}" <<'EOF'
import sys

rows_path, shapes = sys.argv[1], sys.argv[2:]

def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r

def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    n = len(a)
    ma, mb = sum(ra) / n, sum(rb) / n
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va > 0 and vb > 0 else float("nan")

groups = {}
for line in open(rows_path):
    f = line.split()
    groups.setdefault((int(f[0]), int(f[1])), []).append(f)

summary = []
for (w, si), rows in sorted(groups.items()):
    print(f"### {w} ranks, model {shapes[si]} --vocab 256, global batch 16\n")
    print("| layout | predicted ms | measured ms | predicted RSS KiB | measured RSS KiB | RSS error |")
    print("|---|---:|---:|---:|---:|---:|")
    pred, meas, rss_err, best, failed = [], [], [], None, 0
    auto_ms, auto_layout, auto_plan = None, "", ""
    h2h, h2h_auto = [], None
    for f in rows:
        tag = f[2]
        if tag == "h2h-auto":
            h2h_auto = float(f[3]) if f[3] != "failed" else None
            continue
        if tag == "h2h":
            if f[3] != "failed":
                h2h.append((float(f[3]), " ".join(f[4:])))
            continue
        if tag == "auto":
            rest = " ".join(f[8:])
            took, _, want = rest.partition(" | ")
            auto_ms = float(f[4]) if f[4] != "failed" else None
            auto_layout, auto_plan = took, want
            continue
        layout = " ".join(x for x in f[8:] if x.split("=")[0] in
                          ("dp", "tp", "pp", "cp", "sp", "zero", "schedule", "virtual_stages",
                           "pp_layers", "grad_accum"))
        if f[4] == "failed":
            failed += 1
            print(f"| {layout} | {float(f[3]):.2f} | failed | | | |")
            continue
        p_ms, m_ms = float(f[3]), float(f[4])
        p_rss = int(f[5]) / 1024 + int(f[6])
        m_rss = int(f[7])
        err = (p_rss - m_rss) / m_rss  # as bench/plan/rss.sh: + when over
        pred.append(p_ms)
        meas.append(m_ms)
        rss_err.append(err)
        if best is None or m_ms < best[0]:
            best = (m_ms, layout)
        mark = " (auto)" if tag == "sweep+auto" else ""
        print(f"| {layout}{mark} | {p_ms:.2f} | {m_ms:.2f} | {p_rss:.0f} | {m_rss} | {100 * err:+.1f}% |")
    rho = spearman(pred, meas) if len(pred) > 2 else float("nan")
    # tokens/s goes as 1 / step time at a fixed global batch
    ratio = best[0] / auto_ms if auto_ms and best else float("nan")
    worst = max((abs(e) for e in rss_err), default=float("nan"))
    same = "yes" if auto_layout == auto_plan else "NO"
    h2h_best = min(h2h) if h2h else None
    h2h_ratio = h2h_best[0] / h2h_auto if h2h_auto and h2h_best else float("nan")
    print()
    print(f"Spearman's rho {rho:.3f} over {len(pred)} layouts ({failed} failed); "
          f"--auto took `{auto_layout}` (the search's first: {same}), "
          f"{auto_ms} ms/step; best measured {best[0]:.2f} ms/step ({best[1]}); "
          f"--auto at {100 * ratio:.1f}% of the best's tokens/s; largest RSS error {100 * worst:.1f}%\n")
    if h2h:
        print(f"Head to head, {len(h2h)} fastest and --auto in turn: "
              + "; ".join(f"`{k}` {m:.2f}" for m, k in sorted(h2h))
              + f"; --auto {h2h_auto} ms/step, at {100 * h2h_ratio:.1f}% of the fastest's tokens/s\n")
    summary.append((w, shapes[si], len(pred), rho, ratio, h2h_ratio, worst))

print("### Summary\n")
print("| ranks | model | layouts | Spearman rho | --auto / best tokens/s, sweep | head to head | largest RSS error |")
print("|---:|---|---:|---:|---:|---:|---:|")
for w, s, n, rho, ratio, h2h_ratio, worst in summary:
    print(f"| {w} | {s} | {n} | {rho:.3f} | {100 * ratio:.1f}% | {100 * h2h_ratio:.1f}% | {100 * worst:.1f}% |")
EOF
