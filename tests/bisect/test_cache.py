"""cache.py: tree+predicate keyed results; repeated and resumed bisects re-run nothing known."""

from __future__ import annotations

import pytest

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlbisect.bisect.cache import ProbeCache, predicate_key
from rlbisect.bisect.predicates import Probe
from rlbisect.errors import Cause


def counting_cmd(counter: Path, extra: str = "") -> list[str]:
    """The state-file predicate that appends one line to ``counter`` (outside the repo) per run."""
    return ["sh", "-c", f'echo x >> {counter}; {extra}test "$(cat state)" = good']


def runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


def test_put_get_roundtrip_and_what_is_not_cached(tmp_path):
    cache = ProbeCache(tmp_path / "c" / "cache.jsonl")
    assert cache.put("t1", "c1", "id", Probe("bad", {"exit_code": 1.0}, "exit 1", 0.5))
    assert not cache.put("t2", "c2", "id", Probe("skip", reason="timed out", cause=Cause.TIMEOUT))
    assert not cache.put("t3", "c3", "id", Probe("abort", {"exit_code": 255.0}))
    fresh = ProbeCache(cache.path)
    got = fresh.get("t1", "id")
    assert got is not None and got.verdict == "bad" and got.values == {"exit_code": 1.0}
    assert fresh.get("t1", "other predicate") is None
    assert fresh.get("t2", "id") is None and fresh.get("t3", "id") is None
    row = json.loads(cache.path.read_text().splitlines()[0])
    assert row["predicate"] == predicate_key("id") and row["identity"] == "id"
    assert row["commit"] == "c1" and row["tree"] == "t1"


def test_torn_last_line_is_ignored_and_disabled_cache_is_inert(tmp_path):
    path = tmp_path / "cache.jsonl"
    ProbeCache(path).put("t1", "c1", "id", Probe("good"))
    with path.open("a") as f:
        f.write('{"tree": "t2", "predic')
    assert ProbeCache(path).get("t1", "id").verdict == "good"
    off = ProbeCache(tmp_path / "off.jsonl", enabled=False)
    assert not off.put("t", "c", "id", Probe("good")) and off.get("t", "id") is None
    assert not off.path.exists()


def test_second_identical_run_probes_nothing(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 6 + ["bad"] * 10)
    counter = tmp_path / "counter"
    before = r.snapshot()
    code1, _, first = run_cli(["main~15..main", "--repo", str(r.path), "--",
                               *counting_cmd(counter)])
    n = runs(counter)
    assert code1 == 0 and n == first["n_probes"] == 4
    code2, out, second = run_cli(["main~15..main", "--repo", str(r.path), "--",
                                  *counting_cmd(counter)])
    assert code2 == 0 and runs(counter) == n
    assert all(p["cached"] for p in second["probes"]) and "cached)" in out
    assert second["first_bad"] == first["first_bad"] == r.shas[6]
    assert r.snapshot() == before  # the cache is the only change, under .git/rlbisect/
    assert (r.path / ".git" / "rlbisect" / "cache.jsonl").exists()


def test_no_cache_neither_reads_nor_writes(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 3 + ["bad"] * 5)
    counter = tmp_path / "counter"
    args = ["main~7..main", "--repo", str(r.path), "--no-cache", "--", *counting_cmd(counter)]
    _, _, first = run_cli(args)
    _, _, second = run_cli(args)
    assert runs(counter) == first["n_probes"] + second["n_probes"] == 2 * first["n_probes"] > 0
    assert not (r.path / ".git" / "rlbisect").exists()


def test_a_different_command_does_not_reuse_results(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 3 + ["bad"] * 5)
    c1, c2 = tmp_path / "one", tmp_path / "two"
    run_cli(["main~7..main", "--repo", str(r.path), "--", *counting_cmd(c1)])
    _, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--", *counting_cmd(c2)])
    assert runs(c2) == data["n_probes"] > 0 and not any(p["cached"] for p in data["probes"])


def test_timeouts_are_retried_on_the_next_run(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 3 + ["bad"] * 5)
    slow = tmp_path / "slow"
    slow.touch()
    cmd = ["sh", "-c", f'[ -e {slow} ] && sleep 30; test "$(cat state)" = good']
    code, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--timeout", "0.3",
                             "--", *cmd])
    assert code == 3 and {p["verdict"] for p in data["probes"]} == {"skip"}
    slow.unlink()
    code, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--", *cmd])
    assert code == 0 and data["first_bad"] == r.shas[3]
    assert not any(p["cached"] for p in data["probes"])


@pytest.mark.slow
def test_a_killed_run_keeps_its_progress(tiny_repo, tmp_path):
    r = tiny_repo(["good"] * 10 + ["bad"] * 22)  # 31 candidates: 5 probes
    counter, block = tmp_path / "counter", tmp_path / "block"
    block.touch()
    # The third probe hangs while `block` exists: kill rlbisect there.
    cmd = counting_cmd(counter, f'[ -e {block} ] && [ "$(wc -l < {counter})" -ge 3 ] && sleep 60; ')
    base = [sys.executable, "-m", "rlbisect.cli.app", "run", "main~31..main", "--repo", str(r.path)]
    proc = subprocess.Popen([*base, "--", *cmd], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while runs(counter) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    block.unlink()
    out = tmp_path / "resumed.json"
    done = subprocess.run([*base, "--json", str(out), "--", *cmd], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert [p["cached"] for p in data["probes"]] == [True, True, False, False, False]
    assert data["first_bad"] == r.shas[10]
    assert runs(counter) == 3 + 3  # 2 kept + the interrupted one + 3 on the restart


def test_an_unwritable_cache_is_disabled_not_fatal(tmp_path, capsys):
    blocker = tmp_path / "rlbisect"
    blocker.write_text("a file where the cache dir should be")
    cache = ProbeCache(blocker / "cache.jsonl")
    assert not cache.put("t", "c", "id", Probe("good"))
    assert not cache.enabled and "cache disabled" in capsys.readouterr().err


def test_an_edited_predicate_script_is_run_again_not_recalled(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 3 + ["bad"] * 6)
    counter = tmp_path / "runs"
    script = tmp_path / "check.sh"     # outside the repository: no commit's tree holds it
    script.write_text(f'echo x >> {counter}; test "$(cat state)" = good\n')
    first = run_cli(["main~8..main", "--repo", str(r.path), "--", "sh", str(script)])[2]
    assert first["first_bad"] == r.shas[3] and runs(counter) == first["n_probes"]
    again = run_cli(["main~8..main", "--repo", str(r.path), "--", "sh", str(script)])[2]
    assert all(p["cached"] for p in again["probes"]) and runs(counter) == first["n_probes"]
    script.write_text(f'echo x >> {counter}; test "$(cat state)" != bad\n')   # same verdicts, new script
    edited = run_cli(["main~8..main", "--repo", str(r.path), "--", "sh", str(script)])[2]
    assert not any(p["cached"] for p in edited["probes"])
    assert runs(counter) == first["n_probes"] + edited["n_probes"]
