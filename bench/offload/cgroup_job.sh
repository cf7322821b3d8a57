# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154 # variables set for and by the scripts that source this
# Shared by the benches that run a job's ranks each in a memory cgroup of
# its own (sourced, after $here, $build, $dir and $ranks are set).
#
#   cgroup_job_start NAME FILE...: checks the build's train_gpt and msrun
#     ($bin, $msrun), sources cgroup_env.sh, makes $dir when it is empty
#     and $tmp, names the ranks' cgroups ($cg-rankR) and the job ($job)
#     after NAME, and at exit kills the job's processes, removes the
#     cgroups, $tmp, FILE... (under $dir) and a $dir it made.
cgroup_job_start() {
    local name=$1
    shift
    cgroup_job_files=("$@")
    bin="$build/bin/train_gpt"
    msrun="$build/bin/msrun"
    [[ -x "$bin" && -x "$msrun" ]] || { echo "no $bin or $msrun: build first" >&2; exit 1; }
    # shellcheck source=bench/offload/cgroup_env.sh
    source "$here/cgroup_env.sh"
    own=""
    if [[ -z "$dir" ]]; then
        dir=$(mktemp -d)
        own=$dir
    fi
    tmp=$(mktemp -d)
    cg="$cg_parent/msrun-$name-bench-$$"
    job=cgroup-$name-bench-$$
    # a child forked for a command and killed before its exec runs this
    # trap too: only the script's own shell cleans up
    trap '[[ $BASHPID == "$$" ]] && { cgroup_job_cleanup; }' EXIT
}

cgroup_job_cleanup() {
    local p r f
    # grep answers 2 when a process ended while it read: under set -e and
    # pipefail that would be the script's exit status after a whole run
    { grep -lsa "MSR_JOB_ID=$job" /proc/[0-9]*/environ 2>/dev/null || true; } | cut -d/ -f3 |
        while read -r p; do kill -KILL "$p" 2>/dev/null || true; done
    for ((r = 0; r < ranks; r++)); do
        [[ ! -d "$cg-rank$r" ]] || rmdir "$cg-rank$r" 2>/dev/null || true
    done
    rm -rf "$tmp"
    for f in "${cgroup_job_files[@]}"; do rm -rf "${dir:?}/$f"; done
    [[ -z "$own" ]] || rm -rf "$own"
}
