"""sandbox.py: private checkouts and the real git bisect, where nothing reaches the user's repo."""

from __future__ import annotations

import subprocess

import pytest
from helpers import git, install_hooks, submodule_repo

from rlbisect.errors import GitError
from rlbisect.git.repo import Repo
from rlbisect.git.sandbox import CheckoutError, Sandbox, parse_bisect_output


def test_bisect_state_lives_in_the_private_repository_only(tiny_repo):
    r = tiny_repo(["good"] + ["bad"] * 6)
    before = r.snapshot()
    with Sandbox(Repo.open(r.path)) as sb:
        step = sb.bisect_start(r.shas[0], r.shas[-1])
        assert step.status == "next" and step.commit in r.shas
        assert {"BISECT_START", "BISECT_LOG", "BISECT_HEAD"} <= {p.name for p in (sb.private / ".git").iterdir()}
        assert r.snapshot() == before                     # nothing in the user's repo, even now
        assert r.git("bisect", "log", check=False) == ""
        sb.mark(step.commit, "bad")
        log = sb.bisect_log()
        tmp = sb.tmp
    assert log.startswith("# bad:") and "git bisect start '--no-checkout'" in log
    assert r.snapshot() == before and not tmp.exists()


def test_checkout_gives_exactly_the_commits_files(tiny_repo):
    r = tiny_repo(["good", "skip", "bad", "bad"])
    with Sandbox(Repo.open(r.path)) as sb:
        wt = sb.checkout(r.shas[1])
        assert (wt / "state").read_text() == "skip\n"
        (wt / "state").write_text("garbage\n")
        (wt / "build").mkdir()
        (wt / "build" / "artifact.o").write_text("x")
        wt2 = sb.checkout(r.shas[2])
        assert wt2 == wt and sorted(p.name for p in wt.iterdir()) == [".git", "n", "state"]
        assert (wt / "state").read_text() == "bad\n"
        with pytest.raises(GitError):
            sb.checkout("0" * 40)
        assert (sb.checkout(r.shas[3]) / "n").read_text() == "3\n"   # recovers afterwards
        assert sb.checkout(r.shas[0], slot="other") != sb.checkout(r.shas[3])


def test_cleanup_runs_when_the_body_raises(tiny_repo):
    r = tiny_repo(["good", "bad", "bad", "bad"])
    before = r.snapshot()
    with pytest.raises(RuntimeError):
        with Sandbox(Repo.open(r.path)) as sb:
            sb.checkout(sb.bisect_start(r.shas[0], r.shas[-1]).commit)
            raise RuntimeError("boom")
    assert r.snapshot() == before and not sb.tmp.exists()


def test_a_probe_sees_the_users_refs_but_cannot_change_them(tiny_repo):
    r = tiny_repo(["good", "good", "bad"])
    r.git("tag", "v1", r.shas[1])
    before = r.snapshot()
    with Sandbox(Repo.open(r.path)) as sb:
        wt = sb.checkout(r.shas[2])
        run = lambda *a: subprocess.run(["git", *a], cwd=wt, capture_output=True, text=True)  # noqa: E731
        assert run("describe", "--tags").stdout.startswith("v1-1-")
        for args in (["tag", "mine"], ["branch", "mine"], ["config", "user.name", "x"],
                     ["commit", "-q", "--allow-empty", "-m", "x"], ["notes", "add", "-m", "n"]):
            assert run(*args).returncode == 0, args
        (wt / "state").write_text("edited\n")
        assert run("stash").returncode == 0
    assert r.snapshot() == before


def test_no_hook_of_the_user_runs(tiny_repo, tmp_path):
    r = tiny_repo(["good", "bad", "bad", "bad"])
    marker = tmp_path / "hooks-ran"
    install_hooks(r.path / ".git", marker)
    r.git("config", "core.hooksPath", str(r.path / ".git" / "hooks"))
    with Sandbox(Repo.open(r.path)) as sb:
        wt = sb.checkout(sb.bisect_start(r.shas[0], r.shas[-1]).commit)
        sb.mark(r.shas[2], "bad")
        sb.checkout(r.shas[1])
        git(wt, "commit", "-q", "--allow-empty", "-m", "x")
    assert not marker.exists()


def test_parse_bisect_output_reads_gits_three_endings():
    sha = "a" * 40
    assert parse_bisect_output(0, f"{sha} is the first bad commit\ncommit {sha}", "").first_bad == sha
    amb = parse_bisect_output(2, "There are only 'skip'ped commits left to test.\n"
                              f"The first bad commit could be any of:\n{sha}\n{'b' * 40}\n"
                              "We cannot bisect more!", "")
    assert amb.status == "ambiguous" and amb.candidates == [sha, "b" * 40]
    nxt = parse_bisect_output(0, "Bisecting: 3 revisions left to test after this "
                              "(roughly 2 steps)\n[x] y", "")
    assert nxt.status == "next" and nxt.remaining == 3
    with pytest.raises(GitError, match="fatal: nope"):
        parse_bisect_output(128, "", "fatal: nope")


def test_submodules_are_checked_out_at_the_recorded_commit(tmp_path):
    top, shas, _ = submodule_repo(tmp_path)
    with Sandbox(Repo.open(top)) as sb:
        assert (sb.checkout(shas[1]) / "vendor" / "lib" / "state").read_text() == "good\n"
        assert (sb.checkout(shas[4]) / "vendor" / "lib" / "state").read_text() == "bad\n"
        assert (sb.checkout(shas[2]) / "vendor" / "lib" / "state").read_text() == "good\n"


def test_a_submodule_never_initialised_in_the_users_clone_stays_empty_as_there(tmp_path):
    """A plain `git clone` without --recurse-submodules: git bisect shows the folder empty; every
    probe was a skip ("not in your local clone") and the bisect stopped."""
    top, shas, _ = submodule_repo(tmp_path)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(top), str(clone)], check=True)
    assert not (clone / ".git" / "modules").exists() and not any((clone / "vendor" / "lib").iterdir())
    with Sandbox(Repo.open(clone)) as sb:
        wt = sb.checkout(shas[4])
        assert (wt / "n").read_text() == "4\n" and list((wt / "vendor" / "lib").iterdir()) == []


def test_a_submodule_renamed_in_gitmodules_is_found_through_its_gitfile(tmp_path):
    """Renamed, it has no .git/modules/<new name>; its checkout's .git file still points at the
    clone. Taken for never cloned, it was an empty folder, and the rename named the culprit."""
    top, shas, _ = submodule_repo(tmp_path)
    git(top, "config", "-f", ".gitmodules", "--rename-section", "submodule.vendor/lib", "submodule.renamed")
    git(top, "commit", "-qam", "rename the submodule")
    assert (top / "vendor" / "lib" / ".git").is_file()
    with Sandbox(Repo.open(top)) as sb:
        assert (sb.checkout(git(top, "rev-parse", "HEAD")) / "vendor" / "lib" / "state").read_text() == "bad\n"


def test_a_submodule_commit_not_available_locally_is_a_clear_error(tmp_path):
    top, shas, lib = submodule_repo(tmp_path)
    (lib / "state").write_text("newer\n")
    git(lib, "commit", "-qam", "newer")
    git(top / "vendor" / "lib", "fetch", "-q")
    git(top / "vendor" / "lib", "checkout", "-q", "origin/main")
    git(top, "commit", "-qam", "bump")
    git(top / "vendor" / "lib", "checkout", "-q", "HEAD~1")   # the user's clone lacks nothing...
    modules = top / ".git" / "modules" / "vendor" / "lib"
    newest = git(lib, "rev-parse", "HEAD")
    git(modules, "reflog", "expire", "--expire=now", "--all")
    git(modules, "update-ref", "-d", "refs/remotes/origin/main")
    git(modules, "gc", "-q", "--prune=now")
    head = git(top, "rev-parse", "HEAD")                       # ...until its object is gone
    with Sandbox(Repo.open(top)) as sb:
        with pytest.raises(CheckoutError, match=f"submodule vendor/lib at {newest[:12]} is not"):
            sb.checkout(head)




def _committed(path, files_by_commit, fmt: str = "sha1") -> list[str]:
    """A repository at ``path`` with one commit per dict of files -> the commit ids."""
    if not (path / ".git").is_dir():
        subprocess.run(["git", "init", "-q", "-b", "main", f"--object-format={fmt}", str(path)], check=True)
    shas = []
    for files in files_by_commit:
        for name, text in files.items():
            (path / name).write_text(text)
        git(path, "add", "-A")
        git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c")
        shas.append(git(path, "rev-parse", "HEAD").strip())
    return shas


def test_a_checkout_applies_the_repositorys_own_filters_as_the_users_does(tmp_path):
    """A filter set in .git/config (git-crypt, `git lfs install --local`): without it every probe
    read the stored form, so the commit that adopted the filter looked like the regression."""
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "config", "filter.rev.clean", "rev")
    git(repo, "config", "filter.rev.smudge", "rev")
    shas = _committed(repo, [{".gitattributes": "secret.txt filter=rev\n", "secret.txt": "plain text\n"}])
    stored = git(repo, "cat-file", "-p", f"{shas[0]}:secret.txt")
    assert stored.strip() == "txet nialp"     # the clean filter ran: the object holds the stored form
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("*.md eol=crlf\n")
    with Sandbox(Repo.open(repo)) as sb:
        wt = sb.checkout(shas[0])
        assert (wt / "secret.txt").read_text() == "plain text\n"
        assert (sb.private / ".git" / "info" / "attributes").read_text() == "*.md eol=crlf\n"


def test_a_sha256_repository_is_bisected_like_any_other(tmp_path):
    repo = tmp_path / "r"
    shas = _committed(repo, [{"v": "good\n"}, {"v": "good\n", "n": "1"}, {"v": "bad\n"}], fmt="sha256")
    assert len(shas[0]) == 64
    with Sandbox(Repo.open(repo)) as sb:
        step = sb.bisect_start(shas[0], shas[-1])
        assert (sb.checkout(step.commit) / "v").read_text() in ("good\n", "bad\n")
