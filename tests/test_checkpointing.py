"""modeling_pointer_sentinel/checkpointing.py on its own, without examples/train.py: state files, a save cut short at
each of its file operations, run ownership, the elastic re-shard, and the accelerate load paths it relies on."""

import json
import math
import os
import pickle

import pytest
import torch
from accelerate import Accelerator

from modeling_pointer_sentinel import checkpointing as ck


def test_state_files_round_trip_with_a_tied_tensor_stored_once(tmp_path):
    tied = torch.randn(3, 4)
    state = {"weights": {"a": tied, "b": tied, "mask": torch.tensor([True, False])}, "layers": [torch.ones(2), None],
             "count": 7, "name": "model", "best": math.inf}  # fmt: skip
    ck.write_state(tmp_path / "s.safetensors", state)
    back = ck.read_state(tmp_path / "s.safetensors")
    assert back["weights"]["a"] is back["weights"]["b"] and torch.equal(back["weights"]["a"], tied)
    assert torch.equal(back["weights"]["mask"], state["weights"]["mask"]) and back["layers"][1] is None
    assert (back["count"], back["name"], back["best"]) == (7, "model", math.inf)
    assert (tmp_path / "s.safetensors").stat().st_size < 2 * tied.numel() * 4 + 1000  # the tied matrix once
    ck.write_state(tmp_path / "t.json", {"val_losses": [1.5], "best_val": math.inf, "clock": None})
    assert ck.read_state(tmp_path / "t.json") == {"val_losses": [1.5], "best_val": math.inf, "clock": None}
    with pytest.raises(TypeError, match="not a state a checkpoint holds"):
        ck.write_state(tmp_path / "u.safetensors", {"x": object()})


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def tiny(tmp_path):
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return accelerator, *accelerator.prepare(model, optimizer)


def test_accelerate_reads_its_own_pickles_weights_only(tmp_path):
    """What check_files adds to accelerate 1.15's load_state, and what it relies on: load_state reads optimizer.bin
    and random_states_<rank>.pkl with weights_only=True (a payload does not run), but a random state it cannot read is
    skipped without a word; a custom_checkpoint_<i>.pkl, which no save of ours writes, it would unpickle with code
    allowed. A release that changes either read fails here."""
    accelerator, model, optimizer = tiny(tmp_path)
    marker = tmp_path / "payload_ran"
    for name in ("optimizer.bin", "random_states_0.pkl"):
        folder = tmp_path / name
        accelerator.save_state(folder)
        torch.save(Payload(marker), folder / name)
        if name == "optimizer.bin":
            with pytest.raises(pickle.UnpicklingError):
                accelerator.load_state(folder)
        else:
            accelerator.load_state(folder)  # silently: check_files is what refuses it
        assert not marker.exists(), name
        with pytest.raises(ck.CheckpointError, match=f"{folder / name} is forged or damaged"):
            ck.check_files(folder)
    from accelerate.checkpointing import load_custom_state

    torch.save(Payload(marker), tmp_path / "custom_checkpoint_0.pkl")
    with pytest.raises(TypeError):  # the payload ran first; its result (os.system's exit status) is no state
        load_custom_state(ck.TrainState(0.0), str(tmp_path), 0)
    assert marker.exists()  # why the states are not registered with accelerate


def test_a_save_cut_short_at_each_of_its_files_leaves_the_last_whole_checkpoint(tmp_path, monkeypatch):
    """A save that stops at any of this module's file writes (its states, its stream state, its manifest: an
    exception here, where tests/test_checkpoints.py uses SIGKILL) leaves step_1 the newest whole checkpoint; the next
    save removes the leftover, and the checkpoint loads back each state."""
    accelerator, model, optimizer = tiny(tmp_path)
    state, streams = ck.TrainState(0.5), ck.TrainState(0.0)  # any object with state_dict()
    run = {"run_id": "r", "own": {"r"}, "parent": None}
    out = tmp_path / "out"
    out.mkdir()
    ck.save_checkpoint(accelerator, out, 1, {"train_state.json": state}, streams, 2, run)
    write_file, files = ck.write_file, ["train_state.json", "stream_state_0.safetensors", ck.MANIFEST]
    for cut in files:

        def cut_short(path, data, cut=cut):
            if path.name == cut:
                write_file(path, data[: len(data) // 2])
                raise KeyboardInterrupt
            write_file(path, data)

        monkeypatch.setattr(ck, "write_file", cut_short)
        state.step = 2
        with pytest.raises(KeyboardInterrupt):
            ck.save_checkpoint(accelerator, out, 2, {"train_state.json": state}, streams, 2, run)
        assert ck.latest_checkpoint(out) == out / "step_1", cut
        assert (out / "step_2.r.incomplete").is_dir()
    monkeypatch.setattr(ck, "write_file", write_file)
    ck.save_checkpoint(accelerator, out, 2, {"train_state.json": state}, streams, 2, run)
    assert sorted(p.name for p in out.iterdir()) == ["step_1", "step_2"]
    loaded = ck.TrainState(0.0)
    ck.load_checkpoint(accelerator, out / "step_1", {"train_state.json": loaded})
    assert (loaded.step, loaded.lr) == (0, 0.5)


def checkpoint(folder, run_id, step):
    folder.mkdir(parents=True)
    (folder / ck.MANIFEST).write_text(json.dumps({"step": step, "run_id": run_id, "files": {}}))


def test_a_run_owns_its_checkpoints(tmp_path):
    """A fresh run beside another run's checkpoint is refused in one message naming them, unless overwriting; the
    newest checkpoint in its own folder continues its run; an older one, or one elsewhere, forks a new run."""
    out = tmp_path / "out"
    checkpoint(out / "step_2", "a", 2)
    checkpoint(out / "step_4", "a", 4)
    with pytest.raises(ck.CheckpointError, match=r"holds 2 checkpoint\(s\) of another run \(a: step_2, step_4\)"):
        ck.claim_run(out, None, False, new_id=lambda: "b")
    run, foreign = ck.claim_run(out, None, True, new_id=lambda: "b")
    assert run == {"run_id": "b", "own": {"b"}, "parent": None} and foreign == [out / "step_2", out / "step_4"]
    run, foreign = ck.claim_run(out, out / "step_4", False, new_id=lambda: "b")
    assert run == {"run_id": "a", "own": {"a"}, "parent": None} and foreign == []
    fork = {"run_id": "a", "step": 2, "folder": str(out / "step_2")}
    with pytest.raises(ck.CheckpointError, match="this run forks run a at step 2"):
        ck.claim_run(out, out / "step_2", False, new_id=lambda: "b", say=lambda _: None)
    run, _ = ck.claim_run(tmp_path / "fork", out / "step_2", False, new_id=lambda: "b", say=lambda _: None)
    assert run == {"run_id": "b", "own": {"b"}, "parent": fork}


def test_streams_resharded_over_another_number_of_processes(tmp_path):
    """Two saved ranks of batch 2 (global streams 0-3): four ranks of batch 1 take one row each, one of batch 4 all
    of them in rank order; a list (per layer) and None survive, and the layout check says when it fits."""
    for rank in (0, 1):
        rows = torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32)[:, None]
        state = {"hidden": [rows, -rows], "window_ids": rows.long(), "window_context": None, "seen_tokens": 9}
        ck.write_state(tmp_path / f"stream_state_{rank}.safetensors", state)
    for rank in range(4):
        one = ck.resharded_stream_state(tmp_path, 2, 1, rank)
        assert one["hidden"][0].tolist() == [[rank]] and one["hidden"][1].tolist() == [[-rank]]
        assert one["window_ids"].tolist() == [[rank]] and one["window_context"] is None and one["seen_tokens"] == 9
    assert ck.resharded_stream_state(tmp_path, 2, 4, 0)["window_ids"].flatten().tolist() == [0, 1, 2, 3]
    layout = ck.stream_layout(2, 2, 2, 100, 0, 35)
    assert ck.layout_mismatch(tmp_path, layout, 4, 1, 1) is None
    assert ck.layout_mismatch(tmp_path, layout, 1, 4, 4) is None
    assert "resume with --per_device_train_batch_size 4" in ck.layout_mismatch(tmp_path, layout, 1, 2, 2)
    assert ck.layout_mismatch(tmp_path, None, 2, 9, 9) is None  # no layout: two saved ranks resume on two


def test_start_run_finds_the_checkpoint_claims_the_run_and_checks_the_stream_layout(tmp_path):
    """train.py's start: `latest` finds the newest whole checkpoint, whose run it continues, with its layout; another
    run's checkpoints are refused, or listed for delete_foreign to delete; a launch that would cut other streams is
    refused, and so is other training text (check_tokens_per_stream)."""
    accelerator, out = Accelerator(cpu=True), tmp_path / "out"
    fresh = ck.start_run(accelerator, out, "latest", False, 2, 2)
    assert (fresh.resume, fresh.foreign, fresh.layout, fresh.run["parent"]) == (None, [], None, None)
    layout = ck.stream_layout(1, 2, 2, 50, 0, 35)
    checkpoint(out / "step_2", "a", 2)
    (out / "step_2" / ck.MANIFEST).write_text(json.dumps({"step": 2, "run_id": "a", "files": {}, "layout": layout}))
    resume, run, foreign, saved = ck.start_run(accelerator, out, "latest", False, 2, 2)
    assert (resume, run["run_id"], foreign, saved) == (out / "step_2", "a", [], layout)
    with pytest.raises(ck.CheckpointError, match=r"holds 1 checkpoint\(s\) of another run \(a: step_2\)"):
        ck.start_run(accelerator, out, None, False, 2, 2)
    with pytest.raises(ck.CheckpointError, match="would cut the corpus into other streams: resume with"):
        ck.start_run(accelerator, out, str(out / "step_2"), False, 4, 2)
    ck.check_tokens_per_stream(resume, saved, 50)
    ck.check_tokens_per_stream(resume, None, 49)  # no layout recorded: nothing to compare
    with pytest.raises(ck.CheckpointError, match="trained on 50 tokens per stream, this training data gives 49"):
        ck.check_tokens_per_stream(resume, saved, 49)
    fresh = ck.start_run(accelerator, out, None, True, 2, 2)
    assert fresh.foreign == [out / "step_2"] and fresh.run["run_id"] != "a"
    ck.delete_foreign(accelerator, fresh.foreign)
    assert not (out / "step_2").exists()


def test_best_weights_restore_the_best_else_the_average_and_drop_the_average():
    from modeling_pointer_sentinel.training import ParameterAverager

    model = torch.nn.Linear(2, 2)
    averager = ParameterAverager(model.parameters())
    best = ck.BestWeights(model, averager)
    first = {k: v.clone() for k, v in model.state_dict().items()}
    best.keep()
    averager.start()
    with torch.no_grad():
        model.weight.add_(1.0)
    best.restore()  # the kept weights, not the average's or the live ones
    assert all(torch.equal(model.state_dict()[k], v) for k, v in first.items()) and not averager.active
    best.weights = None
    averager.start()
    live = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1.0)
    best.restore()  # no best kept: the average
    assert torch.equal(model.weight, live) and not averager.active


def test_load_resume_loads_the_run_keeps_this_runs_rates_and_reseeds_on_another_world_size(tmp_path, capsys):
    from conftest import tiny_model

    from modeling_pointer_sentinel import PointerSentinelCache
    from modeling_pointer_sentinel.training import load_resume, make_optimizer

    accelerator, out = Accelerator(cpu=True), tmp_path / "out"
    model = tiny_model()
    optimizer = make_optimizer(model, "sgd", 1.0)
    optimizer.param_groups[0]["lr_scale"] = 0.25  # the saved run's
    model, optimizer = accelerator.prepare(model, optimizer)
    streams = torch.randint(0, 23, (2, 8), generator=torch.Generator().manual_seed(0))
    cache = model(streams, use_cache=True).past_key_values
    state = ck.TrainState(0.5)
    state.step = 3
    run = {"run_id": "r", "own": {"r"}, "parent": None}
    ck.save_checkpoint(accelerator, out, 3, {"train_state.json": state}, cache, None, run)
    saved = ck.read_state(out / "step_3" / "stream_state_0.safetensors")
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    optimizer.param_groups[0]["lr_scale"] = 1.0  # this run's
    loaded = ck.TrainState(0.0)
    layout = ck.stream_layout(2, 2, 2, 8, 0, 4)  # as if two ranks of batch 1 had saved it: another world size
    layout["per_device_train_batch_size"] = 2
    stream = load_resume(accelerator, out / "step_3", {"train_state.json": loaded}, layout, 2, False, optimizer, 7)
    assert (loaded.step, loaded.lr) == (3, 0.5) and optimizer.param_groups[0]["lr_scale"] == 1.0
    assert any(p.abs().sum() > 0 for p in model.parameters())  # the model's weights are back
    assert stream["seen_tokens"] == saved["seen_tokens"] and torch.equal(stream["window_ids"], saved["window_ids"])
    PointerSentinelCache().load_state_dict(stream)
    assert "resumed the 2 streams of 2 process(es) on 1" in capsys.readouterr().out
    reseeded = torch.rand(3)
    torch.manual_seed(7 + 3)
    assert torch.equal(reseeded, torch.rand(3))
    with pytest.raises(ck.CheckpointError, match="was trained without the placeholders' own weights: resume it "
                                                 "without --oov_pointer"):  # fmt: skip
        load_resume(accelerator, out / "step_3", {"train_state.json": loaded}, None, 2, True, optimizer)
