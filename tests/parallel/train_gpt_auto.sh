#!/usr/bin/env bash
# train_gpt --auto explains itself and keeps its calibration: on 2 ranks
# with a cluster file it prints the plan taken, why, the runner-up and
# the layout without --auto, each with predicted time and memory; a
# measured cluster is cached (mode 0600, under $XDG_CACHE_HOME/msrun, else
# ~/.cache/msrun) and reused without measuring; the cached noise decides
# how many plans are too close to tell apart, of which the simplest is
# taken; --recalibrate measures again; a calibration of another offload
# directory's disk is not reused; a corrupt or foreign cache file is
# ignored with a warning and replaced; a job of fewer than 100 steps
# times shorter rounds.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
export XDG_CACHE_HOME="$work/cache" # never the user's own cache
model=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --steps 1)
cat >"$work/cluster" <<'CLUSTER'
ranks_per_node = 4
mem_gib = 1
peak_tflops = 0.05
intra_gbs = 5
latency_us = 2
mem_gbs = 3
kernel_us = 0.2
cores_per_node = 2
CLUSTER
num='[0-9.e+]+'
pred="predicted $num ms per step, $num tokens/s, $num [KMG]iB per rank at most"

# the explanation: a file gives no noise, so plan 1, the fastest
job=auto-$$-$RANDOM
jobs_started+=("$job")
timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
    "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --auto --cluster "$work/cluster" \
    >"$work/out" 2>"$work/err" || fail "--auto on 2 ranks: $(cat "$work/err")"
sed 's/^\[node [0-9]* rank [0-9]*\] //' "$work/err" | grep -- '--auto' >"$work/lines" || true
[[ $(wc -l <"$work/lines") -eq 4 ]] || fail "not 4 --auto lines: $(cat "$work/err")"
grep -Eq "^train_gpt: --auto: plan 1 of [0-9]+: dp [12] tp [12] .*; $pred \(cluster: $work/cluster\)$" \
    "$work/lines" || fail "the plan taken: $(cat "$work/lines")"
grep -q "^train_gpt: --auto: why: the fastest; no other plan predicted within the timings' noise (0%)$" \
    "$work/lines" || fail "why: $(cat "$work/lines")"
grep -Eq "^train_gpt: --auto: runner-up: plan 2: dp [12] tp [12] .*; $pred$" "$work/lines" ||
    fail "runner-up: $(cat "$work/lines")"
grep -Eq "^train_gpt: --auto: without --auto: dp 2 tp 1 pp 1 cp 1 zero 0 recompute none micro-batch 2 grad-accum 1 schedule 1f1b virtual-stages 1; $pred$" \
    "$work/lines" || fail "without --auto: $(cat "$work/lines")"
ms() { sed -n "s/.*--auto: $1.* predicted \([0-9.e+]*\) ms per step.*/\1/p" "$work/lines"; }
awk -v a="$(ms plan)" -v b="$(ms runner-up)" -v c="$(ms without)" 'BEGIN { exit !(a <= b && a <= c) }' ||
    fail "plan 1 not the fastest: $(cat "$work/lines")"
grep -q "step 1 loss" "$work/out" || fail "--auto did not train: $(cat "$work/err")"

# the cache: written on the first measured run, mode 0600, then reused
auto1() { timeout 60 "$bin/train_gpt" "${model[@]}" --auto "$@" >"$work/out" 2>"$work/err"; }
auto1 || fail "--auto measured: $(cat "$work/err")"
grep -q "^train_gpt: calibrated 1 rank in .*; cached in $work/cache/msrun/calibration-[0-9a-f]* " \
    "$work/err" || fail "not cached: $(cat "$work/err")"
file=$(ls "$work"/cache/msrun/calibration-*)
[[ $(stat -c %a "$file") == 600 && $(stat -c %a "$work/cache/msrun") == 700 ]] ||
    fail "modes: $(stat -c '%a %n' "$file" "$work/cache/msrun")"
head -1 "$file" | grep -q "^# msrun calibration v2; msrun [0-9.]*; cpu .*; cores [0-9]*; ranks 1, 1 per node; layers 4 channels 32 heads 4 seq 16 micro-batch 2 threads 0; offload-dir none$" ||
    fail "the key: $(head -1 "$file")"
# reused: no calibration; its noise set to 0 then to 1000% decides
sed -i '2s/.*/# noise 0/' "$file"
auto1 || fail "--auto cached: $(cat "$work/err")"
grep -q "calibrated" "$work/err" && fail "measured again: $(cat "$work/err")"
grep -q "^train_gpt: the calibration cached in $file is reused (timings' noise 0%; --recalibrate measures again)$" \
    "$work/err" || fail "not reused: $(cat "$work/err")"
grep -q "^train_gpt: --auto: plan 1 of [0-9]*: .*(cluster: cached in $file)$" "$work/err" ||
    fail "cached plan: $(cat "$work/err")"
sed -i '2s/.*/# noise 10/' "$file"
auto1 || fail "--auto cached, noisy: $(cat "$work/err")"
grep -Eq "^train_gpt: --auto: why: [0-9]+ plans are predicted within the timings' noise \(1e\+03%\) of the fastest" \
    "$work/err" || fail "why, noisy: $(cat "$work/err")"
grep -q "^train_gpt: --auto: plan [0-9]* of [0-9]*: dp 1 tp 1 pp 1 cp 1 zero 0 recompute none .*virtual-stages 1; " \
    "$work/err" || fail "not the simplest: $(cat "$work/err")"
# --recalibrate measures and rewrites it
auto1 --recalibrate || fail "--recalibrate: $(cat "$work/err")"
grep -q "^train_gpt: calibrated 1 rank in .*; cached in $file " "$work/err" ||
    fail "--recalibrate: $(cat "$work/err")"
sed -n 2p "$file" | grep -vq "^# noise 10$" || fail "--recalibrate kept the old file"
# corrupt and foreign files: a warning, measured, replaced
for bad in corrupt foreign; do
    if [[ $bad == corrupt ]]; then
        sed -i '3,$s/=/: /' "$file"
        want="corrupt (its cluster lines do not parse)"
    else
        sed -i '1s/cores [0-9]*/cores 999/' "$file"
        want="made for another machine, model shape or msrun version"
    fi
    auto1 || fail "--auto, $bad cache: $(cat "$work/err")"
    grep -qF "train_gpt: warning: the calibration cache $file is ignored: $want; measuring again" \
        "$work/err" || fail "$bad: no warning: $(cat "$work/err")"
    grep -q "^train_gpt: calibrated 1 rank in .*; cached in $file " "$work/err" ||
        fail "$bad: not measured and cached: $(cat "$work/err")"
    auto1 && grep -q "is reused" "$work/err" || fail "$bad: not replaced: $(cat "$work/err")"
done
# a job of fewer than 100 steps times rounds a quarter as long (5 ms) and
# skips the cold frames; one of 100 the full 20 ms, and measures them
for steps in 99 100; do
    timeout 60 "$bin/train_gpt" "${model[@]}" --steps $steps --plan --recalibrate >"$work/out" \
        2>"$work/err" || fail "--plan --steps $steps: $(cat "$work/err")"
    want=$( ((steps < 100)) && echo 5 || echo 20)
    grep -q "^# a pass's matmuls .*(rounds of $want ms)$" "$file" ||
        fail "--steps $steps: not rounds of $want ms: $(sed -n 3,4p "$file")"
    cold=$( ((steps < 100)) && echo "# cold_ms_per_mib = 0  (not measured: a job of fewer than 100 steps skips it)" ||
        echo "cold_ms_per_mib = ")
    grep -q "^$cold" "$file" || fail "--steps $steps: cold frames: $(grep cold_ms "$file")"
done
# without XDG_CACHE_HOME: under ~/.cache/msrun
mkdir "$work/home"
env -u XDG_CACHE_HOME HOME="$work/home" timeout 60 "$bin/train_gpt" "${model[@]}" --plan \
    >"$work/out" 2>"$work/err" || fail "--plan, HOME: $(cat "$work/err")"
ls "$work"/home/.cache/msrun/calibration-* >/dev/null || fail "nothing in ~/.cache/msrun"
# --global-batch on 2 ranks: the layout without --auto takes it as a run
# without --auto would (4 = micro-batch 2 x dp 2), or says why it could
# not (2: dp 2 leaves one sequence a rank), while --auto finds one (tp 2)
for G in 4 2; do
    job=auto-$$-$RANDOM
    jobs_started+=("$job")
    timeout -k 5 60 "${msrun_cmd[@]}" --worker_num=2 --local_worker_num=2 --job_id="$job" \
        "${worker_env[@]}" "$bin/train_gpt" "${model[@]}" --auto --cluster "$work/cluster" \
        --global-batch $G >"$work/out" 2>"$work/err" || fail "--auto --global-batch $G: $(cat "$work/err")"
    if ((G == 4)); then
        want="dp 2 tp 1 pp 1 cp 1 zero 0 recompute none micro-batch 2 grad-accum 1 .*; $pred"
    else
        want=".*; not a plan: global batch 2 is not a multiple of micro-batch 2 x dp 2"
    fi
    sed 's/^\[node [0-9]* rank [0-9]*\] //' "$work/err" | grep -Eq "^train_gpt: --auto: without --auto: $want$" ||
        fail "--global-batch $G, without --auto: $(grep -- --auto "$work/err")"
done
# the disk rates are the offload directory's: the key names its device
# (st_dev, major:minor), so neither a calibration without --offload-dir
# nor one of another disk is reused; another directory of the same disk is
dev_of() {
    local d
    d=$(stat -c %d "$1")
    echo "$((((d >> 8) & 0xfff) | ((d >> 32) & ~0xfff))):$(((d & 0xff) | ((d >> 12) & ~0xff)))"
}
export XDG_CACHE_HOME="$work/cache2"
mkdir "$work/d1" "$work/d2"
auto1 || fail "--auto, no --offload-dir: $(cat "$work/err")"
auto1 --offload-dir "$work/d1" || fail "--auto --offload-dir d1: $(cat "$work/err")"
grep -q "^train_gpt: calibrated 1 rank in .*; cached in " "$work/err" ||
    fail "a calibration without --offload-dir reused for one with it: $(cat "$work/err")"
grep -lx "# msrun calibration v2; .* threads 0; offload-dir device $(dev_of "$work/d1")" \
    "$work"/cache2/msrun/calibration-* >/dev/null ||
    fail "no key names d1's device $(dev_of "$work/d1"): $(head -qn1 "$work"/cache2/msrun/*)"
auto1 --offload-dir "$work/d2" || fail "--auto --offload-dir d2: $(cat "$work/err")"
grep -q "^train_gpt: the calibration cached in .* is reused" "$work/err" ||
    fail "the same disk measured again: $(cat "$work/err")"
# another disk (shared memory, where it is one): measured again
shm=$(mktemp -d /dev/shm/msrun-calib-XXXXXX 2>/dev/null) || shm=""
if [[ -n "$shm" ]]; then
    # a child forked for a command and killed before its exec runs this
    # trap too: only the script's own shell cleans up
    trap '[[ $BASHPID == "$$" ]] && { rm -rf "$shm"; job_test_cleanup; }' EXIT
    if [[ $(dev_of "$shm") != $(dev_of "$work/d1") ]]; then
        auto1 --offload-dir "$shm" || fail "--auto --offload-dir $shm: $(cat "$work/err")"
        grep -q "^train_gpt: calibrated 1 rank in .*; cached in " "$work/err" ||
            fail "another disk's calibration reused: $(cat "$work/err")"
        [[ $(ls "$work"/cache2/msrun/calibration-* | wc -l) -eq 3 ]] ||
            fail "not one file per disk: $(ls "$work"/cache2/msrun)"
    fi
fi
export XDG_CACHE_HOME="$work/cache"
# --recalibrate alone, or with --cluster, is refused
rc=0
timeout 30 "$bin/train_gpt" --recalibrate --cluster "$work/cluster" --plan >"$work/out" \
    2>"$work/err" || rc=$?
[[ $rc -eq 2 ]] && grep -q "^train_gpt: --recalibrate is for --plan, --plan-all, --explain and --auto without --cluster$" \
    "$work/err" || fail "--recalibrate --cluster: $rc $(cat "$work/err")"
echo "train_gpt --auto: the explanation, the cache and the noise: ok"
