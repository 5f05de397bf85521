"""How often issue 15's bar holds on a sample of 40 histories: ``bench_flaky.py --blocks 40``.

The issue's bar is per row of 40 histories: right in at least 95%, a wrong culprit at most once,
fewer mean runs than git-bayesect. On 40 histories a wrong-answer rate of 2% exceeds "once" in
about a fifth of samples, and a lead of a run or two in mean runs is within the sample's spread,
so one sample of 40 says little. Here the histories are cut into consecutive blocks of ``size``
(the first block is exactly the default ``--histories 40`` run) and each bar is counted per block,
for both tools; below, the same bars read as rates over all the histories.
"""

from __future__ import annotations

import numpy as np

TOOLS = ("rlbisect", "peer")


def wrong_count(rows: list[dict], tool: str) -> int:
    """Histories where ``tool`` named a commit other than the culprit."""
    return sum(r[tool][0] is not None and r[tool][0] != r["culprit"] for r in rows)


def _tally(rows: list[dict], tool: str) -> tuple[int, int, float]:
    right = sum(r[tool][0] == r["culprit"] for r in rows)
    return right, wrong_count(rows, tool), float(np.mean([r[tool][1] for r in rows]))


def accurate(right: int, wrong: int, count: int) -> bool:
    """The issue's accuracy bar: right >= 95%, wrong at most 1 in 40."""
    return right >= 0.95 * count and wrong <= count / 40


def block_lines(results: list[dict], labels: list[str], size: int) -> list[str]:
    """Per case and over all cases: the blocks of ``size`` histories where each tool meets the
    accuracy bar and where rlbisect needs fewer mean runs; then the bars over all histories."""
    cases = sorted({r["case"] for r in results})
    by_case = {c: sorted((r for r in results if r["case"] == c), key=lambda r: r["h"])
               for c in cases}
    count = min(len(v) for v in by_case.values()) // size
    if count < 1:
        return [f"--blocks {size}: fewer histories than one block"]
    ok = {c: [] for c in cases}          # per block: (rlbisect accurate, peer accurate, fewer)
    for c, rows in by_case.items():
        for b in range(count):
            block = rows[b * size:(b + 1) * size]
            (r1, w1, m1), (r2, w2, m2) = (_tally(block, t) for t in TOOLS)
            ok[c].append((accurate(r1, w1, size), accurate(r2, w2, size), m1 < m2))
    lines = [f"\nblocks of {size} histories ({count} per case): in how many each bar holds",
             f"{'case':<34} | rlbisect accurate | peer accurate | rlbisect fewer runs | "
             "rlbisect both"]
    for c in cases:
        a, p, f = (sum(x[i] for x in ok[c]) for i in range(3))
        both = sum(x[0] and x[2] for x in ok[c])
        lines.append(f"{labels[c]:<34} | {a:>8}/{count:<8} | {p:>6}/{count:<6} | "
                     f"{f:>10}/{count:<8} | {both:>6}/{count}")
    a, p, f = (sum(all(ok[c][b][i] for c in cases) for b in range(count)) for i in range(3))
    both = sum(all(ok[c][b][0] and ok[c][b][2] for c in cases) for b in range(count))
    lines.append(f"{'every case at once':<34} | {a:>8}/{count:<8} | {p:>6}/{count:<6} | "
                 f"{f:>10}/{count:<8} | {both:>6}/{count}")
    lines.append(f"\nthe same bars as rates over all {count * size} histories per case "
                 "(right >= 95%, wrong <= 2.5%, fewer mean runs)")
    for c in cases:
        rows = by_case[c][:count * size]
        cells = []
        for t in TOOLS:
            right, wrong, mean = _tally(rows, t)
            share = 100 / len(rows)
            cells.append(f"{t} {share * right:5.1f}% right {share * wrong:4.1f}% wrong "
                         f"{mean:6.1f} runs")
        lines.append(f"{labels[c]:<34} | " + " | ".join(cells))
    return lines
