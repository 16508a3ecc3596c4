"""WordPiece tokenizers the BERT way: trained here in seconds, or loaded from a BERT folder (tokenizer.json or
vocab.txt)."""

from __future__ import annotations

import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from bert_core.errors import BertCoreError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
# Trained vocabularies put the specials first so that [PAD] is 0, matching BertConfig.pad_token_id.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
DEFAULT_MODEL_MAX_LENGTH = 512


def _bert_pipeline(tok: Tokenizer, lowercase: bool = True) -> None:
    """Attach BERT's normalizer, pre-tokenizer and decoder (the same pieces HF's BertTokenizerFast builds)."""
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None if lowercase else False, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")


def special_tokens_count(pair: bool) -> int:
    """The special tokens beside an input's text: [CLS] a [SEP] (2), or [CLS] a [SEP] b [SEP] (3) for a pair.
    Every budget of text tokens (an NSP pair, a question and its passage, a tagged sentence) is the length less
    these."""
    return 3 if pair else 2


def truncate_pair(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None, int]:
    """(a, b, tokens dropped) fitted into `budget` tokens as HF's longest_first: the shorter side keeps up to half
    the budget, the longer the rest (on a tie A counts as the shorter, as the `tokenizers` library does it)."""
    total = len(a) + (len(b) if b is not None else 0)
    if total <= budget:
        return list(a), (list(b) if b is not None else None), 0
    if b is None:
        return list(a[:budget]), None, total - budget
    if len(a) > len(b):
        keep_b = min(len(b), budget // 2)
        a, b = a[: budget - keep_b], b[:keep_b]
    else:
        keep_a = min(len(a), budget // 2)
        a, b = a[:keep_a], b[: budget - keep_a]
    return list(a), list(b), total - len(a) - len(b)


class BertTokenizer:
    """A BERT WordPiece tokenizer (wraps `tokenizers.Tokenizer`) with the special ids the data pipeline needs."""

    def __init__(self, tokenizer: Tokenizer, model_max_length: int = DEFAULT_MODEL_MAX_LENGTH,
                 do_lower_case: bool = True):
        missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
        if missing:
            raise BertCoreError(f"the tokenizer vocabulary lacks the special tokens {', '.join(missing)}; "
                                "use a BERT vocabulary (it must contain [PAD] [UNK] [CLS] [SEP] [MASK])")
        self.tokenizer = tokenizer
        self.model_max_length = int(model_max_length)
        self.do_lower_case = bool(do_lower_case)
        self.pad_id = tokenizer.token_to_id(PAD)
        self.unk_id = tokenizer.token_to_id(UNK)
        self.cls_id = tokenizer.token_to_id(CLS)
        self.sep_id = tokenizer.token_to_id(SEP)
        self.mask_id = tokenizer.token_to_id(MASK)
        self.special_ids = frozenset((self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id))
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        # [unusedN] rows of Google's vocabularies are specials too: never a random replacement.
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.never_sample_ids = self.special_ids | frozenset(i for t, i in vocab.items() if t.startswith("[unused")
                                                             or (t.startswith("[") and t.endswith("]") and t.isupper()))
        self._continuation = [False] * self.vocab_size
        for t, i in vocab.items():
            if t.startswith("##") and i < self.vocab_size:
                self._continuation[i] = True

    # -- encoding -------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no [CLS]/[SEP] added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of many texts at once (parallel in Rust); no specials added."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def tokenize(self, text: str) -> list[str]:
        """WordPiece strings of `text` (e.g. ['play', '##ing']), no specials."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def encode_pair(self, a: str, b: str | None = None, max_length: int | None = None) -> dict:
        """`[CLS] a [SEP] (b [SEP])` ids and token types, trimming the longer side from its end (HF's longest_first)."""
        max_length = self.model_max_length if max_length is None else int(max_length)
        ids_a = self.encode(a)
        ids_b = self.encode(b) if b is not None else None
        budget = max_length - special_tokens_count(pair=ids_b is not None)
        if budget < (2 if ids_b is not None else 1):
            raise BertCoreError(f"max_length={max_length} is too short to hold [CLS] text [SEP]; use at least 8")
        ids_a, ids_b, _ = truncate_pair(ids_a, ids_b, budget)
        if ids_b is None:
            input_ids = [self.cls_id, *ids_a, self.sep_id]
            return {"input_ids": input_ids, "token_type_ids": [0] * len(input_ids)}
        input_ids = [self.cls_id, *ids_a, self.sep_id, *ids_b, self.sep_id]
        types = [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1)
        return {"input_ids": input_ids, "token_type_ids": types}

    # -- decoding -------------------------------------------------------------------------------
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`, '##' pieces glued back to their word."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def id_to_token(self, i: int) -> str:
        tok = self.tokenizer.id_to_token(int(i))
        if tok is None:
            raise BertCoreError(f"token id {i} is outside the vocabulary (size {self.vocab_size})")
        return tok

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        return [self.id_to_token(i) for i in ids]

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)

    def continuation_table(self) -> list[bool]:
        """Indexed by id: True for '##' pieces (whole-word masking groups them with the word before)."""
        return self._continuation

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"BertTokenizer(vocab_size={self.vocab_size}, do_lower_case={self.do_lower_case})"

    # -- files ----------------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json (as HF writes them)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(folder / "tokenizer.json"))
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise BertCoreError("the vocabulary ids are not contiguous; cannot write vocab.txt")
        (folder / "vocab.txt").write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")
        specials = {"unk_token": UNK, "sep_token": SEP, "pad_token": PAD, "cls_token": CLS, "mask_token": MASK}
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": self.do_lower_case, "strip_accents": None,
                  "tokenize_chinese_chars": True, "model_max_length": self.model_max_length, **specials}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path) -> "BertTokenizer":
        """Load from a folder holding tokenizer.json, or only vocab.txt (e.g. a downloaded bert-base-uncased)."""
        folder = Path(folder)
        if folder.is_file():
            if folder.name not in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
                raise BertCoreError(f"{folder} is a file, not a tokenizer: give the folder that holds tokenizer.json "
                                    "or vocab.txt")
            folder = folder.parent
        elif not folder.is_dir():
            raise BertCoreError(f"tokenizer folder {folder} does not exist")
        config = {}
        config_file = folder / "tokenizer_config.json"
        if config_file.is_file():
            try:
                config = json.loads(config_file.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise BertCoreError(f"{config_file} is not valid JSON ({exc}); fix or delete it") from exc
        lower = bool(config.get("do_lower_case", True))
        max_len = config.get("model_max_length", DEFAULT_MODEL_MAX_LENGTH)
        # HF writes a huge sentinel when a tokenizer has no limit; BERT's positions stop at 512.
        max_len = DEFAULT_MODEL_MAX_LENGTH if not isinstance(max_len, int) or max_len > 10**6 else max_len
        if (folder / "tokenizer.json").is_file():
            try:
                tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as exc:  # the Rust side raises a plain Exception on bad JSON
                raise BertCoreError(f"{folder / 'tokenizer.json'} could not be read ({exc}); re-save the "
                                    "tokenizer") from exc
            if not isinstance(tok.model, models.WordPiece):
                raise BertCoreError(f"{folder / 'tokenizer.json'} is not a WordPiece tokenizer; BERT needs WordPiece")
            return cls(tok, model_max_length=max_len, do_lower_case=lower)
        vocab_file = folder / "vocab.txt"
        if vocab_file.is_file():
            return cls(_tokenizer_from_vocab(vocab_file, lower), model_max_length=max_len, do_lower_case=lower)
        raise BertCoreError(f"no tokenizer.json or vocab.txt in {folder}; point at a BERT checkpoint or tokenizer "
                            "folder")


def _tokenizer_from_vocab(vocab_file: Path, lowercase: bool) -> Tokenizer:
    try:
        lines = vocab_file.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise BertCoreError(f"{vocab_file} is not UTF-8 text; a BERT vocab.txt holds one token per line") from exc
    if lines and lines[-1] == "":
        lines.pop()
    vocab: dict[str, int] = {}
    for i, line in enumerate(lines):
        token = line.rstrip("\r")
        vocab.setdefault(token, i)  # HF keeps the first id of a duplicated line too
    if not vocab:
        raise BertCoreError(f"{vocab_file} is empty; a BERT vocab.txt holds one token per line")
    if UNK not in vocab:
        raise BertCoreError(f"{vocab_file} has no [UNK] line; it does not look like a BERT vocabulary")
    return _tokenizer_from_vocab_dict(vocab, lowercase)


def _tokenizer_from_vocab_dict(vocab: dict[str, int], lowercase: bool) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token=UNK, continuing_subword_prefix="##",
                                     max_input_chars_per_word=100))
    _bert_pipeline(tok, lowercase)
    # As in HF's BertTokenizerFast: "[MASK]" typed in text is the mask token, not "[", "mask", "]".
    tok.add_special_tokens([t for t in SPECIAL_TOKENS if t in vocab])
    if CLS in vocab and SEP in vocab:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{CLS}:0 $A:0 {SEP}:0", pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
            special_tokens=[(CLS, tok.token_to_id(CLS)), (SEP, tok.token_to_id(SEP))])
    return tok


def train_tokenizer(texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2) -> BertTokenizer:
    """An uncased BERT WordPiece tokenizer trained on `texts` ([PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4); the same
    texts always give the same vocabulary (`learn_wordpiece_vocab`), so a seed fixes a whole run."""
    if vocab_size < len(SPECIAL_TOKENS) + 26:
        raise BertCoreError(f"vocab_size={vocab_size} is too small; use at least 100 (BERT uses 30522)")
    tok = Tokenizer(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##", max_input_chars_per_word=100))
    _bert_pipeline(tok, lowercase=True)
    counts = word_counts(texts, tok)
    if not counts:
        raise BertCoreError("no text to train the tokenizer on; give a corpus with at least one non-empty sentence")
    vocab = learn_wordpiece_vocab(counts, vocab_size, min_frequency)
    return BertTokenizer(_tokenizer_from_vocab_dict({t: i for i, t in enumerate(vocab)}, lowercase=True))


def word_counts(texts: Iterable[str], tok: Tokenizer) -> Counter:
    """How often each word occurs after BERT's normalizer and pre-tokenizer; both act within whitespace-separated
    chunks, so each distinct chunk goes through them once."""
    raw: Counter = Counter()
    for text in texts:
        if text:
            raw.update(text.split())
    counts: Counter = Counter()
    normalize, pre_tokenize = tok.normalizer.normalize_str, tok.pre_tokenizer.pre_tokenize_str
    for chunk, n in raw.items():
        for word, _ in pre_tokenize(normalize(chunk)):
            counts[word] += n
    return counts


def learn_wordpiece_vocab(counts: dict[str, int], vocab_size: int, min_frequency: int = 2,
                          prefix: str = "##") -> list[str]:
    """WordPiece vocabulary by greedy pair merges, as the `tokenizers` WordPiece trainer builds it, but deterministic.

    From every character ("##" inside a word), add the merge of the most frequent adjacent pair (ties: the
    alphabetically first) until `vocab_size`, or no pair occurs `min_frequency` times. The `tokenizers` trainer
    breaks ties by hash order, so the same text gave a slightly different vocabulary on every run.
    """
    words = sorted(counts.items())
    syms = [[w[0]] + [prefix + ch for ch in w[1:]] for w, _ in words]
    freq = [c for _, c in words]
    vocab = list(SPECIAL_TOKENS) + sorted({s for ss in syms for s in ss} - set(SPECIAL_TOKENS))
    have = set(vocab)
    pair_count: dict[tuple[str, str], int] = defaultdict(int)
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, ss in enumerate(syms):
        for pair in zip(ss, ss[1:]):
            pair_count[pair] += freq[i]
            where[pair].add(i)
    heap = [(-c, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    cut = len(prefix)
    while len(vocab) < vocab_size and heap:
        neg, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -neg:
            continue  # a stale entry; the pair's current count was pushed when it changed
        if -neg < min_frequency:
            break
        merged = a + b[cut:]
        if merged not in have:  # two different merges can spell the same piece
            have.add(merged)
            vocab.append(merged)
        changed: set[tuple[str, str]] = set()
        for i in where.pop((a, b)):
            old = syms[i]
            new, j = [], 0
            while j < len(old):
                if j + 1 < len(old) and old[j] == a and old[j + 1] == b:
                    new.append(merged)
                    j += 2
                else:
                    new.append(old[j])
                    j += 1
            if len(new) == len(old):
                continue  # the pair left this word in an earlier merge
            for pair in zip(old, old[1:]):
                pair_count[pair] -= freq[i]
                changed.add(pair)
            for pair in zip(new, new[1:]):
                pair_count[pair] += freq[i]
                where[pair].add(i)
                changed.add(pair)
            syms[i] = new
        for pair in changed:
            c = pair_count.get(pair, 0)
            if c > 0:
                heapq.heappush(heap, (-c, *pair))
            else:
                pair_count.pop(pair, None)
        pair_count.pop((a, b), None)
    return vocab
