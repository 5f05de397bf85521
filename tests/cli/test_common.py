"""cli/common.py: what the commands share about their outputs."""

import json
import math

import pytest

from rlbisect.cli.common import distinct, finite, folder_path, json_text, output_path
from rlbisect.errors import InputError


def test_json_text_writes_what_a_json_parser_reads():
    # a run that diverged (NaN) or crashed (read as -inf): Python's json wrote bare NaN and -Infinity
    doc = {"values": {"reward": math.nan, "loss": -math.inf, "ok": 1.5}, "runs": [(math.inf, 2)]}
    text = json_text(doc)
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}")) == {
        "values": {"reward": None, "loss": None, "ok": 1.5}, "runs": [[None, 2]]}


def test_a_figure_needs_an_image_extension_and_two_outputs_need_two_files(tmp_path):
    assert output_path(str(tmp_path / "t.svg"), "--plot", figure=True) == tmp_path / "t.svg"
    with pytest.raises(InputError, match="a figure needs one of the extensions"):
        output_path(str(tmp_path / "t.txt"), "--plot", figure=True)
    same = tmp_path / "x"
    with pytest.raises(InputError, match="--json and --report name the same file"):
        distinct({"--json": same, "--report": tmp_path / "." / "x"})
    assert distinct({"--json": same, "--plot": None, "--report": tmp_path / "y"})


def test_a_folder_to_fill_is_refused_where_a_file_holds_its_name(tmp_path):
    (tmp_path / "f").write_text("x")
    assert folder_path(str(tmp_path / "new" / "deeper"), "--keep") == tmp_path / "new" / "deeper"
    for bad in ("f", "f/sub"):
        with pytest.raises(InputError, match=f"--snapshot-dir {tmp_path}/{bad}: {tmp_path}/f is a file, not a folder"):
            folder_path(str(tmp_path / bad), "--snapshot-dir")


def test_finite_refuses_nan_and_infinities_by_flag_and_lets_unset_options_be():
    finite(lr=6e-4, kl_coef=None, temperature=0.0)
    for value in (math.inf, -math.inf, math.nan):
        with pytest.raises(InputError, match="^--kl-coef: Input should be a finite number$"):
            finite(lr=1.0, kl_coef=value)


@pytest.mark.parametrize("args", [["replay", "x.pt", "--adapter", ""], ["promote", "x.pt", "--to", ".", "--adapter", " "],
                                  ["run", "HEAD~1..HEAD", "--predicate", "invariants", "--adapter", ""],
                                  ["replay", "x.pt", "--tolerance", "inf"], ["promote", "x.pt", "--to", ".", "--tolerance", "inf"],
                                  ["run", "HEAD~1..HEAD", "--flaky", "--min-effect", "inf", "--", "true"]])
def test_an_empty_adapter_or_an_infinite_bound_is_refused_by_every_command(args):
    """An unset "$ADAPTER" replayed or bisected TinyAgent instead; --tolerance inf passed every difference."""
    from typer.testing import CliRunner

    from rlbisect.cli.app import app
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert "--adapter is empty" in r.output or "should be a finite number" in r.output


def test_run_refuses_an_adapter_option_the_invariants_predicate_sets_itself():
    """Given twice to the factory, every probe was a skip with a TypeError traceback."""
    from typer.testing import CliRunner

    from rlbisect.cli.app import app
    r = CliRunner().invoke(app, ["run", "HEAD~1..HEAD", "--predicate", "invariants", "--adapter-opt", "kl_coef=0.2"])
    assert r.exit_code == 2 and "kl_coef is set by the invariants predicate (0.1), not by --adapter-opt" in r.output
