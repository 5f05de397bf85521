"""repo.py: range validation, per-worktree bisect state, cleanup of the shared git dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbisect.bisect import repo as gitrepo


def test_resolve_range_returns_full_ids(tiny_repo):
    r = tiny_repo(["good", "good", "bad"])
    repo = gitrepo.open_repo(r.path)
    assert gitrepo.resolve_range(repo, "main~2..main") == (r.shas[0], r.shas[2])
    spaced = f" {r.shas[0][:7]} .. {r.shas[1]} "
    assert gitrepo.resolve_range(repo, spaced) == (r.shas[0], r.shas[1])


@pytest.mark.parametrize("spec,needle", [
    ("main", "expected GOOD..BAD"), ("..main", "expected GOOD..BAD"),
    ("main~1...main", "expected GOOD..BAD"), ("a..b..c", "expected GOOD..BAD"),
    ("nosuch..main", "unknown revision 'nosuch'"), ("main~2..-x", "unknown revision '-x'"),
    ("main..main", "empty range"), ("main..main~2", "did you swap them?"),
])
def test_resolve_range_rejects_bad_input_with_one_line(tiny_repo, spec, needle):
    r = tiny_repo(["good", "good", "bad"])
    with pytest.raises(gitrepo.BisectInputError) as e:
        gitrepo.resolve_range(gitrepo.open_repo(r.path), spec)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unrelated_endpoints_and_diverged_branches_are_rejected(tiny_repo):
    # c1 and c2 both branch off c0: neither is an ancestor of the other.
    r = tiny_repo(["good", "good", "bad"], parents=[[], [0], [0]])
    with pytest.raises(gitrepo.BisectInputError, match="diverged or unrelated"):
        gitrepo.resolve_range(gitrepo.open_repo(r.path), f"{r.shas[1]}..{r.shas[2]}")


def test_not_a_repository(tmp_path):
    with pytest.raises(gitrepo.BisectInputError, match="not a git repository"):
        gitrepo.open_repo(tmp_path)


def test_bisect_state_lives_in_the_linked_worktree_only(tiny_repo):
    r = tiny_repo(["good"] + ["bad"] * 6)
    before = r.snapshot()
    repo = gitrepo.open_repo(r.path)
    with gitrepo.BisectSession(repo, r.shas[0], r.shas[-1]) as s:
        step = s.start()
        assert step.status == "next" and step.commit in r.shas
        admin = r.path / ".git" / "worktrees" / s.bisect_wt.name
        names = {p.name for p in admin.iterdir()}
        assert {"BISECT_START", "BISECT_LOG", "BISECT_HEAD", "BISECT_TERMS"} <= names
        assert (admin / "refs" / "bisect" / "bad").exists()
        # The main worktree sees neither the bisect files nor refs/bisect/*.
        assert not list((r.path / ".git").glob("BISECT_*"))
        assert "refs/bisect" not in r.git("for-each-ref")
        assert r.git("bisect", "log", check=False) == ""
        s.mark(step.commit, "bad")
        log = s.log()
    assert log.startswith("git bisect start '--no-checkout'") or "git bisect start" in log
    assert r.snapshot() == before
    repo.close()


def test_start_does_not_leave_an_empty_packed_refs_behind(tiny_repo):
    r = tiny_repo(["good", "bad", "bad"])
    assert not (r.path / ".git" / "packed-refs").exists()
    repo = gitrepo.open_repo(r.path)
    with gitrepo.BisectSession(repo, r.shas[0], r.shas[-1]) as s:
        s.start()
        # git writes the empty file while bisecting; we put the directory back afterwards.
        assert (r.path / ".git" / "packed-refs").exists()
    assert not (r.path / ".git" / "packed-refs").exists()
    assert not (r.path / ".git" / "worktrees").exists()
    repo.close()


def test_existing_packed_refs_and_worktrees_are_kept_byte_identical(tiny_repo, tmp_path):
    r = tiny_repo(["good", "bad", "bad"])
    r.git("tag", "v0", r.shas[0])
    r.git("pack-refs", "--all")
    (r.path / ".git" / "packed-refs").write_bytes(  # an older header git would not write today
        (r.path / ".git" / "packed-refs").read_bytes().replace(b" sorted", b""))
    r.git("worktree", "add", "-q", "--detach", str(tmp_path / "users-own-worktree"), r.shas[1])
    before = r.snapshot()
    repo = gitrepo.open_repo(r.path)
    with gitrepo.BisectSession(repo, r.shas[0], r.shas[-1]) as s:
        s.mark(s.start().commit, "good")
    assert r.snapshot() == before
    repo.close()


def test_materialize_gives_exactly_the_commits_files(tiny_repo):
    r = tiny_repo(["good", "skip", "bad", "bad"])
    repo = gitrepo.open_repo(r.path)
    with gitrepo.BisectSession(repo, r.shas[0], r.shas[-1]) as s:
        s.start()
        wt = s.materialize(r.shas[1])
        assert (wt / "state").read_text() == "skip\n"
        (wt / "state").write_text("garbage\n")
        (wt / "build").mkdir()
        (wt / "build" / "artifact.o").write_text("x")
        wt2 = s.materialize(r.shas[2])
        assert wt2 == wt and sorted(p.name for p in wt.iterdir()) == [".git", "n", "state"]
        assert (wt / "state").read_text() == "bad\n"
        with pytest.raises(gitrepo.RepoError):
            s.materialize("0" * 40)
        assert (s.materialize(r.shas[3]) / "n").read_text() == "3\n"  # recovers afterwards
        tmp = s.tmp
    assert not tmp.exists()
    repo.close()


def test_cleanup_runs_when_the_body_raises(tiny_repo):
    r = tiny_repo(["good", "bad", "bad", "bad"])
    before = r.snapshot()
    repo = gitrepo.open_repo(r.path)
    with pytest.raises(RuntimeError):
        with gitrepo.BisectSession(repo, r.shas[0], r.shas[-1]) as s:
            s.materialize(s.start().commit)
            raise RuntimeError("boom")
    assert r.snapshot() == before and not s.tmp
    repo.close()


def test_history_is_oldest_first_with_parents(tiny_repo):
    r = tiny_repo(["good", "good", "skip", "bad", "bad"], parents=[[], [0], [0], [1, 2], [3]])
    repo = gitrepo.open_repo(r.path)
    h = gitrepo.history(repo, r.shas[0], r.shas[4])
    assert h[0] == (r.shas[0], ()) and h[-1] == (r.shas[4], (r.shas[3],))
    assert set(dict(h)) == set(r.shas)
    assert dict(h)[r.shas[3]] == (r.shas[1], r.shas[2])
    fp = [sha for sha, _ in gitrepo.history(repo, r.shas[0], r.shas[4], first_parent=True)]
    assert fp == [r.shas[0], r.shas[1], r.shas[3], r.shas[4]]
    repo.close()


def test_parse_bisect_output_reads_gits_three_endings():
    sha = "a" * 40
    assert gitrepo.parse_bisect_output(0, f"{sha} is the first bad commit\ncommit {sha}", "") \
        .first_bad == sha
    amb = gitrepo.parse_bisect_output(2, "There are only 'skip'ped commits left to test.\n"
                                      f"The first bad commit could be any of:\n{sha}\n{'b' * 40}\n"
                                      "We cannot bisect more!", "")
    assert amb.status == "ambiguous" and amb.candidates == [sha, "b" * 40]
    nxt = gitrepo.parse_bisect_output(0, "Bisecting: 3 revisions left to test after this "
                                      "(roughly 2 steps)\n[x] y", "")
    assert nxt.status == "next" and nxt.remaining == 3
    with pytest.raises(gitrepo.RepoError, match="fatal: nope"):
        gitrepo.parse_bisect_output(128, "", "fatal: nope")


def test_git_commands_run_without_the_users_hooks(tiny_repo, tmp_path):
    r = tiny_repo(["good", "bad", "bad", "bad"])
    marker = tmp_path / "hook-ran"
    hook = r.path / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    repo = gitrepo.open_repo(r.path)
    with gitrepo.BisectSession(repo, r.shas[0], r.shas[-1]) as s:
        s.materialize(s.start().commit)
        s.materialize(r.shas[1])
    assert not marker.exists()
    repo.close()
    assert Path(hook).exists()
