#!/usr/bin/env bash
# --ckpt-async: a thread writes the checkpoints while training goes on. A
# run saving in the background, stopped and resumed, prints bitwise the
# losses of a run never stopped; its checkpoint resumes in another layout
# (each piece's CRC, computed by the writer, checked); a write that fails
# is reported (exit 1) and leaves the checkpoint before it loadable; with
# the moments or the parameters offloaded the files are bitwise a
# synchronous save's.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
small=(--layers 2 --channels 32 --heads 4 --seq 16 --micro-batch 2 --grad-accum 2 --steps 6)
msrun_n() {
    local n=$1 job=ckasync-$$-$RANDOM
    shift
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${small[@]}" "$@"
}
msrun_n 2 --loss-log "$work/whole" >/dev/null 2>"$work/err" || fail "whole: $(cat "$work/err")"
msrun_n 2 --steps 4 --ckpt-every 2 --ckpt-async --ckpt-dir "$work/ck" --loss-log "$work/first" \
    >/dev/null 2>"$work/err" || fail "first part: $(cat "$work/err")"
grep -q "2 checkpoints: .* ms in the steps, .* ms at most for one (.* waiting for the write before), .* ms written in the background" \
    "$work/err" || fail "no save times: $(cat "$work/err")"
cp -r "$work/ck" "$work/ck-tp"
msrun_n 2 --ckpt-async --ckpt-dir "$work/ck" --resume --loss-log "$work/second" >/dev/null \
    2>"$work/err" || fail "resumed: $(cat "$work/err")"
grep -q "resumed from step 4" "$work/err" || fail "no resume: $(cat "$work/err")"
diff "$work/whole" <(cat "$work/first" "$work/second") ||
    fail "the resumed run differs from the uninterrupted one"
# another layout reads the pieces in part, each checked against its CRC
msrun_n 2 --tp 2 --grad-accum 4 --ckpt-dir "$work/ck-tp" --resume >/dev/null 2>"$work/err" ||
    fail "resumed with tp 2: $(cat "$work/err")"
grep -q "resumed from step 4" "$work/err" || fail "no resume with tp 2: $(cat "$work/err")"
"$bin/msrun" ckpt inspect "$work/ck" >"$work/out" 2>&1 || fail "inspect: $(cat "$work/out")"
# a write that fails (step-4 is a file): reported at the next save, exit 1
mkdir "$work/ck-bad"
: >"$work/ck-bad/step-4"
rc=0
msrun_n 2 --ckpt-every 2 --ckpt-async --ckpt-dir "$work/ck-bad" >/dev/null 2>"$work/err" || rc=$?
[[ $rc -eq 1 ]] || fail "a failed background write exited $rc, want 1: $(cat "$work/err")"
grep -q "checkpoint of step 4 under .* (written in the background): .*step-4 is not a folder" \
    "$work/err" || fail "the failure was not said: $(cat "$work/err")"
rm "$work/ck-bad/step-4"
msrun_n 2 --steps 3 --ckpt-dir "$work/ck-bad" --resume >/dev/null 2>"$work/err" ||
    fail "resume after the failed write: $(cat "$work/err")"
grep -q "resumed from step 2" "$work/err" || fail "step 2 not loaded: $(cat "$work/err")"
# moments or parameters offloaded to files: the writer streams the save
# from the trainer and the files while the next step computes; the files
# are bitwise those of a save made in the steps (ZeRO 3's blocks are
# shards of the parameters, the others' whole blocks)
mkdir "$work/off"
cases=("1 optimizer=disk:$work/off" "0 params=disk:$work/off" "3 params=disk:$work/off"
    "2 params=disk:$work/off,optimizer=disk:$work/off")
for c in "${cases[@]}"; do
    read -r zero spec <<<"$c"
    for mode in sync async; do
        flag=()
        [[ $mode == async ]] && flag=(--ckpt-async)
        rm -rf "$work/ck-off-$mode"
        msrun_n 2 --steps 4 --ckpt-every 2 --zero "$zero" --offload "$spec" \
            --ckpt-dir "$work/ck-off-$mode" "${flag[@]}" >/dev/null 2>"$work/err" ||
            fail "offloaded ($spec, ZeRO $zero), $mode: $(cat "$work/err")"
    done
    for f in step-2/rank-0.bin step-2/rank-1.bin step-4/rank-0.bin step-4/rank-1.bin; do
        cmp "$work/ck-off-sync/$f" "$work/ck-off-async/$f" ||
            fail "offloaded ($spec, ZeRO $zero): $f saved in the background differs from the one saved in the step"
    done
done
echo "train_gpt --ckpt-async: ok"
