"""The Ray cluster a class server trains its runs on, when `$BERT_EXPLORER_RAY_ADDRESS` names one: the connection,
the slots the cluster's nodes give the server's queue, and the node each new run goes to (docs/deployment.md).

The queue stays the server's (bert_core.serve.run_queue: position, estimated wait, turns). Ray's logical resources
are held for an actor's whole life, and a run whose turn is up, or that its owner stopped, keeps its actor (Resume
goes on from its memory, as with a training process): a CPU held that way would lock out the run whose turn it is.
So the server counts the alive nodes' CPUs (`$BERT_EXPLORER_RAY_CPUS` a run) and GPU shares as its slots, places each
new run itself on the node with the most free slots (a hard node affinity), and a run's actor asks Ray for no CPU
and, on a GPU, only a token share of it, which is how Ray hands the actor its GPU (CUDA_VISIBLE_DEVICES). A node
that dies leaves the count, so the next runs go to the nodes that are left.

Torch-free, and Ray-free until a function here is called: `ray` is imported only where the setting is set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from bert_core.errors import BertCoreError
from bert_core.paths import REPO_ROOT
from bert_core.serve.server_gpus import DEFAULT_GPU_RUNS, ServerGpu, gpu_runs_setting

log = logging.getLogger("bert_core.app")

RAY_ADDRESS_ENV = "BERT_EXPLORER_RAY_ADDRESS"   # a Ray cluster's address ("auto", "ray://head:10001", "head:6379")
RAY_CPUS_ENV = "BERT_EXPLORER_RAY_CPUS"         # CPU cores (and torch threads) each run trains with; default 1
NAMESPACE = "bert-explorer"
NODES_TTL_S = 1.0        # how long the nodes' list is reused: the queue asks for its slots at every page draw
GPU_TICKET = 0.001       # the share of a GPU a run's actor asks Ray for: enough for Ray to give it the GPU


def ray_address() -> str | None:
    """The Ray cluster's address from `$BERT_EXPLORER_RAY_ADDRESS`; None (the default) trains on this machine."""
    return os.environ.get(RAY_ADDRESS_ENV, "").strip() or None


def cpus_per_run() -> int:
    """CPU cores each run trains with on the cluster (`$BERT_EXPLORER_RAY_CPUS`, default 1)."""
    raw = os.environ.get(RAY_CPUS_ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def gpu_runs() -> int:
    """Runs that share one of the cluster's GPUs (`$BERT_EXPLORER_GPU_RUNS`, as on one server; 0: CPUs only)."""
    setting = gpu_runs_setting()
    return DEFAULT_GPU_RUNS if setting is None else setting


_CONNECTING = threading.Lock()


def connect():
    """The `ray` module, connected to the cluster once per server process (a test's own connection is kept).

    The cluster's workers import bert_core from the server's own path: they run the same image or checkout
    (docs/deployment.md), and the builder reads the shipped corpora there too."""
    # Imported here, not at the top: Ray is an optional extra, loaded only on a server that trains on a cluster.
    import ray

    with _CONNECTING:
        if not ray.is_initialized():
            address = ray_address()
            if address is None:
                raise BertCoreError(f"no Ray cluster: set {RAY_ADDRESS_ENV} (docs/deployment.md)")
            path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
            log.info("training on the Ray cluster at %s", address)
    return ray


@dataclass(frozen=True)
class RayNode:
    """One alive node of the cluster: its id, and how many runs may train on it at once on a CPU and on its GPUs."""

    node_id: str
    cpu_slots: int
    gpu_slots: int


@dataclass
class _Placed:
    node_id: str
    on_gpu: bool
    training: Callable[[], bool]   # whether the run trains now (preparing or running): it takes one of its node's slots


class ClusterSlots:
    """The cluster's nodes as the server's slots, and where its runs' actors are. `nodes_source()` lists Ray's
    nodes (ray.nodes()'s dicts); a test may give its own."""

    def __init__(self, nodes_source: Callable[[], list[dict]] | None = None):
        self._nodes_source = nodes_source
        self._lock = threading.Lock()
        self._nodes: tuple[RayNode, ...] = ()
        self._nodes_at = -NODES_TTL_S
        self._placed: dict[str, _Placed] = {}

    def nodes(self) -> tuple[RayNode, ...]:
        """The alive nodes, asked of the cluster at most once every NODES_TTL_S."""
        with self._lock:
            if time.monotonic() - self._nodes_at >= NODES_TTL_S:
                found = self._nodes_source() if self._nodes_source is not None else connect().nodes()
                per_cpu, per_gpu = cpus_per_run(), gpu_runs()
                self._nodes = tuple(
                    RayNode(str(n["NodeID"]), int(n["Resources"].get("CPU", 0) // per_cpu),
                            int(n["Resources"].get("GPU", 0)) * per_gpu)
                    for n in found if n.get("Alive"))
                self._nodes_at = time.monotonic()
            return self._nodes

    def slots(self) -> int:
        """Runs the cluster trains at once: each alive node's CPUs, a run's worth at a time."""
        return sum(n.cpu_slots for n in self.nodes())

    def gpus(self) -> tuple[ServerGpu, ...]:
        """The cluster's GPUs as one device of the queue's ("cuda"), with all their shares; () when it has none."""
        shares = sum(n.gpu_slots for n in self.nodes())
        if not shares:
            return ()
        gpus = shares // max(1, gpu_runs())
        return (ServerGpu("cuda", f"{gpus} GPU{'s' if gpus != 1 else ''} of the Ray cluster", 0, shares),)

    def place(self, key: str, on_gpu: bool, training: Callable[[], bool]) -> str:
        """The node a new run's actor goes to: of the alive nodes with slots of its kind, the one with the most of
        them free (the server's own runs counted, those that train now), the first of equals."""
        nodes = self.nodes()
        with self._lock:
            busy: dict[str, int] = {}
            for placed in self._placed.values():
                if placed.on_gpu == on_gpu and placed.training():
                    busy[placed.node_id] = busy.get(placed.node_id, 0) + 1
            choices = [((n.gpu_slots if on_gpu else n.cpu_slots) - busy.get(n.node_id, 0), -i, n.node_id)
                       for i, n in enumerate(nodes) if (n.gpu_slots if on_gpu else n.cpu_slots) > 0]
            if not choices:
                raise BertCoreError(f"the Ray cluster has no node with a {'GPU' if on_gpu else 'CPU'} for a run")
            node_id = max(choices)[2]
            self._placed[key] = _Placed(node_id, on_gpu, training)
            return node_id

    def remove(self, key: str) -> None:
        """A run's actor has ended: it no longer counts on its node."""
        with self._lock:
            self._placed.pop(key, None)

    def forget_nodes(self) -> None:
        """Ask the cluster for its nodes at the next question (a node was just lost)."""
        with self._lock:
            self._nodes_at = -NODES_TTL_S


CLUSTER = ClusterSlots()


def cluster_slots() -> int:
    """The server's slots on the cluster (bert_core.serve.runs.RunStore's `slots`)."""
    return CLUSTER.slots()


def cluster_where(caps: dict[str, int], gpus: list) -> str:
    """Where a Ray server's runs train, in one sentence as the pages show it (runs.where_runs_train's twin): the
    cluster's nodes and slots, never its address (a page is public)."""
    nodes = len(CLUSTER.nodes())
    on = f"a Ray cluster of {nodes} node{'s' if nodes != 1 else ''}"
    if not gpus:
        return f"Runs train on {on}: up to {caps.get('cpu', 0)} at once on its CPUs, a Ray actor a run."
    shares = ", ".join(f"{g.name}, up to {caps.get(g.device, 0)} run(s) at once" for g in gpus)
    cpu = f", and up to {caps['cpu']} more on its CPUs while the GPUs are full" if caps.get("cpu") else ""
    return f"Runs train on {on} ({shares}; bf16 autocast){cpu}, a Ray actor a run."


def cluster_gpus() -> tuple[ServerGpu, ...]:
    """The cluster's GPU shares (bert_core.serve.runs.RunStore's `gpus`)."""
    return CLUSTER.gpus()
