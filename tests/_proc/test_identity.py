"""When a server's fork is the process a caller would have started (rlbisect._proc.identity)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from rlbisect._proc import identity as ident


def _loaded(tests_tmp) -> dict:
    """What this interpreter loaded, less what other tests imported from their tmp folders (gone
    from sys.path since): this file's tests must not depend on the order tests run in."""
    return {n: f for n, f in ident.loaded_modules().items() if not str(f).startswith(str(tests_tmp))}


def test_shell_bookkeeping_and_git_variables_do_not_make_another_caller():
    me, env = ident.interpreter(), dict(os.environ)
    assert ident.mismatch(me, env, me, {**env, "PWD": "/elsewhere", "SHLVL": "7"}) is None
    assert ident.mismatch(me, env, me, {**env, "GIT_DIR": "/x/.git", "GIT_INDEX_FILE": "/x/i"}) is None
    assert ident.mismatch(me, env, me, {**env, "RLBISECT_IMPORTS": "src"}) is None   # read by the forked worker
    assert "OMP_NUM_THREADS" in ident.mismatch(me, env, me, {**env, "OMP_NUM_THREADS": "3"})   # torch reads it
    assert ident.mismatch(me, env, {**me, "executable": "/other/python"}, env) == "a different executable"
    assert ident.mismatch(me, env, {**me, "warnoptions": ["error"]}, env) == "a different warnoptions"


def test_a_module_the_caller_would_find_elsewhere_is_a_refusal(tmp_path, tmp_path_factory):
    loaded = _loaded(tmp_path_factory.getbasetemp())
    assert "pytest" in loaded and ident.shadowed(loaded, sys.path, os.getcwd()) is None
    (tmp_path / "pytest.py").write_text("")
    assert "its pytest comes from" in ident.shadowed(loaded, [str(tmp_path), *sys.path], os.getcwd())
    assert "where this interpreter" in ident.shadowed(loaded, ["/nowhere"], os.getcwd())


def test_a_submodule_entered_under_a_top_level_alias_is_its_packages(monkeypatch, tmp_path_factory):
    # scipy.sparse enters its Cython module as `_csparsetools` too: no sys.path finds that name
    import json.decoder
    monkeypatch.setitem(sys.modules, "_decoder_alias", json.decoder)
    loaded = _loaded(tmp_path_factory.getbasetemp())
    assert "_decoder_alias" not in loaded and "json" in loaded
    assert ident.shadowed(loaded, sys.path, os.getcwd()) is None


def test_an_edit_that_keeps_size_and_modification_time_is_still_seen(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("x = 1\n")
    st = module.stat()
    files = {str(module): (st.st_mtime_ns, st.st_size, st.st_ctime_ns)}
    assert ident.changed(files) is None
    time.sleep(0.01)
    module.write_text("x = 2\n")                        # same size...
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns))   # ...and the old modification time
    assert ident.changed(files) == str(module)           # the status-change time still moved
    module.unlink()
    assert ident.changed(files) == str(module)


def test_the_isolated_interpreter_is_what_python_dash_I_has():
    iso = ident.isolated_interpreter()
    assert iso["executable"] == sys.executable and "" not in iso["path"]
    assert os.getcwd() not in iso["path"]


def test_a_folder_others_can_open_or_a_missing_warm_dir_is_refused(tmp_path, monkeypatch):
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o755)
    open_folder.chmod(0o755)
    monkeypatch.setenv("RLBISECT_WARM_DIR", str(open_folder))
    with pytest.raises(ident.WarmError, match="no one else can open"):
        ident.home()
    missing = tmp_path / "a" / "b"
    monkeypatch.setenv("RLBISECT_WARM_DIR", str(missing))
    with pytest.raises(ident.WarmError, match="is not a folder"):
        ident.home()
    assert not (tmp_path / "a").exists()                 # refused, never made
