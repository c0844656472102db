"""examples/quality_runs.py --converge: one command per dataset, each adding its block to results.json beside the
others', with WikiText-2's models on the adaptive softmax. Tiny models and corpora stand in for the 2x200 recipe."""

import json
import math
import random
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import quality_runs  # noqa: E402

ROWS = {"pointer", "plain", "plain_cache", "pointer_off"}


def write_corpora(root):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    names = {"ptb": ("ptb", "ptb.{}.txt"), "wt2": ("wikitext-2", "wiki.{}.tokens")}
    for folder, pattern in names.values():
        (root / folder).mkdir(parents=True)
        for split, n in (("train", 300), ("valid", 40), ("test", 40)):
            # a skewed draw, so frequent and rare words fall on both sides of the cutoffs
            lines = (" " + " ".join(rng.choice(words[: rng.randint(1, 40)]) for _ in range(rng.randint(3, 12))) + " "
                     for _ in range(n))  # fmt: skip
            (root / folder / pattern.format(split)).write_text("\n".join(lines) + "\n")


def test_converge_adds_each_dataset_block_beside_the_others(tmp_path, monkeypatch):
    data, out = tmp_path / "data", tmp_path / "out"
    write_corpora(data)
    out.mkdir()
    monkeypatch.setattr(quality_runs, "MODEL", {**quality_runs.MODEL, "embedding_size": 16, "hidden_size": 16,
                                                "num_layers": 1, "pointer_window": 8})  # fmt: skip
    small = {"bptt": 10, "per_device_train_batch_size": 2, "per_device_eval_batch_size": 2, "num_train_epochs": 2}
    monkeypatch.setattr(quality_runs, "CONVERGE", {**quality_runs.CONVERGE, **small})
    monkeypatch.setattr(quality_runs, "DATASET_MODEL", {"ptb": {}, "wt2": {"adaptive_softmax_cutoffs": [10, 25]}})

    quality_runs.main(["--converge", "--data", str(data), "--out", str(out)])
    ptb = json.loads((out / "results.json").read_text())
    quality_runs.main(["--converge", "--datasets", "wt2", "--data", str(data), "--out", str(out)])
    results = json.loads((out / "results.json").read_text())

    assert results["ptb"] == ptb["ptb"] and results["runs"]["ptb"] == ptb["runs"]["ptb"]  # kept, not overwritten
    for name in ("ptb", "wt2"):
        assert set(results[name]) == ROWS
        assert all(math.isfinite(row["test_ppl"]) and math.isfinite(row["valid_ppl"]) for row in results[name].values())
        assert (out / f"{name}_learning_curves.png").stat().st_size > 0
        assert results["runs"][name]["command"].startswith(
            f"python examples/quality_runs.py --converge --datasets {name}"
        )
    cutoffs = {name: results["runs"][name]["model"].get("adaptive_softmax_cutoffs") for name in ("ptb", "wt2")}
    assert cutoffs == {"ptb": None, "wt2": [10, 25]}
    for kind in ("plain", "pointer"):  # the models trained are the ones the block describes
        trained = json.loads((out / f"wt2_{kind}" / "config.json").read_text())
        assert trained["adaptive_softmax_cutoffs"] == [10, 25] and trained["use_pointer"] == (kind == "pointer")
        assert json.loads((out / f"ptb_{kind}" / "config.json").read_text())["adaptive_softmax_cutoffs"] == []
