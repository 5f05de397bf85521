"""rlbisect._proc.startup: the stand-ins for torch's "do not compile" wrappers change no number and hand
over to torch's own once dynamo is loaded; exit_now leaves like Python minus the teardown."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

TRAIN = """
import json, sys, torch
{defer}
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
x, y = torch.randn(32, 8), torch.randn(32, 1)
for _ in range(5):
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
state = opt.state_dict()       # wrapped by torch's "do not compile" too
print(json.dumps({{"params": [p.detach().flatten().tolist() for p in model.parameters()],
                  "steps": [float(s["step"]) for s in state["state"].values()],
                  "dynamo": "torch._dynamo" in sys.modules}}))
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow   # it starts fresh interpreters to see what they load
def test_an_optimizer_under_the_placeholder_gives_the_same_numbers_without_loading_dynamo():
    plain = _run(TRAIN.format(defer=""))
    deferred = _run(TRAIN.format(defer="from rlbisect._proc.startup import defer_dynamo; assert defer_dynamo() > 50"))
    assert plain.returncode == 0 and deferred.returncode == 0, plain.stderr + deferred.stderr
    a, b = json.loads(plain.stdout), json.loads(deferred.stdout)
    assert a["params"] == b["params"] and a["steps"] == b["steps"] == [5.0] * 4
    assert a["dynamo"] is True                        # without it, the optimizer loads dynamo...
    assert b["dynamo"] is False                       # ...with it, nothing did


@pytest.mark.slow   # it loads torch's compiler
def test_compilation_and_submodule_imports_get_the_real_dynamo():
    r = _run("""
        import sys, torch
        from rlbisect._proc.startup import defer_dynamo
        defer_dynamo()
        p = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([p], lr=0.1)            # built under the stand-ins
        assert "torch._dynamo" not in sys.modules
        from torch._dynamo import config               # anyone may still load the real one
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        assert torch.equal(f(torch.arange(3.0)), torch.tensor([1.0, 3.0, 5.0]))
        p.grad = torch.ones(2)
        opt.step()                                     # stand-ins hand over to torch's own wrappers
        opt.zero_grad()
        assert torch.equal(p.detach(), torch.full((2,), 0.9)) and config.__name__ == "torch._dynamo.config"
        assert defer_dynamo() == 0                     # too late to defer: already loaded
        try:
            import trl.trainer.grpo_trainer            # imports parts of torch that use dynamo
        except ImportError:                            # trl is an extra
            pass
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@pytest.mark.slow
def test_exit_now_waits_for_threads_runs_atexit_handlers_and_flushes(tmp_path):
    marker = tmp_path / "atexit-ran"
    r = _run(f"""
        import atexit, sys, threading, time
        from pathlib import Path
        from rlbisect._proc.startup import exit_now
        atexit.register(Path({str(marker)!r}).write_text, "yes")
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", end=" "))).start()
        sys.stdout.write("unflushed")
        exit_now(3)
    """)
    assert r.returncode == 3
    assert r.stdout == "unflushedthread done "      # the thread finished before the exit
    assert marker.read_text() == "yes"
