"""The Export page's data: a run's history and evaluations as CSV, its configuration, live or from a folder."""

import csv
import io

from bert_core.config import BertConfig
from bert_core.export import history_label, rows_to_csv, run_record
from bert_core.training import EvalEvent, TrainConfig


class _Live:
    """What a live run (a Trainer or its mirror) offers the Export page."""

    def __init__(self):
        self.history = []
        self.evals = [EvalEvent(step=0, mlm_loss=5.0, mlm_acc=0.1, perplexity=148.4, nsp_acc=0.5)]
        self.config = TrainConfig(max_steps=3, batch_size=2, max_seq_length=32, device="cpu")
        self.baselines = {"unigram": {"accuracy": 0.05}}


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
