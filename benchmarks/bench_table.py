"""The Markdown table of `bench --json` runs, one row a run, as docs/benchmarks.md shows them: tokens/s of both
models, the speed-up, each model's useful FLOP/s as a share of the measured matmul and of the datasheet peak, and the
compile time. Reads the lines of one or more files (benchmarks/gpu_session_62.sh writes $OUT/bench.jsonl).

    .venv/bin/python benchmarks/bench_table.py FILES_AT/bench.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _pct(value) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else ""


def _num(value, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else ""


def rows(lines: list[str]) -> list[str]:
    """The table's lines for the JSON objects among `lines` (other lines are skipped)."""
    out = ["| config | compile | ours tokens/s | transformers tokens/s | speed-up | ours TFLOP/s | of matmul | "
           "of datasheet | transformers of matmul | compile s (ours, theirs) |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if not isinstance(r, dict) or "ours_tokens_per_s" not in r:
            continue
        config = r["config"].split(",")
        compile_s = (f"{_num(r.get('ours_compile_s'), 1)}, {_num(r.get('transformers_compile_s'), 1)}"
                     if r.get("compiled") else "")
        out.append(f"| {config[0].split(' (')[0]},{config[2]},{config[3]} | {r.get('compile_mode', 'off')} | "
                   f"{_num(r['ours_tokens_per_s'])} | {_num(r.get('transformers_tokens_per_s'))} | "
                   f"{_num(r.get('speedup'), 2)}x | {_num(r['ours_gflops'] / 1e3, 1)} | "
                   f"{_pct(r.get('ours_fraction_of_matmul'))} | {_pct(r.get('ours_fraction_of_datasheet'))} | "
                   f"{_pct(r.get('transformers_fraction_of_matmul'))} | {compile_s} |")
    return out


def main(argv: list[str]) -> int:
    lines = [line for name in argv for line in Path(name).read_text().splitlines()]
    first = next((json.loads(x) for x in lines if x.startswith("{")), None)
    if first:
        print(f"{first['machine']}; matmul {first['matmul_gflops'] / 1e3:.1f} TFLOP/s measured, datasheet "
              f"{first.get('datasheet_tflops')}; {first['precision']}\n")
    print("\n".join(rows(lines)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
