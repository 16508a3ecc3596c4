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
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from bert_core.errors import BertCoreError
from bert_core.paths import REPO_ROOT
from bert_core.serve.job_factory import RAY_ADDRESS_ENV, ray_address
from bert_core.serve.server_gpus import DEFAULT_GPU_RUNS, ServerGpu, gpu_runs_setting

log = logging.getLogger("bert_core.app")

RAY_CPUS_ENV = "BERT_EXPLORER_RAY_CPUS"         # CPU cores (and torch threads) each run trains with; default 1
NAMESPACE = "bert-explorer"
NODES_TTL_S = 1.0        # how long the nodes' list is reused: the queue asks for its slots at every page draw
GPU_TICKET = 0.001       # the share of a GPU a run's actor asks Ray for: enough for Ray to give it the GPU


def cpus_per_run() -> int:
    """CPU cores each run trains with on the cluster (`$BERT_EXPLORER_RAY_CPUS`, default 1)."""
    raw = os.environ.get(RAY_CPUS_ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def gpu_runs() -> int:
    """Runs that share one of the cluster's GPUs (`$BERT_EXPLORER_GPU_RUNS`, as on one server; 0: CPUs only)."""
    setting = gpu_runs_setting()
    return DEFAULT_GPU_RUNS if setting is None else setting


CONNECT_TIMEOUT_S = 30.0   # how long a run or a page waits for the cluster to answer (ray.init retries for minutes)
RETRY_S = 30.0             # after a failed connection, how long the next ones are refused without asking again
NODES_WAIT_S = 5.0         # how long a page's question for the nodes waits for a connection under way


class ClusterUnavailable(BertCoreError):
    """The cluster cannot take a run: it could not be reached, or it has no node for it. The message is for the
    page: no address (a page is public), no traceback; the operator's log has the whole error."""


class ClusterConnection:
    """The connection to the cluster, made once per server process and waited for at most CONNECT_TIMEOUT_S: Ray's
    `init` to an address where no cluster answers retries for many minutes (379 s seen; over 20 min to a closed
    port here), and a run or a page must not wait that long. So `init` runs on a thread of its own; a caller waits
    for it until `timeout` s after it began, then gives up and leaves it trying (later callers give up at once while
    it tries), and a later call takes its result. A failure is remembered for RETRY_S, then tried again."""

    def __init__(self):
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._error: BaseException | None = None   # how the last `init` failed
        self._warned = False   # the operator's log has said that the `init` under way is slow
        self._refused: tuple[float, ClusterUnavailable] | None = None   # (when, what) the last failure said

    def connect(self, timeout: float = CONNECT_TIMEOUT_S):
        """The `ray` module, connected; raises ClusterUnavailable when the cluster does not answer."""
        # Imported here, not at the top: Ray is an optional extra, loaded only on a server that trains on a cluster.
        import ray

        if ray.is_initialized():
            return ray
        address = ray_address()
        if address is None:
            raise BertCoreError(f"no Ray cluster: set {RAY_ADDRESS_ENV} (docs/deployment.md)")
        with self._lock:
            if self._refused is not None and time.monotonic() - self._refused[0] < RETRY_S:
                raise self._refused[1]
            if self._thread is None or not self._thread.is_alive():
                self._error, self._started, self._warned = None, time.monotonic(), False
                self._thread = threading.Thread(target=self._init, args=(ray, address), name="bert-ray-connect",
                                                daemon=True)
                self._thread.start()
            thread, started = self._thread, self._started
        thread.join(max(0.0, started + timeout - time.monotonic()))
        if ray.is_initialized():
            return ray
        if thread.is_alive():   # still trying: the next callers wait for what is left of their time, no more
            waited = time.monotonic() - started
            if waited >= CONNECT_TIMEOUT_S and not self._warned:
                self._warned = True
                log.warning("the Ray cluster at %s has not answered in %.0f s (still trying)", address, waited)
            raise ClusterUnavailable(f"the training cluster could not be reached (it did not answer within "
                                     f"{waited:.0f} s)")
        refused = ClusterUnavailable(f"the training cluster could not be reached ({_reason(self._error)})")
        with self._lock:
            self._refused = (time.monotonic(), refused)
        log.error("the Ray cluster at %s could not be reached", address, exc_info=self._error)
        raise refused

    def _init(self, ray, address: str) -> None:
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        try:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
        except BaseException as exc:  # noqa: BLE001 - kept for the caller, which says it plainly and logs it whole
            self._error = exc
            return
        with self._lock:
            self._refused = None
        log.info("training on the Ray cluster at %s", address)


def _reason(error: BaseException | None) -> str:
    """A failed connection in a few plain words: the kind of failure, never Ray's text (it names the address and
    may hold the server's paths)."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return "no Ray cluster answered at its address"
    return f"Ray failed with {type(error).__name__}" if error is not None else "Ray failed"


CONNECTION = ClusterConnection()


def connect(timeout: float = CONNECT_TIMEOUT_S):
    """The `ray` module, connected to the cluster once per server process (a test's own connection is kept);
    ClusterUnavailable when it does not answer within `timeout` s.

    The cluster's workers import bert_core from the server's own path: they run the same image or checkout
    (docs/deployment.md), and the builder reads the shipped corpora there too."""
    return CONNECTION.connect(timeout)


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
                found = self._nodes_source() if self._nodes_source is not None else _ray_nodes()
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
            busy = Counter(p.node_id for p in self._placed.values() if p.on_gpu == on_gpu and p.training())
            free = [((n.gpu_slots if on_gpu else n.cpu_slots) - busy[n.node_id], -i, n.node_id)
                    for i, n in enumerate(nodes) if (n.gpu_slots if on_gpu else n.cpu_slots) > 0]
            if not free:
                raise ClusterUnavailable(f"the training cluster has no node with a {'GPU' if on_gpu else 'CPU'} "
                                         "for a run")
            self._placed[key] = _Placed(max(free)[2], on_gpu, training)
            return self._placed[key].node_id

    def remove(self, key: str) -> None:
        """A run's actor has ended: it no longer counts on its node."""
        with self._lock:
            self._placed.pop(key, None)

    def forget_nodes(self) -> None:
        """Ask the cluster for its nodes at the next question (a node was just lost)."""
        with self._lock:
            self._nodes_at = -NODES_TTL_S


def _ray_nodes() -> list[dict]:
    """The cluster's nodes as Ray lists them; none while it cannot be reached (the pages ask at every draw: they
    show the server as having no slots, and a run that starts meanwhile fails with connect()'s plain message)."""
    try:
        return connect(NODES_WAIT_S).nodes()
    except ClusterUnavailable:
        return []
    except Exception:  # noqa: BLE001 - a cluster lost after connecting: Ray's own errors, logged whole
        log.exception("the Ray cluster's nodes could not be listed")
        return []


CLUSTER = ClusterSlots()


# The plug-in's answers to the server's queue (job_factory.PLUGINS): its slots, its GPUs, and where its runs train.

def slots() -> int:
    """The server's slots on the cluster (bert_core.serve.runs.RunStore's `slots`)."""
    return CLUSTER.slots()


def gpus() -> tuple[ServerGpu, ...]:
    """The cluster's GPU shares (bert_core.serve.runs.RunStore's `gpus`)."""
    return CLUSTER.gpus()


def where(caps: dict[str, int], gpus: list) -> str:
    """Where a Ray server's runs train, in one sentence as the pages show it (runs.where_runs_train's twin): the
    cluster's nodes and slots, never its address (a page is public)."""
    nodes = len(CLUSTER.nodes())
    on = f"a Ray cluster of {nodes} node{'s' if nodes != 1 else ''}"
    if not gpus:
        return f"Runs train on {on}: up to {caps.get('cpu', 0)} at once on its CPUs, a Ray actor a run."
    shares = ", ".join(f"{g.name}, up to {caps.get(g.device, 0)} run(s) at once" for g in gpus)
    cpu = f", and up to {caps['cpu']} more on its CPUs while the GPUs are full" if caps.get("cpu") else ""
    return f"Runs train on {on} ({shares}; bf16 autocast){cpu}, a Ray actor a run."
