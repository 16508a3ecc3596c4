import atexit
import os
import shutil
import tempfile

import pytest
import torch

from bert_core.paths import shared_data_dir

# The browser tests' fixtures (chromium, browser, server, model_folder, screenshot_dirs, server_home) for every
# module that names them, registered once here rather than imported into each test file. Importing the module
# starts nothing: playwright is imported, and the app server started, only inside a fixture a test asks for.
pytest_plugins = ["tests.browser_support"]

# The app's run records (bert_core.serve.run_records) go to a folder of this test session's own, not beside the
# repository's runs folder, where a later session's in-process app would read them back. The process that made it
# (xdist's workers and the servers the tests start inherit it) removes it when it exits: one left behind by every
# session filled /tmp.
if "BERT_EXPLORER_STATE_DIR" not in os.environ:
    os.environ["BERT_EXPLORER_STATE_DIR"] = _state_dir = tempfile.mkdtemp(prefix="bert-explorer-state-")
    atexit.register(shutil.rmtree, _state_dir, ignore_errors=True)


@pytest.fixture
def shared_data():
    """The shared real-text folder; the test is skipped when it is absent."""
    path = shared_data_dir()
    if path is None:
        pytest.skip("../shared/data is absent (set BERT_SHARED_DATA to point at it)")
    return path


@pytest.fixture(scope="module")
def toy_file(tmp_path_factory):
    """A small toy corpus as a text file, documents separated by blank lines (the CLI tests' input)."""
    from bert_core.data.corpora import generate_toy_corpus

    corpus = generate_toy_corpus(num_documents=60, seed=2)
    path = tmp_path_factory.mktemp("cli") / "toy.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in corpus.documents) + "\n")
    return path


@pytest.fixture(autouse=True)
def _few_threads():
    # Tests share a 2-core machine with other work; one intra-op thread keeps them predictable.
    torch.set_num_threads(1)
    yield


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="also run the long checks (marked `long`: minutes each, training to a quality bar or a "
                          "browser walkthrough); the README's test command leaves them out. `--long -m long`: only "
                          "them")


def pytest_collection_modifyitems(config, items):
    """The long checks are left out unless `--long` is given (they are benchmarks of promises, minutes each:
    docs/testing.md). The files marked slow run first. With `--dist loadfile --no-loadscope-reorder`
    (pyproject.toml) each worker starts on a long file and the many short ones fill in at the end, so no worker
    is left with a long browser test after the others have finished (xdist's own order, by number of tests, put
    those few-test files last)."""
    if not config.getoption("--long"):
        long = [item for item in items if item.get_closest_marker("long") is not None]
        if long:
            items[:] = [item for item in items if item.get_closest_marker("long") is None]
            config.hook.pytest_deselected(items=long)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort: files stay in order
