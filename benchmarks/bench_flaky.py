"""`rlbisect run --flaky` against git-bayesect 1.2 on the same noisy histories, side by side.

Six cases, each a failure rate for the commits before the culprit and one from it on (the tools
are told neither): symmetric noise 0.05, 0.1, 0.2; only bad commits pass (0.1); a flaky
predicate gets flakier (good fails 0.05, bad fails 0.5); and the reverse rise (0.2 to 0.6).
A history (COMMITS commits, culprit uniform) fixes the culprit and every run's draw: run r of
either tool on history h fails iff ``hash(seed, h, r) % 1000 < 1000 * rate`` (the rate of that
commit's side; the ``sh`` predicate's hash), so both tools face the same luck, in alternating order.

Per tool and row: right, wrong (rlbisect: exit 0 on a wrong commit; peer: converged on one, GOOD
included), none (rlbisect's exit 3/5/6; the peer past --peer-cap runs, or 30 minutes with --real:
it has no budget of its own), and mean (p95) predicate runs. Other options: ``--help``.

Default: simulated, :func:`rlbisect.bisect.simulate.simulate` and git-bayesect's ``Bisector`` driven
by its ``run`` loop (:mod:`bayesect_peer`). ``--real``: a repository per history and tool, through
each CLI with the ``sh`` predicate; same table run for run. Needs ``git-bayesect==1.2``.

    python benchmarks/bench_flaky.py [--histories 40] [--commits 64] [--seed 2024] [--confidence C]
    python benchmarks/bench_flaky.py --real [--histories 40] [--tools rlbisect,peer]
    python benchmarks/bench_flaky.py --frontier 0.95,0.975,0.99 --histories 200 \
        --plot docs/flaky-frontier.png
    python benchmarks/bench_flaky.py --known-rates [both|choice|stop] --histories 400
    python benchmarks/bench_flaky.py --histories 400 --blocks 40 [--peer-confidence 0.95]
    python benchmarks/bench_flaky.py --pairs 0:0.3,0.4:0.8,0.6:1 --histories 200
    python benchmarks/bench_flaky.py --clean-prior 0 --histories 400   # the prior before issue 37
    python benchmarks/bench_flaky.py --choice chernoff --histories 400  # another rule for the next run
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bayesect_peer  # noqa: E402
from flaky_blocks import block_lines, wrong_count  # noqa: E402
from flaky_plot import plot_frontier  # noqa: E402
import flaky_told  # noqa: E402
from flaky_choice import CHOICES  # noqa: E402
from flaky_told import search_rlbisect  # noqa: E402

from rlbisect.bisect import bayes, bayes_fit  # noqa: E402

#: (label, failure rate before the culprit, failure rate from the culprit on)
CASES = (("symmetric 0.05", 0.05, 0.95), ("symmetric 0.1", 0.1, 0.9),
         ("symmetric 0.2", 0.2, 0.8), ("only bad passes 0.1", 0.0, 0.9),
         ("flakier: 0.05 -> 0.5", 0.05, 0.5), ("flakier: 0.2 -> 0.6", 0.2, 0.6))
TOOLS = ("rlbisect", "peer")


def draw(seed: int, counter: int) -> int:
    """The predicate's random number for run ``counter`` (1, 2, ...): 0..999, as the script
    computes it (murmur3's 32-bit finalizer: consecutive runs are independent draws)."""
    m = 0xFFFFFFFF
    x = (counter * 2654435761 + seed * 2246822519 + 374761393) & m
    x ^= x >> 16
    x = (x * 2246822507) & m
    x ^= x >> 13
    x = (x * 3266489909) & m
    return (x ^ (x >> 16)) % 1000


def script(counter: Path, seed: int, before: float, after: float) -> list[str]:
    """sh predicate: fail with the rate of this commit's side (its ``state`` file)."""
    return ["sh", "-c",
            f'c=$(cat {counter} 2>/dev/null || echo 0); c=$((c + 1)); echo $c > {counter}\n'
            f'x=$(( (c * 2654435761 + {seed} * 2246822519 + 374761393) & 4294967295 ))\n'
            'x=$(( x ^ (x >> 16) )); x=$(( (x * 2246822507) & 4294967295 ))\n'
            'x=$(( x ^ (x >> 13) )); x=$(( (x * 3266489909) & 4294967295 ))\n'
            'x=$(( (x ^ (x >> 16)) % 1000 ))\n'
            f'r={round(before * 1000)}; [ "$(cat state)" = bad ] && r={round(after * 1000)}\n'
            '[ $x -lt $r ] && exit 1\nexit 0\n']


def history(seed: int, case: int, h: int, n: int) -> tuple[int, int]:
    """(culprit position 1..n, the seed of its run draws) of history ``h`` of a case."""
    hseed = seed * 1000 + case * 100_000 + h
    return random.Random(hseed).randint(1, n), hseed


def simulate_history(args: tuple) -> dict:
    """Both tools on one simulated history, in the alternating order."""
    case, h, n, seed, peer_cap, (confidence, peer_confidence), known = args
    _, before, after = CASES[case]
    culprit, hseed = history(seed, case, h, n)
    out = {}
    for tool in (TOOLS if h % 2 == 0 else TOOLS[::-1]):
        count = [0]

        def fails(pos: int) -> bool:
            count[0] += 1
            return draw(hseed, count[0]) < round(1000 * (after if pos >= culprit else before))
        if tool == "rlbisect":
            decision = search_rlbisect(n, fails, confidence, (before, after), known)
            named = decision.first_bad if decision.status == "found" else None
            out[tool] = (named, count[0], decision.status)
        else:
            res = bayesect_peer.simulate(n, fails, peer_confidence, max_runs=peer_cap)
            out[tool] = (res.culprit, count[0], "found" if res.culprit is not None else "none")
    return {"case": case, "h": h, "culprit": culprit, **out}


def build(path: Path, commits: int, culprit: int) -> None:
    """A line of ``commits`` commits whose ``state`` file is bad from position ``culprit`` on
    (the history of ``bench_bisect_overhead.py``, built here so this file needs only git)."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    stream = []
    for i in range(commits):
        body, msg = ("bad\n" if i >= culprit else "good\n"), f"commit {i}\n"
        stream.append(f"commit refs/heads/main\n"
                      f"committer B <b@example.com> {1_700_000_000 + i} +0000\n"
                      f"data {len(msg)}\n{msg}"
                      f"M 100644 inline state\ndata {len(body)}\n{body}"
                      f"M 100644 inline n\ndata {len(str(i)) + 1}\n{i}\n\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=path, input="".join(stream), text=True,
                   check=True)
    subprocess.run(["git", "reset", "-q", "--hard", "main"], cwd=path, check=True)


def real_history(args: tuple) -> dict:
    """Both tools on one real repository (each in its own clone)."""
    case, h, n, seed, tools, tmp, confidence = args
    _, before, after = CASES[case]
    culprit, hseed = history(seed, case, h, n)
    base = Path(tmp) / f"c{case}h{h}"
    build(base / "origin", n + 1, culprit)
    good, bad = f"main~{n}", "main"
    out: dict = {"case": case, "culprit": culprit}
    for tool in (tools if h % 2 == 0 else tools[::-1]):
        repo = base / tool
        subprocess.run(["git", "clone", "-q", str(base / "origin"), str(repo)], check=True)
        cmd = script(base / f"{tool}.count", hseed, before, after)
        t0 = time.perf_counter()
        if tool == "rlbisect":
            js = base / "rlbisect.json"
            proc = subprocess.run([sys.executable, "-m", "rlbisect.cli.app", "run", f"{good}..{bad}",
                                   "--repo", str(repo), "--flaky", "--confidence",
                                   str(confidence), "--json", str(js), "--",
                                   *cmd], capture_output=True, text=True)
            data = json.loads(js.read_text()) if js.exists() else {}
            code = data.get("exit_code", proc.returncode)
            sha = data.get("first_bad") if code == 0 else None
            runs = int(data.get("n_runs", 0))
        else:
            res, sha, code = bayesect_peer.run_real(repo, good, bad, cmd, confidence)
            runs = res.runs
        named = None
        if sha:
            pos = subprocess.run(["git", "rev-list", "--count", f"{good}..{sha}"], cwd=repo,
                                 capture_output=True, text=True, check=True).stdout.strip()
            named = int(pos)
        out[tool] = (named, runs, f"exit {code}", time.perf_counter() - t0)
    shutil.rmtree(base, ignore_errors=True)
    return out


def parse_pairs(text: str) -> tuple:
    """``--pairs "0:0.3,0.6:1"`` -> cases like :data:`CASES`; bad input exits with a reason."""
    try:
        pairs = [tuple(float(x) for x in p.split(":")) for p in text.split(",") if p.strip()]
    except ValueError:
        pairs = []
    if not pairs or any(len(p) != 2 or not 0 <= min(p) <= max(p) <= 1 for p in pairs):
        sys.exit(f"bench_flaky: --pairs wants F0:F1[,F0:F1...], rates in [0, 1], not {text!r}")
    return tuple((f"{a:g} -> {b:g}", a, b) for a, b in pairs)


def row_label(case: int) -> str:
    label, before, after = CASES[case]
    rates = f"{before:g} -> {after:g}"
    return label if label == rates else f"{label} ({rates})"


def table(results: list[dict], histories: int, tools: tuple[str, ...]) -> list[str]:
    """One row per case: right, wrong-with-a-culprit, no answer, mean (p95) runs per tool."""
    head = " | ".join(f"{t}: right wrong none  mean(p95) runs" for t in tools)
    lines = [f"{'case (rate before -> from the culprit on)':<34} | {head}"]
    for c in range(len(CASES)):
        rows = [r for r in results if r["case"] == c]
        if not rows:
            continue
        cells = []
        for t in tools:
            right = sum(r[t][0] == r["culprit"] for r in rows)
            wrong = wrong_count(rows, t)
            runs = np.array([r[t][1] for r in rows])
            cells.append(f"{right:>5}/{histories} {wrong:>3} {len(rows) - right - wrong:>4}  "
                         f"{runs.mean():>6.1f} ({np.percentile(runs, 95):>3.0f})")
        lines.append(f"{row_label(c):<34} | " + " | ".join(cells))
    return lines


def measure(args: argparse.Namespace, cases: list[int], n: int, tools: tuple[str, ...],
            confidence: float) -> list[dict]:
    """Every history of every case, both tools, at one confidence level."""
    with tempfile.TemporaryDirectory(prefix="rlbisect-bench-flaky-") as tmp, \
            Pool(args.jobs) as pool:
        if args.real:
            jobs = [(c, h, n, args.seed, tools, tmp, confidence) for c in cases
                    for h in range(args.histories)]
            return pool.map(real_history, jobs, chunksize=1)
        levels = (confidence, confidence if args.peer_confidence is None else args.peer_confidence)
        jobs = [(c, h, n, args.seed, args.peer_cap, levels, args.known_rates) for c in cases
                for h in range(args.histories)]
        return pool.map(simulate_history, jobs, chunksize=4)


def frontier_points(results: dict[float, list[dict]], case: int) -> dict[str, list[tuple]]:
    """Per tool, one (confidence, mean runs, wrong answers) per level, for one case."""
    out: dict[str, list[tuple]] = {t: [] for t in TOOLS}
    for level, rows in sorted(results.items()):
        rows = [r for r in rows if r["case"] == case]
        for t in TOOLS:
            wrong = wrong_count(rows, t)
            out[t].append((level, float(np.mean([r[t][1] for r in rows])), wrong))
    return out


def frontier(args: argparse.Namespace, cases: list[int], n: int, levels: list[float]) -> None:
    """Both tools at every level: per case, wrong answers against mean runs."""
    results = {}
    for level in levels:
        t0 = time.perf_counter()
        results[level] = measure(args, cases, n, TOOLS, level)
        print(f"confidence {level}: {time.perf_counter() - t0:.0f}s", flush=True)
    print(f"\n{'case':<34} {'confidence':>10} | rlbisect: wrong, mean runs | "
          "peer: wrong, mean runs")
    for c in cases:
        points = frontier_points(results, c)
        for (level, runs, wrong), (_, p_runs, p_wrong) in zip(points["rlbisect"], points["peer"]):
            print(f"{CASES[c][0]:<34} {level:>10g} | {wrong:>4} {runs:>7.1f} | "
                  f"{p_wrong:>4} {p_runs:>7.1f}")
    if args.plot:
        plot_frontier({CASES[c][0]: frontier_points(results, c) for c in cases}, TOOLS, args.plot, args.histories)
        print(f"plot: {args.plot}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=64, help="commits per history, GOOD included")
    ap.add_argument("--histories", type=int, default=40, help="histories per case")
    ap.add_argument("--seed", type=int, default=2024, help="seed of culprits and run draws")
    ap.add_argument("--cases", default="", help="comma-separated case numbers 0..5 (all)")
    ap.add_argument("--pairs", default="", metavar="F0:F1,...",
                    help="other cases instead: failure rates before:from the culprit")
    ap.add_argument("--confidence", type=float, default=0.95, help="both tools' --confidence")
    ap.add_argument("--peer-confidence", type=float,
                    help="simulated: the peer's --confidence, if not --confidence")
    ap.add_argument("--blocks", type=int, default=0, metavar="SIZE",
                    help="simulated: count issue 15's bars per block of SIZE histories")
    ap.add_argument("--frontier", default="",
                    help="comma-separated confidence levels: both tools at each (simulated)")
    ap.add_argument("--plot", type=Path, help="--frontier: draw wrong answers against runs")
    ap.add_argument("--known-rates", nargs="?", const="both", default="",
                    choices=("both", "choice", "stop"),
                    help="simulated: tell rlbisect each case's true rates (what not knowing "
                         "costs); 'choice' or 'stop' tells only that half of the search")
    ap.add_argument("--real", action="store_true", help="real repositories through both CLIs")
    ap.add_argument("--tools", default="rlbisect,peer", help="--real: which tools to run")
    ap.add_argument("--peer-cap", type=int, default=2000,
                    help="simulated peer: give up (no answer) after this many runs")
    ap.add_argument("--jobs", type=int, default=2, help="histories measured in parallel")
    ap.add_argument("--details", action="store_true", help="also print every history")
    ap.add_argument("--clean-prior", type=float, metavar="W",
                    help="simulated: rlbisect's prior weight of a clean predicate (default: as "
                         "shipped; 0: the prior before issue 37)")
    ap.add_argument("--choice", choices=sorted(CHOICES), default="",
                    help="simulated: another rule for rlbisect's next run (benchmarks/flaky_choice.py)")
    args = ap.parse_args()
    if (why := bayesect_peer.available()):
        sys.exit(f"bench_flaky: {why}")
    levels = [float(x) for x in args.frontier.split(",") if x.strip()]
    if not all(0.5 < c < 1 for c in [args.confidence, *levels]):
        sys.exit("bench_flaky: confidence levels must lie between 0.5 and 1")
    peer_level = args.peer_confidence is not None
    if args.real and (levels or args.known_rates or peer_level or args.blocks) \
            or levels and (peer_level or args.blocks):
        sys.exit("bench_flaky: --frontier, --known-rates, --peer-confidence and --blocks are "
                 "simulated only, and --frontier sets both tools' levels alone")
    if peer_level and not 0.5 < args.peer_confidence < 1 or args.blocks < 0:
        sys.exit("bench_flaky: --peer-confidence must lie between 0.5 and 1, --blocks >= 1")
    if args.plot and not levels:
        sys.exit("bench_flaky: --plot draws the frontier (add --frontier LEVELS)")
    if args.clean_prior is not None:
        if args.real or not 0 <= args.clean_prior < 1:
            sys.exit("bench_flaky: --clean-prior is simulated only, in [0, 1)")
        bayes_fit.CLEAN_PRIOR = args.clean_prior     # the pool's workers fork after this
    if args.choice and (args.real or args.known_rates):
        sys.exit("bench_flaky: --choice is simulated only, without --known-rates")
    flaky_told.CHOICE = args.choice               # the pool's workers fork after this
    if args.pairs:
        global CASES
        CASES = parse_pairs(args.pairs)
    n = args.commits - 1
    cases = [int(c) for c in args.cases.split(",")] if args.cases else list(range(len(CASES)))
    tools = tuple(t for t in args.tools.split(",") if t in TOOLS) if args.real else TOOLS
    mode = "real git, both CLIs" if args.real else "simulated, both searches in-process"
    conf = ",".join(f"{c:g}" for c in levels) if levels else f"{args.confidence:g}"
    peer_conf = f"{args.peer_confidence:g}" if peer_level else conf
    told = {"": "", "both": ", told the true rates",
            "choice": ", told the true rates for choosing runs only",
            "stop": ", told the true rates for stopping only"}[args.known_rates]
    print(f"{args.commits}-commit histories, {args.histories} per case, seed {args.seed}, {mode}; "
          f"rlbisect --flaky (confidence {conf}, budget {bayes.default_max_runs(n)} runs, clean "
          f"prior {bayes_fit.CLEAN_PRIOR:g}{told}{', choice ' + args.choice if args.choice else ''}) vs "
          f"git-bayesect {bayesect_peer.VERSION} run --confidence {peer_conf}")
    if levels:
        return frontier(args, cases, n, levels)
    t0 = time.perf_counter()
    results = measure(args, cases, n, tools, args.confidence)
    if args.details:
        for r in results:
            print(f"case {r['case']} culprit {r['culprit']:>2}: "
                  + "  ".join(f"{t} named {r[t][0]} in {r[t][1]} runs ({r[t][2]})" for t in tools))
    print("\n".join(table(results, args.histories, tools)))
    statuses: dict[str, int] = {}
    for r in results:
        if "rlbisect" in r:
            statuses[r["rlbisect"][2]] = statuses.get(r["rlbisect"][2], 0) + 1
    print(f"rlbisect outcomes: {statuses}; {time.perf_counter() - t0:.0f}s")
    if args.blocks:
        print("\n".join(block_lines(results, [row_label(c) for c in range(len(CASES))],
                                     args.blocks)))


if __name__ == "__main__":
    main()
