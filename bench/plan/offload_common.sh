# What the offload checks (offload_check.sh, offload_params_check.sh,
# offload_grads_check.sh, offload_experts_check.sh) share, sourced once
# each has set build, dir and steps from its arguments: the model and its
# micro-batch, the binaries, a scratch folder ($tmp) and the offload
# directory (a new one unless DIR was given; both removed at the end), and
# this machine calibrated with that directory into $tmp/cluster (the
# calibration's output in $tmp/calib).
model=(--layers 4 --channels 256 --heads 4 --seq 64)
mb=2
train="$build/bin/train_gpt" plan="$build/bin/plan_gpt"
[[ -x "$train" && -x "$plan" ]] || { echo "no $train or $plan: build first" >&2; exit 1; }
((steps >= 2)) || { echo "STEPS $steps: at least 2 (the first is left out)" >&2; exit 2; }
tmp=$(mktemp -d)
own=""
if [[ -z "$dir" ]]; then
    dir=$(mktemp -d)
    own=$dir
fi
cleanup() { rm -rf "$tmp" ${own:+"$own"}; }
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
[[ -d "$dir" && -w "$dir" ]] || { echo "DIR $dir: not a writable directory" >&2; exit 2; }
"$train" "${model[@]}" --micro-batch $mb --calibrate "$tmp/cluster" --offload-dir "$dir" \
    2>"$tmp/calib" || { cat "$tmp/calib" >&2; exit 1; }
