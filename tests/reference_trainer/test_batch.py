import torch

from reference_trainer.batch import collate, pad_batch, prepare_batch, trainer_log_probs
from reference_trainer.config import RLConfig
from reference_trainer.sampler import OWNER


def test_mask_is_exactly_the_policy_sampled_targets(probe_trajs, tok):
    batch = collate(probe_trajs, tok.pad_id, 8)
    for row, t in enumerate(probe_trajs):
        expected = [1.0 if o == OWNER["policy"] else 0.0 for o in t.owner[1:]]
        assert batch["action_mask"][row, : len(expected)].tolist() == expected
        assert batch["action_mask"][row, len(expected):].sum() == 0


def test_sampler_log_probs_match_the_trainer_recomputation(probe_trajs, tok, base):
    batch = collate(probe_trajs, tok.pad_id, 8)
    gap = (trainer_log_probs(base, batch["ids"], 1.0) - batch["sample_logp"]).abs()[batch["action_mask"] > 0]
    assert gap.max() < 1e-5


def test_mask_shift_fault_moves_every_span_one_right(probe_trajs, tok, base):
    batch, cfg = collate(probe_trajs, tok.pad_id, 8), RLConfig()
    clean = prepare_batch(base, batch, cfg)[0]
    shifted = prepare_batch(base, batch, cfg, "mask_shift")[0]
    assert torch.equal(shifted[:, 1:], clean[:, :-1]) and not torch.equal(shifted, clean)


def test_sign_flip_and_sampler_temp_faults_change_only_their_tensor(probe_trajs, tok, base):
    batch, cfg = collate(probe_trajs, tok.pad_id, 8), RLConfig()
    mask, old, adv = prepare_batch(base, batch, cfg)
    _, _, flipped = prepare_batch(base, batch, cfg, "sign_flip")
    assert torch.equal(flipped, -adv)
    m2, old2, _ = prepare_batch(base, batch, cfg, "sampler_temp")
    assert torch.equal(m2, mask) and torch.equal(old2, batch["sample_logp"])


def test_pad_batch_adds_columns_of_nothing(probe_trajs, tok):
    batch = collate(probe_trajs, tok.pad_id, 8)
    padded = pad_batch(batch, 5, tok.pad_id)
    assert padded["ids"].shape[1] == batch["ids"].shape[1] + 5
    assert (padded["ids"][:, -5:] == tok.pad_id).all() and padded["action_mask"][:, -5:].sum() == 0
    assert torch.equal(padded["rewards"], batch["rewards"])
