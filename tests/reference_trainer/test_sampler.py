import torch

from reference_trainer.config import RLConfig
from reference_trainer.sampler import OWNER, sample_episodes, sample_groups
from reference_trainer.tasks import make_tasks


def test_owners_log_probs_and_call_structure(probe_trajs, tok):
    for t in probe_trajs:
        assert len(t.ids) == len(t.owner) == len(t.sample_logp)
        assert t.ids[0] == tok.bos_id and t.owner[0] == OWNER["prompt"]
        for i, (tid, own, lp) in enumerate(zip(t.ids, t.owner, t.sample_logp)):
            if own == OWNER["policy"]:
                assert lp <= 0.0
                if t.owner[i - 1] != OWNER["policy"]:
                    assert tid == tok.call_id or t.info.n_invalid > 0   # a call opens with <call>
            else:
                assert lp == 0.0
            if own == OWNER["env"] and t.owner[i - 1] == OWNER["policy"]:
                assert tid == tok.obs_id                               # a reply opens with <obs>


def test_groups_are_laid_out_contiguously(probe_trajs):
    names = [t.info.task for t in probe_trajs]
    assert all(len(set(names[g * 8:(g + 1) * 8])) == 1 for g in range(8))


def test_same_generator_seed_same_episodes(base, tok):
    cfg, tasks = RLConfig(), make_tasks("train")[:2]
    a = sample_groups(base, tasks, tok, cfg.env, cfg.sampler, torch.Generator().manual_seed(3))
    b = sample_groups(base, tasks, tok, cfg.env, cfg.sampler, torch.Generator().manual_seed(3))
    assert [t.ids for t in a] == [t.ids for t in b] and [t.sample_logp for t in a] == [t.sample_logp for t in b]


def test_cache_and_no_cache_paths_sample_the_same_tokens(base, tok):
    cfg, tasks = RLConfig(), make_tasks("train")[:4]
    a = sample_episodes(base, tasks, tok, cfg.env, 1.0, torch.Generator().manual_seed(4))
    b = sample_episodes(base, tasks, tok, cfg.env, 1.0, torch.Generator().manual_seed(4), use_cache=False)
    assert [t.ids for t in a] == [t.ids for t in b]
