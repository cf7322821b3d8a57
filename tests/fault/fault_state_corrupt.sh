#!/bin/bash
# A corrupt record in the middle of the coordinator's state file is not a
# torn tail. A standalone coordinator saves 100 Sets and 30 Adds (each
# acknowledged) to its state file; copies of the file are then damaged in
# the middle half (a byte flipped in each field of a Set's record and of an
# Add's, bytes cut out of a record, two records swapped). A coordinator
# started on each must refuse it (exit 2), name the bad record's offset and
# leave the file byte for byte as it was; with --state_repair it must start,
# say how many records it dropped, and hold every write before the bad
# record. A torn last record still loads everything before it; a bad
# record with one whole record after it is refused, and so is a whole last
# record out of sequence. A file of another job
# is refused, naming both ids; without --job_id the file's job is resumed.
. "$MSRUN_SOURCE/tests/integration/lib.sh"
CLIENT=$BUILD/tests/state_client
EDIT="python3 $MSRUN_SOURCE/tests/fault/state_edit.py"
port=$(free_port)
TOKEN="state-$RANDOM$RANDOM"
export MSR_COORDINATOR="127.0.0.1:$port" MSR_TOKEN="$TOKEN" MSR_WORLD_SIZE=1 MSR_RANK=0 \
    MSR_GENERATION=0 MSR_CONNECT_TIMEOUT=20 MSR_TIMEOUT=30

coord() { # coord FILE [options...]: a coordinator on FILE, in the background
    local file=$1
    shift
    env MSRUN_TEST_MARKER="$MARKER" "$MSRUN" coordinator --bind "127.0.0.1:$port" \
        --token "$TOKEN" --worker_num 1 --local_worker_num 1 --max_restarts 0 \
        --state_file "$file" --log_level warn "$@" >>"$TMP/coord.out" 2>"$TMP/err" &
    COORD=$!
}

stop_coord() {
    kill "$COORD" 2>/dev/null
    wait_pid "$COORD" 20
}

# count FILE [options...]: "keys K counter C" of a coordinator resumed from FILE.
# Run in $(...): a fail here ends only that subshell, so the coordinator is
# stopped first (its stdout is a file, never the substitution's pipe, which
# a coordinator left running would hold open) and the caller's own check
# fails on the empty answer.
count() {
    coord "$@"
    if ! env MSRUN_TEST_MARKER="$MARKER" "$CLIENT" count 100 >"$TMP/out"; then
        stop_coord
        fail "count on $1"
    fi
    stop_coord
    cat "$TMP/out"
}

# refused FILE WHAT [options...]: a coordinator on FILE exits 2 and leaves it as it was
refused() {
    local file=$1 what=$2
    shift 2
    cp "$file" "$TMP/before"
    coord "$file" "$@"
    wait_pid "$COORD" 20
    expect_code 2 "$what"
    cmp -s "$file" "$TMP/before" || fail "$what: the refused file was changed"
}

# 1. the file: 100 Sets and 30 Adds, each acknowledged
coord "$TMP/good" --job_id corrupt
env MSRUN_TEST_MARKER="$MARKER" "$CLIENT" fill 100 >"$TMP/out" || fail "fill"
stop_coord
$EDIT records "$TMP/good" >"$TMP/records" || fail "the state file does not parse"
n=$(wc -l <"$TMP/records")
[ "$n" -ge 100 ] || fail "only $n records in the state file"
cp "$TMP/good" "$TMP/orig"
# (a resumed coordinator rewrites its file as one snapshot: each run gets a copy)
[ "$(count "$TMP/good" --job_id corrupt)" = "keys 100 counter 30" ] || fail "the whole file"

# the first Set's and the first Add's record in the middle half
pick() { awk -v lo=$((n / 4)) -v hi=$((3 * n / 4)) -v k="$1" \
    '$1 >= lo && $1 < hi && $4 == k { print $1; exit }' "$TMP/records"; }
set_rec=$(pick set)
add_rec=$(pick add)
[ -n "$set_rec" ] && [ -n "$add_rec" ] || fail "no Set or Add record in the middle half"

# 2. damage in the middle: refused, named, untouched; repaired on request
damaged=0
for c in "$set_rec flip-len" "$set_rec flip-seq" "$set_rec flip-crc" "$set_rec flip-hcrc" \
    "$set_rec flip-payload" "$add_rec flip-len" "$add_rec flip-seq" "$add_rec flip-crc" \
    "$add_rec flip-hcrc" "$add_rec flip-payload" "$set_rec cut" "$add_rec cut" \
    "$set_rec swap" "$((n - 2)) flip-payload"; do
    set -- $c
    i=$1 how=$2
    off=$(awk -v i="$i" '$1 == i { print $2 }' "$TMP/records")
    cp "$TMP/orig" "$TMP/state"
    $EDIT damage "$TMP/state" "$how" "$i"
    refused "$TMP/state" "$how in record $i" --job_id corrupt
    expect_in "the state file $TMP/state is corrupt: the record at byte $off " "$TMP/err" \
        "$how in record $i"
    want=$($EDIT expect "$TMP/orig" "$i")
    got=$(count "$TMP/state" --job_id corrupt --state_repair)
    expect_in "dropping $((n - i)) records" "$TMP/err" "--state_repair after $how in record $i"
    [ "$got" = "$want" ] || fail "--state_repair after $how in record $i: $got, want $want"
    damaged=$((damaged + 1))
done

# 3. the bound: a bad LAST record is a torn save, cut off with a warning
for how in torn flip-payload; do
    cp "$TMP/orig" "$TMP/state"
    $EDIT damage "$TMP/state" "$how" $((n - 1))
    want=$($EDIT expect "$TMP/orig" $((n - 1)))
    got=$(count "$TMP/state" --job_id corrupt)
    expect_in "cutting off its last" "$TMP/err" "$how last record"
    [ "$got" = "$want" ] || fail "$how last record: $got, want $want"
done

# ... but a WHOLE last record that is bad (no crash leaves one) is corruption
cp "$TMP/orig" "$TMP/state"
$EDIT damage "$TMP/state" reseq $((n - 1))
off=$(awk -v i=$((n - 1)) '$1 == i { print $2 }' "$TMP/records")
refused "$TMP/state" "a whole last record out of sequence" --job_id corrupt
expect_in "the record at byte $off is out of sequence" "$TMP/err" "a whole last record"
got=$(count "$TMP/state" --job_id corrupt --state_repair)
expect_in "dropping 1 record (" "$TMP/err" "--state_repair of a whole last record"
[ "$got" = "$($EDIT expect "$TMP/orig" $((n - 1)))" ] || fail "whole last record repaired: $got"

# 4. a file of the format before ("MSRSTAT2", no sequence numbers) is read
# whole, a bad last record is cut, a bad record before the last is refused
cp "$TMP/orig" "$TMP/v2"
$EDIT downgrade "$TMP/v2"
cp "$TMP/v2" "$TMP/state"
[ "$(count "$TMP/state" --job_id corrupt)" = "keys 100 counter 30" ] || fail "the older format"
cp "$TMP/v2" "$TMP/state"
$EDIT damage "$TMP/state" flip-payload $((n - 1))
got=$(count "$TMP/state" --job_id corrupt)
[ "$got" = "$($EDIT expect "$TMP/orig" $((n - 1)))" ] || fail "older format, bad last record: $got"
cp "$TMP/v2" "$TMP/state"
$EDIT damage "$TMP/state" flip-crc "$add_rec"
refused "$TMP/state" "older format, flip in record $add_rec" --job_id corrupt
expect_in "is corrupt: the record at byte" "$TMP/err" "older format, flip in record $add_rec"

# 5. the snapshot itself damaged: refused, even with --state_repair
cp "$TMP/orig" "$TMP/state"
$EDIT damage "$TMP/state" flip-payload 0
refused "$TMP/state" "a damaged snapshot" --job_id corrupt
refused "$TMP/state" "a damaged snapshot with --state_repair" --job_id corrupt --state_repair

# 6. another job's file is refused; without --job_id the file's job is resumed
cp "$TMP/orig" "$TMP/state"
refused "$TMP/state" "another job's file" --job_id other
expect_in "holds job corrupt, not job other" "$TMP/err" "another job's file"
[ "$(count "$TMP/state")" = "keys 100 counter 30" ] || fail "the file without --job_id"

no_leftovers "state file corruption"
ok "$damaged damaged state files of $n records refused untouched and repaired on request; torn tails cut; another job's file refused"
