"""`--predicate replay:STEP.pt`: a step saved on good code stops replaying at the commit that broke it."""

import json

import pytest
from typer.testing import CliRunner

from history_fixtures import build_history
from rlbisect.cli.app import app

runner = CliRunner()


@pytest.mark.slow
def test_replay_predicate_finds_the_fault_commit(tmp_path):
    snaps = tmp_path / "snaps"
    assert runner.invoke(app, ["train", "--steps", "2", "--snapshot-dir", str(snaps), "--snapshot-every", "1"]).exit_code == 0
    h = build_history(tmp_path / "repo", "sign_flip", commits=4, bad_at=2)
    out = tmp_path / "r.json"
    r = runner.invoke(app, ["run", f"{h.good}..{h.bad}", "--repo", h.path, "--predicate",
                            f"replay:{snaps / 'step-000001.pt'}", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert r.exit_code == 0 and doc["first_bad"] == h.fault_commit
    assert all(p["verdict"] == ("bad" if p["values"]["moved"] > 0 else "good") for p in doc["probes"])


def test_a_broken_snapshot_is_bad_input_not_a_verdict(tmp_path, tiny_repo):
    repo = tiny_repo(["good", "bad"])
    junk = tmp_path / "step-000001.pt"
    junk.write_bytes(b"\x80\x04not a snapshot")
    before = repo.snapshot()
    r = runner.invoke(app, ["run", f"{repo.shas[0]}..{repo.shas[1]}", "--repo", str(repo.path),
                            "--predicate", f"replay:{junk}"])
    assert r.exit_code == 2 and repo.snapshot() == before
    assert runner.invoke(app, ["run", f"{repo.shas[0]}..{repo.shas[1]}", "--repo", str(repo.path),
                               "--predicate", "replay"]).exit_code == 2
