r"""Export a saved Pointer Sentinel-LSTM's decode step to ONNX, check it against PyTorch, and quantize it to int8.

    python examples/export_onnx.py pretrained/ptb-pointer-sentinel-lstm-2x200 onnx/ptb --int8 --test_file test.txt

OUT gets decode_step.onnx (with --int8 also decode_step.int8.onnx), the tokenizer and configuration files, and
export.json: the graph's inputs and outputs, the largest log-probability difference from PyTorch's decode step over
--check_steps steps, the file sizes and, with --test_file, the test perplexity of PyTorch, ONNX Runtime fp32 and
int8 over the same streams. examples/onnx_generate.py decodes from OUT with onnxruntime, numpy and OUT's tokenizer
(transformers without PyTorch).

The graph is one decode step, `decode_step` (modeling_pointer_sentinel.py): inputs are the token ids (B,), each
layer's hidden and cell state (B, H), and the pointer window as a ring (keys (B, L, D), ids (B, L), valid (B, L), slot
(), and with `config.oov_pointer` each key's c_i, context (B, L, D)), and with `config.oov_slots` each row's history,
oov_used (B,) (k, the slots it has used) and unk_count (B,) (its literal `<unk>`); outputs are log p (B, V + N), the
mixture's, and the same state after the step. N is `config.oov_slots`: ids V ... V+N-1 are placeholders for a text's
out-of-vocabulary words (the folder's tokenizer numbers them in order of first occurrence), which the pointer copies
and which take their share of `<unk>`'s vocabulary mass, as in the model's forward (`new_word`: a first occurrence,
V+k, and a used slot out of the window's reach score as forward's logits and loss score them). The batch size is
dynamic. The exporter is `torch.onnx.export(dynamo=True)`, which captures the step with torch.export: the step is plain
tensor operations (its LSTM cell is written out, where `nn.LSTM` is one opaque operator), so it exports whole; the
TorchScript exporter is deprecated.

With a speller (`config.speller_size`: the ids carry the text, each word outside the vocabulary spelled in bytes and
closed by `</w>`) the step is two graphs, the model's own `spelled_word_step` and `spelled_byte_step` (the arithmetic of
`spelled_decode_step`, whose Python bookkeeping, a row's word in progress and its slots, the runner keeps):
decode_step.onnx, the word step, takes the word's id (a vocabulary id, or V + k, its spelled word's slot) and its
spelling (B, K) and gives log p (B, V + 258) (words, then the first byte of a new or copied word) and the speller's
state; spell_step.onnx, a byte inside a word, takes the byte's id and that state and gives the next symbol's log p.
spell_start.npz holds the speller's state before the first word (started from a zero h_t, as forward starts). The
parity check then samples its steps (seeded) after a prompt with words the vocabulary lacks, so that it spells new
words and copies them, and --test_file also reports bits per byte. config.vocab_limit is not exported (generate's
fast step has none either). Quantization is ONNX Runtime's dynamic int8 (weights int8, activations quantized
per call) of the matrix products and the embedding lookup. The exporter's any/all (a bool mask cast to int64 and
reduced) are made bool reductions (`bool_reductions`). examples/export_web.py reuses `export` (with `window`: a byte
step over any number of window slots), `quantize_weights` (int8 weights read as float32, for ONNX Runtime Web) and
`fuse_shared_gemms`.
"""

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import ArgumentParser, check_ranges, describe_ranges, fail, load_saved_model  # noqa: E402

FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]


RANGES = [("--check_steps", lambda v: v >= 1, ">= 1"), ("--batch_size", lambda v: v >= 1, ">= 1"),
          ("--max_tokens", lambda v: v >= 1, ">= 1")]  # fmt: skip


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a saved model folder (save_pretrained / examples/train.py output)")
    p.add_argument("out", help="the folder to write")
    p.add_argument("--int8", action="store_true", help="also write decode_step.int8.onnx (dynamic int8)")
    p.add_argument("--check_steps", type=int, default=500, help="greedy steps of the parity check")
    p.add_argument("--test_file", type=Path, help="plain text: also measure the test perplexity of each graph")
    p.add_argument("--batch_size", type=int, default=10, help="streams for --test_file (evaluate.py's default)")
    p.add_argument("--max_tokens", type=int, help="score only the first N tokens of --test_file")
    describe_ranges(p, RANGES)
    args = p.parse_args(argv)
    check_ranges(p, args, RANGES)
    if not Path(args.folder).is_dir():
        p.error(f"{args.folder}: no such model folder (give a folder written by save_pretrained, e.g. pretrained/...)")
    if not (Path(args.folder) / "config.json").is_file():
        p.error(f"{args.folder}: not a model folder (no config.json)")
    if args.test_file is not None and not args.test_file.is_file():
        p.error(f"--test_file {args.test_file} is not a file")
    return args


if __name__ == "__main__":  # a mistaken command line fails here, before the imports below (torch: 8-40 s)
    parse_args()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from onnx_generate import SpelledSteps, run_step, session  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import modeling_pointer_sentinel  # noqa: E402,F401  (registers the Auto classes)
from modeling_pointer_sentinel import PointerSentinelCache  # noqa: E402
from modeling_pointer_sentinel.generation_pointer_sentinel import DecodeState, decode_state  # noqa: E402
from modeling_pointer_sentinel.modeling_pointer_sentinel import (  # noqa: E402
    SPELL_END,
    Placeholders,
    SpellState,
    decode_step,
    pack_weights,
    pointer_mixture,
    spell_state,
    spelled_byte_step,
    spelled_word_step,
)


class DecodeStepGraph(torch.nn.Module):
    """`decode_step` as a function of its state, for export: the state comes in and goes out as tensors."""

    def __init__(self, model):
        super().__init__()
        self.model, self.layers = model, len(model.model.layers)

    def forward(self, input_ids, *state):
        state = [t.clone() for t in state]  # decode_step updates its state in place; the graph returns a new one
        s, places = as_decode_state(self.model, state), Placeholders.of(self.model.config)
        # Packed inside the graph: the exporter then meets each parameter through its module, once, so a tied
        # embedding is one initializer (the runtime folds the packing's concatenations when it loads the file).
        log_p, _ = decode_step(self.model, pack_weights(self.model, input_first=False), s, input_ids, True)
        if self.model.pointer is None:  # the plain LSTM's step gives logits: normalise them here
            log_p = torch.log_softmax(log_p, -1)
            if places:  # forward's width, the new word's share on its columns: `pointer_mixture` with nothing to
                # copy (one empty slot, log attention -inf: ONNX Runtime's reductions over an empty axis give NaN)
                nothing = log_p.new_zeros(log_p.shape[0], 1)
                places = places._replace(used=s.used, unk_count=s.unk_count)
                log_p = pointer_mixture(log_p, nothing[:, 0], nothing - torch.inf, nothing.long(), places)
        return (log_p, *state_tensors(s))


def as_decode_state(model, state: list[torch.Tensor]) -> DecodeState:
    """The graph's state inputs, in `io_names`' order, as a DecodeState."""
    n = len(model.model.layers)
    history, window = (state[-2:], state[2 * n : -2]) if model.config.oov_slots else ([None, None], state[2 * n :])
    if model.pointer is None:
        window = [None, None, None, torch.zeros((), dtype=torch.long)]
    return DecodeState(state[:n], state[n : 2 * n], *window, *[None] * (5 - len(window)), *history)  # no context: None


# The speller's state between the graphs (`SpellState` less its Python rows): the word step writes it all, the byte
# step reads it all and moves the speller (the last five).
SPELL_NAMES = ["window_spellings", "copy_log_mass", "new_log_mass", "speller_hidden", "speller_cell", "prefix",
               "prefix_log_prob", "next_log_probs"]  # fmt: skip


class SpelledWordGraph(torch.nn.Module):
    """`spelled_word_step` as a function of its state: the word's id and spelling, the word state and the window's
    spellings in -> log p (B, V + 258), the word state and the whole speller state out. With `inspect` (a model with
    a pointer) also the pointer's view of the step (`INSPECT_NAMES`), for a page that shows it (export_web.py). With
    `held` a last input, `held_slots` (H,): the window slots the first byte's mixture reads, those whose ids are
    spelled words or any more (`_spelled_symbols`' `few`), rather than all L."""

    def __init__(self, model, inspect: bool = False, held: bool = False):
        super().__init__()
        self.model, self.inspect, self.held = model, inspect and model.pointer is not None, held

    def forward(self, input_ids, spelling, *state):
        state, held = ([t.clone() for t in state[:-1]], state[-1]) if self.held else ([t.clone() for t in state], False)
        s = as_decode_state(self.model, state[:-1])
        if s.keys is not None:  # room for the step's attention: the window's copies read it
            s = s._replace(attention=s.keys.new_zeros(s.ids.shape))
        spellings, B, S = state[-1], input_ids.shape[0], self.model.config.speller_size
        h = spellings.new_zeros((B, S), dtype=torch.float32)  # the rest is written by the step
        spell = SpellState(None, spellings, h.new_zeros(B, spellings.shape[1]), h.new_zeros(B), h, h.clone(),
                           spelling.clone(), h.new_zeros(B), h.new_zeros(B, SPELL_END + 2))  # fmt: skip
        log_p = spelled_word_step(self.model, pack_weights(self.model, input_first=False), s, spell, input_ids,
                                  spelling, few=held)  # fmt: skip
        if not self.inspect:
            return (log_p, *state_tensors(s), *spell[1:])
        # a over the window's ring (the step writes log a into the state) and g: the sentinel's softmax (and the
        # switch's a, g) sum to 1, so g is what the window leaves; the page's vocabulary, pointer and speller parts
        # follow from these, log p and the speller's outputs, as inspection.py splits them
        attention = s.attention.exp()
        return (log_p, *state_tensors(s), *spell[1:], attention, (1 - attention.sum(-1)).clamp(min=0))


class SpelledByteGraph(torch.nn.Module):
    """`spelled_byte_step` as a function of its state: the byte's id and the speller state in -> log p (B, V + 258)
    and the speller's moving part (`SPELL_NAMES`' last five) out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, *spell):
        spell = SpellState(None, *spell[:3], *(t.clone() for t in spell[3:]))
        log_p = spelled_byte_step(self.model, pack_weights(self.model, input_first=False), spell,
                                  input_ids - self.model.config.vocab_size, few=False)  # fmt: skip
        return (log_p, *spell[4:])


# The word graph's extra outputs with `inspect`: the attention a (B, L) over the window's ring and the gate g (B,).
INSPECT_NAMES = ["attention", "gate"]


def spell_io_names(model, inspect: bool = False, held: bool = False) -> tuple[list, list, list, list]:
    """The word graph's inputs and outputs, then the byte graph's (names)."""
    state = io_names(model)[0][1:]
    word_in = ["input_ids", "spelling", *state, SPELL_NAMES[0]] + (["held_slots"] if held else [])
    word_out = ["log_probs", *(f"{s}.out" for s in state), *(f"{s}.out" for s in SPELL_NAMES)]
    word_out += INSPECT_NAMES if inspect and model.pointer is not None else []
    return word_in, word_out, ["input_ids", *SPELL_NAMES], ["log_probs", *(f"{s}.out" for s in SPELL_NAMES[3:])]


def empty_spell_state(model, batch: int) -> list[torch.Tensor]:
    """The speller's state before the first token (`SPELL_NAMES`' order): `spell_state` of forward's empty cache (the
    speller started from a zero h_t, nothing to copy), each row alike."""
    cache = PointerSentinelCache()
    with torch.no_grad():
        model(torch.zeros(1, 1, dtype=torch.long), attention_mask=torch.zeros(1, 1), past_key_values=cache)
        one = spell_state(model, pack_weights(model, input_first=False), cache)
    return [t.expand(batch, *t.shape[1:]).clone() for t in one[1:]]


def state_tensors(s: DecodeState) -> list[torch.Tensor]:
    """A DecodeState as the graph's state inputs and outputs, in `io_names`' order."""
    window = [s.keys, s.ids, s.valid, s.slot] if s.keys is not None else []
    history = [s.used, s.unk_count] if s.used is not None else []
    return [*s.hidden, *s.cell, *window] + ([s.context] if s.context is not None else []) + history


def io_names(model) -> tuple[list[str], list[str]]:
    n = len(model.model.layers)
    state = [f"hidden.{i}" for i in range(n)] + [f"cell.{i}" for i in range(n)]
    if model.pointer is not None:
        state += ["window_keys", "window_ids", "window_valid", "window_slot"]
        state += ["window_context"] if model.config.oov_pointer else []
    state += ["oov_used", "unk_count"] if model.config.oov_slots else []
    return ["input_ids", *state], ["log_probs", *(f"{s}.out" for s in state)]


def empty_state(model, batch: int) -> list[torch.Tensor]:
    """The state before the first token: zeros, an empty window, slot 0 (what forward starts from)."""
    cache = PointerSentinelCache()
    with torch.no_grad():
        model(torch.zeros(batch, 1, dtype=torch.long), attention_mask=torch.zeros(batch, 1), past_key_values=cache)
    return state_tensors(decode_state(cache))  # a fully padded call leaves the zero state and an empty window


def export(model, path: Path, inspect: bool = False, window: bool = False):
    """decode_step.onnx at `path`; with a speller the word step there and the byte step beside it (`spell_path`), the
    word step with the pointer's view (`INSPECT_NAMES`) too if `inspect`. With `window` the byte step's window (its
    `window_spellings` and `copy_log_mass`) has a dynamic length, `window`: a runner may pass only the slots that hold
    a word to copy (those whose copy mass is above -inf; at least one slot), which gives the same log p, as the model's
    own eager step reads only those slots (`_spelled_symbols`' `few`); and the word step reads only the slots given
    in its `held_slots` (those whose ids are spelled words, the step's own included; at least one slot)."""
    batch = torch.export.Dim("batch", min=1)
    slots = torch.export.Dim("window", min=1) if window else None
    state = empty_state(model, 2)
    if not model.config.speller_size:
        graphs = [(DecodeStepGraph(model), path, (torch.tensor([1, 2]), *state), *io_names(model))]
    else:
        word_in, word_out, byte_in, byte_out = spell_io_names(model, inspect, held=window)
        spell, V, L = empty_spell_state(model, 2), model.config.vocab_size, model.config.pointer_window
        held = [torch.arange(2) % L] if window else []
        graphs = [(SpelledWordGraph(model, inspect, window), path,
                   (torch.tensor([1, V]), spell[5].clone(), *state, spell[0], *held), word_in, word_out),
                  (SpelledByteGraph(model), spell_path(path), (torch.tensor([V + 65, V + 66]), *spell), byte_in,
                   byte_out)]  # fmt: skip
    for graph, file, args, inputs, outputs in graphs:
        lead = 2 if isinstance(graph, SpelledWordGraph) else 1  # the arguments before forward's *state
        shapes = [None if t.dim() == 0 else {0: batch} for t in args[lead:]]
        if slots is not None and isinstance(graph, SpelledByteGraph):  # SPELL_NAMES' first two: the window's slots
            shapes[:2] = [{0: batch, 1: slots}] * 2
        if slots is not None and isinstance(graph, SpelledWordGraph):  # held_slots (H,)
            shapes[-1] = {0: torch.export.Dim("held", min=1)}
        shapes = (*[{0: batch}] * lead, tuple(shapes))
        table = {torch.ops.aten.logaddexp.default: logaddexp}
        with torch.no_grad():  # the decoding paths (`pointer_mixture`'s scatter form), not training's
            program = torch.onnx.export(graph.eval(), args, dynamo=True, input_names=inputs, output_names=outputs,
                                        dynamic_shapes=shapes, optimize=True, verbose=False,
                                        custom_translation_table=table)  # fmt: skip
        program.save(str(file))
        bool_reductions(file)
    if model.config.speller_size:  # the state before the first token, for the runner (which has no PyTorch)
        start = empty_spell_state(model, 1)
        np.savez(path.parent / "spell_start.npz", **{n: t.numpy() for n, t in zip(SPELL_NAMES, start, strict=True)})


def readers(graph) -> dict:
    """Each tensor name of an ONNX graph -> the (node, input index) pairs that read it."""
    out = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            out.setdefault(name, []).append((node, k))
    return out


def bool_reductions(path: Path) -> int:
    """The exporter's `any` and `all` (a bool tensor cast to int64, ReduceMax or ReduceMin, cast back to bool) as one
    ReduceMax or ReduceMin of the bool tensor (opset 20 reduces bools): the same values, without writing the mask as
    int64 (the spelled mixture's (258, L) mask is the word step's largest such). Rewrites the file in place; returns
    how many it replaced."""
    import onnx

    model = onnx.load(str(path))
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 20:
        return 0
    graph = model.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in [*onnx.shape_inference.infer_shapes(model).graph.value_info, *graph.input]}  # fmt: skip
    users = {name: [node for node, _ in read] for name, read in readers(graph).items()}
    outputs, done = {o.name for o in graph.output}, 0
    for cast in list(graph.node):
        if cast.op_type != "Cast" or types.get(cast.input[0]) != onnx.TensorProto.BOOL:
            continue
        (reduce, *more) = users.get(cast.output[0], [None])
        if more or reduce is None or reduce.op_type not in ("ReduceMax", "ReduceMin") or cast.output[0] in outputs:
            continue
        back = users.get(reduce.output[0], [])
        to_bool = [n.op_type == "Cast" and onnx.helper.get_node_attr_value(n, "to") == onnx.TensorProto.BOOL
                   for n in back]  # fmt: skip
        if not back or not all(to_bool) or reduce.output[0] in outputs:
            continue
        reduce.input[0] = cast.input[0]  # the reduction of the bools themselves, named as the cast back was
        for n in back[1:]:
            n.op_type, n.input[0] = "Identity", back[0].output[0]
            del n.attribute[:]
        reduce.output[0] = back[0].output[0]
        graph.node.remove(cast)
        graph.node.remove(back[0])
        done += 1
    onnx.save(model, str(path))
    return done


def fuse_shared_gemms(model) -> int:
    """Gemms that read the same input (x W_i^T + b_i, each W_i a weight, an initializer or its DequantizeLinear) as
    one Gemm over the rows of all the W_i and a Split of its columns: the word step's last hidden state feeds the
    output layer, the pointer's queries and the speller's start, one product instead of six. The same values (each
    column is the same dot product); the runtime joins the weights once, when it folds constants at load. In place
    on an ONNX ModelProto; returns how many Gemms it joined."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    made = {o: n for n in graph.node for o in n.output}

    def rows(name):  # a weight's rows (its output columns), or None if it is no constant
        node = made.get(name)
        if node is not None and node.op_type == "DequantizeLinear" and all(i in inits for i in node.input):
            name = node.input[0]
        return inits[name].dims[0] if name in inits and len(inits[name].dims) == 2 else None

    def plain(node):
        a = {x.name: (x.i if x.type == onnx.AttributeProto.INT else x.f) for x in node.attribute}
        return (a.get("transA", 0) == 0 and a.get("transB", 0) == 1 and a.get("alpha", 1.0) == 1.0
                and a.get("beta", 1.0) == 1.0 and rows(node.input[1]) is not None
                and (len(node.input) < 3 or node.input[2] in inits))  # fmt: skip

    groups = {}
    for node in graph.node:
        if node.op_type == "Gemm" and plain(node):
            groups.setdefault(node.input[0], []).append(node)
    joined = 0
    for x, gemms in groups.items():
        if len(gemms) < 2:
            continue
        sizes = [rows(g.input[1]) for g in gemms]
        base = f"{gemms[0].name or gemms[0].output[0]}_joined"
        biases = []
        for g, n in zip(gemms, sizes, strict=True):
            if len(g.input) < 3 or not g.input[2]:
                graph.initializer.append(numpy_helper.from_array(np.zeros(n, np.float32), f"{base}_zero_{len(biases)}"))
                biases.append(f"{base}_zero_{len(biases)}")
            else:
                biases.append(g.input[2])
        graph.initializer.append(numpy_helper.from_array(np.array(sizes, np.int64), f"{base}_sizes"))
        new = [helper.make_node("Concat", [g.input[1] for g in gemms], [f"{base}_weight"], axis=0),
               helper.make_node("Concat", biases, [f"{base}_bias"], axis=0),
               helper.make_node("Gemm", [x, f"{base}_weight", f"{base}_bias"], [base], transB=1),
               helper.make_node("Split", [base, f"{base}_sizes"], [g.output[0] for g in gemms], axis=-1)]  # fmt: skip
        at = min(list(graph.node).index(g) for g in gemms)
        for g in gemms:
            graph.node.remove(g)
        for offset, node in enumerate(new):
            graph.node.insert(at + offset, node)
        joined += len(gemms)
    return joined


def logaddexp(a, b):
    """torch.logaddexp for the exporter, as log(e^a + e^b) = max + log(1 + e^-|a - b|). The exporter's own is
    log(exp(a) + exp(b)), which is -inf below log(float32's least normal) (-87): a spelled word's prefix reaches it in
    a few dozen bytes. Two -inf give -inf (no inf - inf)."""
    from onnxscript import opset18 as op

    gap = op.Where(op.Equal(a, b), op.CastLike(0.0, a), op.Neg(op.Abs(op.Sub(a, b))))
    return op.Add(op.Max(a, b), op.Log(op.Add(op.CastLike(1.0, a), op.Exp(gap))))


def spell_path(path: Path) -> Path:
    """The byte step's file beside the word step's: decode_step[.int8].onnx -> spell_step[.int8].onnx."""
    return path.with_name(path.name.replace("decode_step", "spell_step"))


def fold_constants(model):
    """Replace each node whose inputs are all initializers (the adaptive softmax's head matrix, a slice of the tied
    embedding joined to the cluster rows) by its value, so the quantizer sees a constant matrix to quantize."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in list(graph.node):
        if node.op_type in ("Slice", "Concat", "Transpose") and all(i in values for i in node.input if i):
            single = onnx.helper.make_model(
                onnx.helper.make_graph(
                    [node],
                    "fold",
                    [],
                    [onnx.helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output],
                )
            )
            result = ReferenceEvaluator(single).run(None, {i: values[i] for i in node.input if i})
            for name, value in zip(node.output, result, strict=True):
                values[name] = value
                graph.initializer.append(numpy_helper.from_array(value, name))
            graph.node.remove(node)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    for init in [i for i in graph.initializer if i.name not in used]:
        graph.initializer.remove(init)


def quantize(src: Path, dst: Path):
    """int8 weights: ONNX Runtime's dynamic quantization of every matrix product (per-tensor scales, activations
    quantized at each call), and the embedding lookup reading int8 rows. A tied embedding that is also the output
    matrix reads that matrix's int8 copy (`NAME_Transposed_quantized`, gathered along its columns); any other
    embedding gets its own symmetric per-tensor int8 table. Either way no fp32 table stays in the file."""
    import onnx
    from onnx import helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folded = onnx.load(str(src))
    fold_constants(folded)
    onnx.save(folded, str(dst))
    quantize_dynamic(str(dst), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Gemm"])
    graph = (m := onnx.load(str(dst))).graph
    initializers = {i.name: i for i in graph.initializer}
    for node in [n for n in graph.node if n.op_type == "Gather" and n.input[0] in initializers]:
        table, name = node.input[0], node.output[0]
        at = list(graph.node).index(node)
        if f"{table}_Transposed_quantized" in initializers:
            q, scale, zero = (f"{table}_Transposed_{s}" for s in ("quantized", "scale", "zero_point"))
            steps = [helper.make_node("Gather", [q, node.input[1]], [f"{name}_q_t"], axis=1),
                     helper.make_node("Transpose", [f"{name}_q_t"], [f"{name}_q"], perm=[1, 0])]  # fmt: skip
        else:
            weights = numpy_helper.to_array(initializers[table])
            step = float(np.abs(weights).max()) / 127 or 1.0
            q, scale, zero = f"{table}_int8", f"{table}_int8_scale", f"{table}_int8_zero_point"
            graph.initializer.extend([
                numpy_helper.from_array(np.clip(np.round(weights / step), -127, 127).astype(np.int8), q),
                numpy_helper.from_array(np.array(step, np.float32), scale),
                numpy_helper.from_array(np.array(0, np.int8), zero),
            ])  # fmt: skip
            steps = [helper.make_node("Gather", [q, node.input[1]], [f"{name}_q"], axis=0)]
        steps.append(helper.make_node("DequantizeLinear", [f"{name}_q", scale, zero], [name]))
        graph.node.remove(node)
        for offset, new in enumerate(steps):
            graph.node.insert(at + offset, new)
        if not any(table in n.input for n in graph.node):
            graph.initializer.remove(initializers[table])
    onnx.save(m, str(dst))


def quantize_weights(src: Path, dst: Path, threshold: int = 4096):
    """Weight-only int8, for a runtime whose float32 kernels beat its int8 ones (ONNX Runtime Web's wasm build: its
    int8 matrix product is about half as fast as its float32 one there): each float32 matrix of `threshold` elements
    or more is stored as int8 with one scale, the one `quantize` gives a weight (symmetric, max |W| / 127), and read
    through DequantizeLinear, which ONNX Runtime folds into the float32 matrix when the session loads with the
    session config entry `session.disable_quant_qdq` = 1 (without it, it dequantizes at every call). A lookup (Gather
    of rows: the embeddings) dequantizes only the rows it reads. Each matrix is quantized where it is stored, before
    the step joins or slices it, so a tied matrix (an adaptive softmax head's rows of the embedding) is stored once.
    The products are float32 on the int8-rounded weights: no activation is quantized, unlike `quantize`."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    users = readers(graph)
    front = []  # the dequantized matrices, ahead of every node
    for init in list(graph.initializer):
        w = numpy_helper.to_array(init)
        if w.dtype != np.float32 or w.ndim != 2 or w.size < threshold or init.name not in users:
            continue
        name, step = init.name, float(np.abs(w).max()) / 127 or 1.0
        q, scale = f"{name}_int8", f"{name}_int8_scale"
        graph.initializer.remove(init)
        graph.initializer.extend([numpy_helper.from_array(np.clip(np.round(w / step), -127, 127).astype(np.int8), q),
                                  numpy_helper.from_array(np.array(step, np.float32), scale)])  # fmt: skip
        rest = False
        for node, k in users[name]:
            if node.op_type != "Gather" or k != 0 or next((a.i for a in node.attribute if a.name == "axis"), 0):
                rest = True
                continue
            out, at = node.output[0], list(graph.node).index(node)
            graph.node.remove(node)
            graph.node.insert(at, helper.make_node("Gather", [q, node.input[1]], [f"{out}_int8"], axis=0))
            graph.node.insert(at + 1, helper.make_node("DequantizeLinear", [f"{out}_int8", scale], [out]))
        if rest:
            front.append(helper.make_node("DequantizeLinear", [q, scale], [name]))
    for node in reversed(front):
        graph.node.insert(0, node)
    onnx.save(model, str(dst))


def tokenizer_code(folder: Path) -> list[str]:
    """The code files of the tokenizer and of the configuration, named in tokenizer_config.json's and config.json's
    auto_map (both are remote code): the runner loads the tokenizer from the exported folder, and AutoTokenizer reads
    config.json through its AutoConfig class first (without it, transformers falls back to a bare config and warns
    that a `pointer_sentinel_lstm` checkpoint instantiates a model of another type)."""
    names = set()
    for file, key in (("tokenizer_config.json", "AutoTokenizer"), ("config.json", "AutoConfig")):
        path = folder / file
        auto = json.loads(path.read_text()).get("auto_map", {}) if path.is_file() else {}
        classes = auto.get(key) or []
        names |= {f"{c.split('.')[0]}.py" for c in (classes if isinstance(classes, list) else [classes]) if c}
    return sorted(names)


def parity_prompt(model, tokenizer) -> list[int]:
    """The parity check's prompt: a news phrase and, with placeholders, two of them among the last words, so the
    steps after it mix copies of placeholders and split `<unk>`'s share; with a speller, two made-up names spelled in
    it, one of them twice, so the steps after it can copy them."""
    if model.config.speller_size:
        text = "the company said that Zorblaxian met Quentrovia . later Zorblaxian said"
        return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]
    prompt = [int(i) for i in tokenizer("the company said that the company", add_special_tokens=False)["input_ids"]]
    prompt = [i for i in prompt if i < model.config.vocab_size] or [1]
    if places := Placeholders.of(model.config):
        prompt += [places.first, prompt[0], places.first + 1, places.first]
    return prompt


def parity(model, sess, steps: int, prompt: list[int]) -> float:
    """Largest |log p_onnx - log p_torch| over `steps` greedy steps after the prompt, both from the empty state."""
    names = io_names(model)[0][1:]
    state_t = empty_state(model, 1)
    state_o = [t.numpy() for t in state_t]
    graph, worst = DecodeStepGraph(model).eval(), 0.0
    tokens = [*prompt, *([None] * steps)]
    with torch.no_grad():
        for i in tqdm(range(len(tokens) - 1), desc="parity", leave=False):
            ids = torch.tensor([tokens[i]])
            want, *state_t = graph(ids, *state_t)
            got, state_o = run_step(sess, names, ids.numpy(), state_o)
            finite = torch.isfinite(want)
            assert torch.equal(finite, torch.from_numpy(np.isfinite(got))), "ONNX and PyTorch differ in -inf entries"
            worst = max(worst, float((torch.from_numpy(got) - want)[finite].abs().max()))
            if tokens[i + 1] is None:
                tokens[i + 1] = int(want.argmax())
    return worst


def spelled_runner(model, path: Path) -> SpelledSteps:
    """The runner's two-graph stepper on the word step at `path` and the byte step beside it."""
    start = dict(np.load(path.parent / "spell_start.npz"))
    return SpelledSteps(session(path), session(spell_path(path)), model.config.vocab_size, model.config.oov_slots,
                        start)  # fmt: skip


def spelled_parity(model, runner: SpelledSteps, steps: int, prompt: list[int], seed: int = 0) -> dict:
    """Largest |log p_onnx - log p_torch| over the prompt and `steps` steps sampled after it (numpy, seeded, from
    PyTorch's log p, generation_config's suppressed tokens left out): PyTorch's side is generate's own, forward on the
    first token and `spelled_decode_step` after it. Also counts the words the samples spelled and those of them that
    repeat a spelled word before them."""
    suppress = list(model.generation_config.suppress_tokens or [])
    rng, tokens, worst, V = np.random.default_rng(seed), list(prompt), 0.0, model.config.vocab_size
    cache, row = PointerSentinelCache(), runner.empty()
    with torch.no_grad():
        want = model(torch.tensor([tokens[:1]]), past_key_values=cache).logits[:, -1]
        state, spell = model._spell_state(cache, decode_state(cache))
        weights = model._packed_weights()
        for i in tqdm(range(len(prompt) + steps - 1), desc="parity", leave=False):
            if i:
                want = model._spelled_step(weights, state, spell, tokens[i])
            got = runner.step(tokens[i], row)
            # forward (the first token) writes a column that cannot occur as the lowest float, the steps as -inf
            lowest = torch.finfo(want.dtype).min
            want, got = want.clamp_min(lowest), torch.from_numpy(got).clamp_min(lowest)
            finite = want > lowest
            assert torch.equal(finite, got > lowest), "ONNX and PyTorch differ in the columns that cannot occur"
            worst = max(worst, float((got - want)[finite].abs().max()))
            if i + 1 == len(tokens):
                p = want[0].double().exp().numpy()
                p[suppress] = 0
                tokens.append(int(rng.choice(p.shape[0], p=p / p.sum())))
    seen, word, spelled, repeats = set(), [], 0, 0
    for i, t in enumerate(tokens):
        if t - V == SPELL_END:
            sampled = i >= len(prompt)  # a word the samples closed
            spelled, repeats = spelled + sampled, repeats + (sampled and tuple(word) in seen)
            seen.add(tuple(word))
            word = []
        elif t >= V:
            word.append(t)
    return {"max_abs_log_prob_diff": worst, "spelled_words_sampled": spelled, "of_which_repeats": repeats}


def stream_log_probs(step, streams: torch.Tensor, state) -> float:
    """Sum of log p(target) over (B, N) streams, one step at a time; `step(ids, state) -> (log_probs, state)`."""
    total = 0.0
    rows = np.arange(streams.shape[0])
    for t in tqdm(range(streams.shape[1] - 1), desc="score", leave=False):
        log_p, state = step(streams[:, t].numpy(), state)
        total += float(log_p[rows, streams[:, t + 1].numpy()].sum())
    return total


def perplexities(model, paths: dict, test_file: Path, tokenizer, batch_size: int, max_tokens: int | None) -> dict:
    from modeling_pointer_sentinel.training import encode_lines, shard_streams

    ids = encode_lines(tokenizer, test_file.read_text(encoding="utf-8").splitlines())
    if max_tokens:
        ids = ids[: max_tokens + batch_size]
    streams = shard_streams(ids, batch_size)
    n = streams.shape[0] * (streams.shape[1] - 1)
    if model.config.speller_size:
        return spelled_perplexities(model, paths, streams, tokenizer)
    graph, names = DecodeStepGraph(model).eval(), io_names(model)[0][1:]

    def torch_step(ids, state):
        with torch.no_grad():
            log_p, *state = graph(torch.from_numpy(ids), *state)
        return log_p.numpy(), state

    result = {"targets": n, "batch_size": batch_size}
    result["pytorch"] = float(np.exp(-stream_log_probs(torch_step, streams, empty_state(model, batch_size)) / n))
    for name, path in paths.items():
        sess = session(path)
        state = [t.numpy() for t in empty_state(model, batch_size)]
        total = stream_log_probs(lambda i, s, sess=sess: run_step(sess, names, i, s), streams, state)
        result[name] = float(np.exp(-total / n))
    return result


def spelled_perplexities(model, paths: dict, streams: torch.Tensor, tokenizer, chunk: int = 100) -> dict:
    """Per-id perplexity and bits per byte (over the UTF-8 bytes of the text the targets spell) of PyTorch's forward
    (in chunks, with the cache) and of each graph (its runner, row by row)."""
    n, targets = streams.shape[0] * (streams.shape[1] - 1), streams[:, 1:]
    text_bytes = sum(len(tokenizer.decode(row).encode()) for row in targets.tolist())
    cache, total = PointerSentinelCache(), 0.0
    with torch.no_grad():
        for start in range(0, streams.shape[1] - 1, chunk):
            x = streams[:, start : min(start + chunk, streams.shape[1] - 1)]
            log_p = model(x, past_key_values=cache).logits
            total += float(log_p.gather(-1, targets[:, start : start + x.shape[1], None]).sum())
    result = {"targets": n, "batch_size": streams.shape[0], "text_bytes": text_bytes}

    def add(name, total):
        result[name], result[f"{name}_bits_per_byte"] = float(np.exp(-total / n)), -total / np.log(2) / text_bytes

    add("pytorch", total)
    for name, path in paths.items():
        runner, total = spelled_runner(model, path), 0.0
        for row in tqdm(streams.tolist(), desc=f"score {name}", leave=False):
            state = runner.empty()
            for t in range(len(row) - 1):
                total += float(runner.step(row[t], state)[0, row[t + 1]])
        add(name, total)
    return result


def decode_speed(model, path: Path, steps: int = 300) -> float | dict:
    """ms per step at batch 1 on one thread (the steady state, after a warm-up); with a speller, of the word step and
    of the byte step, on the same word and byte again and again."""
    if model.config.speller_size:
        runner, V, times = spelled_runner(model, path), model.config.vocab_size, {}
        state = runner.empty()
        for name, token in (("word_step", 1), ("byte_step", V + ord("a"))):
            for _ in range(20):
                runner.step(token, state)
            start = time.perf_counter()
            for _ in range(steps):
                runner.step(token, state)
            times[name] = (time.perf_counter() - start) / steps * 1e3
            state["words"].word = []  # the bytes of no word: the next word step is well formed
        return times
    sess, names = session(path), io_names(model)[0][1:]
    state = [t.numpy() for t in empty_state(model, 1)]
    ids = np.array([1])
    for _ in range(20):
        _, state = run_step(sess, names, ids, state)
    start = time.perf_counter()
    for _ in range(steps):
        log_p, state = run_step(sess, names, ids, state)
        ids = log_p.argmax(-1)
    return (time.perf_counter() - start) / steps * 1e3


def main(argv=None):
    args = parse_args(argv)
    try:
        import onnxruntime  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        fail(f"{e.name} is not installed: pip install 'modeling-pointer-sentinel[onnx]'")
    torch.set_num_threads(1)
    tokenizer, model = load_saved_model(args.folder)
    if model.config.speller_size and model.config.vocab_limit:
        fail(f"{args.folder}: config.vocab_limit={model.config.vocab_limit} is not exported with the speller")
    if model.config.added_tokens:  # the exported step reads ids in the model's numbering, not the tokenizer's
        fail(f"{args.folder}: a model with added tokens (config.added_tokens) is not exported")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in [*FILES, *tokenizer_code(Path(args.folder))]:
        if (Path(args.folder) / name).is_file():
            shutil.copy(Path(args.folder) / name, out / name)
    paths = {"onnx_fp32": out / "decode_step.onnx"}
    export(model, paths["onnx_fp32"])
    if args.int8:
        paths["onnx_int8"] = out / "decode_step.int8.onnx"
        quantize(paths["onnx_fp32"], paths["onnx_int8"])
        if model.config.speller_size:
            quantize(spell_path(paths["onnx_fp32"]), spell_path(paths["onnx_int8"]))
    inputs, outputs = io_names(model)
    if model.config.speller_size:
        word_in, word_out, byte_in, byte_out = spell_io_names(model)
        inputs, outputs = {"word_step": word_in, "byte_step": byte_in}, {"word_step": word_out, "byte_step": byte_out}
    prompt = parity_prompt(model, tokenizer)
    if model.config.speller_size:  # sampled steps, so that new words are spelled and copied
        check = spelled_parity(model, spelled_runner(model, paths["onnx_fp32"]), args.check_steps, prompt)
    else:
        check = {"max_abs_log_prob_diff": parity(model, session(paths["onnx_fp32"]), args.check_steps, prompt)}
    report = {
        "source": str(args.folder),
        "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}",
        "inputs": inputs,
        "outputs": outputs,
        "parity": {"steps": args.check_steps, **check},
        "file_bytes": {k: sum(f.stat().st_size for f in {p, spell_path(p)} if f.is_file()) for k, p in paths.items()},
        "ms_per_step_batch1_thread1": {k: decode_speed(model, p) for k, p in paths.items()},
    }
    if args.int8 and model.config.speller_size:
        int8 = spelled_parity(model, spelled_runner(model, paths["onnx_int8"]), 50, prompt)["max_abs_log_prob_diff"]
        report["parity"]["int8_max_abs_log_prob_diff"] = int8
    elif args.int8:
        report["parity"]["int8_max_abs_log_prob_diff"] = parity(model, session(paths["onnx_int8"]), 50, prompt)
    if args.test_file is not None:
        report["test_perplexity"] = perplexities(model, paths, args.test_file, tokenizer, args.batch_size,
                                                 args.max_tokens)  # fmt: skip
        report["test_perplexity"]["file"] = args.test_file.name
    (out / "export.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
