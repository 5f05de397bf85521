"""What benchmarks/bench_trl_history.py and bench_verl_history.py share: each case of a framework's
real history bisected by `rlbisect run` with the shipped checks as predicate, summed up as a row
(the commit named, right or not, probes, time, skips by cause, probes judged from an exception).

A case: {"name", "what", "links", "window": "GOOD..BAD", "find_fix", "opts": adapter options,
"expect": a commit, or one of OUTCOME's values; optionally "checks": the checks the predicate runs}.
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
           "--adapter", args.adapter, "--json", str(out)]
    # cached verdicts would make the times meaningless and hide a probe that now behaves otherwise
    cmd += [] if args.cache else ["--no-cache"]
    cmd += ["--find-fix"] if case["find_fix"] else []
    cmd += ["--timeout", str(args.timeout)] if args.timeout else []
    for key, value in case["opts"].items():
        cmd += ["--adapter-opt", f"{key}={json.dumps(value)}"]
    cmd += ["--checks", ",".join(case["checks"])] if case.get("checks") else []
    return cmd + list(args.extra)


def summarize(case: dict, result: dict, seconds: float, code: int) -> dict:
    probes = result.get("probes") or []
    skips: dict[str, int] = {}
    for p in probes:
        if p.get("verdict") == "skip":
            skips[p.get("cause", "?")] = skips.get(p.get("cause", "?"), 0) + 1
    # a probe judged from an exception: the code under test's own (legitimately bad) or the adapter
    # not fitting this commit -- listed with its reason so a reader can tell which
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
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        out = Path(tmp) / "run.json"
        cmd = command(case, *ends, clone, out, args)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}    # 2 threads made a step 30x slower on 2 cores
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
    c, w = (max([len(r[k]) for r in rows] + [6]) for k in ("case", "window"))
    head = f"{'case':{c}} {'window':{w}} {'outcome':11} {'named':11} {'right':5} {'probes':>6} {'time':>7}  skips / raised"
    lines = [head, "-" * len(head)]
    for r in rows:
        skips = ", ".join(f"{n} {cause}" for cause, n in sorted(r["skips"].items())) or "0"
        named = (r["named"] or "-")[:10]
        lines.append(f"{r['case']:{c}} {r['window']:{w}} {r['outcome']:11} {named:11} {'yes' if r['right'] else 'NO':5} "
                     f"{r['probes']:>6} {r['seconds']:>6.0f}s  {skips} / {len(r['raised'])}")
        for why in r["raised"]:
            lines.append(f"{'':{c + 1}}raised: {why}")
        if r["outcome"] == "skips" and r.get("candidates"):
            lines.append(f"{'':{c + 1}}candidates: {' '.join(x[:10] for x in r['candidates'])}")
    return "\n".join(lines)


def main(framework: str, adapter: str, cases: list[dict], doc: str, python_help: str,
         argv: list[str] | None = None) -> int:
    """The command line of a framework's history benchmark (``--<framework>-clone PATH`` ...)."""
    flag = framework.lower()
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument(f"--{flag}-clone", dest="clone", required=True, type=Path,
                    help=f"a local clone of {framework} (never fetched here)")
    ap.add_argument("--cases", help="comma-separated case names (default: all): " + ", ".join(c["name"] for c in cases))
    ap.add_argument("--window", action="append", default=[], metavar="NAME=GOOD..BAD",
                    help="another window for a case (a clone with other tags)")
    ap.add_argument("--json", type=Path, help="also write the rows (with every probe) as JSON here")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per probe (a killed probe is a skip)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs rlbisect and its probes: "
                    + python_help)
    ap.add_argument("--cache", action="store_true", help="let rlbisect read and write its verdict cache in the clone")
    ap.add_argument("--verbose", action="store_true", help="show each command and rlbisect's own output")
    ap.add_argument("extra", nargs="*", help="after --: more options for every `rlbisect run`")
    args = ap.parse_args(argv)
    args.adapter, clone = adapter, args.clone.resolve()
    if not (clone / ".git").exists() and not (clone / "HEAD").is_file():
        ap.error(f"{clone} is not a clone of {framework}")
    windows = dict(w.split("=", 1) for w in args.window)
    chosen = [c for c in cases if not args.cases or c["name"] in args.cases.split(",")]
    unknown = set(args.cases.split(",")) - {c["name"] for c in cases} if args.cases else set()
    if unknown:
        ap.error(f"unknown case(s): {', '.join(sorted(unknown))}")
    print(f"{framework} clone {clone} at {git(clone, 'log', '-1', '--format=%h %cs')}; rlbisect via {args.python}", flush=True)
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


