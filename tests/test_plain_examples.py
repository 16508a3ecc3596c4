"""Examples a teacher would choose (issue 74): an English model's pages open on plain everyday sentences that the
model gets right, chosen by asking it, and say plainly which first try it gets wrong; a toy model keeps its toy
stories; corpora are named in words, never by a file's name. The choosing and the wording without Streamlit, then
the Predictions, Attention and How BERT computes pages under AppTest on every shipped checkpoint."""

import re
from pathlib import Path

import pytest

from bert_core.data.corpora import CORPUS_LABELS, _SHARED_FILE_LABELS, corpus_label
from bert_core.inspect import example_choice as ec
from bert_core.inspect import plain_examples as pe
from bert_core.paths import DEFAULT_CHECKPOINT

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = DEFAULT_CHECKPOINT.parent
SHIPPED_NAMES = ("bert-tiny-english", "bert-mini-english", "gpt-tiny-english", "gpt-mini-english")
# A corpus named by its file or spec, as the shared data folder and `train --corpus` spell them
FILE_NAMES = re.compile(r"\bvalid\b|\babc\b|\.txt\b|\btinyshakespeare\b|wikitext-2/|_reviews\b|\bstate_union\b|"
                        r"\bmovie_plots\b|held-out text of brown")
SPEAKER = re.compile(r"^\s*[A-Z][A-Z' ]+:", re.MULTILINE)   # "POMPEY: Here comes ...", "MISTRESS OVERDONE: Why, ..."
SPACED_PUNCTUATION = re.compile(r"\s[.,;:!?]")                # "writer of super mario bros ."


def plain_sentence(text: str) -> bool:
    """A sentence as a person writes it: a capital first, proper punctuation last, no spaced punctuation, no
    speaker's name."""
    return (bool(text) and text[0].isupper() and text.rstrip()[-1] in ".!?" and not SPACED_PUNCTUATION.search(text)
            and not SPEAKER.search(text))


# ---------------------------------------------------------------------------------------------- the lists


def test_every_candidate_is_a_plain_everyday_sentence_with_known_right_words():
    for text in (*pe.MASKED, *pe.FIRST_TRIES):
        assert pe.answers_for(text) and text.count("[MASK]") == 1 and plain_sentence(text), text
    for text in (*pe.ATTENTION, *(s for pair in pe.PAIRS for s in pair)):
        assert plain_sentence(text) and "[MASK]" not in text, text
    with pytest.raises(Exception, match="not a sentence of the everyday-English set"):
        pe.answers_for("POMPEY: Here comes Signior Claudio, led by the provost to [MASK].")


# ---------------------------------------------------------------------------------------------- choosing


def _fake_model(monkeypatch, guesses: dict[str, tuple[str, ...]], causal: bool = False) -> list[str]:
    """Replace asking a model by a table of guesses; returns the list of the sentences asked, in order."""
    asked = []

    def ask(model, tokenizer, text):
        asked.append(text)
        return pe.Tried(text, pe.answers_for(text), guesses.get(text, ("x", "y", "z")))

    monkeypatch.setattr(ec, "ask", ask)
    monkeypatch.setattr(ec, "is_causal", lambda model: causal)
    return asked


def test_the_default_is_the_first_candidate_right_at_its_first_guess_and_asking_stops_there(monkeypatch):
    first, second, third = pe.MASKED[:3]
    asked = _fake_model(monkeypatch, {first: ("grass", "coffee", "tea"), third: (pe.answers_for(third)[0], "a", "b")})
    chosen = ec.choose_default(None, None)
    assert chosen.text == third and chosen.rank == 1
    assert asked == [first, second, third]   # the rest are never asked


def test_without_a_first_guess_right_the_first_right_within_three_wins_else_the_first_candidate(monkeypatch):
    second = pe.MASKED[1]
    _fake_model(monkeypatch, {second: ("a", "b", pe.answers_for(second)[0])})
    chosen = ec.choose_default(None, None)
    assert chosen.text == second and chosen.rank == 3
    _fake_model(monkeypatch, {})
    chosen = ec.choose_default(None, None)
    assert chosen.text == pe.MASKED[0] and chosen.rank is None


def test_the_miss_is_the_first_try_not_right_at_its_first_guess(monkeypatch):
    paris, dog = pe.FIRST_TRIES[:2]
    _fake_model(monkeypatch, {paris: ("france", "a", "b")})
    miss = ec.first_miss(None, None)
    assert miss.text == dog and miss.rank is None
    _fake_model(monkeypatch, {t: (pe.answers_for(t)[0], "a", "b") for t in pe.FIRST_TRIES})
    assert ec.first_miss(None, None) is None


def test_a_gpt_is_asked_only_about_blanks_with_words_enough_before_them(monkeypatch):
    asked = _fake_model(monkeypatch, {}, causal=True)
    ec.first_miss(None, None)
    assert "The [MASK] barked at the mailman." not in asked and "Paris is the capital of [MASK]." in asked
    assert all(len(pe.prompt_of(t).split()) >= pe.PROMPT_WORDS for t in asked)


# ---------------------------------------------------------------------------------------------- wording


def test_corpora_are_named_in_words_never_by_a_file_name():
    for label in (*CORPUS_LABELS.values(), *_SHARED_FILE_LABELS.values()):
        assert not FILE_NAMES.search(label), label
    assert corpus_label("../shared/data/wikitext-2/valid.txt") == "WikiText-2 (Wikipedia articles)"
    assert "news" in corpus_label("../shared/data/news/abc.txt") and "Brown" in corpus_label("brown")
    assert corpus_label("/home/me/notes.txt") == "the text file notes.txt"   # a file of one's own: its name only
    assert pe.corpora_in_words(["brown", "../shared/data/wikitext-2/valid.txt", "tinyshakespeare"]) == (
        "the Brown Corpus (American English texts of 1961), WikiText-2 (Wikipedia articles) and Tiny Shakespeare "
        "(Shakespeare's plays)")


def _examples(right_guesses, wrong_guesses=("you", "age", "mrs")) -> pe.PageExamples:
    right = pe.Tried("There are seven days in a [MASK].", ("week",), right_guesses)
    wrong = None if wrong_guesses is None else pe.Tried("Paris is the capital of [MASK].", ("france",),
                                                        wrong_guesses)
    return pe.PageExamples((right.text,), pe.ATTENTION[0], pe.PAIRS[0], pe.prompt_of(right.text), ("a", "b"), "",
                           right, wrong)


def test_the_note_names_what_it_read_what_it_gets_wrong_and_that_the_default_is_right():
    note = pe.examples_note(_examples(("week", "year", "month")), ["brown", "../shared/data/news/abc.txt"],
                            4_400_000, causal=False)
    assert note.startswith("This model (4.4M weights) has read only the Brown Corpus (American English texts of "
                           "1961) and Australian ABC news stories. ")
    assert "“Paris is the capital of \\[MASK\\].” wrong (its guesses: you, age, mrs; right would be france)" in note
    assert "knows little about the world" in note
    assert "“There are seven days in a \\[MASK\\].”, is one it gets right (its first guess: week)" in note
    assert not FILE_NAMES.search(note)


def test_the_note_for_a_gpt_a_near_miss_no_miss_no_record_and_a_toy_model():
    gpt = pe.examples_note(_examples(("week", "a", "b"), ("the", "our", "england")), ["brown"], 1_500_000, True)
    assert "continues plain sentences such as “Paris is the capital of …” wrongly (its guesses: the, our" in gpt
    assert "The default start, “There are seven days in a …”, is one it gets right" in gpt
    near = pe.examples_note(_examples(("year", "day", "week"), None), [], 110_000_000, False)
    assert near.startswith("This model (110.0M weights) does not record what it read. ")
    assert "wrong" not in near and "little about the world" not in near
    assert "guess number 3 (year, day, week)" in near
    # a guess is the model's: Markdown in it is shown as written
    odd = pe.examples_note(_examples(("##s", "*", "[x](y)")), ["brown"], 10**6, False)
    assert "\\##s" in odd and "\\*" in odd and "\\[x\\](y)" in odd and "none of the plain sentences" in odd
    assert pe.examples_note(pe.from_probes(__import__("bert_core.inspect.probes", fromlist=["x"]).ENGLISH_PROBES),
                            ["toy"], 10**6, False) == ""


# ---------------------------------------------------------------------------------------------- the shipped models


def _shipped(name: str) -> Path:
    folder = SHIPPED / name
    if not (folder / "config.json").is_file():
        pytest.skip(f"{folder} is not in this checkout")
    return folder


@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_the_stored_choice_agrees_with_the_model_and_the_model_gets_its_default_right(name):
    from bert_core.serve.model_sources import load_folder

    folder = _shipped(name)
    model, tok, _ = load_folder(folder)
    stored = pe.stored_examples(folder)
    assert stored is not None, "run PYTHONPATH=. python benchmarks/shipped_examples.py"
    fresh = ec.choose_examples(model, tok)
    assert stored == fresh
    assert fresh.right.rank == 1 and fresh.wrong is not None and fresh.wrong.rank is None
    assert ec.ask(model, tok, fresh.sentences[0]).rank == 1
    assert ec.whole_words(tok, fresh.attention_sentence)
    assert pe.stored_examples(ROOT / "tests") is None   # no weights: asked, not looked up


# ---------------------------------------------------------------------------------------------- the pages


def _page_text(at) -> str:
    parts = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "info", "warning", "error", "success"):
        parts += [str(e.value) for e in getattr(at, kind)]
    for kind in ("text_area", "text_input"):
        parts += [f"{e.label}\n{e.value}" for e in getattr(at, kind)]
    return "\n".join(parts)


def _open(at, page: str):
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _unescaped(markdown: str) -> str:
    return re.sub(r"\\(.)", r"\1", markdown)


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED_NAMES)
def test_each_page_opens_a_shipped_model_on_plain_sentences_it_gets_right(name, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.serve import model_sources

    folder = _shipped(name)
    model, tok, _ = model_sources.load_folder(folder)
    causal = name.startswith("gpt")
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(folder))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()

    _open(at, "pages/4_Predictions.py")
    text = _page_text(at)
    defaults = [at.text_area(key="gen_prompt").value] if causal else [
        at.text_area(key="pred_text").value, at.text_input(key="nsp_a").value, at.text_input(key="nsp_b").value]
    note = next((_unescaped(c.value) for c in at.caption if c.value.startswith("This model (")), None)
    assert note, f"nothing says what the model gets wrong beside its defaults {defaults}"
    asked = ec.ask(model, tok, next(m for m in pe.MASKED if pe.prompt_of(m) == defaults[0]) if causal
                   else defaults[0])
    assert asked.rank == 1, (defaults[0], asked.guesses)   # the model gets the page's default right
    wrong = ec.first_miss(model, tok)
    assert f"({', '.join(wrong.guesses)}" in note.replace("its guesses: ", "(")   # computed, not written in
    assert "Paris is the capital of" in note and "WikiText-2 (Wikipedia articles)" in note

    _open(at, "pages/3_Attention.py")
    text += "\n" + _page_text(at)
    defaults.append(at.text_area(key="att_a").value)

    _open(at, "pages/7_How_BERT_computes.py")
    text += "\n" + _page_text(at)
    defaults.append(at.text_area(key="hbc_a").value)
    for tab in ("Grammar check", "Each layer's guess"):   # lazy tabs: only the open one runs
        at.session_state["hbc_tab"] = tab
        at.run()
        text += "\n" + _page_text(at)
    defaults += [at.session_state["hbc_pair_a"], at.session_state["hbc_pair_b"]]
    lens = at.text_input(key="hbc_lens").value
    assert lens == defaults[0]
    assert any(_unescaped(c.value) == note for c in at.caption)   # the same note beside the lens's default

    for sentence in defaults:
        if causal and sentence == defaults[0]:
            assert plain_sentence(sentence + ".") and len(sentence.split()) >= pe.PROMPT_WORDS, sentence
        else:
            assert plain_sentence(sentence), sentence
    assert not SPEAKER.search(text), SPEAKER.findall(text)
    assert not FILE_NAMES.search(text), FILE_NAMES.findall(text)


@pytest.mark.slow
def test_a_toy_model_keeps_its_toy_stories_and_no_note(tmp_path_factory, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    from bert_core.serve import model_sources
    from tests.app_fixtures import train_nano_checkpoint

    folder = train_nano_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano-toy")
    monkeypatch.setenv(model_sources.CHECKPOINT_ENV, str(folder))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    _open(at, "pages/4_Predictions.py")
    from bert_core.inspect.probes import recorded_probes
    from bert_core.model.files import read_json

    own = recorded_probes(read_json(folder / "trainer_state.json")["metadata"])
    assert own.source == "held-out part of toy"
    assert at.text_area(key="pred_text").value == own.sentences[0] and own.sentences[0] not in pe.MASKED
    assert at.text_input(key="nsp_a").value == own.pair[0]
    assert not any(c.value.startswith("This model (") for c in at.caption)


def test_probes_drawn_from_a_play_leave_out_the_speakers_names():
    """A run on Shakespeare draws its time-lapse probes from held-out lines that lead with a speaker: dropped."""
    from bert_core.inspect.probes import probes_from_documents

    doc = ["POMPEY: Here comes Signior Claudio, led by the provost to prison.",
           "MISTRESS OVERDONE: Why, here's a change indeed in the commonwealth!",
           "KING RICHARD III: Now is the winter of our discontent made glorious summer.",
           "First we walk to the river, then we cross the bridge."]
    probes = probes_from_documents([doc, list(reversed(doc))], count=3)
    for text in (*probes.sentences, probes.attention_sentence, *probes.pair):
        assert not SPEAKER.search(text), text
    assert "Here comes Signior Claudio, led by the provost to [MASK]." in probes.sentences
