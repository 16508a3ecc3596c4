"""The server's mirror of a pretraining run in a child process (run_protocols.LiveView), fed by its events:
`TrainerProxy` of a `Trainer`, and `restored_trainer`, a recorded run's mirror read back from its checkpoint (a race's
mirror is a training.race_view.RaceView). Torch-free at import."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from bert_core.inspect.probes import ProbeSnapshot, ProbeStore
from bert_core.inspect.word_class_timelapse import WordClassProbe
from bert_core.inspect.word_maps import word_maps_from_json
from bert_core.model.config import BertConfig
from bert_core.model.files import TRAINER_STATE, read_json
from bert_core.model.tokenization import BertTokenizer
from bert_core.training.pretraining_events import EvalEvent, GrowthEvent, StepEvent
from bert_core.training.run_loop import EventLog, append_thinned, run_progress
from bert_core.training.train_config import TrainConfig


class TrainerProxy(EventLog):
    tuners: tuple = ()                          # one model: no race's models or results
    results: Mapping = MappingProxyType({})

    def __init__(self, built: dict, data_factory: Callable[[Any], Any] | None = None):
        self.config = built["config"]
        self.model_config = built["model_config"]
        self.tokenizer = built["tokenizer"]
        self.metadata = built["metadata"]
        # When a run that started small grew (bert_core.training.trainer.Trainer.growth), None before or without.
        self.growth = built.get("growth")
        self.baselines = built["baselines"]
        self.probes = None
        if built["probes"] is not None:
            self.probes = ProbeStore(*built["probes"])
        self.step = built["step"]
        EventLog.__init__(self, built["history"], built["evals"])
        self.tokens_seen = self._history[-1].tokens_seen if self._history else 0
        self.state = "idle"
        self.error: str | None = None
        self._elapsed = self._history[-1].elapsed_s if self._history else 0.0
        self._elapsed_at = None          # monotonic time of the last step event while running
        self._data_factory = data_factory
        self._data = None
        self._data_lock = threading.Lock()

    @property
    def progress(self):
        elapsed = self._elapsed
        if self.state == "running" and self._elapsed_at is not None:
            elapsed += time.monotonic() - self._elapsed_at
        return run_progress(self.config, self.step, elapsed, self.state == "finished")

    @property
    def data(self):
        if self._data is None and self._data_factory is not None:
            # Built once for every page that asks at once: ten viewers opening the Attention page together each
            # built it, sharing the GIL, and waited 12 s (docs/benchmarks.md, issue 74).
            with self._data_lock:
                if self._data is None:
                    self._data = self._data_factory(self.tokenizer)
        return self._data

    def _receive(self, event, extra) -> None:
        with self._lock:
            if isinstance(event, GrowthEvent):
                self.model_config = BertConfig.from_hf_dict(event.model_config)
                self.growth = {"step": event.step, "fraction": event.fraction, "from_size": list(event.from_size),
                               "to_size": list(event.to_size)}
            elif isinstance(event, StepEvent):
                append_thinned(self._history, event, self.config.history_limit)
                self.step, self.tokens_seen = event.step, event.tokens_seen
                self._elapsed, self._elapsed_at = event.elapsed_s, time.monotonic()
            elif isinstance(event, EvalEvent):
                self._evals.append(event)
                if extra is not None:
                    self.baselines = extra
        if isinstance(event, ProbeSnapshot) and self.probes is not None:
            self.probes.add(event)


def restored_trainer(folder: Path, probes: dict | None = None,
                     data_factory: Callable[[Any], Any] | None = None) -> TrainerProxy:
    """A recorded run's mirror from its checkpoint folder and `probes` (as its record keeps them); "idle": its job
    says how the run ended."""
    folder = Path(folder)
    state = read_json(folder / TRAINER_STATE)
    built = {"config": TrainConfig.from_dict(state["train_config"]), "model_config": BertConfig.load(folder),
             "tokenizer": BertTokenizer.load(folder), "metadata": state.get("metadata") or {},
             "baselines": dict(state.get("baselines") or {}), "step": int(state["step"]),
             "history": [StepEvent(**e) for e in state.get("history", [])],
             "evals": [EvalEvent(**e) for e in state.get("evals", [])],
             "growth": (state.get("growth") or {}).get("grown"),
             "probes": None if not probes else (probes["sentences"], probes["attention_sentence"],
                                                probes["top_k"], probes["max_snapshots"])}
    trainer = TrainerProxy(built, data_factory)
    if probes and trainer.probes is not None:
        for snap in probes.get("snapshots", []):
            attention = snap.get("attention")
            trainer.probes.add(ProbeSnapshot(
                step=int(snap["step"]), predictions=[[[tuple(c) for c in m] for m in p]
                                                     for p in snap["predictions"]],
                attention_tokens=snap.get("attention_tokens"),
                attention=None if attention is None else np.asarray(attention, dtype=np.float16),
                word_maps=word_maps_from_json(snap.get("word_maps")),
                word_classes=WordClassProbe.from_json(snap.get("word_classes"))))
    return trainer
