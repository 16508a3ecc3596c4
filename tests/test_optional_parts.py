"""The optional parts stay off the app's main road: in a fresh process, importing what a laptop's server and CLI
import loads none of them. Ray (bert_core.cluster, requirements-cluster.txt) is imported by the job factory by name
only when `$BERT_EXPLORER_RAY_ADDRESS` is set (bert_core.serve.job_factory.PLUGINS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules_after(code: str, tmp_path: Path, drop_env: tuple[str, ...] = ()) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code` in the repository's root, with the
    environment variables `drop_env` unset."""
    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    env["BERT_EXPLORER_STATE_DIR"] = str(tmp_path / "state")
    code += "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_server_and_the_cli_import_no_cluster_and_no_ray(tmp_path):
    from bert_core.serve.job_factory import RAY_ADDRESS_ENV

    loaded = _modules_after(
        "from bert_core.app import app_sidebar, app_state\nfrom bert_core.serve import job_factory, jobs, runs\n"
        "from bert_core.cli.main import main\n"
        # the store's questions the pages ask at every draw: its kind, slots, GPUs and where its runs train
        "assert app_state.JOB_FACTORY.kind() in ('process', 'thread') and app_state.RUNS.slots() >= 1\n"
        "factory = job_factory.JobFactory()\n"
        "factory.where({'cpu': factory.slots()}, list(factory.gpus()))\n",
        tmp_path, drop_env=(RAY_ADDRESS_ENV,))
    optional = sorted(m for m in loaded if m == "ray" or m.startswith(("ray.", "bert_core.cluster"))
                      or m.startswith("bert_core.serve.ray"))
    assert optional == [], optional
    assert "bert_core.serve.job_factory" in loaded and "bert_core.cli.main" in loaded   # it looked at the right road


def test_the_cluster_package_itself_loads_neither_ray_nor_torch(tmp_path):
    """Ray is loaded by a run made on a cluster, not by importing the plug-in (the factory's slots ask it first)."""
    loaded = _modules_after("import bert_core.cluster.ray_job", tmp_path)
    assert "ray" not in loaded and "torch" not in loaded


def test_the_core_path_imports_no_corpus_pipeline(tmp_path):
    """`corpus build` (bert_core.corpus: sources, cleaning, dedup, decontamination, shard writing) is loaded by a
    build alone; a run on shards reads them through bert_core.data.shards. Before, the CLI imported the pipeline
    (then bert_core.data.corpus_build) at module level."""
    loaded = _modules_after(
        "import bert_core.app.app_sidebar\n"
        "from bert_core.training import run_builder\n"
        "from bert_core.cli.main import build_parser, main\n"
        "build_parser().parse_args(['corpus', 'build', 'SRC', '--out', 'OUT'])\n",
        tmp_path)
    pipeline = sorted(m for m in loaded if m.startswith("bert_core.corpus")
                      or m in ("bert_core.data.corpus_build", "bert_core.data.corpus_sources",
                               "bert_core.data.corpus_cleaning"))
    assert pipeline == [], pipeline
    assert {"bert_core.cli.corpus", "bert_core.data.shards"} <= loaded   # it looked at the right road
