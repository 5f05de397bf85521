"""cache.py: tree+predicate keyed results; repeated and resumed bisects re-run nothing known."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    # the next row starts on a line of its own: not glued to the torn one and lost with it
    assert ProbeCache(path).put("t3", "c3", "id", Probe("bad"))
    assert ProbeCache(path).get("t3", "id").verdict == "bad" and ProbeCache(path).get("t1", "id").verdict == "good"
    off = ProbeCache(tmp_path / "off.jsonl", enabled=False)
    assert not off.put("t", "c", "id", Probe("good")) and off.get("t", "id") is None
    assert not off.path.exists()


def test_second_identical_run_probes_nothing(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 6 + ["bad"] * 10)
    counter = tmp_path / "counter"
    before = r.snapshot()
    code1, _, first = run_cli(["main~15..main", "--repo", str(r.path), "--verify", "0", "--",
                               *counting_cmd(counter)])
    n = runs(counter)
    assert code1 == 0 and n == first["n_probes"] == 4
    code2, out, second = run_cli(["main~15..main", "--repo", str(r.path), "--verify", "0", "--",
                                  *counting_cmd(counter)])
    assert code2 == 0 and runs(counter) == n
    assert all(p["cached"] for p in second["probes"]) and "cached)" in out
    assert second["first_bad"] == first["first_bad"] == r.shas[6]
    assert r.snapshot() == before  # the cache is the only change, under .git/rlbisect/
    assert (r.path / ".git" / "rlbisect" / "cache.jsonl").exists()


def test_no_cache_neither_reads_nor_writes(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 3 + ["bad"] * 5)
    counter = tmp_path / "counter"
    args = ["main~7..main", "--repo", str(r.path), "--no-cache", "--verify", "0", "--", *counting_cmd(counter)]
    _, _, first = run_cli(args)
    _, _, second = run_cli(args)
    assert runs(counter) == first["n_probes"] + second["n_probes"] == 2 * first["n_probes"] > 0
    assert not (r.path / ".git" / "rlbisect").exists()


def test_a_different_command_does_not_reuse_results(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 3 + ["bad"] * 5)
    c1, c2 = tmp_path / "one", tmp_path / "two"
    run_cli(["main~7..main", "--repo", str(r.path), "--verify", "0", "--", *counting_cmd(c1)])
    _, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--verify", "0", "--", *counting_cmd(c2)])
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
    code, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--verify", "0", "--", *cmd])
    assert code == 0 and data["first_bad"] == r.shas[3]
    assert not any(p["cached"] for p in data["probes"])


@pytest.mark.slow
def test_a_killed_run_keeps_its_progress(tiny_repo, tmp_path):
    r = tiny_repo(["good"] * 10 + ["bad"] * 22)  # 31 candidates: 5 probes
    counter, block = tmp_path / "counter", tmp_path / "block"
    block.touch()
    # The third probe hangs while `block` exists: kill rlbisect there.
    cmd = counting_cmd(counter, f'[ -e {block} ] && [ "$(wc -l < {counter})" -ge 3 ] && sleep 60; ')
    base = [sys.executable, "-m", "rlbisect.cli.app", "run", "main~31..main", "--repo", str(r.path), "--verify", "0"]
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
    first = run_cli(["main~8..main", "--repo", str(r.path), "--verify", "0", "--", "sh", str(script)])[2]
    assert first["first_bad"] == r.shas[3] and runs(counter) == first["n_probes"]
    again = run_cli(["main~8..main", "--repo", str(r.path), "--verify", "0", "--", "sh", str(script)])[2]
    assert all(p["cached"] for p in again["probes"]) and runs(counter) == first["n_probes"]
    script.write_text(f'echo x >> {counter}; test "$(cat state)" != bad\n')   # same verdicts, new script
    edited = run_cli(["main~8..main", "--repo", str(r.path), "--verify", "0", "--", "sh", str(script)])[2]
    assert not any(p["cached"] for p in edited["probes"])
    assert runs(counter) == first["n_probes"] + edited["n_probes"]


# -- what the cache may answer for, and what --verify catches -------------------------------------

LIMIT_CMD = ["sh", "-c", 'test "$(cat n)" -lt "$LIMIT"']


def test_the_environment_is_part_of_the_identity_shell_bookkeeping_is_not(tiny_repo, run_cli, monkeypatch):
    """The adversary's case: LIMIT=10 then LIMIT=6 over the same commits must not share verdicts."""
    r = tiny_repo(["good"] * 12)
    spec = ["main~11..main", "--repo", str(r.path), "--"]
    monkeypatch.setenv("LIMIT", "10")
    _, _, ten = run_cli(spec + LIMIT_CMD)
    assert ten["first_bad"] == r.shas[10]
    monkeypatch.setenv("LIMIT", "6")
    _, _, six = run_cli(spec + LIMIT_CMD)
    assert six["first_bad"] == r.shas[6] and not any(p["cached"] for p in six["probes"])
    monkeypatch.setenv("SHLVL", "9")             # a new shell is not a new predicate
    monkeypatch.setenv("OLDPWD", "/elsewhere")
    _, _, again = run_cli(spec + LIMIT_CMD)
    assert again["first_bad"] == r.shas[6] and all(p["cached"] for p in again["probes"] if p["role"] != "verify")
    env = again["predicate"]["env"]             # the identity is a JSON object, readable: which variable
    assert env["LIMIT"] == six["predicate"]["env"]["LIMIT"] != ten["predicate"]["env"]["LIMIT"]
    assert "SHLVL" not in env


def test_no_value_of_the_environment_is_written_anywhere(tiny_repo, run_cli, monkeypatch, tmp_path):
    # the identity goes into every cache row, the JSON and the report: a token must not
    r = tiny_repo(["good"] * 3 + ["bad"] * 3)
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value_123")
    report = tmp_path / "r.md"
    code, _, data = run_cli(["main~5..main", "--repo", str(r.path), "--report", str(report), "--",
                             "sh", "-c", 'test "$(cat n)" -lt 3'])
    assert code == 0 and "HF_TOKEN" in data["predicate"]["env"]
    cache = r.path / ".git" / "rlbisect" / "cache.jsonl"
    for text in (json.dumps(data), report.read_text(), cache.read_text()):
        assert "HF_TOKEN" in text and "hf_secret_value_123" not in text
    # nor a digest a dictionary reverses: it is keyed with a secret kept beside the cache
    import hashlib
    key = r.path / ".git" / "rlbisect" / "key"
    assert data["predicate"]["env"]["HF_TOKEN"] != hashlib.sha256(b"HF_TOKEN=hf_secret_value_123").hexdigest()[:16]
    assert key.stat().st_mode & 0o077 == 0
    _, _, again = run_cli(["main~5..main", "--repo", str(r.path), "--", "sh", "-c", 'test "$(cat n)" -lt 3'])
    assert again["predicate"] == data["predicate"] and all(p["cached"] for p in again["probes"] if p["role"] != "verify")


def test_a_file_the_predicate_reads_without_naming_it_is_caught_by_verify(tiny_repo, run_cli, tmp_path):
    """The cache cannot see a file outside the repository that the predicate reads; the default
    verification re-runs the answer's two commits and refuses the stale answer."""
    r = tiny_repo(["good"] * 12)
    limit = tmp_path / "limit"
    limit.write_text("10")
    cmd = ["sh", "-c", f'test "$(cat n)" -lt "$(cat {limit})"']
    spec = ["main~11..main", "--repo", str(r.path), "--"]
    code, _, first = run_cli(spec + cmd)
    assert code == 0 and first["first_bad"] == r.shas[10] and first["n_verify"] == 6
    limit.write_text("6")
    code, out, stale = run_cli(spec + cmd)
    assert code == 3 and stale["first_bad"] is None and stale["status"] == "unsure"
    assert "the predicate is not deterministic" in out and "--no-cache" in out
    code, _, fresh = run_cli(["main~11..main", "--repo", str(r.path), "--no-cache", "--"] + cmd)
    assert code == 0 and fresh["first_bad"] == r.shas[6]


def test_cached_verdicts_that_disagree_are_probed_again_and_said_so(tiny_repo, run_cli, tmp_path):
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    spec = ["main~7..main", "--repo", str(r.path), "--verify", "0", "--"]
    _, _, first = run_cli(spec + counting_cmd(tmp_path / "c1"))
    cache = ProbeCache(r.path / ".git" / "rlbisect" / "cache.jsonl")
    rows = [json.loads(line) for line in cache.path.read_text().splitlines()]
    flipped = {**rows[0], "verdict": "bad" if rows[0]["verdict"] == "good" else "good", "recorded": "x"}
    with cache.path.open("a") as f:                 # the same tree, the same identity, another verdict
        f.write(json.dumps(flipped) + "\n")
    code, out, again = run_cli(spec + counting_cmd(tmp_path / "c1"))
    redone = [p for p in again["probes"] if p["commit"] == rows[0]["commit"]]
    assert code == 0 and redone and not redone[0]["cached"]
    assert "its cached verdicts disagree (bad and good), the predicate may be flaky" in redone[0]["reason"]
    assert "recorded 20" in out                          # when the cached verdicts were recorded


def test_verify_catches_a_flaky_predicate_and_can_be_turned_off(tiny_repo, run_cli, tmp_path):
    """A predicate whose culprit and parent swap verdicts after the search: the default
    verification ends with no culprit (exit 3); --verify 0 answers as git would."""
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    count = tmp_path / "count"
    # from the 4th run on every commit says the opposite of its state: the search sees the truth,
    # the verification runs see a flip
    flip = ["sh", "-c", f'echo x >> {count}; n=$(wc -l < {count}); s=$(cat state); '
            f'if [ "$n" -gt 3 ]; then [ "$s" = bad ]; else [ "$s" = good ]; fi']
    code, out, data = run_cli(["main~7..main", "--repo", str(r.path), "--no-cache", "--"] + flip)
    assert code == 3 and data["first_bad"] is None and "not deterministic" in out, out
    assert data["candidates"] == [] and "still one of" not in out   # the refuted commit is no answer
    count.unlink()
    code, _, data = run_cli(["main~7..main", "--repo", str(r.path), "--no-cache", "--verify", "0", "--"] + flip)
    assert code == 0 and data["n_verify"] == 0


def test_an_adapter_file_named_in_a_command_is_part_of_the_identity(tmp_path, monkeypatch):
    from rlbisect.bisect.predicates.command import CommandPredicate
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adapter.py").write_text("def make(): pass\n")
    argv = ["rlbisect", "check", "--adapter", "adapter.py:make"]
    before = CommandPredicate(argv).identity()
    assert "adapter.py" in json.loads(before)["files"]
    (tmp_path / "adapter.py").write_text("def make(): return 1\n")
    assert CommandPredicate(argv).identity() != before
    assert CommandPredicate(["x", "--adapter=adapter.py:make"]).identity() != CommandPredicate(["x", "--adapter=other"]).identity()


def test_a_python_file_named_inside_a_shell_string_is_part_of_the_identity(tiny_repo, run_cli, tmp_path):
    """``sh -c "rlbisect check --adapter /outside/my_adapter.py:make"``: the adapter file is outside
    every commit's tree, so editing it must not reuse a cached verdict."""
    from rlbisect.bisect.predicates.command import CommandPredicate, file_digests
    outside = tmp_path / "outside"
    outside.mkdir()
    adapter = outside / "my_adapter.py"
    adapter.write_text("def make(): pass\n")
    counter = tmp_path / "count"
    cmd = ["sh", "-c", f'true --adapter {adapter}:make && python3 ~/no-such.py; echo x >> {counter}; '
           'test "$(cat state)" = good']
    assert list(file_digests(cmd, tmp_path)) == ["sh", str(adapter)]
    (outside / "helper.py").write_text("")
    assert str(outside / "helper.py") in file_digests(["bash", "-c", f"python {outside}/helper.py --x=1"], tmp_path)
    r = tiny_repo(["good"] * 4 + ["bad"] * 4)
    spec = ["main~7..main", "--repo", str(r.path), "--verify", "0", "--"]
    code, _, first = run_cli(spec + cmd)
    assert code == 0 and runs(counter) == len(first["probes"])
    code, _, again = run_cli(spec + cmd)
    assert code == 0 and all(p["cached"] for p in again["probes"]) and runs(counter) == len(first["probes"])
    before = CommandPredicate(cmd).identity()
    adapter.write_text("def make(): return 1\n")
    assert CommandPredicate(cmd).identity() != before
    code, _, edited = run_cli(spec + cmd)
    assert code == 0 and not any(p["cached"] for p in edited["probes"])


def test_a_command_probe_knows_it_is_one(tmp_path):
    """RLBISECT_PROBE (the commit) tells an `rlbisect check` inside the command that an adapter
    missing here is a skip; it is not part of the cache identity."""
    from rlbisect.bisect.cache import identity
    from rlbisect.bisect.predicates.command import CommandPredicate
    pred = CommandPredicate(["sh", "-c", 'test "$RLBISECT_PROBE" = abc123'])
    assert pred.probe(tmp_path, "abc123", None).verdict == "good"
    assert "RLBISECT_PROBE" not in json.loads(identity(pred))["env"]


def test_the_installed_distributions_are_part_of_the_identity(monkeypatch):
    from types import SimpleNamespace
    from rlbisect.bisect import cache
    from rlbisect.bisect.predicates.command import CommandPredicate
    pred = CommandPredicate(["true"])
    assert cache.identity(pred, b"k") == cache.identity(pred, b"k")   # one environment: one identity

    def installed(torch: str):
        dists = [SimpleNamespace(metadata={"Name": "torch"}, version=torch),
                 SimpleNamespace(metadata={"Name": "Numpy"}, version="2.0.1")]
        return lambda: iter(dists if torch < "2.5" else dists[::-1])   # the order they are found in: no matter
    monkeypatch.setattr(cache.metadata, "distributions", installed("2.4.0"))
    before = cache.identity(pred, b"k")
    monkeypatch.setattr(cache.metadata, "distributions", installed("2.4.0"))
    assert cache.identity(pred, b"k") == before
    monkeypatch.setattr(cache.metadata, "distributions", installed("2.5.1"))   # pip install -U torch
    assert cache.identity(pred, b"k") != before
    assert json.loads(before)["packages"] != json.loads(cache.identity(pred, b"k"))["packages"]


def test_code_installed_editable_outside_the_repository_is_part_of_the_identity(monkeypatch, tmp_path):
    from rlbisect.bisect import cache
    from rlbisect.bisect.predicates.command import CommandPredicate
    pred = CommandPredicate(["true"])
    monkeypatch.setattr(cache, "outside_state", lambda root, argv, env: "")
    plain = cache.identity(pred, b"k", tmp_path)
    assert "editable" not in json.loads(plain)          # none: the identity cached before
    monkeypatch.setattr(cache, "outside_state", lambda root, argv, env: "1234" if root == tmp_path else "")
    assert json.loads(cache.identity(pred, b"k", tmp_path))["editable"] == "1234"
