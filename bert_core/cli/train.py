"""`python -m bert_core train`: pretrain a BERT (or a GPT-style causal model) on corpora, or resume a saved run.

The options (bert_core.cli.train_options, with the recipe that fills in what was not given) make a plan
(bert_core.cli.train_plan) for the run builder the app uses too (bert_core.training.run_builder); everything is
checked (options, output folder, checkpoints, corpora, sizes) before anything is written. While the run goes, a
progress bar; at the end, metrics.json (held-out figures beside the baselines, time, machine, command) and its text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from bert_core.cli.console import ProgressBar, fmt_seconds, one_line, percent
from bert_core.cli.train_options import add_train_options, apply_recipe
from bert_core.cli.train_plan import (check_enough_text, check_same_heldout, check_training_size, command_line,
                                      new_run_plan, resume_plan)
from bert_core.data.corpora import HELDOUT_FRACTION
from bert_core.data.pretraining_data import PretrainingData
from bert_core.errors import BertCoreError
from bert_core.model.files import check_output_folder, write_json_atomic
from bert_core.model.growth import growth_record
from bert_core.training.distributed import computes_in, init_distributed, shutdown_distributed
from bert_core.training.evaluation import evaluate, unigram_baseline_for
from bert_core.training.heldout import reproducible_eval
from bert_core.training.plateau import plateau_warning
from bert_core.training.pretraining_events import EvalEvent, GrowthEvent, StepEvent
from bert_core.training.run_builder import BuiltRun, build_run, check_shards_exclude, resume_run
from bert_core.training.train_config import TrainConfig


def add_parser(sub):
    p = sub.add_parser(
        "train",
        help="pretrain a BERT (MLM + NSP), or a GPT-style causal model (--objective clm), on corpora",
        description="Pretrain a BERT with masked-language modelling and next-sentence prediction. "
        f"{int(HELDOUT_FRACTION * 100)}% of each corpus's documents (seeded) are held out for evaluation. "
        "Runs unchanged under torchrun --nproc_per_node=N (DistributedDataParallel). On --resume, the learning-rate "
        "schedule, optimizer and housekeeping options given override the saved ones; the data and model stay.",
    )
    add_train_options(p)
    return p


@dataclass(frozen=True)
class PreparedRun:
    """A checked run, ready to build on every process (`build(callbacks, world_size)`)."""

    out: Path
    config: TrainConfig
    corpora: tuple[str, ...]
    recipe_line: str | None
    build: Callable[[list, int], BuiltRun]


def _prepare_resume(args) -> PreparedRun:
    """The saved run --resume names, with the changes its options ask for, writing to --out or back to itself."""
    plan = resume_plan(args)
    out = args.out if args.out is not None else args.resume
    # Saving replaces the whole folder, so a resume folder holding the user's own files is refused too.
    same = Path(out).expanduser().resolve() == Path(args.resume).expanduser().resolve()
    check_output_folder(out, overwrite=args.overwrite or same)
    check_training_size(plan.model_config, plan.config)

    def build(callbacks: list, world_size: int) -> BuiltRun:
        built = resume_run(args.resume, plan.state, plan.config, plan.changes, plan.tokenizer, callbacks=callbacks,
                           checkpoint_dir=out, world_size=world_size)
        metadata = built.trainer.metadata
        metadata.setdefault("commands", []).append(command_line(args))
        if plan.changes:
            # What this resume changed, beside the command that changed it.
            metadata.setdefault("resumed_with", []).append({"step": built.trainer.step, "changes": plan.changes})
        return built

    return PreparedRun(out, plan.config, tuple(plan.state["metadata"]["corpora"]), None, build)


def _prepare_new(args) -> PreparedRun:
    """A new run: the recipe for its size fills in what was not given, then its plan is checked and loaded."""
    if args.max_steps is None and args.time_budget_s is None:
        raise BertCoreError("give --steps N or --time-budget SECONDS")
    recipe_line = apply_recipe(args)
    out = check_output_folder(args.out, overwrite=args.overwrite)
    plan = new_run_plan(args)

    def build(callbacks: list, world_size: int) -> BuiltRun:
        built = build_run(plan, callbacks=callbacks, checkpoint_dir=out, world_size=world_size)
        if plan.start is not None:
            state = plan.start.trainer_state
            # A folder `grow` wrote has no trainer state: its growth.json carries its source's split.
            before = state.get("metadata", {}) if state is not None else growth_record(args.init_from)
            if built.record.get("shards"):  # the build's decontamination, not a seeded split, keeps it unseen
                check_shards_exclude(f"{args.init_from} held out", before.get("heldout"),
                                     built.record["shards"])
            if not built.record.get("shards") or "shard_share" in built.record:   # text corpora: a seeded split
                check_same_heldout(args.init_from, before.get("heldout"), built.record)
        return built

    return PreparedRun(out, plan.config, plan.corpora, recipe_line, build)


def _say_start(args, trainer, prepared: PreparedRun, world_size: int) -> None:
    """The log's lines before the first step: the model, the machine, the recipe, and a precision that cannot apply."""
    n_params = sum(p.numel() for p in trainer.model.parameters())
    grows = ""
    if trainer.growth_pending():
        c, to = trainer.model.config, trainer.grow_to
        grows = (f", starting as {c.num_hidden_layers} x {c.hidden_size} ({to.num_parameters() / 1e6:.2f}M once "
                 f"grown to {to.num_hidden_layers} x {to.hidden_size})")
    print(f"training {n_params / 1e6:.2f}M parameters{grows} on {trainer.device} "
          f"(world size {world_size}), writing {prepared.out}", file=sys.stderr)
    if prepared.recipe_line:
        print(prepared.recipe_line, file=sys.stderr)
    copied = (trainer.metadata.get("init_from") or {}).get("positions_copied_from")
    if copied:
        print(f"positions {copied} on start as copies of the {copied} the checkpoint trained "
              "(--no-copy-positions leaves them as they are)", file=sys.stderr)
    used = computes_in(trainer.device, args.precision)
    if used != args.precision and "--precision" in args.argv:
        where = ("a CPU without bfloat16 instructions" if args.precision == "bf16" and trainer.device.type == "cpu"
                 else trainer.device.type)
        print(f"note: --precision {args.precision} does not apply on {where}; the run is {used}", file=sys.stderr)
    elif used == "bf16" and trainer.device.type == "cpu":
        print("computing in bf16 (this CPU has bfloat16 instructions; --precision fp32 turns it off)", file=sys.stderr)


def _train(args, prepared: PreparedRun, dist_info) -> int:
    """Build the run on this process, train it with a progress bar, and report (rank 0); the exit status."""
    bar = ProgressBar()
    trainer_ref: list = [None]
    warnings: list[str] = []
    callbacks = [progress_callback(trainer_ref, bar, warnings)] if dist_info.is_main else []
    started = time.time()
    if dist_info.is_main:
        print(f"loading {', '.join(prepared.corpora)} ...", file=sys.stderr)
    built = prepared.build(callbacks, dist_info.world_size)
    trainer = built.trainer
    check_enough_text(trainer)
    trainer_ref[0] = trainer
    if dist_info.is_main:
        _say_start(args, trainer, prepared, dist_info.world_size)
    with stop_on_signals(trainer, dist_info.world_size) as caught:
        trainer.run()
    bar.close()
    if caught and trainer.state == "stopped":
        name = signal.Signals(caught[0]).name
        print(f"stopped by {name} at step {trainer.step}, its checkpoint written to {prepared.out}; go on exactly "
              f"with: python -m bert_core train --resume {shlex.quote(str(prepared.out))}", file=sys.stderr)
        return 128 + caught[0]
    if trainer.state == "failed":
        advice = ""
        if trainer.diverged and trainer.last_checkpoint_step is not None:
            lower = trainer.config.at(trainer.step).learning_rate / 10   # the rate in effect when it diverged
            advice = f" For example: python -m bert_core train --resume {shlex.quote(str(prepared.out))} --lr {lower:g}"
        print(f"error: {one_line(trainer.error)}{advice}", file=sys.stderr)
        return 1
    if dist_info.is_main:
        report(trainer, built.heldout, prepared.out, started, warnings, args.json)
    return 0


@contextlib.contextmanager
def stop_on_signals(trainer, world_size: int = 1, keeping: str = "writing a checkpoint") -> Iterator[list[int]]:
    """While the block runs, Ctrl-C (SIGINT) or SIGTERM (`kill`, a scheduler's end of a job) stops the run at the end
    of its step with a checkpoint that `--resume` goes on from exactly, instead of losing everything since the last
    periodic one; a second signal acts as it did before (Ctrl-C interrupts at once). The list it yields receives
    the signal caught. A run of several processes (torchrun) keeps the default: each would stop at its own step.
    `keeping`: what the stop keeps, as the line printed at the signal says it (`finetune` keeps its models)."""
    caught: list[int] = []
    if world_size > 1 or threading.current_thread() is not threading.main_thread():
        yield caught
        return
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def stop(signum, frame):
        for s, handler in before.items():
            signal.signal(s, handler)
        caught.append(signum)
        print(f"\n{signal.Signals(signum).name}: stopping after this step and {keeping} (again to end at once)",
              file=sys.stderr)
        trainer.stop()

    for s in before:
        signal.signal(s, stop)
    try:
        yield caught
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _acc_name(config) -> str:
    return "next-token acc" if config.objective == "clm" else "mlm acc"


def progress_callback(trainer_ref: list, bar: ProgressBar, warnings: list):
    """A Trainer callback drawing each step and evaluation on `bar` (the trainer: `trainer_ref[0]` once built); it
    says once, in `warnings` too, when the run stays on the unigram plateau."""

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
    heldout.update(perplexity=final.get("perplexity"), nsp_accuracy=final.get("nsp_acc"), step=final.get("step"))
    return {"heldout": heldout, "baselines": _baselines(trainer), "per_corpus": _per_corpus(trainer, heldout_by_corpus),
            "heldout_split": trainer.metadata.get("heldout"), "steps": trainer.step,
            "tokens_seen": trainer.tokens_seen, "growth": trainer.growth, "training_time_s": trainer.elapsed_s,
            "wall_time_s": wall_s, "world_size": trainer.dist.world_size, "device": str(trainer.device),
            "machine": _machine(), "train_config": cfg.to_dict(), "commands": trainer.metadata.get("commands", [])}


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


def run(args) -> int:
    if args.out is None and args.resume is None:
        raise BertCoreError("give --out DIR (where to write the checkpoint) or --resume DIR")
    prepared = _prepare_resume(args) if args.resume is not None else _prepare_new(args)
    dist_info = init_distributed(prepared.config.device)
    try:
        return _train(args, prepared, dist_info)
    finally:
        shutdown_distributed()
