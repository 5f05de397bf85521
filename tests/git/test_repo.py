"""repo.py, the only door to git: range validation, history, commit info, code identity."""

from __future__ import annotations

import subprocess

import pytest

from rlbisect.errors import InputError
from rlbisect.git.repo import CodeIdentity, Repo, code_identity


def test_resolve_range_returns_full_ids(tiny_repo):
    r = tiny_repo(["good", "good", "bad"])
    repo = Repo.open(r.path)
    assert repo.resolve_range("main~2..main") == (r.shas[0], r.shas[2])
    spaced = f" {r.shas[0][:7]} .. {r.shas[1]} "
    assert repo.resolve_range(spaced) == (r.shas[0], r.shas[1])


@pytest.mark.parametrize("spec,needle", [
    ("main", "expected GOOD..BAD"), ("..main", "expected GOOD..BAD"),
    ("main~1...main", "expected GOOD..BAD"), ("a..b..c", "expected GOOD..BAD"),
    ("nosuch..main", "unknown revision 'nosuch'"), ("main~2..-x", "unknown revision '-x'"),
    ("main..main", "empty range"), ("main..main~2", "did you swap them?"),
])
def test_resolve_range_rejects_bad_input_with_one_line(tiny_repo, spec, needle):
    r = tiny_repo(["good", "good", "bad"])
    with pytest.raises(InputError) as e:
        Repo.open(r.path).resolve_range(spec)
    assert needle in str(e.value) and "\n" not in str(e.value) and e.value.exit_code == 2


def test_unrelated_endpoints_and_diverged_branches_are_rejected(tiny_repo):
    # c1 and c2 both branch off c0: neither is an ancestor of the other.
    r = tiny_repo(["good", "good", "bad"], parents=[[], [0], [0]])
    with pytest.raises(InputError, match="diverged or unrelated"):
        Repo.open(r.path).resolve_range(f"{r.shas[1]}..{r.shas[2]}")


def test_a_good_commit_past_a_shallow_clones_edge_says_so(tiny_repo, tmp_path):
    r = tiny_repo(["good", "good", "good", "bad"])
    r.git("tag", "v0", r.shas[0])
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{r.path}", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "fetch", "-q", "--depth", "1", "origin", "tag", "v0"], check=True)
    with pytest.raises(InputError, match=r"shallow clone, and GOOD may lie past its edge \(git fetch --unshallow\)"):
        Repo.open(clone).resolve_range("v0..HEAD")


def test_not_a_repository(tmp_path):
    with pytest.raises(InputError, match="not a git repository"):
        Repo.open(tmp_path)
    with pytest.raises(InputError, match="no such directory"):
        Repo.open(tmp_path / "missing")


def test_opens_from_a_subfolder(tiny_repo):
    r = tiny_repo(["good", "bad"])
    (r.path / "sub").mkdir()
    assert Repo.open(r.path / "sub").root == r.path.resolve()


def test_history_is_oldest_first_with_parents_and_commit_info(tiny_repo):
    r = tiny_repo(["good", "good", "skip", "bad", "bad"], parents=[[], [0], [0], [1, 2], [3]])
    repo = Repo.open(r.path)
    h, info = repo.history(r.shas[0], r.shas[4])
    assert h[0] == (r.shas[0], ()) and h[-1] == (r.shas[4], (r.shas[3],))
    assert set(dict(h)) == set(r.shas) == set(info)
    assert dict(h)[r.shas[3]] == (r.shas[1], r.shas[2])
    assert info[r.shas[2]].subject == "c2 skip" and info[r.shas[2]].author == "Tiny <tiny@example.com>"
    fp = [sha for sha, _ in repo.history(r.shas[0], r.shas[4], first_parent=True)[0]]
    assert fp == [r.shas[0], r.shas[1], r.shas[3], r.shas[4]]


def test_code_identity(tiny_repo, tmp_path):
    assert code_identity(tmp_path) == CodeIdentity()  # not a repo: unknown, no exception
    r = tiny_repo(["good", "bad"])                    # dirty: a modified tracked file
    before = r.snapshot()
    assert code_identity(r.path) == CodeIdentity(r.shas[-1], True, str(r.path.resolve()))
    assert r.snapshot() == before                     # git status never refreshed the index
    r.git("checkout", "--", "n")
    r.git("reset", "-q")
    assert code_identity(r.path).dirty is False
