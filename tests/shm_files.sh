# Sourced by test scripts: which shared-memory files in /dev/shm our
# processes left behind. Sourcing records what is there now (SHM_BEFORE);
# stale_shm prints, one per line, the files of ours (UCX's ucx_*, msrun's
# msr-*) that appeared since, that no live process maps, and that are still
# there a second later: a program starting beside the test (another test
# suite, say) creates, maps and unlinks its own within milliseconds, and
# they are not ours to remove or report.
SHM_BEFORE=$(ls /dev/shm 2>/dev/null | sort)

stale_shm() {
    local f cands=()
    for f in $(comm -13 <(echo "$SHM_BEFORE") <(ls /dev/shm 2>/dev/null | sort)); do
        case $f in
        ucx_* | msr-*) cands+=("$f") ;;
        esac
    done
    [ ${#cands[@]} -eq 0 ] && return 0
    sleep 1
    for f in "${cands[@]}"; do
        [ -e "/dev/shm/$f" ] || continue
        grep -qs "/dev/shm/$f" /proc/[0-9]*/maps || echo "$f"
    done
}
