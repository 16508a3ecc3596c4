"""The run store of a shared server (bert_core.serve.runs): a queue for the CPU's slots, turns while others wait, runs that
nobody watches ending, a bounded number of ended runs, and share ids that give no control. Stand-in trainers
(threads that count steps) keep these fast; the last test ends a real training process."""

import time

import pytest

from bert_core.errors import BertCoreError
from bert_core.serve import job_factory, jobs, runs, thread_job
from tests.stand_ins import Counter, Steps

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

WAIT_S = 60          # generous: a loaded shared machine starts processes slowly; passing tests never wait it out


def _store(**kw):
    made = {}

    def factory(run):
        made[run.run_id] = job = thread_job.TrainingJob(run.run_id, builder=lambda: Counter(run.spec.steps))
        return job

    kw.setdefault("slots", lambda: 1)
    store = runs.RunStore(factory, poll_s=0.02, **kw)
    return store, made


def _until(condition, what: str, wait_s: float = WAIT_S):
    deadline = time.monotonic() + wait_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def cleanup():
    stores = []
    yield stores.append
    for store in stores:
        store.close()


def test_a_start_beyond_the_slots_waits_in_line_and_starts_when_a_slot_frees(cleanup):
    store, _ = _store(turn_s=1000)
    cleanup(store)
    first = store.submit(Steps(), "s1")             # runs until stopped
    second = store.submit(Steps(50), "s2")
    third = store.submit(Steps(50), "s3")
    assert first.phase in ("preparing", "running") and second.phase == third.phase == "queued"
    assert second.job is None                     # a queued run costs nothing yet
    assert store.queue_position(second)[0] == 0 and store.queue_position(third)[0] == 1
    assert store.queue_position(third)[1] >= store.queue_position(second)[1]
    store.stop(first.run_id, wait=5)
    _until(lambda: second.phase in ("running", "finished"), "the queued run starts when the slot frees")
    assert third.phase == "queued"
    _until(lambda: third.phase == "finished", "and then the next one, by itself")
    assert second.phase == "finished" and first.phase == "stopped"


def test_while_others_wait_a_run_trains_one_turn_then_rejoins_the_queue_where_it_stopped(cleanup):
    store, made = _store(turn_s=0.5)   # each turn long enough for a loaded machine's poll to see it
    cleanup(store)
    long_run = store.submit(Steps(), "s1")
    _until(lambda: long_run.job is not None and long_run.job.trainer is not None, "it starts")
    alone = long_run.job.trainer.step
    time.sleep(1.0)
    assert long_run.phase == "running", "with nobody waiting, no turn ends"
    other = store.submit(Steps(), "s2")
    _until(lambda: long_run.phase == "queued", "its turn ends once someone waits")
    paused_at = long_run.job.trainer.step
    assert paused_at > alone
    _until(lambda: other.phase == "running", "the waiting run gets the slot")
    _until(lambda: long_run.phase == "running", "and the first comes back after the other's turn")
    _until(lambda: long_run.job.trainer.step > paused_at, "continuing where it stopped")
    assert long_run.job is made[long_run.run_id], "the same job (same process, same optimizer), not a new one"


def test_stopping_a_queued_run_cancels_it_and_a_share_id_gives_no_control(cleanup):
    store, _ = _store(turn_s=1000)
    cleanup(store)
    busy = store.submit(Steps(), "s1")
    waiting = store.submit(Steps(), "s2")
    with pytest.raises(BertCoreError):
        store.stop(busy.view_id)                 # whoever only holds the share link cannot stop the run
    assert busy.phase == "running" and store.by_view(busy.view_id) is busy
    store.stop(waiting.run_id)
    assert waiting.phase == "cancelled" and waiting.job is None
    with pytest.raises(BertCoreError, match="nothing to resume"):
        store.resume(waiting.run_id)


def test_a_run_nobody_watches_for_the_grace_period_is_stopped_and_released(cleanup):
    alive = {"owner": True, "viewer": True}
    released = []
    store, _ = _store(is_alive=alive.get, unwatched_s=1.5, turn_s=1000,
                      release_folder=lambda run: released.append(run.run_id))
    cleanup(store)
    run = store.submit(Steps(), "owner")
    store.attach(run, "viewer", runs.VIEWER)
    _until(lambda: run.phase == "running", "it starts")
    alive["owner"] = False                       # the owner closed the tab, but a viewer still watches
    time.sleep(2.0)
    assert run.phase == "running"
    alive["viewer"] = False
    time.sleep(0.2)
    alive["viewer"] = True                       # a reload within the grace period
    time.sleep(2.0)
    assert run.phase == "running" and run.note is None
    alive["viewer"] = False
    _until(lambda: run.phase == "stopped" and run.released, "nobody watches: it is stopped")
    assert "nobody watched it" in run.note
    _until(lambda: released == [run.run_id], "its checkpoint goes to its folder")
    queued_alone = store.submit(Steps(), "gone")    # a queued run whose tab is gone is cancelled, never started
    alive["gone"] = False
    _until(lambda: queued_alone.phase in ("cancelled", "stopped"), "a run nobody watches never holds the CPU")


def test_the_server_keeps_the_latest_ended_runs_and_says_when_a_link_was_dropped(cleanup):
    store, _ = _store(keep=2, slots=lambda: 3)
    cleanup(store)
    done = []
    for i in range(4):
        done.append(store.submit(Steps(3), f"s{i}"))
        _until(lambda: done[-1].phase == "finished", "a short run finishes")
        store.tick()
    _until(lambda: len(store.runs()) == 2, "only the latest two ended runs stay")
    assert [r.run_id for r in store.runs()] == [r.run_id for r in done[2:]]
    assert store.get(done[0].run_id) is None and store.was_dropped(done[0].run_id)
    assert store.was_dropped(done[0].view_id) and not store.was_dropped("never-existed")


def test_a_family_lists_the_runs_started_from_one_tab(cleanup):
    store, _ = _store(slots=lambda: 2)
    cleanup(store)
    a = store.submit(Steps(3), "s1")
    b = store.submit(Steps(3), "s1", family_of=a)
    c = store.submit(Steps(3), "s2")
    assert store.family(b) == [a, b] and store.family(c) == [c]


def test_default_slots_leave_a_core_for_the_web_server(monkeypatch):
    monkeypatch.delenv(runs.SLOTS_ENV, raising=False)
    assert runs.default_slots(cores=2) == 1 and runs.default_slots(cores=1) == 1 and runs.default_slots(8) == 7
    monkeypatch.setenv(runs.SLOTS_ENV, "3")
    assert runs.default_slots(cores=2) == 3
    assert len({runs.new_token() for _ in range(100)}) == 100 and len(runs.new_token()) >= 22


def test_an_ended_run_gives_back_its_process_and_keeps_its_model_in_a_folder(tmp_path, cleanup, monkeypatch):
    """A real child process: a run nobody watches is stopped, its checkpoint written, its process gone; the
    model and a saved copy still come from the folder."""
    monkeypatch.setenv(jobs.PROCESS_ENV, "1")
    spec = jobs.TrainSpec(vocab_size=300, train=dict(max_steps=100_000, batch_size=4, max_seq_length=32,
                                                     eval_every=0, probe_every=0, device="cpu"), probes=False)
    alive = {"owner": True}
    store = runs.RunStore(lambda run: job_factory.pretraining_job(run.run_id, run.spec), slots=lambda: 1,
                          is_alive=alive.get, unwatched_s=0.3, poll_s=0.05,
                          release_folder=lambda run: tmp_path / "released")
    cleanup(store)
    run = store.submit(spec, "owner")
    _until(lambda: run.job is not None and run.job.trainer is not None and run.job.trainer.step >= 2,
           "the child trains", wait_s=180)
    process = run.job.process
    alive["owner"] = False
    _until(lambda: process.poll() is not None, "the process is gone")
    assert run.released and run.job.released == (tmp_path / "released").resolve()
    model = run.job.model_snapshot()
    assert model is not None and not model.training
    copy = run.job.save(tmp_path / "copy")
    assert (copy / "config.json").is_file() and (copy / "model.safetensors").is_file()
    with pytest.raises(BertCoreError):
        store.resume(run.run_id)


def test_a_browsers_run_list_holds_its_own_runs_and_the_ones_it_watched_and_no_one_elses(cleanup):
    from bert_core.app.run_panel import valid_visitor, visitor_rows

    store, _ = _store(turn_s=1000, slots=lambda: 2)
    cleanup(store)
    alice, bob, carol = (runs.new_token() for _ in range(3))
    mine = store.submit(Steps(30), "tab-a", visitor=alice)
    bobs = store.submit(Steps(30), "tab-b", visitor=bob)
    store.attach(bobs, "tab-a2", runs.VIEWER, alice)     # alice opened bob's share link
    store.attach(mine, "tab-a3", runs.VIEWER, alice)     # her own run, opened again: still hers
    assert store.visited(alice) == [(bobs, runs.VIEWER), (mine, runs.OWNER)]
    assert store.visited(bob) == [(bobs, runs.OWNER)]
    assert store.visited(carol) == [] and store.visited(None) == [] and store.visited("") == []
    rows = visitor_rows(store.visited(alice), "http://host/")
    assert rows[0]["open"] == f"http://host/Train?watch={bobs.view_id}"    # the link she had: no control
    assert rows[1]["open"] == f"http://host/Train?run={mine.run_id}"
    assert all(bobs.run_id not in str(row) for row in rows)
    store.discard(mine.run_id)
    assert store.visited(alice) == [(bobs, runs.VIEWER)]
    assert valid_visitor(alice) == alice
    for junk in (None, "", "short", "a" * 65, "x'; alert(1)//aaaaaaaaaaa", 42, "../../etc/passwd-aaaaaaaa"):
        assert valid_visitor(junk) is None, junk


def test_the_cookie_script_stores_the_id_and_nothing_else():
    from bert_core.app.run_panel import VISITOR_COOKIE, cookie_script

    token = runs.new_token()
    script = cookie_script(token)
    assert f"{VISITOR_COOKIE}={token}; path=/" in script and "SameSite=None; Secure" in script
    with pytest.raises(ValueError):
        cookie_script("'; document.location='http://evil/")


def test_the_run_list_shows_names_as_text_and_links_only_its_own():
    from bert_core.inspect.safe_text import markdown
    from bert_core.app.run_panel import rows_markdown

    rows = [{"run": "[click](http://evil) | x", "state": "finished", "open": "http://host/Train?run=abc"}]
    text = rows_markdown(rows)
    assert "[open](http://host/Train?run=abc)" in text
    assert markdown("[click](http://evil) | x") in text   # shown as written: no link, not even a bare URL's
    assert text.count("](") - text.count("\\](") == 1   # one link: an escaped ] closes none
    assert rows_markdown([]) == ""
