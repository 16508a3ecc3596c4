"""`python -m bert_core finetune`: the command line of bert_core.training.finetune (its options, the race it runs,
the table it prints)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import signal
import sys
from pathlib import Path

from bert_core.cli.arguments import MAX_BATCH, MAX_SEQ_LEN, POSITIVE, RATE, SEED, float_arg, int_arg, path_arg
from bert_core.cli.train import stop_on_signals
from bert_core.data.task_downloads import TASKS
from bert_core.errors import BertCoreError
from bert_core.model.bert import LAST_TOKEN_POOLING, MEAN_POOLING, POOLING_KINDS
from bert_core.model.checkpoint import check_output_folder
from bert_core.model.config import PRESETS, BertConfig
from bert_core.model.hf import require_checkpoint_folder
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.training.finetune import (
    BASELINE_NAME,
    BUILT_IN_TASKS,
    FINETUNE_STEPS,
    KIND_DEFAULTS,
    SELECTION_FRACTION,
    TOY_QA_STEPS,
    FinetuneConfig,
    FinetuneEval,
    FinetuneResult,
    FinetuneStage,
    checkpoint_pretraining_rate,
    finetune_learning_rate,
    kind_config,
    save_classifier,
)
from bert_core.serve.finetune_runs import FinetuneSpec, RaceData
from bert_core.training.finetune_race import build_race, load_race_data, race_task
from bert_core.training.trainer import resolve_device


def add_parser(subparsers):
    """Register `python -m bert_core finetune` and return its parser."""
    p = subparsers.add_parser(
        "finetune", help="fine-tune sentence labels, token tags or answer spans, from a checkpoint and/or scratch",
        description="Fine-tune a pretrained checkpoint on one of three kinds of task: sentence labels from a "
                    "labelled CSV (BertForSequenceClassification; or the built-in toy topics), token tags from a "
                    "CoNLL file (BertForTokenClassification) or answer spans from a SQuAD v1.1 JSON file "
                    "(BertForQuestionAnswering; or the built-in toy-qa task). Optionally against the same "
                    "architecture from scratch, other checkpoints (--compare, e.g. a GPT-style one) and the kind's "
                    "baselines (--baseline), with the same data, budget and seed.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--checkpoint", type=path_arg, metavar="DIR",
                     help="pretrained checkpoint folder (default: the shipped one)")
    src.add_argument("--scratch-preset", metavar="NAME", choices=list(PRESETS),
                     help="no pretraining: a fresh model of this preset (nano tiny mini small medium base) with a "
                          "tokenizer trained on the training texts")
    p.add_argument("--csv", type=path_arg, metavar="FILE",
                   help="labelled CSV: headed, AG News (class,title,description) or label,text")
    p.add_argument("--conll", type=path_arg, metavar="FILE",
                   help="token tags: a CoNLL file (one `word ... tag` a line, a blank line between sentences), e.g. "
                        "CoNLL-2000 chunking; scored by chunk F1 beside its majority-tag baselines")
    p.add_argument("--tag-column", type=_tag_column, default="chunk", metavar="COLUMN",
                   help="with --conll or --task conll2000: 'chunk' (the last column: chunk or entity tags, the "
                        "default), 'pos' (the second column: part-of-speech tags) or a column number from 2")
    p.add_argument("--squad", type=path_arg, metavar="FILE",
                   help="answer spans: a SQuAD v1.1 JSON file; passages longer than the model's input are read in "
                        "overlapping windows")
    p.add_argument("--task", choices=[*BUILT_IN_TASKS, *TASKS],
                   help="built-in offline task: " + "; ".join(f"{k}: {v}" for k, v in BUILT_IN_TASKS.items())
                        + "; or a real one, read from ../shared/data or fetched once from its public home (python -m "
                          "bert_core download NAME): " + "; ".join(f"{k}: {t.label}" for k, t in TASKS.items()))
    p.add_argument("--no-drills", action="store_true",
                   help="with --task toy-qa: train on the stories alone, without the drills before them "
                        "(one kind of question at a time: a name's sentence, where, the sentence by its place, who, "
                        "what, who found); the stories alone stay near 30%% exact match with the shipped models")
    p.add_argument("--text-column", action="append", metavar="NAME",
                   help="text column (give twice to join two, e.g. title and description)")
    p.add_argument("--label-column", metavar="NAME")
    p.add_argument("--pair", action="store_true", help="feed two text columns as a sentence pair, not joined")
    p.add_argument("--drop-empty", action="store_true", help="skip rows with an empty text or label (counted)")
    p.add_argument("--train-size", type=int_arg(1), help="training examples (default: all but the validation set)")
    p.add_argument("--val-size", type=int_arg(1), help="validation examples (default: 10%%)")
    p.add_argument("--seed", type=SEED, default=0, help="split, head initialisation, batches and dropout")
    _add_training_options(p)
    return p


def _add_training_options(p) -> None:
    """The budget, the optimisation and what to write and compare: the second half of `finetune`'s flags."""
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--time-budget", type=POSITIVE, metavar="S",
                        help="training seconds per model, instead of a number of steps (the result then depends on the "
                             "machine's speed and load)")
    budget.add_argument("--steps", type=int_arg(1, 2**40), metavar="N",
                        help=f"optimizer steps per model (default {FINETUNE_STEPS:,}; toy-qa: {TOY_QA_STEPS:,}): the "
                             "same result on a quiet machine as on a busy one")
    p.add_argument("--lr", type=POSITIVE,
                   help="peak learning rate (default, within 2e-5 to 1e-3: a checkpoint made here, the rate it was "
                        "pretrained at x 128 / hidden (1e-3 for the shipped tiny model, 5e-4 for a mini pretrained "
                        "at 1e-3); any other, 1e-3 x (128 / hidden)^2 (2.8e-5 for BERT-base)")
    p.add_argument("--batch-size", type=int_arg(1, MAX_BATCH), default=FinetuneConfig.batch_size)
    p.add_argument("--max-length", type=int_arg(8, MAX_SEQ_LEN),
                   help="tokens per example (default: the kind's: " +
                        ", ".join(f"{k} {kind_config(k).max_length}" for k in KIND_DEFAULTS) +
                        "; or the model's positions if fewer)")
    p.add_argument("--warmup-ratio", type=RATE, default=FinetuneConfig.warmup_ratio)
    p.add_argument("--dropout", type=RATE, default=FinetuneConfig.dropout,
                   help="hidden and attention dropout while fine-tuning (default: the checkpoint's own; BERT "
                        "fine-tuned with 0.1, the shipped checkpoint was pretrained with 0)")
    p.add_argument("--layer-decay", type=float_arg(0, 1, low_open=True), default=FinetuneConfig.layer_decay,
                   help="layer-wise learning-rate decay: each layer learns at this times the rate of the one above "
                        "it, the classifier at the full rate (default 1: one rate for all, as BERT fine-tuned)")
    p.add_argument("--keep-best", action="store_true",
                   help="hold back 10%% of the training data and keep each model's weights from the validation pass "
                        "that scores best on it (the validation set stays unseen); pairs with longer runs")
    p.add_argument("--pooling", choices=POOLING_KINDS,
                   help="sentence labels: what the classifier reads: cls (the pooled [CLS], BERT's; the default "
                        "for BERT), last (the last token; the default for a GPT-style model) or mean (the mean of "
                        "the tokens); a folder saved with last or mean loads as trained only here")
    p.add_argument("--eval-points", type=int_arg(1, 10**4), default=FinetuneConfig.eval_points,
                   help="validation passes over the run (the accuracy curve)")
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", choices=("bf16", "fp32"), default=FinetuneConfig.precision,
                   help="the training steps' precision: bf16 autocast (default) on a CUDA GPU and on a CPU with "
                        "bfloat16 instructions, else fp32; validation always runs in fp32")
    p.add_argument("--out", type=path_arg, metavar="DIR",
                   help="write the classifier here (a Hugging Face folder: a new or empty folder, or an earlier "
                        "classifier with --overwrite); with --compare-scratch the from-scratch one goes to "
                        "DIR/from-scratch. Ctrl-C or kill stops the model in training after its step and saves "
                        "what has run, a stopped model as the model of its step")
    p.add_argument("--overwrite", action="store_true", help="replace the classifier already in --out")
    p.add_argument("--compare-scratch", action="store_true",
                   help="also train the same architecture from scratch with the same budget")
    p.add_argument("--compare", action="append", type=path_arg, metavar="DIR",
                   help="also fine-tune from this checkpoint with the same data, budget and seed (repeat for several), "
                        "e.g. a GPT-style one beside a BERT: the race; a causal model's classifier reads the last "
                        "token. With --out its classifier goes to DIR/from-NAME")
    p.add_argument("--baseline", action="store_true",
                   help="sentence labels: also fit TF-IDF + logistic regression (scikit-learn) on the same split, the "
                        "bag-of-words line to beat (token tags always get their majority-tag baselines)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")


def _tag_column(text: str) -> str | int:
    """An argparse type for --tag-column: chunk, pos or a column number from 2."""
    if text in ("chunk", "pos"):
        return text
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number < 2:
        raise argparse.ArgumentTypeError(f"use chunk, pos or a column number from 2, not {text!r}")
    return number


def data_kind(args) -> str:
    """The kind of task a command line asks for, before any data is read: "tags", "spans" or "labels"."""
    if args.conll is not None or (args.task in TASKS and TASKS[args.task].kind == "tags"):
        return "tags"
    if args.squad is not None or args.task == "toy-qa":
        return "spans"
    return "labels"


def config_from_args(args) -> FinetuneConfig:
    """The FinetuneConfig a `finetune` command line asks for: the kind's defaults (KIND_DEFAULTS), then the flags."""
    defaults = kind_config(data_kind(args))
    steps = args.steps
    if steps is None and args.time_budget is None:  # steps decide, not seconds: the same run on every machine
        steps = TOY_QA_STEPS if args.task == "toy-qa" else FINETUNE_STEPS
    budget = args.time_budget
    # Without --lr the rate is set from the model's size once its config is read (_checked_models).
    return defaults.replace(batch_size=args.batch_size, learning_rate=args.lr or defaults.learning_rate,
                            warmup_ratio=args.warmup_ratio, max_steps=steps, time_budget_s=budget,
                            max_length=args.max_length or defaults.max_length, dropout=args.dropout,
                            layer_decay=args.layer_decay, keep_best=args.keep_best, eval_points=args.eval_points,
                            seed=args.seed, device=args.device, precision=args.precision)


def format_confusion(confusion: list[list[int]], label_names: list[str]) -> str:
    """A text confusion matrix (rows = true label, columns = predicted)."""
    names = [n[:12] for n in label_names]
    width = max(6, *(len(n) for n in names), *(len(str(v)) for row in confusion for v in row)) + 1
    lines = [" " * width + "".join(n.rjust(width) for n in names)]
    for name, row in zip(names, confusion):
        lines.append(name.ljust(width) + "".join(str(v).rjust(width) for v in row))
    return "\n".join(lines)


def format_results(results: list[FinetuneResult]) -> str:
    """The results table (each kind's two figures under their own names), then each run's confusion matrix
    (sentence labels) or per-type F1 (span tags), as the CLI prints them."""
    w = max(14, *(len(r.name) + 2 for r in results))
    first, second = results[0].metric_names
    cw = max(10, len(first) + 2, len(second) + 2)
    lines = [f"{'run':<{w}}{'steps':>7}{'seconds':>9}{first:>{cw}}{second:>{cw}}"]
    for r in results:
        lines.append(f"{r.name:<{w}}{r.steps:>7}{r.train_seconds:>9.1f}{100 * r.accuracy:>{cw - 1}.2f}%"
                     f"{100 * r.macro_f1:>{cw - 1}.2f}%")
    for r in results:
        if r.best_step is not None:
            lines.append(f"{r.name}: kept the weights of step {r.best_step:,} of {r.steps:,}, the best on the "
                         f"held-back {100 * SELECTION_FRACTION:g}% of the training data")
    for r in results:
        if r.kind == "labels" and r.confusion:
            lines += ["", f"confusion matrix ({r.name}; rows = true label, columns = predicted):",
                      format_confusion(r.confusion, r.label_names)]
        elif r.details.get("per_type"):
            per_type = sorted(r.details["per_type"].items(), key=lambda kv: -kv[1]["support"])
            lines += ["", f"F1 per chunk type ({r.name}; most frequent first): " +
                      ", ".join(f"{t} {100 * v['f1']:.1f}" for t, v in per_type)]
    return "\n".join(lines)


def _progress_printer(name: str, stream, metric_names):
    def callback(event):
        if isinstance(event, FinetuneStage) and event.count > 1:
            before = ("" if event.previous_score is None else
                      f" (the last stage's final training batches: {100 * event.previous_score:.1f}% right)")
            print(f"[{name}] stage {event.index + 1} of {event.count} from step {event.step:,}: {event.name}"
                  + before, file=stream, flush=True)
        if isinstance(event, FinetuneEval):
            print(f"[{name}] step {event.step:>5}  {event.elapsed_s:6.1f}s  validation {metric_names[0]} "
                  f"{100 * event.accuracy:5.1f}%  {metric_names[1]} {100 * event.macro_f1:5.1f}%", file=stream,
                  flush=True)
    return callback


def describe(task) -> str:
    """One line on a task's data: sizes, and its labels, tags or passages."""
    train, val = task.train_data, task.val_data
    if task.kind == "tags":
        scheme = "span tags, scored by chunk F1" if train.scheme == "iob" else "plain tags, scored by accuracy"
        return (f"data: {train.source.removesuffix(' (train)')}, {len(train):,} train / {len(val):,} validation "
                f"sentences ({val.num_tokens:,} validation words), {train.num_tags} tags ({scheme})")
    if task.kind == "spans":
        passages = len({ex.context for ex in val.examples})
        line = (f"data: {train.source.removesuffix(' (train)')}, {len(train):,} train / {len(val):,} validation "
                f"questions (the validation ones on {passages:,} passages never trained on)")
        if task.drills:
            line += ("; first its drills, each until learnt or at most its share of the budget and what those "
                     "before it left: "
                     + ", then ".join(f"{d.kind} ({100 * d.share:g}%: \"{d.example}\")" for d in task.drills)
                     + "; then the stories for the rest, each stage with its own schedule (--no-drills: the "
                       "stories alone)")
        return line
    return (f"data: {train.source.removesuffix(' (train)')}, {len(train)} train / {len(val)} validation, "
            f"{train.num_labels} labels ({', '.join(train.label_names)})")


def _race_names(folders: list[Path]) -> dict[str, Path]:
    """A run name for each --compare checkpoint: its folder's name, numbered when two share one or it is taken."""
    names: dict[str, Path] = {}
    for folder in folders:
        base = folder.resolve().name or "checkpoint"
        name, n = base, 2
        while name in names or name in ("pretrained", "scratch", BASELINE_NAME):
            name, n = f"{base}-{n}", n + 1
        names[name] = folder
    return names


def run(args) -> int:
    """Carry out `python -m bert_core finetune`: load data, fine-tune (and the scratch twin), print, save."""
    # Everything is checked (options, output folder, model size, checkpoint, data) before anything is written.
    if args.tag_column != "chunk" and data_kind(args) != "tags":
        raise BertCoreError("--tag-column picks the tags of a CoNLL file; give --conll FILE (or --task conll2000) "
                            "with it")
    if args.no_drills and args.task != "toy-qa":
        raise BertCoreError("--no-drills leaves out the toy QA task's drills; use it with --task toy-qa")
    config = config_from_args(args)
    compares = _race_names([Path(c) for c in args.compare or ()])
    if args.out is not None:
        check_output_folder(args.out, overwrite=args.overwrite,
                            subfolders=("from-scratch", *(f"from-{name}" for name in compares)))
    folder, config = _checked_models(args, config, compares)
    spec = spec_from_args(args, folder, config, compares)
    data = load_race_data(spec)
    task = race_task(spec, data)
    print(describe(task), file=sys.stderr)
    for note in data.notes:
        print(f"note: {note}", file=sys.stderr)
    race = build_race(spec, task=task)
    # Ctrl-C or SIGTERM stops the model in training at the end of its step; what has run is printed and saved.
    with stop_on_signals(race, keeping="keeping the models trained so far") as caught:
        results = _results(race, task)
    missing = [t.name for t in race.tuners if t.result is None]
    if missing and not caught:
        raise BertCoreError(f"the run {missing[0]} produced no result")
    kept = [r for r in results if r.tokenizer is not None and (r.state == "finished" or r.steps > 0)]
    saved = []
    if args.out:
        for i, r in enumerate(kept):  # the baseline is not a checkpoint; a model stopped at step 0 learnt nothing
            folder = Path(args.out) if i == 0 else Path(args.out) / f"from-{r.name}"
            saved.append(str(save_classifier(r, folder)))
    if args.json:
        print(json.dumps({"data": {"source": data.source, "kind": task.kind, "train": len(task.train_data),
                                   "validation": len(task.val_data), "label_names": task.label_names,
                                   "notes": data.notes},
                          "config": dataclasses.asdict(config), "results": [r.to_dict() for r in results],
                          "saved": saved}, indent=1))
    else:
        if results:
            print(format_results(results))
        _print_saved(saved, kept)
    if caught:
        print(stopped_words(caught[0], race, dict(zip((r.name for r in kept), saved)), args.out), file=sys.stderr)
        return 128 + caught[0]
    return 0


def stopped_words(signum: int, race, saved: dict[str, str], out) -> str:
    """What a `finetune` stopped by a signal says: where it stopped, what it kept and where, what never ran, and that
    fine-tuning does not resume (a saved model is the model of its step, not a checkpoint to go on from)."""
    stopped = next((t for t in race.tuners if t.state == "stopped" and t.result is not None), None)
    where = f" with {stopped.name} at step {stopped.step:,}" if stopped is not None else ""
    lines = [f"stopped by {signal.Signals(signum).name}{where}."]
    for t in race.tuners:
        r = t.result
        if r is None:
            lines.append(f"  {t.name}: not run")
        elif r.tokenizer is None:
            lines.append(f"  {t.name}: {r.state}, its figures above")
        elif t.name in saved:
            lines.append(f"  {t.name}: {r.state} at step {r.steps:,}, its model of that step saved to {saved[t.name]}")
        else:
            lines.append(f"  {t.name}: {r.state} at step {r.steps:,}, " + ("nothing to keep (no step made)" if
                         r.steps == 0 else "not saved (give --out DIR to keep it)"))
    if stopped is not None:
        lines.append(f"Fine-tuning does not resume: what was saved of {stopped.name} is its model at step "
                     f"{stopped.step:,}, with the figures of that step, not a checkpoint to go on from. For whole "
                     "budgets, run the command again" + (f" with --overwrite (it replaces {shlex.quote(str(out))})"
                                                          if saved else "") + ".")
    return "\n".join(lines)


def _checked_models(args, config: FinetuneConfig, compares: dict[str, Path]) -> tuple[Path | None, FinetuneConfig]:
    """The checkpoint folder (None with --scratch-preset) and the config, its max length cut to the shortest model's
    positions when --max-length is not given; every racer is checked (folder, memory, positions), no data read."""
    folder = None
    if args.scratch_preset:
        # The vocabulary trained below is at most 8000 tokens, so this bounds the model before any data is read.
        bound = BertConfig.preset(args.scratch_preset, vocab_size=8000)
    else:
        folder = Path(args.checkpoint) if args.checkpoint else DEFAULT_CHECKPOINT
        if not args.checkpoint and not folder.is_dir():
            raise BertCoreError(f"the shipped checkpoint {folder} is missing; give --checkpoint DIR or "
                                "--scratch-preset NAME")
        bound = BertConfig.load(require_checkpoint_folder(folder))
    if args.lr is None:
        config = config.replace(learning_rate=finetune_learning_rate(
            bound, checkpoint_pretraining_rate(folder) if folder is not None else None, kind=data_kind(args)))
    # Every racer is checked before any data is read; the shortest model's positions bound them all.
    for bound in [bound, *(BertConfig.load(require_checkpoint_folder(c)) for c in compares.values())]:
        if resolve_device(config.device).type == "cpu":
            bound.check_memory(training=True, batch_size=config.batch_size, seq_len=config.max_length)
        if config.max_length > bound.max_position_embeddings:
            if args.max_length is not None:
                raise BertCoreError(f"--max-length {config.max_length} is longer than the model's "
                                    f"{bound.max_position_embeddings} positions; use at most "
                                    f"{bound.max_position_embeddings}")
            config = config.replace(max_length=bound.max_position_embeddings)
    return folder, config


def spec_from_args(args, folder: Path | None, config: FinetuneConfig, compares: dict[str, Path]) -> FinetuneSpec:
    """The race a command line asks for, as the plain-data spec the Fine-tune page's races are made of: the same
    builder (finetune_race.build_race) then makes both. Token tags always get their baselines (they take
    seconds); sentence labels with --baseline."""
    data = RaceData(task=args.task, csv=_str(args.csv), conll=_str(args.conll), squad=_str(args.squad),
                    text_columns=tuple(args.text_column) if args.text_column else None,
                    label_column=args.label_column, pair=args.pair, drop_empty=args.drop_empty,
                    tag_column=args.tag_column, drills=not args.no_drills, seed=args.seed)
    kind = data_kind(args)
    return FinetuneSpec(kind=kind, data=data, checkpoint=_str(folder), settings=dataclasses.asdict(config),
                        scratch_preset=args.scratch_preset,
                        compare=tuple((name, str(f)) for name, f in compares.items()),
                        scratch=bool(args.compare_scratch), baseline=bool(args.baseline or kind == "tags"),
                        train_size=args.train_size, val_size=args.val_size, pooling=args.pooling)


def _str(path) -> str | None:
    return None if path is None else str(path)


def _results(race, task) -> list[FinetuneResult]:
    """Run the race (the baseline lines first, then each model in turn, its progress on stderr) and return the
    result of each run that ran (a stopped race's later runs have none); a failure raises BertCoreError."""
    for tuner in race.tuners:
        tuner.callbacks.append(_progress_printer(tuner.name, sys.stderr, task.metric_names))
    race.run()
    if race.error is not None:
        raise BertCoreError(race.error)
    return [t.result for t in race.tuners if t.result is not None]


def _print_saved(saved: list[str], results: list[FinetuneResult]) -> None:
    """Where each fine-tuned model went, and whether transformers reads it as trained."""
    for folder, r in zip(saved, results):
        if r.kind != "labels":
            what = "tagger" if r.kind == "tags" else "question-answering model"
            print(f"saved the {what} to {folder} (loads in transformers.{type(r.model).__name__}.from_pretrained)")
        elif getattr(r.model, "pooling", None) in (LAST_TOKEN_POOLING, MEAN_POOLING):
            reads = "the last token, GPT-style" if r.model.pooling == LAST_TOKEN_POOLING else "the mean of the tokens"
            print(f"saved the classifier to {folder} (it reads {reads}: it loads as trained in bert_core only; "
                  "transformers' BertForSequenceClassification would read [CLS])")
        else:
            print(f"saved the classifier to {folder} (loads in transformers.BertForSequenceClassification"
                  ".from_pretrained)")
