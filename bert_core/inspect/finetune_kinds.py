"""What each kind of fine-tuning (finetune_tasks: a label per sentence, a tag per word, an answer span) answers the
Fine-tune page: its data choices, defaults, expectations, result figures and "try your own sentence" inputs and
outputs. The page looks a kind up (KIND_PAGES) and draws the `Block`s and `Field`s it returns, never asking which."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_core.data.task_downloads import TASKS
from bert_core.inspect import finetune_figures
from bert_core.inspect.lesson import LESSON_RACE_DATA_SETTINGS
from bert_core.inspect.safe_text import markdown
from bert_core.training.answer_spans import answer_question
from bert_core.training.finetune import result_probabilities
from bert_core.training.finetune_settings import TOY_QA_STEPS
from bert_core.training.token_tagging import tag_words

# The page's copy and measured figures, as data (finetune_page.json says where each figure was measured).
PAGE_COPY = json.loads(Path(__file__).with_name("finetune_page.json").read_text(encoding="utf-8"))
# What to expect of a race before it runs: ranges measured on the page's defaults with each shipped model active
# (benchmarks/finetune_page_defaults.py; every seed in docs/benchmarks.md; tests/test_finetune_expectations.py).
EXPECT = PAGE_COPY["expectations"]
PAGE_FIGURES: dict[str, dict[str, dict[str, tuple[float, float]]]] = {
    model: {choice: {name: tuple(span) for name, span in got.items()} for choice, got in tasks.items()}
    for model, tasks in EXPECT["page_figures"].items()}
NAMES: dict[str, list] = EXPECT["names"]
KIND_OF: dict[str, str] = EXPECT["kind_of"]
# Typed text is tagged or answered in the server's own process, by every fine-tuned model: bounded, so that one
# visitor's pasted book does not hold a shared server (a passage this long is about 10 windows of 256 tokens).
MAX_TYPED_CHARS, MAX_PASSAGE_CHARS = 1_000, 5_000
# The real tasks (kind, file in the shared data folder, label), the uploads' names in a run list, the splits'
# (training, validation) sizes and the toy model's measured polarity race: finetune_page.json says each.
SHARED_FILES: dict[str, tuple[str, str, str]] = {k: tuple(v) for k, v in PAGE_COPY["shared_files"].items()}
UPLOADED: dict[str, str] = PAGE_COPY["uploaded"]
SIZES: dict[str, tuple[int, int]] = {k: tuple(v) for k, v in PAGE_COPY["sizes"].items()}
TOY_ON_POLARITY: dict[str, tuple[float, float]] = {k: tuple(v) for k, v in PAGE_COPY["toy_on_polarity"].items()}
# What a dataset changes of its kind's settings: the lesson's word-order race is decided within 300 steps (a few
# seconds a model); the toy stories need their drills and then the stories, the CLI's 8,000 steps, which take a CPU
# thread longer than its cap (finetune_page.json's expect_qa_by_model says what the cap leaves).
DATA_SETTINGS = {"toy_order": dict(LESSON_RACE_DATA_SETTINGS), "toy_qa": dict(steps=TOY_QA_STEPS, budget=600)}
CAPTIONS: dict[str, str] = PAGE_COPY["captions"]


@dataclass(frozen=True)
class Block:
    """One thing the page draws: a Streamlit element `what` (caption, markdown, table, dataframe, html, plotly) or a
    container (columns: `parts` a tuple of blocks a column, `widths` their shares; expander: `body` its label,
    `parts` its blocks); `name` a figure's export name, `key` its widget key, `options` its keyword arguments."""

    what: str
    body: Any = None
    name: str = ""
    key: str | None = None
    parts: tuple = ()
    widths: tuple = ()
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Field:
    """One input of "try your own sentence": a Streamlit widget (text_input, text_area or number_input)."""

    widget: str
    label: str
    key: str
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DataView:
    """What the page says of the chosen data before a race: captions (what to expect first) and a few examples."""

    captions: list[str]
    rows: list[dict]


def _label(name: str) -> str:
    return finetune_figures.RUN_LABELS.get(name, name)


def _span(lo: float, hi: float, unit: str) -> str:
    a, b = round(lo), round(hi)
    return f"{a}{unit}" if a == b else f"{a}-{b}{unit}"


def _figures(model: str, choice: str) -> str:
    kind = KIND_OF[choice]
    got = PAGE_FIGURES[model][choice]
    parts = [f"{words} {_span(*got[name], '%' if kind == 'labels' else '')}" for name, words in NAMES[kind]
             if name in got]
    if kind == "tags":
        parts[0] += " chunk F1"
    return ", ".join(parts[:-1]) + f" and {parts[-1]} (seeds 0-2)"


def expectation(choice: str, shipped: str | None, train: int, steps: int, unit: str) -> str | None:
    """What to expect of a race on `choice` with shipped model `shipped` (None: another) on the page's defaults
    (`train` training `unit`, `steps` steps a model); None where nothing was measured."""
    if choice not in KIND_OF:
        return None
    settings = f"this page's defaults ({train:,} training {unit}, {steps:,} steps a model)"
    task = "CoNLL-2000 chunks" if choice == "conll2000" else None
    if shipped in PAGE_FIGURES:
        note = EXPECT["notes"].get(shipped, {}).get(choice, "")
        where = f"on {task} " if task else ""
        return f"What to expect {where}with {settings} and {shipped}: {_figures(shipped, choice)}. {note}".strip()
    if choice in EXPECT["toy_by_default_run"]:
        return EXPECT["toy_by_default_run"][choice]
    return (f"No figures were measured for this model{' on ' + task if task else ''}. With {settings}, the shipped "
            f"{EXPECT['reference']} gave: {_figures(EXPECT['reference'], choice)}.")


@dataclass(frozen=True, eq=False)
class KindPage:
    """One kind of fine-tuning as the page shows it, its words from finetune_page.json; its data choices are its
    built-in ones, then the real tasks of SHARED_FILES this server has or can fetch, then its uploads. A kind
    defines: describe(data, choice, shipped) -> DataView; split_caption(train, val), under a race's curves;
    result_blocks(results), the figures after its table; try_fields(val), the inputs of "try your own sentence";
    try_blocks(results, values, val, max_length), each model's answer to them (BertCoreError for bad input); and
    explained(values, val) -> (text, text_b, word) the salience panel explains, None while there is nothing."""

    name: str             # FinetuneTask.kind: "labels", "tags" or "spans"
    label: str            # the kind's radio button
    unit: str             # what its split counts: examples, sentences, questions
    settings: dict        # its defaults: steps, time cap (budget, seconds a model), max length (maxlen)
    baseline_label: str
    baseline_help: str
    try_title: str        # the subheader of "try your own sentence"
    fetch_instead: str    # what to do instead when one of its real tasks cannot be fetched
    uploads: dict         # its uploads (choice -> label)
    built_in: dict = field(default_factory=dict)   # its built-in data (choice -> label)
    preferred: tuple = ()  # real tasks that are its default data when on this server (else its first choice)
    has_baseline: bool = True
    val_help: str | None = None       # the validation size's help
    tag_columns: dict | None = None   # the tags it can train on (choice -> label); None: no choice

    def choices(self, shared) -> dict:
        """Its data choices (choice -> label) on a server whose shared data folder is `shared` (None: none)."""
        real = {key: label for key, (kind, rel, label) in SHARED_FILES.items()
                if kind == self.name and (key in TASKS or (shared is not None and (shared / rel).is_file()))}
        return {**self.built_in, **real, **self.uploads}

    def default_data(self, choices: Mapping, on_server: Callable[[str], bool], toy_model: bool = False) -> str:
        """The choice it starts with: a toy model's first toy task, else a preferred real task here, else the first."""
        if toy_model:
            return next((c for c in self.built_in if c in choices), next(iter(choices)))
        return next((c for c in self.preferred if c in choices and on_server(c)), next(iter(choices)))

    def toy_model_warning(self, choice: str) -> str | None:
        """Said before a race on the data `choice` when the active model has read only the toy grammar: on English
        text its pretraining gives it nothing to start from. None for the built-in toy tasks."""
        if choice in self.built_in:
            return None
        toys = ("Its toy tasks come first in the list: " + "; ".join(self.built_in.values()) + "."
                if self.built_in else "This kind of task has no toy version.")
        figures = {name: f"{lo:g}-{hi:g}%" for name, (lo, hi) in TOY_ON_POLARITY.items()}
        return PAGE_COPY["toy_model_warning"].format(toys=toys, **figures)

    def offers_drop_empty(self, choice: str) -> bool:
        """Whether the data `choice` can drop rows with an empty text or label (a CSV's)."""
        return False

    def chance(self, val) -> float | None:
        """The validation score of always guessing the largest class (a dashed line); None: no such line."""
        return None

    def expectation(self, choice: str, shipped: str | None) -> str | None:
        """What the page's defaults gave on the data `choice` with the shipped model `shipped` (None: another)."""
        return expectation(choice, shipped, SIZES.get(choice, (0, 0))[0],
                           {**self.settings, **DATA_SETTINGS.get(choice, {})}["steps"], self.unit)


class LabelsPage(KindPage):

    def offers_drop_empty(self, choice: str) -> bool:
        return choice not in self.built_in

    def chance(self, val) -> float | None:
        return max(val.label_counts()) / max(len(val), 1)

    def describe(self, data, choice: str, shipped: str | None) -> DataView:
        expect = self.expectation(choice, shipped)
        # The file's name, its labels and its columns are the visitor's: shown as written, never Markdown.
        counts = ", ".join(f"{markdown(n)} {c:,}" for n, c in zip(data.label_names, data.label_counts()))
        summary = (f"**{markdown(data.source)}**: {len(data):,} examples, {data.num_labels} labels ({counts}); "
                   f"text from {' + '.join(map(markdown, data.text_columns))}, label from "
                   f"{markdown(data.label_column)}.")
        return DataView([*([expect] if expect else []), summary],
                        [{"label": data.label_names[y], "text": data.example_text(i)}
                         for i, y in enumerate(data.labels[:8])])

    def split_caption(self, train, val) -> str:
        return (f"{len(train):,} training examples ({', '.join(map(str, train.label_counts()))} per label), "
                f"{len(val):,} validation; the dashed line is always guessing the largest class.")

    def result_blocks(self, results: Mapping) -> list[Block]:
        """Confusion matrices and the most confident mistakes: one row a model, its matrix beside its mistakes
        (three or four side by side squeeze the class labels and the mistakes' text past reading on a projector,
        1280 x 720)."""
        blocks = []
        if "tfidf" in results:
            blocks.append(Block("caption", CAPTIONS["tfidf"].format(seconds=results["tfidf"].train_seconds)))
        for r in results.values():
            matrix = Block("plotly", finetune_figures.confusion_figure(   # two lines: one is cut at 1/3 of 1280 px
                r.confusion, r.label_names, f"Confusion matrix<br>{_label(r.name)}"), name=f"confusion-{r.name}",
                key=f"ft_conf_{r.name}")
            # A static table: every column on screen, long texts wrapped (a data grid scrolls them away).
            mistakes = (Block("table", finetune_figures.mistakes_table(r.misclassified), options={"hide_index": True})
                        if r.misclassified else Block("caption", "No mistakes on the validation set."))
            blocks.append(Block("columns", widths=(2, 3), parts=(
                (matrix,), (Block("markdown", f"**Most confident mistakes ({_label(r.name)})**"), mistakes))))
        return blocks

    def try_fields(self, val) -> list[Field]:
        example = val.example_text(0) if val is not None and len(val) else "a sentence like the task's"
        return [Field("text_input", "Sentence", "ft_sentence", {
            "placeholder": f"e.g. {finetune_figures.shorten(example)}",
            "help": "Any text; the placeholder is a validation example of this task."})]

    def try_blocks(self, results: Mapping, values: Mapping, val, max_length: int) -> list[Block]:
        sentence = values.get("ft_sentence") or ""
        if not sentence.strip():
            return []
        first = next(iter(results.values()))
        # A race kept before the bag of words' model was (its figures only) has no model for it.
        probs = {name: result_probabilities(r, sentence, max_length=max_length)
                 for name, r in results.items() if r.model is not None}
        rows = [{"model": _label(n), "prediction": first.label_names[max(range(len(p)), key=p.__getitem__)],
                 "confidence": f"{max(p):.0%}"} for n, p in probs.items()]
        return [Block("dataframe", rows, options={"hide_index": True, "width": "stretch"}),
                Block("plotly", finetune_figures.class_probabilities_figure(probs, first.label_names),
                      name="finetune-probabilities", key="ft_probs")]

    def explained(self, values: Mapping, val):
        sentence = values.get("ft_sentence") or ""
        return (sentence, None, None) if sentence.strip() else None


class TagsPage(KindPage):

    def describe(self, data, choice: str, shipped: str | None) -> DataView:
        counts = sorted(zip(data.tag_counts(), data.tag_names), reverse=True)[:6]
        iob = data.scheme == "iob"
        summary = (f"**{markdown(data.source)}**: {len(data):,} sentences, {data.num_tokens:,} words, "
                   f"{data.num_tags} tags (most frequent: {', '.join(f'{markdown(n)} {c:,}' for c, n in counts)}); "
                   + ("span tags, scored by chunk F1 as the CoNLL shared task did." if iob
                      else "plain tags, scored by accuracy and macro-F1."))
        expect = self.expectation(choice, shipped)
        return DataView([*([expect] if expect else []), summary],
                        [{"sentence": " ".join(data.words[i]), "tags": " ".join(data.tag_strings(i))}
                         for i in range(min(5, len(data)))])

    def split_caption(self, train, val) -> str:
        return (f"{len(train):,} training sentences, {len(val):,} validation sentences ({val.num_tokens:,} words); "
                "dashed lines are baselines fitted in a second.")

    def result_blocks(self, results: Mapping) -> list[Block]:
        """F1 per chunk type, four models a row."""
        per_type = [(n, r.details["per_type"]) for n, r in results.items() if r.details.get("per_type")]
        if not per_type:
            return []
        width = min(len(per_type), 4)
        columns = [[] for _ in range(width)]
        for i, (n, table) in enumerate(per_type[:2 * width]):
            columns[i % width] += [Block("markdown", f"**{_label(n)}**"),
                                   Block("dataframe", finetune_figures.per_type_table(table),
                                         options={"hide_index": True})]
        return [Block("expander", "F1 per chunk type",
                      parts=(Block("columns", parts=tuple(tuple(c) for c in columns)),))]

    def try_fields(self, val) -> list[Field]:
        return [Field("number_input", f"A held-out sentence (0 to {len(val) - 1}), shown with its true tags",
                      "ft_tag_example", {"min_value": 0, "max_value": len(val) - 1}),
                Field("text_input", "…or type a sentence", "ft_tag_sentence", {
                    "max_chars": MAX_TYPED_CHARS,
                    "placeholder": "e.g. The company said its profit rose sharply in the third quarter .",
                    "help": "Words are split on spaces and punctuation, as the tagger's training words were."})]

    @staticmethod
    def _words(values: Mapping, val):
        """(the typed sentence, None) or (the chosen held-out sentence's words, their true tags)."""
        typed = values.get("ft_tag_sentence") or ""
        index = int(values.get("ft_tag_example") or 0)
        return (typed, None) if typed.strip() else (val.words[index], val.tag_strings(index))

    def try_blocks(self, results: Mapping, values: Mapping, val, max_length: int) -> list[Block]:
        words, gold = self._words(values, val)
        blocks = []
        for name, r in results.items():
            if r.tokenizer is None:
                continue  # a baseline tags validation words it has seen counted, not a typed sentence
            tagged = tag_words(r.model, r.tokenizer, words, r.label_names, max_length)
            blocks += [Block("markdown", f"**{_label(name)}**"),
                       Block("html", finetune_figures.tagged_words_html(tagged, gold))]
        return blocks + [Block("caption", CAPTIONS["tagged"])]

    def explained(self, values: Mapping, val):
        words, _ = self._words(values, val)
        return (words if isinstance(words, str) else " ".join(words), None, None)


class SpansPage(KindPage):

    def describe(self, data, choice: str, shipped: str | None) -> DataView:
        drills = data.drills
        summary = (f"**{markdown(data.source)}**: {len(data):,} questions on {data.num_passages:,} passages"
                   + (f", after {len(drills)} drills: " + "; ".join(f"*{d.example}*" for d in drills) + "."
                      if drills else "."))
        by_model = EXPECT["expect_qa_by_model"]
        expect = (EXPECT["expect_qa_drills"] + (" " + by_model[shipped] if shipped in by_model else "")
                  if drills else EXPECT["expect_qa_alone"])
        return DataView([summary, expect],
                        [{"question": ex.question, "answer": ex.answers[0] if ex.answers else "",
                          "passage": finetune_figures.shorten(ex.context, 160)} for ex in data.examples[:6]])

    def split_caption(self, train, val) -> str:
        return (f"{len(train):,} training questions, {len(val):,} validation questions on {val.num_passages:,} "
                "passages never trained on.")

    def result_blocks(self, results: Mapping) -> list[Block]:
        """How each run's drills ended, and its most confident wrong answers, a column a model."""
        blocks = []
        for r in results.values():
            ended = [(finetune_figures.stage_label(a.name), b.previous_score) for a, b in zip(r.stages, r.stages[1:])
                     if b.previous_score is not None]
            if ended:
                blocks.append(Block("caption", CAPTIONS["drills"].format(model=_label(r.name))
                                    + ", ".join(f"{name} {score:.0%}" for name, score in ended) + "."))
        columns = []
        for r in results.values():
            wrong = (Block("table", [{"question": m.text, "true answer": m.true_label, "answered": m.predicted_label,
                                      "confidence": f"{m.confidence:.0%}"} for m in r.misclassified[:8]])
                     if r.misclassified else Block("caption", "Every validation question answered exactly."))
            columns.append((Block("markdown", f"**Most confident wrong answers ({_label(r.name)})**"), wrong))
        return blocks + [Block("columns", parts=tuple(columns))]

    def try_fields(self, val) -> list[Field]:
        example = val.examples[0]
        return [Field("text_area", "Passage", "ft_passage", {
                    "value": example.context[:MAX_PASSAGE_CHARS], "height": 140, "max_chars": MAX_PASSAGE_CHARS,
                    "help": "A held-out passage to start with; edit it or paste your own."}),
                Field("text_input", "Question", "ft_question", {"value": example.question[:MAX_TYPED_CHARS],
                                                                "max_chars": MAX_TYPED_CHARS})]

    def try_blocks(self, results: Mapping, values: Mapping, val, max_length: int) -> list[Block]:
        passage, question = values.get("ft_passage") or "", values.get("ft_question") or ""
        blocks = []
        for name, r in results.items():
            if r.tokenizer is None:
                continue
            answer = answer_question(r.model, r.tokenizer, question, passage, max_length)
            blocks += [Block("markdown", f"**{_label(name)}** answers **{markdown(answer.text) or '(nothing)'}** "
                                         f"({answer.probability:.0%} sure)"),
                       Block("html", finetune_figures.answer_html(passage, answer.start_char, answer.end_char)),
                       Block("plotly", finetune_figures.span_probabilities_figure(
                           answer, f"Where the answer starts and ends, {_label(name)}"), name=f"answer-{name}",
                           key=f"ft_span_{name}")]
        return blocks

    def explained(self, values: Mapping, val):
        passage, question = values.get("ft_passage") or "", values.get("ft_question") or ""
        return (question, passage, None) if question.strip() and passage.strip() else None


# The kinds in the page's order (its radio buttons), by FinetuneTask.kind.
KIND_PAGES: dict[str, KindPage] = {name: kind(name=name, **PAGE_COPY["kinds"][name])
                                   for name, kind in (("labels", LabelsPage), ("tags", TagsPage), ("spans", SpansPage))}
