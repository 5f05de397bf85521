"""Bisect a real verl fix over verl's own history, with the shipped checks as predicate.

Each case is a window of verl's real history (a bug from verl's issue tracker, a window where
nothing should fire, or one reaching back to commits the adapter cannot run on) and the answer it
must end with: the known fix commit, "BAD passes" (exit 5: nothing to bisect), or no answer because
only skipped commits are left (exit 3). Every case runs

    python -m rlbisect run GOOD..BAD --repo CLONE --adapter rlbisect.frameworks.verl:demo
        [--find-fix] [--adapter-opt K=V ...] --no-cache --json ...

so each probe imports verl from its own checkout (the invariants predicate puts it first on
sys.path) with this interpreter's torch and transformers. The table shows the commit named, whether
it is the expected answer, probes, wall time, skips (by cause) and probes judged from an exception
("raised"): the acceptance is a right answer or skips, never a verdict drawn from an adapter crash.

The bug: verl#6278. On the padded path (use_remove_padding=False) the FSDP engine built the
attention mask of the whole prompt+response from the response-only loss_mask, so the policy's
forward attended to the wrong tokens; fixed by verl#6345 (baccd33a0, 2026-05-14). Checks 2 and 5
and the run-level log-prob checks fail before it. The windows are on verl's main line
(github.com/verl-project/verl, formerly volcengine/verl): v0.7.1 is a release branch off it.

This script never fetches: bring a clone yourself (`git clone https://github.com/verl-project/verl`,
then `git submodule update --init recipe`: since 2bb42bae6 (2026-01-06) every commit records the
verl-recipe submodule, and a probe whose submodule commit is not in the local clone is skipped
for "machinery"; 9 commits of 2026-01-05..08, v0.7.0 among them, record verl-recipe commits that a
clone of it (to 2026-08-07) lacks: those stay skips).

Usage: python benchmarks/bench_verl_history.py --verl-clone /work/verl-history [--cases fix-6345,quiet]
           [--json results.json] [--timeout 600] [--python /work/venvs/verl-0.9.1/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ADAPTER = "rlbisect.frameworks.verl:demo"
FIX_6345 = "baccd33a0125735b497290e11beb28b1a13bd6ad"
# 9a70e2358 (verl#6150, 2026-04-29): forward_step honours the configured dtype. Before it the
# forward ran under bf16 autocast whatever the config, which fails the fp32 checks on its own;
# `rlbisect run` has no --thresholds, so the narrow window starts where only the mask bug is left.
DTYPE_FIX = "9a70e2358"
# verl on main imports with transformers 5 from 19f0bd879 (verl#5445, 2026-03-03); before it
# `verl.utils.model` asks for AutoModelForVision2Seq and the adapter cannot run (exit 125).

# `expect` is a commit (the answer must be it) or an outcome the exit code names. The windows use
# tags where they can; a clone whose tags differ can name its own with --window NAME=GOOD..BAD.
CASES: list[dict] = [
    {
        "name": "fix-6345",
        "what": "padded path: attention mask built from the response-only loss_mask",
        "links": ["https://github.com/verl-project/verl/issues/6278", "https://github.com/verl-project/verl/pull/6345"],
        "window": f"{DTYPE_FIX}..v0.8.0", "find_fix": True, "opts": {}, "expect": FIX_6345,
    },
    {
        # from the 0.7.0 release: the older commits do not import with transformers 5 (a skip if
        # probed), the next ones fail for the bf16 forward as well; the first passing one is the fix
        "name": "fix-6345-wide",
        "what": "as fix-6345, from verl 0.7.0 to 0.8.0 (703 commits)",
        "links": ["https://github.com/verl-project/verl/pull/6345"],
        "window": "v0.7.0..v0.8.0", "find_fix": True, "opts": {}, "expect": FIX_6345,
    },
    {
        # every check must pass at BAD, so the run ends with "BAD passes", never a culprit
        "name": "quiet",
        "what": "default settings over the 0.8.0 -> 0.9.0 release window",
        "links": [],
        "window": "v0.8.0..v0.9.0", "find_fix": False, "opts": {}, "expect": "bad-passes",
    },
    {
        "name": "quiet-head",
        "what": "default settings from 0.8.0 to the newest commit of the clone's main",
        "links": [],
        "window": "v0.8.0..HEAD", "find_fix": False, "opts": {}, "expect": "bad-passes",
    },
    {
        # as a regression: the checks fail from the first commit that imports (19f0bd879) on, and
        # the commits before it are skipped, so the honest answer is "one of these", never a
        # skipped commit called good or bad. GOOD sits just before the boundary: from v0.7.0 git
        # must skip each of the 281 unrunnable commits (4 s each) before it gives up
        "name": "old-skips",
        "what": "the commits where verl starts importing with transformers 5, up to the last bf16-forward one",
        "links": ["https://github.com/verl-project/verl/pull/5445"],
        "window": f"19f0bd879~6..{DTYPE_FIX}~1", "find_fix": False, "opts": {}, "expect": "skips",
    },
]
OUTCOME = {0: "found", 3: "skips", 5: "bad-passes", 6: "good-fails"}


def git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def resolve(clone: Path, window: str) -> tuple[str, str] | None:
    """GOOD..BAD as full SHAs, or None when the clone lacks one of them (an older or newer clone)."""
    try:
        return tuple(git(clone, "rev-parse", "--verify", f"{rev}^{{commit}}")  # type: ignore[return-value]
                     for rev in window.split(".."))
    except subprocess.CalledProcessError:
        return None


def command(case: dict, good: str, bad: str, clone: Path, out: Path, args) -> list[str]:
    cmd = [args.python, "-m", "rlbisect", "run", f"{good}..{bad}", "--repo", str(clone),
           "--adapter", ADAPTER, "--json", str(out)]
    # cached verdicts would make the times meaningless and hide a probe that now behaves otherwise
    cmd += [] if args.cache else ["--no-cache"]
    cmd += ["--find-fix"] if case["find_fix"] else []
    cmd += ["--timeout", str(args.timeout)] if args.timeout else []
    for key, value in case["opts"].items():
        cmd += ["--adapter-opt", f"{key}={json.dumps(value)}"]
    return cmd + list(args.extra)


def summarize(case: dict, result: dict, seconds: float, code: int) -> dict:
    probes = result.get("probes") or []
    skips: dict[str, int] = {}
    for p in probes:
        if p.get("verdict") == "skip":
            skips[p.get("cause", "?")] = skips.get(p.get("cause", "?"), 0) + 1
    # a probe judged from an exception: verl's own (legitimately bad) or the adapter not fitting
    # this commit -- listed with its reason so a reader can tell which
    raised = [f"{p['commit'][:10]}: {p.get('reason', '')}" for p in probes if p.get("cause") == "raised"]
    named = result.get("first_bad") if code == 0 else None
    outcome = OUTCOME.get(code, f"exit {code}")
    expect = case["expect"]
    if expect in OUTCOME.values():      # an outcome: no culprit may be named
        right = outcome == expect
    else:                               # a commit: the answer must be it
        right = named is not None and named.startswith(expect)
    return {"case": case["name"], "window": case["window"], "mode": "find-fix" if case["find_fix"] else "regression",
            "opts": case["opts"], "expect": expect, "exit_code": code, "outcome": outcome, "named": named,
            "candidates": result.get("candidates") or [], "right": bool(right), "probes": len(probes),
            "verify": result.get("n_verify", 0), "seconds": round(seconds, 1), "skips": skips, "raised": raised,
            "message": result.get("message", ""), "links": case["links"],
            "probe_log": [{k: p.get(k) for k in ("commit", "term", "verdict", "cause", "seconds", "reason")}
                          for p in probes]}


def run_case(case: dict, clone: Path, args) -> dict:
    ends = resolve(clone, case["window"])
    if ends is None:
        return {"case": case["name"], "window": case["window"], "outcome": "not in this clone", "right": False,
                "skips": {}, "raised": [], "probes": 0, "seconds": 0.0, "named": None, "links": case["links"]}
    with tempfile.TemporaryDirectory(prefix="bench-verl-history-") as tmp:
        out = Path(tmp) / "run.json"
        cmd = command(case, *ends, clone, out, args)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}    # threads only contend on 2 shared cores
        if args.verbose:
            print("$", " ".join(cmd), flush=True)
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=not args.verbose, text=True)
        seconds = time.perf_counter() - start
        result = json.loads(out.read_text()) if out.is_file() else {}
    row = summarize(case, result, seconds, proc.returncode)
    row["command"] = " ".join(cmd).replace(str(out), "OUT.json")
    if not result and proc.stderr:
        row["message"] = proc.stderr.strip().splitlines()[-1]
    return row


def table(rows: list[dict]) -> str:
    head = f"{'case':14} {'window':25} {'outcome':11} {'named':11} {'right':5} {'probes':>6} {'time':>7}  skips / raised"
    lines = [head, "-" * len(head)]
    for r in rows:
        skips = ", ".join(f"{n} {c}" for c, n in sorted(r["skips"].items())) or "0"
        named = (r["named"] or "-")[:10]
        lines.append(f"{r['case']:14} {r['window']:25} {r['outcome']:11} {named:11} {'yes' if r['right'] else 'NO':5} "
                     f"{r['probes']:>6} {r['seconds']:>6.0f}s  {skips} / {len(r['raised'])}")
        for why in r["raised"]:
            lines.append(f"{'':15}raised: {why}")
        if r["outcome"] == "skips" and r.get("candidates"):
            lines.append(f"{'':15}candidates: {' '.join(c[:10] for c in r['candidates'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verl-clone", required=True, type=Path, help="a local clone of verl (never fetched here)")
    ap.add_argument("--cases", help="comma-separated case names (default: all): " + ", ".join(c["name"] for c in CASES))
    ap.add_argument("--window", action="append", default=[], metavar="NAME=GOOD..BAD",
                    help="another window for a case (a clone with other tags)")
    ap.add_argument("--json", type=Path, help="also write the rows (with every probe) as JSON here")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per probe (a killed probe is a skip)")
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter that runs rlbisect and its probes: one with verl's dependencies")
    ap.add_argument("--cache", action="store_true", help="let rlbisect read and write its verdict cache in the clone")
    ap.add_argument("--verbose", action="store_true", help="show each command and rlbisect's own output")
    ap.add_argument("extra", nargs="*", help="after --: more options for every `rlbisect run`")
    args = ap.parse_args(argv)
    clone = args.verl_clone.resolve()
    if not (clone / ".git").exists() and not (clone / "HEAD").is_file():
        ap.error(f"{clone} is not a clone of verl")
    windows = dict(w.split("=", 1) for w in args.window)
    chosen = [c for c in CASES if not args.cases or c["name"] in args.cases.split(",")]
    unknown = set(args.cases.split(",")) - {c["name"] for c in CASES} if args.cases else set()
    if unknown:
        ap.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    print(f"verl clone {clone} at {git(clone, 'log', '-1', '--format=%h %cs')}; rlbisect via {args.python}", flush=True)
    rows = []
    for case in chosen:
        case = {**case, "window": windows.get(case["name"], case["window"])}
        rows.append(run_case(case, clone, args))
        print("\n".join(table(rows[-1:]).splitlines()[2:]), flush=True)     # the case's row, as it ends
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"clone": str(clone), "head": git(clone, "rev-parse", "HEAD"), "rows": rows},
                                        indent=1))
        print(f"wrote {args.json}")
    # exit 1 when any case ended otherwise than expected, so the benchmark can gate a change
    return 0 if all(r["right"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
