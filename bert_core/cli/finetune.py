"""`python -m bert_core finetune`: the command line of bert_core.training.finetune."""

from __future__ import annotations

import dataclasses
import json
import shlex
import signal
import sys
from pathlib import Path

from bert_core.cli.train import stop_on_signals
from bert_core.cli.train_options import add_options
from bert_core.data.task_downloads import TASKS
from bert_core.errors import BertCoreError
from bert_core.model.bert import LAST_TOKEN_POOLING, MEAN_POOLING
from bert_core.model.config import BertConfig
from bert_core.model.files import check_output_folder, require_checkpoint_folder
from bert_core.paths import DEFAULT_CHECKPOINT
from bert_core.training.finetune import (
    checkpoint_pretraining_rate,
    finetune_learning_rate,
    load_task,
    race_task,
    save_classifier,
)
from bert_core.training.baseline_runs import BASELINE_NAME
from bert_core.training.finetune_results import FinetuneEval, FinetuneResult, FinetuneStage
from bert_core.training.finetune_race import build_race
from bert_core.training.finetune_settings import (
    CONFIG_SETTINGS,
    FINETUNE_SETTINGS,
    FINETUNE_STEPS,
    SELECTION_FRACTION,
    TOY_QA_STEPS,
    FinetuneConfig,
    kind_config,
)
from bert_core.training.finetune_spec import FinetuneSpec, RaceData
from bert_core.training.distributed import resolve_device


def add_parser(subparsers):
    p = subparsers.add_parser(
        "finetune", help="fine-tune sentence labels, token tags or answer spans, from a checkpoint and/or scratch",
        description="Fine-tune a pretrained checkpoint on one of three kinds of task: sentence labels from a "
                    "labelled CSV (BertForSequenceClassification; or the built-in toy topics), token tags from a "
                    "CoNLL file (BertForTokenClassification) or answer spans from a SQuAD v1.1 JSON file "
                    "(BertForQuestionAnswering; or the built-in toy-qa task). Optionally against the same "
                    "architecture from scratch, other checkpoints (--compare, e.g. a GPT-style one) and the kind's "
                    "baselines (--baseline), with the same data, budget and seed.")
    add_options(p, FINETUNE_SETTINGS, {})
    return p


def data_kind(args) -> str:
    """The kind of task a command line asks for, before any data is read: "tags", "spans" or "labels"."""
    if args.conll is not None or (args.task in TASKS and TASKS[args.task].kind == "tags"):
        return "tags"
    if args.squad is not None or args.task == "toy-qa":
        return "spans"
    return "labels"


def config_from_args(args) -> FinetuneConfig:
    """The kind's defaults with the flags given. Without --lr the rate comes from the model's size
    (_checked_models); without a budget, steps decide, not seconds: the same run on every machine."""
    given = {s.name: getattr(args, s.name) for s in CONFIG_SETTINGS if getattr(args, s.name) is not None}
    if "max_steps" not in given and "time_budget_s" not in given:
        given["max_steps"] = TOY_QA_STEPS if args.task == "toy-qa" else FINETUNE_STEPS
    return kind_config(data_kind(args)).replace(**{"time_budget_s": None, **given})


def format_confusion(confusion: list[list[int]], label_names: list[str]) -> str:
    """Rows = true label, columns = predicted."""
    names = [n[:12] for n in label_names]
    width = max(6, *(len(n) for n in names), *(len(str(v)) for row in confusion for v in row)) + 1
    lines = [" " * width + "".join(n.rjust(width) for n in names)]
    for name, row in zip(names, confusion):
        lines.append(name.ljust(width) + "".join(str(v).rjust(width) for v in row))
    return "\n".join(lines)


def format_results(results: list[FinetuneResult]) -> str:
    """The results table, then each run's confusion matrix (sentence labels) or per-type F1 (span tags)."""
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
    # Everything is checked (options, output folder, model size, checkpoint, data) before anything is written.
    if args.tag_column not in (None, "chunk") and data_kind(args) != "tags":
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
    data = load_task(spec.data)
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
    if args.learning_rate is None:
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
                    text_columns=tuple(args.text_columns) if args.text_columns else None,
                    label_column=args.label_column, pair=args.pair, drop_empty=args.drop_empty,
                    tag_column=args.tag_column or "chunk", drills=not args.no_drills, seed=config.seed)
    kind = data_kind(args)
    return FinetuneSpec(kind=kind, data=data, checkpoint=_str(folder), settings=dataclasses.asdict(config),
                        scratch_preset=args.scratch_preset,
                        compare=tuple((name, str(f)) for name, f in compares.items()),
                        scratch=args.scratch, baseline=bool(args.baseline or kind == "tags"),
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
        elif r.model.pooling in (LAST_TOKEN_POOLING, MEAN_POOLING):   # a sentence classifier's reading
            reads = "the last token, GPT-style" if r.model.pooling == LAST_TOKEN_POOLING else "the mean of the tokens"
            print(f"saved the classifier to {folder} (it reads {reads}: it loads as trained in bert_core only; "
                  "transformers' BertForSequenceClassification would read [CLS])")
        else:
            print(f"saved the classifier to {folder} (loads in transformers.BertForSequenceClassification"
                  ".from_pretrained)")
