"""The Export page's data: a run's history and evaluations as CSV, its configuration, live or from a folder."""

import csv
import io

from bert_core.model.config import BertConfig
from bert_core.app.export import history_label, rows_to_csv, run_record
from bert_core.training.pretraining_events import EvalEvent
from bert_core.training.train_config import TrainConfig


class _Live:
    """What a live run (a Trainer or its mirror) offers the Export page."""

    def __init__(self):
        self.history = []
        self.evals = [EvalEvent(step=0, mlm_loss=5.0, mlm_acc=0.1, perplexity=148.4, nsp_acc=0.5)]
        self.config = TrainConfig(max_steps=3, batch_size=2, max_seq_length=32, device="cpu")
        self.baselines = {"unigram": {"accuracy": 0.05}}
        self.metadata = {}   # what made it (the commands); a Trainer and its mirror both carry it


def test_a_saved_state_and_a_live_run_give_the_same_kind_of_record():
    model_config = BertConfig.preset("nano", vocab_size=300)
    state = {"history": [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}], "evals": [{"step": 2, "mlm_acc": 0.3}],
             "train_config": {"max_steps": 2}, "baselines": {"unigram": {"accuracy": 0.05}}}
    saved = run_record(model_config, trainer_state=state)
    assert saved.history == state["history"] and saved.evals == state["evals"]
    assert saved.config == {"model": model_config.to_hf_dict(), "training": {"max_steps": 2}}
    live = run_record(model_config, trainer=_Live())
    assert live.config["training"]["max_steps"] == 3 and live.baselines == {"unigram": {"accuracy": 0.05}}
    assert live.evals == [{"step": 0, "mlm_loss": 5.0, "mlm_acc": 0.1, "perplexity": 148.4, "nsp_acc": 0.5}]
    empty = run_record(None)
    assert empty.history == [] and empty.config == {"model": None, "training": None}


def test_rows_become_csv_with_a_header_and_thinned_histories_say_so():
    rows = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]
    assert list(csv.DictReader(io.StringIO(rows_to_csv(rows)))) == [{"step": "1", "loss": "2.0"},
                                                                    {"step": "2", "loss": "1.5"}]
    assert rows_to_csv([]) == ""
    assert history_label(rows) == "2 steps"
    assert history_label([{"step": 2}, {"step": 4}, {"step": 5}]) == "3 of 5 steps"


def _unzip(data: bytes, where):
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        zf.extractall(where)
    return where


def test_a_run_bundle_holds_a_folder_transformers_loads_the_history_the_command_and_the_figures(tmp_path):
    import json

    import torch
    from transformers import BertForPreTraining

    from bert_core.data.corpora import generate_toy_corpus
    from bert_core.app.export import run_bundle, run_figures
    from bert_core.serve.jobs import TrainSpec, build_trainer
    from bert_core.training.comparison import train_command

    text = tmp_path / "stories.txt"
    text.write_text("\n\n".join("\n".join(d) for d in generate_toy_corpus(num_documents=60, seed=1).documents))
    spec = TrainSpec(corpus=str(text), corpus_label="stories.txt", vocab_size=300, probes=False,
                     train=dict(max_steps=3, batch_size=4, max_seq_length=32, eval_batches=1, device="cpu",
                                mask_only=True))
    trainer = build_trainer(spec)
    trainer.run()
    record = run_record(trainer.model.config, trainer=trainer)
    folder = _unzip(run_bundle(trainer.save, record, run_figures(record, 0.5)), tmp_path / "bundle")
    hf = BertForPreTraining.from_pretrained(folder / "checkpoint")
    ids = torch.tensor([[2, 10, 11, 3]])
    assert torch.allclose(hf(input_ids=ids).prediction_logits,
                          trainer.model.eval()(input_ids=ids).mlm_logits, atol=1e-5)
    assert (folder / "command.txt").read_text().strip() == train_command(spec)
    assert "--mask-only" in train_command(spec)
    history = list(csv.DictReader(io.StringIO((folder / "history.csv").read_text())))
    assert [int(r["step"]) for r in history] == [1, 2, 3]
    assert len(list(csv.DictReader(io.StringIO((folder / "evaluations.csv").read_text())))) == 2
    config = json.loads((folder / "config.json").read_text())
    assert config["training"]["mask_only"] is True and config["model"]["hidden_size"] == 64
    for name in ("loss", "accuracy", "accuracy-by-decision", "learning-rate"):
        assert json.loads((folder / "figures" / f"{name}.json").read_text())["data"], name
        assert "plotly" in (folder / "figures" / f"{name}.html").read_text()[:5000].lower()
    assert not list((folder / "figures").glob("*.png"))


def test_the_export_page_offers_the_active_models_bundle(tmp_path):
    import pytest

    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.paths import REPO_ROOT
    from bert_core.serve import model_sources
    from tests.app_fixtures import train_nano_checkpoint

    checkpoint = train_nano_checkpoint(tmp_path / "nano")
    mp = pytest.MonkeyPatch()
    mp.setenv(model_sources.CHECKPOINT_ENV, str(checkpoint))
    try:
        at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=120)
        at.run()
        at.switch_page("pages/6_Export.py").run()
        assert not at.exception and not at.error
        assert not any("run bundle" in b.label for b in at.get("download_button"))
        next(b for b in at.button if b.label == "Prepare run bundle (zip)").click().run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        assert any(b.label.startswith("Download run bundle (") for b in at.get("download_button"))
    finally:
        mp.undo()


def test_commands_that_name_the_shared_data_folder_say_what_each_file_is_and_where_to_get_it(tmp_path):
    import io
    import json
    import zipfile

    from pathlib import Path

    from bert_core.app.export import RunRecord, run_bundle, shared_data_notes

    shipped = json.loads((Path(__file__).parent.parent / "checkpoints" / "bert-tiny-english" / "metrics.json")
                         .read_text())["commands"]
    notes = shared_data_notes(shipped)
    assert notes and all(n.startswith("`../shared/data/") for n in notes)
    assert any("wikitext-2/valid.txt" in n and "validation split" in n for n in notes), notes
    assert len(notes) == len(set(notes))   # each file once, however many commands name it
    assert shared_data_notes(["python -m bert_core train --corpus toy --out runs/x"]) == []

    def save(folder):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "config.json").write_text("{}")

    data = run_bundle(save, RunRecord(commands=shipped), {})
    text = zipfile.ZipFile(io.BytesIO(data)).read("command.txt").decode()
    assert text.startswith(shipped[0]) and "# `../shared/data/wikitext-2/valid.txt`" in text
