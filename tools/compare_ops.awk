# compare_ops.awk: two builds' bench_ops tables joined op by op (tools/compare_builds.sh; its test:
# tests/tools/test_bench_tools.sh). Input: files named ...ops-base-K.txt and ...ops-this-K.txt for K
# in 1..pairs (bench_ops's output, one run each). Output: per op, the median ms per step of either
# build and the median over the pairs of base / this with its min-max; ops that one build has and
# the other lacks (fused or split since) get a "-" on the other side; last, the sums of each whole
# table, which compare the same block of work.
# usage: awk -v pairs=N -f tools/compare_ops.awk FILES...

# rows of bench_ops: op name (several words), ms/call, x/step, ms/step, share, rate (words)
function row(line, a, n, name, i, s) {
    n = split(line, a, /[ \t]+/)
    for (s = 5; s <= n && a[s] !~ /^[0-9.]+%$/; s++) {}
    if (s > n) return ""
    name = a[1]; for (i = 2; i <= s - 4; i++) name = name " " a[i]
    return name SUBSEP a[s - 1]
}
function med(v, n,   i, j, t) {  # sorts v[1..n]; the median
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
# the side and the pair from the file's name
FNR == 1 {
    side = FILENAME; sub(/.*ops-/, "", side); k = side
    sub(/-.*/, "", side); sub(/.*-/, "", k); sub(/[.]txt$/, "", k)
}
{ r = row($0); if (r == "") next; split(r, f, SUBSEP)
  if (!((side, f[1]) in seen)) { seen[side, f[1]] = 1; if (side == "base" || !(("base", f[1]) in seen)) order[++no] = f[1] }
  ms[side, f[1], k] = f[2]; sum[side, k] += f[2] }
# One row: the medians of the pairs that have the op on both sides, and of their ratios (a pair with
# a time of 0 on either side, an op under the table's resolution, gives none: "-").
function line(name, key,   i, b, t, q, n, nq, mb, mt, mq) {
    n = 0; nq = 0
    for (i = 1; i <= pairs; i++) {
        if (!(("base", key, i) in ms) || !(("this", key, i) in ms)) continue
        n++; b[n] = ms["base", key, i]; t[n] = ms["this", key, i]
        if (b[n] > 0 && t[n] > 0) q[++nq] = b[n] / t[n]
    }
    if (!n) { printf "%-26s %10s %10s\n", name, (("base", key, 1) in ms) ? ms["base", key, 1] : "-",
                                               (("this", key, 1) in ms) ? ms["this", key, 1] : "-"; return }
    mb = med(b, n); mt = med(t, n)
    if (!nq) { printf "%-26s %10.3f %10.3f %8s\n", name, mb, mt, "-"; return }
    mq = med(q, nq)
    printf "%-26s %10.3f %10.3f %7.2fx (%.2f-%.2f)\n", name, mb, mt, mq, q[1], q[nq]
}
BEGIN { printf "%-26s %10s %10s %8s\n", "op", "base", "this", "speedup (min-max)" }
END { for (i = 1; i <= no; i++) line(order[i], order[i])
      for (i = 1; i <= pairs; i++) { ms["base", "\001sum", i] = sum["base", i]; ms["this", "\001sum", i] = sum["this", i] }
      line("sum (each whole table)", "\001sum") }
