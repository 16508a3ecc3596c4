"""The explorer as a public server sees it (AppTest): no box takes a server path in public mode, saving goes
under the app's runs folder whatever is typed, an uploaded checkpoint zip opens, and bad uploads and checkpoints
are messages on the page."""

import io
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a file of 10 s or more: it runs first (conftest.py); -m "not slow" leaves it out

pytest.importorskip("streamlit")

from bert_core.app import app_models, app_state
from bert_core.serve import app_storage, model_sources, runs  # noqa: E402
from tests.test_app import TIMEOUT, _assert_clean, _job, _open, _small_run, _texts  # noqa: E402
from tests.test_app_storage import decoy, snapshot  # noqa: E402,F401  (decoy: a fixture)

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["app.py", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "pages").glob("*.py"))]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from tests.app_fixtures import train_nano_checkpoint

    return train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy")


@pytest.fixture(autouse=True)
def _env(checkpoint, monkeypatch, tmp_path):
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(checkpoint))
    monkeypatch.setenv(app_storage.RUNS_DIR_ENV, str(tmp_path / "runs"))
    monkeypatch.setenv(app_storage.SCRATCH_DIR_ENV, str(tmp_path / "scratch"))
    monkeypatch.delenv(app_storage.PUBLIC_ENV, raising=False)
    yield
    for run in app_state.RUNS.runs():
        app_state.RUNS.discard(run.run_id, wait=30)


def _zip_of(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for p in folder.iterdir():
            zf.write(p, f"bert-checkpoint/{p.name}")
    return buf.getvalue()


@pytest.mark.parametrize("page", PAGES)
def test_public_mode_offers_no_server_path_on_any_page(monkeypatch, page):
    monkeypatch.setenv(app_storage.PUBLIC_ENV, "1")
    at = _open(page, model_source=app_models.SOURCE_FOLDER)
    _assert_clean(at)
    assert app_models.SOURCE_FOLDER not in at.sidebar.radio(key="model_source").options
    assert not [t for t in at.text_input if t.key == "model_folder"]
    assert at.sidebar.radio(key="model_source").value == app_models.SOURCE_SHIPPED


def test_a_stale_folder_choice_is_not_reopened_in_public_mode(monkeypatch, checkpoint):
    at = _open("pages/4_Predictions.py")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_FOLDER).run()
    at.sidebar.text_input(key="model_folder").input(str(checkpoint)).run()
    assert any("step 3" in c.value for c in at.sidebar.caption)
    monkeypatch.setenv(app_storage.PUBLIC_ENV, "1")
    at.run()
    _assert_clean(at)
    assert at.sidebar.radio(key="model_source").value == app_models.SOURCE_SHIPPED


@pytest.mark.parametrize("public", ["0", "1"])
def test_an_uploaded_checkpoint_zip_becomes_the_active_model(monkeypatch, checkpoint, public):
    monkeypatch.setenv(app_storage.PUBLIC_ENV, public)
    at = _open("pages/4_Predictions.py")
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_UPLOAD).run()
    assert any("Upload a zip" in t for t in _texts(at.sidebar.info))
    at.sidebar.file_uploader(key="model_upload").upload("ckpt.zip", _zip_of(checkpoint), "application/zip").run()
    _assert_clean(at)
    assert not at.error, _texts(at.error)
    assert any("step 3" in c.value for c in at.sidebar.caption)


@pytest.mark.parametrize("content, message", [
    (b"", "empty"), (b"just text", "not a zip"), ("PICKLE", "weights_only"), ("NAN", "NaN"),
    ("CUT", "model.safetensors"),
])
def test_bad_checkpoint_uploads_are_messages_on_every_page(checkpoint, tmp_path, content, message):
    import pickle

    import torch
    from safetensors.torch import load_file, save_file

    if content == "PICKLE":
        class Boom:
            def __reduce__(self):
                return (Path(tmp_path / "PWNED").touch, ())

        folder = tmp_path / "pickled"
        folder.mkdir()
        (folder / "config.json").write_bytes((checkpoint / "config.json").read_bytes())
        (folder / "vocab.txt").write_bytes((checkpoint / "vocab.txt").read_bytes())
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Boom()))
        content = _zip_of(folder)
    elif content == "NAN":
        folder = tmp_path / "nan"
        folder.mkdir()
        for p in checkpoint.iterdir():
            (folder / p.name).write_bytes(p.read_bytes())
        state = load_file(str(folder / "model.safetensors"))
        key = next(iter(state))
        state[key] = torch.full_like(state[key], float("nan"))
        save_file(state, str(folder / "model.safetensors"))
        content = _zip_of(folder)
    elif content == "CUT":   # weights cut short: the message names the file in the zip, not where it was unpacked
        folder = tmp_path / "cut"
        folder.mkdir()
        for p in checkpoint.iterdir():
            (folder / p.name).write_bytes(p.read_bytes()[:200] if p.name == "model.safetensors" else p.read_bytes())
        content = _zip_of(folder)
    for page in PAGES:
        at = _open(page)
        at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_UPLOAD).run()
        at.sidebar.file_uploader(key="model_upload").upload("ckpt.zip", content, "application/zip").run()
        _assert_clean(at)
        assert any(message in t for t in _texts(at.sidebar.error)), (page, _texts(at.sidebar.error))
        scratch = str(app_storage.scratch_root().parent)
        assert not any(scratch in t for t in _texts(at.sidebar.error)), _texts(at.sidebar.error)
    assert not (tmp_path / "PWNED").exists()


def test_saving_a_run_under_hostile_names_never_leaves_the_runs_folder(tmp_path, decoy):
    app_files = snapshot(ROOT / "bert_core")
    before = snapshot(decoy)
    at = _open("pages/2_Train.py")
    _small_run(at, steps=2)
    at.button[0].click().run()
    job = _job()
    job.wait(TIMEOUT)
    assert job.phase == "finished", job.error
    at.run()
    names = [str(decoy), "../decoy", "~", "", "/", ".", "../" * 8 + "etc"]
    saved = []
    for name in names:
        at.text_input(key="train_save_name").input(name).run()
        next(b for b in at.button if b.label == "Save").click().run()
        _assert_clean(at)
        assert not at.error, (name, _texts(at.error))
        saved.append(next(t for t in _texts(at.success) if "Saved as" in t))
    runs = tmp_path / "runs"
    folders = sorted(p.name for p in runs.iterdir())
    # One session saving again under a name it already used replaces its own run: "decoy" three times is one
    # folder; "~", "", "/" and "." all become "run".
    assert folders == ["decoy", "etc", "run"], folders
    assert snapshot(decoy) == before and snapshot(ROOT / "bert_core") == app_files
    assert all((runs / f / "model.safetensors").is_file() for f in folders)
    # The saved run opens from the sidebar's list.
    at.sidebar.radio(key="model_source").set_value(app_models.SOURCE_SAVED).run()
    at.sidebar.selectbox(key="model_saved").set_value("decoy").run()
    _assert_clean(at)
    assert any("step 2" in c.value for c in at.sidebar.caption)


def test_in_public_mode_the_save_message_names_no_server_path(monkeypatch, tmp_path):
    monkeypatch.setenv(app_storage.PUBLIC_ENV, "1")
    at = _open("pages/2_Train.py")
    _small_run(at, steps=1)
    at.button[0].click().run()
    _job().wait(TIMEOUT)
    at.run()
    at.text_input(key="train_save_name").input("my run").run()
    next(b for b in at.button if b.label == "Save").click().run()
    _assert_clean(at)
    message = next(t for t in _texts(at.success) if "Saved as" in t)
    assert "my-run" in message and str(tmp_path) not in message


def test_a_pasted_corpus_lives_in_the_runs_scratch_folder(tmp_path):
    at = _open("pages/2_Train.py")
    _small_run(at, steps=1)
    at.selectbox(key="train_corpus").set_value("paste").run()
    text = "\n\n".join(f"Sentence one of doc {i}. Sentence two of doc {i}. And a third one here." for i in range(40))
    at.text_area(key="train_paste").input(text).run()
    at.button[0].click().run()
    _assert_clean(at)
    job = _job()
    job.wait(TIMEOUT)
    assert job.phase == "finished", job.error
    files = list((tmp_path / "scratch").rglob("corpus.txt"))
    # The run's own folder (a queued run may start after its tab has closed), removed when the run is dropped.
    assert len(files) == 1 and files[0].parent == app_storage.session_scratch(runs.scratch_key(job.session_id),
                                                                              create=False)
