r"""Write a static site that runs saved Pointer Sentinel-LSTMs in the browser with ONNX Runtime Web: no Python at
inference.

    python examples/export_web.py pretrained/ptb-pointer-sentinel-lstm-2x200 site
    python -m http.server -d site --bind 127.0.0.1 8000       # then open http://127.0.0.1:8000/

Each FOLDER (a model folder with a speller: its tokenizer spells unseen words in bytes) becomes OUT/models/NAME/: its
decode step as examples/export_onnx.py exports it, the word step (decode_step.int8.onnx.gz) and the byte step
(spell_step.int8.onnx.gz) and their weights, each tensor once (weights.int8.bin.gz), int8 by default (`--fp32` adds
the float32 graphs, which the page's picker offers too). The int8 graphs hold int8 weights that the runtime turns
into float32 matrices when it loads them (export_onnx's `quantize_weights`: ONNX Runtime Web's float32 products are
faster than its int8 ones), where export_onnx.py's --int8 quantizes the products for the CPU (`quantize`). The
graphs are made for the page (`page_graph`): one row, the products that read the same state joined, the byte step's
window of any length (the page passes the slots that hold a word to copy) and its log p the 258 symbols, the word
step's first-byte mixture over the ring slots the page gives it (`held_slots`: those that hold spelled words), and
the word step's window ring left to the page, which moves it (web/src/runner.js). The word step also gives the pointer's
attention over its window and the gate g (export_onnx's `inspect`), so the page shows the same views as
examples/app.py. Beside them: tokenizer.json.gz and tokenizer_config.json (the page's tokenizer, web/src/tokenizer.js,
reads their text rules), start.json (the state before the first token); the folder's card figures
(eval_results.json) go to OUT/models.json, which lists the models for the page's picker. The large files are gzipped
(.gz; the page inflates them with the browser's DecompressionStream), so `python -m http.server`, which sends files
as they are, sends them compressed. OUT gets the page (web/index.html, web/src/*.js) and ONNX Runtime Web's wasm
build, three files from npm (`npm ci` in web/, run once: skipped while web/node_modules matches
web/package-lock.json). Every file the page asks for is in OUT, so after the first load it works offline (its service
worker, sw.js, keeps them). OUT/export_web.json lists each file's size, as sent and gzip -9.
"""

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import ArgumentParser, fail, saved_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WEB = ROOT / "web"
ORT_FILES = ["ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"]  # the wasm build
PAGE_FILES = ["index.html", "src/tokenizer.js", "src/runner.js", "src/app.js", "src/style.css"]  # sw.js: written
MODEL_FILES = ["tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"]
SPELL_SYMBOLS = 258  # the byte step's columns after the V words (modeling_pointer_sentinel.py's SPELL_SYMBOLS)
# The word step's window ring, which the page keeps and moves itself: the step reads it and gives none of it back
RING = ["window_keys", "window_ids", "window_valid", "window_slot", "window_context", "window_spellings"]


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folders", nargs="+", metavar="FOLDER", help="saved model folders with a speller (the first is "
                   "the page's default)")  # fmt: skip
    p.add_argument("out", metavar="OUT", help="the folder to write (the site)")
    p.add_argument("--fp32", action="store_true", help="also write the float32 graphs (the page offers both)")
    args = p.parse_args(argv)
    names = [Path(f).resolve().name for f in args.folders]
    for folder in args.folders:
        if not (Path(folder) / "config.json").is_file():
            p.error(f"{folder}: not a model folder (no config.json)")
        if not saved_config(folder).get("speller_size"):
            p.error(f"{folder}: the page runs folders with a speller (config.speller_size; all of pretrained/ have "
                    "one): this one has none")  # fmt: skip
    if len(set(names)) != len(names):
        p.error(f"two folders share a name ({', '.join(names)}): the site names each model by its folder")
    if Path(args.out).resolve() in [Path(f).resolve() for f in args.folders]:
        p.error("OUT is one of the model folders: give a new folder for the site")
    return args


def npm_ci(web: Path = WEB) -> Path:
    """web/node_modules as web/package-lock.json pins it: `npm ci` unless every package there is installed at its
    locked version already. Returns onnxruntime-web's dist folder."""
    lock = json.loads((web / "package-lock.json").read_text())
    wanted = {k: v["version"] for k, v in lock["packages"].items() if k.startswith("node_modules/")}

    def installed(path: str) -> str | None:
        try:
            return json.loads((web / path / "package.json").read_text()).get("version")
        except (OSError, ValueError):
            return None

    if any(installed(path) != version for path, version in wanted.items()):
        npm = shutil.which("npm")
        if npm is None:
            fail("npm is not installed: install Node.js 20 and npm (Debian: apt-get install -y nodejs npm)")
        # --ignore-scripts: the runtime's files are plain files in the package; no install script is needed
        done = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=web,
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode:
            lines = (done.stderr or done.stdout).strip().splitlines()
            fail(f"npm ci in {web} failed: {lines[-1] if lines else done.returncode}")
    return web / "node_modules" / "onnxruntime-web" / "dist"


def tensor_spec(t) -> dict:
    """A state tensor for start.json: dims, type and its values (one `fill` where all are equal; -inf as null)."""
    import numpy as np

    a = t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)
    kind = {"float32": "float32", "int64": "int64", "bool": "bool"}[str(a.dtype)]
    values = [None if np.isneginf(v) else v for v in a.astype(float if kind == "float32" else int).ravel().tolist()]
    one = {"dims": list(a.shape), "type": kind}
    return one | ({"fill": values[0]} if len(set(values)) <= 1 and values else {"data": values})


def share_weights(graphs: list[Path], blob: Path, threshold: int = 1024) -> None:
    """The graphs' weights (initializers of `threshold` bytes or more) moved to one file, `blob`, each distinct tensor
    once: the word step and the byte step both hold the speller's LSTM and output layer, which a browser then
    downloads once. Each graph names its tensors' places in `blob` (ONNX external data, beside the graph)."""
    import onnx
    from onnx import numpy_helper
    from onnx.external_data_helper import set_external_data

    models, places, data = [onnx.load(str(g)) for g in graphs], {}, bytearray()
    for model in models:
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data"):  # typed fields (float_data, ...) as raw bytes
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name))
            if len(tensor.raw_data) < threshold:
                continue
            key = hashlib.sha256(tensor.raw_data + str(tensor.data_type).encode()).digest()
            if key not in places:
                data += bytes(-len(data) % 64)  # aligned, as ONNX Runtime maps external data
                places[key] = (len(data), len(tensor.raw_data))
                data += tensor.raw_data
            set_external_data(tensor, location=blob.name, offset=places[key][0], length=places[key][1])
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
    blob.write_bytes(bytes(data))
    for model, graph in zip(models, graphs, strict=True):
        onnx.save(model, str(graph))


def page_graph(path: Path, byte_step: bool) -> None:
    """An exported step as the page runs it, in place: the batch fixed to one row (the page decodes one; the runtime
    then folds the shape arithmetic the batch dimension made), the nodes' export metadata (source lines, FX names: a
    third of the file) dropped, the products that read the same input joined (`export_onnx.fuse_shared_gemms`), the
    byte step's log p cut to its symbol columns (its first V columns, the words, are -inf inside a word: the page
    reads the byte step's log p as columns V ... V + 257), and the word step's window ring (`RING`) no output: the
    page moves the ring itself, which spares copying it out of the runtime and back at every word."""
    import export_onnx
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    for value in [*graph.input, *graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param == "batch":
                dim.Clear()
                dim.dim_value = 1
    del graph.value_info[:]  # their batch dimension is the exporter's; the runtime infers them again
    for node in graph.node:
        del node.metadata_props[:]
        node.doc_string = ""
    export_onnx.fuse_shared_gemms(model)
    if byte_step:  # log p = Concat(the words' -inf, the symbols): the symbols are the output
        out = next(o for o in graph.output if o.name == "log_probs")
        concat = next(n for n in graph.node if "log_probs" in n.output)
        assert concat.op_type == "Concat" and len(concat.input) == 2, concat
        concat.op_type, concat.input[:] = "Identity", concat.input[1:]
        del concat.attribute[:]
        out.type.tensor_type.shape.dim[-1].dim_value = SPELL_SYMBOLS
    else:  # the window's ring: the page moves it itself (runner.js's advanceRing), no copy back
        for out in [o for o in graph.output if o.name.removesuffix(".out") in RING]:
            graph.output.remove(out)
    outputs = {o.name for o in graph.output}
    while True:  # what no output needs any more
        used = {i for n in graph.node for i in n.input} | outputs
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    for init in [i for i in graph.initializer if i.name not in used]:
        graph.initializer.remove(init)
    onnx.save(model, str(path))


def compress(path: Path) -> Path:
    """`path` as PATH.gz (gzip -9), the original removed: what the page fetches (`python -m http.server` sends files
    as they are; the page inflates them with the browser's DecompressionStream)."""
    packed = path.with_name(path.name + ".gz")
    packed.write_bytes(gzip.compress(path.read_bytes(), 9, mtime=0))
    path.unlink()
    return packed


def card(folder: Path) -> dict:
    """The folder's card figures the page shows: its test and validation perplexity (eval_results.json)."""
    try:
        results = json.loads((folder / "eval_results.json").read_text())
    except (OSError, ValueError):
        return {}
    figures = {"dataset": results.get("dataset_name")}
    for split in ("test", "validation"):
        if isinstance(results.get(split), dict) and "ppl" in results[split]:
            figures[f"{split}_perplexity"] = round(results[split]["ppl"], 2)
    return {k: v for k, v in figures.items() if v is not None}


def export_model(folder: Path, out: Path, fp32: bool) -> dict:
    """OUT/models/NAME for one folder; returns its models.json entry."""
    import export_onnx
    import torch
    from cli import load_saved_model

    from modeling_pointer_sentinel.modeling_pointer_sentinel import COPIED_SYMBOLS

    tokenizer, model = load_saved_model(str(folder))
    if model.config.vocab_limit:
        fail(f"{folder}: config.vocab_limit={model.config.vocab_limit} is not exported with the speller")
    if not getattr(tokenizer, "spell_unseen", False):
        fail(f"{folder}: its tokenizer does not spell unseen words (tokenizer_config.json's spell_unseen)")
    out.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        if (folder / name).is_file():
            shutil.copy(folder / name, out / name)
    fp32_word = out / "decode_step.onnx"
    export_onnx.export(model, fp32_word, inspect=True, window=True)  # the page passes both steps' held slots
    int8_word = out / "decode_step.int8.onnx"
    export_onnx.quantize_weights(fp32_word, int8_word)  # int8 weights, float32 products (faster in wasm)
    export_onnx.quantize_weights(export_onnx.spell_path(fp32_word), export_onnx.spell_path(int8_word))
    files = {}
    for precision, word in (("int8", int8_word), ("fp32", fp32_word)):
        graphs = [word, export_onnx.spell_path(word)]
        if precision == "fp32" and not fp32:
            for f in graphs:
                f.unlink()
            continue
        for graph, byte_step in zip(graphs, (False, True), strict=True):
            page_graph(graph, byte_step)
        blob = out / f"weights.{precision}.bin"
        share_weights(graphs, blob)
        # the word step, the byte step, their weights (each graph names the weights' file without .gz)
        files[precision] = [compress(f).name for f in [*graphs, blob]]
    (out / "spell_start.npz").unlink()  # start.json holds it for the page
    tokenizer_file = compress(out / "tokenizer.json").name
    # The state before the first token, every input of both graphs but the token and its spelling: the word state
    # (zeros, an empty window) and the speller's (export_onnx's own, as the runner reads spell_start.npz)
    word_in = export_onnx.spell_io_names(model)[0]
    with torch.no_grad():
        values = [*export_onnx.empty_state(model, 1), *export_onnx.empty_spell_state(model, 1)]
    names = word_in[2:-1] + export_onnx.SPELL_NAMES
    start = {n: tensor_spec(v) for n, v in zip(names, values, strict=True)}
    (out / "start.json").write_text(json.dumps(start, separators=(",", ":")))
    cfg, gen = model.config, model.generation_config
    return {
        "name": folder.name,
        "path": f"models/{folder.name}",
        "files": files,
        "tokenizer": [tokenizer_file, "tokenizer_config.json"],
        "vocab_size": cfg.vocab_size,
        "oov_slots": cfg.oov_slots,
        "pointer_window": cfg.pointer_window,
        "copied_symbols": COPIED_SYMBOLS,
        "use_pointer": bool(cfg.use_pointer),
        "suppress_tokens": list(gen.suppress_tokens or []),
        "text_rules": tokenizer.init_kwargs.get("text_rules"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "card": card(folder),
    }


def sizes(out: Path) -> dict:
    """Each file of the site: bytes as served by http.server (raw) and as gzip -9 (what a host that compresses
    sends)."""
    return {str(f.relative_to(out)): {"bytes": f.stat().st_size, "gzip_bytes": len(gzip.compress(f.read_bytes(), 9))}
            for f in sorted(out.rglob("*")) if f.is_file() and f.name != "export_web.json"}  # fmt: skip


def service_worker(out: Path, files: list[str]) -> str:
    """sw.js: `files` (the page, the runtime, each model's int8 files) fetched into a cache named by their content
    when the worker installs, and every same-origin GET answered from the cache first (offline after the first load);
    a new export is a new cache, and the old ones go."""
    digest = hashlib.sha256()
    for f in sorted(files):
        digest.update(f.encode() + (out / f).read_bytes())
    urls = ["./", *sorted(files)]
    return ((WEB / "src" / "sw.js").read_text().replace("__CACHE__", f"pointer-sentinel-{digest.hexdigest()[:16]}")
            .replace("__FILES__", json.dumps(urls)))  # fmt: skip


def main(argv=None):
    args = parse_args(argv)
    dist = npm_ci()
    import torch

    torch.set_num_threads(1)
    out = Path(args.out)
    (out / "models").mkdir(parents=True, exist_ok=True)
    for name in ORT_FILES:
        shutil.copy(dist / name, out / name)
    for name in PAGE_FILES:
        shutil.copy(WEB / name, out / Path(name).name)
    entries = [export_model(Path(f), out / "models" / Path(f).resolve().name, args.fp32) for f in args.folders]
    (out / "models.json").write_text(json.dumps({"models": entries}, indent=1) + "\n")
    # what the service worker keeps at install: the page, the runtime and each model's files but its fp32 graphs
    # (kept when picked); nothing else an earlier export left in OUT
    files = [*(Path(n).name for n in PAGE_FILES), *ORT_FILES, "models.json"]
    for e in entries:
        files += [f"{e['path']}/{f.name}" for f in sorted((out / e["path"]).iterdir())
                  if f.is_file() and f.name not in e["files"].get("fp32", [])]  # fmt: skip
    (out / "sw.js").write_text(service_worker(out, files))
    report = {"models": [e["name"] for e in entries], "files": sizes(out)}
    for e in entries:  # what a browser downloads for a model (its int8 graphs and data files), raw and gzip -9
        mine = {k: v for k, v in report["files"].items() if k.startswith(e["path"] + "/") and
                not any(k.endswith(f) for f in e["files"].get("fp32", []))}  # fmt: skip
        report[e["name"]] = {k: sum(v[k] for v in mine.values()) for k in ("bytes", "gzip_bytes")}
    runtime = {k: v for k, v in report["files"].items() if k in ORT_FILES}
    report["runtime"] = {k: sum(v[k] for v in runtime.values()) for k in ("bytes", "gzip_bytes")}
    (out / "export_web.json").write_text(json.dumps(report, indent=2) + "\n")
    summary = {k: report[k] for k in ("runtime", *report["models"])}
    print(json.dumps(summary, indent=2))
    print(f"serve it: python -m http.server -d {out} --bind 127.0.0.1 8000  (then open http://127.0.0.1:8000/)")


if __name__ == "__main__":
    main()
