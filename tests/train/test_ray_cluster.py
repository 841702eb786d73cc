"""Scale-out on a real two-node Ray cluster started on this machine: a training step through ``train-metaagent``
with the Ray sandbox pool (``rollout.ray_address``), on the local backend and on the verl CPU backend, whose
executions run on both nodes.

Two raylets on one machine are Ray's way to emulate a multi-node cluster: ``ray start --head`` with a custom
resource ``node_a`` and ``ray start --address=<head>`` with ``node_b``, each with one CPU, its own temp folder and a
small object store. The cluster is hermetic: its own temp folders, and every ``ray start`` and driver it
spawns runs with token authentication pinned to a token of its own (``RAY_AUTH_MODE=token``,
``RAY_AUTH_TOKEN_PATH`` inside the temp folder, ``RAY_AUTH_TOKEN`` dropped), so a ``~/.ray/auth_token`` left
by another Ray run (which ``ray start --head`` picks up when ``RAY_AUTH_MODE`` is unset, and a joining node
does not) cannot split the cluster. The nodes are stopped by their own processes (``ray start --block`` ends
its node on SIGTERM) and any process left under the cluster's temp folder is killed by id, never ``ray stop``,
which ends every Ray instance of the machine. The driver is ``tests/verl/forced_train.py`` (``train-metaagent``
with scripted reply texts, so the rewards vary and the update is real); the model stays in the driver and only
the sandbox actors are placed across the nodes (``rollout.ray_placement: spread``: one actor hard-pinned to
each node), once both nodes are alive and their resources are in the cluster's view.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from builders import HANG_MARGIN_S

ROOT = Path(__file__).resolve().parents[2]
FORCED_TRAIN = ROOT / "tests" / "verl" / "forced_train.py"

pytestmark = [pytest.mark.slow, pytest.mark.ray]

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # Ray's smallest practical object store: the records are small
START_ATTEMPTS = 2  # a node start that misses Ray's registration deadline is tried once more
START_TIMEOUT_S = 180.0  # one node start measured 16-20 s on the busy 2-core machine; a hang guard, not a speed check


class NodeStartError(RuntimeError):
    """A ``ray start`` of the test cluster exited or hung before its node ran."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(token_path: Path) -> dict[str, str]:
    """The environment of the nodes (their workers, the sandbox actors, inherit it) and of the drivers: this
    checkout importable, one thread per process, no usage report, no outer Ray address, and token
    authentication with the cluster's own token file (Ray reads ``RAY_AUTH_TOKEN`` before
    ``RAY_AUTH_TOKEN_PATH``, so it is dropped; with the mode pinned no process falls back to
    ``~/.ray/auth_token``)."""
    outer = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_ADDRESS")}
    return {
        **outer,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "OMP_NUM_THREADS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_DEDUP_LOGS": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
    }


def _processes_under(folder: str) -> list[int]:
    """Ids of the processes whose command line names ``folder`` (every process of a node names its temp folder)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if folder in cmdline:
            found.append(int(entry))
    return found


class TwoNodeCluster:
    """A head node with resource ``node_a`` and a second node with ``node_b``, one CPU each (module docstring).

    ``address`` is the head's ``host:port``; ``labels`` maps each node's Ray node id to ``node_a`` / ``node_b``."""

    def __init__(self) -> None:
        self.temp = tempfile.mkdtemp(prefix="mray")  # short: Ray's socket paths live under it (107-byte limit)
        token = Path(self.temp, "auth_token")
        token.write_text(secrets.token_hex(32))  # the format of `ray get-auth-token --generate`
        token.chmod(0o600)
        self.env = _env(token)
        self.nodes: list[subprocess.Popen] = []
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.labels: dict[str, str] = {}
        self.leftovers: list[int] = []

    def _start(self, name: str, attempt: int, *args: str) -> None:
        folder = Path(self.temp, f"{name}-{attempt}")
        log = open(f"{folder}.log", "w")  # noqa: SIM115 - the node writes it until it stops
        node = subprocess.Popen(
            [
                sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--num-cpus=1",
                f'--resources={{"{name}": 1}}', f"--temp-dir={folder}", f"--object-store-memory={OBJECT_STORE_BYTES}",
                f"--dashboard-agent-listen-port={_free_port()}", "--min-worker-port=0", "--max-worker-port=0",
                "--disable-usage-stats", "--block",
            ],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.nodes.append(node)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (folder / "ray_current_cluster").exists():  # written once the node runs
            if node.poll() is not None or time.monotonic() > deadline:
                tail = Path(f"{folder}.log").read_text(errors="replace")[-3000:]
                raise NodeStartError(f"ray start of {name} failed:\n{tail}")
            time.sleep(0.5)

    def start(self) -> TwoNodeCluster:
        for attempt in range(START_ATTEMPTS):
            try:
                self._start("node_a", attempt, "--head", f"--port={self.port}", "--include-dashboard=false")
                self._start("node_b", attempt, f"--address={self.address}")
                break
            except NodeStartError:
                if attempt + 1 == START_ATTEMPTS:
                    raise
                # Ray gives a raylet 30 s to register (a constant of ray._private.node): on a loaded machine a
                # start can miss it. Stop what started, then again on a fresh port and in fresh folders
                self._stop_nodes()
                self.port = _free_port()
                self.address = f"127.0.0.1:{self.port}"
        # before any step dispatches: both nodes registered alive, both node resources in the cluster's view
        probe = (
            "import json, sys, time, ray\n"
            "ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)\n"
            "deadline = time.monotonic() + float(sys.argv[2])\n"
            "while True:\n"
            "    alive = [n for n in ray.nodes() if n['Alive']]\n"
            "    seen = {'node_a', 'node_b'} <= set(ray.cluster_resources())\n"
            "    if (len(alive) == 2 and seen) or time.monotonic() > deadline: break\n"
            "    time.sleep(0.5)\n"
            "print(json.dumps({n['NodeID']: sorted(k for k in n['Resources'] if k.startswith('node_')) for n in alive}))\n"
        )
        r = subprocess.run(
            [sys.executable, "-c", probe, self.address, str(START_TIMEOUT_S)], env=self.env, capture_output=True,
            text=True, timeout=START_TIMEOUT_S + HANG_MARGIN_S, check=False,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        found = json.loads(r.stdout.strip().splitlines()[-1])
        self.labels = {node: names[0] for node, names in found.items() if len(names) == 1}
        assert sorted(self.labels.values()) == ["node_a", "node_b"], found
        return self

    def _stop_nodes(self) -> list[int]:
        """SIGTERM each node's ``ray start --block`` (it ends its node's processes), then kill by id whatever
        process still names the cluster's temp folder; returns those ids (none after a clean stop)."""
        for node in reversed(self.nodes):
            if node.poll() is None:
                node.send_signal(signal.SIGTERM)
        for node in reversed(self.nodes):
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _processes_under(self.temp) and time.monotonic() < deadline:  # workers exit when their raylet does
            time.sleep(0.5)
        leftovers = _processes_under(self.temp)
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.nodes = []
        return leftovers

    def stop(self) -> None:
        """Stops the nodes (``leftovers``: the processes killed by id) and removes the temp folder."""
        self.leftovers = self._stop_nodes()
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster():
    c = TwoNodeCluster()
    try:
        yield c.start()
    finally:
        c.stop()
    assert not c.leftovers, f"processes of the cluster outlived it: {c.leftovers}"


def train(out: Path, cluster: TwoNodeCluster, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, str(FORCED_TRAIN), *args, "--out", str(out), "--quiet", "--steps", "1",
        "trainer.save_every=0", "trainer.val_every=0", "schedule.mode=executor_only",
        "rollout.frozen_designer=single_math", "rollout.m_designs=1", "rollout.n_executions=4",
        "rollout.sandbox_workers=2", f"rollout.ray_address={cluster.address}",
    ]  # fmt: skip
    # a hang guard: the verl step (Ray join, FSDP worker on one CPU) took minutes on the busy 2-core machine
    r = subprocess.run(cmd, cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=1500, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r


def placement(out: Path, cluster: TwoNodeCluster) -> Counter:
    """Executions of the step per node label, from the records."""
    counts: Counter = Counter()
    for line in (out / "rollouts" / "step_000000.jsonl").read_text().splitlines():
        for design in json.loads(line)["designs"]:
            for execution in design["executions"]:
                counts[cluster.labels.get(execution["node"], execution["node"])] += 1
    return counts


def assert_spread(counts: Counter, row: dict) -> None:
    """Both nodes ran executions, 4 each, and the step's node metrics say the same as the records."""
    assert counts == {"node_a": 4, "node_b": 4} and row["rollout/executions"] == 8, counts
    assert row["rollout/nodes"] == len(counts), row
    assert row["rollout/node_share_max"] == max(counts.values()) / sum(counts.values()) == 0.5, row


def test_a_local_backend_step_runs_its_executions_on_both_nodes(cluster, tmp_path):
    out = tmp_path / "run"
    train(out, cluster, "--config", "tiny", "data.val=[]")
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    # every execution names a node of the cluster; one actor pinned to each, executions dealt in turn: 4 and 4
    assert_spread(placement(out, cluster), row)
    assert row["samples/executor"] > 0 and math.isfinite(row["train/pg_loss"])
    assert row["train/grad_norm"] > 0, row  # the scripted rewards vary: the update is real


def test_a_verl_cpu_backend_step_runs_its_executions_on_both_nodes(cluster, tmp_path):
    out = tmp_path / "run"
    train(out, cluster, "--config", "tiny_verl_cpu", f"verl.ray_address={cluster.address}")
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert_spread(placement(out, cluster), row)
    assert row["verl/policy/skipped_step"] == 0.0, row  # verl's FSDP worker on the cluster updated
    assert row["verl/policy/actor/grad_norm"] > 0 and math.isfinite(row["train/loss"])


PINS = '''
import json, sys, time, ray
import metaagent.rollout.ray_pool as rp
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)
pool = rp.RaySandboxPool(sys.argv[1], workers=2)
out = {"spread": pool.nodes}
pool.close()
fake = "ab" * 28  # a node id no node has
rp.spread_nodes = lambda nodes, workers, resource=None: [fake] * workers
try:
    rp.RaySandboxPool(sys.argv[1], workers=1)
except rp.RayPoolError as e:
    out["gone"] = str(e)
listed, asked = ray.nodes, []
ray.nodes = lambda: asked.append(1) or [*listed(), {"NodeID": fake, "Alive": True}]  # listed, never placeable
rp.NODE_VIEW_GRACE_S, t = 3.0, time.monotonic()
try:
    rp.RaySandboxPool(sys.argv[1], workers=1)
except rp.RayPoolError as e:
    out.update(grace=str(e), asked=len(asked), grace_s=time.monotonic() - t)
print(json.dumps(out))
'''


def test_the_pins_are_hard_and_a_node_the_scheduler_cannot_place_on_is_named(cluster):
    """Hard pins, without a training step: two actors land one on each node; a pin to a node the cluster does
    not list fails at once with the node named; one the cluster lists alive is started again until
    ``NODE_VIEW_GRACE_S``, then named the same way (a soft pin would have put all three on the head)."""
    r = subprocess.run(
        [sys.executable, "-c", PINS, cluster.address], cwd=ROOT, env=cluster.env, capture_output=True,
        text=True, timeout=START_TIMEOUT_S + HANG_MARGIN_S, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert sorted(cluster.labels[n] for n in out["spread"]) == ["node_a", "node_b"], out
    for key in ("gone", "grace"):
        assert f"pinned to node {'ab' * 28}" in out[key] and "ActorUnschedulableError" in out[key], out
    assert out["asked"] >= 3 and out["grace_s"] >= 3.0, out  # the pool start, then each refusal: retried
