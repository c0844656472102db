"""Checkpoints of a training run (examples/train.py) that survive a kill at any moment, belong to the run that wrote
them, resume on another number of processes, and are read without running any code.

A checkpoint is written to step_N.<run id>.incomplete, its files are synced, a manifest (every file and its size) is
written last, and only then is the folder renamed to step_N: a kill leaves at worst an .incomplete folder, which the
next save removes. A kill while an old checkpoint is deleted leaves a step_N whose manifest lists missing files:
`latest` skips it, and the next save removes it. A step saved twice (a periodic save, then the stop at that epoch end)
keeps its first checkpoint, renamed step_N.<run id>.replaced, until the second is in place: a resume puts back one that
a kill left without its replacement.

A run owns its checkpoints: each manifest holds the run's id, which a resumed run continues when it resumes the newest
checkpoint of that run in that run's own output folder. Any other resume forks the run's history (the newer checkpoints
are the first run's future, not this one's): the resumed run gets a new id and its manifests record the parent (run id
and step). Clean-up removes only the run's own folders; an .incomplete folder carries its run's id in its name, since
another run's may be a save still in progress. A run refuses to start in a folder that holds another run's checkpoints
(their step_N names would collide) unless told to delete them.

A checkpoint holds accelerate's `save_state` files (model.safetensors, optimizer.bin, random_states_<rank>.pkl) and this
module's, beside them rather than registered with accelerate (whose `load_state` unpickles registered objects with code
allowed): the run's counters as JSON (train_state.json), and every other state, the weight average, the best weights and
each rank's streams (stream_state_<rank>.safetensors), as safetensors whose metadata holds the state's structure. A
resume first reads every file the way no code can run (`check_files`): safetensors and JSON, and accelerate's pickles
with torch.load(weights_only=True), which is also how accelerate 1.15's `load_state` reads them. A forged or damaged
file stops the resume with one line that names it (CheckpointError).
"""

import datetime
import json
import math
import os
import pickle
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from accelerate.utils import broadcast_object_list
from accelerate.utils import load as accelerate_load
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes

MANIFEST = "checkpoint.json"
MODEL_FILE = "model.safetensors"  # accelerate's name for the first model's weights


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: a forged or damaged file (named), or one that does not fit the run."""


# torch.load(weights_only=True)'s own unpickler could corrupt memory, and possibly run code, below 2.10
# (CVE-2026-24747, GHSA-63cw-57p8-fm3p): every pickle this package reads waits for a torch that fixed it.
SAFE_UNPICKLER_TORCH = (2, 10)


def require_safe_unpickler(path: Path) -> None:
    """CheckpointError, one line, before `path` (a pickle) is read by a torch whose weights_only unpickler is unsafe."""
    version = torch.__version__.split("+")[0].split(".")
    if tuple(int(v) if v.isdigit() else 0 for v in version[:2]) < SAFE_UNPICKLER_TORCH:
        floor = ".".join(map(str, SAFE_UNPICKLER_TORCH))
        raise CheckpointError(
            f"{path} is a pickle, and torch {torch.__version__}'s weights_only unpickler is unsafe to read one "
            f"(CVE-2026-24747); not loaded: pip install 'torch>={floor}'"
        )


# ---- manifests: whole checkpoints, the newest one, leftovers of kills ----
def read_manifest(folder: Path) -> dict | None:
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def incomplete(folder: Path) -> str | None:
    """Why `folder` is not a whole checkpoint (None when it is): its manifest is missing, or a file it lists is."""
    files = (read_manifest(folder) or {}).get("files")
    if not isinstance(files, dict):
        return f"no readable {MANIFEST}: its save did not finish"
    for name, size in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != size:
            return f"{name} is missing or truncated"
    return None


def checkpoint_folders(out_dir: Path) -> list[Path]:
    """The step_N folders of out_dir, oldest first."""
    found = [d for d in out_dir.glob("step_*") if d.is_dir() and d.name[5:].isdigit()]
    return sorted(found, key=lambda d: int(d.name[5:]))


def restore_replaced(out_dir: Path, say=print):
    """Main process: a kill between a second save's two renames leaves step_N.<run id>.replaced and no step_N; put it
    back."""
    for replaced in out_dir.glob("step_*.replaced"):
        if not (final := out_dir / replaced.name.split(".")[0]).exists() and incomplete(replaced) is None:
            os.replace(replaced, final)
            say(f"restored {final}: a kill came before its second save took its place")


def latest_checkpoint(out_dir: Path, say=print) -> Path | None:
    """The newest complete checkpoint of out_dir; each newer incomplete one is skipped with one line."""
    for folder in reversed(checkpoint_folders(out_dir)):
        if (why := incomplete(folder)) is None:
            return folder
        say(f"skipping {folder}: incomplete ({why})")
    return None


def find_latest(accelerator, out_dir: Path) -> Path | None:
    """`--resume_from_checkpoint latest` on every rank: the main process first puts back a checkpoint a kill left
    renamed, then every rank finds the same newest whole one."""
    if accelerator.is_main_process and out_dir.is_dir():
        restore_replaced(out_dir, accelerator.print)
    accelerator.wait_for_everyone()
    resume = latest_checkpoint(out_dir, accelerator.print) if out_dir.is_dir() else None
    accelerator.print(f"resuming from {resume}" if resume else "no checkpoint to resume from: starting afresh")
    return resume


# ---- run ownership ----
def new_run_id() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(4)


def owner(folder: Path) -> str | None:
    """The run id of a checkpoint folder (its manifest's), or of an .incomplete or .replaced one (its name's: a kill
    can leave either without its manifest); None when it has none (a checkpoint written before run ids, a folder
    without a manifest)."""
    if folder.name.endswith((".incomplete", ".replaced")):
        parts = folder.name.split(".")
        return parts[1] if len(parts) == 3 else None
    run_id = (read_manifest(folder) or {}).get("run_id")
    return run_id if isinstance(run_id, str) else None


def incomplete_folder(out_dir: Path, step: int, run_id: str) -> Path:
    return out_dir / f"step_{step}.{run_id}.incomplete"


def foreign_checkpoints(out_dir: Path, own: set) -> list[Path]:
    """The checkpoints in out_dir (step_N and step_N.replaced folders with a manifest) of runs not in `own`."""
    folders = [*checkpoint_folders(out_dir), *sorted(out_dir.glob("step_*.replaced"))]
    return [f for f in folders if read_manifest(f) is not None and owner(f) not in own]


def run_of(resume: Path, out_dir: Path) -> tuple[str | None, dict | None]:
    """(the run id a run resumed from `resume` continues, None for a new one; the parent a new one records)."""
    run_id, step = owner(resume), (read_manifest(resume) or {}).get("step")
    newer = [
        f
        for f in checkpoint_folders(resume.parent)
        if int(f.name[5:]) > step and owner(f) == run_id and incomplete(f) is None
    ]
    if resume.parent.resolve() == out_dir.resolve() and not newer:
        return run_id, None
    return None, {"run_id": run_id, "step": step, "folder": str(resume)}


def claim_run(
    out_dir: Path, resume: Path | None, overwrite: bool, new_id: Callable[[], str] = new_run_id, say=print
) -> tuple[dict, list[Path]]:
    """Which run this is: ({"run_id", "own" (see tidy_checkpoints), "parent" (None unless a fork)}, the other runs'
    checkpoints in out_dir, which `overwrite` allows and the caller deletes once `resume` is loaded). CheckpointError
    when out_dir holds another run's checkpoints and `overwrite` is off. `new_id`: the same id on every rank."""
    run_id, parent = run_of(resume, out_dir) if resume else (None, None)
    own = {run_id} if resume and not parent else set()  # None too: a run from before run ids is resumed as it was
    if run_id is None:
        run_id = new_id()
    own.add(run_id)
    if parent:
        say(f"run {run_id}: a new run forked from run {parent['run_id']} at step {parent['step']} ({parent['folder']})")
    if (foreign := foreign_checkpoints(out_dir, own) if out_dir.is_dir() else []) and not overwrite:
        others = sorted({str(owner(f)) for f in foreign})
        fork = f"this run forks run {parent['run_id']} at step {parent['step']}; " if parent else ""
        raise CheckpointError(
            f"{out_dir} holds {len(foreign)} checkpoint(s) of another run ({', '.join(others)}: "
            f"{', '.join(f.name for f in foreign)}); {fork}resume it with --resume_from_checkpoint latest, give "
            "another --output_dir, or --overwrite_output_dir to delete them"
        )
    return {"run_id": run_id, "own": own, "parent": parent}, foreign


class RunStart(NamedTuple):
    """What `start_run` found: the checkpoint to resume (None: a fresh start), this run's identity (claim_run), the
    other runs' checkpoints to delete once `resume` is loaded, and the stream layout `resume` recorded."""

    resume: Path | None
    run: dict
    foreign: list[Path]
    layout: dict | None


def start_run(
    accelerator, out_dir: Path, resume_from: str | None, overwrite: bool, batch_size: int, eval_batch_size: int
) -> RunStart:
    """Which checkpoint a run resumes, and which run it is, alike on every rank (each reads the same folders).
    `resume_from`: a step_N folder, "latest" (find_latest: None when out_dir holds no whole checkpoint) or None; the
    run id a new run gets is the main process's. CheckpointError when out_dir holds another run's checkpoints and
    `overwrite` is off (claim_run), or when this launch (its processes with batch_size training and eval_batch_size
    evaluation streams each) would cut the corpus into other streams than the checkpoint's (layout_mismatch)."""
    W = accelerator.num_processes
    resume = resume_from and Path(resume_from)
    if resume_from == "latest":
        resume = find_latest(accelerator, out_dir)
    run, foreign = claim_run(
        out_dir,
        resume,
        overwrite,
        say=accelerator.print,
        new_id=lambda: broadcast_object_list([new_run_id()])[0] if W > 1 else new_run_id(),
    )
    layout = (read_manifest(resume) or {}).get("layout") if resume else None
    if resume and (why := layout_mismatch(resume, layout, W, batch_size, eval_batch_size)):
        raise CheckpointError(why)
    return RunStart(resume, run, foreign, layout)


def delete_foreign(accelerator, foreign: list[Path]):
    """Main process: delete the other runs' checkpoints that claim_run found in the output folder (with `overwrite`),
    to be called once the checkpoint resumed from is loaded (it may be one of them); says how many."""
    if foreign and accelerator.is_main_process:
        for folder in foreign:
            shutil.rmtree(folder)
        accelerator.print(f"--overwrite_output_dir: deleted {len(foreign)} checkpoint(s) of another run")


def tidy_checkpoints(out_dir: Path, keep: int | None, own: set, say=print):
    """Main process: remove this run's leftovers of kills (its .incomplete and .replaced folders, its step_N folders
    that are not whole checkpoints, and step_N folders with no manifest, which no save leaves) and all but its newest
    `keep` complete checkpoints. `own`: the run ids that are this run's (None too for a run resumed from a checkpoint
    written before run ids). Another run's folders are never touched."""
    for leftover in [*out_dir.glob("step_*.incomplete"), *out_dir.glob("step_*.replaced")]:
        if owner(leftover) in own:
            shutil.rmtree(leftover)
    complete = []
    for folder in checkpoint_folders(out_dir):
        if read_manifest(folder) is not None and owner(folder) not in own:
            continue
        if (why := incomplete(folder)) is None:
            complete.append(folder)
        else:
            say(f"removing {folder}: incomplete ({why})")
            shutil.rmtree(folder)
    for old in complete[: -keep if keep else 0]:
        shutil.rmtree(old)


# ---- state files: safetensors (tensors) with the state's structure as JSON, or JSON alone ----
TENSOR = "__tensor__"  # {TENSOR: name} stands for a tensor in a structure


def pack(state) -> tuple[dict[str, torch.Tensor], object]:
    """A state (dicts with str keys, lists, tensors, numbers, strings, None) as safetensors' flat tensors and a JSON
    structure naming them; a tensor under several names (a tied matrix) is stored once."""
    tensors, names = {}, {}

    def walk(x, path):
        if isinstance(x, torch.Tensor):
            view = (x.untyped_storage().data_ptr(), x.storage_offset(), tuple(x.shape), x.stride(), x.dtype)
            if view not in names:
                names[view] = path
                tensors[path] = x.detach().cpu().clone(memory_format=torch.contiguous_format)
            return {TENSOR: names[view]}
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                raise TypeError(f"{path}: a state's keys must be strings")
            return {k: walk(v, f"{path}/{k}" if path else k) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(x)]
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        raise TypeError(f"{path}: {type(x).__name__} is not a state a checkpoint holds")

    return tensors, walk(state, "")


def unpack(tensors: dict[str, torch.Tensor], structure):
    if isinstance(structure, dict):
        if set(structure) == {TENSOR}:
            return tensors[structure[TENSOR]]  # the same tensor object under each of its names
        return {k: unpack(tensors, v) for k, v in structure.items()}
    if isinstance(structure, list):
        return [unpack(tensors, v) for v in structure]
    return structure


def write_file(path: Path, data: bytes):
    """This module writes every file of a checkpoint but accelerate's through here (tests/kill_during_save.py cuts
    it short)."""
    path.write_bytes(data)


def write_state(path: Path, state):
    """`path` .json: the state as JSON (Python's: float("inf") is kept); .safetensors: see pack."""
    if path.suffix == ".json":
        return write_file(path, json.dumps(state).encode())
    tensors, structure = pack(state)
    write_file(path, safetensors_bytes(tensors, {"format": "pt", "state": json.dumps(structure)}))


def read_state(path: Path):
    """A state file written by write_state, on the CPU; CheckpointError naming it when it is not one."""
    try:
        if path.suffix == ".json":
            return json.loads(path.read_text())
        with safe_open(path, "pt") as f:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
            return unpack(tensors, json.loads(f.metadata()["state"]))
    except Exception as e:  # whatever the file is, it stops here with its name
        raise refused(path, e) from None


def refused(path: Path, e: Exception) -> CheckpointError:
    if isinstance(e, pickle.UnpicklingError):  # torch.load(weights_only=True) met an object that only code rebuilds
        why = "it holds Python objects that only running code can rebuild, which no checkpoint holds"
    else:
        why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else 'unreadable'}"
    return CheckpointError(f"{path} is forged or damaged ({why}); not loaded: resume another checkpoint")


def check_files(folder: Path):
    """Read every file of a checkpoint that anything loads, the way no code can run, before any of it is loaded:
    safetensors and JSON, and accelerate's pickles (optimizer.bin, random_states_<rank>.pkl, a scaler.pt) with
    torch.load(weights_only=True) and accelerate's own allowed globals (numpy's RNG state), memory-mapped. A file that
    does not read so raises CheckpointError naming it; so does a random state that is not a dict of states, which
    accelerate's load_state would skip without a word (the run would go on with other dropout masks)."""
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        if path.suffix in (".safetensors", ".json") and path.name != MANIFEST:
            if path.name == MODEL_FILE:  # its tensors are raw numbers: the header is all that can be forged
                saved_weight_names(folder)
            else:
                read_state(path)
        elif path.suffix in (".bin", ".pkl", ".pt"):
            require_safe_unpickler(path)
            try:
                state = accelerate_load(path, map_location="cpu", weights_only=True, mmap=True)
                rng = path.name.startswith("random_states")
                if not isinstance(state, dict) or (rng and "random_state" not in state):
                    raise TypeError(f"holds a {type(state).__name__}, not the state accelerate saved")
            except Exception as e:
                raise refused(path, e) from None


def saved_weight_names(folder: Path) -> list[str]:
    """The names of the weights in a checkpoint's model.safetensors (its header only)."""
    try:
        with safe_open(folder / MODEL_FILE, "pt") as f:
            return list(f.keys())
    except Exception as e:
        raise refused(folder / MODEL_FILE, e) from None


# ---- saving and loading a checkpoint ----
def write_manifest(path: Path, manifest: dict):
    write_file(path, json.dumps(manifest).encode())
    _fsync(path)


def _fsync(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_tied_weights_once(accelerator):
    """Register with `accelerator` a save_state hook that saves a tied matrix (one tensor under two names) under one
    name (loading restores the alias), rather than leave accelerate to drop the second with a warning every save."""

    def hook(models, weights, _):
        for m, state in zip(models, weights, strict=True):
            tied = accelerator.unwrap_model(m).all_tied_weights_keys
            for name in [n for n in state if n.removeprefix("module.") in tied]:
                del state[name]

    return accelerator.register_save_state_pre_hook(hook)


def save_checkpoint(
    accelerator,
    out_dir: Path,
    step: int,
    states: dict,
    streams,
    keep: int | None,
    run: dict,
    layout: dict | None = None,
):
    """Save step_N crash-safely (the scheme: this module's docstring). `states`: file name (.json or .safetensors) ->
    an object with state_dict(), the main process's; `streams`: this rank's stream state (a PointerSentinelCache),
    stream_state_<rank>.safetensors; `run`: this run's identity (claim_run); `layout`: the streams' layout and
    position (stream_layout), which the manifest records."""
    final = out_dir / f"step_{step}"
    tmp = incomplete_folder(out_dir, step, run["run_id"])
    if accelerator.is_main_process and tmp.exists():  # a kill's leftover
        shutil.rmtree(tmp)
    accelerator.wait_for_everyone()
    accelerator.save_state(tmp)
    if accelerator.is_main_process:
        for name, obj in states.items():
            write_state(tmp / name, obj.state_dict())
    write_state(tmp / f"stream_state_{accelerator.process_index}.safetensors", stream_state(streams))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        files = sorted(p for p in tmp.iterdir() if p.is_file())
        for path in files:
            _fsync(path)
        manifest = {"step": step, "run_id": run["run_id"], "files": {p.name: p.stat().st_size for p in files}}
        manifest |= {"layout": layout} if layout else {}
        write_manifest(tmp / MANIFEST, manifest | ({"parent": run["parent"]} if run["parent"] else {}))
        if final.exists():  # this step saved before: whole until the new one takes its name
            replaced = final.with_name(f"{final.name}.{run['run_id']}.replaced")
            if replaced.exists():  # a leftover of an earlier kill, with this step's checkpoint in place
                shutil.rmtree(replaced)
            os.replace(final, replaced)
        os.replace(tmp, final)
        _fsync(out_dir)
        tidy_checkpoints(out_dir, keep, run["own"], accelerator.print)
    accelerator.wait_for_everyone()


def load_checkpoint(accelerator, folder: Path, states: dict):
    """Load a checkpoint saved by save_checkpoint with the same `states`: every file checked first (check_files),
    then accelerate's (model, optimizer, this rank's RNG states), then the states in order (each may read those
    loaded before it). The streams: resharded_stream_state. CheckpointError when a file is forged, damaged or does not
    fit."""
    check_files(folder)
    if legacy := sorted(p.name for p in folder.glob("custom_checkpoint_*.pkl")):
        raise CheckpointError(f"{folder} holds {', '.join(legacy)}: states pickled by an older train.py, which "
                              "this one does not read (it reads safetensors and JSON only)")  # fmt: skip
    try:
        accelerator.load_state(folder)
    except (RuntimeError, ValueError, KeyError) as e:  # read safely, but the wrong shapes or names
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{folder}: its model or optimizer state does not fit this model ({first})") from None
    for name, obj in states.items():
        try:
            obj.load_state_dict(read_state(folder / name))
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError, IndexError) as e:
            raise CheckpointError(f"{folder / name} does not fit this run ({type(e).__name__}: {e})") from None


class TrainState:
    """Rank-independent counters of a training run, saved as JSON."""

    def __init__(self, lr):
        self.epoch, self.segment, self.step, self.lr = 0, 0, 0, lr
        self.val_losses: list[float] = []
        self.best_val, self.bad_epochs, self.targets_seen = math.inf, 0, 0
        self.train_seconds = 0.0  # --clock time trained up to the last checkpoint, over every resumed run
        self.clock = None  # the --clock that train_seconds counts, fixed at the run's start
        self.stopped = None  # why training ended, for results.json

    def state_dict(self):
        return dict(vars(self))

    def load_state_dict(self, state):
        if unknown := set(state) - set(vars(self)):
            raise KeyError(f"not a training state: {sorted(unknown)}")
        vars(self).update(state)


class BestWeights:
    """The weights of the best validation so far, saved in checkpoints so a resumed run ends on the same model.

    At an epoch end they are often the model's own weights, or with NT-ASGD its average's; a checkpoint then names
    that source instead of holding a third copy, so the checkpoint a stop at an epoch end leaves is the smallest."""

    SOURCES = ("model", "average")

    def __init__(self, model, averager):
        self.model, self.averager = model, averager
        self.weights: dict[str, torch.Tensor] | None = None

    def source(self, name: str) -> dict[str, torch.Tensor] | None:
        """The model's state as it is ("model"), or with each averaged Parameter's average in its place ("average"),
        under every name (a tied matrix: one tensor under two names); None without an average."""
        if name == "average" and not self.averager.active:
            return None
        average = {}
        if name == "average":
            average = dict(zip(map(id, self.averager.params), self.averager.average, strict=True))
        return {n: average.get(id(t), t) for n, t in self.model.state_dict(keep_vars=True).items()}

    def restore(self):
        """At the end of training: the best weights into the model (with NT-ASGD, the average's or the live weights',
        as validation chose), else the average while there is one; the average is then dropped (the final weights
        are the model's)."""
        if self.weights is not None:
            self.model.load_state_dict(self.weights)
        elif self.averager.active:
            self.averager.swap()
        self.averager.average = None

    def keep(self, name="model"):
        """Copy the model's state (or a source's); a tied matrix is copied, and so saved, once."""
        copies: dict[int, torch.Tensor] = {}
        self.weights = {}
        for key, tensor in self.source(name).items():
            if id(tensor) not in copies:
                copies[id(tensor)] = tensor.detach().clone()
            self.weights[key] = copies[id(tensor)]

    def state_dict(self):
        for name in self.SOURCES if self.weights is not None else ():
            source = self.source(name)
            if source is not None and all(torch.equal(w, source[k]) for k, w in self.weights.items()):
                return {"weights": name}
        return {"weights": self.weights}

    def load_state_dict(self, state):
        # the model and the averager are loaded first (load_checkpoint)
        if isinstance(state["weights"], str):
            self.keep(name=state["weights"])
        elif state["weights"] is not None:  # read on the CPU: onto the model's device
            device, moved, self.weights = next(self.model.parameters()).device, {}, {}
            for k, t in state["weights"].items():  # a tied matrix: two tensors on one storage, moved once
                view = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride())
                if view not in moved:
                    moved[view] = t.to(device)
                self.weights[k] = moved[view]
        else:
            self.weights = None


# ---- elastic resume: a checkpoint's stream layout, and its streams re-sharded over another number of processes ----
# W processes with batch B train W*B contiguous streams (training.shard_streams): global stream g is row g % B of rank
# g // B's stream state (stream_state_<rank>.safetensors: recurrent state and pointer window). A launch of W'
# processes with batch B' continues every stream exactly where it stopped when W'*B' = W*B and the evaluation streams'
# count is kept too (it changes the validation perplexity, which the schedule compares with the saved ones): rank r'
# takes global streams r'*B' .. (r'+1)*B'-1, the saved ranks' rows concatenated in rank order. Any other count cuts the
# corpus into other streams, so it is refused with the flags that would resume it. The model, optimizer, averager, best
# weights and counters are the main process's, the same for any world size. The RNG states are per rank (accelerate's
# random_states_<rank>.pkl) and belong to the old ranks' streams: a resume on another world size reseeds every rank
# from the seed and the step (device-specific), so it is reproducible; its dropout masks differ from an unbroken run's,
# as they differ between any two world sizes.
def stream_layout(W: int, B: int, E: int, tokens_per_stream: int, epoch: int, position: int) -> dict:
    """`position`: the first target of the next segment, the same in every stream (they advance together)."""
    return {"world_size": W, "per_device_train_batch_size": B, "per_device_eval_batch_size": E, "streams": W * B,
            "eval_streams": W * E, "tokens_per_stream": tokens_per_stream, "epoch": epoch,
            "stream_position": position}  # fmt: skip


def layout_mismatch(resume: Path, saved: dict | None, W: int, B: int, E: int) -> str | None:
    """Why a launch of W processes with batches B (training) and E (evaluation) cannot continue the streams of the
    checkpoint `resume` whose manifest recorded the layout `saved` (None: before layouts were recorded); None when it
    can."""
    if saved is None:  # one stream state per rank, its batch unknown: only the same world size resumes it
        saved_w = len(list(resume.glob("stream_state_*.safetensors")))
        if saved_w == W:
            return None
        return f"{resume} was saved by {saved_w} process(es) and records no stream layout: resume it on {saved_w}"
    streams, evals, was = saved["streams"], saved["eval_streams"], saved["world_size"]
    if W * B == streams and W * E == evals:
        return None
    if streams % W == 0 and evals % W == 0:
        how = f"--per_device_train_batch_size {streams // W} --per_device_eval_batch_size {evals // W}"
    else:
        how = (
            f"a number of processes that divides {streams} and {evals} (as saved: {was}, with "
            f"--per_device_train_batch_size {saved['per_device_train_batch_size']} "
            f"--per_device_eval_batch_size {saved['per_device_eval_batch_size']})"
        )
    return (
        f"{resume} holds {streams} training and {evals} evaluation streams ({was} process(es) x batch "
        f"{saved['per_device_train_batch_size']} and {saved['per_device_eval_batch_size']}), this launch would make "
        f"{W * B} and {W * E} ({W} x {B} and {E}), which would cut the corpus into other streams: resume with {how}"
    )


def check_tokens_per_stream(resume: Path, saved: dict | None, tokens: int):
    """Refuse (CheckpointError) to resume `resume`, whose manifest recorded the layout `saved` (None: not checked), on
    training streams of another length, `tokens` each: other training text, whose streams would not continue."""
    if saved and saved["tokens_per_stream"] != tokens:
        raise CheckpointError(
            f"{resume} was trained on {saved['tokens_per_stream']} tokens per stream, this training data gives "
            f"{tokens}: resume it with the training data (and --unseen_word_rate) it was trained with"
        )


def stream_state(cache) -> dict:
    """A `PointerSentinelCache`'s state as a checkpoint holds it: tensors, and with a speller each row's spelled words
    (`SpelledRow`: slots, window, the word in progress) as lists and numbers, which `training.load_resume` rebuilds."""
    state = cache.state_dict()
    if state.get("spelled_rows") is not None:
        state["spelled_rows"] = [{"slots": [[list(w), k] for w, k in r.slots.items()],
                                  "last_seen": [[k, c] for k, c in r.last_seen.items()],
                                  "window": [None if w is None else list(w) for w in r.window], "word": list(r.word),
                                  "clock": r.clock} for r in state["spelled_rows"].rows]  # fmt: skip
    if state.get("spell_anchor") is not None:
        state["spell_anchor"] = list(state["spell_anchor"])  # per field, rows first (re-sharded as the layers are)
    return state


def resharded_stream_state(resume: Path, saved_batch: int, B: int, rank: int) -> dict:
    """This rank's stream state (global streams rank*B .. rank*B+B-1) from a checkpoint whose ranks held saved_batch
    streams each: the rows of the saved ranks that hold them, concatenated in rank order. Read on the CPU."""
    first, last = rank * B, (rank + 1) * B
    states = [
        read_state(resume / f"stream_state_{j}.safetensors")
        for j in range(first // saved_batch, (last - 1) // saved_batch + 1)
    ]
    skip = first % saved_batch  # rows of the first saved rank before this rank's first stream

    def rows(parts):
        return torch.cat(list(parts))[skip : skip + B]

    try:
        merged = dict(states[0])  # seen_tokens, and None where the state is empty (an epoch's start): the same on all
        for key, value in states[0].items():
            if key == "spelled_rows" and value is not None:  # one entry per row
                merged[key] = [row for s in states for row in s[key]][skip : skip + B]
            elif isinstance(value, torch.Tensor):
                merged[key] = rows(s[key] for s in states)
            elif isinstance(value, list):  # per layer
                merged[key] = [rows(layer) for layer in zip(*(s[key] for s in states), strict=True)]
    except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        raise CheckpointError(f"{resume}: its stream states do not fit together ({type(e).__name__}: {e})") from None
    return merged
