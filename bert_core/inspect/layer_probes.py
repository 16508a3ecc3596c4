"""What each layer knows: linear probes on the hidden state after the embeddings and after each layer, for part of
speech and chunk tags (CoNLL-2000 carries both), scored on held-out sentences, against two controls: the same probe
on a randomly initialised model of the same shape, and Hewitt and Liang's (2019) control task (each word type a
fixed random tag), whose gap to the real task is the probe's selectivity. A word is read at its first WordPiece, the
piece token tagging labels (data.token_tags_data.encode_tagged).

The probe is ridge regression onto one-hot tags, solved in closed form: one solve a layer serves every task and
control at once, so every layer's probes fit in about a second on a CPU. A softmax regression (Adam, 300 full-batch
steps) came within 4 points of it on the shipped mini, and took over a hundred times as long."""

from __future__ import annotations

import functools
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch

from bert_core.data.token_tags_data import TaggedSentences, encode_tagged, read_conll
from bert_core.errors import BertCoreError
from bert_core.data.task_downloads import local_task_csv
from bert_core.inspect import word_class_timelapse
from bert_core.inspect.kit import device_of, hidden_states, kept
from bert_core.inspect.word_class_timelapse import WordClassProbe
from bert_core.model.bert import IGNORE_INDEX

FIT_SENTENCES, TEST_SENTENCES = 200, 100   # about 4,700 words to fit on and 2,400 held out, from CoNLL-2000
# The penalty per token on standardised features, chosen on the fit sentences alone (a 3:1 split, bert-mini-english):
# 1e-4 to 1 differ by under 5 points; 1e-3 is within half a point of the best and keeps the solve well conditioned.
RIDGE = 1e-3
SEED = 0
TASKS = ("part of speech", "chunk")
BATCH = 32


@dataclass
class TaskProbe:
    """One task's held-out accuracy at the embeddings (index 0) and after each layer."""

    task: str
    tags: int                   # how many tags the task has
    accuracy: np.ndarray        # [L + 1] the model's hidden states
    random_model: np.ndarray    # [L + 1] a randomly initialised model of the same shape
    control: np.ndarray         # [L + 1] the control task (each word type a fixed random tag) on the model
    majority: float             # always guessing the fit sentences' most frequent tag

    @property
    def selectivity(self) -> np.ndarray:
        """Accuracy on the real task minus on the control task: what the probe reads that is not word identity."""
        return self.accuracy - self.control

    @property
    def best(self) -> int:
        return int(np.argmax(self.accuracy))


@dataclass
class LayerProbes:
    tasks: list[TaskProbe]
    fit_sentences: int
    test_sentences: int
    fit_words: int
    test_words: int
    seconds_states: float       # reading the sentences through the model and its random twin
    seconds_fit: float          # every probe's solve and score


def probe_accuracy(x_fit: torch.Tensor, y_fit: list[torch.Tensor], x_test: torch.Tensor, y_test: list[torch.Tensor],
                   ridge: float = RIDGE) -> np.ndarray:
    """[T, L] held-out accuracy of a linear probe per layer and task: x_* are [L, N, H] features, y_* T lists of
    [N] tag ids. Features are standardised on the fit set; W = (XᵀX + ridge·N·I)⁻¹ XᵀY for centred one-hot Y."""
    x_fit, x_test = x_fit.double(), x_test.double()
    mean, std = x_fit.mean(1, keepdim=True), x_fit.std(1, keepdim=True).clamp_min(1e-6)
    a, b = (x_fit - mean) / std, (x_test - mean) / std
    sizes = [int(max(f.max(), t.max())) + 1 for f, t in zip(y_fit, y_test)]
    onehot = torch.cat([torch.nn.functional.one_hot(y, k) for y, k in zip(y_fit, sizes)], 1).double()
    target_mean = onehot.mean(0)
    n, h = a.shape[1], a.shape[2]
    gram = a.transpose(1, 2) @ a + ridge * n * torch.eye(h, dtype=a.dtype)
    # Cholesky, not torch.linalg.solve: the ridge makes the Gram matrix positive definite, and the batched LU solve
    # failed on a 2-thread CPU (oneMKL's DLASWP "Parameter 6 was incorrect", then "Pivots given to lu_solve").
    w = torch.cholesky_solve(a.transpose(1, 2) @ (onehot - target_mean), torch.linalg.cholesky(gram))   # [L, H, tags]
    scores = (b @ w + target_mean).split(sizes, dim=2)
    return np.stack([(s.argmax(2) == y).double().mean(1).numpy() for s, y in zip(scores, y_test)])


def control_tags(words: list[list[str]], tags: list[list[int]], seed: int = SEED) -> list[list[int]]:
    """Hewitt and Liang's control task: each word type (lower-cased, as the models read it) gets one tag, drawn
    once from the tags' own frequencies; a probe that scores well on it is memorising words."""
    counts = sorted(Counter(t for sentence in tags for t in sentence).items())
    types = sorted({w.lower() for sentence in words for w in sentence})
    drawn = random.Random(seed).choices([t for t, _ in counts], [c for _, c in counts], k=len(types))
    fixed = dict(zip(types, drawn))
    return [[fixed[w.lower()] for w in sentence] for sentence in words]


def word_states(model, tokenizer, data: TaggedSentences) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """([L + 1, N, H] the hidden state of each word's first piece after the embeddings and each layer, the
    (sentence, word) of each of the N rows)."""
    examples = encode_tagged(data, tokenizer, max_length=min(128, int(model.config.max_position_embeddings)))
    examples.sort(key=lambda ex: len(ex.input_ids))    # batches of like lengths: little padding
    states, where = [], []
    for start in range(0, len(examples), BATCH):
        chunk = examples[start:start + BATCH]
        stacked = torch.stack(hidden_states(model, tokenizer, [ex.input_ids for ex in chunk])).float().cpu()
        rows = [(b, i) for b, ex in enumerate(chunk) for i, label in enumerate(ex.labels) if label != IGNORE_INDEX]
        states.append(stacked[:, [b for b, _ in rows], [i for _, i in rows]])   # [L + 1, n, H]
        where += [(ex.sentence, ex.first_word + w) for ex in chunk for w in range(ex.num_words)]
    return torch.cat(states, 1), where


# torch's global generator is the process's, not a thread's: two pages building a twin at once (a class's students
# on one step) drew each other's numbers, and each saw another "random model" figure.
_TWIN_LOCK = threading.Lock()


def random_twin(model, seed: int = SEED):
    """A model of the same class and shape, freshly initialised (seeded; the global random state left as it was)."""
    with _TWIN_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return type(model)(model.config).to(device_of(model))


def layer_probes(model, tokenizer, data: TaggedSentences, fit: int = FIT_SENTENCES, test: int = TEST_SENTENCES,
                 seed: int = SEED, random_model: bool = True) -> LayerProbes:
    """Probes per layer for part of speech (data.pos) and data's own tags, fitted on `fit` sentences drawn with
    `seed` and scored on `test` others. Without `random_model` the random twin is not read (its curves are NaN): a
    run's probe snapshots score it once (inspect.word_class_timelapse)."""
    if data.pos is None:
        raise BertCoreError("the probes need a part-of-speech column: a CoNLL file of `word POS chunk` lines")
    if len(data.words) < fit + test:
        raise BertCoreError(f"the probes need {fit + test} sentences; the data has {len(data.words)}")
    chosen = random.Random(seed).sample(range(len(data.words)), fit + test)
    pos_names = sorted({p for i in chosen for p in data.pos[i]})
    sample = TaggedSentences(words=[data.words[i] for i in chosen], tags=[data.tags[i] for i in chosen],
                             pos=[data.pos[i] for i in chosen], tag_names=data.tag_names, scheme=data.scheme)
    pos_ids = [[pos_names.index(p) for p in sentence] for sentence in sample.pos]
    per_task = [pos_ids, sample.tags]
    per_task += [control_tags(sample.words, tags, seed) for tags in per_task]
    started = time.perf_counter()
    trained, where = word_states(model, tokenizer, sample)
    untrained = word_states(random_twin(model, seed), tokenizer, sample)[0] if random_model else None
    read = time.perf_counter()
    held = torch.tensor([s >= fit for s, _ in where])
    labels = [torch.tensor([tags[s][w] for s, w in where]) for tags in per_task]
    fit_y, test_y = [y[~held] for y in labels], [y[held] for y in labels]
    on_model = probe_accuracy(trained[:, ~held], fit_y, trained[:, held], test_y)
    on_random = (probe_accuracy(untrained[:, ~held], fit_y[:2], untrained[:, held], test_y[:2])
                 if random_model else np.full_like(on_model[:2], np.nan))
    tasks = [TaskProbe(task=name, tags=len(set(labels[t].tolist())), accuracy=on_model[t], random_model=on_random[t],
                       control=on_model[t + 2],
                       majority=float((test_y[t] == fit_y[t].mode().values).double().mean()))
             for t, name in enumerate(TASKS)]
    return LayerProbes(tasks=tasks, fit_sentences=fit, test_sentences=test, fit_words=int((~held).sum()),
                       test_words=int(held.sum()), seconds_states=read - started,
                       seconds_fit=time.perf_counter() - read)


def verdict(probes: LayerProbes) -> str:
    """Which layer knows most of each task, in a sentence from the numbers."""
    parts = []
    for t in probes.tasks:
        b = t.best
        parts.append(f"{t.task} is read best from {word_class_timelapse.layer_name(b)} ({t.accuracy[b]:.0%} of "
                     f"held-out words; a random model of the same shape {t.random_model[b]:.0%}, always the commonest "
                     f"tag {t.majority:.0%}; selectivity {t.selectivity[b] * 100:.0f} points)")
    gains = [t.accuracy[t.best] - t.random_model[t.best] for t in probes.tasks]
    tail = ("Training taught the layers more than word identity gives." if min(gains) > 0.02 else
            "A random model does about as well: what the probe reads here is mostly which word it is.")
    return "; ".join(parts).capitalize() + ". " + tail


def snapshot_word_classes(model, tokenizer, random_curves: dict) -> WordClassProbe | None:
    """A run's probe snapshot of what each layer knows (inspect.word_class_timelapse): the part-of-speech probe on
    `model` as it is now, on a capped sample; None when CoNLL-2000 is not on this machine (a run never downloads
    it). `random_curves` (the run's) keeps the random model's curve per shape: scored once (again if the run grew)."""
    path = local_task_csv("conll2000")     # the shared copy or the app's fetched one: never a download
    if path is None:
        return None
    data, cap = _read(str(path)), (word_class_timelapse.SNAPSHOT_FIT, word_class_timelapse.SNAPSHOT_TEST)
    started = time.perf_counter()
    probes = layer_probes(model, tokenizer, data, *cap, random_model=False)
    seconds = time.perf_counter() - started
    shape = repr(model.config)     # a frozen dataclass: its sizes
    if shape not in random_curves:
        # What layer_probes reports as `random_model`: the probe on the seeded twin, as on How BERT computes.
        random_curves[shape] = layer_probes(random_twin(model), tokenizer, data, *cap, random_model=False).tasks[0]
    pos, random_pos = probes.tasks[0], random_curves[shape]
    return WordClassProbe(tuple(map(float, pos.accuracy)), tuple(map(float, random_pos.accuracy)),
                          float(pos.majority), probes.test_words, seconds)


@functools.lru_cache(maxsize=1)
def _read(path: str) -> TaggedSentences:
    return read_conll(path, tag_column="chunk")    # 8,936 sentences: a second or so, once for every model


def conll_layer_probes(model, tokenizer, path: str) -> LayerProbes:
    """layer_probes on a CoNLL-2000 file (`word POS chunk` lines), kept with the model: a redraw is free."""
    return kept(model, "layer probes", path, lambda: layer_probes(model, tokenizer, _read(path)))
