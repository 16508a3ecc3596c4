"""A browser's own runs ("My runs"), started or watched, as the Train and Fine-tune pages list them. A browser is
known by the id in its cookie (`VISITOR_COOKIE`); a row's link is the one that browser already had, on the run's own
page (`Train?run=` or `?watch=`, `Fine-tune?ft=` or `?ftwatch=`), so the list never opens a door the browser did not
have. No server path is shown: a corpus is named by its label."""

from __future__ import annotations

import re
from typing import Any, Sequence

from bert_core.inspect.safe_text import markdown
from bert_core.serve.run_protocols import FINETUNE_PAGE, TRAIN_PAGE
from bert_core.serve.run_registry import OWNER

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
