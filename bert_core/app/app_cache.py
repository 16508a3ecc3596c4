"""What the lesson and the inspection pages compute from the active model, kept in Streamlit's caches and keyed by
the model and its step (a run's model changes as it trains): the toy corpus's pairs in its tokenizer, its right
guesses by masking decision, its sentence-B-to-A attention, and the examples its pages open on."""

from __future__ import annotations

import streamlit as st

from bert_core.data.corpora import generate_toy_corpus
from bert_core.inspect.plain_examples import PageExamples, from_probes, stored_examples
from bert_core.inspect.plain_examples import examples_note as note_for
from bert_core.inspect.probes import ENGLISH_PROBES, probes_key, recorded_probes
from bert_core.serve.app_storage import public_mode
from bert_core.app.app_models import SOURCE_SHIPPED, lazy_cache
from bert_core.serve.model_sources import ActiveModel


@lazy_cache(st.cache_resource, max_entries=4, show_spinner="Tokenising the toy corpus…")
def _toy_pairs(key: str, _tokenizer, seq_len: int):
    # Imported here, not at the top: pretraining_data loads torch, and the server imports this module without it
    # (TORCH_FREE); a cached computation runs only once a page asks for it.
    from bert_core.data.pretraining_data import PretrainingData

    return PretrainingData(generate_toy_corpus(num_documents=200, seed=0), _tokenizer, max_seq_length=seq_len)


def toy_pretraining_data(active: ActiveModel):
    """Sentence pairs of the toy grammar corpus (200 documents) in the active model's tokenizer, up to 128 tokens:
    what the Tokens & masking page and the lesson draw pairs from when no run of this tab gives its own."""
    tok = active.tokenizer
    seq_len = min(128, active.config.max_position_embeddings, tok.model_max_length)
    return _toy_pairs(f"{active.source}:{active.path}:{id(tok)}", tok, seq_len)


@lazy_cache(st.cache_data, max_entries=32, show_spinner="Asking the model for every chosen token…")
def _accuracy(key: str, _model, _tokenizer, _pairs, seed: int, rate: float):
    from bert_core.inspect.masked_guesses import accuracy_by_decision   # torch: not at the top (TORCH_FREE)

    return accuracy_by_decision(_model, _tokenizer, _pairs, seed=seed, mask_rate=rate)


DECISION_POOL = 256   # pairs the accuracy by decision is counted over: about 1,500 chosen tokens, 2-3 s on 2 cores


def _key(active: ActiveModel) -> str:
    return f"{active.source}:{active.path}:{id(active.model)}:{active.step}"


def decision_accuracy(active: ActiveModel, pairs_name: str, instances, seed: int, rate: float):
    """The active model's right guesses by masking decision over the first DECISION_POOL of `instances` masked with
    `seed` and `rate` (masked_guesses.accuracy_by_decision)."""
    pairs = [(x.input_ids, x.token_type_ids) for x in instances[:DECISION_POOL]]
    return _accuracy(f"{_key(active)}:{pairs_name}:{len(pairs)}", active.model, active.tokenizer, pairs, int(seed),
                     float(rate))


@lazy_cache(st.cache_data, max_entries=16, show_spinner="Reading sentence pairs through every head…")
def _pairs(key: str, _model, _tokenizer, _instances):
    from bert_core.inspect.pair_attention import b_to_a_attention   # torch: not at the top (TORCH_FREE)

    return b_to_a_attention(_model, _tokenizer, _instances)


PAIR_POOL = 128   # pairs the Attention page summarises: a second or two on 2 cores for the shipped model


def pair_attention(active: ActiveModel, pairs_name: str, instances):
    """The active model's sentence-B-to-A attention over the first PAIR_POOL of `instances`."""
    chosen = list(instances[:PAIR_POOL])
    return _pairs(f"{_key(active)}:{pairs_name}:{len(chosen)}", active.model, active.tokenizer, chosen)


@lazy_cache(st.cache_data, max_entries=16, show_spinner="Reading sentences from the model's held-out text…")
def _probes(key: str, allow_paths: bool, _metadata):
    return recorded_probes(_metadata, allow_paths)


@lazy_cache(st.cache_data, max_entries=16, show_spinner="Finding plain sentences this model gets right…")
def _plain(key: str, folder: str | None, _model, _tokenizer):
    # Imported here, not at the top: asking the model loads torch (TORCH_FREE); a shipped checkpoint's choice is
    # stored, so only another model is asked (a few forward passes, once).
    from bert_core.inspect.example_choice import choose_examples

    return stored_examples(folder) or choose_examples(_model, _tokenizer)


def model_probes(active: ActiveModel | None) -> PageExamples:
    """The examples the inspection pages and the lesson open on for the active model: for a model that has read
    only the toy grammar, sentences from its own held-out toy stories (the probes its run recorded, or drawn again);
    for any other model plain English sentences that it gets right, with a first try it misses
    (plain_examples.choose_examples; stored for a shipped checkpoint)."""
    if active is None:
        return from_probes(ENGLISH_PROBES)
    if active.toy_only:
        meta = (active.trainer_state or {}).get("metadata") or {}
        return from_probes(_probes(probes_key(meta), not public_mode(), meta) or ENGLISH_PROBES)
    # Only a shipped folder is read for its stored choice: another source's path may be a name, not a folder.
    folder = str(active.path) if active.source == SOURCE_SHIPPED and active.path is not None else None
    return _plain(_key(active), folder, active.model, active.tokenizer)


def examples_note(active: ActiveModel, examples: PageExamples) -> str:
    """The plain line beside an English model's default example (plain_examples.examples_note): what it read, a
    sentence it gets wrong and its guesses there, and that the default is one it gets right; "" for a toy model."""
    weights = sum(p.numel() for p in active.model.parameters())
    return note_for(examples, active.corpora, weights, active.causal)
