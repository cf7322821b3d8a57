#!/usr/bin/env bash
# train_gpt --offload grads=disk:DIR (docs/model.md "Offload"): the
# gradient shard of ZeRO 2 and 3 in a file per rank beside the moments',
# put there as each bucket is reduced (set by a step's first micro-batch,
# added by the next) and read back in chunks by the norm and the update.
# One process (4 micro-batches added) and dp 2 at ZeRO 2 (4 KiB and
# default chunks; with every offload under full recompute) and ZeRO 3
# with the parameters on disk too give the losses and norms of the same
# layout without offload, bitwise; fewer
# gradient bytes resident than the shard's; no chunk read when wanted (the
# store told each next call); no file left; a run stopped
# and resumed with it on ends as one never stopped; the combinations it
# does not cover refused; a gradient chunk changed underneath stops the
# run with the file and the chunk named, and no file left.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offgrads
offload_limit=90
z2=(--zero 2 --zero-min-bytes 4096 --bucket-mb 0.02)
z3=(--zero 3 --zero-min-bytes 4096 --bucket-mb 0.02)
grads=(--offload "optimizer=disk:$work/off,grads=disk:$work/off")
all=(--offload "$pdisk,optimizer=disk:$work/off,grads=disk:$work/off")
# same NAME REF N ARGS...: run NAME on N ranks, its 4 losses and norms
# bitwise REF's, no file left
same() {
    local name=$1 ref=$2
    offload_run "$name" "${@:3}"
    offload_none_left "$name"
    [[ $(wc -l <"$work/$name.log") -eq 4 ]] || fail "$name: not 4 steps"
    cmp -s "$work/$ref.log" "$work/$name.log" ||
        fail "$name differs from $ref: $(diff "$work/$ref.log" "$work/$name.log" | head -4)"
}
# resident NAME N: each of the N ranks reports fewer gradient bytes than
# its shard's 4 bytes an element
resident() {
    local lines
    lines=$(grep -E "zero [23]: .* grads [0-9]+ .*\(shard [0-9]+ of" "$work/$1.out" |
        sed -E 's/.* grads ([0-9]+) .*\(shard ([0-9]+) of.*/\1 \2/' |
        awk '$1 < 4 * $2 { n++ } END { print n + 0 }')
    [[ $lines -eq $2 ]] || fail "$1: gradients resident: $(grep "zero" "$work/$1.out")"
}

# told NAME N: each of the N ranks read no gradient chunk when wanted (each
# put told the store the next call) and read back no more chunks than it
# wrote (a step's first micro-batch reads none back: docs/model.md
# "Gradient offload")
told() {
    local n
    n=$(grep -E "gradient offload: [0-9]+ chunks written, [0-9]+ read back \([0-9]+ read ahead, 0 when wanted\)" "$work/$1.out" |
        sed -E 's/.*: ([0-9]+) chunks written, ([0-9]+) read back.*/\1 \2/' |
        awk '$2 <= $1 { n++ } END { print n + 0 }')
    [[ $n -eq $2 ]] || fail "$1: gradient chunks read: $(grep "gradient offload" "$work/$1.out")"
}

offload_run one 1 "${z2[@]}"
same one-grads one 1 "${z2[@]}" "${grads[@]}" --offload-chunk 4096 --report
resident one-grads 1
told one-grads 1
offload_run dp2 2 "${z2[@]}"
same dp2-grads dp2 2 "${z2[@]}" "${grads[@]}" --offload-chunk 4096 --report
resident dp2-grads 2
told dp2-grads 2
same dp2-grads-default dp2 2 "${z2[@]}" "${grads[@]}"
offload_run dp3 2 "${z3[@]}"
same dp3-all dp3 2 "${z3[@]}" "${all[@]}" --offload-chunk 4096 --report
resident dp3-all 2
told dp3-all 2
# under full recompute the model-parallel runtime drives the step (the
# cgroup bench's layout): the same buckets reach the file
offload_run full 2 "${z2[@]}" --recompute full
same full-all full 2 "${z2[@]}" --recompute full "${all[@]}" --offload-chunk 4096

# stopped at step 2 and resumed with it on throughout (the gradients are
# not in a checkpoint: each step makes them anew)
run_ck() { offload_run ck 2 --ckpt-every 2 --ckpt-dir "$work/ck" "$@"; }
run_ck --steps 2 "${z2[@]}" "${grads[@]}" --offload-chunk 4096
run_ck --resume "${z2[@]}" "${grads[@]}" --offload-chunk 4096
grep -q "resumed from step 2" "$work/ck.out" || fail "no resume: $(tail -5 "$work/ck.out")"
offload_none_left ck
cmp -s "$work/dp2.log" "$work/ck.log" || fail "resumed: $(diff "$work/dp2.log" "$work/ck.log")"

# what it does not cover: refused before training, with the reason
train_args=("${small[@]}")
refuse 1 "not without optimizer=disk:DIR" --zero 2 --offload "grads=disk:$work/off"
refuse 1 "not below --zero 2" --zero 1 "${grads[@]}"
refuse 1 "not grads=host" --zero 2 --offload "optimizer=disk:$work/off,grads=host"
refuse 2 "not under --tp, --pp or --cp" --zero 2 --tp 2 "${grads[@]}"
offload_none_left refusals

# gradient chunk 3 changed underneath while the run goes on: the step that
# reads it back stops the run with the file and the chunk named
scribble "$work/off" grads "gradient chunk" 3 "${small[@]}" --steps 1000000 "${z2[@]}" \
    "${grads[@]}" --offload-chunk 4096
echo "offload: the gradient shard on disk bitwise equal without it (ZeRO 2 and 3, resumed)"
