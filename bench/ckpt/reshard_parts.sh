#!/bin/bash
# What a resharded resume reads of a checkpoint, and how long it takes:
# dp 2 at ZeRO 2 saves a GPT of 12.7 M parameters (153 MB of state), then
# each layout below resumes it for one step; rank 0's line "read N bytes
# ... of shards of M bytes, D from the files" and the resume's own time
# ("resumed from step 2 under DIR in X s"), the page cache dropped before
# every resume when this user can. With two builds (BEFORE and AFTER, each
# saving its own checkpoint) the runs alternate between them, so both
# columns come from the same minutes of the machine.
#   bench/ckpt/reshard_parts.sh AFTER [BEFORE] [RUNS]
#   (AFTER, BEFORE: build folders, each with bin/msrun and bin/train_gpt;
#   RUNS: rounds, default 3; each row the median of its rounds)
set -euo pipefail
after=${1:?usage: reshard_parts.sh AFTER [BEFORE] [RUNS]}
before=${2:-}
runs=${3:-3}
builds=(after)
[[ -n $before ]] && builds=(before after)
declare -A bin=([after]="$after/bin" [before]="${before:+$before/bin}")
work=$(mktemp -d)
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { rm -rf "$work"; }' EXIT
model=(--layers 4 --channels 512 --heads 8 --seq 64 --global-batch 4 --lr 3e-3 --threads 1)
declare -A layout=([dp4z3]="4 --micro-batch 1 --zero 3" [dp4z1]="4 --micro-batch 1 --zero 1"
    [tp2]="2 --micro-batch 4 --tp 2" [tp2pp2]="4 --micro-batch 2 --tp 2 --pp 2"
    [one]="1 --micro-batch 4")
order=(dp4z3 dp4z1 tp2 tp2pp2 one)
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || return 1; }
cache="dropped before each resume"
drop || cache="warm (this user cannot drop it)"
for b in "${builds[@]}"; do
    "${bin[$b]}/msrun" --worker_num=2 --local_worker_num=2 "${bin[$b]}/train_gpt" "${model[@]}" \
        --micro-batch 2 --zero 2 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck-$b" \
        >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
done
for ((r = 0; r < runs; r++)); do
    for l in "${order[@]}"; do
        spec=(${layout[$l]})
        for b in "${builds[@]}"; do
            rm -rf "$work/r" && cp -r "$work/ck-$b" "$work/r" && (drop || true)
            "${bin[$b]}/msrun" --worker_num="${spec[0]}" --local_worker_num="${spec[0]}" \
                "${bin[$b]}/train_gpt" "${model[@]}" "${spec[@]:1}" --steps 2 --ckpt-dir "$work/r" \
                --resume >/dev/null 2>"$work/err" || { cat "$work/err"; exit 1; }
            s=$(sed -n 's/.*resumed from step 2 under .* in \([0-9.]*\) s .*/\1/p' "$work/err")
            rd=$(sed -n 's/.*rank 0 read \([0-9]*\) bytes .* of shards of \([0-9]*\) bytes, \([0-9]*\) from the files.*/\1 \2 \3/p' \
                "$work/err")
            echo "$l $b $s $rd" >>"$work/rows"
        done
    done
done
python3 - "$work/rows" "$cache" "${builds[@]}" <<'PY'
import statistics, sys
rows, cache, builds = sys.argv[1], sys.argv[2], sys.argv[3:]
got = {}
for line in open(rows):
    l, b, s, asked, of, files = line.split()
    got.setdefault((l, b), []).append((float(s), int(asked), int(of), int(files)))
print(f"rank 0 of each layout resuming dp 2's checkpoint; page cache {cache}; medians")
head = "layout".ljust(8) + "".join(f"{b + ': asked %':>18}{'files %':>9}{'resume s':>10}" for b in builds)
print(head)
for l in ["dp4z3", "dp4z1", "tp2", "tp2pp2", "one"]:
    line = l.ljust(8)
    for b in builds:
        v = got[(l, b)]
        line += f"{100 * v[0][1] / v[0][2]:>18.1f}{100 * v[0][3] / v[0][2]:>9.1f}"
        line += f"{statistics.median(x[0] for x in v):>10.3f}"
    print(line)
PY
