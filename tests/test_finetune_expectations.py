"""The Fine-tune page's "What to expect" (bert_core.inspect.finetune_kinds): every shipped model has measured
figures for every built-in and real task, the ranges it quotes are those of the per-seed table in docs/benchmarks.md
(which benchmarks/finetune_page_defaults.py writes), and the caption names the model in use, or says that nothing
was measured for it."""

import re
from pathlib import Path

import pytest

from bert_core.inspect import finetune_kinds as fe
from bert_core.inspect.finetune_kinds import DATA_SETTINGS, KIND_PAGES, SIZES
from bert_core.serve.model_sources import shipped_checkpoints

ROOT = Path(__file__).resolve().parents[1]
SECTION = "### The Fine-tune page's defaults with each shipped model"


def _docs_rows() -> dict[tuple[str, str], dict[str, list[float]]]:
    """The section's table: (model, task) -> each column's figures, seed by seed."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text[text.index(SECTION):]
    section = section[:section.index("\n### ", 1)] if "\n### " in section[1:] else section
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] not in fe.PAGE_FIGURES:
            continue
        model, choice, seeds, first, second, pretrained, scratch = cells

        def values(cell):
            return [] if cell == "-" else [float(v) for v in cell.split(" / ")]
        names = [name for name, _ in fe.NAMES[fe.KIND_OF[choice]]]   # pretrained, scratch, then the baselines
        got = dict(zip(names, (values(pretrained), values(scratch), values(first), values(second))))
        assert seeds == "0 / 1 / 2" and all(len(v) == 3 for v in got.values()), line
        rows[(model, choice)] = got
    return rows


def test_every_shipped_model_has_figures_for_every_task_the_page_offers_built_in_or_real():
    assert set(fe.PAGE_FIGURES) == set(shipped_checkpoints())
    for model, by_task in fe.PAGE_FIGURES.items():
        assert set(by_task) == set(fe.KIND_OF), model
        for choice, figures in by_task.items():
            assert {name for name, _ in fe.NAMES[fe.KIND_OF[choice]]} == set(figures), (model, choice)
            assert all(0 <= lo <= hi <= 100 for lo, hi in figures.values()), (model, choice)


def test_the_quoted_ranges_are_the_lowest_and_highest_seed_of_the_docs_table():
    rows = _docs_rows()
    assert set(rows) == {(m, c) for m, by_task in fe.PAGE_FIGURES.items() for c in by_task}
    for (model, choice), columns in rows.items():
        for name, seeds in columns.items():
            assert fe.PAGE_FIGURES[model][choice][name] == (min(seeds), max(seeds)), (model, choice, name)


@pytest.mark.parametrize("model", sorted(fe.PAGE_FIGURES))
def test_the_caption_names_the_model_in_use_with_the_pages_own_defaults(model):
    for choice, kind in fe.KIND_OF.items():
        kp = KIND_PAGES[kind]
        text = kp.expectation(choice, model)
        steps = {**kp.settings, **DATA_SETTINGS.get(choice, {})}["steps"]
        assert f"and {model}:" in text and f"{SIZES[choice][0]:,} training {kp.unit}, {steps:,} steps" in text
        lo, hi = fe.PAGE_FIGURES[model][choice]["pretrained"]
        span = f"{round(lo)}" if round(lo) == round(hi) else f"{round(lo)}-{round(hi)}"
        assert re.search(rf"pretrained {span}(%| chunk F1)", text), text
        assert ("chunk F1" in text) == (choice == "conll2000")


def test_a_model_that_is_not_shipped_gets_the_lessons_run_for_the_toys_and_a_named_reference_for_real_tasks():
    labels, tags = KIND_PAGES["labels"], KIND_PAGES["tags"]
    assert labels.expectation("toy_order", None) == fe.EXPECT["toy_by_default_run"]["toy_order"]
    assert labels.expectation("toy", None) == fe.EXPECT["toy_by_default_run"]["toy"]
    polarity = labels.expectation("polarity", None)
    assert polarity.startswith("No figures were measured for this model.") and f"the shipped {fe.EXPECT['reference']}" in polarity
    assert tags.expectation("conll2000", None).startswith("No figures were measured for this model on CoNLL-2000")
    # An uploaded file is not the measured task: no promise about it.
    assert labels.expectation("upload", "bert-tiny-english") is None
    assert tags.expectation("upload_conll", "bert-tiny-english") is None


def test_the_page_says_what_to_expect_of_the_model_the_sidebar_opens(monkeypatch):
    """The Fine-tune page run as Streamlit runs it, with each shipped folder as the app's default model: the word-order
    race's caption (built in, on every server) names that model and its measured range."""
    from streamlit.testing.v1 import AppTest

    for name, folder in shipped_checkpoints().items():
        monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(folder))
        at = AppTest.from_file(str(ROOT / "pages" / "5_Fine-tune.py"), default_timeout=60)
        at.run()
        at.radio(key="ft_data").set_value("toy_order").run()
        assert not at.exception, at.exception
        lo, hi = fe.PAGE_FIGURES[name]["toy_order"]["pretrained"]
        said = f"(200 training examples, 300 steps a model) and {name}: pretrained {round(lo)}-{round(hi)}%"
        assert any(said in c.value for c in at.caption), (name, [c.value for c in at.caption])
