"""The held-out side of a pretraining run: its fixed evaluation batches (the same masks at every evaluation), the
baselines its figures are read beside (the unigram guess, the untrained model), and an EvalEvent per evaluation;
and `eval`'s figures for a checkpoint on a text file (heldout.evaluate_text_file hands them over from here)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from bert_core.data.corpora import corpus_from_file
from bert_core.data.objectives import objective_settings
from bert_core.data.pretraining_data import PretrainingData, unigram_baseline
from bert_core.errors import BertCoreError
from bert_core.model.bert import is_causal
from bert_core.model.checkpoint import load_checkpoint
from bert_core.training.distributed import resolve_device
from bert_core.training.evaluation import evaluate, unigram_baseline_for
from bert_core.training.pretraining_events import EvalEvent, eval_event
from bert_core.training.train_config import TrainConfig


class HeldoutEvaluation:
    """Evaluates a run's model on its held-out data (a data set, a list of batches, or None for no evaluations) and
    keeps the baselines that trainer_state.json and metrics.json report."""

    def __init__(self, eval_data):
        self.eval_data = eval_data
        self.baselines: dict = {}
        self._batches = None

    def batches(self, config: TrainConfig) -> list:
        """The fixed held-out batches (same masks at every evaluation), built once on first use."""
        if self._batches is None:
            if self.eval_data is None:
                self._batches = []
            elif isinstance(self.eval_data, (list, tuple)):
                self._batches = list(self.eval_data)
            else:
                self._batches = self.eval_data.eval_batches(config.eval_batches, seed=config.seed)
        return self._batches

    def prepare_baselines(self, data, config: TrainConfig) -> None:
        """The unigram baseline on the held-out batches, counted from the training `data` (once per run)."""
        batches = self.batches(config)
        if batches and not self.baselines:
            self.baselines = unigram_baseline_for(data, batches)

    def evaluate(self, model: torch.nn.Module, step: int, device: torch.device,
                 config: TrainConfig) -> EvalEvent | None:
        """The model's held-out figures at `step` (None without held-out data); at step 0 they are also the
        untrained baseline."""
        batches = self.batches(config)
        if not batches:
            return None
        result = evaluate(model, batches, device=device, precision=config.precision)
        event = eval_event(step, result, config.nsp)
        if step == 0 and "untrained" not in self.baselines:
            self.baselines["untrained"] = dataclasses.asdict(event)
        return event


def _field(state, section: str, key: str):
    """state[section][key] when both levels are objects, else None."""
    part = state.get(section) if isinstance(state, dict) else None
    return part.get(key) if isinstance(part, dict) else None


def evaluate_checkpoint_on_text(checkpoint, text_file, seed: int, batches: int, batch_size: int, seq_len: int | None,
                                mask_rate: float, device: str) -> dict:
    """heldout.evaluate_text_file's work, here beside the rest of the held-out evaluation: it loads torch, and
    heldout.py is imported by the server without it."""
    if Path(text_file).is_dir():
        raise BertCoreError(f"--text-file {text_file} is a folder; give a plain text file")
    if not Path(text_file).is_file():
        raise BertCoreError(f"text file {text_file} does not exist")
    dev = resolve_device(device)
    ckpt = load_checkpoint(checkpoint, require_tokenizer=True)
    state = ckpt.trainer_state or {}
    # Read defensively: a Hugging Face Trainer's trainer_state.json has other keys, and eval needs only these two.
    saved_len = _field(state, "train_config", "max_seq_length")
    if seq_len is None:
        seq_len = saved_len if isinstance(saved_len, int) and not isinstance(saved_len, bool) else 128
    seq_len = max(16, min(seq_len, ckpt.model.config.max_position_embeddings, ckpt.tokenizer.model_max_length))
    # The same reader as `train`'s corpora: size-checked, UTF-8-checked, and very long lines cut into pieces.
    corpus = corpus_from_file(text_file)
    causal = is_causal(ckpt.model)  # a next-token model is scored on plain text: every position, nothing masked
    data = PretrainingData(corpus, ckpt.tokenizer, max_seq_length=seq_len, batch_size=batch_size,
                           mask_rate=mask_rate, seed=seed, **objective_settings("clm" if causal else "mlm"))
    eval_batches = data.eval_batches(batches, seed=seed)
    # On a CPU in fp32 even where bf16 autocast would be faster (training.precision): the figures a checkpoint's
    # metrics.json quotes were computed so there, and `eval` reproduces them.
    result = evaluate(ckpt.model.to(dev), eval_batches, device=dev, precision="bf16" if dev.type == "cuda" else "fp32")
    counts_list = _field(state, "metadata", "unigram_counts")
    never = ckpt.tokenizer.special_ids - {ckpt.tokenizer.unk_id}
    if isinstance(counts_list, list) and len(counts_list) == ckpt.tokenizer.vocab_size \
            and all(isinstance(c, int) and c >= 0 for c in counts_list):
        counts, source = torch.tensor(counts_list), "the checkpoint's training text"
    else:
        counts, source = data.token_counts, "the evaluated text itself (the checkpoint records no training counts)"
    baseline = dict(unigram_baseline(counts, eval_batches, never_ids=never))
    if causal:
        figures = {"objective": "clm", "next_token_accuracy": result.mlm_acc, "next_token_loss": result.mlm_loss,
                   "perplexity": result.perplexity, "predicted_tokens": result.num_masked}
    else:
        figures = {"objective": "mlm", "masked_token_accuracy": result.mlm_acc, "mlm_loss": result.mlm_loss,
                   "perplexity": result.perplexity, "nsp_accuracy": result.nsp_acc,
                   "accuracy_by_decision": result.acc_by_decision, "masked_tokens": result.num_masked}
    return {"checkpoint": str(checkpoint), "text_file": str(text_file), "seed": seed, **figures,
            "sequences": result.num_sequences, "unigram_baseline": {**baseline, "counts_from": source}}
