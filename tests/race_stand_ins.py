"""A stand-in fine-tuning race spec for tests whose race is a stand-in (a blocking or counting builder): a
FinetuneSpec whose builder is given, not built from plain data, so it is not recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from bert_core.serve import job_factory
from bert_core.serve.finetune_runs import race_builder
from bert_core.training.finetune_spec import FinetuneSpec


@dataclass(frozen=True)
class RaceStandIn(FinetuneSpec):
    builder: Any = None
    models: int = 2
    budget_s: float = 30.0
    recorded: ClassVar[bool] = False   # its builder is no plain data


def race_spec(builder, **kw) -> RaceStandIn:
    """FinetuneSpec's old shape: a builder, kind, data_label, model_label, models and budget_s."""
    return RaceStandIn(builder=builder, **kw)


def builder_of(spec):
    """A race's builder as the server's job factory makes it (finetune_runs.race_builder), a stand-in's its own."""
    return spec.builder if isinstance(spec, RaceStandIn) else race_builder(spec)


# The server's job factory (app_state.RUNS) makes a race's builder from its plain-data spec; a test that submits a
# stand-in there gets the stand-in's own.
job_factory.race_builder = builder_of
