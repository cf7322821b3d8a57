#!/usr/bin/env bash
# train_gpt --offload optimizer=disk:DIR with the experts of a MoE model
# (docs/model.md "Offload"): the experts' moments go to a file of their
# own beside the flat buffer's, and every layout gives bitwise the losses
# of the same layout without offload: one process (4 KiB chunks, the
# thread pool), dp 2 under ZeRO 1 (the experts' block of each replica),
# ZeRO 3 (the experts sharded per block), ep 2, tp 2 x dp 2, pp 2 and bf16;
# the experts' optimizer keeps fewer bytes resident (--report); stopped
# and resumed with it on then off, off then on, and on-on under ZeRO 3,
# each as the run never stopped; the files are one per rank, 0600, kept on
# request, else removed; a chunk of the experts' file changed underneath
# stops the run naming the file and the chunk.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offexp
offload_limit=90
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 8 --steps 4
    --experts 4 --moe-every 2)
opt=(--offload "optimizer=disk:$work/off")
# run NAME N ARGS...: an N-rank job of 4 steps, no file left
run() {
    offload_run "$@"
    [[ $(wc -l <"$work/$1.log") -eq 4 ]] || fail "$1: $(wc -l <"$work/$1.log") steps"
    offload_none_left "$1"
}
# experts_optim NAME R: rank R's experts' optimizer bytes in run NAME's --report
experts_optim() {
    grep "rank $2 experts:" "$work/$1.out" | sed -E 's/.* optim ([0-9]+) bytes.*/\1/'
}
# same NAME N ARGS... [-- OFFLOAD_ARGS...]: with and without the offload,
# bitwise; with 4 KiB chunks each of the N ranks keeps fewer bytes for its
# experts' moments (the default chunks of a shard this small are a quarter
# of its moments each, rounded up to 4 KiB: about as many bytes)
same() {
    local name=$1 n=$2 r a b
    shift 2
    local -a layout=() extra=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    [[ $# -eq 0 ]] || { shift && extra=("$@"); }
    run "$name" "$n" "${layout[@]}" --report
    run "$name-off" "$n" "${layout[@]}" "${opt[@]}" "${extra[@]}" --report
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    if [[ " ${extra[*]} " != *" --offload-chunk 4096 "* ]]; then
        echo "$name: bitwise equal (default chunks)"
        return 0
    fi
    for ((r = 0; r < ${n#m}; r++)); do
        a=$(experts_optim "$name" $r) b=$(experts_optim "$name-off" $r)
        [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ && $b -lt $a ]] ||
            fail "$name: rank $r's experts' moments: '$b' bytes offloaded, '$a' without"
    done
    echo "$name: bitwise equal; rank 0's experts' moments $a bytes resident without, $b with"
    return 0
}
same one 1 -- --offload-chunk 4096 --offload-io threads
same zero1 2 --dp 2 --zero 1 --bucket-mb 0.02 -- --offload-chunk 4096
same zero3 2 --dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 -- --offload-chunk 4096
same ep 2 --dp 2 --ep 2 --zero 1 -- --offload-chunk 4096
same tpdp 4 --tp 2 --dp 2 --zero 2 --recompute selective -- --offload-chunk 4096
same pp 2 --pp 2 -- --offload-chunk 4096
same bf16 2 --dp 2 --precision bf16 -- --offload-chunk 4096

# the experts' moments are where the log says, in a file of their own
MSR_LOG_LEVEL=info run note 2 --dp 2 --zero 1 "${opt[@]}"
for r in 0 1; do
    grep -q "rank $r.*offload: the experts' moments of [0-9]* elements in $work/off/msrun-experts-rank$r-" \
        "$work/note.out" || fail "rank $r does not say where its experts' moments are: $(cat "$work/note.out")"
done
# kept on request: one of each kind per rank, 0600 whatever the umask
(umask 000 && offload_run keep 2 --dp 2 --zero 1 "${opt[@]}" --offload-keep)
[[ $(compgen -G "$work/off/msrun-offload-rank*.bin" | wc -l) -eq 2 ]] ||
    fail "--offload-keep: not one flat buffer's file per rank: $(ls "$work/off")"
kept "$work/off" experts 2

# stopped at step 2, resumed: on then off, off then on (ZeRO 1), on-on (ZeRO 3)
params=("${opt[@]}" --offload-chunk 4096) # the offload offload_resume_both adds
offload_resume_both zero1 --dp 2 --zero 1 --bucket-mb 0.02
z3=(--dp 2 --zero 3 --bucket-mb 0.02 --zero-min-bytes 0 "${params[@]}")
rm -rf "$work/ck"
offload_run ck-z3 2 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" "${z3[@]}"
offload_run ck-z3 2 --ckpt-every 2 --ckpt-dir "$work/ck" --resume "${z3[@]}"
offload_none_left ck-z3
grep -q "resumed from step 2" "$work/ck-z3.out" || fail "ZeRO 3: no resume: $(tail -5 "$work/ck-z3.out")"
cmp -s "$work/zero3.log" "$work/ck-z3.log" ||
    fail "ZeRO 3 resumed on-on: $(diff "$work/zero3.log" "$work/ck-z3.log" | head -4)"

# a chunk of the experts' file changed underneath: named, exit 1, no file left
scribble "$work/off" experts chunk 3 "${small[@]}" --steps 1000000 "${opt[@]}" \
    --offload-chunk 4096
echo "offload: the experts' moments bitwise equal without it (one, ZeRO 1 and 3, ep, tp, pp, bf16; resumed)"
