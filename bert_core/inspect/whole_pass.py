"""One picture of the whole forward pass, for the text the student typed and the active model: the text, its pieces,
the embeddings, each layer's attention block and feed-forward block (each with its residual add and LayerNorm), the
prediction head and its top guesses; every block labelled with the model's own shapes and with what it did to the
followed token (a BERT's [MASK], a GPT's last token), hooked from one ordinary forward pass. Each block names the
detailed view that opens it (`Block.view`); the page does the opening. Layers count from 1 in every label."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from bert_core.inspect.attention_steps import lens_input, logit_lens
from bert_core.inspect.computation_figures import FONT
from bert_core.inspect.embeddings import embedding_parts
from bert_core.inspect.figures import _layout, shorten
from bert_core.inspect.kit import as_batch, evaluating, hooked, own
from bert_core.model.bert import is_causal

SHOWN_LAYERS = 12       # more layers than this: the first and last few drawn, the middle ones one row with a note
ROW_PX = 36             # a block's row; its text is FONT (13 px), two rows of text fit a header
TOP_GUESSES = 3
# The detailed view each kind of block opens (a tab of the page).
ATTENTION, FEED_FORWARD, EMBEDDINGS, HEAD = "attention", "feed-forward", "embeddings", "head"
FILLS = {EMBEDDINGS: "#d9f0d3", ATTENTION: "#dbe9f6", FEED_FORWARD: "#fde3c8", HEAD: "#e8dff2", "": "#f2f2f2"}
EDGES = {EMBEDDINGS: "#2e7d32", ATTENTION: "#1f77b4", FEED_FORWARD: "#c55a00", HEAD: "#6a3d9a", "": "#555"}


@dataclass(frozen=True)
class Block:
    """One box of the picture: what it is (`kind`, its `layer` from 0 where it has one) and what it says."""

    kind: str          # ATTENTION, FEED_FORWARD, EMBEDDINGS, HEAD; "" for the text and its pieces (nothing to open)
    layer: int | None
    text: str          # drawn in the box (Plotly markup: `<br>` only; visitor text made inert by the page's sink)

    @property
    def key(self) -> str:
        return self.kind if self.layer is None else f"{self.kind} {self.layer + 1}"

    @property
    def name(self) -> str:
        """How the picker under the picture names it."""
        names = {EMBEDDINGS: "Embeddings", HEAD: "Prediction head and guesses"}
        return names.get(self.kind) or f"Layer {self.layer + 1}: {self.kind}"


@dataclass
class WholePass:
    """The followed token through every block of the model, with the model's sizes (layers count from 0)."""

    text: str
    tokens: list[str]
    position: int                 # the followed token: a BERT's first [MASK], a GPT's last token
    causal: bool
    sizes: dict[str, int]         # hidden, heads, head_dim, intermediate, vocab, layers, positions, segments
    embedding_norms: dict[str, float]   # word, position, segment, sum, after (the LayerNorm's output)
    attention_adds: np.ndarray    # [L] ‖what the attention block adds‖ (its output projection, before the residual)
    attention_after: np.ndarray   # [L] ‖hidden state after the attention block's residual and LayerNorm‖
    ffn_adds: np.ndarray          # [L] ‖what the feed-forward block adds‖ (W2·h + b2, before the residual)
    ffn_after: np.ndarray         # [L] ‖hidden state after the layer‖ (the feed-forward block's LayerNorm)
    attention_moved: np.ndarray   # [L] ‖after − before‖ / ‖before‖ across the attention block
    ffn_moved: np.ndarray         # [L] the same across the feed-forward block
    guesses: list[tuple[str, float]]    # the head's top guesses at the followed token

    @property
    def num_layers(self) -> int:
        return len(self.attention_adds)


def whole_pass(model, tokenizer, text: str, top_k: int = TOP_GUESSES) -> WholePass:
    """Follow the [MASK] (a GPT: the last token) of `text` through the model: the embedding layer's parts
    (embeddings.embedding_parts), each block's add and output from hooks on one forward pass, and the guesses
    (attention_steps.logit_lens's last layer). Bad text raises lens_input's BertCoreError."""
    ids, types, tokens, position = lens_input(model, tokenizer, text)
    guesses = logit_lens(model, tokenizer, text, top_k=top_k).top[-1]
    cfg = model.config
    seen: dict[tuple[str, int], torch.Tensor] = {}

    def keep(name: str, layer: int):
        return own(lambda module, args, output: seen.__setitem__((name, layer), output[0, position].float()))

    handles = []
    for i, block in enumerate(model.bert.encoder.layer):
        handles += [block.attention.output.dense.register_forward_hook(keep("attention add", i)),
                    block.attention.output.register_forward_hook(keep("attention after", i)),
                    block.output.dense.register_forward_hook(keep("ffn add", i))]
    x, t = as_batch(model, ids, types)
    with hooked(*handles), evaluating(model):
        hidden = [h[0, position].float() for h in model.bert(x, torch.ones_like(x), t, output_hidden_states=True)[2]]
    layers = range(cfg.num_hidden_layers)

    def norms(name: str) -> np.ndarray:
        return np.array([float(seen[(name, i)].norm()) for i in layers])

    def moved(before, after) -> np.ndarray:
        return np.array([float((a - b).norm() / b.norm().clamp_min(1e-12)) for b, a in zip(before, after)])

    attention_after = [seen[("attention after", i)] for i in layers]
    # The embedding layer's parts for the same pieces: for a GPT, lens_input's `[CLS] text` is embedding_parts'
    # `[CLS] text [SEP]` without the [SEP], and a position's rows do not depend on what follows it.
    parts = embedding_parts(model, tokenizer, text)
    emb = {name: float(np.linalg.norm(getattr(parts, field)[position])) for name, field in (
        ("word", "word"), ("position", "position"), ("segment", "segment"), ("sum", "summed"),
        ("after", "model_output"))}
    return WholePass(
        text=text, tokens=list(tokens), position=position, causal=is_causal(model),
        sizes=dict(hidden=cfg.hidden_size, heads=cfg.num_attention_heads, head_dim=cfg.head_dim,
                   intermediate=cfg.intermediate_size, vocab=cfg.vocab_size, layers=cfg.num_hidden_layers,
                   positions=cfg.max_position_embeddings, segments=cfg.type_vocab_size),
        embedding_norms=emb, attention_adds=norms("attention add"),
        attention_after=np.array([float(a.norm()) for a in attention_after]), ffn_adds=norms("ffn add"),
        ffn_after=np.array([float(h.norm()) for h in hidden[1:]]),
        attention_moved=moved(hidden[:-1], attention_after), ffn_moved=moved(attention_after, hidden[1:]),
        guesses=[(str(tok), float(p)) for tok, p in guesses])


def shown_layers(num_layers: int, limit: int = SHOWN_LAYERS) -> list[int | None]:
    """The layers drawn as rows (from 0), None where the middle ones are folded into one row."""
    if num_layers <= limit:
        return list(range(num_layers))
    edge = (limit - 1) // 2
    return [*range(edge), None, *range(num_layers - edge, num_layers)]


def followed(wp: WholePass) -> str:
    return f"token {wp.position + 1} {wp.tokens[wp.position]}"


def blocks(wp: WholePass) -> list[Block]:
    """Every block that opens a detailed view, in the order of the pass (every layer, folded or not)."""
    s = wp.sizes
    out = [Block(EMBEDDINGS, None, f"Embeddings: word ({s['vocab']:,} × {s['hidden']}) + position "
                                   f"({s['positions']} × {s['hidden']}) + segment ({s['segments']} × {s['hidden']}), "
                                   f"then LayerNorm: ‖h‖ {wp.embedding_norms['after']:.2f}")]
    for i in range(wp.num_layers):
        out.append(Block(ATTENTION, i, _change(wp.attention_adds[i], wp.attention_moved[i], wp.attention_after[i])))
        out.append(Block(FEED_FORWARD, i, _change(wp.ffn_adds[i], wp.ffn_moved[i], wp.ffn_after[i])))
    head = "next-token head" if wp.causal else "MLM head"
    out.append(Block(HEAD, None, f"The {head}: {s['hidden']} → {s['hidden']} (GELU, LayerNorm) → {s['vocab']:,} "
                                 "scores, one a vocabulary token, then softmax"))
    return out


def _change(adds: float, moved: float, after: float) -> str:
    return f"adds {adds:.1f} · moved {moved:.0%} · ‖h‖ {after:.2f}"


def caption(wp: WholePass) -> str:
    """What the numbers in the boxes are (for under the picture; no visitor text in it)."""
    return ("‖h‖ is the length of the followed token's hidden state after the block; *adds* the length of what the "
            "block adds to it before the residual sum (the attention's output projection, the feed-forward's W2·h + "
            "b2); *moved* how far the block's LayerNorm output is from its input, as a share of the input's length. "
            f"The head reads the last ‖h‖ ({wp.ffn_after[-1]:.2f}).")


def whole_pass_figure(wp: WholePass) -> go.Figure:
    """The pass top to bottom: a row a stage, a layer a row (its attention block left, its feed-forward block
    right); each openable box carries an invisible point whose customdata is its Block.key (a click selects it)."""
    by_key = {b.key: b for b in blocks(wp)}
    rows: list[tuple[float, list[tuple[float, float, Block, float]]]] = []   # (height, [(x0, x1, block, depth)])
    pieces = " ".join(wp.tokens)
    what = "the next token" if wp.causal else "the [MASK]"
    rows.append((1, [(0, 1, Block("", None, f"Text: “{shorten(wp.text, 90)}”"), 0)]))
    rows.append((1, [(0, 1, Block("", None, f"{len(wp.tokens)} pieces: {shorten(pieces, 70)} · followed: "
                                            f"{followed(wp)}"), 0)]))
    rows.append((1, [(0, 1, by_key[EMBEDDINGS], 0)]))
    s = wp.sizes   # a header row: each block's shapes
    attention = f"attention: {s['heads']} heads × {s['head_dim']}, {s['hidden']} → {s['hidden']}"
    feed_forward = f"feed-forward {s['hidden']} → {s['intermediate']} → {s['hidden']} (GELU)"
    rows.append((1.3, [(0.12, 0.555, Block("", None, f"{attention}<br>+ residual, LayerNorm"), -1),
                       (0.565, 1, Block("", None, f"{feed_forward}<br>+ residual, LayerNorm"), -1)]))
    for layer in shown_layers(wp.num_layers):
        if layer is None:
            hidden = [i for i in range(wp.num_layers) if i not in shown_layers(wp.num_layers)]
            rows.append((1, [(0, 1, Block("", None, f"⋯ layers {hidden[0] + 1} to {hidden[-1] + 1}: the same two "
                                                    "blocks each (pick one below the picture) ⋯"), 0)]))
            continue
        rows.append((1, [(0, 0.11, Block("", None, f"Layer {layer + 1}"), -1),
                         (0.12, 0.555, by_key[f"{ATTENTION} {layer + 1}"], 0),
                         (0.565, 1, by_key[f"{FEED_FORWARD} {layer + 1}"], 0)]))
    rows.append((1, [(0, 1, by_key[HEAD], 0)]))
    guesses = " · ".join(f"{tok} {p:.0%}" for tok, p in wp.guesses)
    rows.append((1, [(0, 1, Block(HEAD, None, f"Top guesses for {what}: {guesses}"), 1)]))
    fig = go.Figure()
    xs, ys, keys, hovers = [], [], [], []
    top = 0.0
    for height, boxes in rows:
        for x0, x1, block, style in boxes:
            y0, y1 = top + 0.08, top + height - 0.08
            if style >= 0:   # a box; style -1: a label without one
                fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, line=dict(color=EDGES[block.kind], width=1.5),
                              fillcolor=FILLS[block.kind], layer="below")
            fig.add_annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text=block.text, showarrow=False,
                               font=dict(size=FONT, color="#111"))
            if block.kind and style == 0:
                xs.append((x0 + x1) / 2)
                ys.append((y0 + y1) / 2)
                keys.append(block.key)
                hovers.append(f"Open {block.name}")
        top += height
    fig.add_trace(go.Scatter(x=xs, y=ys, customdata=keys, hovertext=hovers, mode="markers", hoverinfo="text",
                             marker=dict(size=28, color="rgba(0,0,0,0.01)"), showlegend=False))
    _layout(fig, f"The whole pass, following {followed(wp)} (click a block to open it)",
            height=int(ROW_PX * top) + 70, clickmode="event+select", dragmode=False)
    fig.update_layout(margin=dict(l=4, r=4, t=50, b=8))
    fig.update_xaxes(visible=False, range=[-0.005, 1.005], fixedrange=True)
    fig.update_yaxes(visible=False, range=[top, 0], fixedrange=True)
    return fig


def opened_block(key: str) -> tuple[str, int | None]:
    """(kind, layer from 0 or None) of a Block.key ("feed-forward 3", "embeddings"); ValueError for anything else."""
    kind, _, layer = str(key).rpartition(" ") if str(key)[-1:].isdigit() else (str(key), "", "")
    if kind not in FILLS or not kind:
        raise ValueError(f"no block {key!r}")
    return kind, (int(layer) - 1 if layer else None)


def scroll_script(heading: str, opened: int) -> str:
    """The script (for a zero-height frame) that scrolls the page to the visible heading `heading`, or to the
    page's tabs when it is empty, once the opened tab has drawn it (tried for up to 5 s). `opened` (the blocks
    opened so far) makes each script differ from the last, so the browser runs it again."""
    return (f"<script>/* opened {int(opened)} */(function(){{var d=window.parent.document,n=0,want={heading!r};"
            "function go(){var el=want?Array.from(d.querySelectorAll('h3')).find(function(h){return h.offsetParent"
            "!==null&&h.textContent.trim()===want;}):d.querySelector('[role=\"tablist\"]');"
            "if(el){el.scrollIntoView({block:'start'});return;}if(++n<50)setTimeout(go,100);}go();})();</script>")
