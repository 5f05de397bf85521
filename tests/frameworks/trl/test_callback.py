"""The TrainerCallback on a real TRL run: quiet when healthy, saves the step a detector fires on,
and `rlbisect replay --adapter` replays a saved step bit for bit (and reports a changed update)."""

from __future__ import annotations

import contextlib
import json
import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytestmark = pytest.mark.slow   # they build TRL's trainer (transformers and TRL): tests/conftest.py

from rlbisect.steps.format import load_snapshot  # noqa: E402
from rlbisect.steps.replay import judge  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _train(folder: Path, bug=None, steps: int = 8, every=None, **opts):
    from rlbisect.frameworks.trl.tiny import build_trainer, inject
    from rlbisect.frameworks.trl.callback import SnapshotCallback
    trainer = build_trainer(**opts)
    inject(trainer, bug)
    trainer.args.max_steps = steps
    callback = SnapshotCallback(trainer, folder, every=every)
    trainer.add_callback(callback)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer.train()
    return callback


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_a_healthy_run_fires_nothing(tmp_path, num_iterations):
    callback = _train(tmp_path, num_iterations=num_iterations, every=4)
    assert callback.hits == [] and [p.name for p in callback.hook.saved] == ["step-000000.pt", "step-000004.pt"]
    stats = load_snapshot(callback.hook.saved[-1]).stats
    assert 0 < stats["logp_gap"] < 1e-6 and stats["logp_gap_max"] < 1e-5     # float noise, measured


@pytest.mark.parametrize("bug,num_iterations,detector,step", [
    # the second optimizer step on a batch uses current log-probs as old ones: they left the
    # sampler's (logp_gap, step 1); then the ratio stays exactly 1 (no clipping, 4 steps running)
    ("old_logp_absent", 2, "ceiling:logp_gap", 1),
    ("ref_is_policy", 1, "stuck:kl_ref_zero", 1),        # kl exactly 0 with a KL term on
    ("mask_shift", 1, "ceiling:logp_gap", 0),            # sampler and trainer disagree from step 0
    ("sampler_temp", 2, "ceiling:logp_gap", 0),
])
def test_a_detector_fires_and_the_step_is_saved(tmp_path, bug, num_iterations, detector, step):
    callback = _train(tmp_path, bug=bug, num_iterations=num_iterations)
    assert [(h.detector, h.step) for h in callback.hits][:1] == [(detector, step)]
    if bug == "old_logp_absent":
        assert ("stuck:no_clipping", 3) in [(h.detector, h.step) for h in callback.hits]
    snap = load_snapshot(callback.hook.saved[0])
    assert snap.step == step and snap.hits[0].detector == detector
    assert {"loss", "grad_norm", "kl_ref", "clip_frac", "ratio_max", "approx_kl", "entropy", "logp_gap"} <= set(snap.stats)
    # replayed in process on the same code: bit for bit
    from rlbisect.frameworks.trl.adapter import demo
    with contextlib.redirect_stdout(io.StringIO()):
        report = judge(snap, demo(num_iterations=num_iterations).replay(snap))
    assert report.identical, report.moved


@pytest.mark.slow
def test_rlbisect_replay_with_an_adapter_same_code_and_changed_code(tmp_path):
    callback = _train(tmp_path, steps=3, every=2, num_iterations=2)
    saved = [p.name for p in callback.hook.saved]
    assert saved == ["step-000000.pt", "step-000002.pt"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def replay(*extra):
        return subprocess.run([sys.executable, "-m", "rlbisect", "replay", str(callback.hook.saved[-1]),
                               "--adapter", "rlbisect.frameworks.trl:demo", "--adapter-opt", "num_iterations=2",
                               *extra], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    same = replay()
    assert same.returncode == 0, same.stdout + same.stderr[-2000:]
    assert "IDENTICAL" in same.stdout and "approx_kl" in same.stdout
    changed = replay("--bug", "accum_unscaled")      # the loss no longer divided by the accumulation steps
    assert changed.returncode == 1, changed.stdout + changed.stderr[-2000:]
    assert "DIFFERS" in changed.stdout and "grad_norm" in changed.stdout and "parameters differ" in changed.stdout


@pytest.mark.slow
def test_promote_with_an_adapter_writes_a_test_that_passes(tmp_path):
    from rlbisect.steps.promote import promote
    callback = _train(tmp_path / "snaps", steps=2, every=1)
    with contextlib.redirect_stdout(io.StringIO()):
        done = promote(callback.hook.saved[-1], tmp_path / "regress", adapter="rlbisect.frameworks.trl:demo",
                       adapter_opts={"num_iterations": 1})
    data = json.loads(done.test.with_suffix(".json").read_text())
    assert data["adapter"] == "rlbisect.frameworks.trl:demo" and data["adapter_opts"] == {"num_iterations": 1}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(done.test)],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-2000:]


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_a_plain_transformers_trainer_step_replays_bit_for_bit(tmp_path, dropout):
    """Not only TRL: a causal-LM fine-tune with HF Trainer (loss normalized over the accumulation
    window by num_items_in_batch), its saved step replayed on a fresh copy of the model. With
    dropout too: the generators are taken before the step's forward passes drew its masks (taken
    at the optimizer step, the same code replayed as DIFFERS)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, DataCollatorForLanguageModeling, Trainer, TrainingArguments

    from rlbisect.frameworks.trl.tiny import _model_dir, _tokenizer
    from rlbisect.frameworks.trl.callback import SnapshotCallback, replay_step
    tok = _tokenizer()
    data = Dataset.from_list([{"input_ids": tok(f"add d{i % 5} d{i % 4} = d{i % 5 + i % 4} <eos>")["input_ids"][:6 + i % 2]}
                              for i in range(24)])
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4,
                             gradient_accumulation_steps=2, max_steps=3, learning_rate=1e-3, use_cpu=True,
                             report_to="none", save_strategy="no", disable_tqdm=True, seed=0)
    def model():
        return AutoModelForCausalLM.from_pretrained(_model_dir(0), attention_dropout=dropout, attn_implementation="eager")
    trainer = Trainer(model=model(), args=args, train_dataset=data,
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    callback = SnapshotCallback(trainer, tmp_path / "snaps", every=1)
    trainer.add_callback(callback)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        trainer.train()
    snap = load_snapshot(callback.hook.saved[-1])
    assert snap.step == 2 and snap.meta["accumulation"] == 2 and snap.meta["num_items_in_batch"] > 0
    report = judge(snap, replay_step(trainer, model(), snap))
    assert report.identical, report.moved
    assert {r.name for r in report.rows} == {"loss", "grad_norm"}
