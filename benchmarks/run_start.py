"""Starting a run: a training process forked from the warm launcher against a fresh interpreter (issue: a class of
thirty pressing Start on 2 vCPUs). Side by side in one process, alternating, on the Train page's default run.

    python benchmarks/run_start.py [--starts 5] [--threads 1] [--json out.json]

Each start is what the app does when Start is pressed (`job_factory.pretraining_job` with the page's default spec, as
`ProcessTrainingJob.start`): timed from `start()` to the run's first training step ("running"), and the training
process's own CPU seconds until then, read from /proc (user + system). Then the run is stopped and its process
closed, and the next start uses the other way. The launcher is warmed first (the Train, Lesson and Fine-tune pages
warm it when opened), so the figure is that of every start but a server's very first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bert_core.serve import job_factory, jobs, launcher  # noqa: E402
from bert_core.training.train_spec import default_spec  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS   # utime, stime (fields 14 and 15 of stat)


def one_start(way: str, threads: int) -> dict:
    os.environ[launcher.LAUNCHER_ENV] = way
    spec = default_spec()
    job = job_factory.pretraining_job("bench", spec)
    job._child._threads = threads
    began = time.perf_counter()
    job.start()
    while job.phase != "running" or job.trainer is None or job.trainer.step < 1:
        if job.phase in ("failed", "stopped", "finished"):
            raise SystemExit(f"error: the run ended before its first step: {job.error}")
        time.sleep(0.01)
    wall = time.perf_counter() - began
    cpu = _cpu_s(job.process.pid)
    job.stop(wait=30)
    job.close(wait=30)
    return {"way": way, "wall_s": round(wall, 3), "process_cpu_s": round(cpu, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="starts of each way (alternating)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("error: the launcher forks on Linux only")
    launcher.launcher().warm()
    one_start("fork", args.threads)          # waits for the launcher's imports; not counted
    rows = []
    for _ in range(args.starts):
        for way in ("fork", "spawn"):
            row = one_start(way, args.threads)
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for way in ("fork", "spawn"):
        mine = [r for r in rows if r["way"] == way]
        summary[way] = {"median_wall_s": statistics.median(r["wall_s"] for r in mine),
                        "median_process_cpu_s": statistics.median(r["process_cpu_s"] for r in mine)}
    summary["wall_ratio_spawn_over_fork"] = round(summary["spawn"]["median_wall_s"] /
                                                  summary["fork"]["median_wall_s"], 2)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
