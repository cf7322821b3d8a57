#!/bin/bash
# An existing --log_dir that belongs to another user is refused: that user
# could read the logs or put links in them; so is a token file of another
# user (they chose, and know, the token). Making such files needs root
# (chown); skipped with exit 77 otherwise.
. "$(dirname "$0")/lib.sh"

if [ "$(id -u)" != 0 ]; then
    echo "SKIP: making a directory owned by another user needs root (chown)"
    exit 77
fi
other=$(id -u nobody 2>/dev/null) || { echo "SKIP: no user 'nobody' to own the directory"; exit 77; }
mkdir "$TMP/theirs"
chown nobody "$TMP/theirs" || { echo "SKIP: cannot chown to nobody here"; exit 77; }
cat >"$TMP/say.sh" <<'SH'
#!/bin/sh
echo "rank $MSR_RANK says hello"
SH
chmod +x "$TMP/say.sh"
run_msrun --worker_num=1 --log_dir="$TMP/theirs" "$TMP/say.sh"
expect_code 2 "another user's log directory"
expect_in "belongs to uid $other" "$TMP/err" "the refusal names the owner"
[ -z "$(ls -A "$TMP/theirs")" ] || fail "nothing is written there: $(ls -A "$TMP/theirs")"
ok "an existing log directory of another user is refused"

(umask 077 && echo "their-token" >"$TMP/theirs.token")
chown nobody "$TMP/theirs.token"
run_msrun --worker_num=1 --token_file="$TMP/theirs.token" "$TMP/say.sh"
expect_code 2 "another user's token file"
expect_in "owned by uid $other, not by this user" "$TMP/err" "the refusal names the owner"
ok "a token file of another user is refused"
no_leftovers "files owner"
