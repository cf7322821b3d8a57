#!/usr/bin/env bash
# The command each worker of cgroup_dp_bench.sh runs under msrun: moves
# itself into its rank's memory cgroup, PREFIX-rank<MSR_RANK> (made and
# limited by the bench before the job starts), then execs PROGRAM, so
# every byte the rank touches is charged to its own limit.
#
# usage: cgroup_rank.sh PREFIX PROGRAM [ARGS...]
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: cgroup_rank.sh PREFIX PROGRAM [ARGS...]" >&2; exit 2; }
[[ -n "${MSR_RANK:-}" ]] || { echo "cgroup_rank.sh: no MSR_RANK (run it under msrun)" >&2; exit 2; }
cg="$1-rank$MSR_RANK"
[[ -d "$cg" ]] || { echo "cgroup_rank.sh: no cgroup $cg for rank $MSR_RANK" >&2; exit 2; }
shift
echo $$ >"$cg/cgroup.procs"
exec "$@"
