#!/usr/bin/env bash
# train_gpt --offload params=disk:DIR with context parallel (docs/model.md
# "Offload"): each cp rank keeps its whole blocks in its file and computes
# on its own positions; tp 2 x cp 2 with sp, and dp 2 x cp 2 under
# ZeRO 2 and full recompute give bitwise the losses of the same layout
# without offload, every rank reading each block back ahead of its
# forward, backward and update; so do one process and cp 2 with --trace,
# whose trace shows each block's reads; no file is left.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offcp
offload_limit=90
# compare NAME N M: run NAME-off (--report) against run NAME, bitwise, each
# of the N ranks reading each block back ahead (M micro-batches a step)
compare() {
    local name=$1 n=$2 m=$3
    offload_none_left "$name-off"
    [[ $(wc -l <"$work/$name-off.log") -eq 4 ]] || fail "$name-off: not 4 steps"
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    offload_read_ahead "$name-off" "$n" "$m"
}
# same NAME N M LAYOUT... -- ARGS...: the layout with and without the
# offload (ARGS after the layout's), compared
same() {
    local name=$1 n=$2 m=$3
    shift 3
    local -a layout=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    shift
    offload_run "$name" "$n" "${layout[@]}"
    offload_run "$name-off" "$n" "${layout[@]}" "$@" --report
    compare "$name" "$n" "$m"
}
same tpcp 4 4 --tp 2 --cp 2 --sp -- "${params[@]}"
same dpcp 4 2 --cp 2 --dp 2 --zero 2 --recompute full --bucket-mb 0.02 --zero-min-bytes 0 -- \
    "${params[@]}"
# --trace: the model-parallel runtime (tp 1 too) and the same losses; the
# trace's last step has, on each of N ranks, M spans of each block's read
# for its forward ("params block K F") and M for its backward (B), none
# without the offload
traced() {
    local name=$1 n=$2 m=$3
    shift 3
    offload_run "$name" "$n" "$@" --trace "$work/$name.json"
    offload_run "$name-off" "$n" "$@" --trace "$work/$name-off.json" "${params[@]}" --report
    compare "$name" "$n" "$m"
    python3 - "$work/$name-off.json" "$n" "$m" <<'PY' || fail "$name: the trace's parameter reads"
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
n, m = int(sys.argv[2]), int(sys.argv[3])
got = collections.Counter((e["pid"], e["name"]) for e in ev if e["name"].startswith("params"))
want = {(r, f"params block {k} {p}"): m for r in range(n) for k in range(4) for p in "FB"}
assert got == want, sorted(got.items())
assert all(e["dur"] >= 0 and e["tid"] == 1 for e in ev if e["name"].startswith("params"))
assert sum(e["name"].startswith("B") for e in ev) == n * m, "no backward spans"
PY
    ! grep -q '"params block' "$work/$name.json" || fail "$name: read spans without offload"
}
traced trace 1 4
traced tracecp 2 2 --cp 2 --global-batch 4
echo "offload: parameters under cp 2, tp 2 x cp 2, dp 2 x cp 2 and --trace bitwise equal without it"
