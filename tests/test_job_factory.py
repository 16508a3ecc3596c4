"""Which job trains a run (bert_core.serve.job_factory): the kind is a name in JOB_KINDS, so another backend is one
more entry; the builder follows the spec (a Train run's, a Fine-tune race's) and the slot the queue gave it; and the
two kinds of today share job_base.JobBase. Nothing here trains: the makers are stand-ins that record their call."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.race_stand_ins import builder_of
from bert_core.errors import BertCoreError
from bert_core.serve import job_factory
from bert_core.serve.finetune_runs import FinetuneSpec
from bert_core.serve.job_base import JobBase
from bert_core.serve.run_records import CHECKPOINT_EVERY_S, RunRecords
from bert_core.serve.run_registry import Run
from bert_core.serve.thread_job import TrainingJob
from bert_core.serve.train_spec import build_trainer
from bert_core.training.train_spec import default_spec
from bert_core.serve.training_process import ProcessTrainingJob


@pytest.fixture
def made(monkeypatch):
    """A third job kind, "stand-in", that records what it was made with; the server's kind set to it."""
    calls = []

    def stand_in(session_id, builder, spec=None, data_factory=None, device=None):
        calls.append({"session": session_id, "builder": builder, "spec": spec, "data_factory": data_factory,
                      "device": device})
        return calls[-1]

    monkeypatch.setitem(job_factory.JOB_KINDS, "stand-in", stand_in)
    monkeypatch.setattr(job_factory, "job_kind", lambda: "stand-in")
    return calls


def _run(spec, device=None) -> Run:
    return Run(run_id="r1", view_id="v1", family="f", spec=spec, device=device)


def test_a_third_job_kind_is_one_entry_and_gets_the_train_runs_builder(made, tmp_path):
    spec = default_spec()
    records = RunRecords(tmp_path / "state")
    factory = job_factory.JobFactory(records, kind=lambda: "stand-in")
    factory(_run(spec, device="cuda"))
    call = made[-1]
    assert call["session"] == "r1" and call["spec"] is spec   # the record keeps the page's spec
    builder = call["builder"]
    assert builder.func is build_trainer and builder.args[0].train["device"] == "cuda"   # the slot's device
    assert builder.keywords == {"checkpoint_dir": str(records.checkpoint_for("r1")),
                                "checkpoint_every_s": CHECKPOINT_EVERY_S}
    assert call["data_factory"].args == (spec,)
    assert call["device"] == "cuda"   # a kind that asks its cluster for a GPU share reads the slot here


def test_a_race_gets_its_own_builder_with_the_slots_device(made):
    race = FinetuneSpec(settings={"time_budget_s": 30.0}, checkpoint="nano")
    job_factory.JobFactory(kind=lambda: "stand-in")(_run(race, device="cuda:1"))
    call = made[-1]
    assert call["session"] == "r1" and call["spec"] is None and call["data_factory"] is None
    assert call["builder"].keywords == {"device": "cuda:1"} and call["builder"].args == (race,)
    job_factory.finetune_job("ft", builder_of(race), device="cpu")   # the CPU is the builder's own default
    assert made[-1]["builder"].keywords == {} and made[-1]["builder"].args == (race,)


def test_the_default_kind_is_a_process_unless_the_server_says_thread(monkeypatch):
    monkeypatch.delenv(job_factory.PROCESS_ENV, raising=False)
    assert job_factory.job_kind() == "process"
    spec = default_spec()
    job = job_factory.pretraining_job("s", spec)
    try:
        assert isinstance(job, ProcessTrainingJob) and isinstance(job, JobBase)
    finally:
        job.close(wait=1.0)
    monkeypatch.setenv(job_factory.PROCESS_ENV, "0")
    assert job_factory.job_kind() == "thread"
    thread = job_factory.pretraining_job("s", spec)
    assert isinstance(thread, TrainingJob) and isinstance(thread, JobBase)


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_both_kinds_refuse_alike_before_a_run_has_a_trainer(kind):
    job = job_factory.JOB_KINDS[kind]("s", lambda: None, default_spec())
    try:
        assert job.phase == "new" and job.snapshot_step is None and job.trainer is None
        with pytest.raises(BertCoreError, match="no stopped or finished run to continue"):
            job.extend(10)
        with pytest.raises(BertCoreError, match="nothing to save yet"):
            job.save(Path("unused"))
    finally:
        job.close(wait=1.0)


def test_the_pages_say_a_ray_server_trains_on_its_cluster(monkeypatch):
    from bert_core.cluster import ray_cluster
    from bert_core.serve import job_factory

    nodes = [{"NodeID": "a", "Alive": True, "Resources": {"CPU": 2.0}},
             {"NodeID": "b", "Alive": True, "Resources": {"CPU": 1.0}}, {"NodeID": "c", "Alive": False}]
    monkeypatch.setattr(ray_cluster, "CLUSTER", ray_cluster.ClusterSlots(nodes_source=lambda: nodes))
    factory = job_factory.JobFactory(kind=lambda: "ray")
    said = factory.where({"cpu": factory.slots()}, [])
    assert said == "Runs train on a Ray cluster of 2 nodes: up to 3 at once on its CPUs, a Ray actor a run."
    local = job_factory.JobFactory(kind=lambda: "process").where({"cpu": 2}, [])
    assert local.startswith("Runs train on this server's CPU")


def test_a_running_server_never_moves_onto_a_cluster_whose_setting_appears_later(monkeypatch):
    from bert_core.cluster import ray_cluster
    from bert_core.serve import job_factory

    monkeypatch.delenv(job_factory.RAY_ADDRESS_ENV, raising=False)
    kind = job_factory.server_job_kind()
    monkeypatch.setenv(job_factory.RAY_ADDRESS_ENV, "ray://127.0.0.1:1")   # set after the server started
    assert kind() == "process" and job_factory.job_kind() == "ray"
    monkeypatch.setenv(job_factory.PROCESS_ENV, "0")
    assert kind() == "thread"                                               # process or thread stays live
    assert job_factory.server_job_kind()() == "ray"                         # a server started now trains there
