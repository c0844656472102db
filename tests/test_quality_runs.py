"""examples/quality_runs.py --converge: one command per dataset, each adding its block to results.json beside the
others', with WikiText-2's models on the adaptive softmax. Tiny models and corpora stand in for the 2x200 recipe."""

import json
import math
import random
import shlex
import sys
from pathlib import Path

import pytest
from conftest import ROOT, evaluate_script

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


TINY_MODEL = {"embedding_size": 16, "hidden_size": 16, "num_layers": 1, "pointer_window": 8}
TINY_TRAINING = {"bptt": 10, "per_device_train_batch_size": 2, "per_device_eval_batch_size": 2, "num_train_epochs": 2}
TINY_DYNAMIC = ["--batch_size", "1", "--dynamic", "--dynamic_grid", "--dynamic_grid_segments", "5", "20",
                "--dynamic_grid_tokens", "60", "--dynamic_grid_lrs", "1e-2", "3e-2", "--dynamic_grid_lambdas", "1e-3",
                "--dynamic_stats_tokens", "400", "--cache_grid"]  # fmt: skip


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    """Both datasets converged (tiny), one command each, WikiText-2 with the sgd recipe on the CPU clock: (data, out,
    the PTB-only results, results after WT2)."""
    root = tmp_path_factory.mktemp("quality")
    data, out = root / "data", root / "out"
    write_corpora(data)
    out.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quality_runs, "MODEL", {**quality_runs.MODEL, **TINY_MODEL})
        mp.setattr(quality_runs, "RECIPES", {k: {**r, **TINY_TRAINING} for k, r in quality_runs.RECIPES.items()})
        mp.setattr(quality_runs, "DATASET_MODEL", {"ptb": {}, "wt2": {"adaptive_softmax_cutoffs": [10, 25]}})
        # the recipe sets another key than the dataset's, so both layers must reach the model
        mp.setattr(quality_runs, "RECIPE_MODEL", {"sgd": {"wt2": {"adaptive_softmax_div_value": 2.0}}})
        quality_runs.main(["--converge", "--data", str(data), "--out", str(out)])
        ptb = json.loads((out / "results.json").read_text())
        sgd = ["--converge", "--datasets", "wt2", "--recipe", "sgd", "--clock", "cpu"]
        quality_runs.main([*sgd, "--data", str(data), "--out", str(out)])
    return data, out, ptb, json.loads((out / "results.json").read_text())


def test_converge_adds_each_dataset_block_beside_the_others(converged):
    data, out, ptb, results = converged
    assert results["ptb"] == ptb["ptb"] and results["runs"]["ptb"] == ptb["runs"]["ptb"]  # kept, not overwritten
    assert set(results) == {"ptb", "wt2_sgd", "runs"}
    for name in ("ptb", "wt2_sgd"):
        assert set(results[name]) == ROWS
        assert all(math.isfinite(row["test_ppl"]) and math.isfinite(row["valid_ppl"]) for row in results[name].values())
        assert (out / f"{name}_learning_curves.png").stat().st_size > 0
    assert results["runs"]["ptb"]["command"] == "python examples/quality_runs.py --converge --datasets ptb --data DIR"
    assert results["runs"]["wt2_sgd"]["command"].endswith("--datasets wt2 --data DIR --recipe sgd --clock cpu")
    assert results["runs"]["ptb"]["clock"] == "wall" and results["runs"]["wt2_sgd"]["clock"] == "cpu"
    assert results["runs"]["ptb"]["training"]["optimizer"] == "adamw"
    assert results["runs"]["wt2_sgd"]["training"]["optimizer"] == "ntasgd"
    places = {"inside", "at its bound", "at the edge", "fixed"}  # where each chosen cache setting lies in its grid
    for name in ("ptb", "wt2_sgd"):
        assert set(results[name]["plain_cache"]["bracket"]) == {"window", "theta", "lam"}
        assert set(results[name]["plain_cache"]["bracket"].values()) <= places
    head = {n: {k: results["runs"][n]["model"].get(f"adaptive_softmax_{k}") for k in ("cutoffs", "div_value")}
            for n in ("ptb", "wt2_sgd")}  # fmt: skip
    assert head == {"ptb": {"cutoffs": None, "div_value": None}, "wt2_sgd": {"cutoffs": [10, 25], "div_value": 2.0}}
    for kind in ("plain", "pointer"):  # the models trained are the ones the block describes, with its recipe
        trained = json.loads((out / f"wt2_sgd_{kind}" / "config.json").read_text())
        assert trained["adaptive_softmax_cutoffs"] == [10, 25] and trained["adaptive_softmax_div_value"] == 2.0
        assert trained["use_pointer"] == (kind == "pointer")
        assert json.loads((out / f"wt2_sgd_{kind}.json").read_text())["optimizer"] == "ntasgd"
        assert json.loads((out / f"wt2_sgd_{kind}.results.json").read_text())["clock"] == "cpu"
        assert json.loads((out / f"ptb_{kind}" / "config.json").read_text())["adaptive_softmax_cutoffs"] == []


def test_dynamic_adds_rows_that_its_command_reproduces(converged, monkeypatch):
    data, out, _, before = converged
    monkeypatch.setattr(quality_runs, "DYNAMIC", TINY_DYNAMIC)
    with pytest.raises(SystemExit, match="no 'ptb' block"):
        quality_runs.main(["--dynamic", "--data", str(data), "--out", str(out / "elsewhere")])
    quality_runs.main(["--dynamic", "--data", str(data), "--out", str(out)])
    results = json.loads((out / "results.json").read_text())

    new = {f"{k}_dynamic{c}" for k in ("plain", "pointer") for c in ("", "_cache")}
    assert set(results["ptb"]) == ROWS | new
    assert {k: results["ptb"][k] for k in ROWS} == {k: before["ptb"][k] for k in ROWS}  # the static rows are kept
    assert results["wt2_sgd"] == before["wt2_sgd"] and results["runs"] == before["runs"]
    static_choice = {}
    for kind in ("plain", "pointer"):
        row, ev = results["ptb"][f"{kind}_dynamic"], json.loads((out / f"ptb_{kind}.dynamic.json").read_text())
        assert row["test_ppl"] == ev["ppl_dynamic"] and row["valid_ppl"] == ev["dynamic_grid_best_on_validation"]["ppl"]
        memo = (out / f"ptb_{kind}.dynamic_grid.jsonl").read_text().splitlines()  # each point kept as it finished
        assert len(memo) == len(ev["dynamic_grid"]) and "memo" not in row["command"]
        assert row["valid_tokens"] == 60 and row["dynamic"]["segment_length"] in {
            r["segment_length"] for r in ev["dynamic_grid"]
        }
        assert math.isfinite(results["ptb"][f"{kind}_dynamic_cache"]["test_ppl"])
        assert row["dynamic_bracket"] == ev["dynamic_grid_bracket"] and set(row["dynamic_bracket"]) == {
            "grid_lr", "grid_lam", "segment_length"}  # fmt: skip
        cached = results["ptb"][f"{kind}_dynamic_cache"]  # the cache chosen again, on the adapting model
        static_choice[kind] = {k: ev["cache"][k] for k in ("window", "theta", "lam")}
        assert cached["cache_bracket"] == ev["dynamic_cache_grid_bracket"] and cached["cache"] == ev["dynamic_cache"]
        assert cached["valid_ppl"] == ev["dynamic_cache_grid_best_on_validation"]["ppl"]
        assert cached["test_ppl"] == ev["ppl_dynamic_with_cache"]
        # the recorded command, with DIR the data folder, gives the row's figure
        argv = [a.replace("DIR/", f"{data}/") for a in shlex.split(row["command"])[2:]]
        assert argv[0] == str(out / f"ptb_{kind}")
        again = evaluate_script()(argv)
        assert math.isclose(again["ppl_dynamic"], row["test_ppl"], rel_tol=1e-6)
    # here the adapting plain model's cache differs from the static one's, so a row naming the wrong one shows
    assert results["ptb"]["plain_dynamic_cache"]["cache"] != static_choice["plain"]


def test_the_recipe_study_never_reads_the_test_split(tmp_path):
    """The study chooses on validation: its runs get train and validation files and no test file."""
    import recipe_study

    for name in recipe_study.CANDIDATES:
        cmd = recipe_study.command(name, str(tmp_path), tmp_path, 1.0)
        assert "--validation_file" in cmd and "--test_file" not in cmd
        assert not any("test" in Path(c).name for c in cmd if c.startswith(str(tmp_path)))


def test_the_recipe_study_table_ranks_a_run_that_never_reached_a_validation(tmp_path):
    """A budget that ends inside the first epoch leaves no epoch-end validation (best_validation_ppl null): the row
    takes the saved (last) weights' validation perplexity, marked, and ranks among the others on it."""
    import recipe_study

    finished = {"wt2_plain_base": (166.9, 166.9, 4.5), "wt2_plain_full_softmax": (268.2, None, 0.92),
                "wt2_plain_sgd": (165.2, 165.2, 4.5)}  # fmt: skip
    for name, (valid, best, epochs) in finished.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps({
            "validation_ppl": valid, "best_validation_ppl": best, "epochs": epochs, "train_minutes": 45.0,
            "targets_seen": 10**6, "stopped": "max_train_minutes (45): not converged",
            "params": 8_024_216}))  # fmt: skip
    recipe_study.write_table(tmp_path, 45)
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {n: (r["valid_ppl"], r["epoch_validated"]) for n, r in rows.items()} == {
        "wt2_plain_base": (166.9, True),
        "wt2_plain_full_softmax": (268.2, False),
        "wt2_plain_sgd": (165.2, True),
    }
    table = [line for line in (tmp_path / "README.md").read_text().splitlines() if line.startswith("| wt2")]
    assert [line.split(" | ")[0][2:] for line in table] == ["wt2_plain_sgd", "wt2_plain_base", "wt2_plain_full_softmax"]
    assert "| 8.02M | 268.20* |" in table[2] and "| 8.02M | 165.20 |" in table[0]


def test_dynamic_again_reuses_only_the_same_evaluation(converged, monkeypatch, tmp_path):
    """A finished evaluation is not run again by the same command on the same model files and code (a stop during
    --dynamic's half hour a model loses only what was still running); other flags or other weights run it again."""
    data, out, _, _ = converged
    monkeypatch.setattr(quality_runs, "DYNAMIC", TINY_DYNAMIC)
    quality_runs.main(["--dynamic", "--data", str(data), "--out", str(out)])  # done, or done before by the test above
    before = (out / "results.json").read_text()

    class Ran(Exception):
        pass

    def popen(*args, **kwargs):
        raise Ran(args)

    monkeypatch.setattr(quality_runs.subprocess, "Popen", popen)
    quality_runs.main(["--dynamic", "--data", str(data), "--out", str(out)])
    assert (out / "results.json").read_text() == before
    monkeypatch.setattr(quality_runs, "DYNAMIC", [*TINY_DYNAMIC[:-1], "--cache_grid_windows", "4"])
    with pytest.raises(Ran):
        quality_runs.main(["--dynamic", "--data", str(data), "--out", str(out)])

    model = tmp_path / "model"
    model.mkdir()
    for f in (out / "ptb_plain").iterdir():
        if f.is_file():
            (model / f.name).write_bytes(f.read_bytes())
    args = ["ROOT/examples/evaluate.py", str(model)]
    key = quality_runs.job_key(model, args)
    assert key == quality_runs.job_key(model, args) and str(ROOT) not in json.dumps(key["code"])
    weights = bytearray((model / "model.safetensors").read_bytes())
    weights[-1] ^= 1
    (model / "model.safetensors").write_bytes(bytes(weights))
    assert quality_runs.job_key(model, args)["model"] != key["model"]


def fake_evaluate_py(slow: Path, failing: Path | None = None, on_slow_end=lambda: None):
    """Stands in for subprocess.Popen of evaluate.py: each process ends on its first poll (`slow` on its third,
    calling `on_slow_end` then), writing {"ppl": polls} to its --output_json and exiting 0; `failing` exits 1 and
    writes nothing."""

    class Process:
        def __init__(self, cmd, stdout=None, stderr=None, env=None):
            self.out, self.polls, self.returncode = Path(cmd[cmd.index("--output_json") + 1]), 0, None

        def poll(self):
            self.polls += 1
            if self.out == slow and self.polls < 3:
                return None
            if self.out == slow:
                on_slow_end()
            if self.out != failing:
                self.out.write_text(json.dumps({"ppl": float(self.polls)}))
            self.returncode = 1 if self.out == failing else 0
            return self.returncode

        def wait(self):
            while self.poll() is None:
                pass
            return self.returncode

    return Process


def a_model(tmp_path: Path) -> Path:
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def test_each_evaluation_is_recorded_as_it_ends_not_in_the_order_started(tmp_path, monkeypatch):
    """evaluate_all writes an evaluation's .job.json as soon as it ends: a stop while a slow evaluation still runs
    keeps a faster one started after it (the slow one checks, on ending, that the fast one was recorded meanwhile)."""
    slow, fast = tmp_path / "slow.json", tmp_path / "fast.json"

    def fast_is_recorded():
        assert fast.with_suffix(".job.json").exists(), "the fast evaluation was not recorded as it ended"

    monkeypatch.setattr(quality_runs.subprocess, "Popen", fake_evaluate_py(slow, on_slow_end=fast_is_recorded))
    model = a_model(tmp_path)
    results = quality_runs.evaluate_all([(model, "ptb", slow, []), (model, "ptb", fast, [])], None)
    assert [r["ppl"] for r in results] == [3.0, 1.0]  # in the order asked
    assert all(json.loads(p.with_suffix(".job.json").read_text())["key"]["args"] for p in (slow, fast))


def test_a_failed_evaluation_stops_the_command_only_after_the_others_are_recorded(tmp_path, monkeypatch):
    """One evaluation failing (its process exits 1 at once) neither leaves a slower one running unrecorded nor hides
    the failure: evaluate_all waits for the other, records it, then exits naming the failed one's log."""
    bad, slow = tmp_path / "bad.json", tmp_path / "slow.json"
    model = a_model(tmp_path)
    monkeypatch.setattr(quality_runs.subprocess, "Popen", fake_evaluate_py(slow, failing=bad))
    with pytest.raises(SystemExit, match="bad.log") as stop:
        quality_runs.evaluate_all([(model, "ptb", bad, []), (model, "ptb", slow, [])], None)
    assert "slow.log" not in str(stop.value)
    assert json.loads(slow.with_suffix(".job.json").read_text())["key"]["args"]
    assert not bad.with_suffix(".job.json").exists()


def test_a_run_stopped_by_sigusr1_is_reported_and_the_same_pair_resumes(tmp_path, monkeypatch):
    """SIGUSR1 to one of the pair's train.py processes (sent once its first checkpoint exists, from another thread):
    train_pair says which run stopped and how to go on, rather than fail on a missing results.json; called again, it
    resumes that run from its epoch-end checkpoint and keeps the finished one."""
    import os
    import signal
    import threading
    import time

    data, out = tmp_path / "data", tmp_path / "out"
    write_corpora(data)
    out.mkdir()
    monkeypatch.setattr(quality_runs, "MODEL", {**quality_runs.MODEL, **TINY_MODEL})
    # the signal lands within a poll (50 ms) of the first checkpoint (step 40, epoch 1), epochs before the last
    training = {**quality_runs.CONVERGE, **TINY_TRAINING, "num_train_epochs": 6, "patience": 100,
                "checkpointing_steps": 40}  # fmt: skip
    run_dir = out / "ptb_pointer"

    def signal_the_pointer_run():
        deadline = time.time() + 240
        while time.time() < deadline and not list(run_dir.glob("step_*")):
            time.sleep(0.05)
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(run_dir).encode() in cmdline and any(a.endswith(b"train.py") for a in cmdline):
                os.kill(int(proc.name), signal.SIGUSR1)

    sender = threading.Thread(target=signal_the_pointer_run)
    sender.start()
    try:
        with pytest.raises(SystemExit, match=r"ptb: pointer stopped at an epoch end as asked \(SIGUSR1\); the same "
                           r"command resumes"):  # fmt: skip
            quality_runs.train_pair("ptb", out, data, training, ["--resume_from_checkpoint", "latest"])
    finally:
        sender.join()
    assert (out / "ptb_plain" / "results.json").exists() and not (run_dir / "results.json").exists()
    stopped_at = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()][-1]
    assert "valid_ppl" in stopped_at and stopped_at["epoch"] < 5
    runs = quality_runs.train_pair("ptb", out, data, training, ["--resume_from_checkpoint", "latest"])
    assert json.loads((runs["pointer"] / "results.json").read_text())["epochs"] == 6
    assert "resuming from" in (out / "ptb_pointer.train.log").read_text()
