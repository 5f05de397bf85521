import pytest

from rlbisect.adapter import AdapterError, TrainerAdapter, load_adapter


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


def test_incomplete_adapter_and_failing_factory(tmp_path):
    f = tmp_path / "b.py"
    f.write_text("class A:\n    def policy(self): pass\ndef make(): return A()\n"
                 "def boom(): raise RuntimeError('no GPU')\n"
                 "raise_on_import = False\n")
    with pytest.raises(AdapterError, match="without probe_batch"):
        load_adapter(f"{f}:make")
    with pytest.raises(AdapterError, match="RuntimeError: no GPU"):
        load_adapter(f"{f}:boom")
