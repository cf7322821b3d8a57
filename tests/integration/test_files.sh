#!/bin/bash
# Files msrun makes on a shared machine (docs/security.md): logs and their
# directories readable by this user only, no log written through a planted
# symbolic link, error files 0600.
. "$(dirname "$0")/lib.sh"

cat >"$TMP/say.sh" <<'SH'
#!/bin/sh
echo "rank $MSR_RANK says hello"
exit "${EXIT_CODE:-0}"
SH
chmod +x "$TMP/say.sh"
mode() { stat -c %a "$1"; }

# 1. --log_dir that does not exist yet: every directory made is 0700 (the
#    run's own too), every log 0600 (whatever the umask)
umask 022 # the usual one: msrun must not rely on a strict umask
run_msrun --worker_num=2 --job_id=files --log_dir="$TMP/logs/a/b" "$TMP/say.sh"
expect_code 0 "logs"
for d in "$TMP/logs" "$TMP/logs/a" "$TMP/logs/a/b" "$TMP/logs/a/b/files"; do
    [ "$(mode "$d")" = 700 ] || fail "$d has mode $(mode "$d"), want 700"
done
for r in 0 1; do
    f=$TMP/logs/a/b/files/worker_$r.log
    grep -q "rank $r says hello" "$f" || fail "rank $r's log holds its output"
    [ "$(mode "$f")" = 600 ] || fail "$f has mode $(mode "$f"), want 600"
done
ok "log directories made 0700 and logs 0600"

# 2. a symbolic link planted where a run's log directory goes is not
#    followed: the run takes the next name, the link's target stays empty
mkdir -m 700 "$TMP/plant" "$TMP/victim"
ln -s "$TMP/victim" "$TMP/plant/planted"
run_msrun --worker_num=2 --job_id=planted --log_dir="$TMP/plant" "$TMP/say.sh"
expect_code 0 "a job whose run directory name is a planted link"
[ -z "$(ls -A "$TMP/victim")" ] || fail "the link's target was written: $(ls -A "$TMP/victim")"
expect_in "rank 1 says hello" "$TMP/plant/planted.1/worker_1.log" "the run's own directory"
[ "$(readlink "$TMP/plant/latest")" = planted.1 ] || fail "latest -> $(readlink "$TMP/plant/latest")"
ok "a planted symbolic link does not redirect a worker's log"

# 3. the error file is 0600
export EXIT_CODE=3
run_msrun --worker_num=1 --error_file="$TMP/error.json" "$TMP/say.sh"
unset EXIT_CODE
expect_code 3 "failing job"
[ -f "$TMP/error.json" ] || fail "the error file is written"
[ "$(mode "$TMP/error.json")" = 600 ] || fail "the error file has mode $(mode "$TMP/error.json")"
ok "the error file is 0600"
no_leftovers "files"
