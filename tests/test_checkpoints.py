"""Checkpoints that survive a SIGKILL at any moment: a run killed again and again inside its saves, each time resumed
with --resume_from_checkpoint latest, ends bit-exact with a run that was never killed."""

import json
import os
import shutil
import signal
import sys

import launching
import pytest
import torch
from safetensors.torch import load_file
from test_train import TINY, TRAIN, _env, launch, losses, repeated_sentences, small_args, train_module

from modeling_pointer_sentinel import checkpointing

KILLER = TRAIN.parents[1] / "tests" / "kill_during_save.py"
SIGNALLER = TRAIN.parents[1] / "tests" / "signal_after_save.py"

# The file operations of one save (tests/kill_during_save.py counts them), each killed once: 1 model.safetensors,
# 2 optimizer.bin, 3 random_states_0.pkl, 4 train_state.json, 5 averager.safetensors, 6 best_weights.safetensors,
# 7 stream_state_0.safetensors, 8 the manifest checkpoint.json, 9/10 before/after the rename of
# step_N.<run id>.incomplete to step_N, 11 inside the rmtree of the checkpoint past the limit. (Each write is cut
# halfway, a rename killed before or after it happens.)
KILL_EVENTS = list(range(1, 12))


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """Short enough that the killed run crosses an epoch end (validation, best weights, LR decay) within its steps."""
    return repeated_sentences(tmp_path_factory.mktemp("small_corpus"), 0, 40, (3, 12), (60, 15, 15))


def common_args(corpus, tmp_path):
    cfg = json.loads(TINY.read_text())
    # tied weights (one tensor under two names in the checkpoint) and dropout (the RNG state must resume too)
    cfg["model"].update(tie_word_embeddings=True, input_dropout=0.3, weight_drop=0.3, embedding_dropout=0.1)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    return ["--train_file", str(corpus / "train.txt"), "--validation_file", str(corpus / "valid.txt"),
            "--test_file", str(corpus / "test.txt"), "--config", str(tmp_path / "cfg.json"), "--num_threads", "1",
            "--max_train_steps", "36", "--num_train_epochs", "3", "--lr_decay", "0.5", "--checkpointing_steps", "1",
            "--checkpoints_total_limit", "2", "--resume_from_checkpoint", "latest", "--seed", "5"]  # fmt: skip


def run(script, args, kill_at=None, **more_env):
    env = {"HF_HUB_OFFLINE": "1", **_env(), **({"KILL_AT": kill_at} if kill_at else {}), **more_env}
    return launching.run([sys.executable, str(script), *args], env=env)


def log_rows(out):
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def test_sigkill_inside_saves_then_resume_latest_ends_bit_exact(small_corpus, tmp_path):
    args = common_args(small_corpus, tmp_path)
    whole = tmp_path / "whole"
    done = run(TRAIN, [*args, "--output_dir", str(whole)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Removed shared tensor" not in done.stdout + done.stderr  # tied weights are saved once, silently
    killed = tmp_path / "killed"
    for event in KILL_EVENTS:
        done = run(KILLER, [*args, "--output_dir", str(killed)], kill_at=f"2:{event}")
        assert done.returncode == -signal.SIGKILL, (event, done.stderr[-3000:])
        if event < 11:  # a save cut short is invisible: every step_N folder is a whole checkpoint
            assert all(checkpointing.incomplete(f) is None for f in checkpointing.checkpoint_folders(killed)), event
    done = run(TRAIN, [*args, "--output_dir", str(killed)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stdout
    # every loss the killed run ever logged, in any of its lives, is the uninterrupted run's at that step
    reference = losses(whole)
    for row in log_rows(killed):
        if "train_loss" in row:
            assert row["train_loss"] == reference[row["step"]], row
    valid = [r["valid_ppl"] for r in log_rows(whole) if "valid_ppl" in r]
    assert len(valid) >= 1 and valid == [r["valid_ppl"] for r in log_rows(killed) if "valid_ppl" in r][-len(valid) :]
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert json.loads((whole / "results.json").read_text())["test_ppl"] == pytest.approx(
        json.loads((killed / "results.json").read_text())["test_ppl"], rel=0, abs=0
    )
    left = sorted(p.name for p in killed.iterdir() if p.name.startswith("step_"))
    assert left == ["step_35", "step_36"]  # the limit holds, and nothing half-written or half-deleted is left
    # one run through every life: each resume continued the run id of the checkpoint it resumed from
    assert len({r["run_id"] for r in log_rows(killed)}) == 1
    assert {json.loads((killed / n / "checkpoint.json").read_text())["run_id"] for n in left} == {
        log_rows(killed)[0]["run_id"]
    }
    # the best weights ride in each checkpoint with the tied matrix once, as in model.safetensors
    best = checkpointing.read_state(killed / "step_36" / "best_weights.safetensors")["weights"]
    tied = best["lm_head.weight"], best["model.embed_tokens.weight"]
    assert tied[0].untyped_storage().data_ptr() == tied[1].untyped_storage().data_ptr()
    assert sum(
        t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in best.values()}.values()
    ) == sum(t.numel() * t.element_size() for t in load_file(killed / "step_36" / "model.safetensors").values())


def test_latest_skips_incomplete_checkpoints_and_says_so(small_corpus, tmp_path):
    """The issue's case: a kill inside accelerate's save_state left step_3 with the model, the optimizer and an empty
    random_states_0.pkl; and step_2 has lost half a file (a copy cut short). `latest` resumes from the newest whole
    checkpoint, with one line for each one it skips."""
    args = common_args(small_corpus, tmp_path)
    out = tmp_path / "run"
    done = run(TRAIN, [*args, "--output_dir", str(out), "--max_train_steps", "2", "--checkpoints_total_limit", "3"])
    assert done.returncode == 0, done.stderr[-3000:]
    broken = out / "step_3"
    broken.mkdir()
    for name in ("model.safetensors", "optimizer.bin"):
        (broken / name).write_bytes((out / "step_2" / name).read_bytes())
    (broken / "random_states_0.pkl").write_bytes(b"")
    cut = out / "step_2" / "optimizer.bin"
    cut.write_bytes(cut.read_bytes()[:100])
    done = run(TRAIN, [*args, "--output_dir", str(out), "--max_train_steps", "4", "--checkpoints_total_limit", "3"])
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = [line for line in done.stdout.splitlines() if "skipping" in line]
    assert skipped == [
        f"skipping {broken}: incomplete (no readable checkpoint.json: its save did not finish)",
        f"skipping {out / 'step_2'}: incomplete (optimizer.bin is missing or truncated)",
    ]
    assert f"resuming from {out / 'step_1'}" in done.stdout
    assert [r["step"] for r in log_rows(out) if "train_loss" in r] == [1, 2, 2, 3, 4]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step_")) == ["step_2", "step_3", "step_4"]
    assert all(checkpointing.incomplete(out / f"step_{s}") is None for s in (2, 3, 4))  # saved again, whole


def test_resume_from_an_incomplete_checkpoint_by_name_is_one_error(small_corpus, tmp_path):
    (tmp_path / "step_7").mkdir()
    args = [a for a in common_args(small_corpus, tmp_path) if a != "latest"]
    args[args.index("--resume_from_checkpoint") + 1 : args.index("--resume_from_checkpoint") + 1] = [
        str(tmp_path / "step_7")
    ]
    done = run(TRAIN, [*args, "--output_dir", str(tmp_path / "out")])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"train.py: error: --resume_from_checkpoint {tmp_path / 'step_7'} is not a whole checkpoint: no readable "
        "checkpoint.json: its save did not finish"
    ]
    assert not os.path.exists(tmp_path / "out")


def test_resume_by_name_of_a_checkpoint_a_kill_left_renamed_points_to_latest(small_corpus, tmp_path):
    """A kill inside a step's second save can leave only step_N.<run id>.replaced; naming step_N then says where it is
    and which flag puts it back, rather than only that it does not exist."""
    (tmp_path / "step_7.20261128-051500-0123abcd.replaced").mkdir()
    args = [a for a in common_args(small_corpus, tmp_path) if a != "latest"]
    at = args.index("--resume_from_checkpoint") + 1
    args[at:at] = [str(tmp_path / "step_7")]
    done = run(TRAIN, [*args, "--output_dir", str(tmp_path / "out")])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"train.py: error: --resume_from_checkpoint {tmp_path / 'step_7'}: no such checkpoint folder (a kill left it "
        f"as {tmp_path / 'step_7.20261128-051500-0123abcd.replaced'}: --resume_from_checkpoint latest puts it back)"
    )
    assert not os.path.exists(tmp_path / "out")


def test_sigusr1_stops_at_the_epoch_end_with_the_best_weights_named_and_resumes_bit_exact(small_corpus, tmp_path):
    """SIGUSR1 mid-epoch (after the first save, step 1): the run finishes that epoch and its validation, saves a
    checkpoint there whose best weights are named ("model": the first epoch is the best so far) rather than copied,
    and exits 0 without results; resumed, it ends bit-exact with a run that was never stopped."""
    args = common_args(small_corpus, tmp_path)
    whole = tmp_path / "whole"
    done = run(TRAIN, [*args, "--output_dir", str(whole)])
    assert done.returncode == 0, done.stderr[-3000:]
    epoch_end = next(r["step"] for r in log_rows(whole) if "valid_ppl" in r)
    stopped = tmp_path / "stopped"
    done = run(SIGNALLER, [*args, "--output_dir", str(stopped)], SIGNAL_AT="1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"stopped after epoch 1 as asked (SIGUSR1), checkpoint {stopped / f'step_{epoch_end}'}" in done.stdout
    assert not (stopped / "results.json").exists() and not (stopped / "model.safetensors").exists()
    untimed = [{k: v for k, v in r.items() if k not in ("targets_per_s", "run_id")} for r in log_rows(stopped)]
    assert (
        untimed
        == [{k: v for k, v in r.items() if k not in ("targets_per_s", "run_id")} for r in log_rows(whole)][
            : len(untimed)
        ]
    )
    assert "valid_ppl" in untimed[-1] and untimed[-1]["step"] == epoch_end
    saved = stopped / f"step_{epoch_end}"
    assert json.loads((saved / "checkpoint.json").read_text())["step"] == epoch_end
    assert checkpointing.read_state(saved / "best_weights.safetensors") == {"weights": "model"}
    done = run(TRAIN, [*args, "--output_dir", str(stopped)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from {saved}" in done.stdout
    reference = losses(whole)
    assert all(r["train_loss"] == reference[r["step"]] for r in log_rows(stopped) if "train_loss" in r)
    a, b = load_file(whole / "model.safetensors"), load_file(stopped / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert json.loads((whole / "results.json").read_text()) | {"train_minutes": 0} == json.loads(
        (stopped / "results.json").read_text()
    ) | {"train_minutes": 0}


# Events of a save at a step saved before (tests/kill_during_save.py): 1-7 its files, 8 its manifest, 9/10
# before/after the rename of the first checkpoint to step_N.<run id>.replaced, 11/12 before/after the rename of the new
# one to step_N, 13 inside the rmtree of step_N.<run id>.replaced. 1-7 leave what 8 leaves (the first checkpoint whole
# as step_N, the new one's .incomplete folder), the state of the first kill test's events 1-8; 10 and 11 leave the
# first checkpoint whole only as step_N.<run id>.replaced.
RESAVE_EVENTS = list(range(8, 14))


@pytest.fixture(scope="module")
def limit_one(small_corpus, tmp_path_factory):
    """The arguments with a checkpoint every step and a limit of one, and a run of them never stopped."""
    tmp_path = tmp_path_factory.mktemp("limit_one")
    args = [*common_args(small_corpus, tmp_path), "--checkpoints_total_limit", "1"]
    done = run(TRAIN, [*args, "--output_dir", str(tmp_path / "whole")])
    assert done.returncode == 0, done.stderr[-3000:]
    return args, tmp_path / "whole"


@pytest.mark.parametrize("event", RESAVE_EVENTS)
def test_sigkill_inside_the_second_save_of_a_step_resumes_from_that_step_bit_exact(limit_one, tmp_path, event):
    """A stop at an epoch end saves that step a second time (a periodic save came first); a kill at any moment of
    that save leaves a whole checkpoint of that step, the only one (limit 1), and the resumed run ends bit-exact with
    the run never stopped."""
    args, whole = limit_one
    epoch_end = next(r["step"] for r in log_rows(whole) if "valid_ppl" in r)
    killed = tmp_path / "killed"
    # saves 1 .. epoch_end are the periodic ones; the stop asked for after save 1 saves epoch_end again
    done = run(KILLER, [*args, "--output_dir", str(killed)], kill_at=f"{epoch_end + 1}:{event}", SIGNAL_AT="1")
    assert done.returncode == -signal.SIGKILL, done.stdout[-3000:] + done.stderr[-3000:]
    done = run(TRAIN, [*args, "--output_dir", str(killed)])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"resuming from {killed / f'step_{epoch_end}'}" in done.stdout
    assert (f"restored {killed / f'step_{epoch_end}'}" in done.stdout) == (event in (10, 11))
    reference = losses(whole)
    assert all(r["train_loss"] == reference[r["step"]] for r in log_rows(killed) if "train_loss" in r)
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    last = args[args.index("--max_train_steps") + 1]
    assert sorted(p.name for p in killed.iterdir() if p.name.startswith("step_")) == [f"step_{last}"]


def test_best_weights_name_an_equal_source_and_load_it_back():
    """The best weights are saved as "model" or "average" only while they equal that source exactly, and load back
    as its copy, a tied matrix once; otherwise as themselves."""
    from modeling_pointer_sentinel import PointerSentinelConfig, PointerSentinelForCausalLM
    from modeling_pointer_sentinel.training import ParameterAverager

    torch.manual_seed(0)
    cfg = PointerSentinelConfig(vocab_size=30, embedding_size=8, hidden_size=8, num_layers=1, pointer_window=4,
                                tie_word_embeddings=True)  # fmt: skip
    model = PointerSentinelForCausalLM(cfg)
    averager = ParameterAverager(model.parameters())
    best = checkpointing.BestWeights(model, averager)
    best.keep()
    assert best.state_dict() == {"weights": "model"}
    averager.start()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    averager.update()  # the average is now halfway between the start and the live weights
    averager.swap()
    best.keep()  # as the loop keeps them: with the average swapped in
    averager.swap()
    kept = {k: v.clone() for k, v in best.weights.items()}
    assert best.state_dict() == {"weights": "average"}
    fresh = checkpointing.BestWeights(model, averager)
    fresh.load_state_dict(best.state_dict())
    assert fresh.weights.keys() == kept.keys() and all(torch.equal(fresh.weights[k], v) for k, v in kept.items())
    tied = fresh.weights["lm_head.weight"], fresh.weights["model.embed_tokens.weight"]
    assert tied[0].data_ptr() == tied[1].data_ptr()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    averager.update()  # both sources moved on: the best weights are saved as themselves
    saved = best.state_dict()["weights"]
    assert isinstance(saved, dict) and all(torch.equal(saved[k], v) for k, v in kept.items())


def test_sigusr1_stops_a_run_without_validation_at_its_epoch_end(small_corpus, tmp_path):
    """With nothing to validate on, the epoch end is still where a stop asked for mid-epoch lands."""
    args = common_args(small_corpus, tmp_path)
    i = args.index("--validation_file")
    del args[i : i + 2]
    out = tmp_path / "out"
    done = run(SIGNALLER, [*args, "--output_dir", str(out)], SIGNAL_AT="1")
    assert done.returncode == 0, done.stderr[-3000:]
    epoch_end = next(r["step"] for r in log_rows(out) if "train_loss" not in r)  # the "epoch done" row
    assert f"stopped after epoch 1 as asked (SIGUSR1), checkpoint {out / f'step_{epoch_end}'}" in done.stdout
    assert not (out / "results.json").exists()
    # a run whose step limit ends it at that same epoch end finishes there, asked or not
    limited = [*args, "--output_dir", str(tmp_path / "limited"), "--max_train_steps", str(epoch_end)]
    done = run(SIGNALLER, limited, SIGNAL_AT="1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "as asked" not in done.stdout and (tmp_path / "limited" / "results.json").exists()


def same_model_and_test_ppl(a, b):
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert (
        json.loads((a / "results.json").read_text())["test_ppl"]
        == json.loads((b / "results.json").read_text())["test_ppl"]
    )


def test_two_rank_run_killed_in_training_and_in_saves_resumes_latest_bit_exact(small_corpus, tmp_path):
    """`accelerate launch` with 2 gloo ranks, killed (a real SIGKILL of one rank; the launcher then stops the other)
    during training, in rank 0's manifest write and in rank 1's own file of a save, each time resumed with
    --resume_from_checkpoint latest: every loss ever logged, the final model and the test perplexity are those of
    the 2-rank run never killed."""
    args = common_args(small_corpus, tmp_path)
    args[args.index("--max_train_steps") + 1] = "10"
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    launch([*args, "--output_dir", str(whole)], processes=2, port=29631)
    # rank 1 after its 3rd optimizer step (before that step's save); rank 0 in its 2nd save's manifest (event 8);
    # rank 1 in its 2nd save's stream_state_1.safetensors (its events: 1 random_states_1.pkl, 2 that file)
    for kill in ({"KILL_AT_STEP": "3", "KILL_RANK": "1"}, {"KILL_AT": "2:8", "KILL_RANK": "0"},
                 {"KILL_AT": "2:2", "KILL_RANK": "1"}):  # fmt: skip
        done = launch([*args, "--output_dir", str(killed)], processes=2, port=29631, check=False, script=KILLER,
                      **kill)  # fmt: skip
        assert done.returncode != 0 and "Signal 9 (SIGKILL)" in done.stderr, (kill, done.stderr[-3000:])
        assert not (killed / "results.json").exists()
    done = launch([*args, "--output_dir", str(killed)], processes=2, port=29631)
    assert "resuming from" in done.stdout
    reference = losses(whole)
    rows = [r for r in log_rows(killed) if "train_loss" in r]
    assert {r["step"] for r in rows} == set(reference)
    assert all(r["train_loss"] == reference[r["step"]] for r in rows)
    same_model_and_test_ppl(whole, killed)
    assert len({r["run_id"] for r in log_rows(killed)}) == 1


def test_a_rank_waiting_on_a_stuck_peer_fails_within_the_ddp_timeout(small_corpus, tmp_path):
    """Rank 1 stops answering after its 2nd optimizer step, alive (the launcher sees nothing wrong): rank 0's next
    collective fails after --ddp_timeout seconds and the launch ends, rather than waiting for ever."""
    args = [*common_args(small_corpus, tmp_path), "--output_dir", str(tmp_path / "out"), "--ddp_timeout", "5"]
    done = launch(args, processes=2, port=29632, check=False, script=KILLER, timeout=300, HANG_AT_STEP="2",
                  KILL_RANK="1")  # fmt: skip
    assert done.returncode != 0
    assert "Timed out waiting 5000ms" in done.stderr, done.stderr[-3000:]  # gloo's words for the 5 s asked for


# ---- a run owns its checkpoints ----
def manifest(folder):
    return json.loads((folder / "checkpoint.json").read_text())


def step_folders(out):
    names = [p.name for p in out.iterdir() if p.name.startswith("step_")]
    return sorted(names, key=lambda n: (int(n[5:].split(".")[0]), n))


def test_clean_up_removes_only_the_runs_own_folders(tmp_path):
    """With a limit of 1, run "mine" keeps its newest checkpoint and loses its older one and its kill leftovers;
    another run's newer checkpoint, its half-deleted one, its .replaced and its .incomplete (maybe a save in progress)
    stay, and a folder no save wrote (no manifest) goes."""

    def checkpoint(name, run_id, step, whole=True):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"12345")
        files = {"model.safetensors": 5 if whole else 6}
        (folder / "checkpoint.json").write_text(json.dumps({"step": step, "run_id": run_id, "files": files}))

    checkpoint("step_2", "mine", 2)
    checkpoint("step_3", "mine", 3)
    checkpoint("step_4", "mine", 4, whole=False)  # a kill inside its deletion
    checkpoint("step_5.mine.replaced", "mine", 5)
    (tmp_path / "step_6.mine.replaced").mkdir()  # a kill inside its deletion took its manifest
    (tmp_path / "step_6.mine.incomplete").mkdir()
    checkpoint("step_1", "other", 1, whole=False)
    checkpoint("step_8", "other", 8)
    checkpoint("step_9.other.replaced", "other", 9)
    (tmp_path / "step_9.other.incomplete").mkdir()
    (tmp_path / "step_7").mkdir()  # no manifest: not a checkpoint of any run
    checkpointing.tidy_checkpoints(tmp_path, 1, {"mine"}, say=lambda _: None)
    assert step_folders(tmp_path) == ["step_1", "step_3", "step_8", "step_9.other.incomplete", "step_9.other.replaced"]


def test_a_fresh_run_beside_another_runs_checkpoints_is_refused_unless_overwriting(small_corpus, tmp_path, capsys):
    """The issue's case: run A leaves its checkpoints; a fresh run B in the same folder stops with one error line and
    deletes nothing. `latest` continues A (its run id); --overwrite_output_dir lets B start, deleting A's checkpoints,
    and B keeps its own under its limit. Each log line names its run."""
    train, out = train_module(), tmp_path / "out"
    common = ["--checkpointing_steps", "2", "--checkpoints_total_limit", "1", "--num_threads", "1"]
    train.main(small_args(small_corpus, out, *common, "--max_train_steps", "4"))
    a = manifest(out / "step_4")["run_id"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        train.main(small_args(small_corpus, out, *common, "--max_train_steps", "2"))
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    assert f"{out} holds 1 checkpoint(s) of another run ({a}: step_4)" in err[0] and "--overwrite_output_dir" in err[0]
    assert step_folders(out) == ["step_4"]
    train.main(small_args(small_corpus, out, *common, "--max_train_steps", "6", "--resume_from_checkpoint", "latest"))
    assert step_folders(out) == ["step_6"] and manifest(out / "step_6")["run_id"] == a
    train.main(small_args(small_corpus, out, *common, "--max_train_steps", "4", "--overwrite_output_dir"))
    assert step_folders(out) == ["step_4"]
    b = manifest(out / "step_4")["run_id"]
    assert b != a and "parent" not in manifest(out / "step_4")
    assert [r["run_id"] for r in log_rows(out) if "train_loss" in r] == [a] * 6 + [b] * 4


def test_resuming_an_older_checkpoint_forks_a_new_run_that_keeps_the_first_runs_checkpoints(
    small_corpus, tmp_path, capsys
):
    """Resuming step_4 of run A while A's step_6 and step_8 exist starts a new run from A's past: into A's own folder
    it is refused (its step_6 would take the name of A's), into another folder it trains on bit-exact from A's step 4
    under a new run id whose checkpoints name A and step 4 as their parent, and A's checkpoints stay as they were."""
    train, a_dir = train_module(), tmp_path / "a"
    common = ["--checkpointing_steps", "2", "--num_threads", "1", "--max_train_steps", "8"]
    train.main(small_args(small_corpus, a_dir, *common))
    a = manifest(a_dir / "step_8")["run_id"]
    before = {p.relative_to(a_dir): p.read_bytes() for p in a_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    from_4 = ["--resume_from_checkpoint", str(a_dir / "step_4")]
    with pytest.raises(SystemExit) as stop:
        train.main(small_args(small_corpus, a_dir, *common, *from_4))
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and f"this run forks run {a} at step 4" in err[0], err
    fork = tmp_path / "fork"
    train.main(small_args(small_corpus, fork, *common, *from_4, "--checkpoints_total_limit", "1"))
    assert f"a new run forked from run {a} at step 4" in capsys.readouterr().out
    assert {p.relative_to(a_dir): p.read_bytes() for p in a_dir.rglob("*") if p.is_file()} == before
    assert step_folders(fork) == ["step_8"]
    assert manifest(fork / "step_8")["run_id"] != a
    assert manifest(fork / "step_8")["parent"] == {"run_id": a, "step": 4, "folder": str(a_dir / "step_4")}
    reference = losses(a_dir)
    assert all(loss == reference[step] for step, loss in losses(fork).items()) and sorted(losses(fork)) == [5, 6, 7, 8]
    # resuming A's newest checkpoint in A's folder continues run A
    train.main(small_args(small_corpus, a_dir, *common[:-1], "10", "--resume_from_checkpoint", str(a_dir / "step_8")))
    assert manifest(a_dir / "step_10")["run_id"] == a and "parent" not in manifest(a_dir / "step_10")


# ---- a checkpoint runs no code ----
class Payload:
    """Unpickled, it runs a shell command that leaves a marker file: a forged checkpoint file's payload."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def plant(folder, name, marker):
    """Replace (or add) `name` in a checkpoint with the payload, and update the manifest as a forger would."""
    torch.save(Payload(marker), folder / name)
    saved = manifest(folder)
    saved["files"][name] = (folder / name).stat().st_size
    (folder / "checkpoint.json").write_text(json.dumps(saved))


# every file a save writes, and a pickle no save writes any more (accelerate would unpickle it with code allowed)
CHECKPOINT_FILES = ["model.safetensors", "optimizer.bin", "random_states_0.pkl", "train_state.json",
                    "averager.safetensors", "best_weights.safetensors", "stream_state_0.safetensors",
                    "custom_checkpoint_0.pkl"]  # fmt: skip


@pytest.fixture(scope="module")
def saved_run(small_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("saved_run") / "run"
    train_module().main(small_args(small_corpus, out, "--checkpointing_steps", "2", "--max_train_steps", "2",
                                   "--num_threads", "1"))  # fmt: skip
    assert sorted(p.name for p in (out / "step_2").iterdir()) == sorted(
        ["checkpoint.json", *CHECKPOINT_FILES[:-1]]
    )  # nothing pickled but accelerate's optimizer and RNG states
    return out


@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_forged_checkpoint_file_runs_no_code_and_stops_the_resume_in_one_line(
    small_corpus, saved_run, tmp_path, capsys, name
):
    """The issue's case: one file of the newest checkpoint replaced by a torch.save'd object whose unpickling runs a
    shell command, the manifest's sizes updated. `--resume_from_checkpoint latest` runs no code and stops with one
    line (exit status 2) that names the file."""
    out, marker = tmp_path / "run", tmp_path / "payload_ran"
    shutil.copytree(saved_run, out)
    plant(out / "step_2", name, marker)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        train_module().main(small_args(small_corpus, out, "--checkpointing_steps", "2",
                                       "--max_train_steps", "4", "--num_threads", "1",
                                       "--resume_from_checkpoint", "latest"))  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert not marker.exists(), name
    assert stop.value.code == 2 and len(err) == 1, err
    assert str(out / "step_2" / name) in err[0] and "forged or damaged" in err[0], err
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step_")) == ["step_2"]  # nothing saved


def test_a_resume_on_a_torch_with_an_unsafe_unpickler_stops_in_one_line(small_corpus, saved_run, tmp_path, capsys,
                                                                        monkeypatch):  # fmt: skip
    """torch below 2.10 (faked): its weights_only unpickler is unsafe (CVE-2026-24747), so the resume reads no pickle
    and stops with one line naming the CVE and the torch to install; the same checkpoint resumes on this torch."""
    out = tmp_path / "run"
    shutil.copytree(saved_run, out)
    resume = small_args(small_corpus, out, "--checkpointing_steps", "2", "--max_train_steps", "4",
                        "--num_threads", "1", "--resume_from_checkpoint", "latest")  # fmt: skip
    monkeypatch.setattr(torch, "__version__", "2.9.1+cpu")
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        train_module().main(resume)
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1, err
    assert "CVE-2026-24747" in err[0] and "torch>=2.10" in err[0] and "optimizer.bin" in err[0], err
    monkeypatch.undo()
    train_module().main(resume)
    assert (out / "step_4").is_dir()
