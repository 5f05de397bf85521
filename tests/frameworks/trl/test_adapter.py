"""The shipped TRL adapter on real TRL: every applicable check passes on unmodified GRPOTrainer in
each loss type and both update shapes, and each fault injected into it fails the check meant for it."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow   # they build TRL's trainer (transformers and TRL): tests/conftest.py

from rlbisect.check.invariants import sanity_checks  # noqa: E402
from rlbisect.check.thresholds import Thresholds  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "luspo"]
SHAPES = {"single": {}, "multi": {"num_iterations": 2}}    # one / two optimizer steps per generation batch
NAMES = None


def _run(bug=None, thresholds=None, **opts):
    from rlbisect.frameworks.trl.adapter import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return sanity_checks(demo(bug=bug, **opts), thresholds)


@pytest.fixture(scope="module")
def healthy():
    """Unmodified TRL, every loss type in both shapes, checked once for the whole module."""
    return {(lt, shape): _run(loss_type=lt, **opts) for lt in LOSS_TYPES for shape, opts in SHAPES.items()}


def _check(results, number: int):
    return list(results.values())[number - 1]


STATED = {"grpo", "bnpo", "dapo", "cispo", "sapo", "dr_grpo", "vespo", "luspo"}    # loss types whose objective spec.Objective states exactly


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_unmodified_trl_passes_every_applicable_check(healthy, loss_type, shape):
    results = healthy[(loss_type, shape)]
    assert len(results) == 24
    failed = {r.name: r.value for r in results.values() if r.failed}
    assert not failed, failed
    na = {number for number in range(1, 25) if _check(results, number).na}
    # 13, 15, 16, 17 apply (draw counts from generate, `observe` at _compute_loss, the reward
    # functions re-applied, the dataset row of each prompt); 7 and 14 need more than one optimizer
    # step per sampled batch; 18-20 a stated objective; 21-23 an environment (TRL has none); 24 a
    # scheduler probe (lr_schedule)
    expected_na = ({7, 14} if shape == "single" else set()) | \
        ({10} if loss_type in ("cispo", "sapo", "vespo") else set()) | \
        ({18, 19, 20} if loss_type not in STATED else set()) | {21, 22, 23, 24}
    assert na == expected_na
    for number in na:                                 # n/a always says why
        assert len(_check(results, number).na) > 20
    if shape == "single":
        assert "one optimizer step per sampled batch" in _check(results, 7).na
    # applicable checks carry real values: the update moved the policy the right way
    assert _check(results, 8).value > 0.3 and _check(results, 9).value > 0


def test_bnpo_fails_the_accumulation_check_by_design_and_says_so(healthy):
    for shape in SHAPES:
        acc = _check(healthy[("bnpo", shape)], 6)
        assert acc.value > Thresholds().accumulation       # it does fail the identity...
        assert "bnpo normalizes each microbatch" in acc.by_design    # ...and is shown with why
        assert not _check(healthy[("grpo", shape)], 6).by_design   # only where declared


# fault -> (shape, the check meant to catch it)
FAULTS = [
    ("mask_shift", "single", 1),
    ("adv_sign", "single", 8),
    ("old_logp_absent", "multi", 7),
    ("old_logp_detached", "multi", 7),
    ("ref_is_policy", "single", 9),
    ("accum_unscaled", "single", 6),
    ("sampler_temp", "single", 2),
    ("eos_unmasked", "single", 13),
    ("eos_unmasked", "multi", 13),
    ("adv_renorm", "single", 15),
    ("adv_renorm", "multi", 15),
    ("reward_weight_ignored", "single", 16),
    ("reward_misaligned", "single", 16),
    ("ref_logp_untempered", "single", 20),
]


@pytest.mark.parametrize("bug,shape,number", FAULTS)
def test_each_fault_in_trl_fails_the_check_meant_for_it(healthy, bug, shape, number):
    faulty = _run(bug=bug, **SHAPES[shape])
    assert not _check(faulty, number).passed, (bug, _check(faulty, number))
    assert _check(healthy[("grpo", shape)], number).passed and not _check(healthy[("grpo", shape)], number).na


def test_stale_old_logp_is_invisible_in_the_single_step_shape_and_said_so():
    """With one step per batch there is no old log-prob to freeze: check 7 is n/a, not a pass."""
    r = _check(_run(bug="old_logp_absent"), 7)
    assert r.na and r.passed is None


def test_bf16_needs_bf16_thresholds():
    """TRL's bf16 autocast on CPU: fp32 limits fail checks 2 and 6, the bf16 starting points pass."""
    at_fp32 = _run(bf16=True)
    assert not _check(at_fp32, 2).passed and not _check(at_fp32, 6).passed
    assert not any(r.failed for r in _run(bf16=True, thresholds=Thresholds.bf16()).values())


def test_same_seed_same_numbers(healthy):
    again = _run(loss_type="grpo")
    first = healthy[("grpo", "single")]
    assert [r.value for r in again.values() if not r.na] == [r.value for r in first.values() if not r.na]


def test_trl_is_detected_by_feature_not_refused_by_version(monkeypatch):
    """The version comes from the imported module; a newer one is tried with a warning; a trainer
    lacking a member the probe points need is a clear "cannot run" error."""
    import types

    import trl

    from rlbisect.frameworks.trl.adapter import require_trl
    monkeypatch.setattr(trl, "__version__", "1.4.0")
    assert require_trl() == "1.4.0"                     # older: no refusal
    monkeypatch.setattr(trl, "__version__", "9.1.0")
    with pytest.warns(UserWarning, match="TRL 9.1.0 is newer than 1.16.0"):
        assert require_trl() == "9.1.0"
    monkeypatch.setattr(trl, "__version__", "1.16.0")
    lacking = types.SimpleNamespace(reward_weights=None, num_generations=4, loss_type="grpo")
    with pytest.raises(RuntimeError, match="cannot run on TRL 1.16.0: its GRPOTrainer lacks _generate_and_score"):
        require_trl(lacking)


def test_a_source_checkout_says_its_own_version_not_the_installed_ones(tmp_path):
    """TRL's `__version__` reads the installed distribution's metadata: with a checkout first on
    PYTHONPATH it names the wheel's version. The checkout's VERSION file is what it is."""
    import types

    from rlbisect.frameworks.trl._internals import imported_version
    (tmp_path / "trl").mkdir()
    (tmp_path / "trl" / "__init__.py").write_text("")
    module = types.SimpleNamespace(__file__=str(tmp_path / "trl" / "__init__.py"), __version__="1.16.0")
    assert imported_version(module) == "1.16.0"           # no checkout: the module's own
    (tmp_path / "VERSION").write_text("1.0.0\n")
    assert imported_version(module) == "1.16.0"           # a VERSION file alone is not a checkout
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'trl'\n")
    assert imported_version(module) == "1.0.0"


@pytest.mark.slow
def test_cli_json_stays_json_when_the_trainer_prints(tmp_path):
    """The trainer's own prints (Python and file descriptor 1) go to stderr under --json."""
    (tmp_path / "noisy.py").write_text(
        "import os\nfrom rlbisect.frameworks.trl.adapter import demo\n"
        "def make(**kw):\n    print('trainer says hi')\n    os.write(1, b'raw fd write\\n')\n"
        "    return demo(**kw)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "rlbisect", "check", "--adapter", f"{tmp_path}/noisy.py:make",
                           "--json", "--adapter-opt", "loss_type=dapo", "--adapter-opt", "num_iterations=2"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads(done.stdout)
    assert table["old_logp frozen in the update"]["passed"] and "na" not in table["old_logp frozen in the update"]
    assert "trainer says hi" in done.stderr and "raw fd write" in done.stderr


def test_trls_default_learning_rate_gives_no_false_alarm_and_still_catches():
    """At lr 1e-6 (GRPOConfig's default) one step moves log-probs by ~1e-6: the KL checks computed
    exp(x) - x - 1 in float32 (0 after cancellation) and stepped past the reference (check 11);
    both were false alarms on unmodified TRL until fixed."""
    healthy = _run(lr=1e-6)
    assert not any(r.failed for r in healthy.values()), {r.name: r.value for r in healthy.values() if r.failed}
    assert _check(healthy, 9).value > 0 and _check(healthy, 11).value > 0
    faulty = _run(lr=1e-6, bug="ref_is_policy")
    assert not _check(faulty, 9).passed and not _check(faulty, 11).passed



def test_check_7_measures_a_tiny_update_instead_of_float32_cancellation():
    """At lr 1e-6 with two optimizer steps per batch approx_kl is ~1e-9: it read 0.0 in float32
    (exactly what a stale old_logp gives). The default limit (1e-8) is still above it; a limit
    between the update's value and the stale fault's exact 0 tells them apart."""
    below = Thresholds(approx_kl=1e-11)
    healthy = _check(_run(thresholds=below, lr=1e-6, num_iterations=2), 7)
    assert healthy.value > 1e-11 and healthy.passed, healthy
    faulty = _check(_run(thresholds=below, bug="old_logp_absent", lr=1e-6, num_iterations=2), 7)
    assert faulty.value == 0 and faulty.failed, faulty

@pytest.mark.slow
def test_matrix_imports_the_adapter_file_once_and_its_json_is_pure(tmp_path):
    """--matrix builds one adapter per fault row from one import of the file: a module-level
    monkeypatch in an adapter file is applied once, not stacked per row. (The other import is a
    child's, which asks whether importing it starts threads.)"""
    log = tmp_path / "imports.log"
    (tmp_path / "counted.py").write_text(
        f"open({str(log)!r}, 'a').write('imported\\n')\nprint('module-level print')\n"
        "from rlbisect.frameworks.trl.adapter import demo\n"
        "def make(**kw):\n    return demo(**kw)\n")
    done = subprocess.run([sys.executable, "-m", "rlbisect", "check", "--adapter", f"{tmp_path}/counted.py:make",
                           "--matrix", "--json"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    table = json.loads(done.stdout)
    assert list(table) == ["none", "mask_shift", "adv_sign", "old_logp_absent", "old_logp_detached",
                           "ref_is_policy", "accum_unscaled", "sampler_temp", "eos_unmasked", "adv_renorm",
                           "reward_weight_ignored", "reward_misaligned", "ref_logp_untempered",
                           "items_count_truncated"]
    assert log.read_text() == "imported\n" * 2
    assert not table["adv_sign"]["update raises log pi where A > 0"]["passed"]


def test_drawn_counts_include_the_first_eos_and_only_what_was_sampled():
    import torch

    from rlbisect.frameworks.trl._sampling import drawn_counts
    eos = torch.tensor([1])
    tokens = torch.tensor([[5, 6, 1, 0, 0], [5, 1, 6, 1, 0], [5, 6, 7, 8, 9], [1, 0, 0, 0, 0]])
    assert drawn_counts(tokens, 5, eos).tolist() == [3, 2, 5, 1]
    assert drawn_counts(tokens, 4, eos).tolist() == [3, 2, 4, 1]     # generate stopped after 4 steps


def test_rewards_that_cannot_be_rerun_apart_from_trl_leave_check_16_na():
    """A reward model or an async reward function: no `rescored`, so check 16 says n/a, not a pass."""
    import torch

    from rlbisect.frameworks.trl import _sampling
    from rlbisect.frameworks.trl.adapter import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        adapter = demo()
    tr = adapter.trainer

    async def judged(completions, **kwargs):
        return [0.0] * len(completions)
    for other in (torch.nn.Linear(1, 1), judged):
        tr.reward_funcs = [tr.reward_funcs[0], other]
        assert _sampling.configured_rewards(tr, [{"prompt": "add d1 d2 ="}], torch.tensor([[5, 1]]),
                                       torch.tensor([1])) is None


def test_the_adapters_policy_copies_run_their_own_weights_on_every_path():
    """TRL 1.16 patches the policy's forward with a closure over the original's bound forward: a
    plain deep copy, moved, would still answer the unfused path with the trainer's weights."""
    import torch
    from rlbisect.frameworks.trl import _internals as trl_
    from rlbisect.frameworks.trl.adapter import demo
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        adapter = demo()
    tr = adapter.trainer     # the demo's KL term is on: TRL keeps a reference model
    ids = torch.tensor([[1, 2, 3, 4]])
    pairs = [(adapter.policy(), trl_.unwrapped(adapter.trainer)),
             (adapter.make_ref(adapter.policy()), tr.accelerator.unwrap_model(tr.ref_model))]
    for copied, source in pairs:
        assert torch.equal(copied(ids).logits, source(ids).logits)
        with torch.no_grad():
            for p in copied.parameters():
                p.mul_(0.5)
        assert not torch.equal(copied(ids).logits, source(ids).logits)


def test_a_batch_too_small_for_its_windows_is_checked_in_windows_trl_runs():
    """`--episodes 8`: the dapo variant split a quarter of 2 rows into 4 micro-batches, two of them
    empty: a FAIL raised in TRL's log-prob pass, on unmodified TRL."""
    results = _run(episodes=8)
    assert not [r.name for r in results.values() if r.failed]
    assert _check(results, 6).value < Thresholds().accumulation


def test_an_accumulation_window_longer_than_the_batch_passes_and_still_catches_stale_old_logps():
    """gradient_accumulation_steps=3, two micro-batches a batch: the adapter's unequal micro-batches
    failed check 6, and an update with no optimizer step inside it failed check 7 at 0."""
    healthy = _run(gradient_accumulation_steps=3)
    assert not [r.name for r in healthy.values() if r.failed]
    assert _check(healthy, 7).value > 0
    assert _check(_run(bug="old_logp_detached", gradient_accumulation_steps=3), 7).failed


def test_a_config_field_the_demo_sets_itself_can_be_given_or_is_pointed_to_its_option():
    """`--adapter-opt num_generations=2` reached GRPOConfig twice: a TypeError, exit 125."""
    from rlbisect.frameworks.trl.adapter import demo
    assert _run(num_generations=2, episodes=16)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        assert demo(num_generations=2).trainer.num_generations == 2
        with pytest.raises(ValueError, match="learning_rate is the demo's lr="):
            demo(learning_rate=0.1)
