"""The declared interfaces between the server's run store and what it runs: a run's spec, its job, and the live view
the pages and the queue read, plainly: each kind of run implements all of them (tests/test_run_protocols.py checks
every implementation), so a new kind is one more class, not one more probe. Torch-free.

- RunSpec: `training.train_spec.TrainSpec`, `training.finetune_spec.FinetuneSpec`.
- RunJob: `thread_job.TrainingJob`, `training_process.ProcessTrainingJob`, `finetune_runs.KeptRaceJob`.
- LiveView: `training.trainer.Trainer`, `training.finetune.FinetuneComparison`, a pretraining run's mirror
  (`training_mirrors`) and `training.race_view.RaceView` (a race's mirror, or one read back from its folder);
  HostedRun, with run, stop and pause: the first two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# The pages a run belongs to (RunSpec.page), also the names its links and run lists use; a race's is beside its spec.
from bert_core.training.finetune_spec import FINETUNE_PAGE  # noqa: F401  (re-exported for the server and pages)
from bert_core.training.train_spec import TRAIN_PAGE  # noqa: F401  (re-exported)


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
    """A run the server hosts, as the pages and the queue read it. Every kind has every attribute, empty (None, (),
    {}) where it has none: a pretraining run has no `tuners` or `results`; a race no `history`, `evals`, `tokenizer`,
    `growth`, `data` or `probes` of its own (each of its models has its own, in `tuners`, then `results`)."""

    step: int                # steps taken (a race: its models' together)
    state: str               # idle | running | stopped | finished | failed
    error: str | None
    config: Any              # what it trains with: a training.train_config.TrainConfig; a race's FinetuneConfig
    probes: Any              # a pretraining run's probe snapshots (inspect.probes.ProbeStore); None for a race
    tokenizer: Any           # a pretraining run's tokenizer; None for a race (each of its models has its own)
    growth: dict | None      # when a run that started small grew (Trainer.growth); None before, without, for a race
    tuners: Sequence[Any]    # a race's models as they train (each: name, state, step, evals, stages); () otherwise

    @property
    def progress(self) -> Any:
        """A run_loop.Progress: fraction done, eta_s, step, elapsed_s."""

    @property
    def history(self) -> Sequence[Any]:
        """A pretraining run's step events so far (pretraining_events.StepEvent); () for a race."""

    @property
    def evals(self) -> Sequence[Any]:
        """A pretraining run's held-out evaluations so far (pretraining_events.EvalEvent); () for a race."""

    @property
    def results(self) -> Mapping[str, Any]:
        """A race's ended models' results by name (finetune_results.FinetuneResult); {} for a pretraining run."""

    @property
    def data(self) -> Any:
        """A pretraining run's training data (for the Attention and Tokens pages), None where it is not at hand
        (a mirror without a way to rebuild it, a race: its split is `train_data` and `val_data`)."""


@runtime_checkable
class HostedRun(LiveView, Protocol):
    """A live view a job drives where it trains; the mirrors' controls are their job's (RunJob.stop, RunJob.pause)."""

    def run(self) -> None:
        """Train until done, a stop or a pause; never raises (a failure sets `error` and state "failed")."""

    def stop(self) -> None:
        """End the run at its next step (a race skips its models not yet run); another thread may call it."""

    def pause(self) -> None:
        """End this turn on a shared server: a pretraining run at its next step, a race between its models."""


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

    def pause(self) -> None: ...   # as HostedRun.pause

    def wait(self, timeout: float) -> bool: ...

    def close(self, wait: float = 10.0) -> None: ...

    def kill(self, why: str, phase: str = "failed") -> None: ...

    def silent_s(self) -> float:
        """Seconds its training has said nothing (0 for a job that cannot tell)."""

    def release(self, folder: str | Path) -> None:
        """End an ended run's process, its model written to `folder` (nothing for a job with no process)."""
