import collections
import json
import math
import random
import subprocess
import sys
import time
import types
from pathlib import Path

import launching
import pytest
import torch
from conftest import ROOT, tiny_model
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from modeling_pointer_sentinel import PointerSentinelCache, training
from modeling_pointer_sentinel.training import (
    ParameterAverager,
    improves,
    make_segment,
    nt_asgd_triggered,
    run_segment,
    segment_schedule,
    shard_streams,
)

TRAIN = ROOT / "examples" / "train.py"
TINY = ROOT / "examples" / "configs" / "tiny_test.json"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    for split, n in (("train", 300), ("valid", 40), ("test", 40)):
        lines = (" " + " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + " " for _ in range(n))
        (d / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return d


def data_args(corpus):
    return ["--train_file", str(corpus / "train.txt"), "--validation_file", str(corpus / "valid.txt"),
            "--test_file", str(corpus / "test.txt"), "--config", str(TINY)]  # fmt: skip


def launch_command(args, processes=1, port=29617, script=TRAIN):
    if processes == 1:
        return [sys.executable, str(script), *args]
    # a collective that waits on a dead rank fails within --ddp_timeout rather than hanging
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
            str(port), str(script), "--cpu", "--ddp_timeout", "120", *args]  # fmt: skip


def launch(args, processes=1, port=29617, check=True, script=TRAIN, timeout=600, **env):
    """Run `script` (train.py, or a test wrapper of it) in one process or under `accelerate launch` with gloo ranks,
    its whole process group killed when it ends (tests/launching.py): no rank outlives the test."""
    cmd = launch_command(args, processes, port, script)
    done = launching.run(cmd, timeout=timeout, cwd=ROOT, env={"HF_HUB_OFFLINE": "1", **_env(), **env})
    if check:
        assert done.returncode == 0, done.stderr[-4000:]
    return done


def _env():
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}


def train_module():
    """examples/train.py imported, to run main([...]) in this process (fast, and monkeypatch reaches its names)."""
    sys.path.insert(0, str(TRAIN.parent))
    import train

    return train


def losses(out_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out_dir / "log.jsonl").read_text().splitlines()]
    return {r["step"]: r["train_loss"] for r in rows if "train_loss" in r}


def test_two_process_launch_trains_as_one_process_with_double_batch(corpus, tmp_path):
    """Two gloo ranks with batch 1 each must follow one process with batch 2 step by step: only true if both ranks
    train together (sharded streams, all-reduced gradients). With a --max_train_minutes far off, the ranks also agree
    on the time limit through broadcasts at step 1 (near until a log step says otherwise) and at the log steps: a
    collective entered by one rank only would hang (the launch times out)."""
    common = data_args(corpus) + ["--max_train_steps", "6", "--max_train_minutes", "1000", "--log_every", "2"]
    two = launch(common + ["--output_dir", str(tmp_path / "two"), "--per_device_train_batch_size", "1"], processes=2)
    assert "2 process(es) x batch 1" in two.stdout
    one = launch(common + ["--output_dir", str(tmp_path / "one"), "--per_device_train_batch_size", "2"])
    assert "| 6/6 [" in one.stderr  # the progress bar ends where max_train_steps stops, not at the epoch's end
    a, b = losses(tmp_path / "two"), losses(tmp_path / "one")
    assert sorted(a) == [2, 4, 6]
    for step in a:
        assert a[step] == pytest.approx(b[step], rel=1e-5), step
    rows = [json.loads(line) for line in (tmp_path / "two" / "log.jsonl").read_text().splitlines()]
    assert all(r["world_size"] == 2 for r in rows if "world_size" in r)


def wait_for(condition, what: str, limit_s: float = 300):
    for _ in range(int(limit_s * 10)):
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"gave up waiting for {what} after {limit_s} s")


def endless_two_rank_launch(corpus, out: Path) -> list[str]:
    """A 2-rank launch that trains for hours (no early stop): only a kill ends it within a test."""
    endless = ["--num_train_epochs", "1000000", "--patience", "1000000", "--num_threads", "1"]
    return launch_command(data_args(corpus) + ["--output_dir", str(out), *endless], processes=2, port=29641)


def test_a_launch_stopped_midway_leaves_no_rank_behind(corpus, tmp_path):
    """A test that stops while its 2-rank launch trains (an exception, a timeout, pytest -x) kills the launcher and
    both ranks: none lives on with PPID 1 (torch's launcher starts each rank in a session of its own, out of reach of
    the launcher's process group)."""
    out, token = tmp_path / "out", None
    try:
        env = {"HF_HUB_OFFLINE": "1", **_env()}
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
        with launching.process_group(endless_two_rank_launch(corpus, out), **quiet) as proc:
            token = proc.token
            wait_for(lambda: (out / "log.jsonl").exists(), "the ranks to train")
            assert len(launching.members(token)) >= 3  # the launcher and its two ranks
        assert launching.members(token) == []
    finally:
        if token:
            launching.kill_all(token)


OWNER = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
import launching
with launching.process_group(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
    print(proc.token, flush=True)
    time.sleep(3600)
"""


def test_a_launch_whose_test_process_is_killed_leaves_no_rank_behind(corpus, tmp_path):
    """The process that started a 2-rank launch is SIGKILLed (a pytest worker killed: no teardown runs): the
    launch's watchdog kills the launcher and both ranks."""
    out, token, owner = tmp_path / "out", None, None
    try:
        cmd = [sys.executable, "-c", OWNER, str(ROOT / "tests"), *endless_two_rank_launch(corpus, out)]
        owner = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
                                 env={"HF_HUB_OFFLINE": "1", **_env()})  # fmt: skip
        token = owner.stdout.readline().strip()
        wait_for(lambda: (out / "log.jsonl").exists(), "the ranks to train")
        assert len(launching.members(token)) >= 3
        owner.kill()
        owner.wait()
        wait_for(lambda: not launching.members(token), "the watchdog to kill every process of the launch", 30)
    finally:
        if owner:
            owner.kill()
            owner.wait()
        if token:
            launching.kill_all(token)


HUNG = """
import subprocess, sys, time
child = "def waiting_child():\\n    print('ready', flush=True)\\n    time.sleep(600)\\nimport time\\nwaiting_child()"
rank = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True, start_new_session=True)
rank.stdout.readline()
def waiting_parent():
    time.sleep(600)
waiting_parent()
"""


def test_a_launch_past_its_timeout_fails_with_where_each_process_stood():
    """A command that hangs (here a parent, and a child in a session of its own like a launcher's rank) fails its test
    with each live process and its Python stack, then leaves none behind: a rare hang in CI says where it hung."""
    with pytest.raises(launching.Stuck) as stuck:
        launching.run([sys.executable, "-c", HUNG], timeout=10)
    said = str(stuck.value)
    assert "in waiting_parent" in said and "in waiting_child" in said, said
    assert said.count(sys.executable) >= 2  # both processes named


def test_resume_reproduces_uninterrupted_losses(corpus, tmp_path):
    cfg = json.loads(TINY.read_text())
    cfg["model"].update(input_dropout=0.3, weight_drop=0.3, embedding_dropout=0.1)  # RNG state must resume too
    (tmp_path / "reg.json").write_text(json.dumps(cfg))
    common = data_args(corpus)[:-1] + [
        str(tmp_path / "reg.json"),
        "--max_train_steps",
        "8",
        "--checkpointing_steps",
        "4",
    ]
    regularised = ["--seed", "3"]
    full = tmp_path / "full"
    launch(common + regularised + ["--output_dir", str(full), "--scheme", "stateful", "--variable_bptt"])
    resumed = tmp_path / "resumed"
    launch(common + regularised + ["--output_dir", str(resumed), "--scheme", "stateful", "--variable_bptt",
                                   "--resume_from_checkpoint", str(full / "step_4")])  # fmt: skip
    a, b = losses(full), losses(resumed)
    assert sorted(b) == [5, 6, 7, 8]
    for step in b:
        assert b[step] == pytest.approx(a[step], rel=1e-6), step


def adaptive_config(tmp_path, cutoffs) -> list[str]:
    """--config: the tiny model with the adaptive softmax."""
    cfg = json.loads(TINY.read_text())
    cfg["model"]["adaptive_softmax_cutoffs"] = cutoffs
    (tmp_path / "adaptive.json").write_text(json.dumps(cfg))
    return ["--config", str(tmp_path / "adaptive.json")]


@pytest.mark.parametrize("adaptive", [False, True], ids=["full", "adaptive"])
def test_end_to_end_saves_a_model_pipeline_can_use(corpus, tmp_path, adaptive):
    out = tmp_path / "run"
    extra = adaptive_config(tmp_path, [10, 25]) if adaptive else []
    done = launch(data_args(corpus) + ["--output_dir", str(out), "--num_train_epochs", "2", "--scheme", "window",
                                       "--stride", "4", "--sample_prompt", "w1 w2", *extra])  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["test_ppl"] < 40  # uniform over the 42 ids would be 42
    assert "sample: w1 w2 w" in done.stdout
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == len(tok) == 42  # 40 words, <eos>, <unk>
    assert model.generation_config.suppress_tokens == [tok.convert_tokens_to_ids("<unk>")]  # no <unk> generated
    assert tok.init_kwargs["text_rules"] == "whitespace"  # detected: the corpus is neither WikiText nor PTB
    assert model.config.adaptive_softmax_cutoffs == ([10, 25] if adaptive else [])


def test_text_rules_flag_builds_the_tokenizer_asked_for(corpus, tmp_path):
    out = tmp_path / "run"
    launch(data_args(corpus) + ["--output_dir", str(out), "--max_train_steps", "1", "--text_rules", "ptb"])
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out).init_kwargs["text_rules"] == "ptb"


def test_adaptive_softmax_needs_ids_in_training_frequency_order(corpus, tmp_path):
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    # every word of the corpus, numbered by another text's frequencies: w39 first, w0 last
    build_word_level_tokenizer([" ".join([f"w{i}"] * (i + 1)) for i in range(40)]).save_pretrained(tmp_path / "tok")
    for cutoffs, extra, message in (
        ([10, 25], ["--tokenizer_name", str(tmp_path / "tok")], "needs word ids in frequency order, but id "),
        ([25, 10], [], "adaptive_softmax_cutoffs must increase strictly, each in (0, vocab_size=42)"),
    ):
        args = data_args(corpus) + adaptive_config(tmp_path, cutoffs) + ["--output_dir", str(tmp_path / "r"), *extra]
        done = launch(args, check=False)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
        assert message in done.stderr.strip().splitlines()[-1]
        assert not (tmp_path / "r" / "log.jsonl").exists()


SEGMENT_AND_BATCH = "bptt per_device_train_batch_size per_device_eval_batch_size eval_bptt stride".split()
OTHER_COUNTS = """num_train_epochs max_train_steps log_every checkpointing_steps checkpoints_total_limit
gradient_accumulation_steps eval_max_tokens num_threads nonmono patience ddp_timeout unseen_word_max_count
unseen_word_block min_frequency""".split()
BAD_NUMBERS = [  # (flag, value, what the message says): every numeric flag's range, as train.RANGES states it
    *((flag, v, "a positive integer") for flag in SEGMENT_AND_BATCH for v in ("0", "-1")),
    *((flag, "0", "a positive integer") for flag in OTHER_COUNTS),
    ("learning_rate", "-1", "> 0"),
    ("learning_rate", "0", "> 0"),
    ("learning_rate", "nan", "> 0"),
    ("max_train_minutes", "0", "> 0"),
    ("max_train_minutes", "inf", "> 0"),
    *((flag, "-0.1", ">= 0") for flag in ("weight_decay", "clip", "alpha", "beta")),
    ("lr_decay", "0", "in (0, 1]"),
    ("lr_decay", "1.5", "in (0, 1]"),
    ("min_improvement", "1", "in [0, 1), got 1.0"),
    ("max_unk_rate", "-0.5", "in [0, 1]"),
    ("max_unk_rate", "2", "in [0, 1]"),
    ("seed", "-1", "in [0, 2**31)"),
    ("max_vocab_size", "1", "an integer >= 2"),
    ("unseen_word_rate", "1.5", "in [0, 1]"),
    ("unseen_word_rate", "-0.1", "in [0, 1]"),
    ("oov_pointer_learning_rate", "0", "> 0"),
    ("speller_size", "-1", "an integer >= 0 (0: off)"),
]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--train_file", "/nonexistent/train.txt"], "does not exist"),
        (["--scheme", "window", "--per_device_train_batch_size", "400"], "longer than each training stream"),
        (["--config", "hidden_size -3"], "--config model: hidden_size must be a positive integer, got -3"),
        *(([f"--{flag}", value], f"--{flag} must be {what}") for flag, value, what in BAD_NUMBERS),
    ],
    ids=lambda x: " ".join(x) if isinstance(x, list) else "",
)
def test_bad_inputs_fail_before_training(corpus, tmp_path, capsys, extra, message):
    """Invalid input stops train.py with exit status 2 and one `error:` line naming the flag, before any work: no
    log, no output folder. (Before, --bptt 0 looped forever, a zero batch raised ZeroDivisionError, --eval_bptt 0
    failed only after training, --stride 0 silently meant the default, --learning_rate -1 trained.) In-process, so
    any other exception (a traceback on the command line) fails the test."""
    train = train_module()
    if extra[:2] == ["--config", "hidden_size -3"]:
        cfg = json.loads(TINY.read_text())
        cfg["model"]["hidden_size"] = -3
        (tmp_path / "bad.json").write_text(json.dumps(cfg))
        extra = ["--config", str(tmp_path / "bad.json")]
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as stop:
        train.main(data_args(corpus) + ["--output_dir", str(out)] + extra)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert stop.value.code == 2 and len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    assert ": error: " in errors[0] and message in errors[0], errors
    assert not out.exists()


def test_library_schedule_and_shards_refuse_empty_segments_and_batches():
    """segment_schedule with bptt (or stride) < 1 would loop forever; shard_streams with no streams divides by 0."""
    for scheme, kw in (("stateful", {"bptt": 0}), ("stateful", {"bptt": -2}), ("window", {"bptt": 35, "stride": 0})):
        with pytest.raises(ValueError, match="must be >= 1"):
            segment_schedule(100, scheme, **kw)
    assert segment_schedule(10, "window", bptt=0, stride=4) == [(0, 4), (4, 4), (8, 1)]  # bptt unused there
    assert {flag for flag, _, _ in train_module().RANGES} == {f"--{flag}" for flag, _, _ in BAD_NUMBERS}
    for kw in ({"batch_size": 0}, {"batch_size": 2, "num_processes": 0}, {"batch_size": 2, "process_index": 2}):
        with pytest.raises(ValueError, match="batch_size must be >= 1"):
            shard_streams(torch.arange(100), **{"num_processes": 2, "process_index": 0, **kw})


def test_empty_corpus_and_vocab_mismatch_fail_clearly(corpus, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    done = launch(data_args(corpus) + ["--output_dir", str(tmp_path / "e"), "--train_file", str(empty)], check=False)
    assert done.returncode != 0 and "empty" in done.stderr
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    tiny_model(vocab_size=7).save_pretrained(tmp_path / "m")
    build_word_level_tokenizer((corpus / "train.txt").read_text().splitlines()).save_pretrained(tmp_path / "m")
    args = ["--output_dir", str(tmp_path / "x"), "--model_name_or_path", str(tmp_path / "m")]
    done = launch(data_args(corpus) + args, check=False)
    assert done.returncode == 2 and "tokenizer has 42 words" in done.stderr and "Traceback" not in done.stderr


def test_tokenizer_that_does_not_fit_the_data_is_refused_unless_allowed(corpus, tmp_path):
    """A saved tokenizer with a small vocabulary maps most of the corpus to <unk>: the perplexity would mean nothing.
    The script refuses before training (one error line), reports each split's <unk> rate at start-up and in
    results.json, prints where it saved the model, and labels its evaluation bars in tokens."""
    from modeling_pointer_sentinel.tokenization import build_word_level_tokenizer

    build_word_level_tokenizer(["w1 w2 w3 w4"]).save_pretrained(tmp_path / "small_tok")  # 4 of the 40 words
    args = data_args(corpus) + ["--tokenizer_name", str(tmp_path / "small_tok"), "--output_dir", str(tmp_path / "r")]
    done = launch(args, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "are <unk> (more than --max_unk_rate 0.1)" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "r" / "log.jsonl").exists()
    done = launch(args + ["--max_unk_rate", "1", "--max_train_steps", "2", "--eval_max_tokens", "200"])
    rates = json.loads((tmp_path / "r" / "results.json").read_text())["unk_rate"]
    assert set(rates) == {"train", "validation", "test"} and all(0.75 < r < 0.95 for r in rates.values()), rates
    assert f"<unk> rate: train {rates['train']:.2%}" in done.stdout
    assert f"saved the model and tokenizer to {tmp_path / 'r'}/ (results: {tmp_path / 'r' / 'results.json'}" in (
        done.stdout
    )
    assert "validation:   0%|          | 0/198 [00:00<?, ?tok/s]" in done.stderr  # the bars count tokens


def position_nll(model, streams):
    """-log p(x_{t+1}) of every position from one whole-sequence forward: the reference for both schemes."""
    logits = model(streams).logits[:, :-1]
    return -logits.gather(-1, streams[:, 1:, None])[..., 0]


@pytest.mark.parametrize("stride", [1, 3, 5])
def test_window_scheme_equals_per_target_reference(stride):
    """k1 = 1 is the paper's Algorithm 1: each target gets its own re-run of the L-window. Per target, the window
    scheme's loss must equal the whole-sequence forward at that position, and its gradient must equal a per-target
    re-run of the window from the carried (detached) state."""
    L = 5
    model = tiny_model(pointer_window=L).double()
    streams = torch.randint(0, 6, (2, 24))
    want = position_nll(model, streams)
    cache = PointerSentinelCache()
    schedule = segment_schedule(streams.shape[1], "window", bptt=0, stride=stride, window=L)
    assert [p for p, _ in schedule] == list(range(0, 23, stride))
    for p, k in schedule:
        seg = make_segment(streams, p, k, "window", L, stride)
        model.zero_grad()
        nll, out, cache = run_segment(model, seg, cache, "window")
        nll.backward()
        ours = {n: q.grad.clone() for n, q in model.named_parameters()}
        assert nll.item() == pytest.approx(want[:, p : p + k].sum().item(), rel=1e-9)
        if stride == 1:  # the straightforward per-target reference: state up to the window, then the window
            model.zero_grad()
            start = max(0, p - L + 1)
            state = PointerSentinelCache()
            if start:
                with torch.no_grad():
                    state = model(streams[:, :start], use_cache=True).past_key_values
                state.window_states = state.window_ids = state.window_mask = None
            ref = model(streams[:, start : p + 1], past_key_values=state, use_cache=True).logits[:, -1]
            (-ref.gather(-1, streams[:, p + 1, None]).sum()).backward()
            for n, q in model.named_parameters():
                torch.testing.assert_close(ours[n], q.grad, msg=n)


def test_stateful_scheme_covers_every_target_once():
    model = tiny_model().double().eval()
    streams = torch.randint(0, 6, (3, 40))
    cache, total = PointerSentinelCache(), 0.0
    for p, k in segment_schedule(40, "stateful", bptt=7, variable_bptt=False):
        nll, _, cache = run_segment(model, make_segment(streams, p, k, "stateful", 5, 1), cache, "stateful")
        total += nll.item()
    assert total == pytest.approx(position_nll(model, streams).sum().item(), rel=1e-9)


def test_variable_bptt_schedule_is_shared_across_ranks_and_covers_stream():
    a = segment_schedule(1000, "stateful", bptt=70, variable_bptt=True, seed=5)
    assert a == segment_schedule(1000, "stateful", bptt=70, variable_bptt=True, seed=5)
    assert sum(k for _, k in a) == 999 and len({k for _, k in a}) > 3


def test_shard_streams_equals_single_process_batch():
    ids = torch.arange(103)
    whole = shard_streams(ids, 4)
    parts = [shard_streams(ids, 2, num_processes=2, process_index=r) for r in range(2)]
    assert torch.equal(torch.cat(parts), whole)
    with pytest.raises(ValueError):
        shard_streams(torch.arange(5), 4)


def test_parameter_averager_and_nt_asgd_trigger():
    w = torch.nn.Parameter(torch.zeros(2))
    avg = ParameterAverager([w])
    avg.start()
    for v in (2.0, 4.0):
        w.data.fill_(v)
        avg.update()
    avg.swap()
    assert torch.allclose(w, torch.full((2,), 2.0))  # mean of 0, 2, 4
    avg.swap()
    assert torch.allclose(w, torch.full((2,), 4.0))
    assert not nt_asgd_triggered([5, 4, 3, 2, 1, 1.5], nonmono=5)
    assert nt_asgd_triggered([5, 4, 3, 2, 1, 4.5, 6], nonmono=5)
    # AWD-LSTM's timing: with nonmono 5 the trigger needs 6 earlier losses, so [3, 5, 5, 5, 5] then 4 waits one more
    assert not nt_asgd_triggered([3, 5, 5, 5, 5, 4], nonmono=5)
    assert nt_asgd_triggered([3, 5, 5, 5, 5, 5, 4], nonmono=5)


@pytest.mark.parametrize("config", sorted((ROOT / "examples" / "configs").glob("*.json")), ids=lambda p: p.stem)
def test_shipped_configs_parse_and_build(config, tmp_path, monkeypatch):
    sys.path.insert(0, str(TRAIN.parent))
    from train import parse_args

    from modeling_pointer_sentinel import PointerSentinelConfig

    named = json.loads(config.read_text()).get("model_name_or_path")
    if named:  # a fine-tuning stage starts from a run's folder, not in git: present (empty) where it would be
        monkeypatch.chdir(tmp_path)
        (tmp_path / named).mkdir(parents=True)
    args = parse_args(["--config", str(config)])
    PointerSentinelConfig(vocab_size=33278, **args.model)  # WikiText-2's: the recipes' cutoffs fit its vocabulary


def test_resume_ends_on_the_same_best_weights(corpus, tmp_path):
    """Regression: the best-validation weights were not checkpointed, so a run resumed after the last validation
    saved its latest weights where the uninterrupted run saved the best ones."""
    from safetensors.torch import load_file

    common = data_args(corpus) + ["--num_train_epochs", "2", "--max_train_steps", "140"]  # stops inside epoch 2
    launch(common + ["--output_dir", str(tmp_path / "full"), "--checkpointing_steps", "130"])
    launch(common + ["--output_dir", str(tmp_path / "resumed"),
                     "--resume_from_checkpoint", str(tmp_path / "full" / "step_130")])  # fmt: skip
    a, b = (load_file(tmp_path / d / "model.safetensors") for d in ("full", "resumed"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)


def test_config_mistakes_exit_with_one_error_line(tmp_path, capsys):
    sys.path.insert(0, str(TRAIN.parent))
    from train import parse_args

    from modeling_pointer_sentinel.training import load_text_splits

    for bad, match in (({"model": {"hidden_sise": 4}}, "hidden_sise"), ({"optimizer": "adam"}, "optimizer"),
                       ({"scheme": "tbptt"}, "scheme"), ({"learning_rat": 1}, "learning_rat")):  # fmt: skip
        (tmp_path / "c.json").write_text(json.dumps(bad))
        with pytest.raises(SystemExit) as stop:
            parse_args(["--config", str(tmp_path / "c.json")])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and len(err.splitlines()) == 1 and "error: " in err and match in err, err
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="train file .* is empty"):
        load_text_splits(train_file=str(tmp_path / "empty.txt"))


def test_local_files_without_a_train_file_give_only_those_splits(corpus):
    """Regression: --test_file without --train_file was ignored and the bundled WikiText-2 evaluated instead."""
    from modeling_pointer_sentinel.training import load_text_splits

    splits = load_text_splits(test_file=str(corpus / "test.txt"))
    assert list(splits) == ["test"] and splits["test"] == (corpus / "test.txt").read_text().splitlines()


def test_tar_uses_the_raw_output_and_ar_the_dropped_one():
    """AWD-LSTM: AR on the dropped last-layer output, TAR on the raw one. With output dropout the only randomness,
    TAR must not depend on the dropout mask."""
    from modeling_pointer_sentinel.training import activation_penalty

    model = tiny_model(output_dropout=0.5).train()
    streams = torch.randint(0, 6, (2, 12))
    seg = make_segment(streams, 0, 10, "stateful", 5, 1)
    tar, ar = [], []
    for seed in (0, 1):
        torch.manual_seed(seed)
        _, out, _ = run_segment(model, seg, PointerSentinelCache(), "stateful", output_hidden_states=True)
        tar.append(activation_penalty(out, alpha=0.0, beta=1.0).item())
        ar.append(activation_penalty(out, alpha=1.0, beta=0.0).item())
        raw = out.hidden_states[-1]
        assert tar[-1] == pytest.approx((raw[:, 1:] - raw[:, :-1]).pow(2).mean().item())
        assert ar[-1] == pytest.approx(out.last_hidden_state.pow(2).mean().item())
    assert tar[0] == pytest.approx(tar[1], rel=1e-6) and ar[0] != pytest.approx(ar[1], rel=1e-3)


def test_torch_compile_training_follows_eager_training(corpus, tmp_path):
    """--torch_compile compiles the training forward as one graph; with the aot_eager backend (fast to compile)
    the losses must follow the eager run's step by step."""
    common = data_args(corpus) + ["--max_train_steps", "5"]
    launch(common + ["--output_dir", str(tmp_path / "eager")])
    launch(common + ["--output_dir", str(tmp_path / "compiled"), "--torch_compile",
                     "--torch_compile_backend", "aot_eager"])  # fmt: skip
    a, b = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5), step


# recipes from scratch; a fine-tuning config (model_name_or_path) starts from a shipped folder: test_open_vocabulary
RECIPES = sorted(p for p in (ROOT / "examples" / "configs").glob("*.json")
                 if p.stem != "tiny_test" and "model_name_or_path" not in json.loads(p.read_text()))  # fmt: skip


def repeated_sentences(d, seed: int, words: int, lengths: tuple[int, int], lines: tuple[int, int, int]):
    """Ten sentences of `words` words repeated in random order (learnable): train, valid and test files in d."""
    rng = random.Random(seed)
    sentences = [" ".join(f"w{rng.randrange(words)}" for _ in range(rng.randint(*lengths))) for _ in range(10)]
    for split, n in zip(("train", "valid", "test"), lines, strict=True):
        (d / f"{split}.txt").write_text("\n".join(rng.choice(sentences) for _ in range(n)) + "\n")
    return d


@pytest.fixture(scope="module")
def patterned_corpus(tmp_path_factory):
    return repeated_sentences(tmp_path_factory.mktemp("patterned"), 1, 30, (4, 9), (400, 30, 30))


def test_gains_below_min_improvement_decay_the_lr_and_stop_training(patterned_corpus, tmp_path):
    """The plateau rule of `--converge`: an epoch counts as an improvement only if it beats the best validation
    perplexity by min_improvement (relative); otherwise the LR decays, and `patience` such epochs stop the run."""
    best = math.log(100.0)
    assert improves(math.log(99.8), best, 0.001) and not improves(math.log(99.95), best, 0.001)
    assert improves(math.log(99.95), best) and not improves(best, best)
    files = ["--train_file", str(patterned_corpus / "train.txt"), "--validation_file",
             str(patterned_corpus / "valid.txt"), "--config", str(TINY)]  # fmt: skip
    out = tmp_path / "out"
    launch(files + ["--output_dir", str(out), "--num_train_epochs", "5", "--patience", "2", "--lr_decay", "0.5",
                    "--min_improvement", "0.99"])  # fmt: skip
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    # epoch 1 beats no validation at all; epochs 2 and 3 improve (this corpus is learnable) but not by 99%
    assert [r["lr"] for r in rows if "valid_ppl" in r] == [1.0, 0.5, 0.25]
    results = json.loads((out / "results.json").read_text())
    assert results["stopped"] == "validation did not improve by 99.0% for 2 evaluations in a row"
    assert results["epochs"] == 3


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_each_shipped_recipe_trains_the_tiny_model(recipe, patterned_corpus, tmp_path):
    """Every shipped recipe (scheme, optimiser, clip, regularisers, schedule) at tiny size: from a start near the
    uniform guess (ln V = 3.33 here), 60 updates get the training loss to the corpus's unigram entropy (3.07)."""
    cfg = json.loads(recipe.read_text())
    full_width = cfg["model"].get("hidden_size", 650)
    shrink = {"embedding_size": 32, "hidden_size": 64, "pointer_window": 8}
    cfg["model"] = {**cfg["model"], **{k: v for k, v in shrink.items() if k in cfg["model"]}}
    if cfg["model"].get("adaptive_softmax_cutoffs"):  # the tiny corpus has 31 words
        cfg["model"]["adaptive_softmax_cutoffs"] = [8, 16]
    if cfg.get("optimizer", "sgd") in ("sgd", "ntasgd"):
        # lr x clip bounds an SGD step's norm and was tuned for the full width: scale it with the width
        cfg["learning_rate"] *= 64 / full_width
    cfg.update(per_device_train_batch_size=4, per_device_eval_batch_size=4, mixed_precision="no", log_every=1,
               num_train_epochs=1, sample_prompt=None, output_dir=str(tmp_path / "out"))  # fmt: skip
    cfg["bptt"] = min(cfg.get("bptt", 35), 12)
    if cfg.get("stride"):
        cfg["stride"] = min(cfg["stride"], 8)
    steps = 180 if cfg.get("stride") == 1 else 60  # one target per stream per update needs more of them
    (tmp_path / "recipe.json").write_text(json.dumps(cfg))
    files = ["--train_file", str(patterned_corpus / "train.txt"), "--validation_file",
             str(patterned_corpus / "valid.txt"), "--test_file", str(patterned_corpus / "test.txt")]  # fmt: skip
    launch(files + ["--config", str(tmp_path / "recipe.json"), "--max_train_steps", str(steps)])
    loss = [v for _, v in sorted(losses(tmp_path / "out").items())]
    assert len(loss) == steps
    tokens = [w for line in (patterned_corpus / "train.txt").read_text().splitlines() for w in [*line.split(), "<eos>"]]
    counts = torch.tensor(list(collections.Counter(tokens).values()), dtype=torch.float64) / len(tokens)
    unigram_entropy = -(counts * counts.log()).sum().item()
    last = sum(loss[-10:]) / 10
    assert last < loss[0] and last < unigram_entropy + 0.1, (loss[0], last, unigram_entropy)


# ---- the training loop's own steps, observed in-process: what the optimizer sees, what is logged and saved ----


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """About 20 updates per epoch with the tiny config."""
    return repeated_sentences(tmp_path_factory.mktemp("small"), 2, 20, (4, 8), (60, 12, 12))


def small_args(corpus, out, *extra, validation=True):
    files = ["--train_file", str(corpus / "train.txt"), "--test_file", str(corpus / "test.txt")]
    if validation:
        files += ["--validation_file", str(corpus / "valid.txt")]
    return [*files, "--config", str(TINY), "--output_dir", str(out), *map(str, extra)]


@pytest.fixture
def optimizer_steps():
    """Every optimizer step of the test, as the torch optimizer sees it: its class, its param groups' settings, the
    global norm of the gradients it is about to apply, and the parameters after the step."""
    steps = []

    def before(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()
        groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
        steps.append({"type": type(opt), "lrs": [g["lr"] for g in groups], "groups": groups, "grad_norm": norm})

    def after(opt, args, kwargs):
        steps[-1]["params"] = [p.detach().clone() for g in opt.param_groups for p in g["params"]]

    handles = [register_optimizer_step_pre_hook(before), register_optimizer_step_post_hook(after)]
    yield steps
    for h in handles:
        h.remove()


def log_rows(out):
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def saved_parameters(out):
    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    return [p.detach() for p in PointerSentinelForCausalLM.from_pretrained(out).parameters()]


def test_clip_bounds_the_gradient_norm_the_optimizer_applies(small_corpus, tmp_path, optimizer_steps):
    """--clip c: every update applies gradients of global norm c (the raw ones are larger); --clip 0: unclipped."""
    train = train_module()
    train.main(small_args(small_corpus, tmp_path / "a", "--clip", "0.01", "--max_train_steps", "6"))
    assert len(optimizer_steps) == 6
    assert all(s["grad_norm"] == pytest.approx(0.01, rel=1e-4) for s in optimizer_steps), optimizer_steps
    optimizer_steps.clear()
    train.main(small_args(small_corpus, tmp_path / "b", "--clip", "0", "--max_train_steps", "6"))
    assert len(optimizer_steps) == 6 and all(s["grad_norm"] > 0.05 for s in optimizer_steps)


def test_every_param_group_gets_the_segment_lr(small_corpus, tmp_path, optimizer_steps, monkeypatch):
    """The LR each update applies, in every param group: learning_rate x lr_decay per plateau epoch, and with
    --variable_bptt x k / bptt for a segment of k targets (AWD-LSTM). Two param groups, so a write to the first only
    shows; min_improvement 0.99 makes epochs 2 and 3 plateaus, so epoch 3 trains at half the LR."""
    train = train_module()
    real_sgd, segments = torch.optim.SGD, []

    def two_groups(groups, **kw):
        params = [p for g in groups for p in g["params"]]
        return real_sgd([{"params": params[:2]}, {"params": params[2:]}], **kw)

    real_make_segment = train.make_segment

    def make_segment(streams, p, k, *a):
        segments.append(k)
        return real_make_segment(streams, p, k, *a)

    monkeypatch.setattr(torch.optim, "SGD", two_groups)
    monkeypatch.setattr(train, "make_segment", make_segment)
    out = tmp_path / "out"
    train.main(small_args(small_corpus, out, "--variable_bptt", "--num_train_epochs", "3", "--min_improvement", "0.99",
                          "--patience", "5", "--learning_rate", "0.8", "--lr_decay", "0.5"))  # fmt: skip
    epoch_of = {r["step"]: r["epoch"] for r in log_rows(out) if "train_loss" in r}
    assert len(optimizer_steps) == len(segments) == len(epoch_of) and set(epoch_of.values()) == {0, 1, 2}
    assert len(set(segments)) > 3  # the lengths vary
    for step, (s, k) in enumerate(zip(optimizer_steps, segments, strict=True), 1):
        base = 0.8 * (0.5 if epoch_of[step] == 2 else 1.0)
        assert len(s["lrs"]) == 2 and s["lrs"] == pytest.approx([base * k / 10] * 2, rel=1e-12), (step, k, s["lrs"])


@pytest.mark.parametrize("optimizer", ["sgd", "adamw", "ntasgd"])
def test_each_optimizer_is_what_it_is_named(optimizer, small_corpus, tmp_path, optimizer_steps, monkeypatch, capsys):
    """sgd: plain SGD; adamw: AdamW; both decay the LR on a plateau and never average. ntasgd: plain SGD, averaging
    from the trigger on (forced here after epoch 1; the trigger gets the validation losses and --nonmono), then
    decaying the LR on a plateau too. All take --weight_decay."""
    train = train_module()
    calls = []
    trigger = lambda losses, nonmono: calls.append((list(losses), nonmono)) or 1  # noqa: E731
    monkeypatch.setattr(training, "nt_asgd_triggered", trigger)
    out = tmp_path / "out"
    train.main(small_args(small_corpus, out, "--optimizer", optimizer, "--learning_rate", "0.01",
                          "--weight_decay", "0.03", "--num_train_epochs", "2", "--min_improvement", "0.99",
                          "--nonmono", "4"))  # fmt: skip
    want = {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW, "ntasgd": torch.optim.SGD}[optimizer]
    assert {s["type"] for s in optimizer_steps} == {want}
    assert all(g["weight_decay"] == 0.03 for s in optimizer_steps for g in s["groups"])
    if want is torch.optim.SGD:
        assert all(g["momentum"] == 0 and not g["nesterov"] for s in optimizer_steps for g in s["groups"])
    epochs = [r for r in log_rows(out) if "valid_ppl" in r]
    averaging = "NT-ASGD: averaging from step" in capsys.readouterr().out
    assert [r["lr"] for r in epochs] == [0.01, 0.005]  # ntasgd averages from epoch 1: a stall then lowers the LR
    if optimizer == "ntasgd":
        assert averaging and calls == [([math.log(epochs[0]["valid_ppl"])], 4)]
    else:
        assert not averaging and calls == []


@pytest.mark.parametrize("case", ["best is the average", "best before averaging", "no validation"])
def test_ntasgd_evaluates_and_saves_the_running_average(
    case, small_corpus, tmp_path, optimizer_steps, monkeypatch, capsys
):
    """NT-ASGD, triggered after epoch 1 (forced): from the weights at the trigger on, the average takes in the weights
    after every update. Epoch 2 is validated with the average, and the saved model is the best validated weights:
    the average computed here from the optimizer's own steps, or epoch 1's weights when epoch 2 did not improve
    (the decision scripted). With no validation there is nothing to trigger on: plain SGD, its last weights saved."""
    train = train_module()
    trigger_at = []
    monkeypatch.setattr(training, "nt_asgd_triggered", lambda *a: trigger_at.append(len(optimizer_steps)) or True)
    verdicts = iter([True, case == "best is the average"])
    if case != "no validation":
        monkeypatch.setattr(training, "improves", lambda *a: next(verdicts))
    out = tmp_path / "out"
    results = train.main(small_args(small_corpus, out, "--optimizer", "ntasgd", "--num_train_epochs", "2",
                                    validation=case != "no validation"))  # fmt: skip
    snapshots = [s["params"] for s in optimizer_steps]
    if case == "no validation":
        assert trigger_at == [] and "no NT-ASGD trigger" in capsys.readouterr().out
        for got, w in zip(saved_parameters(out), snapshots[-1], strict=True):
            torch.testing.assert_close(got, w, rtol=1e-5, atol=1e-6)
        return
    (n1,) = trigger_at
    assert 10 < n1 < len(snapshots)
    average = [torch.stack(ws).mean(0) for ws in zip(*snapshots[n1 - 1 :], strict=True)]  # trigger weights + epoch 2
    want = snapshots[n1 - 1] if case == "best before averaging" else average
    for got, w in zip(saved_parameters(out), want, strict=True):
        torch.testing.assert_close(got, w, rtol=1e-5, atol=1e-6)
    if case != "no validation":  # the final validation of the saved weights repeats the best epoch's
        epochs = [r["valid_ppl"] for r in log_rows(out) if "valid_ppl" in r]
        best = epochs[1] if case == "best is the average" else epochs[0]
        assert results["validation_ppl"] == pytest.approx(best, rel=1e-9)
        assert epochs[0] != pytest.approx(epochs[1], rel=1e-6)


def test_ntasgd_stall_starts_the_average_instead_of_stopping(small_corpus, tmp_path, monkeypatch, capsys):
    """NT-ASGD whose non-monotone trigger never fires (scripted): a stall of --patience validations starts the average
    rather than ending a run that never averaged, and the patience then judges the average from zero. Verdicts improve,
    stall, stall (averaging starts after epoch 3), stall, stall (stop after epoch 5). The LR stays while the stalls
    count towards the average, and halves (--lr_decay 0.5) at each stall of the average, as GluonNLP's recipe lowers
    its rate on the average's plateaus."""
    train = train_module()
    monkeypatch.setattr(training, "nt_asgd_triggered", lambda *a: False)
    verdicts = iter([True, False, False, False, False, True])
    monkeypatch.setattr(training, "improves", lambda *a: next(verdicts))
    out = tmp_path / "out"
    results = train.main(small_args(small_corpus, out, "--optimizer", "ntasgd", "--num_train_epochs", "8",
                                    "--patience", "2", "--log_every", "1000", "--learning_rate", "1.0",
                                    "--lr_decay", "0.5"))  # fmt: skip
    printed = capsys.readouterr().out
    epoch_steps = [r["step"] for r in log_rows(out) if "valid_ppl" in r]
    assert results["epochs"] == 5 and len(epoch_steps) == 5
    assert [r["lr"] for r in log_rows(out) if "valid_ppl" in r] == [1.0, 1.0, 1.0, 0.5, 0.25]
    assert f"NT-ASGD: averaging from step {epoch_steps[2]}\n" in printed and printed.count("NT-ASGD: averaging") == 1
    assert json.loads((out / "results.json").read_text())["stopped"].endswith("for 2 evaluations in a row")


@pytest.mark.parametrize("lr, winner", [(0.3, "live"), (3.0, "average")])
def test_ntasgd_validation_counts_the_better_of_the_average_and_the_live_weights(
    small_corpus, tmp_path, monkeypatch, lr, winner
):
    """Once averaging, each validation also scores the live weights, and the better of the two is what counts: for the
    stall rule, the best weights kept, and the model the run ends on. Averaging from the first epoch's end, at a low LR
    the live weights pass their lagging average; at a high one the average smooths out their noise and wins."""
    train = train_module()
    monkeypatch.setattr(training, "nt_asgd_triggered", lambda *a: True)
    out = tmp_path / "out"
    results = train.main(small_args(small_corpus, out, "--optimizer", "ntasgd", "--num_train_epochs", "4",
                                    "--log_every", "1000", "--learning_rate", lr))  # fmt: skip
    rows = [r for r in log_rows(out) if "valid_ppl" in r]
    assert len(rows) == 4 and "valid_ppl_live" not in rows[0]  # the average starts after the first validation
    assert all(r["valid_ppl"] == min(r["valid_ppl_average"], r["valid_ppl_live"]) for r in rows[1:])
    best = min(rows, key=lambda r: r["valid_ppl"])
    loser = {"live": "average", "average": "live"}[winner]
    assert best[f"valid_ppl_{winner}"] == best["valid_ppl"] < best[f"valid_ppl_{loser}"]  # the case under test
    assert results["validation_ppl"] == pytest.approx(best["valid_ppl"], rel=1e-12)


def test_plateau_rule_resets_on_improvement_and_decays_each_plateau(small_corpus, tmp_path, monkeypatch):
    """Validation verdicts scripted improve, plateau, improve, plateau, plateau with patience 2: the LR halves after
    each plateau, the count of plateaus in a row restarts at an improvement, and the second plateau in a row stops."""
    train = train_module()
    verdicts = iter([True, False, True, False, False, True])
    monkeypatch.setattr(training, "improves", lambda *a: next(verdicts))
    out = tmp_path / "out"
    results = train.main(small_args(small_corpus, out, "--num_train_epochs", "6", "--patience", "2", "--lr_decay",
                                    "0.5", "--log_every", "1000"))  # fmt: skip
    assert [r["lr"] for r in log_rows(out) if "valid_ppl" in r] == [1.0, 0.5, 0.5, 0.25, 0.125]
    assert results["epochs"] == 5
    assert json.loads((out / "results.json").read_text())["stopped"].endswith("for 2 evaluations in a row")


class FakeClock:
    """training.TimeLimit's time.perf_counter, advanced by one second per optimizer step."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def process_time(self):  # a CPU clock that runs twice as fast as the wall clock (two busy threads)
        return 2 * self.now

    def tick(self, *args):
        self.now += 1.0


def test_max_train_minutes_stops_at_the_first_step_past_the_limit(small_corpus, tmp_path, monkeypatch):
    """One process reads the clock after every update: with updates of one (fake) second and a limit of 6 s, the
    7th update is the first to end past it, however far the next log step is (before, the clock was read only
    when the loop logged: here at the epoch's end, ~20 updates)."""
    train = train_module()
    clock = FakeClock()
    monkeypatch.setattr(training, "time", clock)
    handle = register_optimizer_step_post_hook(clock.tick)
    try:
        out = tmp_path / "out"
        results = train.main(small_args(small_corpus, out, "--max_train_minutes", "0.1", "--log_every", "1000",
                                        "--num_train_epochs", "3"))  # fmt: skip
    finally:
        handle.remove()
    summary = json.loads((out / "results.json").read_text())
    assert summary["steps"] == 7 and summary["stopped"] == "max_train_minutes (0.1): not converged"
    assert results["train_minutes"] == pytest.approx(7 / 60)


def test_time_budget_counts_every_resumed_run_and_the_cpu_clock(small_corpus, tmp_path, monkeypatch, capsys):
    """A run stopped at step 4 (its checkpoint holds 4 fake seconds) and resumed under --max_train_minutes 0.1 stops
    where an uninterrupted run stops (step 7), and reports the time of both lives. --clock cpu reads the process's
    CPU time (here twice the wall time): the same budget ends at step 4. Resuming with the other clock is an error."""
    train = train_module()
    clock = FakeClock()
    monkeypatch.setattr(training, "time", clock)
    handle = register_optimizer_step_post_hook(clock.tick)
    out = tmp_path / "out"
    budget = ["--max_train_minutes", "0.1", "--log_every", "1000", "--num_train_epochs", "3"]
    try:
        train.main(small_args(small_corpus, out, *budget, "--max_train_steps", "4", "--checkpointing_steps", "4"))
        clock.now = 1000.0  # a new process: its clock starts elsewhere
        with pytest.raises(SystemExit):  # a run's minutes are all of one clock
            train.main(small_args(small_corpus, out, *budget, "--resume_from_checkpoint", "latest", "--clock", "cpu"))
        assert "counted its training time with --clock wall: resume it with --clock wall" in capsys.readouterr().err
        resumed = train.main(small_args(small_corpus, out, *budget, "--resume_from_checkpoint", "latest"))
        cpu = train.main(small_args(small_corpus, tmp_path / "cpu", *budget, "--clock", "cpu"))
    finally:
        handle.remove()
    assert json.loads((out / "results.json").read_text())["steps"] == 7
    assert resumed["train_minutes"] == pytest.approx(7 / 60)
    assert json.loads((tmp_path / "cpu" / "results.json").read_text())["steps"] == 4
    assert cpu["train_minutes"] == pytest.approx(8 / 60)
    assert json.loads((tmp_path / "cpu" / "results.json").read_text())["clock"] == "cpu"
    assert json.loads((out / "results.json").read_text())["clock"] == "wall"


@pytest.mark.parametrize("processes", [1, 2])
def test_time_limit_decision_is_made_every_step_near_the_limit(processes, monkeypatch):
    """The stop decision of training.TimeLimit, step by step, with a fake clock (1 s per update, a log step every 10,
    a limit of 30 s) and, for 2 processes, a recorded broadcast (the collective every rank must enter together, at
    steps that depend only on broadcast values). One process: no collective. Two: broadcast every step until the
    first log step (near until shown otherwise), at log steps, and every step from the log step that finds the limit
    within two log intervals (step 20: 20 + 2 x 10 > 30). Both stop at step 31, the first to end past 30 s."""
    clock, collectives = FakeClock(), []

    def broadcast(accelerator, *flags):
        collectives.append(int(clock.now))
        return flags

    monkeypatch.setattr(training, "time", clock)
    monkeypatch.setattr(training, "accelerate_broadcast", broadcast)
    limit = training.TimeLimit(types.SimpleNamespace(num_processes=processes), 0.5)
    for step in range(1, 100):
        clock.tick()
        if limit.passed(True, step % 10 == 0):
            break
    assert step == 31
    want = [*range(1, 11), *range(20, 32)] if processes == 2 else []
    assert collectives == want


def test_without_validation_trains_to_the_epoch_limit_and_says_so(small_corpus, tmp_path, capsys):
    """No validation split: no NaN validation loss drives the LR schedule or the early stop; training runs its three
    epochs at the same LR, says why in one line, and writes strict JSON (no NaN or Infinity)."""
    train = train_module()
    out = tmp_path / "out"
    results = train.main(small_args(small_corpus, out, "--num_train_epochs", "3", "--patience", "1", "--log_every",
                                    "1000", validation=False))  # fmt: skip
    assert "no validation split: training runs to --num_train_epochs or --max_train_steps" in capsys.readouterr().out
    assert [r["lr"] for r in log_rows(out) if "epoch" in r and "train_loss" not in r][:3] == [1.0, 1.0, 1.0]
    summary = json.loads((out / "results.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert summary["stopped"] == "num_train_epochs (3)" and summary["epochs"] == 3
    assert summary["best_validation_ppl"] is None and "validation_ppl" not in summary
    assert math.isfinite(results["test_ppl"])


def test_a_window_stride_longer_than_the_streams_is_one_error_before_training(small_corpus, tmp_path, capsys):
    train = train_module()
    with pytest.raises(SystemExit) as stop:
        train.main(small_args(small_corpus, tmp_path / "out", "--scheme", "window", "--stride", "9000"))
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and "error: --stride 9000 is not shorter than each training stream" in err[-1]
    assert not (tmp_path / "out" / "log.jsonl").exists()  # stopped before the first step


@pytest.mark.parametrize(
    "model, what",
    [
        ({"pointer_window": 1_000_000_000}, "a pointer window of 1,000,000,000"),
        ({"hidden_size": 200_000}, "parameters"),
    ],
)
def test_a_model_that_cannot_fit_is_refused_with_the_size_it_needs(model, what, small_corpus, tmp_path, capsys):
    """Stateful training keeps a (batch, L, D) window: a window of 10^9 (or 200,000 hidden units) cannot be
    allocated; the script says what it would need before allocating anything, instead of an allocator traceback."""
    cfg = json.loads(TINY.read_text())
    cfg["model"].update(model)
    (tmp_path / "big.json").write_text(json.dumps(cfg))
    args = small_args(small_corpus, tmp_path / "out")
    args[args.index("--config") + 1] = str(tmp_path / "big.json")
    with pytest.raises(SystemExit) as stop:
        train_module().main(args)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and "error: the model needs at least" in last and what in last, last
    assert "more than the" in last and "GiB this device has" in last
