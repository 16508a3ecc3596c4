"""BERT (Devlin et al., 2019) in one file, with the module names of Hugging Face's `modeling_bert.py`, so that
`BertForPreTraining().state_dict()` has exactly Hugging Face's keys and weights move without a conversion table.

The architecture is the paper's: learned position embeddings, a LayerNorm on the embeddings, post-LN blocks
(LayerNorm after each residual addition), exact (erf) GELU, a tanh pooler on [CLS], and an MLM head of
dense + GELU + LayerNorm followed by a decoder tied to the word embeddings with its own bias.
Speed paths that change no numbers: the MLM head run only on the labelled positions when the full logits are not
requested, and one switch in attention: `scaled_dot_product_attention`, unless attention probabilities are
requested or CPU dropout is due, when the steps are written out. One that changes random numbers, not results:
dropout on the CPU draws its masks 16 bits at a time (`FastDropout`, from `fast_paths`). What each is worth, and
the paths that were removed for gaining too little: docs/benchmarks.md, "Speed paths".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from bert_core.errors import BertCoreError
from bert_core.model.config import BertConfig
from bert_core.model.fast_paths import FastDropout

IGNORE_INDEX = -100  # label value for tokens that are not predicted (Hugging Face's convention)

# No lambdas, so that a model pickles (the app sends one to its training process). "gelu" is the exact (erf) GELU of
# the original BERT; "gelu_new" Hugging Face's name for its tanh approximation.
_GELU_TANH = partial(F.gelu, approximate="tanh")
ACTIVATIONS = {"gelu": F.gelu, "gelu_new": _GELU_TANH, "gelu_pytorch_tanh": _GELU_TANH, "relu": F.relu}


@dataclass
class PreTrainingOutput:
    """What `BertForPreTraining` returns; `mlm_logits` is [B, S, V] when full, else [N, V] for the labelled rows."""

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    nsp_loss: torch.Tensor | None = None
    mlm_logits: torch.Tensor | None = None
    # Set when mlm_logits is sparse: bool [B, S], True where labels != -100 (rows of mlm_logits in row-major order).
    mlm_positions: torch.Tensor | None = None
    nsp_logits: torch.Tensor | None = None  # [B, 2]: class 0 = B follows A, class 1 = B is random
    attentions: tuple[torch.Tensor, ...] | None = None  # per layer [B, heads, S, S]
    hidden_states: tuple[torch.Tensor, ...] | None = None  # embeddings output, then each layer's, [B, S, H]


@dataclass
class ClassifierOutput:
    """What `BertForSequenceClassification` returns."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None  # [B, num_labels]
    attentions: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


@dataclass
class QuestionAnsweringOutput:
    """What `BertForQuestionAnswering` returns: a start and an end score for every token."""

    loss: torch.Tensor | None = None
    start_logits: torch.Tensor | None = None  # [B, S]
    end_logits: torch.Tensor | None = None  # [B, S]
    attentions: tuple[torch.Tensor, ...] | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class BertEmbeddings(nn.Module):
    """Sum of word, position and token-type (segment) embeddings, then LayerNorm and dropout."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = FastDropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention with separate query/key/value projections."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = FastDropout(config.attention_probs_dropout_prob)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.num_attention_heads, self.attention_head_size).transpose(1, 2)

    def forward(self, hidden_states, additive_mask, output_attentions=False):
        q = self._heads(self.query(hidden_states))
        k = self._heads(self.key(hidden_states))
        v = self._heads(self.value(hidden_states))
        # The model's one switch between a plain path and a fast one: the steps written out when the probabilities
        # are asked for, and for dropout on the CPU (where scaled_dot_product_attention runs these same steps with
        # torch's slower dropout masks); else scaled_dot_product_attention.
        cpu_dropout = self.training and self.dropout.p > 0 and hidden_states.device.type == "cpu"
        if output_attentions or cpu_dropout:
            scores = (q / math.sqrt(self.attention_head_size)) @ k.transpose(-1, -2)  # scaling q: half the elements
            if additive_mask is not None:
                scores = scores + additive_mask
            probs = scores.softmax(dim=-1)
            context = self.dropout(probs) @ v
        else:
            probs = None
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask,
                                                     dropout_p=self.dropout.p if self.training else 0.0)
        b, _, s, _ = context.shape
        return context.transpose(1, 2).reshape(b, s, -1), probs if output_attentions else None


class BertSelfOutput(nn.Module):
    """Projection of the attention output, then dropout, residual add and LayerNorm (post-LN)."""

    def __init__(self, config: BertConfig, width: int | None = None):
        super().__init__()
        self.dense = nn.Linear(width or config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = FastDropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + input_tensor)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, hidden_states, additive_mask, output_attentions=False):
        context, probs = self.self(hidden_states, additive_mask, output_attentions)
        return self.output(context, hidden_states), probs


class BertIntermediate(nn.Module):
    """The feed-forward expansion (H -> 4H) and its activation."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = ACTIVATIONS[config.hidden_act]

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class BertOutput(BertSelfOutput):
    """The feed-forward contraction (4H -> H), dropout, residual add and LayerNorm (post-LN)."""

    def __init__(self, config: BertConfig):
        super().__init__(config, config.intermediate_size)


class BertLayer(nn.Module):
    """One Transformer encoder block: attention sub-layer, then feed-forward sub-layer."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, hidden_states, additive_mask, output_attentions=False):
        attention_output, probs = self.attention(hidden_states, additive_mask, output_attentions)
        return self.output(self.intermediate(attention_output), attention_output), probs


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, hidden_states, additive_mask, output_attentions=False, output_hidden_states=False):
        all_hidden = [hidden_states] if output_hidden_states else None
        all_probs = [] if output_attentions else None
        for layer in self.layer:
            hidden_states, probs = layer(hidden_states, additive_mask, output_attentions)
            if output_hidden_states:
                all_hidden.append(hidden_states)
            if output_attentions:
                all_probs.append(probs)
        return hidden_states, all_hidden, all_probs


class BertPooler(nn.Module):
    """dense + tanh on the [CLS] token's final hidden state: the sentence-level vector for NSP and classifiers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))


def _init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: weights from N(0, std), zero biases, LayerNorm weight 1 and bias 0."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


def _check_inputs(config: BertConfig, input_ids, attention_mask, token_type_ids):
    if input_ids.dim() != 2:
        raise BertCoreError(f"input_ids must have shape [batch, sequence], got {tuple(input_ids.shape)}")
    if input_ids.shape[1] > config.max_position_embeddings:
        raise BertCoreError(f"sequence of {input_ids.shape[1]} tokens is longer than the model's "
                            f"{config.max_position_embeddings} positions; truncate it")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    for name, t in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if t.shape != input_ids.shape:
            raise BertCoreError(f"{name} has shape {tuple(t.shape)} but input_ids has {tuple(input_ids.shape)}")
    return attention_mask, token_type_ids


class BertModel(nn.Module):
    """The encoder: embeddings, a stack of Transformer layers, and the pooler."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None

    def additive_mask(self, attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
        """The [B, 1, 1 or S, S] mask added to attention scores: 0 where allowed, a huge negative elsewhere; None
        when nothing is masked (no padding, bidirectional): adding zeros changes nothing, and without a mask
        scaled_dot_product_attention skips reading one (on one CPU core with dropout 0.1, one attention call at
        batch 32 x 4 heads x 128 tokens took 46 ms instead of 58 ms). The check costs a device sync on CUDA."""
        if self.config.attention != "causal" and bool(attention_mask.bool().all()):
            return None
        allowed = attention_mask[:, None, None, :].bool()
        if self.config.attention == "causal":
            s = attention_mask.shape[1]
            allowed = allowed & torch.ones(s, s, dtype=torch.bool, device=attention_mask.device).tril()
        # Hugging Face uses the dtype's minimum rather than -inf, so a fully masked row gives uniform weights, not NaN.
        return torch.zeros(allowed.shape, dtype=dtype, device=attention_mask.device).masked_fill(
            ~allowed, torch.finfo(dtype).min)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None,
                output_attentions=False, output_hidden_states=False):
        attention_mask, token_type_ids = _check_inputs(self.config, input_ids, attention_mask, token_type_ids)
        hidden = self.embeddings(input_ids, token_type_ids)
        mask = self.additive_mask(attention_mask, hidden.dtype)
        sequence_output, all_hidden, all_probs = self.encoder(hidden, mask, output_attentions, output_hidden_states)
        pooled = self.pooler(sequence_output) if self.pooler is not None else None
        return (sequence_output, pooled, tuple(all_hidden) if all_hidden is not None else None,
                tuple(all_probs) if all_probs is not None else None)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class BertLMPredictionHead(nn.Module):
    """MLM head: transform, then a decoder whose weight is the word-embedding matrix and whose bias is `bias`."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias  # one parameter under two names, as in Hugging Face

    def forward(self, hidden_states):
        return self.decoder(self.transform(hidden_states))


def _lm_head(head: BertLMPredictionHead, sequence_output: torch.Tensor, targets: torch.Tensor | None, full: bool):
    """(logits, loss, positions) of the LM head for `targets` (the token each position must predict, IGNORE_INDEX
    where none): full logits [B, S, V] with positions None, or sparse ones, a row per position that has a target."""
    if full:
        logits = head(sequence_output)
        loss = None if targets is None else F.cross_entropy(
            logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX)
        return logits, loss, None
    if targets is None:
        raise BertCoreError("sparse logits need labels: pass labels or full_mlm_logits=True")
    # Only ~15% of tokens carry an MLM label; the decoder (H x vocab) is the largest matmul of a small BERT, so
    # running the head on those rows alone gives the same loss for a fraction of the work.
    positions = targets != IGNORE_INDEX
    logits = head(sequence_output[positions])
    loss = (F.cross_entropy(logits.float(), targets[positions]) if logits.shape[0]
            else logits.sum() * 0.0)  # nothing to predict: zero loss, not NaN
    return logits, loss, positions


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


class ModelParts:
    """What every model class declares for those who look inside it (bert_core.inspect.kit), so none probes."""

    has_nsp_head = False                 # a next-sentence head (cls.seq_relationship)
    label_names: list[str] | None = None  # a classifier's or tagger's names, as its folder gave them (model.hf)
    missing_keys: tuple | list = ()      # weights its folder lacked, freshly initialised (model.hf.load_pretrained)

    @property
    def lm_head(self) -> nn.Module | None:
        """The language-model head (`cls.predictions`), where the model has one."""
        return None


class BertForPreTraining(ModelParts, nn.Module):
    """BERT with its two pretraining heads: masked-language modelling and next-sentence prediction."""

    has_nsp_head = True
    lm_head = property(lambda self: self.cls.predictions)

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.apply(lambda m: _init_weights(m, config.initializer_range))
        # Tie after init: the decoder reads the word-embedding matrix (Press & Wolf, 2017; as in BERT).
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, next_sentence_label=None,
                output_attentions=False, output_hidden_states=False, full_mlm_logits=None) -> PreTrainingOutput:
        """Run the model; with labels, return losses too. `full_mlm_logits=None` means full only when labels is None."""
        if full_mlm_logits is None:
            full_mlm_logits = labels is None
        sequence_output, pooled, hidden_states, attentions = self.bert(input_ids, attention_mask, token_type_ids,
                                                                       output_attentions, output_hidden_states)
        mlm_logits, mlm_loss, positions = _lm_head(self.cls.predictions, sequence_output, labels, full_mlm_logits)
        nsp_loss = None
        nsp_logits = self.cls.seq_relationship(pooled)
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.reshape(-1))
        losses = [x for x in (mlm_loss, nsp_loss) if x is not None]
        return PreTrainingOutput(loss=sum(losses) if losses else None, mlm_loss=mlm_loss, nsp_loss=nsp_loss,
                                 mlm_logits=mlm_logits, mlm_positions=positions, nsp_logits=nsp_logits,
                                 attentions=attentions, hidden_states=hidden_states)


class BertOnlyMLMHead(nn.Module):
    """The language-model head alone (no NSP), under Hugging Face's name `cls.predictions`."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


def next_token_targets(labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's causal-LM labels (label i is token i) as the target of each position's prediction: position i
    predicts label i + 1, and the last position predicts nothing (IGNORE_INDEX), as transformers' ForCausalLMLoss."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


class BertLMHeadModel(ModelParts, nn.Module):
    """GPT in BERT's house: the same encoder with causal attention (each token sees itself and the tokens before
    it), no pooler, and the LM head predicting the next token; Hugging Face's `BertLMHeadModel` with
    `is_decoder=True`, key for key. It returns a PreTrainingOutput whose `mlm_*` fields hold the next-token loss and
    logits (the same head, `cls.predictions`), so the Trainer and the evaluation run it as they run MLM."""

    lm_head = property(lambda self: self.cls.predictions)

    def __init__(self, config: BertConfig):
        super().__init__()
        if config.attention != "causal":
            raise BertCoreError("a next-token model needs causal attention (config attention='causal'): with "
                                "bidirectional attention every position would see the token it must predict")
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.apply(lambda m: _init_weights(m, config.initializer_range))
        self.cls.predictions.decoder.weight = self.bert.embeddings.word_embeddings.weight  # tied, as in BERT

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, next_sentence_label=None,
                output_attentions=False, output_hidden_states=False, full_mlm_logits=None) -> PreTrainingOutput:
        """`labels` as Hugging Face's (input_ids, padding IGNORE_INDEX); the loss is over next_token_targets(labels).
        Logits are [B, S, V], or with `full_mlm_logits=False` the rows of positions that have a target."""
        if next_sentence_label is not None:
            raise BertCoreError("a next-token model has no next-sentence prediction; leave next_sentence_label out")
        if full_mlm_logits is None:
            full_mlm_logits = labels is None
        sequence_output, _, hidden_states, attentions = self.bert(input_ids, attention_mask, token_type_ids,
                                                                  output_attentions, output_hidden_states)
        targets = next_token_targets(labels) if labels is not None else None
        logits, loss, positions = _lm_head(self.cls.predictions, sequence_output, targets, full_mlm_logits)
        return PreTrainingOutput(loss=loss, mlm_loss=loss, mlm_logits=logits, mlm_positions=positions,
                                 attentions=attentions, hidden_states=hidden_states)


def pretraining_model(config: BertConfig) -> nn.Module:
    """A fresh BertLMHeadModel for causal attention, else BertForPreTraining."""
    return BertLMHeadModel(config) if config.attention == "causal" else BertForPreTraining(config)


def is_causal(model: nn.Module) -> bool:
    """Whether `model` predicts the next token (causal attention) rather than filling in masked ones."""
    return model.config.attention == "causal"


# Which vector the sequence classifier reads. "cls": BERT's pooled [CLS] (dense + tanh on position 0), as the paper
# and Hugging Face's BertForSequenceClassification do. "last": the final hidden state of the last real (non-padding)
# token, fed straight to the linear layer, as GPT-1 did with its end token (Radford et al., 2018, section 3.3). A
# deviation from BERT for causal models: under causal attention position 0 sees only itself, so [CLS] would carry
# nothing of the sentence, while the last token ([SEP] here, our end token) has seen all of it.
CLS_POOLING, LAST_TOKEN_POOLING = "cls", "last"
# Another deviation, offered to compare against [CLS] (Reimers and Gurevych 2019 pooled sentence vectors so): the
# mean of the final hidden states over the real tokens, [CLS] and [SEP] included, with no pooler. Like "last", a
# folder saved with it loads as trained only here (transformers' classifier always reads the pooled [CLS]).
MEAN_POOLING = "mean"
POOLING_KINDS = (CLS_POOLING, LAST_TOKEN_POOLING, MEAN_POOLING)


def default_pooling(config: BertConfig) -> str:
    """The classifier's reading for a model of this kind: the last token for a causal model, else [CLS]."""
    return LAST_TOKEN_POOLING if config.attention == "causal" else CLS_POOLING


def last_token_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """[B] index of each row's last non-padding position (wherever the padding sits)."""
    flipped = attention_mask.flip(1).ne(0).int().argmax(1)
    return attention_mask.shape[1] - 1 - flipped


class BertForSequenceClassification(ModelParts, nn.Module):
    """BERT with a classifier on the pooled [CLS] vector: pooled -> dropout -> linear. With `pooling="last"` (the
    default for a causal model, see LAST_TOKEN_POOLING) there is no pooler and the classifier reads the last real
    token's hidden state instead; with `pooling="mean"` (MEAN_POOLING) the mean of the real tokens' states."""

    def __init__(self, config: BertConfig, num_labels: int = 2, pooling: str | None = None):
        super().__init__()
        if num_labels < 2:
            raise BertCoreError(f"a classifier needs at least 2 labels, got {num_labels}")
        pooling = default_pooling(config) if pooling is None else pooling
        if pooling not in POOLING_KINDS:
            raise BertCoreError(f"pooling must be {' or '.join(map(repr, POOLING_KINDS))}, got {pooling!r}")
        self.config = config
        self.num_labels = num_labels
        self.pooling = pooling
        self.bert = BertModel(config, add_pooling_layer=pooling == CLS_POOLING)
        self.dropout = FastDropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.apply(lambda m: _init_weights(m, config.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_attentions=False, output_hidden_states=False) -> ClassifierOutput:
        sequence_output, pooled, hidden_states, attentions = self.bert(input_ids, attention_mask, token_type_ids,
                                                                       output_attentions, output_hidden_states)
        if self.pooling == LAST_TOKEN_POOLING:
            mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
            rows = torch.arange(input_ids.shape[0], device=input_ids.device)
            pooled = sequence_output[rows, last_token_positions(mask)]
        elif self.pooling == MEAN_POOLING:
            mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
            weights = mask.ne(0).to(sequence_output.dtype).unsqueeze(-1)
            pooled = (sequence_output * weights).sum(1) / weights.sum(1).clamp(min=1)
        logits = self.classifier(self.dropout(pooled))
        loss = F.cross_entropy(logits.float(), labels.reshape(-1)) if labels is not None else None
        return ClassifierOutput(loss=loss, logits=logits, attentions=attentions, hidden_states=hidden_states)


class BertForTokenClassification(ModelParts, nn.Module):
    """BERT with a label for every token: each final hidden state -> dropout -> linear (no pooler), as Hugging
    Face's BertForTokenClassification. Positions labelled IGNORE_INDEX (a word's later WordPieces, the specials,
    padding) are left out of the loss."""

    def __init__(self, config: BertConfig, num_labels: int = 2):
        super().__init__()
        if num_labels < 2:
            raise BertCoreError(f"a tagger needs at least 2 tags, got {num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.bert = BertModel(config, add_pooling_layer=False)
        self.dropout = FastDropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_labels)
        self.apply(lambda m: _init_weights(m, config.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_attentions=False, output_hidden_states=False) -> ClassifierOutput:
        sequence_output, _, hidden_states, attentions = self.bert(input_ids, attention_mask, token_type_ids,
                                                                  output_attentions, output_hidden_states)
        logits = self.classifier(self.dropout(sequence_output))  # [B, S, num_labels]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().reshape(-1, self.num_labels), labels.reshape(-1),
                                   ignore_index=IGNORE_INDEX)
        return ClassifierOutput(loss=loss, logits=logits, attentions=attentions, hidden_states=hidden_states)


class BertForQuestionAnswering(ModelParts, nn.Module):
    """BERT for answer spans (SQuAD): one linear layer gives every token a start and an end score (no pooler), as
    Hugging Face's BertForQuestionAnswering. The loss is the mean of the start and end cross-entropies; a position
    outside the sequence (as Hugging Face clamps it) is ignored."""

    num_labels = 2  # start, end: the width of qa_outputs, as Hugging Face's config.num_labels

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.apply(lambda m: _init_weights(m, config.initializer_range))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None, end_positions=None,
                output_attentions=False, output_hidden_states=False) -> QuestionAnsweringOutput:
        sequence_output, _, hidden_states, attentions = self.bert(input_ids, attention_mask, token_type_ids,
                                                                  output_attentions, output_hidden_states)
        start_logits, end_logits = self.qa_outputs(sequence_output).unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            ignored = start_logits.shape[1]
            start = start_positions.reshape(-1).clamp(0, ignored)
            end = end_positions.reshape(-1).clamp(0, ignored)
            loss = (F.cross_entropy(start_logits.float(), start, ignore_index=ignored)
                    + F.cross_entropy(end_logits.float(), end, ignore_index=ignored)) / 2
        return QuestionAnsweringOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                       attentions=attentions, hidden_states=hidden_states)


_LAYER_INDEX = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")


def _depth(name: str, num_layers: int) -> int:
    """How far from the input a parameter sits: embeddings 0, encoder layer i at i + 1, pooler and heads above."""
    if ".embeddings." in f".{name}":
        return 0
    m = _LAYER_INDEX.search(name)
    return int(m.group(1)) + 1 if m else num_layers + 1


def param_groups(model: nn.Module, weight_decay: float = 0.01, layer_decay: float = 1.0) -> list[dict]:
    """AdamW parameter groups as in BERT: weight decay on weight matrices, none on biases and LayerNorm weights.

    With `layer_decay` < 1 (layer-wise learning-rate decay, Howard and Ruder 2018; Clark et al. 2020 for ELECTRA),
    each group's "lr_scale" is layer_decay ** (distance from the top): the heads train at the full rate, each layer
    below at `layer_decay` times the one above, the embeddings least. The optimizer's users multiply the scheduled
    rate by it."""
    num_layers = model.config.num_hidden_layers
    groups: dict[tuple[bool, int], list] = {}
    for name, param in model.named_parameters():  # shared (tied) parameters appear once
        if not param.requires_grad:
            continue
        no_decay = name.endswith("bias") or "LayerNorm" in name
        depth = _depth(name, num_layers) if layer_decay != 1.0 else num_layers + 1
        groups.setdefault((no_decay, depth), []).append(param)
    return [{"params": params, "weight_decay": 0.0 if no_decay else weight_decay,
             "lr_scale": layer_decay ** (num_layers + 1 - depth)}
            for (no_decay, depth), params in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1]))]


def adamw(model: nn.Module, lr: float, weight_decay: float = 0.01, betas=(0.9, 0.999), eps: float = 1e-6,
          layer_decay: float = 1.0):
    """BERT's AdamW (groups from `param_groups`), with torch's fused kernel: one pass over each parameter instead
    of a dozen small ops (on a `mini` training step, one CPU core: 1-8% faster in noisy runs). Same update
    rule and the same state format, so checkpoints written with either load in both."""
    groups = param_groups(model, weight_decay, layer_decay)
    for group in groups:
        group["lr"] = lr * group["lr_scale"]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
