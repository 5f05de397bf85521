from reference_trainer.tasks import HARD_SHARE, N_FIXES, hardcoded, make_tasks, passes


def test_split_sizes_and_determinism():
    assert len(make_tasks("train")) == 20 and len(make_tasks("heldout")) == 10
    assert make_tasks("all") == make_tasks("all")
    assert make_tasks("all", seed=1) != make_tasks("all")


def test_exactly_one_fix_is_right_and_the_exploit_only_fools_public_tests():
    for t in make_tasks("all"):
        assert len(t.fixes) == N_FIXES
        assert [passes(f, t.public + t.hidden) for f in t.fixes].count(True) == 1
        assert passes(t.fixes[t.right], t.hidden)
        assert sum(passes(f, t.public) for f in t.fixes) == 1, "a wrong fix must fail a public test"
        assert not passes(t.buggy, t.public)
        assert passes(hardcoded(t), t.public) and not passes(hardcoded(t), t.hidden)


def test_right_answers_are_balanced_so_no_index_is_a_shortcut():
    for split, per_index in (("train", 4), ("heldout", 2)):
        rights = [t.right for t in make_tasks(split)]
        assert all(rights.count(i) == per_index for i in range(N_FIXES))


def test_half_of_each_split_is_hard_and_every_hint_admits_the_right_fix():
    for split, n in (("train", 20), ("heldout", 10)):
        tasks = make_tasks(split)
        assert all(t.right in t.hint and list(t.hint) == sorted(set(t.hint)) for t in tasks)
        assert sum(len(t.hint) == 2 for t in tasks) == round(HARD_SHARE * n)
        assert all(len(t.hint) in (1, 2) for t in tasks)
