"""Pages watching a training run share one copy of its weights, and none waits while another fetches a newer one
(issue 74: a class of viewers queued behind each other's weight requests and each built its own copy, and ten
Attention pages built the run's training data ten times at once). A stand-in training process holds its answer
until the test lets it go: every wait here is on an event, with a generous cap."""

from __future__ import annotations

import threading

import pytest

from bert_core.serve import job_base
from bert_core.serve.training_mirrors import TrainerProxy
from bert_core.serve.training_process import ProcessTrainingJob

CAP_S = 60.0   # only a hung (failing) test waits this long


class HeldChild:
    """A training process's link whose weights answer waits for `go`; `asked` is set when a request arrives."""

    def __init__(self):
        self.asked, self.go, self.requests = threading.Event(), threading.Event(), 0
        self.step = 5

    def alive(self) -> bool:
        return True

    def request(self, kind, *args, **kwargs):
        assert kind == "weights"
        self.requests += 1
        step = self.step
        self.asked.set()
        assert self.go.wait(CAP_S), "the test never let the stand-in answer"
        return step, b"weights of step %d" % step


class Built:
    def __init__(self, blob):
        self.blob = blob

    def eval(self):
        return self


@pytest.fixture
def job(monkeypatch):
    from bert_core.model import hf

    monkeypatch.setattr(hf, "pretraining_model_from_bytes", lambda config, blob: Built(blob))
    monkeypatch.setattr(ProcessTrainingJob, "busy", property(lambda self: True))
    job = ProcessTrainingJob("shared", builder=None)
    job._child = HeldChild()

    class Mirror:
        step = 5
        model_config = None

    job.trainer = Mirror()
    return job


def in_thread(fn):
    out, done = [], threading.Event()

    def run():
        out.append(fn())
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return out, done


def test_pages_that_ask_together_for_a_runs_first_copy_share_one_fetch(job):
    first, first_done = in_thread(job.model_snapshot)
    assert job._child.asked.wait(CAP_S)
    second, second_done = in_thread(job.model_snapshot)   # the copy is being fetched: this page waits for it
    assert not second_done.wait(0.2)
    job._child.go.set()
    assert first_done.wait(CAP_S) and second_done.wait(CAP_S)
    assert second[0] is first[0] and job._child.requests == 1 and job.snapshot_step == 5


def test_a_viewer_does_not_wait_while_another_fetches_a_newer_copy(job, monkeypatch):
    job._child.go.set()
    old = job.model_snapshot()
    monkeypatch.setattr(job_base, "SNAPSHOT_EVERY_S", 0.0)   # the copy held is too old from now on
    job.trainer.step = job._child.step = 9
    job._child.asked.clear()
    job._child.go.clear()
    fetcher, fetched = in_thread(job.model_snapshot)
    assert job._child.asked.wait(CAP_S)                       # one page is fetching step 9's weights ...
    viewer, viewed = in_thread(job.model_snapshot)
    assert viewed.wait(CAP_S), "a viewer waited for another page's weight copy"
    assert viewer[0] is old and job.snapshot_step == 5        # ... the other shows the copy held, labelled step 5
    job._child.go.set()
    assert fetched.wait(CAP_S)
    assert fetcher[0] is not old and job.snapshot_step == 9 and job._child.requests == 2
    monkeypatch.setattr(job_base, "SNAPSHOT_EVERY_S", 1e9)
    assert job.model_snapshot() is fetcher[0]


def test_pages_that_ask_together_for_a_runs_training_data_build_it_once():
    asked, go, calls = threading.Event(), threading.Event(), []

    def factory(tokenizer):
        calls.append(tokenizer)
        asked.set()
        assert go.wait(CAP_S)
        return object()

    built = dict(config=None, model_config=None, tokenizer="tok", metadata={}, baselines={}, probes=None, step=0,
                 history=[], evals=[])
    proxy = TrainerProxy(built, factory)
    first, first_done = in_thread(lambda: proxy.data)
    assert asked.wait(CAP_S)
    second, second_done = in_thread(lambda: proxy.data)
    go.set()
    assert first_done.wait(CAP_S) and second_done.wait(CAP_S)
    assert second[0] is first[0] and len(calls) == 1
