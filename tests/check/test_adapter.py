import pytest

from rlbisect.check.adapter import AdapterError, TrainerAdapter, load_adapter


def test_reference_adapter_loads_by_module_and_satisfies_the_protocol():
    a = load_adapter("reference_trainer.adapter:make_adapter", episodes=16, seed=2, kl_coef=0.0, bug=None)
    assert isinstance(a, TrainerAdapter) and a.episodes == 16


def test_adapter_loads_from_a_file_path(tmp_path):
    f = tmp_path / "my_adapter.py"
    f.write_text("from reference_trainer.adapter import make_adapter as _m\n"
                 "def factory(episodes=64):\n    return _m(episodes=episodes)\n")
    assert load_adapter(f"{f}:factory", episodes=8).episodes == 8


@pytest.mark.parametrize("spec, message", [
    ("no_colon_here", "MODULE:FACTORY"),
    ("/nonexistent/a.py:f", "does not exist"),
    ("surely_not_a_module_xyz:f", "cannot import"),
    ("reference_trainer.adapter:nope", "no callable"),
])
def test_bad_specs_get_one_line_errors(spec, message):
    with pytest.raises(AdapterError, match=message) as e:
        load_adapter(spec)
    assert "\n" not in str(e.value)


def test_an_option_the_factory_ignores_is_an_error_when_set(tmp_path):
    f = tmp_path / "a.py"
    f.write_text("from reference_trainer.adapter import make_adapter as _m\ndef factory():\n    return _m()\n")
    assert load_adapter(f"{f}:factory", bug=None) is not None
    with pytest.raises(AdapterError, match="does not accept option 'bug'"):
        load_adapter(f"{f}:factory", bug="sign_flip")


def test_a_kwargs_factory_gets_only_the_options_that_were_set(tmp_path):
    """A factory forwarding **kwargs to GRPOConfig failed on the bug=None it never asked for."""
    f = tmp_path / "kw.py"
    f.write_text("from reference_trainer.adapter import make_adapter as _m\n"
                 "def factory(episodes=64, **cfg):\n    a = _m(episodes=episodes)\n    a.got = cfg\n    return a\n")
    assert load_adapter(f"{f}:factory", episodes=8, bug=None, kl_coef=0.1).got == {"kl_coef": 0.1}
    assert load_adapter(f"{f}:factory", bug="sign_flip").got == {"bug": "sign_flip"}


def test_an_adapter_that_exits_while_loading_could_not_be_loaded(tmp_path):
    """Its SystemExit(0) was rlbisect's own: exit 0, no output, nothing checked."""
    from rlbisect.check.loading import AdapterUnfit
    (tmp_path / "exits.py").write_text("raise SystemExit(0)\n")
    (tmp_path / "argv.py").write_text("import sys\ndef make(**kw):\n    sys.exit('usage: train.py --lr LR')\n")
    for spec, said in ((f"{tmp_path}/exits.py:make", "cannot import"),
                       (f"{tmp_path}/argv.py:make", "failed: it called sys.exit('usage: train.py --lr LR')")):
        with pytest.raises(AdapterUnfit, match="it called sys.exit") as e:
            load_adapter(spec)
        assert said in str(e.value) and e.value.exit_code == 125


def test_incomplete_adapter_and_failing_factory(tmp_path):
    f = tmp_path / "b.py"
    f.write_text("class A:\n    def policy(self): pass\ndef make(): return A()\n"
                 "def boom(): raise RuntimeError('no GPU')\n"
                 "raise_on_import = False\n")
    with pytest.raises(AdapterError, match="without probe_batch"):
        load_adapter(f"{f}:make")
    with pytest.raises(AdapterError, match="RuntimeError: no GPU"):
        load_adapter(f"{f}:boom")


def test_a_file_inside_a_package_is_imported_as_part_of_it(monkeypatch):
    """`reference_trainer/adapter.py` uses relative imports: it loads as reference_trainer.adapter."""
    from pathlib import Path

    import reference_trainer
    monkeypatch.chdir(Path(reference_trainer.__file__).parents[1])
    adapter = load_adapter("reference_trainer/adapter.py:make_adapter", episodes=8)
    assert type(adapter).__module__ == "reference_trainer.adapter" and adapter.episodes == 8


def test_a_module_in_the_current_folder_is_found_as_python_m_would(tmp_path, monkeypatch):
    (tmp_path / "my_local_adapter.py").write_text(
        "from reference_trainer.adapter import make_adapter as _m\n"
        "def make_adapter(episodes=64):\n    return _m(episodes=episodes)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    try:
        assert load_adapter("my_local_adapter:make_adapter", episodes=8).episodes == 8
    finally:    # a module no sys.path finds any more: tests/_proc/test_identity.py would see it
        __import__("sys").modules.pop("my_local_adapter", None)


def test_a_file_is_imported_once_per_process(tmp_path):
    f = tmp_path / "counted.py"
    f.write_text("import builtins\nbuiltins.rlbisect_loads = getattr(builtins, 'rlbisect_loads', 0) + 1\n"
                 "from reference_trainer.adapter import make_adapter\n")
    import builtins
    load_adapter(f"{f}:make_adapter", episodes=8)
    load_adapter(f"{f}:make_adapter", episodes=8, bug="sign_flip")
    assert builtins.rlbisect_loads == 1


def test_the_readmes_adapter_command_works_from_the_top_folder(monkeypatch):
    import re
    from pathlib import Path

    from typer.testing import CliRunner

    from rlbisect.cli.app import app
    root = Path(__file__).resolve().parents[2]
    command = re.search(r"^    rlbisect check --adapter (reference_trainer/\S+)$",
                        (root / "README.md").read_text(), re.M)
    assert command, "the README shows how to check with the reference adapter file"
    monkeypatch.chdir(root)
    r = CliRunner().invoke(app, ["check", "--adapter", command[1], "--episodes", "16"])
    assert r.exit_code == 0 and "all checks passed" in r.output, r.output


def test_an_import_error_keeps_its_cause_on_one_line(tmp_path):
    # TRL's lazy import says "Failed to import X because of the following error" and the cause next
    f = tmp_path / "lazy.py"
    f.write_text("raise RuntimeError('Failed to import trl.trainer because of the following error:\\n"
                 "No module named weave')\n")
    with pytest.raises(AdapterError, match="No module named weave") as e:
        load_adapter(f"{f}:make")
    assert "\n" not in str(e.value)


def test_the_commands_defaults_reach_only_a_factory_that_takes_them(tmp_path):
    """--episodes 64 and --kl-coef 0.1, never given, made a factory with no options unbuildable."""
    f = tmp_path / "d.py"
    f.write_text("from reference_trainer.adapter import make_adapter as _m\n"
                 "def bare():\n    return _m()\n"
                 "def some(episodes=8):\n    a = _m(episodes=episodes)\n    a.got = episodes\n    return a\n"
                 "def kw(**cfg):\n    a = _m()\n    a.got = cfg\n    return a\n")
    assert load_adapter(f"{f}:bare", defaults={"episodes": 64, "kl_coef": 0.1}) is not None
    assert load_adapter(f"{f}:some", defaults={"episodes": 64, "kl_coef": 0.1}).got == 64
    assert load_adapter(f"{f}:kw", defaults={"kl_coef": 0.1}).got == {"kl_coef": 0.1}


def test_options_are_checked_before_anything_is_built(tmp_path):
    """TinyAgent's factory checks its own options (check_options); one without the hook is judged
    on its keywords alone, and never built here."""
    from rlbisect.check.loading import DEFAULT_ADAPTER, OptionRefused, check_options
    from reference_trainer.faults import BUGS
    with pytest.raises(OptionRefused) as bad_bug:
        check_options(DEFAULT_ADAPTER, bug="nope")
    assert all(name in str(bad_bug.value) for name in BUGS)      # every name, none cut off
    for options, said in (({"episodes": 3}, "--episodes 3: must be a multiple"),
                          ({"foo": 1}, "unknown setting 'foo'"),
                          ({"temperature": 0}, "invalid temperature: Input should be greater than 0"),
                          ({"max_turns": 0}, "invalid max_turns")):
        with pytest.raises(OptionRefused, match=said):
            check_options("tinyagent", **options)
    check_options(DEFAULT_ADAPTER, episodes=16, bug="sign_flip", temperature=0.7)
    f = tmp_path / "own.py"
    f.write_text("def make(episodes=64):\n    raise SystemExit('built')\n")
    check_options(f"{f}:make", episodes=3, defaults={"kl_coef": 0.1})          # its own to judge when built
    with pytest.raises(OptionRefused, match="does not accept option 'bug'"):
        check_options(f"{f}:make", bug="nope")
