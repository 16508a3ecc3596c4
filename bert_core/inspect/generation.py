"""Text generation with a causal (GPT-style) model: greedy, or sampled with a temperature and top-k from a seeded
torch.Generator, recorded token by token (its probability, the alternatives). No key/value cache: the models are
tiny, the continuations a few dozen tokens, and the plain loop is the one a student can read."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from bert_core.errors import BertCoreError
from bert_core.inspect.inspection import BIDIRECTIONAL_CANNOT_CONTINUE
from bert_core.inspect.kit import device_of, evaluating
from bert_core.model.bert import is_causal

STRATEGIES = ("greedy", "sample")
MAX_NEW_TOKENS = 200
# Why generation stops; said to the user beside the text.
STOP_END = "the model predicted [SEP], the end of a text"
STOP_LENGTH = "the number of new tokens asked for was reached"
STOP_POSITIONS = "the model's positions are used up"


@dataclass
class GenerationStep:
    """One generated token: what it is, how likely the model made it, and what else it weighed."""

    token: str
    token_id: int
    probability: float  # under the distribution it was drawn from (after temperature and top-k)
    alternatives: list[tuple[str, float]]  # the most likely tokens of that distribution, most likely first


@dataclass
class Generation:
    """A prompt and its continuation, token by token."""

    prompt_tokens: list[str]
    steps: list[GenerationStep] = field(default_factory=list)
    text: str = ""           # the continuation alone, as words
    stopped: str = ""        # why it ended (STOP_*)
    truncated_prompt: int = 0  # prompt tokens dropped from the front to leave room for new ones

    @property
    def token_ids(self) -> list[int]:
        return [s.token_id for s in self.steps]


def _check(model, strategy: str, temperature: float, top_k: int, max_new_tokens: int) -> None:
    if not is_causal(model):
        raise BertCoreError(BIDIRECTIONAL_CANNOT_CONTINUE)
    if strategy not in STRATEGIES:
        raise BertCoreError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if not isinstance(temperature, (int, float)) or not 0 < temperature <= 100:
        raise BertCoreError(f"temperature must be above 0 (and at most 100), got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise BertCoreError(f"top-k must be 0 (all tokens) or a positive whole number, got {top_k!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) \
            or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise BertCoreError(f"the number of new tokens must be between 1 and {MAX_NEW_TOKENS}, got {max_new_tokens!r}")


def next_token_distribution(logits: torch.Tensor, strategy: str, temperature: float, top_k: int,
                            banned: torch.Tensor) -> torch.Tensor:
    """The next token's probabilities from one position's logits [V]: greedy reads the model's own; sampling divides
    by `temperature` and keeps the `top_k` best (0: all). `banned` ids (specials) get probability 0."""
    logits = logits.float().masked_fill(banned, float("-inf"))
    if strategy == "sample":
        logits = logits / temperature
        if 0 < top_k < logits.numel():
            kth = logits.topk(top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.softmax(logits, dim=-1)


def generate(model, tokenizer, prompt: str, max_new_tokens: int = 20, strategy: str = "greedy",
             temperature: float = 1.0, top_k: int = 0, seed: int = 0, alternatives: int = 5) -> Generation:
    """Continue `prompt` with a causal model, greedy or sampled with `seed`, to [SEP], the length or its positions."""
    _check(model, strategy, temperature, top_k, max_new_tokens)
    if not isinstance(prompt, str) or not prompt.strip():
        raise BertCoreError("the prompt is empty: type the start of a text")
    ids = [tokenizer.cls_id, *tokenizer.encode(prompt)]  # [CLS] opens every training segment: the start of text
    if len(ids) == 1:
        raise BertCoreError("the prompt produced no tokens: type some words")
    limit = int(model.config.max_position_embeddings)
    dropped = max(0, len(ids) + 1 - limit)  # keep [CLS] and the end of the prompt, with room for one new token
    if dropped:
        ids = [ids[0], *ids[1 + dropped:]]
    result = Generation(prompt_tokens=tokenizer.convert_ids_to_tokens(ids), truncated_prompt=dropped)
    device = device_of(model)
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    vocab = int(model.config.vocab_size)
    banned = torch.zeros(vocab, dtype=torch.bool)
    banned[[i for i in (tokenizer.pad_id, tokenizer.cls_id, tokenizer.mask_id) if i < vocab]] = True
    with evaluating(model):
        while len(result.steps) < max_new_tokens and len(ids) < limit:
            x = torch.tensor([ids], dtype=torch.long, device=device)
            logits = model(x, full_mlm_logits=True).mlm_logits[0, -1].cpu()
            probs = next_token_distribution(logits, strategy, temperature, top_k, banned)
            chosen = int(probs.argmax() if strategy == "greedy" else torch.multinomial(probs, 1, generator=generator))
            values, indices = probs.topk(min(max(1, alternatives), vocab))
            result.steps.append(GenerationStep(
                token=tokenizer.id_to_token(chosen), token_id=chosen, probability=float(probs[chosen]),
                alternatives=[(tokenizer.id_to_token(i), float(v)) for v, i in zip(values.tolist(), indices.tolist())
                              if v > 0]))
            ids.append(chosen)
            if chosen == tokenizer.sep_id:
                result.stopped = STOP_END
                break
    result.stopped = result.stopped or (STOP_LENGTH if len(result.steps) >= max_new_tokens else STOP_POSITIONS)
    result.text = tokenizer.decode(result.token_ids, skip_special_tokens=True)
    return result


def step_rows(result: Generation) -> list[dict]:
    """The generated tokens as the app's table rows: step, token, its probability, the other candidates."""
    return [{"step": n, "token": s.token, "probability": round(s.probability, 4),
             "other candidates": ", ".join(f"{t} {p:.1%}" for t, p in s.alternatives if t != s.token)}
            for n, s in enumerate(result.steps, 1)]
