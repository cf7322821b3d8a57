#!/bin/bash
# Files msrun and its programs read whose names a user controls: a FIFO (or
# a directory) planted in the place of one must end the run quickly with
# "is not a regular file", never block it on an open with no writer
# (docs/security.md). Each run has a deadline far above its normal time.
. "$(dirname "$0")/lib.sh"
BIN=$BUILD/bin

# in_time SECONDS CMD...: runs CMD with a deadline; CODE is its status (124
# when it hung), its output in $TMP/out and $TMP/err
in_time() {
    local secs=$1
    shift
    CODE=0
    timeout -k 5 "$secs" env MSRUN_TEST_MARKER="$MARKER" "$@" >"$TMP/out" 2>"$TMP/err" || CODE=$?
    [ "$CODE" != 124 ] && [ "$CODE" != 137 ] || fail "$* hung (no end within $secs s)"
}

# 1. checkpoints: a real 2-rank job saves steps 2 and 4; a FIFO in place of
#    step 4's MANIFEST or of rank 0's file, then --resume: the job fails at
#    once with the file's name, on every rank, with exit 2 (bad input)
train=(--layers 1 --channels 16 --heads 2 --seq 8 --micro-batch 2 --ckpt-every 2)
in_time 60 "$MSRUN" --worker_num=2 --local_worker_num=2 "$BIN/train_gpt" "${train[@]}" --steps 4 \
    --ckpt-dir "$TMP/ck0"
expect_code 0 "the job that saves the checkpoints"
[ -f "$TMP/ck0/step-4/MANIFEST" ] || fail "step 4 is saved"
for planted in MANIFEST rank-0.bin; do
    rm -rf "$TMP/ck" && cp -r "$TMP/ck0" "$TMP/ck"
    rm "$TMP/ck/step-4/$planted" && mkfifo "$TMP/ck/step-4/$planted"
    # rank 1 refuses on its own too; msrun stops it once rank 0 has exited,
    # which on a loaded machine can come before its line: a rank that waited
    # instead of refusing would miss its line in every try
    for try in 1 2 3; do
        in_time 30 "$MSRUN" --worker_num=2 --local_worker_num=2 "$BIN/train_gpt" "${train[@]}" \
            --steps 6 --ckpt-dir "$TMP/ck" --resume
        expect_code 2 "--resume over a FIFO at step-4/$planted"
        expect_in "step-4/$planted is not a regular file (a FIFO): not resuming" "$TMP/err" \
            "the refusal names the FIFO"
        grep -q "rank 1\].*not a regular file.*not resuming" "$TMP/err" && break
        [ "$try" != 3 ] || fail "rank 1 fails too: its refusal not in err in 3 tries"
    done
    expect_not_in "resumed from" "$TMP/err" "nothing is resumed"
done
# the same directory without the FIFO resumes (the test's job is sound)
in_time 60 "$MSRUN" --worker_num=2 --local_worker_num=2 "$BIN/train_gpt" "${train[@]}" --steps 6 \
    --ckpt-dir "$TMP/ck0" --resume
expect_code 0 "--resume from the intact checkpoint"
expect_in "resumed from step 4" "$TMP/err" "the intact checkpoint resumes"
ok "a FIFO at a checkpoint's MANIFEST or rank file fails --resume at once, naming it"

# 2. the coordinator's state file
mkfifo "$TMP/state"
in_time 20 "$MSRUN" coordinator --bind 127.0.0.1:0 --token t --job_id fifo --worker_num 1 \
    --local_worker_num 1 --state_file "$TMP/state"
expect_code 2 "a coordinator whose state file is a FIFO"
expect_in "state file: $TMP/state is not a regular file (a FIFO)" "$TMP/err" "the state file's refusal"
ok "a FIFO as the state file is refused at once"

# 3. the token file (and a directory in its place)
mkfifo "$TMP/token"
mkdir "$TMP/tokendir"
for t in "$TMP/token:a FIFO" "$TMP/tokendir:a directory"; do
    in_time 20 "$MSRUN" --worker_num=1 --token_file="${t%%:*}" /bin/true
    expect_code 2 "a token file that is ${t#*:}"
    expect_in "${t%%:*} is not a regular file (${t#*:})" "$TMP/err" "the token file's refusal"
done
ok "a FIFO or a directory as the token file is refused at once"

# 4. train_gpt's --data and plan_gpt's --cluster
mkfifo "$TMP/data"
in_time 20 "$BIN/train_gpt" --data "$TMP/data" --steps 1
expect_code 2 "train_gpt --data FIFO"
expect_in "$TMP/data is not a regular file (a FIFO)" "$TMP/err" "train_gpt's refusal"
in_time 20 "$BIN/plan_gpt" --layers 2 --channels 32 --heads 4 --seq 16 --global-batch 8 --world 2 \
    --cluster "$TMP/data"
expect_code 2 "plan_gpt --cluster FIFO"
expect_in "--cluster $TMP/data: is not a regular file (a FIFO)" "$TMP/err" "plan_gpt's refusal"
ok "a FIFO as train_gpt's data or plan_gpt's cluster file is refused at once"

# 5. a TLS certificate
in_time 20 "$MSRUN" coordinator --bind 127.0.0.1:0 --token t --job_id fifo --worker_num 1 \
    --local_worker_num 1 --tls_cert "$TMP/data" --tls_key "$TMP/data"
expect_code 2 "a coordinator whose TLS certificate is a FIFO"
expect_in "$TMP/data is not a regular file (a FIFO)" "$TMP/err" "the certificate's refusal"
ok "a FIFO as a TLS file is refused at once"
no_leftovers "input files"
