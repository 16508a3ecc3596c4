"""Heads that follow syntax, measured as Clark et al. (2019, "What does BERT look at?", section 4.2) measure them:
each head read as a parser that gives every word, as its syntactic head, the other word it attends to most, scored
per dependency relation against the best fixed-offset baseline (always the word k places away, the best k for each
relation).

Attention between words, the paper's convention: attention to a word split into pieces is the sum over its pieces,
attention from it the mean over its pieces; [CLS] and [SEP] are words of their own. A word's strongest attention is
taken over the sentence's other words (itself, [CLS] and [SEP] left out); root words, which have no head word, are not
scored. Relations keep their UD subtype (nsubj:pass) when frequent; a rare subtype joins its base relation, and a
rare relation joins "other"."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import plotly.graph_objects as go
import torch

from bert_core.data.token_tags_data import _word_pieces
from bert_core.data.treebank import DependencySentence, read_conllu
from bert_core.errors import BertCoreError
from bert_core.inspect.computation_figures import MODEL_COLOUR, _fonts
from bert_core.inspect.figures import SERIES_COLORS, _layout, wrap
from bert_core.inspect.kit import device_of, evaluating, kept, padded_batch

OFFSETS = (-3, -2, -1, 1, 2, 3)   # the baseline's candidates: the word k places to the left (k < 0) or right
MIN_COUNT = 100      # words a relation needs to be scored on its own (the paper's threshold)
OTHER = "other"
MAX_PIECES = 128     # a longer sentence is left out (the paper's limit); EWT has few
BATCH = 32
FIGURE_RELATIONS = 10   # rows the figure draws (a projector's screen); the table beside it has every relation


@dataclass
class SyntaxHeads:
    """How often each head's strongest attention from a word lands on that word's head, per relation."""

    relations: list[str]          # commonest first; "other" last, when any
    counts: np.ndarray            # [R] words scored for each relation
    accuracy: np.ndarray          # [L, H, R] share of those words whose strongest attention lands on their head
    offset_accuracy: np.ndarray   # [len(OFFSETS), R] the same for "the word k places away"
    overall: np.ndarray           # [L, H] over every scored word
    offset_overall: np.ndarray    # [len(OFFSETS)]
    sentences: int
    words: int                    # words scored (every word but each sentence's root)
    skipped: int                  # sentences over MAX_PIECES pieces, left out
    seconds: float = 0.0

    @property
    def baseline(self) -> np.ndarray:
        """[R] the best fixed offset's accuracy for each relation."""
        return self.offset_accuracy.max(0)

    @property
    def baseline_offset(self) -> list[int]:
        return [OFFSETS[k] for k in self.offset_accuracy.argmax(0)]

    def best_head(self, r: int) -> tuple[int, int]:
        """(layer, head), from 0, of the head most often right on relation `r`."""
        layer, head = np.unravel_index(int(np.argmax(self.accuracy[:, :, r])), self.accuracy.shape[:2])
        return int(layer), int(head)

    def beats_baseline(self, r: int) -> bool:
        """Whether relation `r`'s best head beats the best fixed offset by more than two of the offset's standard
        errors (binomial, on this many words): a lead of a point or two over a few hundred words is chance, and the
        many heads that look at the next word tie with offset +1."""
        base = self.baseline[r]
        lead = self.accuracy[(*self.best_head(r), r)] - base
        return bool(lead > 2 * np.sqrt(base * (1 - base) / self.counts[r]) and lead > 0)

    def head_relations(self) -> dict[tuple[int, int], list[str]]:
        """The relations for which a head is the best head and beats the best fixed offset, largest lead first."""
        found: dict[tuple[int, int], list[tuple[float, str]]] = {}
        for r, name in enumerate(self.relations):
            if name != OTHER and self.beats_baseline(r):
                lead = self.accuracy[(*self.best_head(r), r)] - self.baseline[r]
                found.setdefault(self.best_head(r), []).append((-lead, name))
        return {where: [name for _, name in sorted(pairs)] for where, pairs in found.items()}


def relation_groups(relations: Sequence[str], min_count: int = MIN_COUNT) -> dict[str, str]:
    """Each relation's group: itself when it has `min_count` words, else its base relation (nsubj for nsubj:pass)
    when that has enough words with its rare subtypes added, else "other"."""
    counts = Counter(relations)
    bases = Counter()
    for name, n in counts.items():
        if n < min_count:
            bases[name.split(":")[0]] += n
    kept_bases = {b for b in bases if bases[b] + (counts[b] if counts[b] >= min_count else 0) >= min_count}
    return {name: name if n >= min_count else (name.split(":")[0] if name.split(":")[0] in kept_bases else OTHER)
            for name, n in counts.items()}


def word_attention(att: torch.Tensor, pieces: Sequence[int]) -> torch.Tensor:
    """[..., W, W] attention between words from [..., S, S] attention between pieces, word w being `pieces[w]`
    consecutive pieces (S = their sum): to a word, the sum over its pieces; from it, the mean over its pieces."""
    owner = torch.repeat_interleave(torch.arange(len(pieces)), torch.tensor(list(pieces)))
    member = torch.nn.functional.one_hot(owner, len(pieces)).to(att.dtype).T      # [W, S]
    return (member / member.sum(1, keepdim=True)) @ att @ member.T


def predicted_heads(word_att: torch.Tensor) -> torch.Tensor:
    """[..., n] for each of the n words between [CLS] and [SEP] (word numbers from 1), the other word it attends to
    most, from [..., n + 2, n + 2] attention between words."""
    inner = word_att[..., 1:-1, 1:-1].clone()
    inner.diagonal(dim1=-2, dim2=-1).fill_(-1.0)   # attention is never negative: a word never picks itself
    return inner.argmax(-1) + 1


def offset_hits(sentence: DependencySentence) -> np.ndarray:
    """[len(OFFSETS), n] whether the word k places away is each word's head."""
    words = np.arange(1, len(sentence.heads) + 1)
    return np.array([words + k == np.array(sentence.heads) for k in OFFSETS])


def score(sentences: Sequence[DependencySentence], predictions: Sequence[np.ndarray], skipped: int = 0,
          min_count: int = MIN_COUNT) -> SyntaxHeads:
    """SyntaxHeads from each sentence's [L, H, n] predicted heads (word numbers from 1)."""
    scored = [s.heads[i] != 0 for s in sentences for i in range(len(s.heads))]
    relations = [r for s in sentences for r in s.relations]
    groups = relation_groups([r for r, keep in zip(relations, scored) if keep], min_count)
    if not groups:
        raise BertCoreError("the sentences have no word with a head (every word is a root): nothing to score")
    order = Counter(groups[r] for r, keep in zip(relations, scored) if keep)
    names = sorted(order, key=lambda g: (g == OTHER, -order[g], g))
    group = np.array([names.index(groups[r]) if keep else -1 for r, keep in zip(relations, scored)])
    keep = group >= 0
    gold = np.concatenate([np.array(s.heads) for s in sentences])
    heads_right = np.concatenate([np.asarray(p) for p in predictions], -1) == gold         # [L, H, N]
    offsets_right = np.concatenate([offset_hits(s) for s in sentences], -1)               # [K, N]
    onehot = np.eye(len(names))[group[keep]]                                               # [N kept, R]
    counts = onehot.sum(0)
    return SyntaxHeads(relations=names, counts=counts.astype(int),
                       accuracy=heads_right[..., keep] @ onehot / counts,
                       offset_accuracy=offsets_right[:, keep] @ onehot / counts,
                       overall=heads_right[..., keep].mean(-1), offset_overall=offsets_right[:, keep].mean(-1),
                       sentences=len(sentences), words=int(keep.sum()), skipped=skipped)


def syntax_heads(model, tokenizer, sentences: Sequence[DependencySentence],
                 min_count: int = MIN_COUNT) -> SyntaxHeads:
    """Read every sentence through the model (`[CLS] pieces [SEP]`, in batches of like lengths) and score its
    heads. Sentences over MAX_PIECES pieces (or the model's positions) are left out and counted."""
    started = time.perf_counter()
    limit = min(MAX_PIECES, int(model.config.max_position_embeddings))
    encoded = []
    for s, pieces in enumerate(_word_pieces([list(x.words) for x in sentences], tokenizer)):
        ids = [tokenizer.cls_id, *(p for word in pieces for p in word), tokenizer.sep_id]
        if len(ids) <= limit:
            encoded.append((s, ids, [1, *map(len, pieces), 1]))
    if not encoded:
        raise BertCoreError(f"every sentence is longer than {limit} word pieces: nothing to measure")
    encoded.sort(key=lambda e: len(e[1]))
    predictions: dict[int, np.ndarray] = {}
    device = device_of(model)
    with evaluating(model):
        for start in range(0, len(encoded), BATCH):
            chunk = encoded[start:start + BATCH]
            ids, types, mask = padded_batch(tokenizer.pad_id, [(ids, ()) for _, ids, _ in chunk])
            att = torch.stack(model.bert(ids.to(device), mask.to(device), types.to(device),
                                         output_attentions=True)[3], 1).float().cpu()    # [B, L, H, S, S]
            for b, (s, piece_ids, sizes) in enumerate(chunk):
                n = len(piece_ids)
                predictions[s] = predicted_heads(word_attention(att[b, :, :, :n, :n], sizes)).numpy()
    chosen = sorted(predictions)
    result = score([sentences[s] for s in chosen], [predictions[s] for s in chosen],
                   len(sentences) - len(chosen), min_count)
    result.seconds = time.perf_counter() - started
    return result


def treebank_syntax_heads(model, tokenizer, path: str) -> SyntaxHeads:
    """syntax_heads on a CoNLL-U file, kept with the model: a redraw is free."""
    return kept(model, "syntax heads", path, lambda: syntax_heads(model, tokenizer, read_conllu(path), MIN_COUNT))


def head_label(found: SyntaxHeads, layer: int, head: int) -> str:
    """What a head (from 0) follows, in a few words ("det 91% (offset 52%)"), or "" when it is no relation's best
    head or does not beat the fixed offsets."""
    names = found.head_relations().get((layer, head), [])
    parts = []
    for name in names[:2]:
        r = found.relations.index(name)
        parts.append(f"{name} {found.accuracy[layer, head, r]:.0%} (offset {found.baseline[r]:.0%})")
    return ", ".join(parts) + (f" +{len(names) - 2}" if len(names) > 2 else "")


def relation_rows(found: SyntaxHeads) -> list[dict]:
    """One row per relation, commonest first (the figure's numbers, and those it leaves out), for a table."""
    rows = []
    for r, name in enumerate(found.relations):
        layer, head = found.best_head(r)
        rows.append({"relation": name, "words": int(found.counts[r]), "best head": f"L{layer + 1} H{head + 1}",
                     "its accuracy": round(float(found.accuracy[layer, head, r]), 3),
                     "best offset": f"{found.baseline_offset[r]:+d}", "offset's accuracy": round(float(
                         found.baseline[r]), 3), "clear lead": found.beats_baseline(r)})
    return rows


def syntax_heads_figure(found: SyntaxHeads, top: int = FIGURE_RELATIONS) -> go.Figure:
    """Per relation, commonest at the top (the `top` commonest): its best head's accuracy beside the best fixed
    offset's, each bar named (which head, which offset)."""
    shown = range(min(top, len(found.relations)))
    rows = ["all words", *(f"{found.relations[r]} ({found.counts[r]:,})" for r in shown)]
    best = [np.unravel_index(int(np.argmax(found.overall)), found.overall.shape)]
    best += [found.best_head(r) for r in shown]
    heads = [float(found.overall.max()), *(found.accuracy[(*b, r)] for r, b in zip(shown, best[1:]))]
    offsets = [int(np.argmax(found.offset_overall)), *(OFFSETS.index(found.baseline_offset[r]) for r in shown)]
    base = [float(found.offset_overall.max()), *(found.baseline[r] for r in shown)]
    # Pale: a best head that does not beat the offsets (by two standard errors), which the page does not name.
    b = float(found.offset_overall.max())
    leads = [bool(found.overall.max() - b > 2 * np.sqrt(b * (1 - b) / found.words)), *map(found.beats_baseline, shown)]
    fig = go.Figure()
    fig.add_bar(y=rows, x=heads, orientation="h", name="best head (pale: no clear lead on the offset)",
                marker_color=[MODEL_COLOUR if lead else "#9ecae1" for lead in leads],
                text=[f"L{layer + 1} H{head + 1}: {v:.0%}" for (layer, head), v in zip(best, heads)],
                textposition="outside", hovertemplate="%{y}: best head %{text}<extra></extra>")
    fig.add_bar(y=rows, x=base, orientation="h", name="best fixed offset", marker_color=SERIES_COLORS["baseline"],
                text=[f"{OFFSETS[k]:+d}: {v:.0%}" for k, v in zip(offsets, base)], textposition="outside",
                hovertemplate="%{y}: always the word at offset %{text}<extra></extra>")
    fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=rows)
    fig.update_xaxes(range=[0, 1.18], tickformat=".0%", title="words whose strongest attention lands on their head")
    title = (f"Heads that follow syntax: {found.words:,} words of {found.sentences:,} sentences; the "
             f"{len(shown)} commonest of {len(found.relations)} relations, each one's best head against the word a "
             "fixed offset away")
    # Plotly shrinks a bar's outside text to the bar's thickness unless told not to: 12 px at least, every label.
    fig = _layout(fig, wrap(title, 100), height=160 + 38 * len(rows), legend="below", barmode="group", bargap=0.2,
                  uniformtext=dict(minsize=12, mode="show"))
    return _fonts(fig)
