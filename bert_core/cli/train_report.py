"""What `train` says: the progress bar's line while the run goes, and at the end metrics.json (held-out figures
beside the baselines, time, machine, command) and its text."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
from pathlib import Path

import torch

from bert_core.cli.console import ProgressBar, fmt_seconds, percent
from bert_core.data.pretraining_data import PretrainingData
from bert_core.errors import BertCoreError
from bert_core.model.files import write_json_atomic
from bert_core.training.evaluation import evaluate, unigram_baseline_for
from bert_core.training.heldout import reproducible_eval
from bert_core.training.plateau import plateau_warning
from bert_core.training.pretraining_events import EvalEvent, GrowthEvent, StepEvent


def _acc_name(config) -> str:
    return "next-token acc" if config.objective == "clm" else "mlm acc"


def progress_callback(trainer_ref: list, bar: ProgressBar, warnings: list):
    """A Trainer callback that draws each step and evaluation on `bar` (the trainer is `trainer_ref[0]` once
    built), and says once, in `warnings` too, when the run stays on the unigram plateau."""

    def callback(event):
        trainer = trainer_ref[0]
        if isinstance(event, StepEvent):
            prog = trainer.progress
            acc = percent(event.mlm_acc)
            bar.update(prog.fraction, f"step {event.step} loss {event.loss:.3f} {_acc_name(trainer.config)} {acc} "
                                      f"{event.tokens_per_s:,.0f} tok/s eta {fmt_seconds(prog.eta_s)}")
            if not warnings and event.step % 25 == 0:  # said once, in the log and in metrics.json
                warning = plateau_warning(trainer.history, trainer.baselines, prog.fraction,
                                          causal=trainer.config.objective == "clm")
                if warning:
                    warnings.append(warning)
                    bar.stream.write(("\n" if bar.tty else "") + f"warning: {warning}\n")
        elif isinstance(event, EvalEvent):
            bar.update(trainer.progress.fraction, f"eval step {event.step}: held-out {_acc_name(trainer.config)} "
                                                  f"{percent(event.mlm_acc)} ppl {event.perplexity:.1f} "
                                                  f"nsp {percent(event.nsp_acc)}", force=True)
            if bar.tty:
                bar.stream.write("\n")
        elif isinstance(event, GrowthEvent):
            (layers, hidden), (to_layers, to_hidden) = event.from_size, event.to_size
            bar.stream.write(("\n" if bar.tty else "") + f"grew from {layers} x {hidden} to {to_layers} x "
                             f"{to_hidden} at step {event.step} ({event.fraction:.0%} of the run); it trains on "
                             "with a new optimizer\n")

    return callback


def _machine() -> dict:
    info = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def _baselines(trainer) -> dict:
    """The trainer's baselines; after --init-from its step-0 evaluation is the starting checkpoint, so it is
    recorded as "start" (with where it came from), not as "untrained"."""
    baselines = dict(trainer.baselines)
    source = trainer.metadata.get("init_from")
    if source and "untrained" in baselines:
        baselines["start"] = {**baselines.pop("untrained"), "model": source}
    return baselines


def _per_corpus(trainer, heldout_by_corpus: dict) -> dict:
    """Each corpus's held-out figures on its own, beside its unigram baseline."""
    cfg = trainer.config
    model = trainer.model   # the model itself: under torchrun, DDP's wrapper is held beside it (distributed)
    per_corpus = {}
    for name, corpus in heldout_by_corpus.items():
        try:
            data = PretrainingData(corpus, trainer.tokenizer, max_seq_length=cfg.max_seq_length,
                                   batch_size=cfg.batch_size, mask_rate=cfg.mask_rate, seed=cfg.seed, nsp=cfg.nsp,
                                   whole_word_masking=cfg.whole_word_masking, mask_only=cfg.mask_only,
                                   objective=cfg.objective)
            batches = data.eval_batches(cfg.eval_batches, seed=cfg.seed)
            result = evaluate(model, batches, device=trainer.device)
            per_corpus[name] = {**result.to_dict(), "baselines": unigram_baseline_for(trainer.data, batches)}
        except BertCoreError as e:
            per_corpus[name] = {"error": str(e)}
    return per_corpus


def final_metrics(trainer, heldout_by_corpus: dict, wall_s: float) -> dict:
    """metrics.json: held-out figures (overall and per corpus) beside the baselines, time, machine, command."""
    cfg = trainer.config
    final = dataclasses.asdict(trainer.evals[-1]) if trainer.evals else {}
    if cfg.objective == "clm":  # the same head and sums, but every position predicts the token after it
        heldout = {"objective": "clm", "next_token_accuracy": final.get("mlm_acc"),
                   "next_token_loss": final.get("mlm_loss")}
    else:
        heldout = {"masked_token_accuracy": final.get("mlm_acc"), "mlm_loss": final.get("mlm_loss")}
    return {
        "heldout": {**heldout, "perplexity": final.get("perplexity"), "nsp_accuracy": final.get("nsp_acc"),
                    "step": final.get("step")},
        "baselines": _baselines(trainer),
        "per_corpus": _per_corpus(trainer, heldout_by_corpus),
        "heldout_split": trainer.metadata.get("heldout"),
        "steps": trainer.step,
        "tokens_seen": trainer.tokens_seen,
        "growth": trainer.growth,
        "training_time_s": trainer.elapsed_s,
        "wall_time_s": wall_s,
        "world_size": trainer.dist.world_size,
        "device": str(trainer.device),
        "machine": _machine(),
        "train_config": cfg.to_dict(),
        "commands": trainer.metadata.get("commands", []),
    }


def metrics_text(m: dict) -> str:
    """metrics.json's held-out figures as the lines `train` prints at the end."""
    h, b = m["heldout"], m["baselines"]
    causal = h.get("objective") == "clm"
    what, ppl = ("next-token", "next-token perplexity") if causal else ("masked-token", "MLM perplexity")
    uni = b.get("unigram", {})
    label = "start" if "start" in b else "untrained"
    first = b.get(label, {})
    rows = [
        f"held-out after {m['steps']} steps ({fmt_seconds(m['training_time_s'])}):",
        f"  {what + ' accuracy':<21} {percent(h[what.replace('-', '_') + '_accuracy'])}   (unigram baseline "
        f"{percent(uni.get('accuracy'))}, {label} {percent(first.get('mlm_acc'))})",
        f"  {ppl:<21} {h['perplexity']:.1f}   (unigram {uni.get('perplexity', float('nan')):.1f}, "
        f"{label} {first.get('perplexity', float('nan')):.1f})" if h["perplexity"] is not None else "",
        f"  NSP accuracy          {percent(h['nsp_accuracy'])}   (chance 50%)" if not causal else "",
    ]
    return "\n".join(r for r in rows if r)


def report(trainer, heldout_by_corpus: dict, out, started: float, warnings: list[str], as_json: bool) -> None:
    """Write the run's metrics.json into `out` and print its figures (as JSON with --json)."""
    metrics = final_metrics(trainer, heldout_by_corpus, time.time() - started)
    if warnings:
        metrics["warnings"] = warnings
    if trainer.state == "finished":
        # The figures a reader can reproduce with `heldout` + `eval` (the commands are recorded beside them).
        metrics["eval"] = reproducible_eval(out)
    write_json_atomic(Path(out) / "metrics.json", metrics)
    print(json.dumps(metrics, indent=1) if as_json else metrics_text(metrics))
