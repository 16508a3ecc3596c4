"""BERT's pretraining examples: NSP sentence pairs as Google's create_pretraining_data.py makes them, MLM masking
vectorised over a batch, and a seeded, resumable batch iterator. Every decision is recorded for the app to show."""

from __future__ import annotations

import bisect
import copy
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.distributed as dist
from tokenizers import Tokenizer

from bert_core.data.batching import DeviceBatch, attention_mask, pad_rows
from bert_core.data.corpora import Corpus, load_corpus, split_heldout
from bert_core.data.objectives import MASK_RATE, OBJECTIVES, objective_has_nsp
from bert_core.errors import BertCoreError
from bert_core.model.bert import IGNORE_INDEX, next_token_targets
from bert_core.model.tokenization import BertTokenizer, special_tokens_count
from bert_core.model.tokenization import train_tokenizer as train_tok

# The masking decision recorded for every token (Batch.decisions), and keys for figures.
NOT_CHOSEN, MASKED, RANDOM, KEPT = 0, 1, 2, 3
DECISION_KEYS = {MASKED: "masked", RANDOM: "random", KEPT: "kept"}
# In a corpus of one document a "random" B is taken at least this many sentences away from A (fewer when
# the text is short), so that it is almost never the true continuation.
FAR_SENTENCES = 50
NOTE_OTHER_DOCUMENT = "B from another document"
NOTE_FOLLOWS = "B is the text that follows A"
NOTE_FAR = "B from far away in the same (only) document"
NOTE_NEAR = "B from elsewhere in the same (only) document; the text is too short to take it from far away"
NOTE_SINGLE = "one segment of contiguous text (NSP off)"
EVAL_SALT = 0x45564C   # held-out batches mix their seed with this, apart from every training batch


@dataclass
class NspInstance:
    """One `[CLS] A [SEP] B [SEP]` example and where A and B came from (document, first sentence, end sentence)."""

    input_ids: list[int]
    token_type_ids: list[int]
    is_random_next: bool
    a_span: tuple[int, int, int]
    b_span: tuple[int, int, int]
    note: str = ""


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random) -> None:
    """Trim the longer of A and B one token at a time until both fit, from its front or back at random as Google does,
    so the model does not learn that text always ends mid-sentence."""
    while len(tokens_a) + len(tokens_b) > max_num_tokens:
        trunc = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        if rng.random() < 0.5:
            del trunc[0]
        else:
            trunc.pop()


def _instances_from_document(docs, kept, d, max_num_tokens, short_seq_prob, rng, cls_id, sep_id, out):
    """Google's create_instances_from_document for document `d`, appending NspInstances to `out`.

    One deliberate difference: Google forces a random B whenever a chunk holds a single sentence (always the
    case for the leftover sentence at a document's end), which makes label 1 over-represented (58% on the toy
    corpus, measured). Here every pair flips the coin, and a lone sentence that draws "follows" is paired with
    its neighbour, so the labels stay at the paper's 50/50.
    """
    document = docs[d]
    target_seq_length = max_num_tokens
    if rng.random() < short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)
    current_chunk: list[list[int]] = []
    chunk_start = 0
    current_length = 0
    i = 0
    while i < len(document):
        if not current_chunk:
            chunk_start = i
        current_chunk.append(document[i])
        current_length += len(document[i])
        if i == len(document) - 1 or current_length >= target_seq_length:
            is_random_next = rng.random() < 0.5
            if not is_random_next and len(current_chunk) == 1:
                if i + 1 < len(document):  # a lone long sentence: B is the next one
                    i += 1
                    current_chunk.append(document[i])
                elif chunk_start > 0:  # the lone last sentence: A is the one before it
                    chunk_start -= 1
                    current_chunk.insert(0, document[chunk_start])
                else:  # a one-sentence document can only give a random B
                    is_random_next = True
            a_end = 1 if len(current_chunk) == 1 else rng.randint(1, len(current_chunk) - 1)
            tokens_a = [t for seg in current_chunk[:a_end] for t in seg]
            a_span = (d, kept[d][chunk_start], kept[d][chunk_start + a_end - 1] + 1)
            if is_random_next:
                target_b_length = target_seq_length - len(tokens_a)
                if len(docs) > 1:
                    # Google tries 10 random draws and can, rarely, end with the same document (a real continuation
                    # labelled "random"); drawing from the other documents makes "another document" a guarantee.
                    r_doc = rng.randint(0, len(docs) - 2)
                    r_doc += r_doc >= d
                    r_start, r_limit, note = rng.randint(0, len(docs[r_doc]) - 1), len(docs[r_doc]), NOTE_OTHER_DOCUMENT
                else:
                    r_doc = d
                    r_start, r_limit, note = _far_start(rng, len(document), chunk_start, chunk_start + a_end)
                if r_start is None:  # a one-document text too short for any random B
                    current_chunk, current_length = [], 0
                    i += 1
                    continue
                tokens_b = []
                r_end = r_start
                for j in range(r_start, r_limit):
                    tokens_b.extend(docs[r_doc][j])
                    r_end = j + 1
                    if len(tokens_b) >= target_b_length:
                        break
                b_span = (r_doc, kept[r_doc][r_start], kept[r_doc][r_end - 1] + 1)
                # Put back the chunk's unused sentences: they start the next chunk instead of being lost.
                i -= len(current_chunk) - a_end
            else:
                tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                b_span = (d, kept[d][chunk_start + a_end], kept[d][chunk_start + len(current_chunk) - 1] + 1)
                note = NOTE_FOLLOWS
            truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
            input_ids = [cls_id, *tokens_a, sep_id, *tokens_b, sep_id]
            types = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
            out.append(NspInstance(input_ids, types, is_random_next, a_span, b_span, note))
            current_chunk, current_length = [], 0
        i += 1


def _far_start(rng: random.Random, n: int, a_start: int, a_end: int):
    """(start, limit, note) for a "random" B in a one-document corpus: far from A, never A's own continuation."""
    far = min(FAR_SENTENCES, max(1, n // 4))
    after = list(range(a_end + far, n))
    before_limit = a_start - far  # B taken before A must end `far` sentences before A starts
    before = list(range(0, max(0, before_limit)))
    if after or before:
        pool = before + after
        start = pool[rng.randrange(len(pool))]
        return start, (before_limit if start < a_start else n), NOTE_FAR if far >= FAR_SENTENCES else NOTE_NEAR
    # Short text: anything that is neither A nor the sentence right after it.
    pool = [j for j in range(n) if j < a_start or j > a_end]
    if not pool:
        return None, None, NOTE_FOLLOWS
    start = pool[rng.randrange(len(pool))]
    return start, (a_start if start < a_start else n), NOTE_NEAR


def _contiguous_instances(docs, kept, d, max_num_tokens, short_seq_prob, rng, cls_id, sep_id, out):
    """NSP off: cut document `d` into single segments of contiguous text, each filled to the target length."""
    flat = [t for seg in docs[d] for t in seg]
    starts = [0, *itertools.accumulate(len(seg) for seg in docs[d])]
    pos = 0
    while pos < len(flat):
        target = max_num_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_num_tokens)
        piece = flat[pos: pos + target]
        first = bisect.bisect_right(starts, pos) - 1
        last = bisect.bisect_right(starts, pos + len(piece) - 1) - 1
        span = (d, kept[d][first], kept[d][last] + 1)
        out.append(NspInstance([cls_id, *piece, sep_id], [0] * (len(piece) + 2), False, span, (d, span[2], span[2]),
                               NOTE_SINGLE))
        pos += len(piece)


def create_nsp_instances(token_docs: Sequence[Sequence[Sequence[int]]], tokenizer, max_seq_length: int = 128,
                         short_seq_prob: float = 0.1, rng: random.Random | None = None,
                         nsp: bool = True) -> list[NspInstance]:
    """NSP pairs from token ids (documents -> sentences -> ids), document by document as Google's script makes them
    (with `nsp=False`, segments of contiguous text). Not shuffled."""
    if max_seq_length < 8:
        raise BertCoreError(f"max_seq_length={max_seq_length} is too short for [CLS] A [SEP] B [SEP]; use at least 16")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise BertCoreError(f"short_seq_prob must be between 0 and 1, got {short_seq_prob!r}")
    rng = rng if rng is not None else random.Random(0)
    # Sentences with no tokens are dropped; `kept` maps back to the corpus's sentence numbers for the spans.
    docs, kept, doc_ids = [], [], []
    for d, doc in enumerate(token_docs):
        idx = [i for i, s in enumerate(doc) if len(s)]
        if idx:
            docs.append([list(doc[i]) for i in idx])
            kept.append(idx)
            doc_ids.append(d)
    if not docs:
        raise BertCoreError("the corpus has no tokens; give it some text")
    out: list[NspInstance] = []
    build = _instances_from_document if nsp else _contiguous_instances
    max_num_tokens = max_seq_length - special_tokens_count(pair=nsp)
    for d in range(len(docs)):
        build(docs, kept, d, max_num_tokens, short_seq_prob, rng, tokenizer.cls_id, tokenizer.sep_id, out)
    if len(doc_ids) != len(token_docs):  # documents were dropped: restore the corpus's document numbers
        for inst in out:
            inst.a_span = (doc_ids[inst.a_span[0]], *inst.a_span[1:])
            inst.b_span = (doc_ids[inst.b_span[0]], *inst.b_span[1:])
    return out


# -- masking ---------------------------------------------------------------------------------------
@dataclass
class MaskingResult:
    """Masked input ids, MLM labels (-100 where not chosen), a decision code per token, and the original ids."""

    input_ids: torch.Tensor
    mlm_labels: torch.Tensor
    decisions: torch.Tensor
    original_ids: torch.Tensor


def mask_tokens(input_ids: torch.Tensor, special_mask: torch.Tensor, generator: torch.Generator, vocab_size: int,
                mask_id: int, candidate_ids: torch.Tensor | None = None, mask_rate: float = MASK_RATE,
                whole_word_starts: torch.Tensor | None = None, mask_only: bool = False) -> MaskingResult:
    """BERT's MLM masking over a [B, S] batch: pick `mask_rate` of the tokens not in `special_mask`, then 80% [MASK],
    10% a random non-special token, 10% unchanged. `whole_word_starts` (True where a token starts a word) picks whole
    words; `mask_only` (TrainConfig.mask_only, a deviation for comparing runs) makes every chosen token [MASK], the
    same tokens chosen."""
    if not 0.0 < mask_rate < 1.0:
        raise BertCoreError(f"mask_rate must be between 0 and 1 (BERT uses {MASK_RATE:g}), got {mask_rate!r}")
    ids = input_ids.long()
    cand = ~special_mask.bool()
    B, S = ids.shape
    if candidate_ids is None:
        never = set(ids[~cand].unique().tolist()) | {int(mask_id)}
        candidate_ids = torch.tensor([i for i in range(vocab_size) if i not in never], dtype=torch.long)
    candidate_ids = torch.as_tensor(candidate_ids, dtype=torch.long)
    if candidate_ids.numel() == 0:
        raise BertCoreError("no token ids are allowed as random replacements; the vocabulary holds only specials")
    # Google picks round(n * rate) positions per sequence. Rounding biases short sequences (10 tokens at 15%
    # would give 20%), so the count is rounded stochastically instead: exact per sequence, unbiased on average.
    k = torch.floor(cand.sum(1).to(torch.float64) * mask_rate
                    + torch.rand(B, generator=generator, dtype=torch.float64)).long()
    scores = torch.rand((B, S), generator=generator)
    if whole_word_starts is None:
        scores = scores.masked_fill(~cand, 2.0)
        rank = scores.argsort(dim=1).argsort(dim=1)
        chosen = cand & (rank < k[:, None])
    else:
        # A word = a start token plus the "##" pieces after it; a piece after a special token starts its own word.
        prev_cand = torch.cat([torch.zeros(B, 1, dtype=torch.bool), cand[:, :-1]], dim=1)
        starts = cand & (whole_word_starts.bool() | ~prev_cand)
        word = (starts.long().cumsum(1) - 1).clamp(min=0)
        n_words = starts.sum(1)
        length = torch.zeros((B, S), dtype=torch.long).scatter_add_(1, word, cand.long())
        word_scores = scores.masked_fill(torch.arange(S)[None, :] >= n_words[:, None], 2.0)
        order = word_scores.argsort(dim=1)
        # Whole words in random order, as Google's create_masked_lm_predictions does: a word that would take the
        # count past the budget is skipped, and shorter words after it may still fit.
        lengths = length.gather(1, order).tolist()
        taken_sorted = torch.zeros((B, S), dtype=torch.bool)
        for row, budget in enumerate(k.tolist()):
            used = 0
            for j, n in enumerate(lengths[row][:int(n_words[row])]):
                if used >= budget:
                    break
                if used + n <= budget:
                    taken_sorted[row, j] = True
                    used += n
        taken = torch.zeros((B, S), dtype=torch.bool).scatter_(1, order, taken_sorted)
        chosen = cand & taken.gather(1, word)
    if not chosen.any() and cand.any():
        # A batch with no label gives a NaN loss; pick one token so every batch teaches something.
        flat = torch.nonzero(cand.flatten()).squeeze(1)
        pick = flat[torch.randint(len(flat), (1,), generator=generator)]
        chosen.view(-1)[pick] = True
    u = torch.rand((B, S), generator=generator)
    if mask_only:
        u.zero_()  # every chosen token falls in the [MASK] share; the draws stay the same as with 80/10/10
    decisions = torch.full((B, S), NOT_CHOSEN, dtype=torch.long)
    decisions[chosen & (u < 0.8)] = MASKED
    decisions[chosen & (u >= 0.8) & (u < 0.9)] = RANDOM
    decisions[chosen & (u >= 0.9)] = KEPT
    replacement = candidate_ids[torch.randint(len(candidate_ids), (B, S), generator=generator)]
    masked = ids.clone()
    masked[decisions == MASKED] = int(mask_id)
    rand_pos = decisions == RANDOM
    masked[rand_pos] = replacement[rand_pos]
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return MaskingResult(input_ids=masked, mlm_labels=labels, decisions=decisions, original_ids=ids.clone())


# -- batches ---------------------------------------------------------------------------------------
def causal_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """A causal LM's labels in Hugging Face's convention: the input ids themselves, IGNORE_INDEX on padding (the
    model shifts them: position i is scored on token i + 1)."""
    return input_ids.masked_fill(attention_mask == 0, IGNORE_INDEX)


@dataclass
class Batch(DeviceBatch):
    """Padded tensors for one step (dynamic padding to the longest sequence), with the masking decisions.

    `mlm_labels[b, i]` is the token the model must predict at position i (IGNORE_INDEX where none): the original
    token for a masked LM, the next token for a causal one (`causal`), whose `decisions` are all NOT_CHOSEN."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor
    mlm_labels: torch.Tensor
    next_sentence_label: torch.Tensor
    decisions: torch.Tensor
    original_ids: torch.Tensor
    instances: list[NspInstance] = field(default_factory=list, repr=False)
    causal: bool = False

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """The keyword arguments of BertForPreTraining for this batch's masked-LM loss (no NSP label: the
        callers weigh the NSP loss themselves), or of BertLMHeadModel for its next-token loss (labels unshifted,
        as Hugging Face takes them)."""
        labels = causal_labels(self.input_ids, self.attention_mask) if self.causal else self.mlm_labels
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "token_type_ids": self.token_type_ids, "labels": labels}

    @property
    def num_tokens(self) -> int:
        return int(self.attention_mask.sum())

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def _mix(*parts: int) -> int:
    """A 63-bit seed from integers (seed, epoch, batch index), stable across runs and platforms."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h & 0x7FFFFFFFFFFFFFFF


class PretrainingStream(Protocol):
    """What a pretraining run reads its batches from: an endless, seeded, resumable iterator of global batches (under
    torchrun every rank reads the same, and takes its rows). PretrainingData, ShardStream and MixedStream are ones."""

    batch_size: int
    tokenizer: BertTokenizer

    @property
    def started(self) -> bool:
        """Whether a batch has been taken (a run's short-sequence phase is then over for good)."""

    @property
    def batches_per_epoch(self) -> int:
        """Batches in the current epoch (reading it builds the epoch: a corpus too small is refused)."""

    @property
    def token_counts(self) -> torch.Tensor:
        """Each token id's count in the training text, for the unigram baseline."""

    def __iter__(self) -> Iterator[Batch]: ...

    def __next__(self) -> Batch: ...

    def resized(self, seq_len: int, batch_size: int) -> PretrainingStream:
        """The same text cut to another length and batched anew, from its start: a run's short-sequence phase."""

    def state_dict(self) -> dict:
        """Where the stream stands (JSON-able), for trainer_state.json."""

    def load_state_dict(self, state: dict) -> None:
        """Continue from a `state_dict()`: the same text and settings give the same next batches."""

    def unigram_baseline(self, batches: Sequence[Batch]) -> dict:
        """The most-frequent-token baseline on `batches` (see `unigram_baseline`)."""


class BatchStream:
    """The one pretraining batch builder, for a tokenised text corpus (PretrainingData) and a shard folder
    (bert_core.data.shards.ShardStream) alike. A subclass says which examples batch j of an epoch holds (`examples`)
    and how many batches an epoch has; this masks them (or, for the next-token objective "clm", labels the next
    token), reads epoch after epoch and resumes exactly: batch j of epoch e is a pure function of (seed, e, j), its
    masks drawn from a generator seeded by them."""

    STATE_VERSION = 1
    MUST_MATCH: tuple[str, ...] = ()   # state_dict keys a resume refuses to change (the batches would)

    def __init__(self, tokenizer: BertTokenizer, max_seq_length: int, batch_size: int, mask_rate: float, seed: int,
                 nsp: bool, objective: str, whole_word_masking: bool = False, mask_only: bool = False):
        if objective not in OBJECTIVES:
            raise BertCoreError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
        if nsp and not objective_has_nsp(objective):
            raise BertCoreError(f"the {objective} objective has no next-sentence prediction: turn NSP off")
        if batch_size < 1:
            raise BertCoreError(f"batch_size must be at least 1, got {batch_size!r}")
        if not 0.0 < mask_rate < 1.0:
            raise BertCoreError(f"mask_rate must be between 0 and 1 (BERT uses {MASK_RATE:g}), got {mask_rate!r}")
        if not 16 <= max_seq_length <= tokenizer.model_max_length:
            raise BertCoreError(f"max_seq_length={max_seq_length} must be between 16 and the tokenizer's "
                                f"{tokenizer.model_max_length}")
        self.tokenizer = tokenizer
        self.max_seq_length, self.batch_size = int(max_seq_length), int(batch_size)
        self.mask_rate, self.seed, self.nsp, self.objective = float(mask_rate), int(seed), bool(nsp), objective
        self.whole_word_masking, self.mask_only = bool(whole_word_masking), bool(mask_only)
        vocab_size = tokenizer.vocab_size
        never = tokenizer.never_sample_ids
        self.candidate_ids = torch.tensor([i for i in range(vocab_size) if i not in never], dtype=torch.long)
        self._special = torch.zeros(vocab_size, dtype=torch.bool)
        self._special[torch.tensor(sorted(tokenizer.special_ids - {tokenizer.unk_id}))] = True
        self._continuation = torch.tensor(tokenizer.continuation_table(), dtype=torch.bool) if whole_word_masking else None
        self.epoch = 0
        self.position = 0

    @property
    def started(self) -> bool:
        return self.epoch > 0 or self.position > 0

    @property
    def batches_per_epoch(self) -> int:
        raise NotImplementedError

    def examples(self, epoch: int, j: int, generator: torch.Generator) -> list[NspInstance]:
        raise NotImplementedError

    def batch(self, epoch: int, j: int) -> Batch:
        """Batch `j` of epoch `epoch`: a pure function of the text, the settings and the seed."""
        generator = torch.Generator().manual_seed(_mix(self.seed, epoch, j))
        return self._make_batch(self.examples(epoch, j, generator), generator)

    def _make_batch(self, instances: Sequence[NspInstance], generator: torch.Generator) -> Batch:
        rows = [x.input_ids for x in instances]
        ids, attn = pad_rows(rows, self.tokenizer.pad_id), attention_mask(rows)
        common = dict(attention_mask=attn, token_type_ids=pad_rows([x.token_type_ids for x in instances]),
                      instances=list(instances), next_sentence_label=torch.tensor(
                          [int(x.is_random_next) for x in instances], dtype=torch.long))
        if self.objective == "clm":
            return Batch(input_ids=ids, mlm_labels=next_token_targets(causal_labels(ids, attn)),
                         decisions=torch.zeros_like(ids), original_ids=ids.clone(), causal=True, **common)
        starts = ~self._continuation[ids] if self._continuation is not None else None
        m = mask_tokens(ids, self._special[ids] | (attn == 0), generator, self.tokenizer.vocab_size,
                        self.tokenizer.mask_id, candidate_ids=self.candidate_ids, mask_rate=self.mask_rate,
                        whole_word_starts=starts, mask_only=self.mask_only)
        return Batch(input_ids=m.input_ids, mlm_labels=m.mlm_labels, decisions=m.decisions,
                     original_ids=m.original_ids, **common)

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        if self.position >= self.batches_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        batch = self.batch(self.epoch, self.position)
        self.position += 1
        return batch

    def state_dict(self) -> dict:
        return {"version": self.STATE_VERSION, "epoch": self.epoch, "position": self.position, "seed": self.seed,
                "batch_size": self.batch_size}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a `state_dict()`; refused where a MUST_MATCH setting differs (the batches would too)."""
        mine = self.state_dict()
        for key in self.MUST_MATCH:
            if key in state and state[key] != mine[key]:
                raise BertCoreError(f"the saved stream had {key}={state[key]!r} but this one has {mine[key]!r}; "
                                    "resume with the same text and settings")
        try:
            epoch, position = int(state["epoch"]), int(state["position"])
        except (KeyError, TypeError, ValueError) as exc:
            raise BertCoreError(f"data state is missing epoch/position ({exc}); the checkpoint's trainer state is "
                                "damaged") from exc
        if epoch < 0 or position < 0:
            raise BertCoreError(f"data state has a negative epoch or position: {state!r}")
        self.epoch, self.position = epoch, position

    def unigram_baseline(self, batches: Sequence[Batch]) -> dict:
        tok = self.tokenizer
        return unigram_baseline(self.token_counts, batches, never_ids=tok.special_ids - {tok.unk_id})


class PretrainingData(BatchStream):
    """A tokenised corpus as a PretrainingStream: each epoch builds fresh NSP pairs (rng seeded by seed and epoch) and
    shuffles them (with objective "clm", segments of contiguous text)."""

    def __init__(self, corpus, tokenizer, max_seq_length: int = 128, batch_size: int = 32, mask_rate: float = MASK_RATE,
                 seed: int = 0, nsp: bool = True, whole_word_masking: bool = False, mask_only: bool = False,
                 objective: str = "mlm"):
        super().__init__(tokenizer, max_seq_length, batch_size, mask_rate, seed, nsp, objective, whole_word_masking,
                         mask_only)
        self.corpus = corpus
        # Tokenise every sentence once, in one parallel call, then cut back into documents.
        sentences = iter(tokenizer.encode_batch(list(corpus.texts())))
        self.token_docs = [list(itertools.islice(sentences, len(doc))) for doc in corpus.documents]
        all_ids = torch.tensor([t for d in self.token_docs for s in d for t in s], dtype=torch.long)
        if not all_ids.numel():
            raise BertCoreError(f"corpus {corpus.name!r} has no tokens; give it some text")
        self.token_counts = torch.bincount(all_ids, minlength=tokenizer.vocab_size)   # for the unigram baseline
        self.num_tokens = int(all_ids.numel())
        self._instances_epoch: int | None = None
        self._instances: list[NspInstance] = []

    def build_instances(self, seed: int) -> list[NspInstance]:
        rng = random.Random(seed)
        inst = create_nsp_instances(self.token_docs, self.tokenizer, self.max_seq_length, rng=rng, nsp=self.nsp)
        rng.shuffle(inst)
        return inst

    def _epoch_instances(self, epoch: int) -> list[NspInstance]:
        if self._instances_epoch != epoch:
            self._instances = self.build_instances(_mix(self.seed, epoch, 0x4E5350))
            self._instances_epoch = epoch
            if not self._instances:
                c = self.corpus
                raise BertCoreError(
                    f"{c.name!r} gives no training examples: its {c.num_sentences} sentence(s) in {c.num_documents} "
                    "document(s) make no [CLS] A [SEP] B [SEP] pair. Give more text: at least a few dozen sentences "
                    "(a useful model needs thousands)")
        return self._instances

    @property
    def batches_per_epoch(self) -> int:
        """Full batches only (the count varies a little from epoch to epoch); a corpus smaller than one batch gives
        one short batch."""
        return max(len(self._epoch_instances(self.epoch)) // self.batch_size, 1)

    def examples(self, epoch: int, j: int, generator: torch.Generator) -> list[NspInstance]:
        return self._epoch_instances(epoch)[j * self.batch_size: (j + 1) * self.batch_size]

    def resized(self, max_seq_length: int, batch_size: int) -> "PretrainingData":
        """The same tokenised corpus, not tokenised again (TrainConfig has checked the short phase's sizes)."""
        other = copy.copy(self)
        other.max_seq_length, other.batch_size = int(max_seq_length), int(batch_size)
        other.epoch, other.position, other._instances_epoch, other._instances = 0, 0, None, []
        return other

    def state_dict(self) -> dict:
        return {**super().state_dict(), "max_seq_length": self.max_seq_length, "num_tokens": self.num_tokens}

    def eval_batches(self, n_batches: int | None = None, seed: int = 0) -> list[Batch]:
        """Fixed batches (same pairs and masks for a seed) for held-out evaluation; all when n_batches is None."""
        instances = self.build_instances(_mix(seed, EVAL_SALT))
        total = math.ceil(len(instances) / self.batch_size)
        n = total if n_batches is None else min(int(n_batches), total)
        return [self._make_batch(instances[j * self.batch_size: (j + 1) * self.batch_size],
                                 torch.Generator().manual_seed(_mix(seed, EVAL_SALT, j))) for j in range(n)]


def unigram_baseline(train_counts, batches: Sequence[Batch], never_ids: frozenset[int] = frozenset()) -> dict:
    """Masked-token accuracy of always guessing the most frequent training token, and the perplexity of
    unigram frequencies (add-one smoothed) on the labelled positions: what a model must beat to have learnt context."""
    counts = torch.as_tensor(train_counts, dtype=torch.float64).clone()
    if never_ids:
        counts[torch.tensor(sorted(never_ids))] = 0.0
    probs = (counts + 1.0) / (counts.sum() + counts.numel())
    top = int(counts.argmax())
    labels = torch.cat([b.mlm_labels[b.mlm_labels != IGNORE_INDEX] for b in batches]) if batches else torch.empty(0)
    if labels.numel() == 0:
        raise BertCoreError("no masked tokens to evaluate on; give some held-out text")
    accuracy = float((labels == top).double().mean())
    perplexity = float(torch.exp(-torch.log(probs[labels]).mean()))
    return {"accuracy": accuracy, "perplexity": perplexity, "token_id": top, "num_predictions": int(labels.numel())}


# ---------------------------------------------------------------------------------------------- `train`'s data


def _merge(corpora, name: str):
    if len(corpora) == 1:
        return corpora[0]
    docs = [doc for c in corpora for doc in c.documents]
    return Corpus(name=name, documents=docs, source=" + ".join(c.source for c in corpora))


def _heldout_record(corpus, heldout) -> dict:
    held = {tuple(d) for d in heldout.documents}
    indices = [i for i, d in enumerate(corpus.documents) if tuple(d) in held]
    return {"name": corpus.name, "source": str(heldout.source), "documents": len(corpus.documents),
            "heldout_documents": len(heldout.documents), "heldout_sentences": heldout.num_sentences,
            "heldout_document_indices": indices}


def _rank0_tokenizer(train):
    """Train the tokenizer on rank 0 and send it to every rank: the others skip the work, and all ranks are sure
    to share one vocabulary (training is deterministic, but ranks on other machines may run other library versions)."""
    rank = dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    tokenizer = train() if rank == 0 else None
    payload = tokenizer.tokenizer.to_str().encode("utf-8") if rank == 0 else b""
    size = torch.tensor([len(payload)], dtype=torch.long, device=device)
    dist.broadcast(size, src=0)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if rank == 0:
        buffer.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buffer, src=0)
    return tokenizer if rank == 0 else BertTokenizer(Tokenizer.from_str(bytes(buffer.cpu().tolist()).decode("utf-8")))


def build_datasets(specs: list[str], tokenizer, seq_len: int, batch_size: int, mask_rate: float, nsp: bool,
                   seed: int, heldout_fraction: float, world_size: int = 1, train_tokenizer=None,
                   whole_word_masking: bool = False, mask_only: bool = False, objective: str = "mlm"):
    """(train_data, eval_data, heldout_by_corpus, tokenizer, record): corpora loaded, a seeded fraction of each held
    out by document. A tokenizer None is trained on the training part only, so held-out text stays unseen."""
    corpora = [load_corpus(spec, seed=seed) for spec in specs]
    splits = [split_heldout(c, fraction=heldout_fraction, seed=seed) for c in corpora]
    train = _merge([s[0] for s in splits], "+".join(c.name for c in corpora))
    heldout = _merge([s[1] for s in splits], "heldout")
    record = {
        "seed": seed,
        "fraction": heldout_fraction,
        "method": "bert_core.data.corpora.split_heldout(corpus, fraction, seed) on each corpus",
        "corpora": [{"spec": spec, **_heldout_record(c, s[1])} for spec, c, s in zip(specs, corpora, splits)],
    }
    if tokenizer is None:
        trained = lambda: train_tok(train.texts(), vocab_size=train_tokenizer or 8000)  # noqa: E731
        tokenizer = _rank0_tokenizer(trained) if world_size > 1 else trained()
    common = dict(max_seq_length=seq_len, mask_rate=mask_rate, seed=seed, nsp=nsp,
                  whole_word_masking=whole_word_masking, mask_only=mask_only, objective=objective)
    # Every rank reads the same global batch and the Trainer gives each its slice of rows, so a run on N
    # processes with batch b is the same computation as one process with batch N*b (and resumes on any N).
    train_data = PretrainingData(train, tokenizer, batch_size=batch_size * world_size, **common)
    eval_data = PretrainingData(heldout, tokenizer, batch_size=batch_size, **common)
    heldout_by_corpus = {spec: s[1] for spec, s in zip(specs, splits)}
    return train_data, eval_data, heldout_by_corpus, tokenizer, record
