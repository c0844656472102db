"""Command-line helpers shared by the example scripts (train.py, evaluate.py, generate.py): the data flags, JSON
config files, and invalid input that ends in one line on stderr (`PROG: error: ...`, exit status 2), not a traceback.

Only the standard library is imported here: a script checks its command line before it imports torch and transformers
(8-40 s), so that --help and a mistaken flag answer at once."""

import argparse
import contextlib
import json
import math
import os
import pickle
import sys
from pathlib import Path


def fail(message, prog: str | None = None):
    """Stop with one line on stderr and exit status 2, as argparse's `parser.error` does (without the usage)."""
    prog = prog or os.path.basename(sys.argv[0])
    sys.stderr.write(f"{prog}: error: {' '.join(str(message).split())}\n")
    sys.exit(2)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage of these scripts runs to dozens of lines and would bury the message."""

    def error(self, message):
        fail(message, self.prog)


@contextlib.contextmanager
def ctrl_c_stops():
    """Ctrl+C (KeyboardInterrupt) ends the script with one line on stderr and exit status 130 (128 + SIGINT, as a
    shell reports it), not a traceback: the user asked for the stop."""
    try:
        yield
    except KeyboardInterrupt:
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: stopped by Ctrl+C\n")
        sys.exit(130)


def add_data_arguments(parser):
    """The data flags shared by examples/train.py and examples/evaluate.py."""
    a = parser.add_argument
    a("--dataset_name", help="a Hugging Face datasets name, e.g. wikitext (default: the bundled WikiText-2)")
    a("--dataset_config_name", help="e.g. wikitext-2-v1")
    a("--train_file", help="local plain text, one line per sentence or paragraph")
    a("--validation_file")
    a("--test_file")
    a(
        "--data_cache_dir",
        help="where each split is kept tokenised, once per tokenizer and file version "
        "(default: pointer_sentinel_tokens under the Hugging Face datasets cache; modeling_pointer_sentinel/data.py)",
    )
    a(
        "--preprocessing_num_workers",
        type=workers,
        help="processes that tokenise a local file into the token cache at once, each a range of its lines "
        "(default: the usable cores; a file gets at most one per 16 MiB)",
    )


def workers(value: str) -> int:
    """--preprocessing_num_workers: a positive integer (argparse turns the error into one `error:` line)."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value!r}")
    return n


def positive(v) -> bool:
    return v > 0


def non_negative(v) -> bool:
    return v >= 0


def check_ranges(parser, args, rules):
    """Table-driven range checks of numeric flags, run on the parsed values (command line or --config): each rule is
    (flag, check, what) and a value that is not None must pass `check`, or the parser fails with one line
    `--flag must be WHAT, got VALUE`; a list (nargs) is checked value by value. A float must also be finite
    (argparse's float() accepts "nan" and "inf")."""
    for flag, check, what in rules:
        value = getattr(args, flag.lstrip("-"))
        for v in value if isinstance(value, list) else [value]:
            if v is not None and ((isinstance(v, float) and not math.isfinite(v)) or not check(v)):
                parser.error(f"{flag} must be {what}, got {v!r}")


def describe_ranges(parser, rules):
    """Append each rule's range to its flag's help text, so --help states what check_ranges enforces."""
    what = {flag.lstrip("-"): w for flag, _, w in rules}
    for action in parser._actions:
        if action.dest in what:
            action.help = f"{action.help}; {what[action.dest]}" if action.help else what[action.dest]


PICKLED = "its pickled weights file (pytorch_model.bin) holds Python objects that only running code rebuilds"


def load_or_fail(what: str, load, name: str):
    """`load(name)` (a `from_pretrained`), or one error line saying what could not be loaded and why. A folder whose
    weights are a pickle alone is read only by a torch whose weights_only unpickler is safe (CVE-2026-24747)."""
    folder = Path(name)
    if folder.is_dir() and not any(folder.glob("*.safetensors")):
        from modeling_pointer_sentinel.checkpointing import CheckpointError, require_safe_unpickler

        for pickled in sorted(p for p in folder.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl")):
            try:
                require_safe_unpickler(pickled)
            except CheckpointError as e:
                fail(e)
    try:
        return load(name)
    except Exception as e:
        if not isinstance(e, load_errors()):
            raise
        message = str(e).splitlines()[0] if isinstance(e, OSError | ValueError) else str(e)
        if isinstance(e, pickle.UnpicklingError):  # torch.load's weights_only refused the pickle: none of it ran
            message = (f"{PICKLED}; it was not loaded (use a folder with model.safetensors, or re-save the model from "
                       "code you trust)")  # fmt: skip
        if "ignore_mismatched_sizes" in message:  # transformers' load report, printed above, has the detail
            message = "its weights do not fit its config.json (a misspelt or missing key? see the report above)"
        fail(f"cannot load the {what} {name}: {message}")


def load_errors() -> tuple[type[Exception], ...]:
    """What a damaged or mistyped saved folder raises while it loads: a missing or unreadable file, a config.json
    value of the wrong type (huggingface_hub's strict dataclasses), weights that do not fit the config, a pickled
    weights file that holds more than tensors (torch.load's weights_only refuses it before any of it runs)."""
    from huggingface_hub.errors import StrictDataclassError

    return OSError, ValueError, RuntimeError, TypeError, KeyError, StrictDataclassError, pickle.UnpicklingError


def load_saved_tokenizer(folder: str):
    """The tokenizer of a folder written by save_pretrained, apart from its model: the checks that need only the
    tokenizer then fail before the weights load (and their progress bar)."""
    from transformers import AutoTokenizer

    return load_or_fail("tokenizer in", AutoTokenizer.from_pretrained, folder)


def load_saved_model(folder: str, tokenizer=None):
    """The tokenizer (`tokenizer` where it is loaded already) and the model (float32, eval mode) of a folder written
    by save_pretrained."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = load_saved_tokenizer(folder) if tokenizer is None else tokenizer

    def load(f):
        return AutoModelForCausalLM.from_pretrained(f, dtype=torch.float32).eval()

    return tokenizer, load_or_fail("model in", load, folder)


def saved_config(folder: str) -> dict:
    """A saved folder's config.json as read by json ({} where it cannot be read: loading the folder then names the
    problem), for the checks of its fields before torch is imported."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def check_local_path(parser, flag: str, value: str | None):
    """A value that can only be a local path (starts with . / ~, or has more than one /) must exist; "name" and
    "owner/name" may be Hub ids and are left to from_pretrained."""
    if value and (value.startswith((".", "/", "~")) or value.count("/") > 1) and not Path(value).expanduser().exists():
        parser.error(f"{flag} {value}: no such file or folder")


def check_model_folder(parser, flag: str, folder: str, tokenizer: bool = True):
    """A folder written by save_pretrained: it must exist and hold config.json (and, with `tokenizer`, a saved
    tokenizer: tokenizer.json or tokenizer_config.json), or the parser fails with one line naming what is missing."""
    name = f"{flag} {folder}" if flag else folder
    path = Path(folder)
    if not path.is_dir():
        parser.error(f"{name}: no such model folder (give a folder written by save_pretrained, e.g. train.py's "
                     "--output_dir)")  # fmt: skip
    missing = [] if (path / "config.json").is_file() else ["config.json"]
    if tokenizer and not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        missing.append("tokenizer.json or tokenizer_config.json")
    if missing:
        parser.error(f"{name}: not a model folder (no {' and no '.join(missing)}; give a folder written by "
                     "save_pretrained)")  # fmt: skip


def check_text_file(parser, flag: str, value: str | None, decode: bool = False):
    """A local text file given by `flag`: it must exist, be a file (not a folder) and not be empty; with `decode`, it
    must also read as UTF-8 text without NUL bytes (streamed in 1 MiB chunks; `.xz` decompressed; NUL is valid UTF-8
    but no text file holds it, so it marks a binary file) and hold more than blank lines. Each failure is one parser
    error line, before anything heavy is imported or loaded."""
    if value is None:
        return
    path = Path(value).expanduser()
    if path.is_dir():
        parser.error(f"{flag} {value}: is a folder, not a text file")
    if not path.is_file():
        parser.error(f"{flag} {value}: no such file")
    if path.stat().st_size == 0:
        parser.error(f"{flag} {value}: is empty")
    if not decode:
        return
    import codecs
    import lzma

    decoder, offset, blank = codecs.getincrementaldecoder("utf-8")(), 0, True
    with lzma.open(path) if path.suffix == ".xz" else open(path, "rb") as f:
        while True:
            try:
                chunk = f.read(1 << 20)
                text = decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as e:
                where = max(offset + e.start - len(e.object) + len(chunk), 0)
                parser.error(f"{flag} {value}: not UTF-8 text (byte {where:,}: {e.reason}); a binary file?")
            except (OSError, EOFError, lzma.LZMAError) as e:  # unreadable, or a damaged .xz
                parser.error(f"{flag} {value}: cannot be read ({e})")
            if (nul := chunk.find(b"\0")) >= 0:
                parser.error(f"{flag} {value}: not text (a NUL byte at byte {offset + nul:,}); a binary file?")
            blank = blank and not text.strip()
            offset += len(chunk)
            if not chunk:
                break
    if blank:
        parser.error(f"{flag} {value}: holds only blank lines, no text")


def load_splits(args) -> dict[str, list[str]]:
    """`load_text_splits` from the data flags; a missing or empty file, or a dataset that cannot be loaded, fails."""
    from modeling_pointer_sentinel.training import load_text_splits

    try:
        return load_text_splits(
            args.dataset_name, args.dataset_config_name, args.train_file, args.validation_file, args.test_file
        )
    except (OSError, ValueError) as e:  # FileNotFoundError and the datasets library's not-found errors included
        fail(e)


def load_sources(args) -> dict:
    """`data.split_sources` from the data flags: each split's text to stream into the token cache; a missing or empty
    file, or a dataset that cannot be loaded, fails."""
    from modeling_pointer_sentinel.data import split_sources

    try:
        return split_sources(
            args.dataset_name, args.dataset_config_name, args.train_file, args.validation_file, args.test_file
        )
    except (OSError, ValueError) as e:
        fail(e)


PROGRESS_BYTES = 1 << 20  # local files smaller than this tokenise in well under a second


def cached_split_files(args, tokenizer, sources: dict, progress: bool = True) -> dict:
    """Each split's id file in the token cache (data.token_file), prepared where missing; an undecodable or empty
    file fails. Local files all under PROGRESS_BYTES get no progress bar: it would be noise, and it would stand above
    the error line of a file too short for its streams."""
    from modeling_pointer_sentinel.data import token_file

    workers = getattr(args, "preprocessing_num_workers", None)
    progress = progress and any(not src.path or Path(src.path).stat().st_size >= PROGRESS_BYTES
                                for src in sources.values())  # fmt: skip
    try:
        return {s: token_file(tokenizer, src, args.data_cache_dir, progress, workers) for s, src in sources.items()}
    except ValueError as e:
        fail(e)


def cached_split_ids(args, tokenizer, sources: dict, progress: bool = True) -> tuple[dict, dict]:
    """Each split's flat id stream (int64) from the token cache, prepared where missing, and each split's cache
    metadata; an undecodable or empty file fails."""
    from modeling_pointer_sentinel.data import load_ids, read_meta

    files = cached_split_files(args, tokenizer, sources, progress)
    return {s: load_ids(f) for s, f in files.items()}, {s: read_meta(f) for s, f in files.items()}


def read_config(parser, argv) -> dict:
    """Make the `--config` JSON file's entries the parser's defaults (the command line still wins); returns its
    "model" entry, whose field names the caller checks (they need the model's import). Keys starting with "_" are
    comments. Every other mistake in the file fails with one line."""
    pre, _ = parser.parse_known_args(argv)
    if not pre.config:
        return {}
    path = Path(pre.config)
    if not path.is_file():
        parser.error(f"--config {path}: no such file")
    try:
        cfg = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        parser.error(f"--config {path} is not valid JSON: {e}")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model", {}), dict):
        parser.error(f"--config {path} must hold a JSON object, with the model fields in an object under 'model'")
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    model = {k: v for k, v in cfg.pop("model", {}).items() if not k.startswith("_")}
    actions = {act.dest: act for act in parser._actions}
    if unknown := sorted(set(cfg) - set(actions) - {"help"}):
        parser.error(f"unknown keys in --config {path}: {unknown}")
    for key, value in cfg.items():
        act = actions[key]
        if act.choices is not None and value not in act.choices:
            parser.error(f"--config {path}: {key} must be one of {list(act.choices)}, got {value!r}")
        wanted = bool if act.nargs == 0 else act.type  # store_true flags take true/false
        ok, what = {
            bool: (lambda v: isinstance(v, bool), "true or false"),
            int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
            float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
        }.get(wanted, (None, None))
        if ok is not None and value is not None and not ok(value):
            parser.error(f"--config {path}: {key} must be {what}, got {value!r}")
    parser.set_defaults(**cfg)
    return model
