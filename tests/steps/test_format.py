"""Snapshot files: bit-exact round trip, atomic writes, and refusal of every broken or hostile file."""

from __future__ import annotations

import json
import os
import pickle
import random
import struct
import tracemalloc

import numpy as np
import pytest
import safetensors.torch
import torch
from typer.testing import CliRunner

from rlbisect.cli.app import app
from rlbisect.cli.common import json_text
from rlbisect.git.repo import CodeIdentity
from rlbisect.steps.capture import capture
from rlbisect.steps.describe import describe
from rlbisect.steps.replay import compare_stats, restore
from rlbisect.steps.format import RngState, Snapshot, SnapshotError, load_snapshot, save_snapshot
from rlbisect.steps.spikes import Hit


def _trained(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):  # non-trivial Adam moments and step counts
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
    return model, opt


@pytest.fixture
def snap() -> Snapshot:
    model, opt = _trained()
    gen = torch.Generator().manual_seed(7)
    batch = {"ids": torch.randint(0, 50, (3, 6)), "mask": torch.rand(3, 6) > 0.5,
             "old_logp": torch.randn(3, 6, dtype=torch.float64), "reward": torch.tensor([0.0, 1.0, 1.0]),
             'odd "rlbisect.sha256":" name': torch.zeros(0, 2)}
    # The note mimics the hash field: only the real, unescaped key may be taken for it.
    config = {"lr": 1e-2, "clip": [0.8, 1.2], "note": '"rlbisect.sha256":"' + "f" * 64 + '"'}
    return capture(12, model, opt, batch, {"minibatch": gen}, config=config,
                   stats={"approx_kl": 0.31, "loss": -0.0123456789, "steps": 3, "step_time": 1.5,
                          "entropy": float("nan"), "grad_norm": float("inf")},
                   hits=[Hit("ceiling:approx_kl", "approx_kl", 12, 0.31, "approx_kl 0.31 > ceiling 0.05"),
                         Hit("nonfinite", "entropy", 12, float("nan"), "entropy is nan")],
                   code=CodeIdentity("a" * 40, True, "/repo"), meta={"run": "demo"})


@pytest.fixture
def saved(snap, tmp_path):
    return save_snapshot(tmp_path / "step-000012.pt", snap)


def _equal_nested(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_equal_nested(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal_nested, a, b))
    return type(a) is type(b) and a == b


def test_round_trip_is_bit_exact(snap, saved):
    got = load_snapshot(saved)
    assert _equal_nested(got.model, snap.model) and _equal_nested(got.batch, snap.batch)
    assert _equal_nested(got.optimizer, snap.optimizer)  # int param ids, betas tuple, step tensors
    assert torch.equal(got.rng.torch, snap.rng.torch) and got.rng.python == snap.rng.python
    assert got.rng.numpy[0] == "MT19937" and (got.rng.numpy[1] == snap.rng.numpy[1]).all()
    assert got.rng.numpy[2:] == snap.rng.numpy[2:]
    assert torch.equal(got.rng.generators["minibatch"], snap.rng.generators["minibatch"])
    assert (got.step, got.config, got.code, got.meta) == (snap.step, snap.config, snap.code, snap.meta)
    assert json.dumps(got.stats) == json.dumps(snap.stats)  # NaN != NaN, so compare the spelling
    assert [h.to_dict().__repr__() for h in got.hits] == [h.to_dict().__repr__() for h in snap.hits]
    assert all(r.ok for r in compare_stats(snap.stats, got.stats))
    assert got.torch_version == torch.__version__ and got.num_threads == torch.get_num_threads()
    assert got.format_version == 2 and got.created     # 2: numpy's generator is in it (no CUDA: not 3)


def test_restore_continues_training_exactly(tmp_path):
    def one_step(model, opt, gen):
        opt.zero_grad()
        x = torch.randn(5, 4) + torch.rand(1, generator=gen) + random.random()  # all four RNGs
        x = x * float(np.random.rand())
        model(x).pow(2).sum().backward()
        opt.step()
        return [p.detach().clone() for p in model.parameters()]

    model, opt = _trained()
    gen = torch.Generator().manual_seed(7)
    snap = capture(3, model, opt, {"x": torch.zeros(1)}, {"minibatch": gen})
    path = save_snapshot(tmp_path / "step-000003.pt", snap)
    original = one_step(model, opt, gen)  # the update as the run did it

    torch.manual_seed(99)
    random.seed(99)
    np.random.seed(99)
    fresh_model, _ = _trained(seed=1)  # different weights; Adam below starts empty
    fresh_opt = torch.optim.Adam(fresh_model.parameters(), lr=1e-2)
    fresh_gen = torch.Generator()
    loaded = load_snapshot(path)
    restore(loaded, fresh_model, fresh_opt, {"minibatch": fresh_gen})
    replayed = one_step(fresh_model, fresh_opt, fresh_gen)
    assert all(torch.equal(a, b) for a, b in zip(replayed, original))
    assert _equal_nested(fresh_opt.state_dict(), opt.state_dict())
    # The optimizer got clones: stepping it did not edit the loaded snapshot.
    assert _equal_nested(loaded.optimizer, load_snapshot(path).optimizer)
    with pytest.raises(ValueError, match="do not match"):
        restore(loaded, fresh_model, fresh_opt, {})


def test_write_is_atomic(snap, tmp_path, monkeypatch):
    path = tmp_path / "step-000012.pt"
    save_snapshot(path, snap)
    before = path.read_bytes()

    def crash(*_):
        raise OSError("simulated crash before rename")
    monkeypatch.setattr(os, "replace", crash)
    snap.step = 13
    with pytest.raises(OSError, match="simulated"):
        save_snapshot(path, snap)
    assert path.read_bytes() == before  # the old file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000012.pt"]  # no temp left behind
    with pytest.raises(OSError):
        save_snapshot(tmp_path / "fresh.pt", snap)
    assert not (tmp_path / "fresh.pt").exists()


def _refused(path, match: str | None = None) -> str:
    with pytest.raises(SnapshotError, match=match) as err:
        load_snapshot(path)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) <= 300
    return msg


class _Evil:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("how", ["torch_zip", "torch_legacy", "raw_pickle"])
def test_pickle_payload_is_refused_and_never_runs(tmp_path, how):
    marker = tmp_path / "pwned"
    path = tmp_path / "step-000001.pt"
    payload = {"model": _Evil(marker)}
    if how == "raw_pickle":
        path.write_bytes(pickle.dumps(payload))
    else:
        torch.save(payload, path, _use_new_zipfile_serialization=(how == "torch_zip"))
    _refused(path)
    assert not marker.exists()
    # Positive control: the file really is hostile when unpickled.
    control = tmp_path / "control"
    pickle.loads(pickle.dumps({"model": _Evil(control)}))
    assert control.exists()


@pytest.mark.parametrize("content, match", [
    (b"", "empty"), (b"1234567", "too short"),
    (struct.pack("<Q", 2**62) + b"{}" * 10, "header length"),
    (struct.pack("<Q", 100) + b"{" * 50, "header length"),
])
def test_short_and_lying_files(tmp_path, content, match):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    _refused(path, match)


def test_huge_header_claim_allocates_nothing(tmp_path):
    path = tmp_path / "x.pt"
    path.write_bytes(struct.pack("<Q", 90 * 1024 * 1024) + b" " * 64)  # under the cap, over the file
    tracemalloc.start()
    _refused(path, "header length")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1024 * 1024


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "x.pt"
    body = bytes(rng.randrange(256) for _ in range(rng.randrange(8, 4000)))
    path.write_bytes(body)
    _refused(path)
    path.write_bytes(struct.pack("<Q", len(body)) + body)  # plausible length, garbage header
    _refused(path)


def test_missing_and_directory(tmp_path):
    assert "no such file" in _refused(tmp_path / "nope.pt")
    assert "not a regular file" in _refused(tmp_path)


def test_truncated(saved):
    data = saved.read_bytes()
    for n in (8, 100, len(data) // 2, len(data) - 1):
        saved.write_bytes(data[:n])
        _refused(saved)


def test_every_single_byte_flip_is_refused(tmp_path):
    # A minimal snapshot, so every one of its bytes can be flipped in turn.
    model = torch.nn.Linear(2, 2)
    snap = Snapshot(step=1, model=model.state_dict(), optimizer=None,
                    batch={"x": torch.ones(2)}, rng=RngState(), stats={"loss": 0.5})
    path = save_snapshot(tmp_path / "s.pt", snap)
    data = path.read_bytes()
    for i in range(len(data)):
        for flip in (0x01, 0xFF):
            bad = bytearray(data)
            bad[i] ^= flip
            path.write_bytes(bad)
            _refused(path)


def test_flips_in_a_full_snapshot(saved):
    data = saved.read_bytes()
    for i in random.Random(0).sample(range(len(data)), 200):
        bad = bytearray(data)
        bad[i] ^= 0x20
        saved.write_bytes(bad)
        _refused(saved)


def test_a_file_larger_than_its_header_declares_is_refused_unread(saved, tmp_path):
    grown = tmp_path / "grown.pt"
    grown.write_bytes(saved.read_bytes() + b"appended")
    with pytest.raises(SnapshotError, match="declares .* but the file has"):
        load_snapshot(grown)
    huge = tmp_path / "huge.pt"
    huge.write_bytes(saved.read_bytes())
    with huge.open("r+b") as f:
        f.truncate(2 * 2**30)            # 2 GB on paper (sparse): never read into memory
    tracemalloc.start()
    with pytest.raises(SnapshotError, match="declares"):
        load_snapshot(huge)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * 2**20


def _rehash(path, edit) -> None:
    """Rewrite a snapshot's JSON header with `edit` and a *valid* hash: a hostile but consistent file."""
    tensors = safetensors.torch.load(path.read_bytes())
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    meta = json.loads(json.loads(path.read_bytes()[8:8 + n])["__metadata__"]["rlbisect.meta"])
    edit(meta, tensors)
    from rlbisect.steps.integrity import HASH_KEY, ZERO_HASH, seal
    blob = bytearray(safetensors.torch.save(tensors, metadata={
        "rlbisect.meta": json.dumps(meta), HASH_KEY: ZERO_HASH}))
    path.write_bytes(bytes(seal(blob)))


@pytest.mark.parametrize("edit, match", [
    (lambda m, t: m.update(step="twelve"), "step"),
    (lambda m, t: m.update(format="something-else"), "format"),
    (lambda m, t: m.update(format_version=99), "newer"),
    (lambda m, t: m.update(evil="x"), "evil"),
    (lambda m, t: m["model_keys"].append("ghost"), "missing"),
    (lambda m, t: t.update({"batch/extra": torch.zeros(1)}), "unexpected"),
    (lambda m, t: m.update(optimizer={"t": "optim/nope"}), "optim/nope"),
    (lambda m, t: m.update(optimizer={"x": 1}), "unknown tag"),
    (lambda m, t: t.update({"rng/torch": torch.zeros(3, dtype=torch.uint8)}), None),
    (lambda m, t: m["rng"].update(python=[3, [1, 2], None]), None),
    (lambda m, t: t.update({"rng/numpy": torch.zeros(3, dtype=torch.int64)}), None),
    (lambda m, t: m["rng"].update(numpy=["PCG64", 0, 0, 0.0]), "numpy"),
    (lambda m, t: m["rng"].pop("numpy"), "unexpected"),   # its tensor, named by nothing
])
def test_consistent_but_invalid_metadata(saved, edit, match):
    load_snapshot(saved)
    _rehash(saved, edit)
    _refused(saved, match)


def test_foreign_safetensors_file(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors.torch.save_file({"w": torch.zeros(2)}, path, metadata={"format": "pt"})
    assert "not an rlbisect snapshot" in _refused(path)


def test_compare_stats():
    rec = {"loss": 0.1, "approx_kl": float("nan"), "steps": 3, "step_time": 1.0, "only_rec": 1.0}
    rep = {"loss": 0.1, "approx_kl": float("nan"), "steps": 3, "step_time": 9.0, "only_rep": 2.0}
    rows = {r.name: r for r in compare_stats(rec, rep)}
    assert "step_time" not in rows  # wall clock never counts
    assert rows["loss"].ok and rows["loss"].abs_diff == 0.0 and rows["approx_kl"].ok and rows["steps"].ok
    assert not rows["only_rec"].ok and not rows["only_rep"].ok and rows["only_rep"].recorded is None
    name, recorded, replayed, diff, ok = compare_stats({"x": 1.0}, {"x": 1.0 + 1e-12})[0]
    assert (name, ok) == ("x", False) and diff == pytest.approx(1e-12)
    assert compare_stats({"x": 1.0}, {"x": 1.0 + 1e-12}, rtol=1e-9)[0].ok
    assert not compare_stats({"x": 0.0}, {"x": -0.0})[0].ok  # bit-exact means the sign bit too


def _inspect(*args: str):
    # typer runs a lone command without its name; other commands join the app over time.
    name = ["inspect"] if len(app.registered_commands) + len(app.registered_groups) > 1 else []
    return CliRunner().invoke(app, [*name, *args])


def test_inspect_cli(saved, tmp_path):
    res = _inspect(str(saved))
    assert res.exit_code == 0, res.output
    for text in ("12", "ceiling:approx_kl: approx_kl 0.31 > ceiling 0.05", "aaaaaaaaaaaa (dirty)",
                 torch.__version__, "batch/ids", "int64 [3, 6]", "optim/state/0/exp_avg", '"lr": 0.01',
                 "rng/numpy"):
        assert text in res.output, text
    res = _inspect(str(saved), "--json")
    info = json.loads(res.output)
    assert res.exit_code == 0 and info["step"] == 12 and info["hits"][0]["signal"] == "approx_kl"
    assert info == json.loads(json_text(describe(load_snapshot(saved))))   # NaN as null: JSON a parser reads
    for bad in (b"", os.urandom(500), saved.read_bytes()[:-10]):
        (tmp_path / "bad.pt").write_bytes(bad)
        res = _inspect(str(tmp_path / "bad.pt"))
        assert res.exit_code == 2 and "Traceback" not in res.output
        assert res.output.strip().count("\n") == 0 and res.output.startswith("rlbisect inspect:")


def test_frozen_and_post_update_round_trip(snap, tmp_path):
    snap.frozen = {"ref": {"w": torch.randn(3, 2), "b": torch.zeros(2)}}
    snap.post_update = {k: v + 1 for k, v in snap.model.items()}
    got = load_snapshot(save_snapshot(tmp_path / "s.pt", snap))
    assert _equal_nested(got.frozen, snap.frozen) and _equal_nested(got.post_update, snap.post_update)
    assert "frozen/ref/w" in describe(got)["tensors"] and any(k.startswith("post/") for k in describe(got)["tensors"])
    snap.frozen = {"a/b": {"w": torch.zeros(1)}}  # two names could map to one tensor: refused
    with pytest.raises(SnapshotError, match="no '/'"):
        save_snapshot(tmp_path / "t.pt", snap)


def test_file_without_frozen_or_post_fields_still_loads(saved):
    # Files written before these fields existed have neither key; they load with empty defaults.
    _rehash(saved, lambda m, t: [m.pop("frozen_keys"), m.pop("post_update_keys")])
    got = load_snapshot(saved)
    assert got.frozen == {} and got.post_update is None
    # ...and before numpy's generator was kept: no key, no tensor, nothing to restore
    _rehash(saved, lambda m, t: [m["rng"].pop("numpy"), t.pop("rng/numpy"), m.update(format_version=1)])
    old = load_snapshot(saved)
    assert old.rng.numpy is None and old.format_version == 1


def test_cuda_generators_in_use_are_kept_and_put_back(tmp_path, monkeypatch):
    """On a GPU, dropout draws from each device's CUDA generator: a step replays bit for bit only
    with their states. Faked here (no GPU): what capture takes is what restore sets, and a file
    holding them is version 3; a CUDA that was never initialised is not asked (that would start it)."""
    states = [torch.arange(16, dtype=torch.uint8), torch.arange(16, 32, dtype=torch.uint8)]
    put: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [t.clone() for t in states])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", put.extend)
    model, opt = _trained()
    snap = capture(3, model, opt, {"x": torch.zeros(1)})
    got = load_snapshot(save_snapshot(tmp_path / "step-000003.pt", snap))
    assert got.format_version == 3 and all(map(torch.equal, got.rng.cuda, states))
    restore(got, model, opt)
    assert len(put) == 2 and all(map(torch.equal, put, states))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="ran on 2 CUDA devices; this machine has 1"):
        restore(got, model, opt)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert capture(3, model, opt, {"x": torch.zeros(1)}).rng.cuda == []
    # replayed where there is no CUDA: not restored, and said
    from rlbisect.steps.replay import Replayed, replay_in_process
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    put.clear()
    replayed = replay_in_process(got, replayer=lambda snap, bug: (restore(snap, model, opt), Replayed({}, ""))[1])
    assert not put and any("2 CUDA device(s)' generators" in n and "not restored" in n for n in replayed.notes)


def test_inspect_keeps_each_string_from_the_file_on_its_line(saved):
    """A hit message or a stat name holding a newline cannot print lines the file made up."""
    _rehash(saved, lambda m, t: [m["hits"][0].update(message="ok\nfired          none (periodic snapshot)"),
                                 m["stats"].update({"x\nstats": 1.0})])
    out = _inspect(str(saved)).output
    assert "\nfired          none" not in out and "ok\\nfired" in out and "x\\nstats" in out, out


def test_a_batch_keyed_by_ints_round_trips_and_one_keyed_by_tuples_is_refused_at_save(snap, tmp_path):
    """{0: inputs, 1: targets}: the file was written and could never be read back."""
    snap.batch = {0: torch.randn(4, 3), 1: torch.randn(4, 1)}
    got = load_snapshot(save_snapshot(tmp_path / "ints.pt", snap))
    assert list(got.batch) == [0, 1] and torch.equal(got.batch[1], snap.batch[1])
    snap.batch = {(0, "x"): torch.randn(2)}
    with pytest.raises(SnapshotError, match="key of type tuple"):
        save_snapshot(tmp_path / "tuples.pt", snap)
    assert not (tmp_path / "tuples.pt").exists()
