"""Elastic world size: a checkpoint records its stream layout, and a resume on another number of processes with the
same global stream counts continues every stream where it stopped (the saved ranks' stream states re-sharded), as an
unbroken run with that global layout would; any other layout stops with one error line that says how to resume."""

import json
import shutil

import pytest
from test_train import corpus, data_args, launch, losses, train_module  # noqa: F401 (corpus: a fixture)


def batches(n: int) -> list[str]:
    return ["--per_device_train_batch_size", str(n), "--per_device_eval_batch_size", str(n)]


def test_resumes_from_one_process_on_two_and_from_two_on_one_continue_every_stream(corpus, tmp_path):  # noqa: F811
    """One process with batch 2 trains 8 steps (the reference). Its step-4 checkpoint resumed by 2 ranks with batch 1
    (1 -> 2: each rank takes one row of the saved state), and that run's step-6 checkpoint resumed by one process
    with batch 2 (2 -> 1: both ranks' rows in rank order), log the reference's losses: every stream continued from
    its own recurrent state and pointer window. (2 ranks with batch 1 equal 1 process with batch 2: see
    test_two_process_launch_trains_as_one_process_with_double_batch; the tiny model has no dropout, whose masks a
    re-sharded resume draws afresh.)"""
    common = data_args(corpus) + ["--num_threads", "1", "--max_train_steps", "8", "--log_every", "1"]
    one, two, back = tmp_path / "one", tmp_path / "two", tmp_path / "back"
    launch(common + batches(2) + ["--output_dir", str(one), "--checkpointing_steps", "4"])
    reference = losses(one)
    manifest = json.loads((one / "step_4" / "checkpoint.json").read_text())
    layout = manifest["layout"]
    assert {k: layout[k] for k in ("world_size", "per_device_train_batch_size", "streams", "eval_streams")} == {
        "world_size": 1, "per_device_train_batch_size": 2, "streams": 2, "eval_streams": 2}  # fmt: skip
    assert layout["epoch"] == 0 and layout["stream_position"] > 1 and layout["tokens_per_stream"] > 100

    resume = ["--resume_from_checkpoint", str(one / "step_4")]
    done = launch(common + batches(1) + ["--output_dir", str(two), "--checkpointing_steps", "2", *resume],
                  processes=2, port=29653)  # fmt: skip
    assert "resumed the 2 streams of 1 process(es) on 2" in done.stdout
    assert json.loads((two / "step_6" / "checkpoint.json").read_text())["layout"]["world_size"] == 2
    resumed = losses(two)
    assert sorted(resumed) == [5, 6, 7, 8]
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-5), step

    done = launch(common + batches(2) + ["--output_dir", str(back), "--resume_from_checkpoint", str(two / "step_6")])
    assert "resumed the 2 streams of 2 process(es) on 1" in done.stdout
    resumed = losses(back)
    assert sorted(resumed) == [7, 8]
    for step in resumed:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-5), step


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len([line for line in lines if "error" in line.lower()]) == 1, err
    return lines[-1]


def test_a_resume_that_would_cut_other_streams_is_one_error_line(corpus, tmp_path, capsys):  # noqa: F811
    """Another global count of training or evaluation streams, another training text (other stream lengths), and a
    checkpoint saved before layouts were recorded on another world size: each stops before training with one line
    that says how to resume (in-process: any traceback fails the test)."""
    train = train_module()
    args = data_args(corpus) + ["--num_threads", "1", "--max_train_steps", "2", "--checkpointing_steps", "2"]
    saved = tmp_path / "saved" / "step_2"
    train.main(args + batches(2) + ["--output_dir", str(saved.parent)])
    capsys.readouterr()

    def refused(*extra) -> str:
        out = tmp_path / "out"
        with pytest.raises(SystemExit) as stop:
            train.main(args + ["--output_dir", str(out), "--resume_from_checkpoint", str(saved), *extra])
        assert stop.value.code == 2 and not (out / "log.jsonl").exists()
        return one_error_line(capsys.readouterr().err)

    line = refused(*batches(1))
    assert "holds 2 training and 2 evaluation streams (1 process(es) x batch 2 and 2)" in line, line
    assert line.endswith("resume with --per_device_train_batch_size 2 --per_device_eval_batch_size 2"), line
    line = refused("--per_device_train_batch_size", "2", "--per_device_eval_batch_size", "1")
    assert "this launch would make 2 and 1" in line, line
    line = refused("--per_device_train_batch_size", "3")
    assert "this launch would make 3 and 2" in line, line

    short = tmp_path / "short.txt"  # the same words, half the text: shorter streams
    text = (corpus / "train.txt").read_text().splitlines()
    short.write_text("\n".join(text[: len(text) // 2]) + "\n")
    line = refused("--train_file", str(short))
    assert "tokens per stream, this training data gives" in line, line

    manifest = json.loads((saved / "checkpoint.json").read_text())
    del manifest["layout"]  # as written before layouts were recorded, by two ranks
    shutil.copy(saved / "stream_state_0.safetensors", saved / "stream_state_1.safetensors")
    manifest["files"]["stream_state_1.safetensors"] = manifest["files"]["stream_state_0.safetensors"]
    (saved / "checkpoint.json").write_text(json.dumps(manifest))
    line = refused()
    assert "was saved by 2 process(es) and records no stream layout: resume it on 2" in line, line
