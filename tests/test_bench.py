"""The speed benchmark runs end to end on a small config (its figures are checked by reading them, not by time)."""

import argparse

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

    from bert_core.training.precision import computes_in

    on_gpu = torch.cuda.is_available()
    assert result["device"] == ("cuda" if on_gpu else "cpu")
    assert result["precision"] == computes_in(result["device"], "bf16") and result["compiled"] is False


def test_bench_on_a_cpu_follows_train_s_precision(monkeypatch):
    """Where the CPU has bfloat16 instructions both models step under bf16 autocast; `--precision fp32` turns it
    off, as for `train`."""
    import pytest
    import torch

    from bert_core.training import precision

    if torch.cuda.is_available():
        pytest.skip("auto would pick the GPU")
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
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
    dense = bench.training_flops(config, 32, 128, 614, sparse_head=False)
    sparse = bench.training_flops(config, 32, 128, 614, sparse_head=True)
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
