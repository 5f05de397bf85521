"""`--executor ray`: each probe a Ray task on a local Ray cluster this module starts and stops.

Skipped when Ray is not installed (``pip install 'rlbisect[ray]'``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers import git, live_members

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

#: The state-file predicate, also noting where it ran: a Ray task runs it in a node-local clone.
STATE = ["sh", "-c", 'pwd >> "$RLB_WHERE"; '
         'case "$(cat state)" in good) exit 0;; skip) exit 125;; *) exit 1;; esac']


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A one-node Ray cluster (`ray start --head --block`, 2 CPUs, an 80 MB object store) in its
    own process group, stopped by signalling that group. Token authentication with a token of
    its own, handed to the rlbisect processes through the environment only."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           "RAY_USAGE_STATS_ENABLED": "0"}
    log = tmp_path_factory.mktemp("ray") / "head.log"
    # Ray's sessions, sockets and its "current cluster" file go here, not to /tmp/ray (a short
    # path: unix socket names are limited to 107 bytes)
    temp_dir = tempfile.mkdtemp(prefix="rlb-ray-", dir="/tmp")   # not the session's long TMPDIR
    with log.open("w") as out:
        head = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts",  # the `ray` CLI
                                 "start", "--head", f"--port={port}",
                                 "--node-ip-address=127.0.0.1", "--num-cpus=2",
                                 "--include-dashboard=false", "--object-store-memory=80000000",
                                 "--disable-usage-stats", f"--temp-dir={temp_dir}", "--block"],
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "Ray runtime started" not in log.read_text():
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        yield f"127.0.0.1:{port}", env
    finally:
        head.send_signal(signal.SIGTERM)   # `ray start --block` drains and stops its processes
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)   # whatever of that group is left
        except ProcessLookupError:
            pass
        shutil.rmtree(temp_dir, ignore_errors=True)


def rlbisect(repo: Path, out: Path, *args: str, env: dict | None = None) -> tuple[dict, list]:
    """Run `rlbisect run` on main~23..main; (the JSON, the directories the probes ran in)."""
    where = out.with_suffix(".where")
    where.touch()
    # a Ray worker inherits the head's environment, not ours: the log path is in the command
    cmd = [*STATE[:2], STATE[2].replace("$RLB_WHERE", str(where))]
    proc = subprocess.run([sys.executable, "-m", "rlbisect.cli.app", "run", "main~23..main",
                           "--repo", str(repo), "--no-cache", "--json", str(out), *args, "--",
                           *cmd], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode in (0, 3), (proc.stdout, proc.stderr)
    return json.loads(out.read_text()), where.read_text().split()


def node_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("rlbisect-*-node-*")}


def test_ray_executor_names_what_the_local_executor_names(tiny_repo, tmp_path, ray_head):
    address, env = ray_head
    # merges and a run of untestable commits, so both executors meet skips
    parents = [[]] + [[i - 1] for i in range(1, 24)]
    parents[12], parents[20] = [11, 5], [19, 9]
    states = ["good"] * 12 + ["bad"] * 2 + ["skip"] * 2 + ["bad"] * 8
    r = tiny_repo(states, parents)
    before, leftovers = r.snapshot(), node_dirs()
    local, _ = rlbisect(r.path, tmp_path / "local.json")
    remote, dirs = rlbisect(r.path, tmp_path / "ray.json", "--executor", "ray", "--jobs", "2",
                            "--ray-address", address, env=env)
    assert remote["first_bad"] == local["first_bad"] == r.shas[12]
    assert len(dirs) == len(remote["probes"]) and all("-node-" in d for d in dirs)
    assert remote["status"] == "found" and remote["bisect_log"].count("git bisect") > 1
    assert {p["verdict"] for p in remote["probes"]} <= {"good", "bad", "skip"}
    assert r.snapshot() == before and node_dirs() == leftovers


def test_ray_nodes_can_clone_a_url_instead(tiny_repo, tmp_path, ray_head):
    address, env = ray_head
    r = tiny_repo(["good"] * 17 + ["bad"] * 7)
    bare = tmp_path / "pushed.git"
    git(r.path, "clone", "-q", "--bare", str(r.path), str(bare))
    before = r.snapshot()
    data, dirs = rlbisect(r.path, tmp_path / "ray.json", "--executor", "ray", "--jobs", "3",
                          "--ray-address", address, "--clone-url", bare.as_uri(), env=env)
    assert data["first_bad"] == r.shas[17] and len(data["probes"]) >= 3
    assert all("-node-" in d for d in dirs)
    assert r.snapshot() == before


def test_ctrl_c_during_a_ray_round_kills_the_probes_on_the_node(tiny_repo, tmp_path, ray_head):
    address, env = ray_head
    r = tiny_repo(["good"] * 8 + ["bad"] * 8)
    before, leftovers = r.snapshot(), node_dirs()
    pids = tmp_path / "pids"
    pids.mkdir()
    cmd = ["sh", "-c", f"echo $$ > {pids}/$(cat n).tmp && mv {pids}/$(cat n).tmp {pids}/$(cat n)"
                       "; sleep 60 & wait"]
    proc = subprocess.Popen([sys.executable, "-m", "rlbisect.cli.app", "run", "main~15..main",
                             "--repo", str(r.path), "--jobs", "2", "--executor", "ray",
                             "--ray-address", address, "--", *cmd], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while len(list(pids.glob("[0-9]*"))) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the two probes never started"
        time.sleep(0.05)
    groups = [int(p.read_text()) for p in pids.glob("[0-9]*")]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted by SIGINT" in out, (out, err)
    deadline = time.monotonic() + 5
    while any(live_members(g) for g in groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(live_members(g) for g in groups)
    assert r.snapshot() == before and node_dirs() == leftovers


def test_more_gpus_than_a_local_instance_has_is_one_line_and_exit_2(tiny_repo):
    r = tiny_repo(["good", "bad"])
    temp_root = tempfile.mkdtemp(prefix="rlb-ray-", dir="/tmp")   # the local instance's session files
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_TMPDIR": temp_root}
    env.pop("RAY_ADDRESS", None)
    try:
        proc = subprocess.run([sys.executable, "-m", "rlbisect.cli.app", "run", "main~1..main",
                               "--repo", str(r.path), "--executor", "ray", "--ray-gpus", "1000",
                               "--", "true"], capture_output=True, text=True, env=env, timeout=120)
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlbisect")]
    assert len(ours) == 1 and re.fullmatch(r"rlbisect run: --ray-gpus 1000: this machine has "
                                           r"\d+ GPUs for a local Ray instance; give "
                                           r"--ray-address of a cluster", ours[0])
    assert "Traceback" not in proc.stderr
