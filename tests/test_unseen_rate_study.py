"""examples/unseen_rate_study.py: the rate of train.py's spelled unseen words chosen on validation, by a rule fixed
before the runs (results/unseen_rate)."""

import json
import sys

import pytest
from conftest import ROOT
from test_train import TINY

sys.path.insert(0, str(ROOT / "examples"))
import unseen_rate_study  # noqa: E402


def test_the_rule_picks_the_lowest_validation_bits_per_byte_ties_to_the_smaller_rate():
    rows = [{"rate": r, "validation_bits_per_byte": b} for r, b in ((0.0, 2.5), (0.1, 1.9), (0.3, 1.7), (0.5, 2.0))]
    assert unseen_rate_study.pick(rows)["rate"] == 0.3
    tied = [{"rate": 0.5, "validation_bits_per_byte": 1.70001}, {"rate": 0.3, "validation_bits_per_byte": 1.70004}]
    assert unseen_rate_study.pick(tied)["rate"] == 0.3  # equal at the table's 3 decimals


def test_the_study_runs_on_a_tiny_corpus_and_its_table_names_the_minimum(tmp_path):
    out, work = tmp_path / "results", tmp_path / "work"
    args = ["--config", str(TINY), "--steps", "2", "--rates", "0", "0.5", "--train_lines", "80", "--eval_lines", "20",
            "--work_dir", str(work), "--output", str(out)]  # fmt: skip
    study = unseen_rate_study.main(args)
    train_text = (work / "data" / "train.txt").read_text()
    assert "<unk>" not in train_text and " @-@ " not in train_text and "Valkyria Chronicles III" in train_text
    rows = study["runs"]
    assert [r["rate"] for r in rows] == [0.0, 0.5] and all(r["targets_seen"] == 2 * 2 * 10 for r in rows)
    best = min(r["validation_bits_per_byte"] for r in rows)
    assert rows[[r["rate"] for r in rows].index(study["chosen_rate"])]["validation_bits_per_byte"] == best
    assert json.loads((out / "study.json").read_text()) == study
    table = (out / "README.md").read_text()
    assert f"| {study['chosen_rate']:g} (chosen) |" in table and table.count("(chosen)") == 1
    assert f"{study['test']['bits_per_byte']:.3f} bits per byte" in table
    # test is scored as train.py scores validation: the same function gives the run's own validation figure back
    chosen = work / f"rate_{study['chosen_rate']:g}"
    lines = (work / "data" / "valid.txt").read_text().splitlines()
    config = json.loads(TINY.read_text())
    again = unseen_rate_study.test_bits_per_byte(chosen, lines, config)["bits_per_byte"]
    assert again == pytest.approx(json.loads((chosen / "results.json").read_text())["validation_bits_per_byte"])
    before = (chosen / "results.json").stat().st_mtime_ns
    assert unseen_rate_study.main(args) == study and (chosen / "results.json").stat().st_mtime_ns == before  # reused
