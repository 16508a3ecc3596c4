"""What an embedding is: the token, position and segment vectors the model adds for each token, their sum and the
LayerNorm, as its embedding layer computes them; a word's nearest neighbours in the input embedding table; and a
token's contextual neighbours at each layer among the tokens of the model's own held-out sentences."""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass

import numpy as np
import torch

from bert_core.data.corpora import corpus_label
from bert_core.errors import BertCoreError
from bert_core.inspect.attention_steps import encode_for_steps
from bert_core.inspect.built_in_text import MINIMAL_PAIRS
from bert_core.inspect.kit import as_batch, evaluating, hidden_states, hooked, kept, numpy32, own
from bert_core.inspect.probes import heldout_documents, readable_offline
from bert_core.inspect.word_maps import SENSE_SENTENCES

@dataclass
class EmbeddingParts:
    """Each token's three embeddings, their sum, its LayerNorm, and the layer's own output (equal to it)."""

    tokens: list[str]
    token_type_ids: list[int]
    word: np.ndarray          # [S, H] the token's row of the word-embedding table
    position: np.ndarray      # [S, H] the position's row
    segment: np.ndarray       # [S, H] the segment's (A = 0, B = 1) row
    summed: np.ndarray        # [S, H]
    normed: np.ndarray        # [S, H] LayerNorm(summed), computed here
    model_output: np.ndarray  # [S, H] the embedding layer's output


def embedding_parts(model, tokenizer, a: str, b: str | None = None) -> EmbeddingParts:
    """The embedding layer's inputs and steps for `[CLS] a [SEP] (b [SEP])`, with its output hooked beside them."""
    ids, types, tokens = encode_for_steps(model, tokenizer, a, b)
    emb = model.bert.embeddings
    seen = {}
    x, t = as_batch(model, ids, types)
    with hooked(emb.register_forward_hook(own(lambda module, args, output: seen.__setitem__("out", output)))), \
            evaluating(model):
        model.bert(x, torch.ones_like(x), t)
    with torch.inference_mode():
        word = emb.word_embeddings.weight[x[0]].float()
        position = emb.position_embeddings.weight[: len(ids)].float()
        segment = emb.token_type_embeddings.weight[t[0]].float()
        summed = word + position + segment
        ln = emb.LayerNorm
        normed = torch.nn.functional.layer_norm(summed, summed.shape[-1:], ln.weight.float(), ln.bias.float(), ln.eps)
    return EmbeddingParts(tokens=list(tokens), token_type_ids=list(types), word=numpy32(word),
                          position=numpy32(position), segment=numpy32(segment), summed=numpy32(summed),
                          normed=numpy32(normed), model_output=numpy32(seen["out"][0]))


def nearest_neighbours(model, tokenizer, word: str, k: int = 10) -> list[tuple[str, float]]:
    """The `k` rows of the input embedding table closest to `word`'s (by cosine similarity), the word left out.
    A word of several pieces is looked up by its first piece, the one a reader recognises."""
    if not isinstance(word, str) or not word.strip():
        raise BertCoreError("type a word to look up")
    ids = tokenizer.encode(word.strip())
    if not ids:
        raise BertCoreError(f"{word!r} gave no tokens: type a word")
    table = model.bert.embeddings.word_embeddings.weight.detach().float()
    with torch.inference_mode():
        unit = torch.nn.functional.normalize(table, dim=-1)
        sims = unit @ unit[ids[0]]
        skip = [ids[0], *tokenizer.never_sample_ids]
        sims[[i for i in skip if i < len(sims)]] = -2.0  # itself and specials are no neighbours worth showing
        values, indices = sims.topk(max(1, min(int(k), len(sims) - 1)))
    return list(zip(tokenizer.convert_ids_to_tokens(indices.tolist()), values.tolist()))


# ------------------------------------------------------------------------------------------ contextual neighbours

POOL_SENTENCES = 120          # sentences in a neighbour pool: about 2,500 tokens, encoded once per model
POOL_WORDS = (6, 30)          # a pool sentence's length in words: whole sentences, none a heading or a paragraph


def builtin_pool() -> tuple[list[str], str]:
    """The pool of a model without readable held-out text: the sense sentences and the grammar pairs' good ones."""
    sentences = [s for group in SENSE_SENTENCES.values() for _, s in group] + [p.good for p in MINIMAL_PAIRS]
    return list(dict.fromkeys(sentences)), "built-in sentences (this model's held-out text cannot be read here)"


@functools.lru_cache(maxsize=8)
def _heldout_pool(record_json: str, count: int, seed: int) -> tuple[tuple[str, ...], str]:
    record = json.loads(record_json)
    specs = [entry["spec"] for entry in record["corpora"]]
    whole = [s for d in heldout_documents(record, specs) for s in d if POOL_WORDS[0] <= len(s.split()) <= POOL_WORDS[1]]
    # Each corpus as a reader knows it, never a file's name ("valid").
    return (tuple(random.Random(seed).sample(whole, min(count, len(whole)))),
            "held-out text of " + ", ".join(corpus_label(spec) for spec in specs))


def heldout_pool(metadata: dict | None, count: int = POOL_SENTENCES, seed: int = 0) -> tuple[list[str], str]:
    """(sentences, where they come from): `count` whole sentences drawn with `seed` from the held-out part of the
    corpora a model's run recorded (its `trainer_state.json` metadata), when every one can be read here without a
    download; else builtin_pool(). Cached per record: reading the corpora takes seconds."""
    record = (metadata or {}).get("heldout")
    specs = [c.get("spec") for c in record.get("corpora", [])] if isinstance(record, dict) else []
    if not specs or not all(isinstance(s, str) and readable_offline(s) for s in specs):
        return builtin_pool()
    try:
        sentences, source = _heldout_pool(json.dumps({"seed": record.get("seed", 0),
                                                      "fraction": record.get("fraction", 0.1),
                                                      "corpora": record["corpora"]}, sort_keys=True), count, seed)
    except (BertCoreError, OSError, ValueError, KeyError):
        return builtin_pool()
    return (list(sentences), source) if sentences else builtin_pool()


@dataclass
class TokenPool:
    """Every token of a set of sentences as the model represents it after the embeddings (0) and each layer."""

    sentences: list[str]
    source: str
    tokens: list[str]          # [N] the pool's tokens ([CLS] and [SEP] left out)
    sentence_of: np.ndarray    # [N] index into `sentences`
    position_of: np.ndarray    # [N] the token's position in its sentence's input
    unit: np.ndarray           # [L + 1, N, H] each vector scaled to length 1 (cosine = dot product)


def token_pool(model, tokenizer, sentences, source: str = "", batch: int = 32) -> TokenPool:
    """Every token of `sentences` (each `[CLS] s [SEP]`, in padded batches) at every layer, normalised."""
    sentences = [s for s in sentences if isinstance(s, str) and s.strip()]
    if not sentences:
        raise BertCoreError("the neighbour pool has no sentences")
    limit = int(model.config.max_position_embeddings)
    encoded = [encode_for_steps(model, tokenizer, s)[0][:limit] for s in sentences]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))   # batches of like lengths: little padding
    sentences, encoded = [sentences[i] for i in order], [encoded[i] for i in order]
    vectors, tokens, sentence_of, position_of = [], [], [], []
    for start in range(0, len(encoded), batch):
        chunk = encoded[start:start + batch]
        stacked = torch.stack(hidden_states(model, tokenizer, chunk), 0).float()   # [L + 1, B, S, H]
        for b, ids in enumerate(chunk):
            keep = list(range(1, len(ids) - 1))    # the sentence's own tokens, not [CLS] and [SEP]
            vectors.append(stacked[:, b, keep])
            tokens += tokenizer.convert_ids_to_tokens([ids[i] for i in keep])
            sentence_of += [start + b] * len(keep)
            position_of += keep
    unit = torch.nn.functional.normalize(torch.cat(vectors, 1), dim=-1).cpu().numpy()
    return TokenPool(sentences=sentences, source=source, tokens=tokens, sentence_of=np.array(sentence_of),
                     position_of=np.array(position_of), unit=unit)


def cached_token_pool(model, tokenizer, sentences, source: str = "") -> TokenPool:
    """token_pool, kept with the model (kit.kept): a page redraws without encoding the pool again."""
    return kept(model, "token pool", (source, tuple(sentences)),
                lambda: token_pool(model, tokenizer, sentences, source))


@dataclass
class ContextualNeighbours:
    """A token's nearest pool tokens per layer (0: embeddings): (token, sentence, cosine), nearest first."""

    tokens: list[str]
    position: int
    by_layer: list[list[tuple[str, str, float]]]
    source: str


def contextual_neighbours(model, tokenizer, sentence: str, position: int, pool: TokenPool,
                          k: int = 5) -> ContextualNeighbours:
    """The `k` tokens of `pool` whose vectors lie closest (cosine) to the vector of token `position` (from 0, in
    `[CLS] sentence [SEP]`) at each layer. Early on, neighbours share the token's spelling; later, its role."""
    ids, _, tokens = encode_for_steps(model, tokenizer, sentence)
    if not 0 <= position < len(ids):
        raise BertCoreError(f"token {position + 1} does not exist: the input has {len(ids)} tokens")
    hidden = hidden_states(model, tokenizer, [ids])
    query = torch.nn.functional.normalize(torch.stack([h[0, position].float() for h in hidden]), dim=-1).cpu().numpy()
    sims = np.einsum("lnh,lh->ln", pool.unit, query)   # [L + 1, N]
    # The same token of the same sentence, when the typed sentence is in the pool, is no neighbour worth showing.
    same = np.array([pool.sentences[s] == sentence.strip() for s in pool.sentence_of]) & (pool.position_of == position)
    sims[:, same] = -2.0
    k = max(1, min(int(k), sims.shape[1]))
    by_layer = []
    for row in sims:
        top = np.argsort(-row, kind="stable")[:k]
        by_layer.append([(pool.tokens[i], pool.sentences[pool.sentence_of[i]], float(row[i])) for i in top])
    return ContextualNeighbours(tokens=list(tokens), position=position, by_layer=by_layer, source=pool.source)
