# Shared set-up of the tests that run msrun nodes in network namespaces
# (sourced after "build" is set): loads bench/comm/netns_lib.sh, the
# stale /dev/shm lister and the waits, makes $out, and removes the
# namespaces, this test's /dev/shm files and $out on exit and signals.
netns_test_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$netns_test_dir/../bench/comm/netns_lib.sh"
. "$netns_test_dir/shm_files.sh"
. "$netns_test_dir/wait_lib.sh"
msrun=$build/bin/msrun
out=$(mktemp -d)

cleanup() {
    netns_down
    local f
    for f in $(stale_shm); do rm -f "/dev/shm/$f"; done
    rm -rf "$out"
}
# a child forked for a command and killed before its exec runs this
# trap too: only the script's own shell cleans up
trap '[[ $BASHPID == "$$" ]] && { cleanup; }' EXIT
trap 'exit 130' INT TERM

# netns_skip_unusable: exits 77, saying why, where namespaces cannot be
# built here (no root, ip, tc, veth or tbf)
netns_skip_unusable() {
    local why
    if ! why=$(netns_usable); then
        echo "SKIP: $why"
        exit 77
    fi
}
