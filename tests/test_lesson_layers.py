"""The lesson's two steps on the rest of the layer (issue 73): the feed-forward block's notice and what each layer
knows, each computed from the model and checked against the numbers it is computed from; and the probes' solve on a
CPU with two threads, where the batched LU solve failed."""

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bert_core.inspect import lesson
from bert_core.inspect.attention_steps import attention_steps
from bert_core.inspect.embeddings import builtin_pool
from bert_core.inspect.feed_forward import feed_forward_steps, unit_firing, unit_pool
from bert_core.inspect.layer_probes import TaskProbe, probe_accuracy
from bert_core.model.checkpoint import load_checkpoint
from bert_core.paths import DEFAULT_CHECKPOINT

TINY = DEFAULT_CHECKPOINT.parent / "bert-tiny-english"


def test_the_probes_solve_on_a_two_thread_cpu():
    # The size of the shipped mini's probe (5 hidden states, about 4,700 words, width 256, 70 tags): torch's batched
    # double LU solve raised "Pivots given to lu_solve..." at 2 threads (oneMKL), which is every 2-core server.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 4700, 256, generator=g)
    y = torch.randint(70, (4700,), generator=g)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        acc = probe_accuracy(x[:, :3700], [y[:3700]], x[:, 3700:], [y[3700:]])
    finally:
        torch.set_num_threads(threads)
    assert acc.shape == (1, 5) and (acc < 0.1).all()   # random tags: near chance (1 in 70), and no error


def test_the_steps_sit_after_the_live_run_and_after_how_one_token_attends():
    keys = lesson.STEP_KEYS
    assert keys.index("layers") == keys.index("run") + 1 and keys.index("feed-forward") == keys.index("attends") + 1
    for key in ("layers", "feed-forward"):
        step = lesson.STEPS[keys.index(key)]
        assert step.page == "pages/7_How_BERT_computes.py" and step.question.reason


@pytest.fixture(scope="module")
def tiny():
    if not TINY.is_dir():
        pytest.skip("bert-tiny-english is not in this checkout")
    return load_checkpoint(TINY, require_tokenizer=True)


def _numbers(text: str) -> list[float]:
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]


def test_the_feed_forward_notice_is_the_models_numbers(tiny):
    steps = attention_steps(tiny.model, tiny.tokenizer, "the dog saw the cat .", 1, 0, 2)
    ffn = feed_forward_steps(tiny.model, steps)
    sentences, source = builtin_pool()
    units = unit_pool(tiny.model, tiny.tokenizer, sentences, source, 1)
    firing = unit_firing(units, ffn.most_active)
    text = lesson.notice_feed_forward(ffn, firing, len(units.pool.tokens))
    above = int((ffn.pre > 0).sum())
    # Tokens, layers and units count from 1; every count names what it counts.
    assert text.startswith(f"Token 3 “{steps.tokens[2]}”, layer 2: W1·x + b1 turns its 128 numbers into 512 units; "
                           f"{above} of the 512 are above 0")
    assert f"the other {512 - above} come out between" in text
    assert f"Unit {ffn.most_active + 1} fires most ({ffn.h[ffn.most_active]:.2f})" in text
    assert f"Over the {len(units.pool.tokens):,} tokens of the built-in sentences, unit {ffn.most_active + 1} fires most on " \
           f"“{firing.tokens[0]}”" in text
    assert f"{np.linalg.norm(ffn.out):.2f} long to x ({np.linalg.norm(ffn.x):.2f} long)" in text
    cosine = float(ffn.normed @ ffn.x / np.linalg.norm(ffn.normed) / np.linalg.norm(ffn.x))
    assert f"cosine similarity of {cosine:.2f} to x" in text
    assert lesson.notice_feed_forward(ffn).count("held-out") == 0   # without the pool, nothing said of it


def _probes(gain: float):
    layers = 3
    pos = TaskProbe(task="part of speech", tags=40, accuracy=np.array([0.70, 0.80 + gain, 0.75]),
                    random_model=np.array([0.70, 0.80, 0.78]), control=np.array([0.6, 0.65, 0.6]), majority=0.14)
    chunk = TaskProbe(task="chunk", tags=18, accuracy=np.array([0.6, 0.7, 0.9]),
                      random_model=np.array([0.5, 0.5, 0.5]), control=np.array([0.5, 0.55, 0.5]), majority=0.3)
    assert len(pos.accuracy) == layers
    return SimpleNamespace(tasks=[pos, chunk], fit_sentences=200, test_sentences=100, fit_words=4_700,
                           test_words=2_412, seconds_states=1.0, seconds_fit=0.1)


def test_the_layer_probes_notice_names_each_layer_and_the_controls():
    text = lesson.notice_layer_probes(_probes(0.1))
    assert text.startswith("Of 2,412 held-out words in 100 sentences (probes fitted on 4,700 words of 200 others)")
    assert "part of speech (40 tags): the embeddings 70%, layer 1 90%, layer 2 75%; best at layer 1, against 80% on " \
           "a random model of the same shape, 65% on the control task and 14% for always the commonest tag" in text
    assert "chunk (18 tags): the embeddings 60%, layer 1 70%, layer 2 90%; best at layer 2, against 50%" in text
    assert "Each task's best layer is 10 points or more above the random model" in text
    flat = lesson.notice_layer_probes(_probes(0.0))
    assert "The random model does as well or nearly (+0 points at a best layer)" in flat


def test_a_units_pool_is_read_while_another_session_reads_the_same_model(tiny):
    # A class shares one model: the teacher's page and a student's read it in two threads at once. The pool's hook
    # must take this thread's passes only.
    import threading

    from bert_core.inspect import feed_forward
    from bert_core.inspect.kit import hidden_states

    sentences, source = builtin_pool()
    alone = unit_pool(tiny.model, tiny.tokenizer, sentences, source, 1).acts
    stop = threading.Event()

    ids = [tiny.tokenizer.encode("the dog saw the cat .")]

    def other_session():   # a plain pass (attention_steps' own hooks are not thread-safe either: left as they are)
        while not stop.is_set():
            hidden_states(tiny.model, tiny.tokenizer, ids)

    threads = [threading.Thread(target=other_session) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            units = feed_forward.unit_pool(tiny.model, tiny.tokenizer, sentences, source, 1)
            assert np.allclose(units.acts, alone, rtol=1e-4, atol=1e-5)
    finally:
        stop.set()
        for t in threads:
            t.join()
