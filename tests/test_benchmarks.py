"""benchmarks/run.py's summary of paired rounds, on given numbers (no timing here), and its --write guard."""

import importlib.util

import pytest
from conftest import ROOT


def load_run():
    spec = importlib.util.spec_from_file_location("benchmarks_run", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


run = load_run()


def test_the_row_reports_the_median_round_so_its_a_over_b_is_its_ratio():
    """The review's contradiction (results_public_cpu.md, T=100): side medians 1877 and 1521 (1.23) printed beside a
    paired ratio of 0.957. Rounds that give exactly those side medians and that paired median:"""
    a, b = [1877.0, 1450.0, 2500.0], [1961.0, 1521.0, 1300.0]
    s = run.paired_summary(a, b)
    assert (sorted(a)[1], sorted(b)[1]) == (1877.0, 1521.0)  # what the old table showed as A and B
    assert s["ratio"] == pytest.approx(1877 / 1961) and s["ratio"] == pytest.approx(0.957, abs=5e-4)
    assert (s["a"], s["b"]) == (1877.0, 1961.0) and s["a"] / s["b"] == s["ratio"]  # A / B of the row is its ratio
    assert s["min"] == pytest.approx(1450 / 1521) and s["max"] == pytest.approx(2500 / 1300)
    assert s["min"] <= s["q1"] <= s["ratio"] <= s["q3"] <= s["max"] and s["rounds"] == 3
    assert run.verdict(s, (">=", 0.90)) == "met"  # every round clears 0.90
    assert run.verdict(s, (">=", 1.0)) == "inconclusive"  # the median is below 1 but one round is far above
    s = run.paired_summary([10.0, 30.0, 20.0], [10.0, 20.0, 40.0])  # ratios 1, 1.5, 0.5; side medians 20 and 20
    assert (s["ratio"], s["a"], s["b"]) == (1.0, 10.0, 10.0)


def test_quartiles_and_verdicts_on_seven_rounds():
    ratios = [0.80, 0.85, 0.88, 0.91, 0.93, 0.95, 1.10]
    s = run.paired_summary([r * 100 for r in ratios], [100.0] * 7)
    assert s["ratio"] == pytest.approx(0.91) and s["a"] == pytest.approx(91.0) and s["b"] == 100.0
    assert (s["q1"], s["q3"]) == (pytest.approx(0.865), pytest.approx(0.94))
    assert (s["min"], s["max"]) == (pytest.approx(0.80), pytest.approx(1.10))
    assert run.verdict(s, (">=", 0.90)) == "inconclusive"  # the median clears it, the spread does not
    assert run.verdict(s, (">=", 0.75)) == "met"
    assert run.verdict(s, (">=", 1.20)) == "not met"
    assert run.verdict(s, ("<=", 1.2)) == "met"
    assert run.verdict(s, ("<=", 1.0)) == "inconclusive"
    assert run.verdict(s, ("<=", 0.7)) == "not met"
    assert run.verdict(s, None) == ""


def test_a_single_measurement_has_no_spread_and_bad_input_raises():
    s = run.paired_summary([124.1], [118.5])  # the memory row: one deterministic measurement
    assert s["ratio"] == s["min"] == s["max"] == s["q1"] == s["q3"] == pytest.approx(124.1 / 118.5)
    with pytest.raises(ValueError, match="as many A as B"):
        run.paired_summary([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="target"):
        run.verdict(s, ("<", 1.0))


def test_markdown_states_its_columns_and_write_refuses_hand_written_files(tmp_path):
    row = dict(name="x", unit="tok/s", target=(">=", 0.9), **run.paired_summary([9.0, 10.0, 8.0], [10.0] * 3))
    row["verdict"] = run.verdict(row, row["target"])
    text = run.markdown([row], "python benchmarks/run.py --quick", "cpu")
    assert text.startswith(run.WRITTEN_BY_US)
    assert "| A (median round) | B (median round) | A/B, median of rounds | min–max | IQR |" in text
    assert "| x | tok/s | 9 | 10 | 0.900 | 0.800–1.000 | 0.850–0.950 | 3 | ≥ 0.9 | inconclusive |" in text
    with pytest.raises(ValueError, match="refusing to overwrite"):
        run.check_write_path(str(ROOT / "BENCHMARKS.md"))
    (tmp_path / "notes.md").write_text("# my notes\n")
    with pytest.raises(ValueError, match="refusing to overwrite"):
        run.check_write_path(str(tmp_path / "notes.md"))
    (tmp_path / "old.md").write_text(text)
    assert run.check_write_path(str(tmp_path / "old.md")) == (tmp_path / "old.md").resolve()
    assert run.check_write_path(str(tmp_path / "new.md")) == (tmp_path / "new.md").resolve()


def test_step_work_counts_the_issues_arithmetic_for_the_shipped_ptb_model():
    """2x200, V = 10,000, L = 100: LSTM 2 x 4H(2H), the output H x V, the query H x H, the window's L x H scores."""
    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    m = PointerSentinelForCausalLM.from_pretrained(ROOT / "pretrained" / "ptb-pointer-sentinel-lstm-2x200")
    H, V, L = 200, 10_000, 100
    macs, weight_bytes = run.step_work(m)
    assert macs == 2 * 4 * H * 2 * H + H * V + H * H + L * H == 2_700_000
    assert weight_bytes == 4 * (macs - L * H)


def test_decode_paths_without_the_onnx_extra_leaves_out_only_the_onnx_rows(monkeypatch):
    """On a host without onnx/onnxruntime (a lent GPU's), the decode table still times every PyTorch path and says
    why the ONNX Runtime rows are missing; the greedy tokens of the fast step equal the forward path's. Without a
    compiler (compiled=False) the compiled row is left out too."""
    import sys

    from conftest import tiny_model

    sys.path.insert(0, str(ROOT / "examples"))
    import export_onnx

    def missing(*a, **k):
        raise ModuleNotFoundError("No module named 'onnxscript'")

    monkeypatch.setattr(export_onnx, "export", missing)
    table = run.decode_paths(tiny_model(vocab_size=50), "tiny", 1, True, configs=((1, 1),), compiled=False)
    assert "No ONNX Runtime rows: the onnx extra is not installed here." in table and "| ONNX" not in table
    for path in ("generate, fast decode step", "the model's decode step + argmax loop", "nn.Embedding + nn.LSTM"):
        assert f"| {path}" in table
    assert "generate fast / the step loop, paired rounds: median" in table
    assert "Tokens of generate fast == generate before, every configuration: True. No compiled step here." in table
    assert "| generate, compiled" not in table


def test_decode_paths_on_the_cpu_clock_times_every_path_with_it(monkeypatch):
    """clock="cpu" reads time.process_time for every path (here a stand-in that runs 1000x the wall clock, so the
    table's figures come out 1000x slower), and refuses two-thread configurations, whose CPU time adds up threads."""
    import time

    from conftest import tiny_model

    with pytest.raises(ValueError, match="one-thread configurations only"):
        run.decode_paths(tiny_model(vocab_size=50), "tiny", 1, True, configs=((2, 1),), clock="cpu")
    monkeypatch.setattr(time, "process_time", lambda: 1000 * time.perf_counter())
    table = run.decode_paths(tiny_model(vocab_size=50), "tiny", 1, True, configs=((1, 1),), compiled=False, clock="cpu")
    assert "20 steps a round, 1 rounds, timed in the process's CPU time." in table
    cells = [line.split(" | ") for line in table.splitlines() if line.startswith("| ")]
    rows = {c[0][2:]: float(c[1].replace(",", "")) for c in cells if c[1].replace(".", "").replace(",", "").isdigit()}
    assert {"generate, fast decode step", "the model's decode step + argmax loop"} <= set(rows)
    assert all(ms > 50 for ms in rows.values()), rows  # ms per step of a 16-wide model, 1000x
