"""Why the toy QA stories are hard for the shipped models: two measurements behind docs/benchmarks.md ("Token tags
and answer spans").

    python benchmarks/toy_qa_study.py offsets --checkpoint checkpoints/bert-tiny-english
    python benchmarks/toy_qa_study.py learn --checkpoint checkpoints/bert-tiny-english --stories 6000 --steps 2000
    python benchmarks/toy_qa_study.py learn --stories 600 --train-size 3000 --steps 2000 --on-seen
    python benchmarks/toy_qa_study.py simple --out simple.json      # then: finetune --squad simple.json ...
    python benchmarks/toy_qa_study.py simple --all-questions --out all.json
    python benchmarks/toy_qa_study.py curriculum --stages where:400 who:300 what:300 finder:300 toy:900

`offsets`: each head's mean attention to the tokens 5 before to 5 after (its share at each offset) over toy stories,
which says how far from a word each layer can read. `learn`: fine-tunes the checkpoint's BertForQuestionAnswering
on toy_qa_task(0, STORIES) split by passage (500 validation questions) with the CLI's settings for answer spans
(lr by its rule unless --lr, batch 32, max length 256), printing exact match and F1 at evenly spaced steps: on the
held-out stories, or with --on-seen on 500 of the training questions (whether it learns the rule or the stories).
`simple`: the binding alone, as a SQuAD v1.1 file (bert_core.data.toy_qa_drills.drill_squad, the toy QA task's
drills): 2-3 of 16 names (10 of them one WordPiece, anna and five more two), one sentence each ("tom went to the
barn."), and only "Who went to the barn?" (3,000 passages, seeded); `--find` adds a find to each sentence ("tom
went to the barn and found a red stone."), `--all-questions` asks the toy stories' four questions of each name,
`--questions where` (or what, finder, who) only the ones named.
`curriculum`: one model (the shipped mini by default) fine-tuned through stages, each KIND[+KIND]:SECONDS on its
own clock schedule at --lr (2.5e-4): a `simple` file asking one kind of question (who, where, what, finder), all
four (all), or the toy stories (toy); each stage is scored on its own held-out passages (500 questions a part),
and at its end per kind of question. One thread; the task, split, weights and batches are seeded. (The recipe it
found is now the toy QA task's own: `finetune --task toy-qa` trains its drills first, training.finetune.Finetuner's
stages.)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.data.answer_spans_data import split_by_passage, toy_qa_task  # noqa: E402
from bert_core.data.toy_qa_drills import DRILL_KINDS, QUESTION_KINDS, drill_squad, question_kind  # noqa: E402
from bert_core.model.bert import BertForQuestionAnswering  # noqa: E402
from bert_core.model.hf import load_pretrained  # noqa: E402
from bert_core.training.answer_spans import AnswerSpans  # noqa: E402
from bert_core.training.finetune import checkpoint_pretraining_rate, finetune, finetune_learning_rate
from bert_core.training.finetune_settings import kind_config
from bert_core.training.finetune_results import FinetuneEval  # noqa: E402
from bert_core.training.finetune_tasks import seeded, tokenizer_of  # noqa: E402

OFFSETS = range(-5, 6)


@torch.no_grad()
def attention_by_offset(folder: Path, stories: int = 60) -> torch.Tensor:
    """(layers, heads, 11): each head's mean attention share at offsets -5..5 over the toy stories' tokens."""
    model = load_pretrained(folder)
    tokenizer = tokenizer_of(folder, model.config)
    contexts = sorted({e.context for e in toy_qa_task(0, stories).examples})
    shares = torch.zeros(model.config.num_hidden_layers, model.config.num_attention_heads, len(OFFSETS))
    positions = 0
    for context in contexts:
        ids = torch.tensor([tokenizer.tokenizer.encode(context).ids])
        attentions = model.bert(ids, torch.ones_like(ids), output_attentions=True)[-1]  # (sequence, pooled, attentions)
        length = ids.shape[1]
        for layer, a in enumerate(attentions):
            for j, off in enumerate(OFFSETS):
                rows = torch.arange(max(0, -off), min(length, length - off))
                shares[layer, :, j] += a[0][:, rows, rows + off].sum(-1)
        positions += length
    return shares / positions


def progress_printer():
    """A fine-tuning callback that prints each evaluation's step, seconds since it was made, exact match and F1."""
    began = time.perf_counter()

    def report(event):
        if isinstance(event, FinetuneEval):
            print(f"step {event.step:>6}  {time.perf_counter() - began:6.0f} s  exact match "
                  f"{100 * event.accuracy:5.1f}%  F1 {100 * event.macro_f1:5.1f}%", flush=True)
    return report


def learn(args) -> None:
    data = toy_qa_task(0, args.stories, drills=False)
    train, val = split_by_passage(data, args.train_size, 500, seed=0)
    if args.on_seen:
        val = train.subset(range(500), " (seen)")
    with seeded(0):
        model = load_pretrained(args.checkpoint, model_class=BertForQuestionAnswering)
    tokenizer = tokenizer_of(args.checkpoint, model.config)
    rate = args.lr or finetune_learning_rate(model.config, checkpoint_pretraining_rate(args.checkpoint))
    config = kind_config("spans").replace(learning_rate=rate, max_steps=args.steps, time_budget_s=None,
                                          eval_points=args.evals)
    print(f"{len(train):,} training questions, {len(val):,} scored ({val.source}); lr {rate:g}", flush=True)
    finetune(model, tokenizer, config=config, task=AnswerSpans(train, val), callbacks=[progress_printer()])


STAGE_DATA = {**{kind: (kind,) for kind in DRILL_KINDS}, "all": QUESTION_KINDS}  # curriculum's simple stages


def curriculum(args) -> None:
    """The `curriculum` command (module docstring)."""
    import collections

    from bert_core.data.answer_spans_data import QAData, exact_match_score, parse_squad

    with seeded(args.seed):
        model = load_pretrained(args.checkpoint, model_class=BertForQuestionAnswering)
    tokenizer = tokenizer_of(args.checkpoint, model.config)
    report = progress_printer()
    for stage in args.stages:
        kinds, _, seconds = stage.partition(":")
        train, val = [], []
        for kind in kinds.split("+"):
            if kind == "toy":
                data = toy_qa_task(args.seed, drills=False)
            elif kind in STAGE_DATA:
                data = parse_squad(drill_squad(questions=STAGE_DATA[kind]), kind)
            else:
                raise SystemExit(f"error: a stage is KIND[+KIND]:SECONDS with KIND one of toy, "
                                 f"{', '.join(STAGE_DATA)}; not {stage!r}")
            t, v = split_by_passage(data, None, 500, seed=args.seed)
            train += t.examples
            val += v.examples
        task = AnswerSpans(QAData(examples=train, source=kinds), QAData(examples=val, source=kinds))
        print(f"== {kinds}: {len(train):,} training questions, {len(val):,} held out, {seconds} s", flush=True)
        config = kind_config("spans").replace(learning_rate=args.lr, max_steps=None, time_budget_s=float(seconds),
                                              eval_points=args.evals, seed=args.seed)
        finetune(model, tokenizer, config=config, task=task, callbacks=[report])
        result = task.evaluate(model, next(model.parameters()).device, 64, num_misclassified=len(val))
        asked = collections.Counter(question_kind(ex.question) for ex in val)
        # Misclassified compares raw text; exact match (what the stage's figure is) compares normalised text.
        missed = collections.Counter(question_kind(m.text) for m in result.misclassified
                                     if not exact_match_score(m.predicted_label, m.true_label))
        print("   exact match per kind: " + ", ".join(f"{k} {100 * (1 - missed[k] / n):.1f}% of {n}"
                                                      for k, n in sorted(asked.items())), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    offsets = sub.add_parser("offsets")
    offsets.add_argument("--checkpoint", type=Path, default=Path("checkpoints/bert-tiny-english"))
    run = sub.add_parser("learn")
    run.add_argument("--checkpoint", type=Path, default=Path("checkpoints/bert-tiny-english"))
    run.add_argument("--stories", type=int, default=600)
    run.add_argument("--train-size", type=int, default=None)
    run.add_argument("--steps", type=int, default=2000)
    run.add_argument("--evals", type=int, default=4)
    run.add_argument("--lr", type=float, default=None)
    run.add_argument("--on-seen", action="store_true")
    simple = sub.add_parser("simple")
    simple.add_argument("--out", type=Path, required=True)
    simple.add_argument("--passages", type=int, default=3000)
    simple.add_argument("--seed", type=int, default=0, help="the passages' seed (the drills of toy_qa_task(S): S)")
    simple.add_argument("--find", action="store_true", help="each sentence goes on to a find (\"... and found a "
                        "red stone.\"); names, places and questions as without it")
    simple.add_argument("--all-questions", action="store_true", help="with the find, four questions a name: who "
                        "went to the place, where they went, what they found, who found it (--questions with all four)")
    simple.add_argument("--questions", nargs="+", choices=DRILL_KINDS, default=["who"],
                        help="which kinds to ask (default: who): the stories' four and the drills' sentence and "
                             "happened; what and finder bring the find")
    staged = sub.add_parser("curriculum")
    staged.add_argument("--checkpoint", type=Path, default=Path("checkpoints/bert-mini-english"))
    staged.add_argument("--stages", nargs="+", required=True, help="KIND[+KIND]:SECONDS, in order")
    staged.add_argument("--lr", type=float, default=2.5e-4)
    staged.add_argument("--seed", type=int, default=0)
    staged.add_argument("--evals", type=int, default=8, help="evaluations a stage")
    args = parser.parse_args()
    if args.command == "simple":
        import json

        questions = QUESTION_KINDS if args.all_questions else tuple(args.questions)
        args.out.write_text(json.dumps(drill_squad(args.passages, args.seed, find=args.find, questions=questions)))
        return
    torch.set_num_threads(1)
    if args.command == "offsets":
        shares = attention_by_offset(args.checkpoint)
        print("head   " + " ".join(f"{o:>4}" for o in OFFSETS))
        for layer, heads in enumerate(shares):
            for head, row in enumerate(heads):
                print(f"L{layer} H{head}  " + " ".join(f"{100 * v:4.0f}" for v in row))
    elif args.command == "curriculum":
        curriculum(args)
    else:
        learn(args)


if __name__ == "__main__":
    main()
