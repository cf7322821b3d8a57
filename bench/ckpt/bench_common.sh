#!/bin/bash
# What the checkpoint benches (ckpt_bench.sh, resume_bench.sh) share,
# sourced after set -euo pipefail:
#   bench_setup NAME CPUS DIR  sets pin, the taskset prefix every process
#                              runs under (empty: all cpus), and tmp, a new
#                              folder NAME.XXXXXX under DIR (empty: under
#                              $TMPDIR), removed when the bench exits
#   drop                       empties the page cache before a read when
#                              this user can (root: echo 3 >
#                              /proc/sys/vm/drop_caches); else cold becomes
#                              0 and the reads are from the page cache, on
#                              both sides

bench_setup() {
    pin=()
    [ -n "$2" ] && pin=(taskset -c "$2")
    if [ -n "$3" ]; then
        mkdir -p "$3"
        tmp=$(mktemp -d "$3/$1.XXXXXX")
    else
        tmp=$(mktemp -d)
    fi
    # a child forked for a command and killed before its exec runs this
    # trap too: only the script's own shell cleans up
    trap '[[ $BASHPID == "$$" ]] && { rm -rf "$tmp"; }' EXIT
    cold=1
}

drop() {
    sync
    if [ "$cold" = 1 ] && ! (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
        cold=0
        echo "(cannot drop the page cache: reads are from it, on both sides)" >&2
    fi
}
