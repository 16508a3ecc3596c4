"""Benchmarks of the Streamlit explorer (not tests): startup, attention figure cost, app vs CLI training speed, memory,
and the Train page's default run as a student presses it.

    python benchmarks/app_bench.py [--repeats 3] [--modes process thread]
                                   [--preset tiny --steps 120 --batch 16 --seq 64] [--json out.json]
    python benchmarks/app_bench.py --only default-run --seeds 0 1 2       # docs/lessons.md's promise, 3 seeds
    python benchmarks/app_bench.py --only startup --repeats 5 --load 2    # startup beside 2 CPU-bound processes

1. time from `streamlit run app.py` to the home page's first text and to its architecture chart drawn in headless
   Chromium (target: the chart within 5 s on a quiet machine), optionally with `--load N` busy processes beside it;
2. server time to compute and build the attention figures for a 64-token input (attention_maps, head_summaries,
   model/head/token/summary figures, and their JSON serialisation) on the shipped checkpoint (target < 300 ms);
3. training tokens/s inside the app (Train page open in a browser, live charts polling) against
   `python -m bert_core train` on the same settings and the same torch thread count, alternated (target: the app
   loses < 10%);
4. memory of one training session: server RSS before the run and its peak (VmHWM) after, and the peak of the
   training process the app starts for it;
5. the Fine-tune page's pretrained-vs-scratch comparison (toy topics, the page's defaults): steps each model makes
   in its time budget inside the app against `python -m bert_core finetune --compare-scratch`, alternated;
6. the Train page's default run (`default-run`): a fresh server per seed, the Train page opened with only the seed
   set (`?train_seed=S`), Start pressed in the browser, the held-out accuracy read off the page when the run has
   finished; the run's training seconds and its held-out curve from the checkpoint the page's download gives.
Needs the system Chromium (/usr/bin/chromium) and the playwright package; prints a Markdown table.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.app_server import free_port, start_app_server  # noqa: E402
from bert_core.serve.launcher import training_processes  # noqa: E402

CHROMIUM = os.environ.get("BERT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"]


def _rss_kb(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


ALL_CPUS = sorted(os.sched_getaffinity(0))


def _all_cpus() -> None:
    """preexec_fn for the server and the CLI: every core, whatever this process is pinned to."""
    os.sched_setaffinity(0, ALL_CPUS)


def _children(pid: int) -> list[int]:
    """The app's training processes: forked by the server's launcher, or spawned (bert_core.serve.launcher)."""
    return sorted(training_processes(pid))


class Server:
    """`streamlit run app.py` on a free port, as a context manager; `started` is when the process was spawned."""

    def __init__(self, env: dict):
        self.port = free_port()
        self.env = dict(os.environ, **env)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        self.started = time.perf_counter()
        self.proc = start_app_server(self.port, self.env, self.log, preexec_fn=_all_cpus)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _settled(page, timeout_s: float = 120) -> None:
    page.wait_for_selector("h1", timeout=timeout_s * 1000)
    deadline, quiet = time.time() + timeout_s, None
    while time.time() < deadline:
        if page.locator('[data-testid="stStatusWidget"]').count():
            quiet = None
        elif quiet is None:
            quiet = time.time()
        elif time.time() - quiet > 0.5:
            return
        time.sleep(0.05)


def _burn() -> None:
    while True:
        pass


class Load:
    """`n` CPU-bound processes (busy loops) for as long as the context lasts: a machine where others work."""

    def __init__(self, n: int):
        self.n, self.procs = n, []

    def __enter__(self):
        import multiprocessing

        for _ in range(self.n):
            proc = multiprocessing.Process(target=_burn, daemon=True)
            proc.start()
            self.procs.append(proc)
        time.sleep(1.0 if self.n else 0.0)
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            proc.terminate()
            proc.join(5)


def bench_startup(browser, env: dict, repeats: int, load: int = 0) -> list[dict]:
    """Seconds from spawning `streamlit run` to the home page's title shown and to its architecture chart drawn in
    the browser, beside `load` busy processes; each with the load average when it started."""
    times = []
    with Load(load):
        for _ in range(repeats):
            load_avg = os.getloadavg()[0]
            with Server(env) as server:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                page.goto(server.url)
                page.wait_for_selector("h1", timeout=120_000)
                title = time.perf_counter() - server.started
                page.wait_for_selector(".js-plotly-plot .shapelayer path", timeout=120_000)
                times.append({"title_s": title, "figure_s": time.perf_counter() - server.started,
                              "load_avg": load_avg})
                page.close()
    return times


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> list[int]:
    kids = _children(pid)
    return kids + [d for k in kids for d in _descendants(k)]


def _cpu_split(server_pid: int) -> dict:
    """CPU seconds so far of the server, its training processes, and this script's browser processes."""
    browser = [p for p in _descendants(os.getpid())
               if b"chrom" in (Path(f"/proc/{p}/cmdline").read_bytes() if Path(f"/proc/{p}/cmdline").exists()
                               else b"")]
    return {"server": _cpu_seconds(server_pid),
            "training": sum(_cpu_seconds(p) for p in _children(server_pid)),
            "browser": sum(_cpu_seconds(p) for p in browser)}


class _Children:
    """CPU seconds and peak memory (VmHWM) of the server's child processes, sampled every 0.2 s while they live: a
    finished run's training process ends once its checkpoint is written to its folder, so a reading taken after
    the run would miss it."""

    def __init__(self, server_pid: int):
        self._pid, self.cpu, self.peak, self._stop = server_pid, {}, {}, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            for p in _children(self._pid):
                self.cpu[p] = max(self.cpu.get(p, 0.0), _cpu_seconds(p))
                try:
                    self.peak[p] = max(self.peak.get(p, 0), _rss_kb(p, "VmHWM"))
                except OSError:   # it ended between the listing and the reading
                    pass
            self._stop.wait(0.2)

    def stop(self) -> "_Children":
        self._stop.set()
        self._thread.join()
        return self

    def cpu_s(self) -> float:
        return sum(self.cpu.values())

    def peak_kb(self) -> int:
        return sum(self.peak.values())


def bench_default_run(browser, env: dict, seed: int) -> dict:
    """The Train page's default run for one seed, pressed in the browser: held-out accuracy read off the page, the
    run's own record (training seconds, held-out curve) from the page's checkpoint download, and the CPU seconds
    the server, the training process and the browser spent from the click to the end."""
    with Server(env) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url + f"/Train?train_seed={seed}")
        _settled(page)
        load_avg = os.getloadavg()
        main = page.get_by_test_id("stMainBlockContainer")
        before = _cpu_split(server.proc.pid)
        children = _Children(server.proc.pid)
        main.get_by_role("button", name="Start", exact=True).click()
        clicked = time.perf_counter()
        page.get_by_text("Run finished at step").wait_for(timeout=1_800_000)
        wall = time.perf_counter() - clicked
        after = _cpu_split(server.proc.pid)
        after["training"] = before["training"] + children.stop().cpu_s()
        _settled(page)
        shown = page.locator('[data-testid="stMetric"]', has_text="Held-out MLM acc.").locator(
            '[data-testid="stMetricValue"]').first.inner_text()
        main.get_by_role("button", name="Prepare download").click()
        _settled(page)
        with page.expect_download() as dl:
            main.get_by_role("button", name="Download checkpoint").click()
        data = Path(dl.value.path()).read_bytes()
        page.close()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        state = json.loads(zf.read("bert-checkpoint/trainer_state.json"))
    cfg = state["train_config"]
    evals = [(e["step"], e["mlm_acc"]) for e in state["evals"]]
    at_step = {h["step"]: h["elapsed_s"] for h in state["history"]}
    first50 = next((step for step, acc in evals if acc >= 0.5), None)
    unigram_loss = math.log(state["baselines"]["unigram"]["perplexity"])
    below = next((e["step"] for e in state["evals"] if e["mlm_loss"] < unigram_loss), None)
    return {"seed": seed, "page_heldout": shown, "heldout": evals[-1][1], "steps": state["step"],
            "train_s": state["elapsed_s"], "wall_s": wall, "first_50_step": first50,
            "first_50_s": at_step.get(first50), "below_unigram_step": below, "below_unigram_s": at_step.get(below),
            "unigram": state["baselines"]["unigram"]["accuracy"],
            "evals": evals, "load_avg_start": load_avg, "load_avg_end": os.getloadavg(),
            "cpu_s": {k: after[k] - before[k] for k in after},
            "settings": {k: cfg[k] for k in ("max_steps", "batch_size", "learning_rate", "max_seq_length",
                                             "eval_every", "eval_batches", "probe_every", "seed")}}


def bench_attention(folder: Path | None, repeats: int) -> tuple[list[float], str]:
    """Milliseconds to compute and build every attention figure for a 64-token input, JSON included."""
    import torch

    from bert_core.inspect import figures
    from bert_core.inspect.inspection import attention_maps, head_summaries

    if folder is not None:
        from bert_core.serve.model_sources import load_folder

        model, tok, _ = load_folder(folder)
        what = f"checkpoint {folder.name}"
    else:  # no shipped checkpoint yet: a randomly initialised mini BERT has the same cost
        from bert_core.data.corpora import generate_toy_corpus
        from bert_core.model.bert import BertForPreTraining
        from bert_core.model.config import BertConfig
        from bert_core.model.tokenization import train_tokenizer

        tok = train_tokenizer(generate_toy_corpus(200).texts(), vocab_size=2000)
        model = BertForPreTraining(BertConfig.preset("mini", vocab_size=tok.vocab_size)).eval()
        what = "mini preset, random weights (no shipped checkpoint)"
    words = "the man went to the store because he wanted to buy some milk for the children".split()
    text = " ".join(words * 8)
    ids = tok.encode(text)[:62]
    text = tok.decode(ids)
    from bert_core.serve.job_base import training_threads

    torch.set_num_threads(training_threads())  # what the app's server uses
    times = []
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        result = attention_maps(model, tok, text)
        summaries = head_summaries(result)
        labels = [s.label for s in summaries]
        figs = [figures.model_view_figure(result, labels), figures.head_view_figure(result, 0, 0, labels[0]),
                figures.token_view_figure(result, 5), figures.head_summary_figure(summaries)]
        for f in figs:
            f.to_json()
        if i >= 2:  # two warm-up runs
            times.append((time.perf_counter() - t0) * 1000)
    assert len(result.tokens) == 64, len(result.tokens)
    what += (f", {model.config.num_hidden_layers} layers x {model.config.num_attention_heads} heads, "
             f"{torch.get_num_threads()} torch thread(s)")
    return times, what


EVAL_BATCHES = 20  # held-out batches per evaluation on the Train page (pages/2_Train.py); the CLI run matches it


def _median_tps(history: list[dict], skip: int = 5) -> float:
    vals = [h["tokens_per_s"] for h in history[skip:]] or [h["tokens_per_s"] for h in history]
    return statistics.median(vals)


def bench_cli(args, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "bert_core", "train", "--corpus", "toy", "--preset", args.preset,
               "--vocab-size", str(args.vocab), "--steps", str(args.steps), "--batch-size", str(args.batch),
               "--seq-len", str(args.seq), "--eval-every", str(args.eval_every), "--eval-batches", str(EVAL_BATCHES),
               "--checkpoint-every", "0", "--device", "cpu", "--out", str(out)]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, preexec_fn=_all_cpus)
        state = json.loads((out / "trainer_state.json").read_text())
    return {"tokens_per_s": _median_tps(state["history"]), "train_s": state["elapsed_s"],
            "overall_tokens_per_s": state["tokens_seen"] / state["elapsed_s"],
            "step_elapsed_s": [h["elapsed_s"] for h in state["history"]]}


def bench_app(browser, args, env: dict, mode: str = "process") -> dict:
    query = (f"?train_corpus=toy&train_preset={args.preset}&train_vocab={args.vocab}&train_steps={args.steps}"
             f"&train_batch={args.batch}&train_seq={args.seq}&train_eval_every={args.eval_every}"
             f"&train_probe_every={args.probe_every}")
    env = dict(env, BERT_EXPLORER_TRAIN_PROCESS="1" if mode == "process" else "0")
    with Server(env) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url + "/Train" + query)
        _settled(page)
        rss_before = _rss_kb(server.proc.pid)
        children = _Children(server.proc.pid)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Start", exact=True).click()
        page.get_by_text("Run finished at step").wait_for(timeout=1_800_000)
        _settled(page)
        peak = _rss_kb(server.proc.pid, "VmHWM")
        child_peak = children.stop().peak_kb()
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Prepare download").click()
        _settled(page)
        with page.expect_download() as dl:
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Download checkpoint").click()
        data = Path(dl.value.path()).read_bytes()
        page.close()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        state = json.loads(zf.read("bert-checkpoint/trainer_state.json"))
    return {"tokens_per_s": _median_tps(state["history"]), "train_s": state["elapsed_s"],
            "overall_tokens_per_s": state["tokens_seen"] / state["elapsed_s"],
            "step_elapsed_s": [h["elapsed_s"] for h in state["history"]],
            "rss_before_mb": rss_before / 1024, "rss_peak_mb": peak / 1024, "child_peak_mb": child_peak / 1024}


FT_SETTINGS = dict(train=200, val=500, seed=0, lr=1e-3, batch=32, maxlen=64)  # the Fine-tune page's defaults


def bench_finetune_cli(args, threads: int) -> dict:
    """Steps each model of the pretrained-vs-scratch comparison makes in the budget, outside the app."""
    s = FT_SETTINGS
    cmd = [sys.executable, "-m", "bert_core", "finetune", "--task", "toy", "--train-size", str(s["train"]),
           "--val-size", str(s["val"]), "--seed", str(s["seed"]), "--lr", str(s["lr"]), "--batch-size",
           str(s["batch"]), "--max-length", str(s["maxlen"]), "--time-budget", str(args.ft_budget),
           "--compare-scratch", "--device", "cpu", "--json"]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    done = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True, preexec_fn=_all_cpus)
    return {r["name"]: r["steps"] for r in json.loads(done.stdout)["results"]}


def bench_finetune_app(browser, args, env: dict, mode: str = "process") -> dict:
    """The same comparison from the Fine-tune page (open in the browser, live charts polling): steps per model,
    read from the results table."""
    env = dict(env, BERT_EXPLORER_TRAIN_PROCESS="1" if mode == "process" else "0")
    query = "?ft_data=toy&" + "&".join(f"ft_{k}={v}" for k, v in FT_SETTINGS.items()) + f"&ft_budget={args.ft_budget}"
    with Server(env) as server:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(server.url + "/Fine-tune" + query)
        _settled(page)
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Fine-tune both").click()
        page.get_by_text("Results").wait_for(timeout=args.ft_budget * 4000 + 120_000)
        _settled(page)
        cells = page.locator('[data-testid="stDataFrame"] [role="gridcell"]').all_inner_texts()
        page.close()
    rows = [cells[i:i + 6] for i in range(0, 12, 6)]  # run, accuracy, macro-F1, steps, seconds, state
    names = {"from pretrained": "pretrained", "from scratch": "scratch"}
    return {names[r[0]]: int(r[3].replace(",", "")) for r in rows}


def _alternate(args, cli_run, app_run) -> tuple[list, dict]:
    """`args.repeats` rounds, each a CLI run then an app run per mode, so that machine noise hits all alike."""
    cli, apps = [], {mode: [] for mode in args.modes}
    for _ in range(args.repeats):
        cli.append(cli_run())
        for mode in args.modes:
            apps[mode].append(app_run(mode))
    return cli, apps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="startup runs and training rounds (alternated)")
    p.add_argument("--attention-repeats", type=int, default=20)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--probe-every", type=int, default=0,
                   help="probe snapshots in the app run (the CLI takes none, so 0 compares like with like)")
    p.add_argument("--threads", type=int, default=1, help="torch threads for both the CLI and the app run")
    p.add_argument("--poll", type=float, default=None, help="seconds between live redraws (default: the app's)")
    p.add_argument("--chart-poll", type=float, default=None,
                   help="seconds between live chart redraws (default: the app's, three polls)")
    p.add_argument("--ft-budget", type=int, default=30, help="seconds per model of the fine-tuning comparison")
    parts = ["startup", "attention", "training", "finetune", "default-run"]
    p.add_argument("--skip", nargs="*", default=[], choices=parts)
    p.add_argument("--only", nargs="+", default=None, choices=parts, help="run only these parts")
    p.add_argument("--load", type=int, default=0,
                   help="busy processes beside the startup measurement (a machine where others work)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds of the default-run part")
    p.add_argument("--modes", nargs="+", default=["process"], choices=["process", "thread"],
                   help="how the app trains: in a child process (the default) and/or on a server thread (the "
                        "old way, BERT_EXPLORER_TRAIN_PROCESS=0), each alternated with the CLI")
    p.add_argument("--browser-cpus", type=int, nargs="+", default=None, metavar="CPU",
                   help="pin the browser (and this script) to these cores, as if it ran on the student's machine; "
                        "the server, its training process and the CLI keep every core (default: no pinning)")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    if args.only:
        args.skip = [part for part in parts if part not in args.only]
    elif "default-run" not in args.skip:
        args.skip.append("default-run")  # minutes per seed: only when asked for

    from playwright.sync_api import sync_playwright

    from bert_core.paths import DEFAULT_CHECKPOINT
    from bert_core.app.app_state import chart_poll_seconds, poll_seconds

    folder = DEFAULT_CHECKPOINT if (DEFAULT_CHECKPOINT / "config.json").is_file() else None
    env = {"BERT_EXPLORER_TORCH_THREADS": str(args.threads), "PYTHONUNBUFFERED": "1"}
    if folder is not None:
        env["BERT_EXPLORER_CHECKPOINT"] = str(folder)
    if args.poll is not None:
        env["BERT_EXPLORER_POLL_S"] = str(args.poll)
    if args.chart_poll is not None:
        env["BERT_EXPLORER_CHART_POLL_S"] = str(args.chart_poll)
    out: dict = {"machine": {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg()}}
    rows = []
    if "attention" not in args.skip:
        ms, what = bench_attention(folder, args.attention_repeats)
        out["attention_ms"] = ms
        rows.append(("attention figures, 64 tokens (" + what + ")", f"median {statistics.median(ms):.0f} ms "
                     f"(min {min(ms):.0f}, max {max(ms):.0f}, n={len(ms)})", "< 300 ms"))
    if args.browser_cpus:
        os.sched_setaffinity(0, args.browser_cpus)  # inherited by playwright's driver and Chromium
        out["machine"]["browser_cpus"] = args.browser_cpus
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            if "startup" not in args.skip:
                s = bench_startup(browser, env, args.repeats, args.load)
                out["startup"] = s
                fig = [r["figure_s"] for r in s]
                title = [r["title_s"] for r in s]
                loads = [r["load_avg"] for r in s]
                rows.append((f"`streamlit run` to the home page's title / architecture chart drawn ({args.load} busy "
                             f"processes beside it; load average {min(loads):.1f}-{max(loads):.1f})",
                             f"title median {statistics.median(title):.1f} s; chart median "
                             f"{statistics.median(fig):.1f} s ({', '.join(f'{x:.1f}' for x in fig)})",
                             "chart < 5 s on a quiet machine"))
            if "default-run" not in args.skip:
                runs = [bench_default_run(browser, env, seed) for seed in args.seeds]
                out["default_run"] = runs
                for r in runs:
                    reached = (f"50% first at step {r['first_50_step']:,} ({r['first_50_s'] or 0:.1f} s)"
                               if r["first_50_step"] else "never 50%")
                    if r["below_unigram_step"]:
                        reached += (f"; held-out loss below the unigram line from step {r['below_unigram_step']:,} "
                                    f"({r['below_unigram_s'] or 0:.1f} s)")
                    cpu = ", ".join(f"{k} {v:.1f} s" for k, v in r["cpu_s"].items())
                    rows.append((f"Train page defaults, seed {r['seed']} ({r['settings']}), load average "
                                 f"{r['load_avg_start'][0]:.1f} at Start",
                                 f"held-out {r['page_heldout']} on the page (unigram {r['unigram']:.1%}) after "
                                 f"{r['steps']:,} steps, {r['train_s']:.1f} s of training ({r['wall_s']:.1f} s from "
                                 f"the click); {reached}; CPU from the click: {cpu}",
                                 ">= 50% within 30 s of training"))
            if "training" not in args.skip:
                cli, apps = _alternate(args, lambda: bench_cli(args, args.threads),
                                       lambda mode: bench_app(browser, args, env, mode))
                out["cli"], out["app"] = cli, apps
                c = statistics.median(r["tokens_per_s"] for r in cli)
                co = statistics.median(r["overall_tokens_per_s"] for r in cli)
                setting = (f"{args.preset}, toy, batch {args.batch} x seq {args.seq}, {args.steps} steps, "
                           f"{args.threads} thread(s)")
                poll = args.poll or poll_seconds()
                chart_poll = args.chart_poll or chart_poll_seconds()
                rows.append((f"training tokens/s, CLI ({setting})", f"median step {c:,.0f}; whole run {co:,.0f}",
                             ""))
                for mode, app in apps.items():
                    a = statistics.median(r["tokens_per_s"] for r in app)
                    ao = statistics.median(r["overall_tokens_per_s"] for r in app)
                    where = "child process" if mode == "process" else "server thread"
                    rows.append((f"training tokens/s, app, {where} (Train page open, numbers every {poll:g} s, "
                                 f"charts every {chart_poll:g} s)",
                                 f"median step {a:,.0f} ({(a / c - 1) * 100:+.1f}%); whole run {ao:,.0f} "
                                 f"({(ao / co - 1) * 100:+.1f}%)", "app loses < 10%"))
                    child = (f"; training process peak {max(r['child_peak_mb'] for r in app):.0f} MB"
                             if mode == "process" else "")
                    rows.append((f"memory, one training session ({where})",
                                 f"server {app[-1]['rss_before_mb']:.0f} MB before, peak "
                                 f"{max(r['rss_peak_mb'] for r in app):.0f} MB{child}", ""))
            if "finetune" not in args.skip:
                cli, apps = _alternate(args, lambda: bench_finetune_cli(args, args.threads),
                                       lambda mode: bench_finetune_app(browser, args, env, mode))
                out["finetune_cli"], out["finetune_app"] = cli, apps
                setting = (f"toy topics, {FT_SETTINGS['train']} examples, batch {FT_SETTINGS['batch']} x "
                           f"{FT_SETTINGS['maxlen']}, {args.ft_budget} s per model, {args.threads} thread(s)")
                for name in ("pretrained", "scratch"):
                    c = statistics.median(r[name] for r in cli)
                    rows.append((f"fine-tuning steps, {name}, CLI ({setting})", f"median {c:,.0f}", ""))
                    for mode, app in apps.items():
                        a = statistics.median(r[name] for r in app)
                        where = "child process" if mode == "process" else "server thread"
                        rows.append((f"fine-tuning steps, {name}, app, {where} (Fine-tune page open)",
                                     f"median {a:,.0f} ({(a / c - 1) * 100:+.1f}%)", ""))
        finally:
            browser.close()
    out["machine"]["load_avg_end"] = os.getloadavg()
    print("| measure | result | target |\n| --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print(f"\nload average at start {out['machine']['load_avg_start']}, at end {out['machine']['load_avg_end']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
