"""Reading any trainer's metrics file, renaming its keys, scoring runs, choosing the dashboard."""

import json
import math

import pytest

from rlbisect.errors import InputError
from rlbisect.runs.judge import dashboard, score, scores
from rlbisect.runs.read import json_line, parse_metric_map, read_rows, rename


def test_jsonl_rows_are_flattened_and_a_torn_last_line_is_ignored(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 0, "train": {"reward": 0.5}, "loss": NaN, "kl": Infinity}\n\n'
                 '{"step": 1, "train": {"reward": 0.7}}\n{"step": 2, "tra')
    rows = read_rows(f)
    assert len(rows) == 2 and rows[0]["train/reward"] == 0.5 and rows[1]["train/reward"] == 0.7
    assert math.isnan(rows[0]["loss"]) and rows[0]["kl"] == math.inf


def test_rows_are_written_as_strict_json_that_reads_back_as_it_was(tmp_path):
    """``rlbisect train --out`` wrote a diverged step's NaN bare: no strict JSON reader takes it."""
    row = {"step": 3, "loss": math.nan, "kl": math.inf, "low": -math.inf, "reward": 0.25, "sub": {"x": math.nan}}
    line = json_line(row)

    def refuse(constant):
        raise ValueError(constant)
    assert json.loads(line, parse_constant=refuse)["loss"] == "NaN"   # no bare NaN or Infinity
    f = tmp_path / "m.jsonl"
    f.write_text(line + "\n")
    back = read_rows(f)[0]
    assert math.isnan(back["loss"]) and math.isnan(back["sub/x"]) and not hasattr(back["loss"], "what")
    assert (back["kl"], back["low"], back["reward"], back["step"]) == (math.inf, -math.inf, 0.25, 3)


def test_values_that_are_not_numbers_are_kept_as_evidence_with_what_they_were(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"reward": null, "tag": "oops", "ok": true, "xs": [1, 2], "huge": 1e200, "n": "0.25"}\n')
    row = read_rows(f)[0]
    assert all(math.isnan(row[k]) for k in ("reward", "tag", "ok", "xs"))
    assert [row[k].what for k in ("reward", "tag", "ok", "xs")] == [
        "null", "a string ('oops')", "a boolean (true)", "a list"]
    assert row["huge"] == math.inf and row["n"] == 0.25        # beyond LIMIT: infinite; a number in a string


def test_a_huge_line_or_deep_nesting_is_one_line_error_not_a_memory_bill(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"a": 1}\n{"b": "' + "x" * (2 << 20) + '"}\n')
    with pytest.raises(InputError, match=r"m.jsonl:2: a line longer than"):
        read_rows(f)
    f.write_text('{"a": ' * 50 + "1" + "}" * 50 + "\n")
    with pytest.raises(InputError, match=r"m.jsonl:1: objects nested deeper"):
        read_rows(f)
    f.write_text("[" * 100000 + "]" * 100000 + "\n")
    with pytest.raises(InputError, match=r"m.jsonl:1: (nested deeper|a JSON list)"):
        read_rows(f)


def test_control_characters_in_keys_are_shown_not_sent(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"rew\\u001b[31mard": 1}\n')
    assert list(read_rows(f)[0]) == ["rew\\x1b[31mard"]


def test_a_broken_middle_line_or_a_non_object_is_refused_with_its_line(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(InputError, match=r"m.jsonl:2"):
        read_rows(f)
    f.write_text('[1, 2]\n')
    with pytest.raises(InputError, match="a JSON list"):
        read_rows(f)
    with pytest.raises(InputError, match="No such file"):
        read_rows(tmp_path / "absent.jsonl")


def test_csv_rows_skip_empty_cells(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("step,reward,eval/acc\n0,0.5,\n1,0.6,0.25\n")
    assert read_rows(f) == [{"step": 0.0, "reward": 0.5}, {"step": 1.0, "reward": 0.6, "eval/acc": 0.25}]
    f.write_text("step,reward,eval/acc\n0,0.5\n1,0.6,0.25\n")   # the empty last cell left out
    assert read_rows(f) == [{"step": 0.0, "reward": 0.5}, {"step": 1.0, "reward": 0.6, "eval/acc": 0.25}]


def test_an_integer_too_large_for_a_float_is_an_infinity_not_a_crash(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"step": 0, "reward": 1%s}\n{"step": 1, "reward": -1%s}\n' % ("0" * 400, "0" * 400))
    assert [r["reward"] for r in read_rows(f)] == [math.inf, -math.inf]


def test_metric_map_from_pairs_and_json_file(tmp_path):
    assert parse_metric_map(["train/reward=reward, eval/acc=eval_pass", "kl=kl_ref"]) == \
        {"train/reward": "reward", "eval/acc": "eval_pass", "kl": "kl_ref"}
    f = tmp_path / "map.json"
    f.write_text('{"r": "reward"}')
    assert parse_metric_map([str(f)]) == {"r": "reward"}
    for bad in (["reward"], ["=x"], [str(tmp_path / "none.json")]):
        with pytest.raises(InputError):
            parse_metric_map(bad)
    assert rename([{"r": 1.0, "x": 2.0}], {"r": "reward"}) == [{"reward": 1.0, "x": 2.0}]


def test_score_uses_the_last_window_or_the_last_value_of_a_sparse_metric():
    rows = [{"reward": r, **({"eval_pass": e} if e is not None else {})}
            for r, e in [(0.1, 0.2), (0.2, None), (0.3, None), (0.5, 0.4)]]
    assert score(rows, "reward", 2) == pytest.approx(0.4)
    assert score(rows, "eval_pass", 2) == pytest.approx(0.3)   # logged on half the rows: a window
    rows.append({"reward": 0.6})
    assert score(rows, "eval_pass", 2) == pytest.approx(0.4)   # fewer than half: the last value
    with pytest.raises(KeyError, match="not in the run"):
        score(rows, "kl_ref", 2)


def test_the_dashboard_leaves_out_counters_and_clocks_and_needs_every_run():
    runs = [[{"step": 0, "epoch": 0.1, "reward": 1, "step_time": 3, "train/samples_per_second": 9,
              "grad_norm": 1, "only_here": 1}],
            [{"step": 0, "epoch": 0.1, "reward": 2, "step_time": 3, "train/samples_per_second": 9,
              "grad_norm": 2}]]
    assert dashboard(runs) == ["reward", "grad_norm"]
    assert dashboard(runs, ["step"]) == ["step"]   # asked for: kept
    assert scores({0: runs[0], 1: runs[1]}, ["reward", "only_here"], 1) == {"reward": [1.0, 2.0]}


def test_tensorboard_scalars_become_rows_by_step(tmp_path):
    pytest.importorskip("tensorboard")   # .ci/run installs the [tensorboard] extra
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(str(tmp_path / "tb"))
    for step in range(3):
        w.add_scalar("train/reward", 0.5 + step, step)
        if step % 2 == 0:
            w.add_scalar("eval/acc", 0.25 * step, step)
    w.add_text("note", "not a metric", 1)
    w.close()
    rows = read_rows(tmp_path / "tb")
    assert rows == [{"step": 0.0, "train/reward": 0.5, "eval/acc": 0.0}, {"step": 1.0, "train/reward": 1.5},
                    {"step": 2.0, "train/reward": 2.5, "eval/acc": 0.5}]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no events.out.tfevents"):
        read_rows(tmp_path / "empty")
    bad = tmp_path / "events.out.tfevents.1.bad"
    bad.write_bytes(b"\x00" * 40)
    assert read_rows(bad) == []   # TensorBoard's loader skips what it cannot read: no rows, no guess


def test_verls_file_logger_is_read_with_our_names_beside_its_own(tmp_path):
    f = tmp_path / "verl.jsonl"      # verl.utils.tracking.FileLogger: {"step": N, "data": {...}}
    f.write_text('{"step": 1, "data": {"critic/score/mean": 0.25, "actor/pg_clipfrac": 0.1, "actor/ppo_kl": 0.02}}\n'
                 '{"step": 2, "data": {"critic/score/mean": 0.5, "response_length/mean": 41.0}}\n')
    rows = rename(read_rows(f), {})
    assert rows[0] == {"step": 1.0, "critic/score/mean": 0.25, "reward": 0.25, "actor/pg_clipfrac": 0.1,
                       "clip_frac": 0.1, "actor/ppo_kl": 0.02}          # ppo_kl is not our approx_kl
    assert rows[1]["reward"] == 0.5 and rows[1]["length"] == 41.0
    assert rename(read_rows(f), {"critic/score/mean": "score"})[0]["score"] == 0.25
    both = tmp_path / "both.jsonl"   # a row that logs our name as well keeps its own value
    both.write_text('{"step": 0, "reward": 1.0, "critic/score/mean": 0.5}\n')
    assert rename(read_rows(both), {})[0]["reward"] == 1.0


def test_a_value_read_once_keeps_what_it_was_when_flattened_again():
    from rlbisect.runs.read import flatten
    once = flatten({"reward": [1.0, 2.0], "ok": "yes"})
    again = flatten(once)       # the short-run predicate flattens the rows a runner gives it
    assert again["reward"].what == "a list" and again["ok"].what == "a string ('yes')"


def test_a_byte_order_mark_a_semicolon_csv_and_a_file_that_is_no_json_at_all(tmp_path):
    bom = tmp_path / "bom.jsonl"     # PowerShell's and Excel's UTF-8
    bom.write_bytes(b'\xef\xbb\xbf{"reward": 0.5}\n{"reward": 0.6}\n')
    assert [r["reward"] for r in read_rows(bom)] == [0.5, 0.6]
    semi = tmp_path / "semi.csv"     # a spreadsheet whose locale writes decimal commas
    semi.write_bytes(b'\xef\xbb\xbfstep;reward\n0;0.5\n1;0.6\n')
    assert read_rows(semi) == [{"step": 0.0, "reward": 0.5}, {"step": 1.0, "reward": 0.6}]
    garbage = tmp_path / "garbage.jsonl"   # one line that is no JSON is not "a torn last line"
    garbage.write_text("this is not json\n")
    with pytest.raises(InputError, match="garbage.jsonl:1: not a JSON object per line"):
        read_rows(garbage)
