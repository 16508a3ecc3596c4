"""The server's declared interfaces (bert_core.serve.run_protocols): every kind of run spec, job and live view
implements its protocol in full, so that the queue and the scheduler read them plainly, never by probing."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Generic, Protocol

import pytest

from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.serve.jobs import default_spec
from bert_core.serve.thread_job import TrainingJob
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE, HostedRun, LiveView, RunJob, RunSpec
from bert_core.serve.training_mirrors import TrainerProxy
from bert_core.serve.training_process import ProcessTrainingJob
from bert_core.training.race_view import RaceView
from bert_core.training.run_loop import Progress

ROOT = Path(__file__).resolve().parent.parent


def _never():
    raise AssertionError("not built in this test")


def test_both_specs_are_run_specs_with_their_page():
    train, race = default_spec(), FinetuneSpec(settings={"time_budget_s": 30.0}, checkpoint="nano")
    assert isinstance(train, RunSpec) and isinstance(race, RunSpec)
    assert (train.page, train.recorded, train.expected_s, train.longest_part_s) == (TRAIN_PAGE, True, None, 0.0)
    assert (race.page, race.recorded, race.expected_s, race.longest_part_s) == (FINETUNE_PAGE, True, 60.0, 30.0)


def test_both_jobs_are_run_jobs():
    assert isinstance(TrainingJob("session", default_spec()), RunJob)
    job = ProcessTrainingJob("session", _never, spec=default_spec())
    try:
        assert isinstance(job, RunJob)
    finally:
        job.close(wait=1.0)


def _members(protocol) -> set[str]:
    """Every attribute and method a protocol declares, its bases' included."""
    return {name for cls in protocol.__mro__ if cls not in (object, Protocol, Generic)
            for name in (*vars(cls), *vars(cls).get("__annotations__", {}))
            if not name.startswith("_")}


def _lacks(obj, protocol) -> list[str]:
    """What `obj` lacks of `protocol`, looked up without running a property (a kept race reads its models then)."""
    missing = []
    for name in sorted(_members(protocol)):
        try:
            inspect.getattr_static(obj, name)
        except AttributeError:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def trainer():
    from bert_core.serve.jobs import build_trainer
    return build_trainer(default_spec())


@pytest.fixture(scope="module")
def race():
    from bert_core.data.classification_data import toy_order_task
    from bert_core.model.bert import BertForPreTraining
    from bert_core.model.config import BertConfig
    from bert_core.model.tokenization import train_tokenizer
    from tests.page_races import build_comparison

    task = toy_order_task(seed=0, num_examples=40)
    tok = train_tokenizer(task.texts, vocab_size=120)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tok.vocab_size, max_position_embeddings=32))
    return build_comparison(task, model, tok, dict(train=20, val=20, seed=0, steps=2, lr=1e-3, batch=4, maxlen=24))


def test_a_pretraining_run_and_its_mirror_are_live_views_with_no_race_inside(trainer):
    assert _lacks(trainer, HostedRun) == [] and isinstance(trainer, HostedRun)
    assert trainer.probes is not None and trainer.tuners == () and dict(trainer.results) == {}
    mirror = TrainerProxy({"config": trainer.config, "model_config": trainer.model_config,
                           "tokenizer": trainer.tokenizer, "metadata": trainer.metadata, "baselines": {},
                           "step": trainer.step, "history": [], "evals": [], "growth": None, "probes": None})
    assert _lacks(mirror, LiveView) == [] and isinstance(mirror, LiveView)
    assert (mirror.tuners, dict(mirror.results), mirror.probes, mirror.data) == ((), {}, None, None)


def test_a_race_mirror_is_a_live_view_with_no_curves_of_its_own(race):
    view = {"tuners": [], "progress": Progress(fraction=0.0, eta_s=None, step=0, elapsed_s=0.0), "state": "idle",
            "error": None, "config": race.config, "task_kind": "labels", "metric_names": ("accuracy", "macro-F1"),
            "primary": 0}
    proxy = RaceView(view, lambda: (None, None))
    assert _lacks(proxy, LiveView) == [] and isinstance(proxy, LiveView)
    assert (proxy.history, proxy.evals, proxy.probes, proxy.tokenizer, proxy.growth, proxy.data) == (
        (), (), None, None, None, None)


def test_a_race_is_a_hosted_run_with_no_curves_of_its_own(race):
    assert _lacks(race, HostedRun) == [], _lacks(race, HostedRun)
    assert isinstance(race, HostedRun) and race.probes is None and race.tuners
    assert (list(race.history), list(race.evals), race.tokenizer, race.growth, race.data) == ([], [], None, None, None)


def test_a_kept_race_is_a_live_view():
    from bert_core.training.kept_race import read_race

    kept = read_race(FinetuneSpec(settings={"time_budget_s": 30.0}, checkpoint="nano"), None, "stopped")
    assert _lacks(kept, LiveView) == [], _lacks(kept, LiveView)
    assert isinstance(kept, LiveView) and dict(kept.results) == {} and list(kept.tuners) == []


def test_the_server_thread_and_the_training_process_run_only_hosted_runs():
    """The controls a job calls are the protocol's: a mirror has none (its job sends them to the process)."""
    assert {"run", "stop", "pause"} <= _members(HostedRun) - _members(LiveView)
    assert not hasattr(TrainerProxy, "stop") and not hasattr(RaceView, "stop")


def _probes(path: Path) -> list[tuple[int, str]]:
    """The getattr(obj, "literal", default) and hasattr calls in a module, with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                (node.func.id == "getattr" and len(node.args) == 3 and isinstance(node.args[1], ast.Constant))
                or node.func.id == "hasattr"):
            found.append((node.lineno, ast.unparse(node)))
    return found


@pytest.mark.parametrize("module", ["serve/run_scheduler.py", "serve/jobs.py",
                                    "serve/finetune_runs.py", "serve/training_process.py", "serve/train_spec.py",
                                    "serve/run_registry.py", "serve/runs.py", "serve/run_records.py",
                                    "serve/app_storage.py", "app/export.py", "serve/model_sources.py",
                                    "app/run_panel.py", "app/class_view.py", "serve/job_base.py",
                                    "serve/thread_job.py", "serve/job_factory.py", "serve/training_child.py",
                                    "serve/training_mirrors.py"])
def test_the_queue_the_scheduler_and_the_jobs_read_the_protocols_without_probing(module):
    assert _probes(ROOT / "bert_core" / module) == []


def test_the_probes_left_in_the_serving_wing_are_few_and_each_says_why():
    """What no declared interface of ours can serve: the platform's and the libraries' own objects."""
    left = [(path, line) for wing in ("serve", "app") for path in sorted((ROOT / "bert_core" / wing).glob("*.py"))
            for line, _ in _probes(path)]
    assert len(left) <= 5, left
    for path, line in left:
        text = path.read_text().splitlines()
        assert "#" in text[line - 1] or "#" in text[line - 2], (path.name, line)   # a comment says why
