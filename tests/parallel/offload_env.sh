# Shared by the train_gpt --offload tests: job_env.sh's set-up ($work,
# removed at exit with the jobs started), $bin, an empty $work/off for
# the stores, and the runs and checks those tests share: small, the
# options every run takes first (4 blocks, 4 steps of 4 micro-batches
# unless a script sets its own), params (the parameter offload's options
# with its store in $work/off) and pdisk (its --offload item alone). A
# script may set offload_limit (a run's seconds, 60 unless set) before
# offload_run.
#
#   offload_run NAME N ARGS...: train_gpt "${small[@]}" ARGS writing its
#   losses to $work/NAME.log and its output to $work/NAME.out: alone for
#   N 1, on N ranks under msrun for N 2 or more or mN (mN: N ranks, one
#   too); a failure or an exit status but 0 fails naming NAME
#   offload_read_ahead NAME N M: each of the N ranks of run NAME (--report,
#   4 blocks, 4 steps, M micro-batches a step) wrote every block once at
#   the start and once per update, read it back once per forward, backward
#   and update, and read none that was not read ahead
#   offload_none_left NAME: $work/off is empty after run NAME
#   offload_same NAME N M LAYOUT... -- ARGS...: the layout with and without
#   the offload (ARGS after the layout's), both with --report (the one
#   without skipped when $work/NAME.log is there), 4 steps bitwise, each of
#   the N ranks reading each of the 4 blocks ahead (M micro-batches a
#   step; M 0: not counted), no file left
#   offload_export_init NAME N ARGS...: --export-safetensors and then
#   --init-from of that file, 2 steps each on N ranks with ARGS, without
#   the parameter offload and with it: the same file, the same losses,
#   losses other than the exporting run's, no file left; the init with it
#   filled the blocks one at a time (offload_restore_bounded's 1 block)
source "$(dirname "${BASH_SOURCE[0]}")/job_env.sh"
bin="$MSRUN_BUILD/bin"
job_test_setup
mkdir -p "$work/off"
small=(--layers 4 --channels 32 --heads 4 --seq 16 --micro-batch 2 --global-batch 8 --steps 4)
pdisk="params=disk:$work/off"
params=(--offload "$pdisk")

offload_run() {
    local name=$1 raw=$2 n=${2#m} job=${job_prefix:-offload}-$$-$RANDOM launch=()
    shift 2
    if [[ $n -gt 1 || $raw == m* ]]; then
        jobs_started+=("$job")
        launch=("${msrun_cmd[@]}" --worker_num="$n" --local_worker_num="$n" --job_id="$job"
            "${worker_env[@]}")
    fi
    timeout -k 5 "${offload_limit:-60}" "${launch[@]}" "$bin/train_gpt" "${small[@]}" \
        --loss-log "$work/$name.log" "$@" >"$work/$name.out" 2>&1 ||
        fail "$name: exited $?: $(tail -5 "$work/$name.out")"
}
offload_read_ahead() {
    local name=$1 n=$2 m=$3 lines
    lines=$(grep -c "rank [0-9]* parameter offload: 20 written, $((4 * 4 * (2 * m + 1))) read back, 0 not read ahead" \
        "$work/$name.out" || true)
    [[ $lines -eq $n ]] || fail "$name: $n ranks should read every block back ahead: \
$(grep "parameter offload" "$work/$name.out")"
}
offload_none_left() {
    [[ -z "$(ls -A "$work/off")" ]] || fail "$1 left files: $(ls "$work/off")"
}
offload_same() {
    local name=$1 n=$2 m=$3
    shift 3
    local -a layout=()
    while [[ $# -gt 0 && $1 != -- ]]; do layout+=("$1") && shift; done
    shift
    [[ -f "$work/$name.log" ]] || offload_run "$name" "$n" "${layout[@]}" --report
    offload_run "$name-off" "$n" "${layout[@]}" "$@" --report
    offload_none_left "$name-off"
    [[ $(wc -l <"$work/$name-off.log") -eq 4 ]] || fail "$name-off: not 4 steps"
    cmp -s "$work/$name.log" "$work/$name-off.log" ||
        fail "$name with the offload differs: $(diff "$work/$name.log" "$work/$name-off.log" | head -4)"
    [[ $m -eq 0 ]] || offload_read_ahead "$name-off" "${n#m}" "$m"
}
offload_export_init() {
    local name=$1 n=$2 o
    shift 2
    local -a off=()
    for o in 0 1; do
        offload_run "$name-st$o" "$n" "$@" "${off[@]}" --steps 2 \
            --export-safetensors "$work/$name-st$o.st"
        offload_run "$name-init$o" "$n" "$@" "${off[@]}" --steps 2 --report \
            --init-from "$work/$name-st0.st"
        off=("${params[@]}")
    done
    cmp -s "$work/$name-st0.st" "$work/$name-st1.st" ||
        fail "$name: --export-safetensors with the offload differs"
    cmp -s "$work/$name-init0.log" "$work/$name-init1.log" ||
        fail "$name: --init-from with the offload differs"
    ! cmp -s "$work/$name-init0.log" "$work/$name-st0.log" ||
        fail "$name: --init-from gave the exporting run's losses"
    offload_none_left "$name-init1"
    offload_restore_bounded "$name-init1" 1
}
# Stopped at step 2 and resumed with the offload on then off, off then on:
# each resumed run's losses bitwise those of run REF. Usage:
# offload_resume_both REF LAYOUT_ARGS...
offload_resume_both() {
    local ref=$1 how before after
    shift
    for how in on-off off-on; do
        before=("$@") after=("$@")
        [[ $how != on-* ]] || before+=("${params[@]}")
        [[ $how != *-on ]] || after+=("${params[@]}")
        rm -rf "$work/ck" "$work/ck-$how.log" # a loss log is appended to
        offload_run "ck-$how" 2 --steps 2 --ckpt-every 2 --ckpt-dir "$work/ck" "${before[@]}"
        offload_run "ck-$how" 2 --ckpt-every 2 --ckpt-dir "$work/ck" --resume "${after[@]}"
        offload_none_left "ck-$how"
        grep -q "resumed from step 2" "$work/ck-$how.out" ||
            fail "$how: no resume: $(tail -5 "$work/ck-$how.out")"
        cmp -s "$work/$ref.log" "$work/ck-$how.log" ||
            fail "resumed $how: $(diff "$work/$ref.log" "$work/ck-$how.log" | head -4)"
    done
}

# offload_restore_bounded NAME HELD: each of the 2 ranks of the resumed
# run NAME (--report) held at most HELD blocks' bytes of the parameters in
# its restore (the flat buffer's, or ZeRO-3's shard's, blocks are 4; below
# ZeRO-3 the block the pieces fill and the gather's buffer: 2, ZeRO-3's a
# share: 1), and read each block back at most once (the load enters each
# block first without reading it) and wrote it at most twice (the load's
# and ZeRO 1-2's gather's)
offload_restore_bounded() {
    local r line peak blk reads writes
    for r in 0 1; do
        line=$(grep "rank $r restore: the parameters' blocks held" "$work/$1.out") ||
            fail "$1: rank $r reports no restore: $(grep "rank $r" "$work/$1.out")"
        peak=$(sed -E 's/.* held ([0-9]+) bytes.*/\1/' <<<"$line")
        blk=$(sed -E 's/.*blocks of ([0-9]+) bytes.*/\1/' <<<"$line")
        reads=$(sed -E 's/.*; ([0-9]+) blocks read back, ([0-9]+) written$/\1/' <<<"$line")
        writes=$(sed -E 's/.*; ([0-9]+) blocks read back, ([0-9]+) written$/\2/' <<<"$line")
        [[ $blk -gt 0 && $peak -gt 0 && $peak -le $(($2 * blk)) ]] ||
            fail "$1: rank $r's restore held $peak bytes, more than $2 blocks of $blk"
        [[ $reads =~ ^[0-9]+$ && $reads -le 4 && $writes =~ ^[0-9]+$ && $writes -le 8 ]] ||
            fail "$1: rank $r's restore read or wrote more than once a block each: $line"
        echo "$1: rank $r's restore held $peak bytes (blocks of $blk), read $reads blocks, wrote $writes"
    done
}
