"""Generality proof for the invariant checker: the nine checks on a second trainer written independently
of TinyAgent (tests/second_trainer: GRU policy, LEFT-padded position-aligned batches, clipped-IS
REINFORCE with Dr.-GRPO advantages, row-count microbatches, plain SGD). They pass on it, and each fault
fails the check that targets it."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from rlbisect.check.adapter import AdapterError, TrainerAdapter, load_adapter
from rlbisect.cli.app import app
from rlbisect.check.invariants import BUILTIN, sanity_checks
from rlbisect.check.run_level import RUN_CHECKS

pytestmark = pytest.mark.slow
HERE = Path(__file__).resolve().parent
SPEC = f"{HERE.parent / 'second_trainer' / 'adapter.py'}:make_adapter"
NAMES = list(BUILTIN)       # every step-0 check, in report order
# fault -> checks (1-based) that must fail; "entropy_sign" is invisible at step 0, as in the chapter.
MUST_FAIL = {"mask_shift": {1, 2}, "sign_flip": {8}, "stale_old_logp": {7}, "accum_local": {6},
             "sampler_temp": {2, 3}, "ref_is_policy": {9}, "entropy_sign": set(),
             "batch_baseline": {4, 12}, "pad_mean": {5}}
# Training on env tokens instead of policy tokens can also reverse the update's direction (seed-dependent).
MAY_ALSO_FAIL = {"mask_shift": {8}}


def run(bug=None, seed=1, **kw):
    adapter = load_adapter(SPEC, seed=seed, bug=bug, **kw)
    return adapter, sanity_checks(adapter)


def failing(results) -> set[int]:
    return {i + 1 for i, r in enumerate(results.values()) if r.failed}


@pytest.fixture(scope="module")
def tr():
    load_adapter(SPEC)                       # registers the `second_trainer` package by file path
    return sys.modules["second_trainer.trainer"]


def test_second_trainer_is_independent_of_tinyagent():
    for path in (HERE.parent / "second_trainer").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] == "reference_trainer" for n in names), path


def test_layout_is_left_padded_position_aligned_and_interleaved(tr):
    adapter = load_adapter(SPEC, episodes=64, seed=1)
    assert isinstance(adapter, TrainerAdapter)
    batch, truth = adapter.probe_batch()
    B, T = batch.tokens.shape
    prep = adapter.prepare(adapter.policy(), batch)
    assert prep.mask.shape == truth.owned.shape == truth.sample_logp.shape == (B, T)    # P = T, not T - 1
    assert bool(batch.live[:, -1].all()) and not bool(batch.live[:, 0].all())          # left padding
    assert bool((truth.owned[:, 0] == 0).all())
    # env tokens between policy tokens: owners matter
    between = [(row.nonzero().flatten().diff() > 1).any() for row in truth.owned]
    assert sum(bool(x) for x in between) > B // 4
    padded = adapter.pad(batch, 8)
    assert padded.tokens.shape == (B, T + 8) and torch.equal(padded.tokens[:, 8:], batch.tokens)
    # rewards vary within most groups (the starting policy is partly trained)
    r = truth.rewards.view(-1, truth.group_size)
    assert 0.2 < float(r.mean()) < 0.8 and int((r.std(-1) > 0).sum()) >= len(r) - 2


def test_probe_batch_is_deterministic():
    (b1, t1), (b2, t2) = load_adapter(SPEC, seed=3).probe_batch(), load_adapter(SPEC, seed=3).probe_batch()
    assert torch.equal(b1.tokens, b2.tokens) and torch.equal(t1.sample_logp, t2.sample_logp)
    assert not torch.equal(load_adapter(SPEC, seed=4).probe_batch()[1].sample_logp, t1.sample_logp)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_all_nine_pass_on_the_healthy_second_trainer(seed):
    _, res = run(seed=seed)
    assert list(res) == NAMES
    assert failing(res) == set(), {n: r.value for n, r in res.items()}
    v = {i + 1: r.value for i, r in enumerate(res.values())}
    assert v[1] == 0 and v[2] < 1e-6 and v[3] < 1e-6 and v[4] < 1e-6
    assert v[5] < 1e-6 and v[6] < 1e-6
    assert v[7] > 1e-5 and v[8] > 0.2 and v[9] > 1e-4
    # CISPO keeps a gradient outside the clip range by design; its loss takes no reference: n/a, said
    assert "cispo" in res[NAMES[9]].na and "takes no `ref`" in res[NAMES[10]].na
    # an adapter that records no draws and takes no `tap`: checks 13 and 15 n/a, said
    assert "no `drawn` counts" in res[NAMES[12]].na and "takes no `tap`" in res[NAMES[14]].na
    # it declares no Objective and no environment: checks 18-22 n/a, said
    assert all(res[name].na for name in NAMES[17:22]), {n: res[n] for n in NAMES[17:22]}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bug", list(MUST_FAIL))
def test_each_fault_fails_the_check_that_targets_it(bug, seed):
    adapter, res = run(bug, seed=seed)
    fails = failing(res)
    assert MUST_FAIL[bug] <= fails <= MUST_FAIL[bug] | MAY_ALSO_FAIL.get(bug, set()), (bug, fails)
    v = {i + 1: r.value for i, r in enumerate(res.values())}
    if bug == "mask_shift":      # every policy token loses its mask, the token before it gains one
        assert v[1] == 2 * float(adapter.probe_batch()[1].owned.sum()) and v[2] > 1.0
    expected = {"sign_flip": v[8] < -0.2, "stale_old_logp": v[7] == 0.0, "accum_local": v[6] > 0.05,
                "sampler_temp": v[2] > 0.1 and v[3] > 0.1, "ref_is_policy": v[9] == 0.0,
                "batch_baseline": v[4] > 0.1, "pad_mean": v[5] > 1e-3}
    assert expected.get(bug, True), (bug, v)


def test_short_bug_names_mask_and_sign():
    assert failing(run("mask")[1]) >= {1, 2} and failing(run("sign")[1]) == {8}


def test_load_by_file_path_options_and_errors(monkeypatch):
    monkeypatch.chdir(HERE.parent.parent)
    adapter = load_adapter("tests/second_trainer/adapter.py:make_adapter", episodes=32, seed=2, kl_coef=0.0)
    batch, truth = adapter.probe_batch()
    assert len(truth.rewards) == 32 and adapter.make_ref(adapter.policy()) is None
    res = sanity_checks(adapter)
    assert failing(res) == set() and "no reference" in res[NAMES[8]].na     # no reference: n/a, said
    with pytest.raises(AdapterError, match="unknown bug 'nope'"):
        load_adapter(SPEC, bug="nope")
    with pytest.raises(AdapterError, match="multiple of the group size"):
        load_adapter(SPEC, episodes=30)


def test_cli_check_json_healthy_and_sign_bug():
    runner = CliRunner()
    ok = runner.invoke(app, ["check", "--adapter", SPEC, "--json"])
    assert ok.exit_code == 0, ok.output
    table = json.loads(ok.stdout)
    assert list(table) == [*NAMES, *RUN_CHECKS] and not any(c["passed"] is False for c in table.values())
    bad = runner.invoke(app, ["check", "--adapter", SPEC, "--json", "--bug", "sign"])
    assert bad.exit_code == 1, bad.output
    table = json.loads(bad.stdout)
    assert [n for n, c in table.items() if c["passed"] is False] == ["update raises log pi where A > 0"]
    assert table["update raises log pi where A > 0"]["value"] < -0.2


def test_cli_matrix_on_the_second_trainer(tr):
    out = CliRunner().invoke(app, ["check", "--adapter", SPEC, "--matrix", "--json"])
    assert out.exit_code == 0, out.output
    table = json.loads(out.stdout)
    assert list(table) == ["none", *tr.BUGS]   # the faults the adapter lists, not TinyAgent's
    got = {row: {i + 1 for i, c in enumerate(cells.values()) if c["passed"] is False} for row, cells in table.items()}
    assert got == {"none": set(), **{row: MUST_FAIL[row] for row in table if row != "none"}}


def test_the_second_trainer_trains_and_the_sign_bug_untrains_it(tr):
    prompts = [(4, b) for b in range(8)]           # both one- and two-digit answers
    start = tr.success_prob(tr.make_base(80), prompts)
    outcome = {}
    for bug in (None, "sign_flip"):
        model = tr.make_base(80)
        tr.train(model, prompts, 30, tr.Config(bug=bug))
        outcome[bug] = tr.success_prob(model, prompts)
    assert outcome[None] > start + 0.05 and outcome["sign_flip"] < start - 0.3, (start, outcome)
