"""`rlbisect demo`: every fault the invariants catch, found at several positions including the
first and the last commit, in ceil(log2 N) probes; the culprit fails `rlbisect check`, its parent
passes. Each probe is a real subprocess running the checks on the commit's code (~3 s)."""

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import git, install_hooks
from typer.testing import CliRunner

from history_fixtures import INVARIANT_FAULTS
from rlbisect.cli.app import app

pytestmark = pytest.mark.slow
runner = CliRunner()
CASES = [(f, at) for f in INVARIANT_FAULTS for at in (1, 4)] + [("sign_flip", 2), ("mask_shift", 3)]


def demo(tmp_path, *args):
    out = tmp_path / "demo.json"
    r = runner.invoke(app, ["demo", "--json", str(out), *args])
    return r, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.parametrize("fault, bad_at", CASES)
def test_demo_finds_the_fault_commit(tmp_path, fault, bad_at):
    r, doc = demo(tmp_path, "--fault", fault, "--commits", "4", "--bad-at", str(bad_at))
    assert r.exit_code == 0, r.output
    assert doc["first_bad"] == doc["fault_commit"] and doc["status"] == "found"
    assert doc["n_probes"] <= math.ceil(math.log2(4)) + 1
    assert doc["diagnosis"]["parent_verdict"] == "good" and doc["diagnosis"]["first_bad_verdict"] == "bad"
    assert "found the commit that injected the fault" in r.output and "@@" in r.output   # the diff


def test_default_demo_takes_three_probes_and_the_culprit_fails_check_while_its_parent_passes(tmp_path):
    keep = tmp_path / "history"
    r, doc = demo(tmp_path, "--keep", str(keep))
    assert r.exit_code == 0 and doc["n_probes"] == 3 == math.ceil(math.log2(8))
    assert doc["first_bad"] == doc["fault_commit"]
    parent = git(keep, "rev-parse", doc["first_bad"] + "^")
    codes = {}
    for name, sha in (("first_bad", doc["first_bad"]), ("parent", parent)):
        tree = tmp_path / name
        git(keep, "worktree", "add", "-q", "--detach", str(tree), sha)
        env = dict(os.environ, PYTHONPATH=str(tree))
        codes[name] = subprocess.run([sys.executable, "-c", "from rlbisect.cli.app import main; main()", "check"],
                                     cwd=tree, env=env, capture_output=True, text=True, timeout=300).returncode
    assert codes == {"first_bad": 1, "parent": 0}
    install_hooks(keep / ".git", tmp_path / "hooks-ran")
    again = runner.invoke(app, ["demo", "--keep", str(keep)])
    assert again.exit_code == 0 and "3 probes (3 cached, recorded" in again.output
    # a quick predicate: the culprit and its parent run again, as often each (3 under 1 s a probe, else 1)
    reruns = re.search(r"and (\d+) verification runs", again.output)
    assert reruns and int(reruns.group(1)) in (2, 6), again.output
    assert not (tmp_path / "hooks-ran").exists()   # no hook of the kept repository ran


def test_demo_bad_input(tmp_path):
    assert runner.invoke(app, ["demo", "--fault", "nope"]).exit_code == 2
    assert runner.invoke(app, ["demo", "--commits", "3", "--bad-at", "5"]).exit_code == 2
    assert not list(Path(tempfile.gettempdir()).glob(f"rlbisect-{os.getpid()}-demo-*"))   # no leftovers
    other = tmp_path / "x"
    other.mkdir()
    (other / "f").write_text("not a history")
    assert runner.invoke(app, ["demo", "--keep", str(other)]).exit_code == 2


def test_short_run_finds_the_fault_the_invariants_miss(tmp_path):
    r, doc = demo(tmp_path, "--fault", "entropy_sign", "--predicate", "short-run")
    assert r.exit_code == 0, r.output
    assert doc["first_bad"] == doc["fault_commit"] and doc["n_probes"] == 3
    bad = next(p for p in doc["probes"] if p["commit"] == doc["first_bad"])
    moved = [m for m in bad["evidence"]["metrics"] if m["decides"]]
    assert moved and all(m["p"] < 0.05 / 4 / len(bad["evidence"]["metrics"]) for m in moved)


def test_the_readme_quotes_what_the_demo_prints():
    """README figures must not drift: the quoted demo is re-run (commit ids are deterministic)."""
    import re
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    quoted = readme.split("$ rlbisect demo --fault sampler_temp\n", 1)[1].split("  ...\n", 1)[0]
    r = runner.invoke(app, ["demo", "--fault", "sampler_temp"])
    assert r.exit_code == 0, r.output
    printed = r.output[r.output.index("[1] "):]

    def norm(text: str) -> str:   # probe times vary; so does float round-off (1e-6) from one CPU to another
        return re.sub(r" +[-+]?\d(\.\d+)?e-0[5-9]", " ~0", re.sub(r" +\d+\.\d+s  ", " Xs  ", text))
    assert norm(printed).startswith(norm(quoted)), "regenerate the README block:\n" + printed[:1500]
