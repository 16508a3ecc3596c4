"""Fine-tuning races in the server's one queue (issue: one queue for every training): a race pauses between its
models and goes on with the same results, queues behind pretraining runs instead of being refused, takes its turns as
one run, is found again by its link, watched through a share link, and listed in its browser's runs."""

import threading
import time
from functools import partial

import pytest
import torch

from bert_core.data.classification_data import toy_topic_task
from bert_core.model.bert import BertForPreTraining
from bert_core.model.config import BertConfig
from bert_core.model.tokenization import train_tokenizer
from bert_core.serve import jobs, runs, thread_job
from bert_core.training.finetune_spec import FinetuneSpec
from bert_core.serve.training_process import ProcessTrainingJob
from bert_core.app.run_panel import visitor_rows
from tests.page_races import build_comparison
from tests.race_stand_ins import builder_of, race_spec
from tests.stand_ins import Counter, Progress, Steps  # a stand-in pretraining run (counts steps)
from tests.test_runs import _until  # a polling wait

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

WAIT_S = 60.0
SETTINGS = dict(train=120, val=60, seed=0, budget=600, lr=1e-3, batch=16, maxlen=32, steps=4)


@pytest.fixture(scope="module")
def race_parts():
    """The toy topics, and a nano BERT with a tokenizer trained on them (untrained weights: a race only has to run)."""
    data = toy_topic_task(seed=0, num_examples=200)
    tokenizer = train_tokenizer(data.texts, vocab_size=300)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.preset("nano", vocab_size=tokenizer.vocab_size, max_position_embeddings=64))
    return data, model, tokenizer


def _results(comparison) -> dict:
    return {name: (r.steps, round(r.accuracy, 6), round(r.loss, 5)) for name, r in comparison.results.items()}


def test_a_race_paused_between_its_models_goes_on_to_the_same_results(race_parts):
    data, model, tokenizer = race_parts
    whole = build_comparison(data, model, tokenizer, SETTINGS, baseline=True)
    whole.run()
    assert whole.state == "finished" and not whole.resumable

    paused = build_comparison(data, model, tokenizer, SETTINGS, baseline=True)
    first_neural = paused.tuners[1]
    first_neural.callbacks.append(lambda event: paused.pause())   # the turn is up while "pretrained" trains
    paused.run()
    # It yielded once the model in training had finished its whole budget, and not a model later.
    assert [t.state for t in paused.tuners] == ["finished", "finished", "idle"]
    assert paused.state == "stopped" and paused.resumable
    assert set(paused.results) == {"tfidf", "pretrained"}
    paused.run()                                                  # its next turn
    assert paused.state == "finished" and not paused.resumable
    assert _results(paused) == _results(whole)                    # each model seeded: the pause changes nothing

    stopped = build_comparison(data, model, tokenizer, SETTINGS)
    stopped.tuners[0].callbacks.append(lambda event: stopped.stop())
    stopped.run()
    assert stopped.state == "stopped" and not stopped.resumable   # a Stop is for good: the rest is skipped
    stopped.run()
    assert [t.state for t in stopped.tuners] == ["stopped", "idle"]


class _Race:
    """A stand-in race of `parts` models, each `part_s` seconds, which yields between them on pause()."""

    probes, primary = None, 0

    def __init__(self, parts: int, part_s: float):
        self.parts, self.part_s, self.done, self.error = parts, part_s, 0, None
        self.tuners, self.results = [], {}
        self._pause, self._stop, self._running = threading.Event(), threading.Event(), False
        self.turns = 0

    @property
    def step(self):
        return self.done

    @property
    def progress(self):
        return Progress(self.done / self.parts, (self.parts - self.done) * self.part_s, self.done, 0.0)

    @property
    def state(self):
        if self._running:
            return "running"
        return "finished" if self.done == self.parts else "stopped"

    def pause(self):
        self._pause.set()

    def stop(self):
        self._stop.set()

    def run(self):
        self._running, self.turns = True, self.turns + 1
        self._pause.clear()
        try:
            while self.done < self.parts and not self._stop.is_set():
                if self._pause.is_set():
                    return
                time.sleep(self.part_s)
                self.done += 1
        finally:
            self._running = False


def _spec(parts=2, part_s=0.3):
    return race_spec(partial(_Race, parts, part_s), kind="labels", data_label="AG News topics (4 classes)",
                        model_label="bert-tiny-english", models=parts, budget_s=part_s)


def _store(**kw):
    def factory(run):
        builder = builder_of(run.spec) if isinstance(run.spec, FinetuneSpec) else partial(Counter, run.spec.steps)
        return thread_job.TrainingJob(run.run_id, builder=builder)

    kw.setdefault("slots", lambda: 1)
    return runs.RunStore(factory, poll_s=0.02, **kw)


@pytest.fixture
def store():
    made = []
    yield lambda **kw: made.append(_store(**kw)) or made[-1]
    for s in made:
        s.close()


def test_a_full_server_queues_a_race_behind_pretraining_and_says_when_it_starts(store):
    s = store(turn_s=1000)
    pretraining = s.submit(Steps(), "teacher")                      # trains until stopped: the one slot is taken
    race = s.submit(_spec(parts=3, part_s=0.2), "student", visitor=runs.new_token())
    later = s.submit(Steps(50), "another")
    assert race.phase == "queued" and race.job is None           # queued, not refused
    assert s.queue_position(race)[0] == 0 and s.queue_position(later)[0] == 1
    # The race's length is known from its budget (3 models x 0.2 s), so the run behind it is told when it starts.
    wait_race, wait_later = s.queue_position(race)[1], s.queue_position(later)[1]
    assert wait_later - wait_race == pytest.approx(0.6, abs=0.05)
    s.stop(pretraining.run_id, wait=5)
    _until(lambda: race.phase == "finished", "the queued race starts when the slot frees, and finishes")
    assert race.trainer.done == 3
    _until(lambda: later.phase == "finished", "and then the run behind it")


def test_a_race_takes_its_turns_as_one_run_yielding_between_its_models(store):
    s = store(turn_s=0.25)
    race = s.submit(_spec(parts=4, part_s=0.2), "student")
    _until(lambda: race.phase == "running", "the race starts at once on a free server")
    other = s.submit(Steps(40), "classmate")                            # someone waits: the race's turn will end
    _until(lambda: race.phase == "queued" and race.trainer.done >= 1, "its turn is up: it yields between models")
    assert 1 <= race.trainer.done < 4                            # a whole model, never half of one
    _until(lambda: other.phase == "finished", "the waiting run gets the slot")
    _until(lambda: race.phase == "finished", "the race goes on with its next model when its turn comes again")
    assert race.trainer.done == 4 and race.trainer.turns >= 2


def test_a_race_is_found_by_its_link_watched_by_its_share_link_and_listed_in_its_browser(store):
    s = store()
    alice, bob = runs.new_token(), runs.new_token()
    race = s.submit(_spec(parts=1, part_s=0.05), "alice-tab", visitor=alice)
    assert s.get(race.run_id) is race and s.by_view(race.view_id) is race   # a reload finds it by its link
    s.attach(race, "bob-tab", runs.VIEWER, bob)                              # bob opened the share link
    _until(lambda: race.phase == "finished", "the race runs")
    assert race.watchers == {"alice-tab": runs.OWNER, "bob-tab": runs.VIEWER}
    (mine,), (watched,) = visitor_rows(s.visited(alice)), visitor_rows(s.visited(bob))
    assert mine["open"] == f"Fine-tune?ft={race.run_id}" and mine["data"] == "sentence labels on AG News topics " \
        "(4 classes)" and mine["model"] == "fine-tuned from bert-tiny-english" and mine["state"] == "finished"
    assert watched["open"] == f"Fine-tune?ftwatch={race.view_id}" and race.run_id not in str(watched)
    with pytest.raises(runs.BertCoreError):
        s.stop(race.view_id)                                                 # the share id steers nothing


def test_a_race_in_a_training_process_pauses_between_models_and_its_process_ends_with_it(race_parts):
    data, model, tokenizer = race_parts
    settings = {**SETTINGS, "steps": 100}
    job = ProcessTrainingJob("race", partial(build_comparison, data, model, tokenizer, settings))
    try:
        job.start()
        _until(lambda: job.phase == "running" and any(t.step for t in job.trainer.tuners), "the race trains")
        job.pause()                                   # its turn is up (RunScheduler): it yields after this model
        assert job.wait(WAIT_S) and job.phase == "stopped", job.error
        assert [t.state for t in job.trainer.tuners] == ["finished", "idle"]
        assert set(job.trainer.results) == {"pretrained"}
        job.start()                                   # its next turn
        _until(lambda: job.phase == "finished", "the race goes on with the next model")
        assert [t.step for t in job.trainer.tuners] == [100, 100]
        assert job.trainer.tuners[0].evals[-1].accuracy is not None
        job.release("/nonexistent-never-written")    # an ended race: its process ends, its results stay
        assert job.process.poll() is not None
        results = job.trainer.results
        assert set(results) == {"pretrained", "scratch"} and results["scratch"].model is not None
    finally:
        job.close(wait=10)


def test_an_ended_race_nobody_watches_is_dropped_with_its_models_and_its_link_says_so(store):
    alive = {"tab": True}
    s = store(is_alive=alive.get, unwatched_s=0.2)
    race = s.submit(_spec(parts=1, part_s=0.05), "tab")
    pretraining = s.submit(Steps(3), "tab")                               # a pretraining run keeps its folder: it stays
    _until(lambda: race.phase == "finished" and pretraining.phase == "finished", "both run")
    time.sleep(0.5)
    assert s.get(race.run_id) is race                              # watched: kept, however long
    alive["tab"] = False                                           # the tab is closed
    _until(lambda: s.get(race.run_id) is None, "an ended race nobody watches is dropped")
    assert s.was_dropped(race.run_id) and s.was_dropped(race.view_id)
    assert s.get(pretraining.run_id) is pretraining


def test_a_stopped_race_gives_back_its_process_at_once(store):
    """A Stop skips a race's remaining models for good, so nothing can resume it: its idle process ends as a
    finished race's does (a stopped pretraining run keeps its process for Resume)."""
    s = store()
    race = s.submit(_spec(parts=3, part_s=0.3), "tab")
    pretraining = s.submit(Steps(), "other")
    _until(lambda: race.phase == "running", "the race starts")
    s.stop(race.run_id, wait=5)
    _until(lambda: race.released, "the stopped race's process is released")
    assert race.phase == "stopped" and race.trainer.done < 3
    _until(lambda: pretraining.phase == "running", "the slot goes to the next run")
    s.stop(pretraining.run_id, wait=5)
    time.sleep(0.3)
    assert pretraining.phase == "stopped" and not pretraining.released   # kept for Resume
