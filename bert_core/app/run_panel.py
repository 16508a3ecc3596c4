"""What the Train and Fine-tune pages say about runs, as words and decisions (no Streamlit, no torch): the run panel
they share (what is said of a run before its figures, its share link, its Stop and Reset buttons' words; each page's
in `PanelWords`), and a browser's own runs, started or watched ("My runs"). A browser is known by the id in its cookie
(`VISITOR_COOKIE`); a row's link is the one that browser already had, on the run's own page (`Train?run=` or
`?watch=`, `Fine-tune?ft=` or `?ftwatch=`), so the list never opens a door the browser did not have. No server path
is shown: a corpus is named by its label."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Sequence

from bert_core.inspect.safe_text import markdown
from bert_core.serve.jobs import format_duration
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE
from bert_core.serve.run_registry import OWNER
from bert_core.app import page_copy

WORDS = page_copy.WORDS["run_panel"]


@dataclass(frozen=True)
class PanelWords:
    """How a page names its run in the panel (each page's words: page_copy.json's run_panel)."""

    page: str           # run_protocols' page name: which of the tab's runs, and which share link
    noun: str           # "run", "race"
    whose: str          # what the queue counts runs ahead of: "yours", "this race"
    doing: str          # "Training failed: ...", "Fine-tuning ended: ..."
    paused: str         # said of a queued run that has trained already ({step}: its step)
    stop_help: str
    stopping: str       # said while Stop waits for the step under way
    reset_help: str
    share_caption: str

    @property
    def share_title(self) -> str:
        return f"Share this {self.noun} with a class"

    def share_link(self, base_url: str, view_id: str) -> str:
        """The link that watches the run without steering it (`base_url`: the page's address, its query dropped)."""
        return f"{base_url.split('?')[0]}?{LINK_PARAMS[self.page][1]}={view_id}"


TRAIN_WORDS = PanelWords(page=TRAIN_PAGE, **WORDS["train"])

FINETUNE_WORDS = PanelWords(page=FINETUNE_PAGE, **WORDS["finetune"])


@dataclass(frozen=True)
class Notice:
    """One thing said of a run: `level` is info, warning or error."""

    level: str
    text: str
    icon: str | None = None


def status_notices(run, words: PanelWords, viewer: bool, place: tuple[int, float] | None) -> list[Notice]:
    """What the panel says of `run` before its figures: how it was ended, a record a full disk refused (a restart
    would lose it), and its queue place (`place`: runs ahead, estimated wait) or how its training failed or ended. A
    viewer is not told that Stop cancels it: they cannot stop it."""
    said = []
    if run.note:
        said.append(Notice("warning", f"This {words.noun} was {run.note}."))
    if run.record_failed:
        said.append(Notice("warning", run.record_failed, ":material/hard_drive:"))
    job = run.job
    if run.phase == "queued" and place is not None:
        ahead, wait = place
        paused = (words.paused.format(step=job.trainer.step) if job is not None and job.trainer is not None
                  else "")
        said.append(Notice("info", f"**Queued**: {ahead} run(s) ahead of {words.whose}, estimated wait "
                                   f"{format_duration(wait)}. {paused}It starts by itself"
                                   + ("." if viewer else "; *Stop* cancels it."), ":material/schedule:"))
    elif job is not None and job.error:
        said.append(Notice("error", f"{words.doing} failed: {job.error}"))
    elif job is not None and job.ended_note:
        said.append(Notice("warning", f"{words.doing} ended: {job.ended_note}."))
    return said


def waiting(run) -> bool:
    """True when a queued run has nothing more to draw: it has not trained yet."""
    return run.phase == "queued" and (run.job is None or run.job.trainer is None)


VISITOR_COOKIE = "bert_explorer_visitor"
# Each page's URL keys for a run: the owner's id, and a share link's.
LINK_PARAMS = {TRAIN_PAGE: ("run", "watch"), FINETUNE_PAGE: ("ft", "ftwatch")}
VISITOR_DAYS = 30          # how long a browser keeps its id; the runs themselves go by the server's retention
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


def valid_visitor(value: Any) -> str | None:
    """The cookie's value when it is an id this server could have made, else None (a forged or damaged cookie is
    treated as none: the browser gets a new id)."""
    return value if isinstance(value, str) and _TOKEN.match(value) else None


def cookie_script(visitor: str) -> str:
    """The page script that stores the id in the browser: a first-party cookie for the whole site, SameSite=None
    and Secure under https (a Space is shown inside huggingface.co's page), Lax on a plain-http class server."""
    if not valid_visitor(visitor):   # only an id this server made goes into the page's script
        raise ValueError("not a visitor id")
    return ("<script>(function(){var d=window.parent.document;var s=window.parent.location.protocol==='https:'"
            f"?'; SameSite=None; Secure':'; SameSite=Lax';d.cookie='{VISITOR_COOKIE}={visitor}; path=/; "
            f"max-age={VISITOR_DAYS * 86400}'+s;}})();</script>")


# A race's contenders as its row names them, shortest first-read names (the Fine-tune page's legend spells them out).
RACE_NAMES = {"pretrained": "from pretrained", "scratch": "from scratch", "tfidf": "TF-IDF + LR",
              "word-majority": "word baseline", "pos-majority": "POS baseline"}


def race_result(trainer: Any) -> str:
    """A race's result, every contender's latest validation figure ('from pretrained 71.6%, from scratch 96.8%,
    TF-IDF + LR 74.2% accuracy'): a row that showed the pretrained model's alone would hide who won."""
    scored = [t for t in (trainer.tuners if trainer is not None else ()) if t.evals]
    if not scored:
        return ""
    f1 = bool(trainer.primary)
    order = {name: i for i, name in enumerate(RACE_NAMES)}
    scored.sort(key=lambda t: order.get(t.name, len(order)))
    figures = [f"{RACE_NAMES.get(t.name, t.name)} {t.evals[-1].macro_f1 if f1 else t.evals[-1].accuracy:.1%}"
               for t in scored]
    return f"{', '.join(figures)} {'F1' if f1 else 'accuracy'}"


def _score(run) -> str:
    """The run's latest held-out figure, named: a pretraining run's masked- or next-token accuracy, a race's result."""
    if run.spec.page == FINETUNE_PAGE:
        return race_result(run.trainer)
    evals = run.trainer.evals if run.trainer is not None else ()
    if not evals:
        return ""
    causal = run.spec.train.get("objective") == "clm"
    return f"{float(evals[-1].mlm_acc):.1%} {'next-token' if causal else 'masked-token'} accuracy"


def _model(spec) -> str:
    if spec.page == FINETUNE_PAGE:
        return f"fine-tuned from {spec.model_label}"
    causal = spec.train.get("objective") == "clm"
    return f"{'GPT' if causal else 'BERT'} {spec.preset}".strip()


def run_link(run, role: str, base: str = "") -> str:
    """The link that opens the run on its own page, relative to `base`: its owner's id, or its share id."""
    page = run.spec.page
    owner, viewer = LINK_PARAMS[page]
    return f"{base}{page}?{owner}={run.run_id}" if role == OWNER else f"{base}{page}?{viewer}={run.view_id}"


def visitor_rows(visited: Sequence[tuple[Any, str]], base: str = "") -> list[dict]:
    """One row per (run, role) of `RunStore.visited`: what it is, how far it got, and the link that opens it."""
    rows = []
    for run, role in visited:
        spec = run.spec
        trainer = run.trainer
        finetune = spec.page == FINETUNE_PAGE
        rows.append({
            "run": run.name or ("started here" if role == OWNER else "watched here"),
            "state": run.phase,
            "model": _model(spec),
            "data": (spec.task_label if finetune else spec.corpus_label) or "",
            "step": trainer.step if trainer is not None else 0,
            "held-out": _score(run),
            "open": run_link(run, role, base),
        })
    return rows


def _plain(text: Any) -> str:
    """A cell's text with every Markdown sign escaped: a run's or a file's name is shown, never interpreted."""
    return markdown(str(text)).replace("\n", " ")


def rows_markdown(rows: Sequence[dict]) -> str:
    """`visitor_rows` as a Markdown table whose last column is a real link (a data grid's link cannot be clicked
    by a test or a screen reader)."""
    if not rows:
        return ""
    head = [k for k in rows[0] if k != "open"]
    lines = ["| " + " | ".join(head) + " | |", "|" + " --- |" * (len(head) + 1)]
    for row in rows:
        lines.append("| " + " | ".join(_plain(row[k]) for k in head) + f" | [open]({row['open']}) |")
    return "\n".join(lines)
