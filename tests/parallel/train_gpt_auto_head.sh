#!/usr/bin/env bash
# train_gpt --auto turns to the chunked head where every layout is over the
# budget: a model whose head's (N, V) buffers dwarf the rest (V 4,096
# against C 32) trains on a budget only chunks of 1,024 rows fit, alone
# and on 2 ranks under msrun (tp 2: two chunks of a rank's 2,048 rows),
# says why and what it saves and costs, and its losses are those of the
# same layout given by hand with --head-chunk 1024, bitwise (and not the
# whole head's: the chunks ran). A chunk given by the user is kept;
# --plan ranks the same chunked plans; a budget not even the chunks fit is
# refused with exit status 2, saying so.
set -euo pipefail
bin="$MSRUN_BUILD/bin"
source "$(dirname "$0")/job_env.sh"
job_test_setup
export XDG_CACHE_HOME="$work/cache" # the calibration cache: never the user's own
hv=(--layers 2 --channels 32 --heads 4 --seq 64 --vocab 4096 --global-batch 4 --steps 2)
train_args=("${hv[@]}") # msrun_n's and refuse's (job_env.sh)
job_prefix=tgahead
budget() { # budget GIB: the test cluster at GIB per rank, in $work/cGIB
    sed "s/^mem_gib = .*/mem_gib = $1/" "$(dirname "$0")/plan_cluster.txt" >"$work/c$1"
}
num='[0-9.e+-]+'
# auto_check N GIB: --auto on N ranks at GIB per rank took chunks of 1,024
# rows and said why; the plan taken, as options, in $work/layout
auto_check() {
    local n=$1 gib=$2
    sed 's/^\[node [0-9]* rank [0-9]*\] //' "$work/err" | grep -- '--auto: ' | sort -u >"$work/lines"
    grep -Eq "^train_gpt: --auto: head: chunks of 1024 vocabulary rows \(--head-chunk 1024\): no layout fits in $gib GiB per rank without it; the plan holds [1-9][0-9]* bytes less on its fullest rank and computes the head's logits again in backward, $num GFLOP a step per rank$" \
        "$work/lines" || fail "$n ranks at $gib GiB: no chunked head: $(cat "$work/err")"
    [[ $(grep -c -- '--auto: head:' "$work/lines") -eq 1 ]] || fail "$(cat "$work/lines")"
    sed -n 's/^train_gpt: --auto: plan 1 of [0-9]*: \(.*\); predicted .*/\1/p' "$work/lines" \
        >"$work/layout"
    grep -q " head-chunk 1024$" "$work/layout" || fail "the plan: $(cat "$work/lines")"
    grep -Eq "^(\[node [0-9]+ rank [0-9]+\] )?step 2 loss" "$work/out" || fail "$n ranks at $gib GiB: no step 2: $(cat "$work/out")"
}
# by_hand N ARGS...: the layout --auto took, as options, with ARGS (one
# rank's loss log in $work/hand)
by_hand() {
    local n=$1
    shift
    local words opts=() i
    read -ra words <"$work/layout"
    for ((i = 0; i < ${#words[@]}; i++)); do # "key value" pairs, and sp alone
        if [[ ${words[i]} == sp ]]; then
            opts+=(--sp)
        else
            opts+=("--${words[i]}" "${words[i + 1]}")
            i=$((i + 1))
        fi
    done
    rm -f "$work/hand"
    if [[ $n -eq 1 ]]; then
        timeout 60 "$bin/train_gpt" "${hv[@]}" "${opts[@]}" "$@" --loss-log "$work/hand" \
            >"$work/out" 2>"$work/err" || fail "by hand ${opts[*]} $*: $(cat "$work/err")"
    else
        msrun_n "$n" "${opts[@]}" "$@" --loss-log "$work/hand" >"$work/out" \
            2>"$work/err" || fail "by hand on $n: ${opts[*]} $*: $(cat "$work/err")"
    fi
}

# one process: only chunks fit in 0.004 GiB (the least peak 3.3 MiB
# chunked, 5.8 MiB whole)
budget 0.004
rm -f "$work/auto"
timeout 60 "$bin/train_gpt" "${hv[@]}" --auto --cluster "$work/c0.004" --loss-log "$work/auto" \
    >"$work/out" 2>"$work/err" || fail "--auto at 0.004 GiB: $(cat "$work/err")"
auto_check 1 0.004
by_hand 1
cmp -s "$work/auto" "$work/hand" || fail "--auto and by hand differ: $(diff "$work/auto" "$work/hand")"
by_hand 1 --head-chunk 0
! cmp -s "$work/auto" "$work/hand" || fail "the whole head's losses: the chunks did not run"
echo "ok: one rank, chunks of 1024 rows where nothing fits without, bitwise by hand"

# 2 ranks under msrun: every rank plans and applies the same chunk
budget 0.0025
rm -f "$work/auto" # --loss-log appends
msrun_n 2 --auto --cluster "$work/c0.0025" --loss-log "$work/auto" >"$work/out" \
    2>"$work/err" || fail "--auto on 2 at 0.0025 GiB: $(cat "$work/err")"
auto_check 2 0.0025
by_hand 2
cmp -s "$work/auto" "$work/hand" || fail "2 ranks: --auto and by hand differ: $(diff "$work/auto" "$work/hand")"
by_hand 2 --head-chunk 0
! cmp -s "$work/auto" "$work/hand" || fail "2 ranks: the whole head's losses: the chunks did not run"
echo "ok: 2 ranks ($(cat "$work/layout")), bitwise by hand"

# a chunk the user gave is kept; no head line
timeout 60 "$bin/train_gpt" "${hv[@]}" --auto --head-chunk 48 --cluster "$work/c0.004" \
    >"$work/out" 2>"$work/err" || fail "--auto --head-chunk 48: $(cat "$work/err")"
grep -q -- "--auto: plan 1 of [0-9]*: .* head-chunk 48; " "$work/err" ||
    fail "--head-chunk 48 not kept: $(cat "$work/err")"
! grep -q -- "--auto: head:" "$work/err" || fail "a head line for a given chunk: $(cat "$work/err")"
# a budget not even the chunks fit
budget 0.003
refuse 1 "over 0.003 GiB per rank (the first .*); nor with a chunked head (--head-chunk 1024); --offload-dir DIR lets --auto offload (none given)$" \
    --auto --cluster "$work/c0.003"
refuse 1 "over 0.003 GiB per rank (the first .*); nor with a chunked head (--head-chunk 1024)$" \
    --plan --cluster "$work/c0.003"
# --plan ranks what --auto picks from: the chunked plans, and says why
timeout 60 "$bin/train_gpt" "${hv[@]}" --plan --cluster "$work/c0.004" >"$work/out" 2>"$work/err" ||
    fail "--plan at 0.004 GiB: $(cat "$work/err")"
grep -q "^head: chunks of 1024 vocabulary rows (--head-chunk 1024): no layout fits in 0.004 GiB per rank without it; " \
    "$work/out" || fail "--plan: no chunked head: $(cat "$work/out")"
grep -Eq "^ +1 +1 +1 +1 +1 +1 +0 +0 +none +1 +4 +1f1b " "$work/out" ||
    fail "--plan's plan 1 is not --auto's: $(cat "$work/out")"
echo "ok: a given chunk kept; --plan ranks the chunked plans; a budget nothing fits refused"
