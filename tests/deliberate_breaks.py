"""Deliberate breaks: each entry changes one behaviour of the package in a scratch copy of the committed HEAD, then runs
the tests that guard it (the model tests unless the entry names its own); every break must make at least one of them fail. Run after changing a test or the behaviour it guards:

    python tests/deliberate_breaks.py            # about 6 minutes on 2 CPU cores; one JSON line per break
    python tests/deliberate_breaks.py cache gate # only the breaks whose name contains one of these words

Exits 1 if any break passes the suite. Not collected by pytest (it runs the suite itself).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]

M = "modeling_pointer_sentinel/modeling_pointer_sentinel.py"
C = "modeling_pointer_sentinel/configuration_pointer_sentinel.py"
G = "examples/generate.py"
T = "modeling_pointer_sentinel/training.py"
R = "benchmarks/run.py"
MUTS = [
    (
        "zoneout keeps with 1-p",
        M,
        "dtype=h.dtype, device=h.device).bernoulli_(p)",
        "dtype=h.dtype, device=h.device).bernoulli_(1 - p)",
    ),
    ("weight drop removed", M, "return F.dropout(w_hh, p, training) if p else w_hh", "return w_hh"),
    (
        "locked dropout mask per time step",
        M,
        "mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1 - p) / (1 - p)",
        "mask = x.new_empty(x.shape).bernoulli_(1 - p) / (1 - p)",
    ),
    (
        "locked dropout unscaled",
        M,
        "mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1 - p) / (1 - p)",
        "mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1 - p)",
    ),
    (
        "pointer mass to the next token",
        M,
        "return Pointer(log_gate, log_attention, sliding_window(key_ids, L))",
        "return Pointer(log_gate, log_attention, sliding_window(torch.roll(key_ids, -1, 1), L))",
    ),
    (
        "embedding dropout per element",
        M,
        "return weight * weight.new_empty(weight.shape[0], 1).bernoulli_(1 - p) / (1 - p)",
        "return weight * weight.new_empty(weight.shape).bernoulli_(1 - p) / (1 - p)",
    ),
    ("zoneout eval expectation dropped", M, "if keep is not None else (p, p)", "if keep is not None else (0.0, 0.0)"),
    (
        "zoneout h and c share one mask",
        M,
        "keep_h, keep_c = (keep[0, t], keep[1, t])",
        "keep_h, keep_c = (keep[0, t], keep[0, t])",
    ),
    (
        "hidden/output dropout swapped",
        M,
        "cfg.output_dropout if last else cfg.hidden_dropout",
        "cfg.hidden_dropout if last else cfg.output_dropout",
    ),
    ("reorder_cache a no-op", M, "return self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))", "return self"),
    (
        "mixture grad path: old scatter_add of (mixed - before)",
        M,
        "return log_p.scatter(-1, window_ids, torch.where(first, mixed, mixed.detach()))",
        "before = log_p.gather(-1, window_ids)\n    return log_p.scatter_add(-1, window_ids, torch.where(first, mixed - before, 0))",
    ),
    ("mixture grad counted for every copy", M, "torch.where(first, mixed, mixed.detach())", "mixed"),
    (
        "right padding evicts real positions",
        M,
        "if mask is None:  # every new position is real",
        "if True:  # every new position is real",
    ),
    (
        "labels win over shift_labels",
        M,
        "if labels is not None and shift_labels is None:\n            shift_labels = F.pad",
        "if labels is not None:\n            shift_labels = F.pad",
    ),
    (
        "Trainer predictions carry extra outputs",
        C,
        '"past_key_values", "hidden_states", "vocab_logits", "gate", "pointer_attention",',
        '"past_key_values", "hidden_states",',
    ),
    (
        "base model load report not silenced",
        M,
        '_keys_to_ignore_on_load_unexpected = [r"^pointer\\.", r"^lm_head\\."]',
        "_keys_to_ignore_on_load_unexpected = None",
    ),
    ("labels range unchecked", M, '_check_ids("labels", labels, self.config.vocab_size, allow_ignore=True)', "pass"),
    ("damaged weights: raw traceback", M, 'if type(e).__name__ != "SafetensorError":', "if True:"),
    (
        "report logits built in training",
        M,
        "if self.training and loss is not None:\n            logits = vocab_logits = None",
        "if False:\n            logits = vocab_logits = None",
    ),
    (
        "pointer_mix via generation config copy",
        M,
        'kwargs["pointer_stash"] = PointerStash(mix=pointer_mix)',
        'import copy\n            kwargs["generation_config"] = copy.deepcopy(kwargs.get("generation_config") or self.generation_config)\n            kwargs["generation_config"].pointer_mix = pointer_mix\n            kwargs["pointer_stash"] = PointerStash(mix=pointer_mix)',
    ),
    ("split_state_at unchecked", M, "if split_state_at is not None and not 0 < split_state_at <= T:", "if False:"),
    ("mask width unchecked", M, "mask.shape[1] not in (T, seen + T)", "mask.shape[1] < T"),
    ("clifix: unknown config key silent", C, "        warn_unknown_keys(self, kwargs)\n", "", ["tests/test_hf_fit.py"]),
    (
        "clifix: config warns on keys transformers writes",
        C,
        " - TRANSFORMERS_KEYS - GENERATION_KEYS",
        " - GENERATION_KEYS",
        ["tests/test_hf_fit.py"],
    ),
    (
        "clifix: generate max_new_tokens unchecked",
        G,
        '("max_new_tokens", args.max_new_tokens >= 1, ">= 1")',
        '("max_new_tokens", True, ">= 1")',
        ["tests/test_cli.py"],
    ),
    ("clifix: generate top_p upper bound unchecked", G, "0 < args.top_p <= 1", "0 < args.top_p", ["tests/test_cli.py"]),
    (
        "clifix: show_gate prints 1 - g",
        G,
        'print(f"  {word:>15s}  from_pointer={s:.3f}  g={g:.3f}")',
        'print(f"  {word:>15s}  from_pointer={1 - g:.3f}  g={g:.3f}")',
        ["tests/test_cli.py"],
    ),
    (
        "clifix: pointer share window shifted by one",
        G,
        "F.pad(context, (L - 1, 0), value=-1)",
        "F.pad(context, (L, 0), value=-1)[:, :-1]",
        ["tests/test_cli.py"],
    ),
    (
        "clifix: group_lines without encode_lines (no <eos>)",
        T,
        "ids = encode_lines(tokenizer, lines)",
        'ids = torch.tensor([i for line in lines for i in tokenizer(line)["input_ids"]])',
        ["tests/test_hf_fit.py"],
    ),
    (
        "clifix: group_lines masks <eos> labels",
        T,
        '"labels": blocks.copy()',
        '"labels": blocks * (blocks != tokenizer.eos_token_id) - 100 * (blocks == tokenizer.eos_token_id)',
        ["tests/test_hf_fit.py"],
    ),
    (
        "clifix: benchmark A column from side medians",
        R,
        "a=a[mid],",
        "a=statistics.median(a),",
        ["tests/test_benchmarks.py"],
    ),
    (
        "clifix: benchmark target met on the median alone",
        R,
        '"met" if lo >= bound',
        '"met" if summary["ratio"] >= bound',
        ["tests/test_benchmarks.py"],
    ),
    (
        "clifix: benchmark --write overwrites BENCHMARKS.md",
        R,
        'if out == ROOT / "BENCHMARKS.md" or (',
        "if False and (",
        ["tests/test_benchmarks.py"],
    ),
]
# An entry is (name, file, code, broken code) and may end with the test files that guard it; the default is TESTS.
TESTS = ["tests/test_modeling.py", "tests/test_regularisers.py", "tests/test_hf_fit.py"]


def main(words=()):
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp) / "copy"
        subprocess.run(f"git -C {ROOT} archive --format=tar HEAD | tar -x -C {tmp} --one-top-level=copy", shell=True,
                       check=True)  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(work), "OMP_NUM_THREADS": "1"}
        for name, f, old, new, *tests in MUTS:
            if words and not any(w in name for w in words):
                continue
            path = work / f
            original = path.read_text()
            assert original.count(old) == 1, f"{name}: the code to break is not found once in {f}"
            path.write_text(original.replace(old, new))
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *(tests[0] if tests else TESTS)],
                                 cwd=work, env=env, capture_output=True, text=True)  # fmt: skip
            path.write_text(original)
            failed = sorted(
                {ln.split(" ")[1].split("[")[0] for ln in run.stdout.splitlines() if ln.startswith("FAILED")}
            )
            print(json.dumps({"break": name, "failed": failed}), flush=True)
            if not failed:
                missed.append(name)
    if missed:
        sys.exit(f"breaks no test caught: {missed}")


if __name__ == "__main__":
    main(sys.argv[1:])
