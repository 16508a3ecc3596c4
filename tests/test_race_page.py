"""The Fine-tune page runs the race: the active BERT, a GPT-style checkpoint beside it, the scratch twin and the
bag-of-words line, on one split (AppTest; the models are test_race's nano pair)."""

from pathlib import Path

from tests.app_fixtures import finish_page_run
from tests.test_race import racers, task  # noqa: F401  (fixtures: the nano BERT and GPT folders, the toy task)


def open_page(page: str, active_folder: Path, monkeypatch, runs_dir: Path):
    """A page run once in AppTest with `active_folder` as the shipped checkpoint (its siblings are beside it) and
    `runs_dir` as the app's saved runs."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("BERT_EXPLORER_CHECKPOINT", str(active_folder))
    monkeypatch.setenv("BERT_EXPLORER_RUNS_DIR", str(runs_dir))
    at = AppTest.from_file(str(Path(__file__).parent.parent / "pages" / page), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_page_races_bert_gpt_scratch_and_the_baseline_and_classifies_with_each(racers, monkeypatch, tmp_path):
    at = open_page("5_Fine-tune.py", racers[0], monkeypatch, tmp_path)
    assert at.selectbox(key="ft_second").options == ["(no second model)", "gpt-nano"]  # the active one left out
    for key, value in (("ft_train", 100), ("ft_val", 40), ("ft_budget", 1), ("ft_maxlen", 32)):
        at.number_input(key=key).set_value(value)
    at.selectbox(key="ft_second").set_value("gpt-nano")
    at.checkbox(key="ft_baseline").check()
    at.run()
    next(b for b in at.button if b.label == "Run the race").click().run()
    finish_page_run(at)
    assert not at.exception, at.exception
    table = next(d.value for d in at.dataframe if "run" in d.value.columns)
    assert list(table["run"]) == ["TF-IDF + logistic regression", "from pretrained", "from gpt-nano", "from scratch"]
    assert any("bag-of-words line was fitted" in c.value for c in at.caption)
    at.text_input(key="ft_sentence").input("the farmer feeds the hungry cows").run()
    assert not at.exception, at.exception
    assert len(at.dataframe[-1].value) == 4
    # Why: one fine-tuned model's saliences and heads, only once asked for (integrated gradients take a moment).
    charts = len(at.get("plotly_chart"))
    at.toggle(key="ft_why").set_value(True).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="ft_why_model").options == ["from pretrained", "from gpt-nano", "from scratch"]
    assert any(m.value.startswith("The model says **") for m in at.markdown)
    assert len(at.get("plotly_chart")) == charts + 2   # the tokens' saliences, and the layers x heads grid
    assert any("integrated gradients" in c.value for c in at.caption)
    at.selectbox(key="ft_why_model").set_value("scratch").run()
    assert not at.exception, at.exception

