#!/usr/bin/env bash
# train_gpt --offload optimizer=disk:DIR with checkpoints (docs/model.md
# "Offload"): a run stopped at step 5 and resumed ends with exactly the
# losses of a run never stopped, for ZeRO 0, 1, 2 and 3; the moments do travel
# through the checkpoint: an offloaded run's checkpoint resumed without
# offload, and a plain checkpoint resumed with it, give the same losses too
# (ZeRO 1-3). With the parameters, the moments and the gradient shard all on
# disk (ZeRO 2 and 3), where a save streams the moments from their file and
# a resume streams them into it: the step-5 checkpoint is bitwise the plain
# run's, and resumed with offload, from either checkpoint, the step-10 one
# is bitwise the run never stopped.
set -euo pipefail
source "$(dirname "$0")/offload_env.sh"
job_prefix=offck
small=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 4
    --bucket-mb 0.02 --zero-min-bytes 0 --ckpt-every 5)
off=(--offload "optimizer=disk:$work/off" --offload-chunk 8192)
# run LOG STEPS CKPT ARGS...: a 2-rank job to STEPS appending its losses to
# $work/LOG.log, its output in $work/LOG.out
run() {
    local log=$1 steps=$2 ck=$3
    shift 3
    offload_run "$log" 2 --steps "$steps" --ckpt-dir "$work/$ck" "$@"
}
for zero in 0 1 2 3; do
    run "ref$zero" 10 "ck-ref$zero" --zero $zero
    [[ $(wc -l <"$work/ref$zero.log") -eq 10 ]] || fail "ref$zero: $(wc -l <"$work/ref$zero.log") steps"
    # stopped at 5 and resumed, with offload throughout
    run "off$zero" 5 "ck-off$zero" --zero $zero "${off[@]}"
    run "off$zero" 10 "ck-off$zero" --zero $zero "${off[@]}" --resume
    grep -q "resumed from step 5" "$work/off$zero.out" || fail "zero $zero: no resume: $(cat "$work/off$zero.out")"
    cmp -s "$work/ref$zero.log" "$work/off$zero.log" ||
        fail "zero $zero: the resumed offload run differs: $(diff "$work/ref$zero.log" "$work/off$zero.log" | head -4)"
    [[ -z "$(ls -A "$work/off")" ]] || fail "zero $zero: files left: $(ls "$work/off")"
done
# across (ZeRO 1-3): the offloaded run's checkpoint without offload, a
# plain one with it
for z in 1 2 3; do
    mkdir "$work/ck-a$z" && cp -r "$work/ck-off$z/step-5" "$work/ck-a$z/"
    head -5 "$work/ref$z.log" >"$work/a$z.log"
    run "a$z" 10 "ck-a$z" --zero $z --resume
    cmp -s "$work/ref$z.log" "$work/a$z.log" || fail "zero $z: an offloaded checkpoint resumed without offload differs"
    mkdir "$work/ck-b$z" && cp -r "$work/ck-ref$z/step-5" "$work/ck-b$z/"
    head -5 "$work/ref$z.log" >"$work/b$z.log"
    run "b$z" 10 "ck-b$z" --zero $z --resume "${off[@]}"
    cmp -s "$work/ref$z.log" "$work/b$z.log" || fail "zero $z: a plain checkpoint resumed with offload differs"
done
# every offload (ZeRO 2 and 3): the checkpoints themselves bitwise the plain
# run's, saved (step 5) and after a resume from either (step 10)
all=(--offload "params=disk:$work/off,optimizer=disk:$work/off,grads=disk:$work/off"
    --offload-chunk 8192)
same_ckpt() { # SAVED REF STEP WHAT
    local f
    for f in rank-0.bin rank-1.bin MANIFEST; do
        cmp -s "$work/$1/step-$3/$f" "$work/$2/step-$3/$f" || fail "$4: step-$3/$f differs"
    done
}
for z in 2 3; do
    run "all$z" 5 "ck-all$z" --zero $z "${all[@]}"
    same_ckpt "ck-all$z" "ck-ref$z" 5 "zero $z, saved with every offload"
    for from in all ref; do
        rm -rf "$work/ck-r$z$from" && mkdir "$work/ck-r$z$from"
        cp -r "$work/ck-$from$z/step-5" "$work/ck-r$z$from/"
        head -5 "$work/ref$z.log" >"$work/r$z$from.log"
        run "r$z$from" 10 "ck-r$z$from" --zero $z --resume "${all[@]}"
        cmp -s "$work/ref$z.log" "$work/r$z$from.log" || fail "zero $z: resumed from $from with every offload: losses differ"
        same_ckpt "ck-r$z$from" "ck-ref$z" 10 "zero $z, resumed from $from with every offload"
    done
    offload_none_left "r${z}ref"
done
echo "offload: checkpoints and resume equal to runs never stopped (ZeRO 0-3, and across)"
