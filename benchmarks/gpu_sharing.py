"""How many of a class's runs one GPU should train at once (bert_core.serve.server_gpus.DEFAULT_GPU_RUNS): N of the
Train page's runs pressed at the same moment, trained by the app's own path (a RunStore, training processes forked
from the warm launcher, one CPU thread each), on the GPU with N GPU slots, and alone on the CPU for comparison.

    python benchmarks/gpu_sharing.py --levels 1 4 8 16 --cpu --json out.json [--preset nano] [--steps 2000]

For each level: each run's time to its first step and to its end (from the moment all were submitted), the runs
finished a minute, and the GPU memory the runs' processes held at most (nvidia-smi, every 0.25 s). The default run
is the Train page's as a student presses Start (`train_spec.default_spec()`: toy corpus, nano, 2,000 steps);
`--preset` makes it the page's run of another size (that size's lesson settings). Needs a CUDA GPU for the GPU
levels; `--cpu` adds one run alone on the CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.serve import job_factory, jobs, launcher, runs  # noqa: E402
from bert_core.serve.server_gpus import ServerGpu, server_gpus  # noqa: E402
from bert_core.training.train_spec import page_spec, page_values  # noqa: E402


def page_run(preset: str, steps: int | None):
    values = page_values("toy", preset)
    spec = page_spec(values, ("toy", "toy"))
    if steps:
        spec.train["max_steps"] = steps
    return spec


class MemorySampler:
    """The most GPU memory each process held (MiB, nvidia-smi's compute apps), sampled on a thread."""

    def __init__(self):
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _loop(self):
        while not self._stop.wait(0.25):
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                     timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in out.splitlines():
                try:
                    pid, mib = (int(x) for x in line.split(","))
                except ValueError:
                    continue
                self.peak[pid] = max(self.peak.get(pid, 0), mib)


def level(n: int, device: str, spec, gpu_name: str) -> dict:
    gpus = [ServerGpu("cuda", gpu_name, 0, n)] if device == "cuda" else []
    store = runs.RunStore(lambda run: job_factory.pretraining_job(run.run_id, run.spec, device=run.device),
                          slots=lambda: n, gpus=lambda: gpus, poll_s=0.05, turn_s=1e9, unwatched_s=1e9)
    first, done = {}, {}
    with MemorySampler() as memory:
        began = time.perf_counter()
        started = [store.submit(spec, f"s{i}") for i in range(n)]
        assert all(r.device == device for r in started), [r.device for r in started]
        while len(done) < n:
            now = time.perf_counter() - began
            for r in started:
                trainer = r.job.trainer if r.job is not None else None
                if r.run_id not in first and trainer is not None and trainer.step >= 1:
                    first[r.run_id] = now
                if r.run_id not in done and r.phase in ("finished", "failed", "stopped"):
                    if r.phase != "finished":
                        raise SystemExit(f"error: a run ended {r.phase}: {r.job.error}")
                    done[r.run_id] = now
            if now > 900:
                raise SystemExit("error: the level took over 15 minutes")
            time.sleep(0.05)
    steps = [r.job.trainer.step for r in started]
    store.close()
    finish = sorted(done.values())
    mem = sorted(memory.peak.values())
    return {"device": device, "runs": n, "steps_each": steps[0],
            "first_step_median_s": round(statistics.median(first.values()), 2),
            "first_step_max_s": round(max(first.values()), 2),
            "finish_median_s": round(statistics.median(finish), 2), "finish_max_s": round(finish[-1], 2),
            "runs_a_minute": round(n / finish[-1] * 60, 1),
            "gpu_mib_per_process_median": statistics.median(mem) if mem else None,
            "gpu_mib_all_processes": sum(mem) if mem else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--preset", default="nano")
    parser.add_argument("--steps", type=int, default=None, help="steps a run (default: the page's)")
    parser.add_argument("--cpu", action="store_true", help="also one run alone on the CPU")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = server_gpus()
    if not found:
        raise SystemExit("error: no CUDA GPU here (bert_core.serve.server_gpus found none)")
    spec = page_run(args.preset, args.steps)
    launcher.launcher().warm()
    level(1, "cuda", page_run(args.preset, 20), found[0].name)   # the launcher's imports and CUDA's first start
    rows = []
    plan = [("cpu", 1)] if args.cpu else []
    plan += [("cuda", n) for n in args.levels]
    for device, n in plan:
        row = level(n, device, spec, found[0].name)
        row.update(preset=args.preset, gpu=found[0].name)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
