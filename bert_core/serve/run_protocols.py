"""The declared interfaces between the server's run store and what it runs: a run's spec, its job, and the live view
of its training that the pages and the queue read. The queue and the scheduler read these attributes plainly; each
kind of run implements all of them (tests/test_run_protocols.py checks every implementation), so a new kind (a
third job, say one on a cluster) is one more class that satisfies the same protocol, not one more probe.

Implementations:
- RunSpec: `train_spec.TrainSpec` (a Train-page run), `finetune_runs.FinetuneSpec` (a Fine-tune race).
- RunJob: `thread_job.TrainingJob` (on a server thread), `training_process.ProcessTrainingJob` (in a child process).
- LiveView: `training.trainer.Trainer` and `training.finetune.FinetuneComparison` where they run, and their mirrors
  in the server, `training_mirrors.TrainerProxy` and `training_mirrors.ComparisonProxy`.

Torch-free, like the rest of the server's import path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# The pages a run belongs to (RunSpec.page), also the names its links and run lists use.
TRAIN_PAGE = "Train"
FINETUNE_PAGE = "Fine-tune"


@runtime_checkable
class RunSpec(Protocol):
    """What a run trains, as the queue and the run lists know it before it runs."""

    page: str            # the page whose run it is (train_spec.TRAIN_PAGE, finetune_runs.FINETUNE_PAGE)
    recorded: bool       # written to the server's run records (and so brought back after a restart)

    @property
    def expected_s(self) -> float | None:
        """How long it will hold a slot, when its budget says so (None: the queue guesses from recent runs)."""

    @property
    def longest_part_s(self) -> float:
        """The longest stretch it trains without yielding its slot (0: it can yield at any step)."""

    @property
    def corpus_label(self) -> str:
        """The text or data it trains on, as a reader knows it (never a server path)."""


@runtime_checkable
class LiveView(Protocol):
    """A training as the pages and the queue watch it: where it is and how it ends."""

    step: int
    state: str               # idle | running | stopped | finished | failed
    error: str | None
    probes: Any              # a pretraining run's probe snapshots (inspect.probes.ProbeStore); None for a race

    @property
    def progress(self) -> Any:
        """A run_loop.Progress: fraction done, eta_s, step, elapsed_s."""


@runtime_checkable
class RunJob(Protocol):
    """One run's training, on a server thread or in a child process."""

    session_id: str
    spec: Any
    trainer: LiveView | None
    error: str | None
    phase: str               # new | preparing | running | stopped | finished | failed
    ended_note: str | None   # why the server ended it, when it did
    released: Path | None    # the folder its model was written to when its process was ended (None: not released)
    rebuilds: bool           # its next start is a new job's (a kept race a restart stopped, which Resume takes up)

    @property
    def busy(self) -> bool: ...

    @property
    def model_available(self) -> bool: ...

    def start(self) -> None: ...

    def stop(self, wait: float | None = None) -> None: ...

    def pause(self) -> None:
        """End its turn on a shared server: a pretraining run at its next step, a race between its models."""

    def wait(self, timeout: float) -> bool: ...

    def close(self, wait: float = 10.0) -> None: ...

    def kill(self, why: str, phase: str = "failed") -> None: ...

    def silent_s(self) -> float:
        """Seconds its training has said nothing (0 for a job that cannot tell)."""

    def release(self, folder: str | Path) -> None:
        """End an ended run's process, its model written to `folder` (nothing for a job with no process)."""
