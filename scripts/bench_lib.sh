# Shared by the recovery benchmarks (bench-recovery.sh, bench-failover.sh);
# sourced, not run.
now() { date +%s.%N; }
free_port() { python3 "$(dirname "${BASH_SOURCE[0]}")/free_port.py"; }
# recovered G N T0 FILES...: the N-th start time of generation G in FILES
# (lines "start gen G ... at T ...") minus T0, or "" if missing
recovered() {
    local g=$1 n=$2 t0=$3
    shift 3
    grep -h "start gen $g " "$@" | sed -E 's/.* at ([0-9.]+) .*/\1/' | sort -g |
        awk -v n="$n" -v t0="$t0" 'NR==n {printf "%.3f\n", $1 - t0}'
}
# the median of the numbers on stdin, 3 decimals
median() { sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.3f", a[int((NR+1)/2)]}'; }
