# The table of bench/regress/regress.sh from its samples, one per line:
#   FIGURE|DIR|UNIT SIDE VALUE ROUND
# DIR is + when more is better, - when less is; SIDE is before or after.
# Per figure: each side's median [min-max] (runs), after/before of the
# medians, the rounds' own ratios (before and after of one round ran back to
# back, so they saw the same load) and the noise: the larger of the two
# sides' relative spreads, (max - min) / median of one commit's own runs.
# Flags (none with fewer than 3 runs a side, whose spread says nothing):
# SLOWER or faster when the ratio of the medians moves by more than
# the noise ("spread"), or when every round moved the same way, at least 4
# rounds ("every round": a sign test, chance 2/2^n for code that changed
# nothing, 1 in 8 at 4 rounds, 1 in 16 at 5).
BEGIN { FS = "|" }
function sort(a, n,    i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
}
function med(a, n) { return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
function fmt(x) { return x >= 100 ? sprintf("%.0f", x) : sprintf("%.3g", x) }
{
    split($3, f, " ") # UNIT SIDE VALUE ROUND
    if (!($1 in dir)) { dir[$1] = $2; unit[$1] = f[1]; order[++nk] = $1 }
    k = $1 SUBSEP f[2]
    v[k, ++cnt[k]] = f[3] + 0
    at[k, f[4] != "" ? f[4] : cnt[k]] = f[3] + 0
    if (f[4] + 0 > rounds) rounds = f[4] + 0
    if (cnt[k] > rounds) rounds = cnt[k]
}
END {
    printf "| figure | unit | before: median [min-max] (runs) | after: median [min-max] (runs) | after/before | rounds' after/before | noise | flag |\n"
    printf "|---|---|---|---|---|---|---|---|\n"
    for (i = 1; i <= nk; i++) {
        key = order[i]
        for (s = 1; s <= 2; s++) {
            side = s == 1 ? "before" : "after"
            n = cnt[key SUBSEP side]
            delete a
            for (j = 1; j <= n; j++) a[j] = v[key SUBSEP side, j]
            sort(a, n)
            m[s] = n ? med(a, n) : 0
            runs[s] = n
            spread[s] = n && m[s] > 0 ? (a[n] - a[1]) / m[s] : 0
            txt[s] = n ? sprintf("%s [%s-%s] (%d)", fmt(m[s]), fmt(a[1]), fmt(a[n]), n) : "-"
        }
        if (m[1] <= 0 || m[2] <= 0) {
            printf "| %s | %s | %s | %s | - | - | - | no figure |\n", key, unit[key], txt[1], txt[2]
            continue
        }
        # the rounds' ratios: worse and better counted by the figure's sense
        np = 0; worse_n = 0; better_n = 0; delete pr
        for (r = 1; r <= rounds; r++) {
            if (!((key SUBSEP "before", r) in at) || !((key SUBSEP "after", r) in at)) continue
            b = at[key SUBSEP "before", r]; x = at[key SUBSEP "after", r]
            if (b <= 0) continue
            pr[++np] = x / b
            if (dir[key] == "+" ? x < b : x > b) worse_n++
            else if (x != b) better_n++
        }
        sort(pr, np)
        ptxt = np ? sprintf("%.2f [%.2f-%.2f]", med(pr, np), pr[1], pr[np]) : "-"
        ratio = m[2] / m[1]
        noise = spread[1] > spread[2] ? spread[1] : spread[2]
        worse = dir[key] == "+" ? ratio < 1 : ratio > 1
        flag = ""
        few = runs[1] < 3 || runs[2] < 3 # no spread to speak of: no flag by it
        if (few)
            flag = ""
        else if (ratio - 1 > noise || 1 - ratio > noise) flag = (worse ? "SLOWER" : "faster") " (spread)"
        else if (np >= 4 && worse_n == np) flag = "SLOWER (every round)"
        else if (np >= 4 && better_n == np) flag = "faster (every round)"
        printf "| %s | %s | %s | %s | %.2f | %s | %s | %s |\n", key, unit[key], txt[1], txt[2], ratio,
            ptxt, few ? "-" : sprintf("%.0f%%", 100 * noise), flag
    }
}
