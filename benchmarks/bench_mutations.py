"""Faults written into TinyAgent's source, not its fault switches: which the default check catches.

The fault catalogue (bench_fault_catalogue.py) measures the switches the checks were built
beside. This measures one-line edits of the trainer's own source, each a fault a real trainer has
had (a hard-coded setting, an off-by-one, a stream or a normalizer taken from the wrong place),
written here as text replacements and applied to the function's code while its row runs (the
same edit the tests make with tests/helpers.py:edit_source). Each row is `rlbisect check`'s
default (probe seed 1, the step-0 checks at every declared setting, the run-level checks); an
edit that leaves the code unchanged in effect (an equivalent mutant: syncing the sampler before the
update rather than after the one before, an edit argument the vocabulary cannot spell) shows as
"missed" too, so those were left out. A row with no failing check is an escape. (*): a fault the
checks were extended for after it escaped (a first run, on 22 edits, missed 4: the two logging
faults marked so, and the two equivalent mutants).

Usage: python benchmarks/bench_mutations.py [--only NAME,...] [--markdown]
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import textwrap
import time
import warnings

from reference_trainer.adapter import make_adapter
from rlbisect.check.invariants import check_seeds

# name: (module, function, old text, new text, what it is)
MUTATIONS = {
    "adv_population_std": ("losses", "compute_advantages", "r.std(dim, keepdim=True)",
                           "r.std(dim, keepdim=True, unbiased=False)", "the group std without Bessel's correction"),
    "adv_batch_mean": ("losses", "compute_advantages", "adv = (r - r.mean(dim, keepdim=True))",
                       "adv = (r - r.mean())", "the baseline is the batch mean, not the group's"),
    "adv_eps_hardcoded": ("batch", "prepare_batch", "cfg.update.adv_eps", "1e-4", "the advantage epsilon a constant"),
    "accum_equal_weights": ("update", "minibatch_backward", "weights = [_share(mask[p], mask[rows], mode) for p in parts]",
                            "weights = [1 / len(parts)] * len(parts)", "microbatches weighted alike, whatever their tokens"),
    "epochs_ignored": ("update", "rl_update", "for _ in range(u.epochs):", "for _ in range(1):", "one epoch whatever is configured"),
    "minibatches_hardcoded": ("update", "rl_update", ".chunk(u.minibatches):", ".chunk(2):", "two minibatches whatever is configured"),
    "kl_token_mean_always": ("update", "minibatch_loss", "else aggregate(per_token_kl, m, u.loss_mode)",
                             "else aggregate(per_token_kl, m, 'token_mean')", "the KL term a token mean under any loss mode"),
    "entropy_token_mean_always": ("update", "minibatch_loss", "aggregate(per_token, m, u.loss_mode)",
                                  "aggregate(per_token, m, 'token_mean')", "the entropy term a token mean under any loss mode"),
    "clip_high_doubled": ("losses", "policy_loss", "clipped = ratio.clamp(low, 1 + clip_eps)",
                          "clipped = ratio.clamp(low, 1 + 2 * clip_eps)", "the upper clip at 1 + 2 eps"),
    "ratio_detached": ("losses", "policy_loss", "log_ratio = logp - old_logp", "log_ratio = logp.detach() - old_logp",
                       "the ratio off the graph: no policy gradient"),
    "k1_reversed": ("losses", "kl_penalty", "return logp - ref_logp", "return ref_logp - logp", "the k1 estimator reversed"),
    "grad_clip_l1": ("update", "rl_update", "clip_grad_norm_(model.parameters(), limit)",
                     "clip_grad_norm_(model.parameters(), limit, norm_type=1.0)", "the gradient clipped by its L1 norm"),
    "sampler_untempered": ("sampler", "sample_episodes", "logits[sampled] / temperature", "logits[sampled]",
                           "the sampler ignores the temperature"),
    "sampler_global_rng": ("sampler", "sample_episodes", "torch.multinomial(logp_all.exp(), 1, generator=generator)",
                           "torch.multinomial(logp_all.exp(), 1)", "sampling from torch's global stream"),
    "sampler_logp_of_argmax": ("sampler", "sample_episodes", "trajs[i].sample_logp.append(float(picked_logp[j]))",
                               "trajs[i].sample_logp.append(float(logp_all[j].max()))",
                               "the sampler records the top token's log-prob"),
    "sample_logp_misaligned": ("batch", "collate", "pad_rows([t.sample_logp for t in trajs], T, 0.0)[:, 1:]",
                               "pad_rows([t.sample_logp for t in trajs], T, 0.0)[:, :-1]", "the sampler's log-probs one position early: only the logged logp_gap reads them (*)"),
    "turn_limit_off_by_one": ("env", "Env.step", "if info.n_turns >= self.cfg.max_turns:",
                              "if info.n_turns > self.cfg.max_turns:", "one turn more than max_turns"),
    "max_turns_constant": ("env", "Env.step", "if info.n_turns >= self.cfg.max_turns:", "if info.n_turns >= 6:",
                           "the turn limit a constant (the default's 6)"),
    "edit_off_by_one": ("env", "Env.step", "self.code, obs = task.fixes[arg]", "self.code, obs = task.fixes[arg - 1]",
                        "edit K applies candidate K - 1"),
    "test_on_buggy_code": ("env", "Env.step", "passes(self.code, task.public) else", "passes(task.buggy, task.public) else",
                           "test runs the task's original code, not the edited one"),
    "public_reward_always": ("env", "Env.step", 'float(info.hidden_pass if self.cfg.reward == "hidden" else info.public_pass)',
                             "float(info.public_pass)", "the public tests paid whatever the configured verifier"),
    "logged_reward_first_group": ("train", "rollout_row", '"reward": rewards.mean().item()',
                                  '"reward": rewards[0].mean().item()', "the logged reward of the first group only (*)"),
    "eval_on_train_tasks": ("train", "run", 'make_tasks("heldout") if evaluate', 'make_tasks("train") if evaluate',
                            "evaluation on the training tasks"),
    "sync_every_other_step": ("train", "train", "        sync_sampler(sampler, model, bug)",
                              "        if step % 2 == 0: sync_sampler(sampler, model, bug)",
                              "the sampler's weights pushed after every other update"),
    "extra_batch_whitening": ("batch", "prepare_batch", "    return mask, old_logp, advantages",
                              "    return mask, old_logp, (advantages - advantages.mean()) / (advantages.std() + 1e-8)",
                              "group advantages whitened again over the batch"),
    "pg_token_mean_always": ("losses", "policy_loss", "loss = aggregate(-surrogate, mask, mode, bug)",
                             "loss = aggregate(-surrogate, mask, 'token_mean', bug)", "the policy term a token mean under any loss mode"),
    "scheduler_before_optimizer": ("update", "rl_update", "                optimizer.step()\n            if scheduler",
                                   "                scheduler.step() if scheduler is not None else None\n"
                                   "                optimizer.step()\n            if scheduler", "the schedule stepped twice per step, once before it"),
    "clip_limit_from_clip_eps": ("update", "rl_update", "else u.max_grad_norm", "else u.clip_eps",
                                 "the gradient clipped at the PPO clip's epsilon"),
    "betas_hardcoded": ("update", "make_optimizer", "return kind(model.parameters(), lr=u.lr, betas=BETAS",
                        "return kind(model.parameters(), lr=u.lr, betas=(0.9, 0.99)", "Adam's betas not the declared ones"),
    # the four that passed every check before checks 23-24 and the call limit in check 22 (2026-12-05)
    "test_on_hidden_tests": ("env", "Env.step", 'passes(self.code, task.public) else "<obs> fail"',
                             'passes(self.code, task.public + task.hidden) else "<obs> fail"',
                             "test runs the hidden tests too (*)"),
    "read_first_candidate": ("env", "Env.step", 'obs = "<obs> fix " + " ".join(map(str, task.hint))',
                             'obs = "<obs> fix " + str(task.hint[0])', "read names one of a hard task's two candidates (*)"),
    "call_limit_constant": ("sampler", "sample_episodes", "len(call[i]) >= env_cfg.max_call_tokens", "len(call[i]) >= 4",
                            "calls closed at 4 tokens whatever max_call_tokens says (*)"),
    "cosine_full_cycle": ("update", "lr_lambda", "math.cos(math.pi * done)", "math.cos(2 * math.pi * done)",
                          "a cosine decay over a full cycle (*)"),
}


def _function(module: str, qualname: str):
    obj = importlib.import_module(f"reference_trainer.{module}")
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def edited(module: str, qualname: str, old: str, new: str):
    """Apply the edit to the function's code -> a callable that restores it."""
    fn = _function(module, qualname)
    source = textwrap.dedent(inspect.getsource(fn))
    if source.count(old) != 1:
        raise SystemExit(f"{module}.{qualname}: {old!r} occurs {source.count(old)} times")
    scope: dict = {}
    exec(compile(source.replace(old, new), inspect.getsourcefile(fn), "exec"), fn.__globals__, scope)
    saved, fn.__code__ = fn.__code__, inspect.unwrap(scope[fn.__name__]).__code__
    return lambda: setattr(fn, "__code__", saved)


def failing() -> list[str]:
    try:
        res = check_seeds(lambda s: make_adapter(seed=s), [1], runs=True)
    except Exception as e:   # noqa: BLE001 - the edited trainer raising under the checks is a catch
        return [f"raised ({type(e).__name__})"]
    return [name for name, r in res.items() if r.failed]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated mutation names")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(MUTATIONS)
    warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))   # an edit's own
    t0, caught = time.perf_counter(), 0
    assert not failing(), "healthy TinyAgent fails a check"
    for name in names:
        module, qualname, old, new, what = MUTATIONS[name]
        restore = edited(module, qualname, old, new)
        try:
            found = failing()
        finally:
            restore()
        caught += bool(found)
        shown = ", ".join(found) if found else "MISSED"
        print(f"| `{name}` | {what} | {shown} |" if args.markdown else f"{name:28s} {shown}", flush=True)
    print(f"\n{caught} of {len(names)} caught by the default check; {time.perf_counter() - t0:.0f}s")


if __name__ == "__main__":
    main()
