r"""Train a Pointer Sentinel-LSTM (or the plain LSTM baseline) with Accelerate.

    accelerate launch examples/train.py --config examples/configs/quickstart_cpu.json      # bundled WikiText-2
    accelerate launch --multi_gpu --num_processes 2 examples/train.py --cpu ...            # two CPU ranks (gloo)
    accelerate launch --multi_gpu --num_processes 8 examples/train.py \
        --config examples/configs/medium_pointer_stateful_sgd.json                          # paper size, 8 GPUs

A config file sets any flag below (and the model under "model"); flags on the command line win. See the README for
the schemes (`stateful`, `window`), optimisers and the cost of each. Invalid input (a config mistake, a missing or
empty data file, a tokenizer that does not fit the data) stops the script before training with one `error:` line on
stderr and exit status 2. SIGUSR1 stops a run at its next epoch end with a checkpoint (see --checkpointing_steps), which
--resume_from_checkpoint latest goes on from.
"""

import argparse
import dataclasses
import datetime
import functools
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli.py beside this script, however it is launched
from cli import (  # noqa: E402
    ArgumentParser,
    add_data_arguments,
    cached_split_files,
    check_local_path,
    check_ranges,
    describe_ranges,
    fail,
    load_errors,
    load_or_fail,
    load_sources,
    non_negative,
    positive,
    read_config,
)

TEXT_RULES = ("wikitext", "ptb", "whitespace")  # tokenization.TEXT_RULES (a test holds them equal), not imported here
SPELLED_UNSEEN_WORD_RATE = 0.3  # training.SPELLED_UNSEEN_WORD_RATE (a test holds them equal), for --help

# Every numeric flag's range, checked once the command line and --config are read (before any work) and appended to
# the flag's --help; a flag left at None (not given) is not checked.
POSITIVE_INTEGERS = """bptt stride per_device_train_batch_size per_device_eval_batch_size eval_bptt num_train_epochs
max_train_steps gradient_accumulation_steps log_every checkpointing_steps checkpoints_total_limit eval_max_tokens
num_threads patience nonmono ddp_timeout unseen_word_max_count unseen_word_block""".split()
RANGES = [
    *((f"--{name}", positive, "a positive integer") for name in POSITIVE_INTEGERS),
    ("--learning_rate", positive, "> 0"),
    ("--max_train_minutes", positive, "> 0"),
    *((f"--{name}", non_negative, ">= 0 (0: off)") for name in ("weight_decay", "clip", "alpha", "beta")),
    ("--lr_decay", lambda v: 0 < v <= 1, "in (0, 1] (1: no decay)"),
    ("--min_improvement", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("--max_unk_rate", lambda v: 0 <= v <= 1, "in [0, 1]"),
    ("--max_vocab_size", lambda v: v >= 2, "an integer >= 2 (<eos> and <unk> included)"),
    ("--min_frequency", positive, "a positive integer"),
    ("--unseen_word_rate", lambda v: 0 <= v <= 1, "in [0, 1] (0: off)"),
    ("--oov_pointer_learning_rate", positive, "> 0"),
    ("--seed", lambda v: 0 <= v < 2**31, "in [0, 2**31)"),
    ("--speller_size", non_negative, "an integer >= 0 (0: off)"),
]


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--config", help="JSON file of flag defaults; its 'model' entry holds PointerSentinelConfig fields")
    # data
    add_data_arguments(p)
    a("--tokenizer_name", help="a saved tokenizer (default: build a word-level one from the training split)")
    a("--model_name_or_path", help="continue from a saved model (its tokenizer must match)")
    a(
        "--text_rules",
        choices=["auto", *TEXT_RULES],
        default="auto",
        help="how the built tokenizer reads raw text and writes it back: wikitext (punctuation and clitics split, "
        "@-@ @,@ @.@), ptb (lower case, numbers as N, punctuation dropped) or whitespace; auto: detected from the "
        "training words (default: %(default)s)",
    )
    a(
        "--max_vocab_size",
        type=int,
        default=None,
        help="the built tokenizer's most ids, <eos> and <unk> included: the rarest training words beyond it read as "
        "<unk> (default: every training word)",
    )
    a(
        "--min_frequency",
        type=int,
        default=None,
        help="the built tokenizer leaves out training words seen fewer times, which read as <unk> (WikiText-103's "
        "vocabulary: 3; default: every training word). Either cap raises the <unk> rate: see --max_unk_rate",
    )
    a(
        "--speller_size",
        type=int,
        default=None,
        help="a new model's speller (the ids carry the text: a word outside the vocabulary is written in its bytes, "
        "which a byte LSTM of this size scores and the pointer copies; trained with the rest through the spelled "
        "loss). Default: 256 when the tokenizer is built from raw text (text rules auto read it as prose) or spells "
        "already, else 0 (a tokenized corpus such as WikiText's or PTB's keeps its <unk>); 0 turns it off",
    )
    a(
        "--max_unk_rate",
        type=float,
        default=0.1,
        help="refuse to train when more than this fraction of any split's tokens is the tokenizer's <unk> (a "
        "tokenizer that does not fit the data: its perplexity would mean nothing). The rates are printed at start-up "
        "and saved in results.json. The benchmarks' own <unk> words make 4.7-5.8%% of PTB's splits and 2.6-6.2%% of "
        "WikiText-2's; 1 disables the check (default: %(default)s)",
    )
    # scheme
    a("--scheme", choices=["stateful", "window"], default="stateful")
    a("--bptt", type=int, default=35, help="stateful: targets per segment")
    a("--variable_bptt", action="store_true", help="stateful: AWD-LSTM's random segment lengths, LR rescaled")
    a("--stride", type=int, default=None, help="window: k1 targets per update (default L; 1 = paper Algorithm 1)")
    # optimisation
    a("--optimizer", choices=["sgd", "ntasgd", "adamw"], default="sgd")
    a("--learning_rate", type=float, default=20.0)
    a("--weight_decay", type=float, default=0.0)
    a("--clip", type=float, default=1.0, help="global gradient-norm clip")
    a(
        "--lr_decay",
        type=float,
        default=0.5,
        help="multiply LR by this when validation does not improve (sgd, adamw; ntasgd once it averages)",
    )
    a(
        "--patience",
        type=int,
        default=3,
        help="stop after this many validations in a row without improvement (ntasgd: "
        "before its averaging starts, start it instead)",
    )
    a("--min_improvement", type=float, default=0.0, help="smallest relative perplexity gain that counts (0.001: 0.1%%)")
    a("--nonmono", type=int, default=5, help="NT-ASGD trigger window")
    a("--alpha", type=float, default=0.0, help="AR: alpha * mean(h_t^2) on the dropped last-layer output")
    a("--beta", type=float, default=0.0, help="TAR: beta * mean((h_t - h_{t-1})^2) on the raw last-layer output")
    a("--num_train_epochs", type=int, default=1)
    a("--max_train_steps", type=int, default=None)
    a(
        "--max_train_minutes",
        type=float,
        default=None,
        help="stop training at the first optimizer step that ends past this time, counted over every resumed run "
        "(all ranks agree)",
    )
    a(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="what --max_train_minutes and train_minutes count: wall time, or the process's CPU time (an equal budget "
        "for runs that share a busy machine, one thread each)",
    )
    a("--per_device_train_batch_size", type=int, default=20)
    a("--per_device_eval_batch_size", type=int, default=10)
    a("--eval_bptt", type=int, default=200)
    a("--gradient_accumulation_steps", type=int, default=1)
    a("--seed", type=int, default=1111)
    a("--unseen_word_rate", type=float, default=None, help="teach the pointer to copy words the vocabulary lacks: "
      "in each --unseen_word_block tokens of the training split, each word seen at most --unseen_word_max_count "
      "times plays an unseen word with this probability, as a placeholder (needs the model's oov_slots), or, with "
      "a speller, spelled as the tokenizer spells a word it lacks. Default: with a speller "
      f"{SPELLED_UNSEEN_WORD_RATE:g} (chosen on validation: results/unseen_rate), else 0")  # fmt: skip
    a("--unseen_word_max_count", type=int, default=10)
    a("--unseen_word_block", type=int, default=1000)
    a(
        "--oov_pointer",
        action="store_true",
        help="give the model the placeholders' own embedding, pointer query and repeat odds (config.oov_pointer), for "
        "--unseen_word_rate. Added to a --model_name_or_path model without them, they start as <unk>'s embedding, the "
        "pointer's query and its own odds, so training starts from the loaded model's exact scores",
    )
    a("--oov_pointer_learning_rate", type=float, default=None,
      help="the placeholders' embedding, query and repeat odds learn at this rate, decayed with --learning_rate "
      "(default: --learning_rate)")  # fmt: skip
    a("--oov_pointer_only", action="store_true",
      help="train only the placeholders' own weights (with --oov_pointer); the rest is frozen, so text without "
      "placeholders scores exactly as with the loaded model")  # fmt: skip
    a("--mixed_precision", choices=["no", "fp16", "bf16"], default="no", help="autocast dtype (bf16 on a GPU)")
    a("--cpu", action="store_true", help="run on CPU (needed for multi-process CPU runs: gloo ranks)")
    a(
        "--torch_compile",
        action="store_true",
        help="compile the training forward as one graph (fuses zoneout's step loop); costs minutes of compilation, "
        "and each new segment length compiles again (use a fixed --bptt)",
    )
    a("--torch_compile_backend", default="inductor", help=argparse.SUPPRESS)  # tests use aot_eager
    # checkpoints, logs, output
    a("--output_dir", default="outputs/run")
    a("--checkpointing_steps", type=int, default=None, help="save_state every N updates")
    a(
        "--checkpoints_total_limit",
        type=int,
        default=None,
        help="keep only this run's newest N step_N folders (another run's are never deleted)",
    )
    a(
        "--resume_from_checkpoint",
        default=None,
        help="a step_N folder written by --checkpointing_steps, or 'latest' (the newest in --output_dir, if any). "
        "Resuming the newest checkpoint of a run in its own --output_dir continues that run (its run id); resuming "
        "any other (an older step while newer ones exist, or one in another folder) forks it: a new run, whose "
        "checkpoints record the run and step it started from, and which never deletes the first run's checkpoints",
    )
    a(
        "--overwrite_output_dir",
        action="store_true",
        help="start even though --output_dir holds checkpoints of another run (a fresh run, or a fork into the "
        "folder of the run it forks): delete them (after loading the checkpoint resumed from). Without it such a "
        "start is refused",
    )
    a("--with_tracking", action="store_true")
    a("--report_to", default="all")
    a("--log_every", type=int, default=50)
    a("--eval_max_tokens", type=int, default=None, help="evaluate on the first N tokens only (quick runs)")
    a("--sample_prompt", default=None, help="after training, generate from this prompt through pipeline()")
    a("--num_threads", type=int, default=None, help="torch CPU threads per process")
    a(
        "--ddp_timeout",
        type=int,
        default=1800,
        help="seconds any collective of a multi-process run waits for the other ranks before it fails, so a rank "
        "whose peer died stops rather than waits forever (default: %(default)s)",
    )

    describe_ranges(p, RANGES)

    model_overrides = read_config(p, argv)  # config entries become defaults: the command line wins
    args = p.parse_args(argv)
    check_ranges(p, args, RANGES)
    if args.resume_from_checkpoint not in (None, "latest"):
        if not (named := Path(args.resume_from_checkpoint)).is_dir():
            # a kill between a second save's renames left it under another name, which only `latest` restores
            renamed = sorted(p for p in named.parent.glob(named.name + ".*") if p.name.endswith(".replaced"))
            left = renamed[0] if renamed else named.with_name(named.name + ".replaced")
            hint = f" (a kill left it as {left}: --resume_from_checkpoint latest puts it back)" if left.is_dir() else ""
            p.error(f"--resume_from_checkpoint {named}: no such checkpoint folder{hint}")
    check_local_path(p, "--model_name_or_path", args.model_name_or_path)
    check_local_path(p, "--tokenizer_name", args.tokenizer_name)
    saved = "--tokenizer_name" if args.tokenizer_name else "--model_name_or_path" if args.model_name_or_path else None
    for flag in ("max_vocab_size", "min_frequency"):  # else silently unused
        if saved and getattr(args, flag) is not None:
            p.error(f"--{flag} caps a tokenizer built from the training split, not the one {saved} names")
    if args.model_name_or_path and args.speller_size is not None:
        p.error("--speller_size sizes a new model's speller; --model_name_or_path keeps the model's own")
    # Last: the model's fields are those of its config class, whose import (torch, transformers) takes seconds.
    from modeling_pointer_sentinel import PointerSentinelConfig
    from modeling_pointer_sentinel.checkpointing import incomplete

    if args.resume_from_checkpoint not in (None, "latest") and (why := incomplete(Path(args.resume_from_checkpoint))):
        p.error(f"--resume_from_checkpoint {args.resume_from_checkpoint} is not a whole checkpoint: {why}")
    fields = {f.name for f in dataclasses.fields(PointerSentinelConfig)} | {"num_layers"}
    if unknown := sorted(set(model_overrides) - fields):
        p.error(f"unknown model fields in --config {args.config}: {unknown}")
    args.model = model_overrides
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import torch  # noqa: E402
from accelerate import Accelerator  # noqa: E402
from accelerate.utils import InitProcessGroupKwargs, set_seed  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402  (pipeline: imported where used, 2-4 s)

from modeling_pointer_sentinel import PointerSentinelCache, PointerSentinelForCausalLM  # noqa: E402
from modeling_pointer_sentinel.checkpointing import (  # noqa: E402
    BestWeights,
    CheckpointError,
    TrainState,
    check_tokens_per_stream,
    delete_foreign,
    save_checkpoint,
    save_tied_weights_once,
    start_run,
    stream_layout,
)
from modeling_pointer_sentinel.data import (  # noqa: E402
    cached_word_level_tokenizer,
    split_arrays,
)
from modeling_pointer_sentinel.evaluation import mean_nll, validate  # noqa: E402
from modeling_pointer_sentinel.spelling import text_bits_per_byte  # noqa: E402
from modeling_pointer_sentinel.training import (  # noqa: E402
    ParameterAverager,
    PlateauSchedule,
    RunningLoss,
    StopSignal,
    TimeLimit,
    activation_penalty,
    check_fits,
    check_frequency_order,
    check_streams,
    check_unk_rates,
    compile_for_training,
    config_for_tokenizer,
    fit_cutoffs,
    load_resume,
    make_optimizer,
    make_segment,
    number_slots_per_row,
    rank_streams,
    run_segment,
    segment_schedule,
    simulate_unseen_training_words,
    speller_for,
    spelling_fields,
    start_oov_pointer,
    suppress_unk_in_generation,
    unseen_word_rate_for,
    word_count,
)


def build_tokenizer(args, train_source):
    if args.tokenizer_name or args.model_name_or_path:
        return load_or_fail("tokenizer", AutoTokenizer.from_pretrained, args.tokenizer_name or args.model_name_or_path)
    caps = {"max_vocab_size": args.max_vocab_size, "min_frequency": args.min_frequency or 1}
    try:  # built in one streaming pass, then read back from the cache
        return cached_word_level_tokenizer(train_source, args.data_cache_dir, text_rules=args.text_rules, **caps)
    except ValueError as e:  # an empty corpus
        fail(e)


def build_model(args, tokenizer, say=print):
    """The model (loaded, or new for `tokenizer`) and the tokenizer it reads: a new model with a speller reads the
    spelling tokenizer of `tokenizer`'s words."""
    if args.model_name_or_path:
        load = functools.partial(AutoModelForCausalLM.from_pretrained, dtype=torch.float32)
        model = load_or_fail("model", load, args.model_name_or_path)
        if args.oov_pointer:
            try:
                model = start_oov_pointer(model)
            except ValueError:  # the config's own check
                fail(f"--oov_pointer needs a pointer model with oov_slots; {args.model_name_or_path} has "
                     f"use_pointer={model.config.use_pointer} and oov_slots={model.config.oov_slots}")  # fmt: skip
        if model.config.vocab_size != word_count(tokenizer):
            fail(
                f"The tokenizer has {word_count(tokenizer)} words but {args.model_name_or_path} was trained with "
                f"{model.config.vocab_size}; pass the model's own tokenizer."
            )
        if bool(model.config.speller_size) != bool(getattr(tokenizer, "spell_unseen", False)):
            fail(
                f"{args.model_name_or_path} has speller_size={model.config.speller_size} but its tokenizer "
                f"{'does not spell' if model.config.speller_size else 'spells'} unseen words: pass a matching pair"
            )
        return model, tokenizer
    fields = {**args.model, **({"oov_pointer": True} if args.oov_pointer else {})}
    cutoffs = fields.get("adaptive_softmax_cutoffs") or []
    if (fitted := fit_cutoffs(cutoffs, word_count(tokenizer))) != cutoffs:  # a recipe's cutoffs, a smaller vocabulary
        fields["adaptive_softmax_cutoffs"] = fitted
        say(
            f"adaptive_softmax_cutoffs {cutoffs} -> {fitted or '[] (a full softmax)'}: the vocabulary has "
            f"{word_count(tokenizer)} words, and a cutoff at or past it would leave its cluster none"
        )
    try:
        size = speller_for(tokenizer, not (args.tokenizer_name or args.model_name_or_path), args.speller_size)
    except ValueError as e:
        fail(e)
    tokenizer, fields = spelling_fields(tokenizer, fields, size)
    if size:
        say(
            f"speller of {size} units: words outside the {word_count(tokenizer)}-word vocabulary are spelled in "
            "bytes (--speller_size 0: <unk> instead)"
        )
    try:  # the vocabulary and the special ids are the tokenizer's
        config = config_for_tokenizer(tokenizer, fields)
    except load_errors() as e:  # the config's checks (cutoffs against the vocabulary too) and its field types
        fail(f"--config model: {e}")
    try:
        check_fits(config, args.per_device_train_batch_size, args.optimizer)
    except ValueError as e:  # too large for this device
        fail(e)
    return PointerSentinelForCausalLM(config), tokenizer


def main(argv=None):
    args = parse_args(argv)
    # SIGUSR1 asks for a stop at the next epoch end, with a checkpoint there (its smallest: the best weights are then
    # often the model's or its average's, saved by name). Caught from here on, so a run still loading is not killed.
    stop_signal = StopSignal()
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    accelerator = Accelerator(
        cpu=args.cpu,
        mixed_precision=args.mixed_precision,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        log_with=args.report_to if args.with_tracking else None,
        project_dir=args.output_dir,
        kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=args.ddp_timeout))],
    )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and accelerator.num_processes == 1:
        fail(
            "Launched with several processes but Accelerate sees one: on CPU pass --cpu "
            "(accelerate launch --multi_gpu --num_processes N examples/train.py --cpu)."
        )
    W = accelerator.num_processes
    set_seed(args.seed, device_specific=True)  # dropout masks differ per rank, as in one big batch

    # ---- which checkpoint to resume, and which run this is (every rank reads the same folders) ----
    out_dir = Path(args.output_dir)
    B, E = args.per_device_train_batch_size, args.per_device_eval_batch_size
    try:
        resume, run, foreign, saved_layout = start_run(
            accelerator, out_dir, args.resume_from_checkpoint, args.overwrite_output_dir, B, E
        )
    except CheckpointError as e:  # another run's checkpoints in the folder, or another stream layout
        fail(e)
    run_id = run["run_id"]

    # ---- data, tokenizer, model (all checks before any training) ----
    with accelerator.main_process_first():  # rank 0 fills the token cache (data.py), the others then read it
        sources = load_sources(args)
        if "train" not in sources:
            fail("no training split: give --train_file (or --dataset_name)")
        tokenizer = build_tokenizer(args, sources["train"])
    # before the data's tokenising and its progress bar: a bad model fails first
    model, tokenizer = build_model(args, tokenizer, say=accelerator.print)
    if model.config.speller_size:  # the speller's forward reads its spelled words in Python, from a stream's start
        for flag, on in (("--scheme window", args.scheme == "window"), ("--beta", args.beta),
                         ("--torch_compile", args.torch_compile)):  # fmt: skip
            if on:
                fail(f"{flag} needs the word-level forward (split states, raw outputs, one graph), not the speller's "
                     "(--speller_size 0 trains without one)")  # fmt: skip
    with accelerator.main_process_first():
        files = cached_split_files(args, tokenizer, sources, progress=accelerator.is_main_process)
    try:  # memory maps of the cached ids, and each id's count (the frequency order and the <unk> rates)
        ids, counts = split_arrays(files)
    except ValueError as e:  # an empty training split
        fail(e)
    cfg = model.config
    try:  # a new model's clusters (a loaded model was trained with its own: the order mattered when it was built)
        if not args.model_name_or_path:
            check_frequency_order(None, cfg.adaptive_softmax_cutoffs, cfg.vocab_size, counts=counts["train"])
    except ValueError as e:  # an empty split, a tokenizer without an end-of-line token or not in frequency order
        fail(e)
    given, args.unseen_word_rate = args.unseen_word_rate, unseen_word_rate_for(cfg, args.unseen_word_rate)
    if given is None and args.unseen_word_rate:
        accelerator.print(f"rare training words spelled at rate {args.unseen_word_rate:g}, the default with a speller "
                          "(--unseen_word_rate 0: none)")  # fmt: skip
    if args.unseen_word_rate:  # the training split only: validation keeps scoring the closed vocabulary
        try:
            ids["train"], counts["train"] = simulate_unseen_training_words(
                ids["train"],
                cfg,
                args.unseen_word_rate,
                args.unseen_word_max_count,
                args.unseen_word_block,
                args.seed,
                tokenizer,
            )
        except ValueError as e:  # no placeholder slots, or a block shorter than the pointer window
            fail(e)
    try:
        unk_rates = check_unk_rates(counts, tokenizer, args.max_unk_rate, say=accelerator.print)
    except ValueError as e:  # the tokenizer does not fit the data
        fail(e)
    if args.eval_max_tokens:
        ids.update({s: t[: args.eval_max_tokens] for s, t in ids.items() if s != "train"})
    stride = args.stride if args.stride is not None else cfg.pointer_window
    try:
        spelled_from = cfg.vocab_size if cfg.speller_size else None  # spelled streams start at a word
        train, evals = rank_streams(ids, B, E, W, accelerator.process_index, accelerator.device, spelled_from)
        if args.unseen_word_rate and not cfg.speller_size:  # each row's slots from 0, as the tokenizer numbers them
            train = number_slots_per_row(train, cfg.vocab_size)
        check_streams(train.shape[1], W * B, args.scheme, args.bptt, cfg.pointer_window, stride)
        check_tokens_per_stream(resume, saved_layout, train.shape[1])
    except ValueError as e:  # too few tokens for the streams or for the scheme, or not the checkpoint's
        fail(e)

    for flag in ("oov_pointer_learning_rate", "oov_pointer_only"):
        if getattr(args, flag) and not cfg.oov_pointer:
            fail(f"--{flag} is about the placeholders' own weights: add --oov_pointer")
    optimizer = make_optimizer(model, args.optimizer, args.learning_rate, args.weight_decay,
                               args.oov_pointer_learning_rate, args.oov_pointer_only)  # fmt: skip
    model, optimizer = accelerator.prepare(model, optimizer)
    raw = accelerator.unwrap_model(model)
    if args.torch_compile:  # training calls only: evaluation has other shapes and would compile again
        compile_for_training(raw, args.torch_compile_backend)
    averager = ParameterAverager(raw.parameters())
    state = TrainState(args.learning_rate)
    best = BestWeights(raw, averager)
    states = {"train_state.json": state, "averager.safetensors": averager, "best_weights.safetensors": best}
    save_tied_weights_once(accelerator)
    cache = PointerSentinelCache()
    if resume:
        try:  # a forged or damaged file: one line that names it, before anything of it is loaded
            stream = load_resume(accelerator, resume, states, saved_layout, B, cfg.oov_pointer, optimizer, args.seed)
        except CheckpointError as e:
            fail(e)
        cache.load_state_dict(stream)
    delete_foreign(accelerator, foreign)  # --overwrite_output_dir, once the checkpoint resumed from is loaded
    accelerator.wait_for_everyone()
    if state.clock not in (None, args.clock):  # one run's minutes are all wall or all CPU
        fail(f"{resume} counted its training time with --clock {state.clock}: resume it with --clock {state.clock}")
    state.clock = args.clock

    if "validation" not in evals:
        accelerator.print(
            "no validation split: training runs to --num_train_epochs or --max_train_steps, with no learning-rate "
            "decay on a plateau, no early stop and no NT-ASGD trigger (give --validation_file for those)"
        )
    n_params = sum(p.numel() for p in raw.parameters())
    accelerator.print(
        f"{n_params / 1e6:.2f}M parameters | {W} process(es) x batch {B} | {train.shape[1]} tokens per stream | "
        f"scheme {args.scheme}" + (f" (k1={stride}, L={cfg.pointer_window})" if args.scheme == "window" else "")
    )
    if args.with_tracking:
        accelerator.init_trackers("pointer_sentinel", {k: v for k, v in vars(args).items() if k != "model"})
    out_dir.mkdir(parents=True, exist_ok=True)
    log_file = out_dir / "log.jsonl"

    def log(record):
        if accelerator.is_main_process:  # each line says which run wrote it (several runs may share the file)
            with log_file.open("a") as f:
                f.write(json.dumps({**record, "run_id": run_id}) + "\n")
        if args.with_tracking:
            accelerator.log(record, step=state.step)

    # ---- training ----
    time_limit = TimeLimit(accelerator, args.max_train_minutes, args.clock, state.train_seconds)
    plateau = PlateauSchedule(
        args.lr_decay, args.patience, args.min_improvement, args.optimizer == "ntasgd", args.nonmono
    )

    def stop_asked() -> bool:
        """At an epoch end that is not training's last: whether SIGUSR1 reached any rank (all ranks call this)."""
        return not stop and state.epoch < args.num_train_epochs and stop_signal.asked(accelerator)

    def layout() -> dict:  # where the streams are, for a checkpoint's manifest
        position = schedule[state.segment][0] if state.segment < len(schedule) else train.shape[1]
        return stream_layout(W, B, E, train.shape[1], state.epoch, position)

    stop, epoch_segments, paused = False, 1, False
    model.train()
    while state.epoch < args.num_train_epochs and not stop:
        schedule = segment_schedule(train.shape[1], args.scheme, args.bptt, stride, cfg.pointer_window,
                                    args.variable_bptt, seed=args.seed + state.epoch)  # fmt: skip
        total = epoch_segments = len(schedule)
        if args.max_train_steps:  # the bar ends where training will
            total = min(total, state.segment + (args.max_train_steps - state.step) * args.gradient_accumulation_steps)
        bar = tqdm(total=total, initial=state.segment, desc=f"epoch {state.epoch + 1}",
                   disable=not accelerator.is_local_main_process)  # fmt: skip
        t0, tokens, running = time.perf_counter(), 0, RunningLoss()  # the host reads the loss only when it logs
        for p, k in schedule[state.segment :]:
            seg = make_segment(train, p, k, args.scheme, cfg.pointer_window, stride)
            with accelerator.accumulate(model):
                nll, out, cache = run_segment(model, seg, cache, args.scheme, output_hidden_states=bool(args.beta))
                loss = nll / (k * B)  # forward already adds the weighted auxiliary pointer loss
                loss = loss + activation_penalty(out, args.alpha, args.beta)
                lr = state.lr * (k / args.bptt if args.variable_bptt else 1.0)
                for group in optimizer.param_groups:
                    group["lr"] = lr * group.get("lr_scale", 1.0)  # (checkpoints before the groups lack it)
                accelerator.backward(loss)
                if accelerator.sync_gradients and args.clip:
                    accelerator.clip_grad_norm_(model.parameters(), args.clip)
                optimizer.step()
                optimizer.zero_grad()
            state.segment += 1
            if accelerator.sync_gradients:
                state.step += 1
                averager.update()
            running.add(nll, k * B)
            tokens += k * B * W  # targets trained on, all ranks
            state.targets_seen += k * B * W
            bar.update(1)
            log_now = state.step % args.log_every == 0 or state.segment == len(schedule)
            if log_now:
                rate = tokens / (time.perf_counter() - t0)  # targets per second
                train_loss = running.read(accelerator)  # over all ranks: one process with batch W*B logs the same
                bar.set_postfix(loss=f"{train_loss:.3f}", ppl=f"{math.exp(train_loss):.1f}", tok_s=f"{rate:.0f}")
                log({"step": state.step, "epoch": state.epoch, "train_loss": train_loss,
                     "train_ppl": math.exp(train_loss), "lr": lr, "targets_per_s": rate, "world_size": W})  # fmt: skip
            if args.checkpointing_steps and state.step % args.checkpointing_steps == 0 and accelerator.sync_gradients:
                state.train_seconds = time_limit.elapsed()
                save_checkpoint(accelerator, out_dir, state.step, states, cache, args.checkpoints_total_limit, run,
                                layout())  # fmt: skip
            out_of_time = time_limit.passed(accelerator.sync_gradients, log_now)  # all ranks agree
            if args.max_train_steps and state.step >= args.max_train_steps:
                state.stopped = f"max_train_steps ({args.max_train_steps})"
            elif out_of_time:
                state.stopped = f"max_train_minutes ({args.max_train_minutes:g}): not converged"
            if state.stopped:
                stop = True
                break
        bar.close()
        if stop and state.segment < len(schedule):
            break
        # ---- end of epoch: validation, LR schedule, NT-ASGD trigger, early stop ----
        if "validation" not in evals:  # nothing to judge by: the epoch or step limit ends training
            accelerator.print(f"epoch {state.epoch + 1} done | lr {state.lr:g}")
            log({"step": state.step, "epoch": state.epoch, "lr": state.lr})
            state.epoch, state.segment, cache = state.epoch + 1, 0, PointerSentinelCache()
            if paused := stop_asked():
                break
            continue
        val, source, both = validate(accelerator, model, evals["validation"], args.eval_bptt, averager)
        improved, started = plateau.step(state, val, averager)  # the LR decay, NT-ASGD's trigger, the patience
        if improved:
            best.keep(source)
        if started:
            accelerator.print(f"NT-ASGD: averaging from step {state.step}")
        picked = f" (average {both['valid_ppl_average']:.2f}, live {both['valid_ppl_live']:.2f})" if both else ""
        accelerator.print(f"epoch {state.epoch + 1}: valid ppl {math.exp(val):.2f}{picked} | lr {state.lr:g}")
        log({"step": state.step, "epoch": state.epoch, "valid_ppl": math.exp(val), **both, "lr": state.lr})
        state.epoch, state.segment = state.epoch + 1, 0
        cache = PointerSentinelCache()  # each epoch reads the streams from their start
        if stopped := plateau.stop_reason(state):
            state.stopped = stopped
            accelerator.print(state.stopped + ": stopping")
            break
        if paused := stop_asked():
            break
    if paused:  # a checkpoint at the epoch end, and no results: the run is not over
        state.train_seconds = time_limit.elapsed()
        save_checkpoint(accelerator, out_dir, state.step, states, cache, args.checkpoints_total_limit, run, layout())
        saved = out_dir / f"step_{state.step}"
        accelerator.print(f"stopped after epoch {state.epoch} as asked (SIGUSR1), checkpoint {saved}: run again "
                          "with --resume_from_checkpoint latest")  # fmt: skip
        accelerator.wait_for_everyone()  # as at the end below
        accelerator.end_training()
        return None
    if state.stopped is None:
        state.stopped = f"num_train_epochs ({args.num_train_epochs})"

    # ---- final: best weights, test perplexity, save, sample ----
    # training and per-epoch validation in every resumed run (less what a kill lost after its last checkpoint), not
    # the final passes
    train_minutes = time_limit.elapsed() / 60
    best.restore()  # with NT-ASGD, the average's or the live weights', as validation chose
    results = {}
    for split in ("validation", "test"):
        if split in evals:
            results[f"{split}_ppl"] = math.exp(mean_nll(accelerator, model, evals[split], args.eval_bptt, desc=split))
            if cfg.speller_size:  # per id above; per word and per byte of the text, each word read from its start
                figures = text_bits_per_byte(raw, tokenizer, torch.from_numpy(ids[split].astype("int64")),
                                             E, args.eval_bptt)  # fmt: skip
                results[f"{split}_word_ppl"] = figures["word_perplexity"]
                results[f"{split}_bits_per_byte"] = figures["bits_per_byte"]
    results["train_minutes"] = train_minutes
    results["targets_seen"] = state.targets_seen
    results["epochs"] = state.epoch + state.segment / epoch_segments  # completed epochs, fractional
    results["best_validation_ppl"] = math.exp(state.best_val) if state.val_losses else None
    shown = {k: v for k, v in results.items() if v is not None}
    accelerator.print(" | ".join(f"{k} {v:.2f}" for k, v in shown.items()) + f" | stopped: {state.stopped}")
    log({"step": state.step, **results, "stopped": state.stopped})
    accelerator.wait_for_everyone()
    suppress_unk_in_generation(raw, tokenizer)
    raw.save_pretrained(out_dir, is_main_process=accelerator.is_main_process)
    if accelerator.is_main_process:
        tokenizer.save_pretrained(out_dir)
        summary = {**results, "clock": args.clock, "steps": state.step, "params": n_params,
                   "stopped": state.stopped, "unk_rate": unk_rates}  # fmt: skip
        (out_dir / "results.json").write_text(json.dumps(summary, allow_nan=False))  # strict JSON: no NaN/Infinity
    if args.sample_prompt is not None and accelerator.is_main_process:
        from transformers import pipeline

        generator = pipeline("text-generation", model=str(out_dir), tokenizer=str(out_dir), dtype=torch.float32)
        text = generator(args.sample_prompt, max_new_tokens=30, do_sample=True, top_k=40, temperature=0.8)
        print("sample:", text[0]["generated_text"])
    accelerator.print(f"saved the model and tokenizer to {out_dir}/ (results: {out_dir / 'results.json'}, "
                      f"log: {log_file})")  # fmt: skip
    # the ranks tear their process group down together: gloo's teardown while a peer still works can hang
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


if __name__ == "__main__":
    main()
