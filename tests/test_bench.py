"""The speed benchmark runs end to end on a small config (its figures are checked by reading them, not by time)."""

import argparse

import pytest

from bert_core.cli import bench_figures
from bert_core.cli.main import bench
from bert_core.model.config import BertConfig
from tests.script_loading import load_script


def test_bench_reports_both_models_and_the_ratio(capsys):
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["bench", "--preset", "nano", "--vocab-size", "300", "--seq-len", "16",
                              "--batch-size", "2", "--rounds", "1", "--warmup", "0", "--json", "--default-malloc"])
    result = bench.run_bench(args)
    assert result["ours_tokens_per_s"] > 0 and result["transformers_tokens_per_s"] > 0
    assert result["speedup"] > 0 and 0 < result["ours_fraction_of_matmul"]
    assert result["memory_gbps"] > 0 and result["matmul_spread"] >= 0 and result["ours_step_spread"] >= 0
    assert '"speedup"' in capsys.readouterr().out
    # auto picks the GPU where there is one, and autocasts as `train` does (a CPU: bf16 where it has the instructions)
    import torch

    from bert_core.training.distributed import computes_in

    on_gpu = torch.cuda.is_available()
    assert result["device"] == ("cuda" if on_gpu else "cpu")
    assert result["precision"] == computes_in(result["device"], "bf16") and result["compiled"] is False


def test_bench_on_a_cpu_follows_train_s_precision(monkeypatch):
    """Where the CPU has bfloat16 instructions both models step under bf16 autocast; `--precision fp32` turns it
    off, as for `train`."""
    import pytest
    import torch

    from bert_core.training import distributed

    if torch.cuda.is_available():
        pytest.skip("auto would pick the GPU")
    monkeypatch.setattr(distributed, "cpu_has_bf16", lambda: True)
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers(dest="cmd"))
    common = ["bench", "--preset", "nano", "--vocab-size", "300", "--seq-len", "16", "--batch-size", "2",
              "--rounds", "1", "--warmup", "0", "--json", "--default-malloc"]
    assert bench.run_bench(parser.parse_args(common))["precision"] == "bf16"
    assert bench.run_bench(parser.parse_args([*common, "--precision", "fp32"]))["precision"] == "fp32"


def test_bench_on_cuda_without_a_gpu_is_one_error_line(capsys):
    import pytest
    import torch

    from bert_core.cli.main import main

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    assert main(["bench", "--device", "cuda", "--preset", "nano", "--rounds", "1"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "CUDA" in err[0]


def test_sparse_head_flops_are_fewer_than_dense():
    config = BertConfig.preset("mini", vocab_size=30522)
    dense = bench_figures.training_flops(config, 32, 128, 614, sparse_head=False)
    sparse = bench_figures.training_flops(config, 32, 128, 614, sparse_head=True)
    assert sparse < dense / 2  # the decoder dominates a small BERT with a 30k vocabulary


def test_time_to_quality_summarize_turns_a_bad_file_into_one_error_line(tmp_path, capsys):
    import pytest

    ttq = load_script("benchmarks/time_to_quality.py")
    (tmp_path / "other.json").write_text('{"a": 1}')
    (tmp_path / "binary.json").write_bytes(b"\x00\xff")
    for name, says in [("missing.json", "No such file"), ("other.json", "not a --json file"),
                       ("binary.json", "decode")]:
        with pytest.raises(SystemExit) as exited:
            ttq.main(["--summarize", str(tmp_path / name)])
        message = str(exited.value.code)
        assert message.startswith(f"error: {tmp_path / name}: ") and says in message and "\n" not in message


def test_useful_flops_follow_the_stated_formula():
    from bert_core.cli.bench_figures import FLOPS_FORMULA, useful_flops

    c = BertConfig.preset("base", vocab_size=30522)
    h, i, n_layers, v = c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.vocab_size
    b, s, m = 64, 128, 1229
    t = b * s
    n = n_layers * (4 * h * h + 2 * h * i)
    by_hand = 6 * n * t + 12 * n_layers * s * h * t + 6 * (h * h + h * v) * m + 6 * (h * h + 2 * h) * b
    assert useful_flops(c, b, s, m) == pytest.approx(by_hand, rel=1e-12)
    assert FLOPS_FORMULA.startswith("6 N T + 12 L S H T")


def test_datasheet_peaks_by_card_name():
    from bert_core.cli.bench_figures import datasheet_tflops, utilisation

    names = {"NVIDIA H100 80GB HBM3": 989.0, "NVIDIA H100 PCIe": 756.0, "NVIDIA H200": 989.0, "NVIDIA H200 NVL": 835.0,
             "NVIDIA A100-SXM4-80GB": 312.0, "NVIDIA L4": 121.0, "NVIDIA L40S": 362.0, "Tesla T4": 65.0,
             "x86_64, 2 threads": None, "Some Future GPU": None}
    assert {name: datasheet_tflops(name) for name in names} == names
    figures = utilisation(flops=2e12, step_s=0.01, matmul_gflops=400_000.0, peak_tflops=989.0)
    assert figures == {"gflops": 200_000.0, "fraction_of_matmul": 0.5, "fraction_of_datasheet": 0.202}
    assert utilisation(2e12, 0.01, 400_000.0, None)["fraction_of_datasheet"] is None


def test_bench_reports_useful_flops_of_both_models_and_takes_a_compile_mode():
    parser = argparse.ArgumentParser()
    bench.add_parser(parser.add_subparsers(dest="cmd"))
    common = ["bench", "--preset", "nano", "--vocab-size", "300", "--seq-len", "16", "--batch-size", "2",
              "--rounds", "1", "--warmup", "0", "--json", "--device", "cpu"]
    assert parser.parse_args(common).compile == "off"
    assert parser.parse_args([*common, "--compile"]).compile == "default"   # a bare --compile, as before
    assert parser.parse_args([*common, "--compile", "reduce-overhead"]).compile == "reduce-overhead"
    with pytest.raises(SystemExit):
        parser.parse_args([*common, "--compile", "fast"])
    r = bench.run_bench(parser.parse_args(common))
    assert r["useful_gflop_per_step"] > 0 and r["flops_formula"].startswith("6 N T")
    assert r["datasheet_tflops"] is None and r["ours_fraction_of_datasheet"] is None   # a CPU has no table row
    assert r["transformers_gflops"] > 0 and 0 < r["transformers_fraction_of_matmul"]
    # The same useful FLOPs for both: the rates are in the ratio of the step times.
    assert r["ours_gflops"] / r["transformers_gflops"] == pytest.approx(r["speedup"], rel=0.05)
    assert r["compile_mode"] == "off" and r["ours_compile_s"] is None and r["ours_warmup_s"] == 0


def test_bench_table_turns_bench_lines_into_markdown_rows():
    table = load_script("benchmarks/bench_table.py")
    line = ('{"config": "mini (L4 H256 A4), vocab 30522, seq 128, batch 128, 15% masked", "compiled": true, '
            '"compile_mode": "reduce-overhead", "ours_tokens_per_s": 2000000.0, "transformers_tokens_per_s": '
            '1000000.0, "speedup": 2.0, "ours_gflops": 100000.0, "ours_fraction_of_matmul": 0.135, '
            '"ours_fraction_of_datasheet": 0.101, "transformers_fraction_of_matmul": 0.07, "ours_compile_s": 30.5, '
            '"transformers_compile_s": 41.0}')
    rows = table.rows(["not json", line])
    assert len(rows) == 3 and rows[2] == ("| mini, seq 128, batch 128 | reduce-overhead | 2,000,000 | 1,000,000 | "
                                          "2.00x | 100.0 | 13.5% | 10.1% | 7.0% | 30.5, 41.0 |")


def test_gpu_ladder_reads_a_carried_packed_corpus(tmp_path):
    import lzma

    ladder = load_script("benchmarks/gpu_ladder.py")
    packed = tmp_path / "wikitext-2-valid.txt.xz"
    packed.write_bytes(lzma.compress("one line\nanother\n".encode()))
    work = tmp_path / "work"
    work.mkdir()
    unpacked = ladder.corpus_file(packed, work)
    assert unpacked == work / "valid.txt" and unpacked.read_text() == "one line\nanother\n"
    plain = tmp_path / "plain.txt"
    assert ladder.corpus_file(plain, work) == plain
