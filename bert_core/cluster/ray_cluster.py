"""The Ray cluster a class server trains its runs on, when `$BERT_EXPLORER_RAY_ADDRESS` names one: the connection,
the slots its nodes give the server's queue, and the node each new run goes to (docs/deployment.md).

The queue stays the server's. Ray holds an actor's resources for its whole life, and a paused or stopped run keeps
its actor (Resume goes on from its memory): a CPU held that way would lock out the run whose turn it is. So the
server counts the alive nodes' CPUs (`$BERT_EXPLORER_RAY_CPUS` a run) and GPU shares as its slots, places each new run
on the node with the most free slots (hard affinity), and an actor asks Ray for no CPU and a token GPU share (how Ray
hands it its GPU). A dead node leaves the count. Torch-free; `ray` is imported only when used.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from bert_core.errors import BertCoreError
from bert_core.serve.job_base import positive_env
from bert_core.serve.job_factory import RAY_ADDRESS_ENV, ray_address
from bert_core.serve.launcher import repo_pythonpath
from bert_core.serve.server_gpus import ServerGpu, gpu_runs

log = logging.getLogger("bert_core.app")

RAY_CPUS_ENV = "BERT_EXPLORER_RAY_CPUS"         # CPU cores (and torch threads) each run trains with; default 1
NAMESPACE = "bert-explorer"
NODES_TTL_S = 1.0        # how long the nodes' list is reused: the queue asks for its slots at every page draw
GPU_TICKET = 0.001       # the share of a GPU a run's actor asks Ray for: enough for Ray to give it the GPU


def cpus_per_run() -> int:
    return positive_env(RAY_CPUS_ENV) or 1


CONNECT_TIMEOUT_S = 30.0   # how long a run or a page waits for the cluster to answer (ray.init retries for minutes)
RETRY_S = 30.0             # after a failed connection, how long the next ones are refused without asking again
NODES_WAIT_S = 5.0         # how long a page's question for the nodes waits for a connection under way


class ClusterUnavailable(BertCoreError):
    """The cluster cannot take a run (unreachable, or no node for it); its message is for a public page, the whole
    error for the operator's log."""


class ClusterConnection:
    """The connection, made once per server process on a thread of its own: Ray's `init` to an address where no
    cluster answers retries for many minutes (379 s seen; over 20 min to a closed port), and a page must not wait.
    A caller waits until `timeout` s after it began, then leaves it trying; a failure is remembered for RETRY_S."""

    def __init__(self):
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._error: BaseException | None = None   # how the last `init` failed
        self._warned = False   # the operator's log has said that the `init` under way is slow
        self._refused: tuple[float, ClusterUnavailable] | None = None   # (when, what) the last failure said

    def connect(self, timeout: float = CONNECT_TIMEOUT_S):
        import ray   # here: an optional extra, loaded only on a server that trains on a cluster

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
        try:
            ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": repo_pythonpath()}})
        except BaseException as exc:  # noqa: BLE001 - kept for the caller, which says it plainly and logs it whole
            self._error = exc
            return
        with self._lock:
            self._refused = None
        log.info("training on the Ray cluster at %s", address)


def _reason(error: BaseException | None) -> str:
    """A failed connection in plain words, never Ray's text (it names the address and may hold server paths)."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return "no Ray cluster answered at its address"
    return f"Ray failed with {type(error).__name__}" if error is not None else "Ray failed"


CONNECTION = ClusterConnection()


def connect(timeout: float = CONNECT_TIMEOUT_S):
    """The `ray` module, connected (a test's own connection is kept); ClusterUnavailable after `timeout` s. The
    workers import bert_core from the server's own path: the same image or checkout (docs/deployment.md)."""
    return CONNECTION.connect(timeout)


@dataclass(frozen=True)
class RayNode:
    node_id: str
    cpu_slots: int
    gpu_slots: int


@dataclass
class _Placed:
    node_id: str
    on_gpu: bool
    training: Callable[[], bool]   # whether the run trains now (preparing or running): it takes one of its node's slots


class ClusterSlots:
    """The cluster's nodes as the server's slots, and where its runs' actors are (`nodes_source`: a test's nodes)."""

    def __init__(self, nodes_source: Callable[[], list[dict]] | None = None):
        self._nodes_source = nodes_source
        self._lock = threading.Lock()
        self._nodes: tuple[RayNode, ...] = ()
        self._nodes_at = -NODES_TTL_S
        self._placed: dict[str, _Placed] = {}

    def nodes(self) -> tuple[RayNode, ...]:
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
        return sum(n.cpu_slots for n in self.nodes())

    def gpus(self) -> tuple[ServerGpu, ...]:
        """The cluster's GPUs as one device of the queue's ("cuda") with all their shares."""
        shares = sum(n.gpu_slots for n in self.nodes())
        if not shares:
            return ()
        gpus = shares // max(1, gpu_runs())
        return (ServerGpu("cuda", f"{gpus} GPU{'s' if gpus != 1 else ''} of the Ray cluster", 0, shares),)

    def place(self, key: str, on_gpu: bool, training: Callable[[], bool]) -> str:
        """The node with the most free slots of the run's kind (the runs that train now counted), first of equals."""
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
        with self._lock:
            self._placed.pop(key, None)

    def forget_nodes(self) -> None:
        with self._lock:
            self._nodes_at = -NODES_TTL_S


def _ray_nodes() -> list[dict]:
    """Ray's nodes; none while it cannot be reached (the pages show no slots, and a run fails with a plain message)."""
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
    return CLUSTER.slots()


def gpus() -> tuple[ServerGpu, ...]:
    return CLUSTER.gpus()


def where(caps: dict[str, int], gpus: list) -> str:
    """Where a Ray server's runs train (runs.where_runs_train's twin), never the address (a page is public)."""
    nodes = len(CLUSTER.nodes())
    on = f"a Ray cluster of {nodes} node{'s' if nodes != 1 else ''}"
    if not gpus:
        return f"Runs train on {on}: up to {caps.get('cpu', 0)} at once on its CPUs, a Ray actor a run."
    shares = ", ".join(f"{g.name}, up to {caps.get(g.device, 0)} run(s) at once" for g in gpus)
    cpu = f", and up to {caps['cpu']} more on its CPUs while the GPUs are full" if caps.get("cpu") else ""
    return f"Runs train on {on} ({shares}; bf16 autocast){cpu}, a Ray actor a run."
