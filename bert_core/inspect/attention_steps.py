"""Inside attention, for one token: every step of one layer's self-attention for one query token and one head
(query, keys and values; q.k, divided by sqrt(d), plus the mask; the softmax; the weighted sum; all heads joined,
projected, the residual and the LayerNorm), from hooks on the model's own modules in an ordinary forward pass. The
scores, softmax and weighted sum are computed here from the hooked q, k, v, the model's own beside them for a test to
hold one against the other. Also: a temperature on the softmax (a what-if), switching heads off, and each layer's
guess (the "logit lens", nostalgebraist 2020): the model's own MLM head on every layer's hidden state at one position,
a BERT's [MASK] or a GPT's last token; the head was trained on the last layer only, so an early layer's guess says
what the head reads there, not what the layer "thinks"."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.kit import as_batch, check_head, evaluating, heads_off, hooked, lm_head, numpy32, own
from bert_core.inspect.inspection import encode_input
from bert_core.model.bert import is_causal


@dataclass
class AttentionSteps:
    """One head's attention for one query token, step by step (layer and head count from 0 here; pages add 1)."""

    tokens: list[str]
    layer: int
    head: int
    query: int
    head_dim: int
    causal: bool
    hidden_in: np.ndarray      # [S, H]  the hidden states entering the layer
    q: np.ndarray              # [d]     the query token's query for this head
    k: np.ndarray              # [S, d]  every token's key for this head
    v: np.ndarray              # [S, d]  every token's value for this head
    scores: np.ndarray         # [S]     q . k
    scaled: np.ndarray         # [S]     q . k / sqrt(d)
    allowed: np.ndarray        # [S] bool  False where the mask hides a key (padding, or a later token for GPT)
    masked: np.ndarray         # [S]     scaled, plus the model's additive mask (a huge negative where hidden)
    probs: np.ndarray          # [S]     softmax(masked), computed here
    model_probs: np.ndarray    # [S]     the model's own attention row (output_attentions)
    context: np.ndarray        # [d]     sum of probs x v, computed here
    model_context: np.ndarray  # [d]     the model's context for this head (its self-attention output)
    heads_joined: np.ndarray   # [H]     all heads' contexts side by side (the model's)
    projected: np.ndarray      # [H]     the output projection (attention.output.dense)
    residual: np.ndarray       # [H]     projected + the token's hidden state entering the layer
    normed: np.ndarray         # [H]     LayerNorm(residual): what the layer's feed-forward part reads
    model_normed: np.ndarray   # [H]     the model's own attention sub-layer output for the token


@dataclass
class LogitLens:
    """Top guesses at one position after the embeddings (layer 0) and after each layer (1..L)."""

    tokens: list[str]
    position: int
    causal: bool
    top: list[list[tuple[str, float]]]   # per layer 0..L: (token, probability), likeliest first
    tracked: list[str]                   # the last layer's top tokens, followed through every layer
    tracked_probs: np.ndarray            # [L + 1, len(tracked)]: their probability after each layer
    logits: np.ndarray                   # [L + 1, V] float32: the head's raw output after each layer

    @property
    def num_layers(self) -> int:
        return len(self.top) - 1


def lens_input(model, tokenizer, text: str) -> tuple[list[int], list[int], list[str], int]:
    """(ids, types, tokens, position): a BERT's first [MASK]; a GPT's last token of `[CLS] text`."""
    positions = int(model.config.max_position_embeddings)
    if is_causal(model):
        if not isinstance(text, str) or not text.strip():
            raise BertCoreError("the text is empty: type the start of a sentence")
        if "[mask]" in text.lower():
            raise BertCoreError("a GPT-style model guesses the next token, not a [MASK]: type the start of a "
                                "sentence without [MASK]")
        ids = [tokenizer.cls_id, *tokenizer.encode(text)]
        if len(ids) > positions:
            raise BertCoreError(f"the text is longer than the model's {positions} positions; type a shorter one")
        return ids, [0] * len(ids), tokenizer.convert_ids_to_tokens(ids), len(ids) - 1
    encoded = encode_input(tokenizer, text, max_length=positions)
    masks = [i for i, t in enumerate(encoded.input_ids) if t == tokenizer.mask_id]
    if not masks:
        raise BertCoreError("the text has no [MASK]: write [MASK] where the model should guess a word")
    return encoded.input_ids, encoded.token_type_ids, encoded.tokens, masks[0]


def logit_lens(model, tokenizer, text: str, top_k: int = 5) -> LogitLens:
    """Apply the model's MLM head to every layer's hidden state at the [MASK] (BERT) or the last token (GPT)."""
    head = lm_head(model)
    ids, types, tokens, position = lens_input(model, tokenizer, text)
    x, t = as_batch(model, ids, types)
    with evaluating(model):
        hidden = model.bert(x, torch.ones_like(x), t, output_hidden_states=True)[2]
        logits = head(torch.stack([h[0, position] for h in hidden])).float()  # [L + 1, V]
    probs = logits.softmax(-1)
    values, indices = probs.topk(max(1, min(int(top_k), probs.shape[-1])), dim=-1)
    top = [list(zip(tokenizer.convert_ids_to_tokens(idx), vals)) for idx, vals in
           zip(indices.tolist(), values.tolist())]
    final = indices[-1]
    return LogitLens(tokens=list(tokens), position=position, causal=is_causal(model), top=top,
                     tracked=tokenizer.convert_ids_to_tokens(final.tolist()),
                     tracked_probs=probs[:, final].cpu().numpy(), logits=logits.cpu().numpy())


def encode_for_steps(model, tokenizer, a: str, b: str | None = None) -> tuple[list[int], list[int], list[str]]:
    """Ids, segments and tokens the attention view reads: `[CLS] a [SEP] (b [SEP])` for both kinds of model."""
    encoded = encode_input(tokenizer, a, b, max_length=int(model.config.max_position_embeddings))
    return encoded.input_ids, encoded.token_type_ids, encoded.tokens


def attention_steps(model, tokenizer, a: str, layer: int, head: int, query: int,
                    b: str | None = None) -> AttentionSteps:
    """Follow one query token through one head of one layer (all counted from 0), with hooks on the model."""
    check_head(model, layer, head)
    ids, types, tokens = encode_for_steps(model, tokenizer, a, b)
    if not 0 <= query < len(ids):
        raise BertCoreError(f"token {query + 1} does not exist: the input has {len(ids)} tokens")
    block = model.bert.encoder.layer[layer]
    attn = block.attention
    seen: dict[str, torch.Tensor] = {}

    def keep(name):
        return own(lambda module, args, output: seen.__setitem__(name, output))

    inputs = own(lambda module, args: seen.update(hidden_in=args[0], mask=args[1]))
    handles = [attn.self.register_forward_pre_hook(inputs),
               *(module.register_forward_hook(keep(name)) for module, name in (
                   (attn.self.query, "q"), (attn.self.key, "k"), (attn.self.value, "v"), (attn.self, "self"),
                   (attn.output.dense, "projected"), (attn.output, "normed")))]
    x, t = as_batch(model, ids, types)
    with hooked(*handles), evaluating(model):
        model.bert(x, torch.ones_like(x), t, output_attentions=True)
    d = attn.self.attention_head_size
    cut = slice(head * d, (head + 1) * d)
    hidden_in = seen["hidden_in"][0].float()
    q, k, v = (seen[n][0, :, cut].float() for n in ("q", "k", "v"))
    scores = k @ q[query]
    scaled = scores / math.sqrt(d)
    additive = seen["mask"]
    mask_row = (additive[0, 0, -1 if additive.shape[2] == 1 else query].float() if additive is not None
                else torch.zeros_like(scaled))
    masked = scaled + mask_row
    probs = masked.softmax(-1)
    context_all, model_probs = seen["self"]
    heads_joined = context_all[0, query].float()
    residual = seen["projected"][0, query].float() + hidden_in[query]
    normed = torch.nn.functional.layer_norm(residual, residual.shape, attn.output.LayerNorm.weight.float(),
                                            attn.output.LayerNorm.bias.float(), attn.output.LayerNorm.eps)

    return AttentionSteps(
        tokens=list(tokens), layer=layer, head=head, query=query, head_dim=d, causal=is_causal(model),
        hidden_in=numpy32(hidden_in), q=numpy32(q[query]), k=numpy32(k), v=numpy32(v), scores=numpy32(scores),
        scaled=numpy32(scaled), allowed=numpy32(mask_row) == 0, masked=numpy32(masked), probs=numpy32(probs),
        model_probs=numpy32(model_probs[0, head, query]), context=numpy32(probs @ v),
        model_context=numpy32(heads_joined[cut]), heads_joined=numpy32(heads_joined),
        projected=numpy32(seen["projected"][0, query]), residual=numpy32(residual), normed=numpy32(normed),
        model_normed=numpy32(seen["normed"][0, query]))


def with_temperature(steps: AttentionSteps, temperature: float) -> np.ndarray:
    """What-if: the softmax of the masked scores over `temperature` (the model uses 1); hidden keys stay 0."""
    if not 0 < temperature <= 100:
        raise BertCoreError(f"the temperature must be above 0 (and at most 100), got {temperature}")
    z = np.where(steps.allowed, steps.masked.astype(np.float64) / temperature, -np.inf)
    z = np.exp(z - z.max())
    return (z / z.sum()).astype(np.float32)


@dataclass
class HeadsOffEffect:
    """The guess at a [MASK] (BERT) or for the next token (GPT) with all heads on, and with some switched off."""

    tokens: list[str]
    position: int
    heads: list[tuple[int, int]]           # switched off, counted from 0
    before: list[tuple[str, float]]
    after: list[tuple[str, float]]
    answer: str                            # the top guess with every head on
    answer_before: float                   # its probability with every head on
    answer_after: float                    # its probability with the heads off


def _guess_logits(model, ids, types, position) -> torch.Tensor:
    x, t = as_batch(model, ids, types)
    with evaluating(model):
        return lm_head(model)(model.bert(x, torch.ones_like(x), t)[0][0, position]).float()


def heads_off_effect(model, tokenizer, text: str, heads, top_k: int = 5) -> HeadsOffEffect:
    """How switching off `heads` ((layer, head) from 0) changes the guess at the first [MASK] (a GPT's next)."""
    lm_head(model)
    ids, types, tokens, position = lens_input(model, tokenizer, text)
    before = _guess_logits(model, ids, types, position).softmax(-1)
    with heads_off(model, heads):
        after = _guess_logits(model, ids, types, position).softmax(-1)
    k = max(1, min(int(top_k), before.shape[-1]))

    def top(p):
        values, indices = p.topk(k)
        return list(zip(tokenizer.convert_ids_to_tokens(indices.tolist()), values.tolist()))

    answer = int(before.argmax())
    return HeadsOffEffect(tokens=list(tokens), position=position, heads=sorted(set(heads)), before=top(before),
                          after=top(after), answer=tokenizer.id_to_token(answer),
                          answer_before=float(before[answer]), answer_after=float(after[answer]))
