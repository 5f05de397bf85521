"""rlbisect.startup: the torch._dynamo placeholder changes no number and steps aside for
compilation; exit_now leaves like Python minus the teardown."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

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
                  "dynamo": type(sys.modules.get("torch._dynamo")).__name__}}))
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300)


def test_an_optimizer_under_the_placeholder_gives_the_same_numbers_without_loading_dynamo():
    plain = _run(TRAIN.format(defer=""))
    deferred = _run(TRAIN.format(defer="from rlbisect.startup import defer_dynamo; assert defer_dynamo()"))
    assert plain.returncode == 0 and deferred.returncode == 0, plain.stderr + deferred.stderr
    a, b = json.loads(plain.stdout), json.loads(deferred.stdout)
    assert a["params"] == b["params"] and a["steps"] == b["steps"] == [5.0] * 4
    assert a["dynamo"] == "module"                    # without it, the optimizer loads dynamo...
    assert b["dynamo"] == "_DynamoUntilUsed"          # ...with it, nothing did


def test_compilation_and_submodule_imports_get_the_real_dynamo():
    r = _run("""
        import sys, torch
        from rlbisect.startup import defer_dynamo
        defer_dynamo()
        opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)   # placeholder's disable
        from torch._dynamo import config                                     # a submodule
        assert type(sys.modules["torch._dynamo"]).__name__ == "module", "not swapped in"
        assert torch._dynamo is sys.modules["torch._dynamo"] and config.__name__ == "torch._dynamo.config"
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        assert torch.equal(f(torch.arange(3.0)), torch.tensor([1.0, 3.0, 5.0]))
        opt.zero_grad()                 # a function the placeholder wrapped, now under the real dynamo
        assert not defer_dynamo()       # too late to defer: already loaded
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_exit_now_waits_for_threads_runs_atexit_handlers_and_flushes(tmp_path):
    marker = tmp_path / "atexit-ran"
    r = _run(f"""
        import atexit, sys, threading, time
        from pathlib import Path
        from rlbisect.startup import exit_now
        atexit.register(Path({str(marker)!r}).write_text, "yes")
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", end=" "))).start()
        sys.stdout.write("unflushed")
        exit_now(3)
    """)
    assert r.returncode == 3
    assert r.stdout == "unflushedthread done "      # the thread finished before the exit
    assert marker.read_text() == "yes"
