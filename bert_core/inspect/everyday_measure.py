"""A checkpoint measured on the everyday-English set (data.everyday_set): top-1 and top-5 on its blanks, overall
and per topic, and its minimal pairs right (the good sentence scored higher by grammar.compare_pair; a tie is not).

A right word that is not one piece of the model's vocabulary can never be among its guesses: such a blank counts as
a miss, and the report counts them and gives the figures on the rest too, so what the model knows and what its
vocabulary holds are told apart. The blanks are BERT-only (a GPT cannot fill a blank with words after it, and
ranking each of its pieces by whole-sentence likelihood would take 8,192 passes a sentence): for a GPT the report
says why and scores the pairs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from bert_core.data.everyday_set import Blank, EverydayPair, load_blanks, load_everyday_pairs
from bert_core.inspect.grammar import compare_pair, trained_lm_head
from bert_core.inspect.inspection import CAUSAL_CANNOT_FILL, fill_mask
from bert_core.model.bert import is_causal

TOP_K = 5


@dataclass(frozen=True)
class BlankResult:
    """One blank: the model's TOP_K likeliest pieces, and whether any right word is one piece of its vocabulary."""

    blank: Blank
    guesses: tuple[str, ...]
    in_vocabulary: bool

    @property
    def rank(self) -> int | None:
        """1 when the likeliest piece is a right word, ..., None when none of the TOP_K is."""
        return next((i for i, g in enumerate(self.guesses, 1) if g in self.blank.answers), None)


def measure_blanks(model, tokenizer, blanks: Sequence[Blank]) -> list[BlankResult]:
    """Each blank filled by the model (a BERT)."""
    results = []
    for blank in blanks:
        (prediction,) = fill_mask(model, tokenizer, blank.text, top_k=TOP_K)
        reachable = any(tokenizer.token_to_id(w) is not None for w in blank.answers)
        results.append(BlankResult(blank, tuple(t for t, _ in prediction.candidates), reachable))
    return results


def _tally(results: Sequence[BlankResult]) -> dict:
    n = len(results)
    top1 = sum(r.rank == 1 for r in results)
    top5 = sum(r.rank is not None for r in results)
    return {"sentences": n, "top1": top1, "top5": top5, "top1_share": top1 / n if n else None,
            "top5_share": top5 / n if n else None, "out_of_vocabulary": sum(not r.in_vocabulary for r in results)}


def blanks_report(results: Sequence[BlankResult]) -> dict:
    """Counts and shares over all blanks, over those within the vocabulary's reach, per topic, and each blank."""
    by_topic: dict[str, list[BlankResult]] = defaultdict(list)
    for r in results:
        by_topic[r.blank.topic].append(r)
    return {**_tally(results), "within_vocabulary": _tally([r for r in results if r.in_vocabulary]),
            "by_topic": {topic: _tally(rs) for topic, rs in by_topic.items()},
            "items": [{"topic": r.blank.topic, "text": r.blank.text, "answers": list(r.blank.answers),
                       "guesses": list(r.guesses), "rank": r.rank, "in_vocabulary": r.in_vocabulary}
                      for r in results]}


def pairs_report(model, tokenizer, pairs: Sequence[EverydayPair]) -> dict:
    """How many pairs the model gets right (the good sentence scored higher), overall and per kind."""
    items, by_kind, method = [], defaultdict(lambda: [0, 0]), None
    for pair in pairs:
        c = compare_pair(model, tokenizer, pair.good, pair.bad)
        method, right = c.a.method, c.preferred == "a"
        by_kind[pair.kind][0] += right
        by_kind[pair.kind][1] += 1
        items.append({"kind": pair.kind, "good": pair.good, "bad": pair.bad, "difference": c.difference,
                      "right": right})
    right = sum(i["right"] for i in items)
    return {"pairs": len(items), "right": right, "accuracy": right / len(items) if items else None, "method": method,
            "by_kind": {k: {"pairs": n, "right": r, "accuracy": r / n} for k, (r, n) in by_kind.items()},
            "items": items}


def everyday_report(model, tokenizer, blanks: Sequence[Blank] | None = None,
                    pairs: Sequence[EverydayPair] | None = None) -> dict:
    """One model's whole measure: blanks (None for a GPT, the reason under `blanks_skipped`) and pairs."""
    trained_lm_head(model)  # a fine-tuned classifier has no head to fill or score with: one clear message
    blanks = load_blanks() if blanks is None else blanks
    pairs = load_everyday_pairs() if pairs is None else pairs
    causal = is_causal(model)
    report = {"model": "gpt" if causal else "bert",
              "blanks": None if causal else blanks_report(measure_blanks(model, tokenizer, blanks)),
              "pairs": pairs_report(model, tokenizer, pairs)}
    if causal:
        report["blanks_skipped"] = CAUSAL_CANNOT_FILL
    return report
