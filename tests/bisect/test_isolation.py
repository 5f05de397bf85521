"""Nothing a predicate does reaches the user's repository, no hook of theirs ever runs, and a
predicate that needs the repository's submodules gets them."""

from __future__ import annotations

from helpers import install_hooks, submodule_repo


def test_a_predicate_that_writes_with_git_changes_nothing_of_the_users(tiny_repo, run_cli,
                                                                       tmp_path):
    r = tiny_repo(["good"] * 4 + ["bad"] * 5)
    r.git("tag", "v0", r.shas[0])
    marker = tmp_path / "hooks-ran"
    install_hooks(r.path / ".git", marker)
    before = r.snapshot()
    writes = ("git tag probe-$(cat n) && git branch b-$(cat n) && git config rlb.n $(cat n) && "
              "git notes add -m n && echo x >> state && git stash -q && "
              "git commit -q --allow-empty -m mine && git gc -q --auto; git checkout -q -- . ;")
    code, out, data = run_cli(["main~8..main", "--repo", str(r.path), "--", "sh", "-c",
                               writes + ' case "$(cat state)" in good) exit 0;; *) exit 1;; esac'])
    assert code == 0 and data["first_bad"] == r.shas[4], out
    assert r.snapshot() == before      # refs, config, packed-refs, stash, hooks, index, files
    assert not marker.exists()         # not one of the user's hooks ran


def test_a_predicate_that_needs_submodules_gets_the_recorded_ones(tmp_path, run_cli):
    top, shas, _ = submodule_repo(tmp_path)
    code, out, data = run_cli([f"{shas[0]}..{shas[-1]}", "--repo", str(top), "--", "sh", "-c",
                               'test "$(cat vendor/lib/state)" = good'])
    assert code == 0 and data["first_bad"] == shas[3], out
