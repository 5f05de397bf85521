"""The tap: each observation compared as it comes, on hand-made loops (no trainer)."""

import math

import torch

from rlbisect.check.adapter import Truth
from rlbisect.check.observe import Recorder, loss_identity
from rlbisect.check.spec import Objective


def _inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 5, 7, generator=gen, requires_grad=True)
    targets = torch.randint(7, (2, 5), generator=gen)
    mask = torch.tensor([[1.0, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    logp = torch.log_softmax(logits.detach() / 0.7, -1).gather(-1, targets[..., None])[..., 0]
    old = logp + (torch.rand(2, 5, generator=gen) - 0.5)       # ratios on both sides of the clip
    return logits, targets, mask, old, torch.tensor([1.0, -1.0])


def test_a_loss_that_is_the_declared_objective_passes_and_one_without_the_clip_does_not():
    spec = Objective(temperature=0.7)
    logits, targets, mask, old, adv = _inputs()
    logp = torch.log_softmax(logits / 0.7, -1).gather(-1, targets[..., None])[..., 0]
    ratio = (logp - old).exp()
    right = (-torch.min(ratio * adv[:, None], ratio.clamp(0.8, 1.2) * adv[:, None]) * mask).sum() / mask.sum()
    value, grad = loss_identity(spec, right, mask, old, adv, logits=logits, targets=targets)
    assert value < 1e-6 and grad < 1e-6
    unclipped = (-ratio * adv[:, None] * mask).sum() / mask.sum()
    assert loss_identity(spec, unclipped, mask, old, adv, logits=logits, targets=targets)[1] > 1e-2
    detached_kl = Objective(temperature=0.7, kl_coef=0.5, kl_estimator="k1")
    ref = old - 0.3
    kl_logged_only = right + 0.5 * ((logp.detach() - ref) * mask).sum() / mask.sum()
    value, grad = loss_identity(detached_kl, kl_logged_only, mask, old, adv, ref, logits=logits, targets=targets)
    assert value < 1e-6 and grad > 1e-2            # the right number, the wrong gradient


def test_a_loss_without_a_graph_is_not_judged():
    logits, targets, mask, old, adv = _inputs()
    assert all(math.isnan(v) for v in loss_identity(Objective(), torch.tensor(0.0), mask, old, adv,
                                                     logits=logits.detach(), targets=targets))


class _LogProbs:
    """An adapter with only log_probs: a fixed table per model."""

    def log_probs(self, model, batch, rows=None):
        return model.table if rows is None else model.table[rows]


def _model(table):
    m = torch.nn.Linear(1, 1)
    m.table = table
    return m


def test_what_each_loss_consumes_is_compared_with_the_steps_truth():
    sampled = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    owned = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    truth = Truth(owned, sampled, torch.tensor([1.0, 0.0]), 2, rescored=torch.tensor([1.0, 1.0]),
                  tasks=torch.tensor([3, 3]))
    rec = Recorder(_LogProbs(), Objective())
    policy = _model(sampled + 1e-3 * owned)                 # the trainer's log-probs, a little off
    rec("sampled", step=0, model=policy, batch=None, truth=truth)
    assert abs(rec.steps[0].logp_gap - 1e-3) < 1e-6 and rec.steps[0].reward_err == 1.0
    rows = torch.tensor([1, 0])
    rec("loss", rows=rows, mask=owned[rows], old_logp=sampled[rows], advantages=torch.tensor([-0.7071, 0.7071]),
        ref_logp=policy.table[rows])
    seen = rec.losses[0]
    assert seen.mask_wrong == 0 and seen.old_err == 0 and seen.adv_err < 1e-4 and seen.ref_err == 0
    rec("loss", rows=rows, mask=owned, old_logp=sampled[rows] + 0.5, advantages=torch.zeros(2))
    seen = rec.losses[1]
    assert seen.mask_wrong == 2 and seen.old_err == 0.5 and seen.adv_err > 0.7 and math.isnan(seen.ref_err)


def test_optimizer_steps_are_seen_with_their_class_lr_norm_and_state():
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: (n + 1) / 2 if n < 2 else 1.0)
    rec = Recorder(_LogProbs())
    with rec.watching():
        for step in range(3):
            rec("sampled", step=step, model=_model(torch.zeros(1, 1)), batch=None,
                truth=Truth(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), 1))
            opt.zero_grad()
            (model(torch.ones(1, 4)) * 100).sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            sched.step()
    seen = rec.opt_steps
    assert [o.kind for o in seen] == ["Adam"] * 3 and [o.step for o in seen] == [0, 1, 2]
    assert [o.groups[0]["lr"] for o in seen] == [0.05, 0.1, 0.1] and seen[0].groups[0]["weight_decay"] == 0.01
    assert all(abs(o.grad_norm - 0.5) < 1e-5 for o in seen)
    assert math.isnan(seen[0].state_step) and [o.state_step for o in seen[1:]] == [1.0, 2.0]
    opt.step()                                  # outside the block: not seen
    assert len(rec.opt_steps) == 3


def test_an_evaluation_that_moves_the_weights_or_steps_is_seen():
    model = torch.nn.Linear(2, 1)
    rec = Recorder(_LogProbs())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with rec.watching():
        rec("eval_begin", step=0, model=model, tasks=[7])
        rec("eval_end", step=0, model=model)
        rec("eval_begin", step=1, model=model, tasks=[8])
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        rec("eval_end", step=1, model=model)
    assert [(e.tasks, e.weights_changed) for e in rec.evals] == [([7], False), ([8], True)]
    assert [o.in_eval for o in rec.opt_steps] == [True]
