"""The fork server (rlbisect._proc.server) as `rlbisect warm` runs it: `rlbisect check` and the
probes of `rlbisect run` get the same output as a cold run, byte for byte, only for a caller it can
serve faithfully, and a check dies with its caller. What decides "faithfully" is tested purely in
tests/_proc/test_identity.py."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rlbisect._proc import server as server_module
from rlbisect._proc.worker import WORKERS

pytestmark = [pytest.mark.skipif(not hasattr(socket, "send_fds") or sys.platform != "linux",
                                 reason="the warm server needs Linux and socket.send_fds"),
              pytest.mark.slow]       # they start torch processes (tests/conftest.py)

SLOW_ADAPTER = '''
import os, time
def make_adapter(**kwargs):
    open(os.environ["PID_FILE"], "w").write(str(os.getpid()))
    time.sleep(600)
'''


def rlbisect(env: dict, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlbisect", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def served(env: dict) -> int:
    status = rlbisect(env, "warm", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    return int(status.stdout.split("checks served ")[1].split(",")[0])


@pytest.fixture(scope="module")
def warm_env():
    """A server in a private folder short enough for a socket name; every call passes this exact
    environment (pytest's own variables change from test to test)."""
    folder = tempfile.mkdtemp(prefix="rlbw", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["RLBISECT_WARM_DIR"] = folder
    env["PID_FILE"] = os.path.join(folder, "check.pid")        # written by SLOW_ADAPTER
    started = rlbisect(env, "warm", "start", "--idle", "10")
    assert started.returncode == 0, started.stderr
    assert "warm server up" in started.stdout
    yield env
    rlbisect(env, "warm", "stop")
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("args", [["check", "--json"], ["check", "--bug", "sign_flip"]])
def test_a_check_through_the_server_is_byte_identical_to_a_cold_one(warm_env, args, tmp_path):
    before = served(warm_env)
    warm = rlbisect(warm_env, *args, cwd=tmp_path)
    cold = rlbisect({**warm_env, "RLBISECT_COLD": "1"}, *args, cwd=tmp_path)
    assert served(warm_env) == before + 1          # it went through the server...
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout)     # ...and nothing moved
    assert warm.returncode == (1 if "sign_flip" in args else 0)
    assert "warm server" not in warm.stderr


def test_a_caller_with_another_environment_runs_cold_with_a_note(warm_env):
    before = served(warm_env)
    other = rlbisect({**warm_env, "RLBISECT_SOMETHING": "1"}, "check", "--json")
    assert other.returncode == 0
    assert "did not take this check (it was started with a different environment (RLBISECT_SOMETHING))" \
        in other.stderr
    assert served(warm_env) == before
    assert other.stdout == rlbisect(warm_env, "check", "--json").stdout


def test_interrupting_the_caller_kills_its_check(warm_env, tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_ADAPTER)
    pid_file = Path(warm_env["PID_FILE"])
    caller = subprocess.Popen([sys.executable, "-m", "rlbisect", "check", "--adapter", f"{tmp_path}/slow.py:make_adapter"],
                              env=warm_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and caller.poll() is None, caller.communicate()
        time.sleep(0.05)
    check = int(pid_file.read_text())
    assert check != caller.pid                     # the check runs in the server's child
    caller.send_signal(signal.SIGINT)
    assert caller.wait(timeout=30) == 130
    deadline = time.monotonic() + 10
    while _alive(check):
        assert time.monotonic() < deadline, "the check outlived its caller"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_stop_status_and_idle_exit(tmp_path):
    folder = tempfile.mkdtemp(prefix="rlbw", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["RLBISECT_WARM_DIR"] = folder
    try:
        assert rlbisect(env, "warm", "status").returncode == 1
        assert "no warm server was running" in rlbisect(env, "warm", "stop").stdout
        assert rlbisect(env, "warm", "start", "--idle", "0.1").returncode == 0      # 6 s
        assert rlbisect(env, "warm", "status").returncode == 0
        deadline = time.monotonic() + 30
        while rlbisect(env, "warm", "status").returncode == 0:
            assert time.monotonic() < deadline, "an idle server did not exit"
            time.sleep(0.5)
        assert not list(Path(folder).glob("*.sock"))
        assert rlbisect(env, "warm", "bogus").returncode == 2
    finally:
        rlbisect(env, "warm", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def test_a_server_whose_imports_changed_on_disk_refuses_and_exits(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("# imported by every interpreter started with this PYTHONPATH\n")
    folder = tempfile.mkdtemp(prefix="rlbw", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(RLBISECT_WARM_DIR=folder, PYTHONPATH=os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")])))
    try:
        assert rlbisect(env, "warm", "start", "--idle", "10").returncode == 0
        assert rlbisect(env, "check", "--json").returncode == 0
        assert served(env) == 1
        (site / "sitecustomize.py").write_text("# an upgrade of something the server had imported\n")
        after = rlbisect(env, "check", "--json")
        assert after.returncode == 0 and after.stdout
        assert "sitecustomize.py changed since it started, so it stops now" in after.stderr
        deadline = time.monotonic() + 10
        while rlbisect(env, "warm", "status").returncode == 0:
            assert time.monotonic() < deadline, "a server with stale imports kept running"
            time.sleep(0.2)
    finally:
        rlbisect(env, "warm", "stop")
        shutil.rmtree(folder, ignore_errors=True)


def test_a_bisect_borrows_the_warm_server_for_its_probes(warm_env, tmp_path):
    before = served(warm_env)
    done = rlbisect(warm_env, "demo", "--commits", "4", "--bad-at", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "found the commit that injected the fault" in done.stdout
    assert served(warm_env) >= before + 2                  # its probes were forked from the server


def test_a_worker_whose_editable_folders_would_shadow_a_preloaded_module_is_refused(tmp_path):
    """The folders RLBISECT_IMPORTS puts after the checkout (worker_main) are part of the path the
    server checks: a preloaded module they would find elsewhere makes the probe run cold."""
    (tmp_path / "src" / "torch").mkdir(parents=True)
    (tmp_path / "src" / "torch" / "__init__.py").write_text("")
    server = server_module._Server(tmp_path / "s.sock", 60.0, None)
    request = {"target": WORKERS[0], "code_dir": str(tmp_path), "cwd": str(tmp_path),
               "interpreter": server.me, "env": dict(server.environ)}
    assert server.refusal(request, [0, 1, 2]) is None
    request["env"] = {**server.environ, "RLBISECT_IMPORTS": "src"}
    assert "torch" in server.refusal(request, [0, 1, 2])
