# shellcheck shell=bash
# shellcheck disable=SC2034 # the variables are for the scripts that source this
# Shared by the cgroup benches (sourced): finds this shell's memory cgroup
# and the files that limit and report a child of it. cgroup v2's memory.max
# and memory.peak where the v2 hierarchy has the memory controller, else
# v1's memory.limit_in_bytes and memory.max_usage_in_bytes. Exits 77
# (skip) without root or without a memory cgroup.
#
#   cg_parent: the directory under which the benches make their cgroups
#   cg_limit_file, cg_peak_file: the limit and the peak usage of a child
#   cg_make DIR LIMIT: makes cgroup DIR limited to LIMIT bytes, no swap
[[ $(id -u) -eq 0 ]] || { echo "skip: a memory cgroup needs root" >&2; exit 77; }
if [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
    cg_parent=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
    cg_limit_file=memory.max
    cg_peak_file=memory.peak
    echo "+memory" >"$cg_parent/cgroup.subtree_control" 2>/dev/null || true
elif [[ -d /sys/fs/cgroup/memory ]]; then
    cg_parent=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
    cg_limit_file=memory.limit_in_bytes
    cg_peak_file=memory.max_usage_in_bytes
else
    echo "skip: no memory cgroup here" >&2
    exit 77
fi
cg_make() {
    mkdir "$1"
    echo "$2" >"$1/$cg_limit_file"
    [[ ! -f "$1/memory.swappiness" ]] || echo 0 >"$1/memory.swappiness"
    [[ ! -f "$1/memory.swap.max" ]] || echo 0 >"$1/memory.swap.max"
}
