# Shared waits for the shell tests (sourced): each polls a file until a
# deadline in seconds, never sleeps for a fixed time.

# wait_for PATTERN FILE SECONDS: waits until FILE has at least one line
# matching PATTERN.
wait_for() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -q -- "$1" "$2" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# wait_count PATTERN FILE N SECONDS: waits for N matching lines.
wait_count() {
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        [ "$(grep -c -- "$1" "$2" 2>/dev/null)" -ge "$3" ] && return 0
        sleep 0.05
    done
    return 1
}
