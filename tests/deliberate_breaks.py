"""Deliberate breaks: each entry changes one behaviour of the package in a scratch copy of the committed HEAD, then runs
the tests that guard it (the model tests unless the entry names its own); every break must make at least one of them fail. Run after changing a test or the behaviour it guards:

    python tests/deliberate_breaks.py            # every break, one JSON line each (each runs its guarding tests)
    python tests/deliberate_breaks.py cache gate # only the breaks whose name contains one of these words

with the Python that has the dev extra installed (.venv/bin/python). The guarding tests run unbroken once first (the
script stops if any fails, or if pytest could not run them at all). A break of the package's model or config
code is made in the shipped copies under pretrained/ too. Exits 1 if any break passes the suite. Not collected by pytest (it runs the suite itself).
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
T, TR, TT = "examples/train.py", "modeling_pointer_sentinel/training.py", "tests/test_train.py"
A = "tests/test_adaptive_softmax.py"
E = "modeling_pointer_sentinel/evaluation.py"
DYN = ["tests/test_dynamic_evaluation.py"]
TOK = "modeling_pointer_sentinel/tokenization.py"
EXPORT = "examples/export_pretrained.py"
G = "examples/generate.py"
R = "benchmarks/run.py"
CKPT = ["tests/test_checkpoints.py"]
RULES = ["tests/test_text_rules.py"]
ARGS_FIRST = ["tests/test_cli.py::test_scripts_check_their_command_line_before_importing_torch"]
FD, ONNX, OX, OG = (
    "tests/test_fast_decode.py",
    "tests/test_onnx.py",
    "examples/export_onnx.py",
    "examples/onnx_generate.py",
)
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
        'kwargs["pointer_stash"] = PointerStash(mix=pointer_mix is not False, decode_step=decode_step)',
        'import copy\n        kwargs["generation_config"] = copy.deepcopy(kwargs.get("generation_config") or self.generation_config)\n        kwargs["generation_config"].pointer_mix = pointer_mix\n        kwargs["pointer_stash"] = PointerStash(decode_step=decode_step)',
    ),
    ("split_state_at unchecked", M, "if split_state_at is not None and not 0 < split_state_at <= T:", "if False:"),
    ("mask width unchecked", M, "mask.shape[1] not in (T, seen + T)", "mask.shape[1] < T"),
    # examples/train.py's training loop ("loop", "limit", "range" pick these), each guarded by the named tests
    (
        "loop: no gradient clipping",
        T,
        "accelerator.clip_grad_norm_(model.parameters(), args.clip)",
        "pass",
        [f"{TT}::test_clip_bounds_the_gradient_norm_the_optimizer_applies"],
    ),
    (
        "loop: clipping at --clip 0",
        T,
        "if accelerator.sync_gradients and args.clip:",
        "if accelerator.sync_gradients:",
        [f"{TT}::test_clip_bounds_the_gradient_norm_the_optimizer_applies"],
    ),
    (
        "loop: variable bptt LR not rescaled",
        T,
        "lr = state.lr * (k / args.bptt if args.variable_bptt else 1.0)",
        "lr = state.lr",
        [f"{TT}::test_every_param_group_gets_the_segment_lr"],
    ),
    (
        "loop: LR written to the first param group only",
        T,
        "for group in optimizer.param_groups:",
        "for group in optimizer.param_groups[:1]:",
        [f"{TT}::test_every_param_group_gets_the_segment_lr"],
    ),
    ("loop: LR never written", T, 'group["lr"] = lr', "pass", [f"{TT}::test_every_param_group_gets_the_segment_lr"]),
    (
        "loop: adamw builds SGD",
        T,
        "optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate,",
        "optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate,",
        [f"{TT}::test_each_optimizer_is_what_it_is_named"],
    ),
    (
        "loop: sgd without weight decay",
        T,
        "torch.optim.SGD(model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay)",
        "torch.optim.SGD(model.parameters(), lr=args.learning_rate)",
        [f"{TT}::test_each_optimizer_is_what_it_is_named"],
    ),
    (
        "loop: ntasgd decays the LR before it averages",
        T,
        'if args.optimizer != "ntasgd" or averager.active:',
        "if True:",
        [f"{TT}::test_ntasgd_stall_starts_the_average_instead_of_stopping"],
    ),
    (
        "loop: ntasgd never decays the LR of the average",
        T,
        'if args.optimizer != "ntasgd" or averager.active:',
        'if args.optimizer != "ntasgd":',
        [
            f"{TT}::test_ntasgd_stall_starts_the_average_instead_of_stopping",
            f"{TT}::test_each_optimizer_is_what_it_is_named",
        ],
    ),
    (
        "loop: sgd averages too",
        T,
        'args.optimizer == "ntasgd"\n            and not averager.active',
        "True\n            and not averager.active",
        [f"{TT}::test_each_optimizer_is_what_it_is_named"],
    ),
    (
        "loop: ntasgd stall stops the run before averaging",
        T,
        " or state.bad_epochs >= args.patience)",
        ")",
        [f"{TT}::test_ntasgd_stall_starts_the_average_instead_of_stopping"],
    ),
    (
        "loop: patience not reset when averaging starts",
        T,
        "            state.bad_epochs = 0  # the patience judges",
        "            pass  # the patience judges",
        [f"{TT}::test_ntasgd_stall_starts_the_average_instead_of_stopping"],
    ),
    (
        "loop: a resume may switch the clock",
        T,
        "    if state.clock not in (None, args.clock):",
        "    if False:",
        [f"{TT}::test_time_budget_counts_every_resumed_run_and_the_cpu_clock"],
    ),
    (
        "loop: the run's clock not kept in its checkpoints",
        T,
        "    state.clock = args.clock\n",
        "\n",
        [f"{TT}::test_time_budget_counts_every_resumed_run_and_the_cpu_clock"],
    ),
    (
        "quality runs: --clock not passed to the runs",
        "examples/quality_runs.py",
        '["--resume_from_checkpoint", "latest", "--clock", clock]',
        '["--resume_from_checkpoint", "latest"]',
        ["tests/test_quality_runs.py::test_converge_adds_each_dataset_block_beside_the_others"],
    ),
    (
        "loop: no average update per step",
        T,
        "                averager.update()",
        "                pass",
        [f"{TT}::test_ntasgd_evaluates_and_saves_the_running_average"],
    ),
    (
        "loop: validation with the live weights",
        T,
        "averager.swap()  # NT-ASGD evaluates",
        "pass  # NT-ASGD evaluates",
        [f"{TT}::test_ntasgd_evaluates_and_saves_the_running_average"],
    ),
    (
        "loop: best weights copied without the average",
        T,
        "averager.swap()\n            best.keep()",
        "best.keep()\n            averager.swap()",
        [f"{TT}::test_ntasgd_evaluates_and_saves_the_running_average"],
    ),
    (
        "loop: average not saved without validation",
        T,
        "elif averager.active:",
        "elif False:",
        [f"{TT}::test_ntasgd_evaluates_and_saves_the_running_average"],
    ),
    (
        "loop: best weights not restored",
        T,
        "raw.load_state_dict(best.weights)",
        "pass",
        [f"{TT}::test_ntasgd_evaluates_and_saves_the_running_average"],
    ),
    (
        "loop: plateau count not reset by an improvement",
        T,
        "state.best_val, state.bad_epochs = val, 0",
        "state.best_val = val",
        [f"{TT}::test_plateau_rule_resets_on_improvement_and_decays_each_plateau"],
    ),
    (
        "loop: patience one late",
        T,
        "if state.bad_epochs >= args.patience:",
        "if state.bad_epochs > args.patience:",
        [f"{TT}::test_plateau_rule_resets_on_improvement_and_decays_each_plateau"],
    ),
    (
        "loop: lr_decay not applied",
        T,
        "state.lr *= args.lr_decay",
        "state.lr *= 1.0",
        [f"{TT}::test_plateau_rule_resets_on_improvement_and_decays_each_plateau"],
    ),
    (
        "limit: one process checks at log steps only",
        T,
        "return over\n        if log_step:",
        "return over and log_step\n        if log_step:",
        [f"{TT}::test_max_train_minutes_stops_at_the_first_step_past_the_limit"],
    ),
    (
        "limit: no broadcast per step near the limit",
        T,
        "return self.near and accelerate_broadcast(self.accelerator, over)[0]",
        "return False",
        [f"{TT}::test_time_limit_decision_is_made_every_step_near_the_limit"],
    ),
    (
        "limit: never near",
        T,
        "near = now - self.start + 2 * self.longest_gap > self.seconds",
        "near = False",
        [f"{TT}::test_time_limit_decision_is_made_every_step_near_the_limit"],
    ),
    (
        "range: learning_rate unchecked",
        T,
        '("--learning_rate", positive, "> 0"),',
        "",
        [f"{TT}::test_bad_inputs_fail_before_training"],
    ),
    (
        "range: positive lets 0 through",
        "examples/cli.py",
        "return v > 0",
        "return v >= 0",
        [f"{TT}::test_bad_inputs_fail_before_training"],
    ),
    (
        "range: config model error a traceback",
        T,
        "except load_errors() as e:  # the config's checks",
        "except KeyError as e:  # the config's checks",
        [f"{TT}::test_bad_inputs_fail_before_training"],
    ),
    # (segment_schedule's own bptt/stride check has no entry: without it the test loops forever, growing its memory)
    (
        "range: shard_streams takes batch 0",
        TR,
        "if batch_size < 1 or",
        "if batch_size < 0 or",
        [f"{TT}::test_library_schedule_and_shards_refuse_empty_segments_and_batches"],
    ),
    (
        "adaptive: rows selected by the lower cutoff alone",
        M,
        "rows = (lambda t, m=in_cluster: t[m])",
        "rows = (lambda t, m=y >= lo: t[m])",
        [A],
    ),
    (
        "adaptive: wrong cluster offset",
        M,
        "(rows(y) - lo).clamp(0, hi - lo - 1)",
        "(rows(y) - lo + 1).clamp(0, hi - lo - 1)",
        [A],
    ),
    (
        "adaptive: head unnormalised",
        M,
        "return torch.log_softmax(_upcast(_linear(h, weight, self.head_bias, packed is not None)), -1)",
        "return _upcast(_linear(h, weight, self.head_bias, packed is not None))",
        [A],
    ),
    (
        "adaptive: tail term missing in the loss",
        M,
        "value = rows(head[..., c0 + i]) + word.squeeze(-1)",
        "value = rows(head[..., c0 + i])",
        [A],
    ),
    (
        "adaptive: cluster term missing in log_prob",
        M,
        "(head[..., c0 + i, None] + self.tail_log_probs(i, h, packed) for",
        "(self.tail_log_probs(i, h, packed) for",
        [A],
    ),
    (
        "adaptive: tying dropped",
        M,
        "            self.lm_head = AdaptiveSoftmax(config)\n",
        "            self.lm_head = AdaptiveSoftmax(config)\n            self._tied_weights_keys = {}\n",
        [A],
    ),
    (
        "adaptive: tied head rows detached",
        M,
        "return torch.cat([self.weight[: self.cutoffs[0]], self.cluster_weight])",
        "return torch.cat([self.weight[: self.cutoffs[0]].detach(), self.cluster_weight])",
        [A],
    ),
    (
        "adaptive: projections drawn like the softmax",
        M,
        "init.uniform_(p, -1 / math.sqrt(p.shape[1]), 1 / math.sqrt(p.shape[1]))",
        "init.uniform_(p, -r, r)",
        [A],
    ),
    ("adaptive: cutoffs unchecked", C, "if any(b <= a for a, b in pairwise(cutoffs)) or not", "if False and not", [A]),
    (
        "adaptive: frequency order unchecked",
        "modeling_pointer_sentinel/training.py",
        "if after > before:",
        "if False:",
        [A],
    ),
    (
        "adaptive: full softmax bias drawn at init",
        M,
        "init.zeros_(module.bias)",
        "init.uniform_(module.bias, -r, r)",
        [f"{A}::test_empty_cutoffs_equal_the_full_softmax_model"],
    ),
    (
        "dynamic: peeks (updates on a segment before scoring it)",
        E,
        "out = _forward(m, x, y, cache)\n        parts.append(",
        "peek = _forward(m, x, y, copy.deepcopy(cache))\n        m.zero_grad(set_to_none=False)\n"
        "        peek.loss.backward()\n        update()\n        out = _forward(m, x, y, cache)\n        parts.append(",
        DYN,
    ),
    ("dynamic: step sign inverted", E, "step.addcmul_(scale, p.grad, value=-1)", "step.addcmul_(scale, p.grad)", DYN),
    (
        "dynamic: sqrt dropped from the statistics",
        E,
        "rms = {n: (s / count).sqrt() for",
        "rms = {n: s / count for",
        DYN,
    ),
    (
        "dynamic: decay without decrate",
        E,
        "self.decay = [(lam * rates[n]).clamp(max=1) for n in params]",
        "self.decay = [torch.full_like(rates[n], lam) for n in params]",
        DYN,
    ),
    ("dynamic: decay not clipped", E, "(lam * rates[n]).clamp(max=1)", "(lam * rates[n])", DYN),
    ("dynamic: decay dropped", E, "torch.sub(p0, p, out=step).mul_(decay)", "step.zero_()", DYN),
    (
        "dynamic: decrate over the mean of all weights",
        E,
        "mean = torch.stack([r.mean() for r in self.rms.values()]).mean()",
        "mean = torch.cat([r.flatten() for r in self.rms.values()]).mean()",
        DYN,
    ),
    ("dynamic: adapts the caller's model", E, "m = copy.deepcopy(model).eval()", "m = model.eval()", DYN),
    (
        "dynamic: state not carried across segments",
        E,
        "update()\n        cache = out.past_key_values.detach_()",
        "update()\n        cache = PointerSentinelCache()",
        DYN,
    ),
    (
        "dynamic: statistics without the carried state",
        E,
        "cache, count = out.past_key_values.detach_(), count + 1",
        "cache, count = PointerSentinelCache(), count + 1",
        DYN,
    ),
    (
        "dynamic: pointer-off adapts the mixture",
        E,
        'if objective == "vocab":\n        m.pointer = None',
        "if False:\n        pass",
        DYN,
    ),
    ("dynamic: auxiliary pointer loss in the objective", E, "m.config.pointer_loss_weight = 0.0", "pass", DYN),
    (
        "dynamic: evaluate.py ignores the grid's choice",
        "examples/evaluate.py",
        'lr, lam, segment = best["lr"], best["lam"], best["segment_length"]',
        "pass",
        DYN,
    ),
    # the tokenizer's line rule, the data code, and the pretrained/ export (tokenizer tests, tests/test_pretrained.py)
    (
        "tokenizer line rule removed",
        TOK,
        "    _install_line_rule(tk, rules)\n",
        "",
        ["tests/test_hf_integration.py"],
    ),
    (
        "tokenizer eos decodes as a word",
        TOK,
        'decoders.Replace(Regex(f"^ {EOS}$"), "\\n"),',
        "",
        ["tests/test_hf_integration.py"],
    ),
    (
        "tokenizer encode_lines appends a second eos",
        TR,
        "add_special_tokens=False)\n        ids = [i for enc in encodings for i in enc.ids]",
        "add_special_tokens=False)\n        ids = [i for enc in encodings for i in (*enc.ids, eos)]",
        ["tests/test_hf_integration.py"],
    ),
    (
        "tokenizer pre-rule tokenizers lose their eos",
        TR,
        "    if ends_lines_with_eos(tokenizer):",
        "    if True:",
        ["tests/test_hf_integration.py"],
    ),
    (
        "pretrained remote code not copied",
        "modeling_pointer_sentinel/__init__.py",
        'PointerSentinelForCausalLM.register_for_auto_class("AutoModelForCausalLM")',
        "pass",
        ["tests/test_pretrained.py"],
    ),
    (
        "pretrained: the package's code changes, the shipped copies stay stale",
        M,
        "return torch.log_softmax(_upcast(_linear(h, weight, self.head_bias, packed is not None)), -1)",
        "return _upcast(_linear(h, weight, self.head_bias, packed is not None))",
        ["tests/test_pretrained.py::test_shipped_code_is_the_package_code"],
    ),
    (
        "pretrained card figure off",
        EXPORT,
        'metric_value=round(record[split]["ppl"], 2)',
        'metric_value=round(record[split]["ppl"] * 1.01, 2)',
        ["tests/test_pretrained.py"],
    ),
    (
        "pretrained fixed slice measured on 10 streams",
        EXPORT,
        'fixed = measure(shipped, ids["test"], 1, bptt, FIXED_SLICE_TOKENS)',
        'fixed = measure(shipped, ids["test"], 10, bptt, FIXED_SLICE_TOKENS)',
        ["tests/test_pretrained.py"],
    ),
    (
        "quality runs: results.json rewritten without the other datasets",
        "examples/quality_runs.py",
        "results = saved_results(path)\n    results[tag] = {",
        "results = {}\n    results[tag] = {",
        ["tests/test_quality_runs.py"],
    ),
    (
        "quality runs: dataset model settings not applied",
        "examples/quality_runs.py",
        "return {**MODEL, **DATASET_MODEL[name], **(model or {})}",
        "return {**MODEL, **(model or {})}",
        ["tests/test_quality_runs.py"],
    ),
    (
        "quality runs dynamic: row takes the static batch-1 perplexity",
        "examples/quality_runs.py",
        'block[f"{kind}_dynamic"] = {"test_ppl": ev["ppl_dynamic"],',
        'block[f"{kind}_dynamic"] = {"test_ppl": d["static_ppl_batch_1"],',
        ["tests/test_quality_runs.py"],
    ),
    (
        "quality runs dynamic: recorded command drops --dynamic",
        "examples/quality_runs.py",
        'flags = " ".join([*data_flags(Path("DIR"), name), *DYNAMIC])',
        'flags = " ".join([*data_flags(Path("DIR"), name), *DYNAMIC[3:]])',
        ["tests/test_quality_runs.py"],
    ),
    (
        "quality runs dynamic: validation figure from the static row",
        "examples/quality_runs.py",
        '"valid_ppl": best["ppl"],',
        '"valid_ppl": block[kind]["valid_ppl"],',
        ["tests/test_quality_runs.py"],
    ),
    (
        "quality runs dynamic: grid tokens count the first input",
        "examples/evaluate.py",
        "grid_tokens = val.numel() - 1",
        "grid_tokens = val.numel()",
        ["tests/test_quality_runs.py"],
    ),
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
        '("--max_new_tokens", lambda v: v >= 1, ">= 1")',
        '("--max_new_tokens", lambda v: True, ">= 1")',
        ["tests/test_cli.py"],
    ),
    (
        "clifix: generate top_p upper bound unchecked",
        G,
        "lambda v: 0 < v <= 1",
        "lambda v: 0 < v",
        ["tests/test_cli.py"],
    ),
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
        TR,
        "ids = encode_lines(tokenizer, lines)",
        'ids = torch.tensor([i for line in lines for i in tokenizer(line)["input_ids"]])',
        ["tests/test_hf_fit.py"],
    ),
    (
        "clifix: group_lines masks <eos> labels",
        TR,
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
    (
        "cache grid flags ignored",
        "examples/evaluate.py",
        "axes = dict(window=args.cache_grid_windows, theta=args.cache_grid_thetas, lam=args.cache_grid_lambdas)",
        'axes = dict(window=CACHE_GRID["windows"], theta=CACHE_GRID["thetas"], lam=CACHE_GRID["lambdas"])',
        ["tests/test_evaluation.py"],
    ),
    (
        "benchmarks: decode_paths needs the onnx extra",
        R,
        "    except ImportError as e:\n        folder_onnx = None",
        "    except KeyError as e:\n        folder_onnx = None",
        ["tests/test_benchmarks.py"],
    ),
    (
        "recipe study: ranks by the epoch-end validation only",
        "examples/recipe_study.py",
        '"valid_ppl": r["validation_ppl"],',
        '"valid_ppl": r["best_validation_ppl"],',
        ["tests/test_quality_runs.py::test_the_recipe_study_table_ranks_a_run_that_never_reached_a_validation"],
    ),
    (
        "benchmarks: decode_paths' cpu clock ignored",
        R,
        'timer = time.process_time if clock == "cpu" else time.perf_counter',
        "timer = time.perf_counter",
        ["tests/test_benchmarks.py"],
    ),
    (
        "benchmarks: generate timed on the wall clock under clock=cpu",
        R,
        'timed = decoder(model, 10, n, "cpu", B, decode, clock)',
        'timed = decoder(model, 10, n, "cpu", B, decode)',
        ["tests/test_benchmarks.py"],
    ),
    (
        "bracketed grid: a repeated value makes an axis",
        E,
        "axes, bounds = {k: sorted(set(v)) for k, v in axes.items()}, bounds or {}",
        "axes, bounds = {k: sorted(v) for k, v in axes.items()}, bounds or {}",
        ["tests/test_evaluation.py"],
    ),
    (
        "quality runs recipe: the recipe's model settings ignored",
        "examples/quality_runs.py",
        "    runs = train_pair(name, out, data, RECIPES[recipe], extra, tag, model)",
        "    runs = train_pair(name, out, data, RECIPES[recipe], extra, tag)",
        ["tests/test_quality_runs.py::test_converge_adds_each_dataset_block_beside_the_others"],
    ),
    (
        "bracketed grid: never grows",
        E,
        "    while grown < extensions:",
        "    while False:",
        ["tests/test_evaluation.py"],
    ),
    (
        "bracketed grid: grows on the wrong side",
        E,
        "edge, inner = (v[0], v[1]) if d < 0 else (v[-1], v[-2])",
        "edge, inner = (v[0], v[1]) if d > 0 else (v[-1], v[-2])",
        ["tests/test_evaluation.py"],
    ),
    (
        "bracketed grid: bounds ignored",
        E,
        "new = min(max(round(new) if kind is int else new, lo), hi)",
        "new = round(new) if kind is int else new",
        ["tests/test_evaluation.py"],
    ),
    (
        "bracketed grid: a bound reads as an edge",
        E,
        'return "at its bound" if (k, -1 if best[k] == v[0] else 1) in stuck else "at the edge"',
        'return "at the edge"',
        ["tests/test_evaluation.py"],
    ),
    (
        "evaluate.py: the cache grid never grows",
        "examples/evaluate.py",
        'axes, bounds, args.grid_extensions, "cache grid",',
        'axes, bounds, 0, "cache grid",',
        ["tests/test_evaluation.py"],
    ),
    (
        "evaluate.py: the dynamic grid never grows",
        "examples/evaluate.py",
        'search, axes, bounds, args.grid_extensions, f"dynamic grid{label}"',
        'search, axes, bounds, 0, f"dynamic grid{label}"',
        ["tests/test_dynamic_evaluation.py"],
    ),
    (
        "cache grid lambdas unchecked",
        "examples/evaluate.py",
        '("--cache_grid_lambdas", lambda lam: 0 <= lam <= 1, "in [0, 1]"),',
        "",
        ["tests/test_evaluation.py"],
    ),
    (
        "cache grid thetas unchecked",
        "examples/evaluate.py",
        '("--cache_grid_thetas", lambda t: True, "a finite number"),',
        "",
        ["tests/test_evaluation.py"],
    ),
    (
        "check_ranges checks a list's first value only",
        "examples/cli.py",
        "for v in value if isinstance(value, list) else [value]:",
        "for v in value[:1] if isinstance(value, list) else [value]:",
        ["tests/test_evaluation.py"],
    ),
    (
        "cache grid flags silently unused without --cache_grid",
        "examples/evaluate.py",
        "elif not args.cache_grid:",
        "elif False:",
        ["tests/test_evaluation.py"],
    ),
    (
        "pretrained demo prompts from the zero state, not a line start",
        "examples/try_pretrained.py",
        'generator("\\n" + prompt,',
        "generator(prompt,",
        ["tests/test_pretrained.py::test_the_demo_continues_its_prompt"],
    ),
    (
        "pretrained demo scores another batch than the card's",
        "examples/try_pretrained.py",
        "streams = streams_for(ids, defaults.batch_size, None)",
        "streams = streams_for(ids, 1, None)",
        ["tests/test_pretrained.py::test_export_a_trained_run_end_to_end"],
    ),
    (
        "pretrained demo default needs a flag to score",
        "examples/try_pretrained.py",
        'DEFAULT_MODEL = PRETRAINED / "wt2-pointer-sentinel-lstm-2x200"',
        'DEFAULT_MODEL = PRETRAINED / "ptb-pointer-sentinel-lstm-2x200"',
        ["tests/test_pretrained.py::test_the_readme_demo_default_is_scored_without_flags"],
    ),
    (
        "pretrained demo leaves the bundled WikiText-2 unscored",
        "examples/try_pretrained.py",
        'elif record["dataset"] == "wt2":',
        "elif False:",
        ["tests/test_pretrained.py::test_the_demo_continues_its_prompt"],
    ),
    (
        "pretrained recipe read from the top of results.json",
        "examples/export_pretrained.py",
        '        recipe = recipe["runs"][block]',
        "        pass",  # the whole results.json read as one run's recipe
        ["tests/test_pretrained.py::test_export_takes_the_recipe_of_its_dataset_from_the_converged_results"],
    ),
    (
        "pretrained card describes a plain model as mixing in a pointer",
        EXPORT,
        "        if config.use_pointer\n        else \"a word-level LSTM language model, the paper's baseline",
        "        if True\n        else \"a word-level LSTM language model, the paper's baseline",
        ["tests/test_pretrained.py::test_card_says_what_the_model_is_and_what_its_minutes_count"],
    ),
    (
        "pretrained card's training minutes say nothing of the CPU clock",
        EXPORT,
        "    run = run.replace(\" minutes \", f\" minutes{clock.get(train['run'].get('clock'), '')} \", 1)",
        "",
        ["tests/test_pretrained.py::test_card_says_what_the_model_is_and_what_its_minutes_count"],
    ),
    (
        "quality runs reuse any finished evaluation, whatever its command",
        "examples/quality_runs.py",
        ' and json.loads(record.read_text())["key"] == key:',
        ":",
        ["tests/test_quality_runs.py::test_dynamic_again_reuses_only_the_same_evaluation"],
    ),
    (
        "quality runs never reuse a finished evaluation",
        "examples/quality_runs.py",
        "        if out_json.exists() and record.exists()",
        "        if False and out_json.exists() and record.exists()",
        ["tests/test_quality_runs.py::test_dynamic_again_reuses_only_the_same_evaluation"],
    ),
    (
        "quality runs' evaluation key ignores the model's weights",
        "examples/quality_runs.py",
        '"model": {p.name: sha256(p) for p in files}',
        '"model": {}',
        ["tests/test_quality_runs.py::test_dynamic_again_reuses_only_the_same_evaluation"],
    ),
    (
        "checkpoint: latest takes the newest folder, whole or not",
        T,
        "        if (why := incomplete(folder)) is None:\n            return folder",
        "        if (why := None) is None:\n            return folder",
        CKPT,
    ),
    (
        "checkpoint: the best weights copy a tied matrix twice",
        T,
        "            if id(tensor) not in copies:",
        "            if True:",
        ["tests/test_checkpoints.py::test_sigkill_inside_saves_then_resume_latest_ends_bit_exact"],
    ),
    (
        "stage checkpoints: replaced checkpoints stay in git",
        "tools/stage_checkpoints.py",
        "    for path in sorted(steps - set(kept)):",
        "    for path in sorted(steps - steps):",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: a finished run's checkpoint staged",
        "tools/stage_checkpoints.py",
        '            if (run / "results.json").exists():',
        "            if False:",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: a finished run's copies of the modeling code staged",
        "tools/stage_checkpoints.py",
        'for f in sorted(run.iterdir()) if f.is_file() and f.suffix != ".py"',
        "for f in sorted(run.iterdir()) if f.is_file()",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: any folder named step_* taken for a checkpoint",
        "tools/stage_checkpoints.py",
        "             for i, part in enumerate(parts[:-1]) if STEP.fullmatch(part)}",
        '             for i, part in enumerate(parts[:-1]) if part.startswith("step_")}',
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: the staged files not checked against the manifest",
        "tools/stage_checkpoints.py",
        "    return MANIFEST in sizes and all(sizes.get(name) == size for name, size in manifest.items())",
        "    return MANIFEST in sizes",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: ROOTs read relative to the repository, not the working folder",
        "tools/stage_checkpoints.py",
        "        roots = [(Path.cwd() / r).resolve().relative_to(repo) for r in given] or [",
        "        roots = [r for r in given] or [",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: the submission's earlier commits not counted",
        "tools/stage_checkpoints.py",
        '    return commits + diff_bytes(repo, "--cached", "HEAD")',
        '    return diff_bytes(repo, "--cached", "HEAD")',
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: a file added and later removed counted once",
        "tools/stage_checkpoints.py",
        '                blobs += [b for b, mode in ((old, old_mode), (new, new_mode)) if b.strip("0") and mode != "160000"]',
        '                blobs += [b for b, mode in ((new, new_mode),) if b.strip("0") and mode != "160000"]',
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: an overflowing snapshot left staged",
        "tools/stage_checkpoints.py",
        '        git("reset", "-q", before, "--", *(r.as_posix() for r in roots), repo=repo)',
        "        pass",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: an overflow unstages what was staged before the tool ran",
        "tools/stage_checkpoints.py",
        '        git("reset", "-q", before, "--", *(r.as_posix() for r in roots), repo=repo)',
        '        git("reset", "-q", "--", *(r.as_posix() for r in roots), repo=repo)',
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "stage checkpoints: --since not checked before staging",
        "tools/stage_checkpoints.py",
        "    if done.returncode and has_commit(repo):",
        "    if False:",
        ["tests/test_stage_checkpoints.py"],
    ),
    (
        "best weights: named as a source they do not equal",
        T,
        "            if source is not None and all(torch.equal(w, source[k]) for k, w in self.weights.items()):",
        "            if source is not None:",
        ["tests/test_checkpoints.py::test_best_weights_name_an_equal_source_and_load_it_back"],
    ),
    (
        "best weights: the average's source is the live model",
        T,
        "            average = dict(zip(map(id, self.averager.params), self.averager.average, strict=True))",
        "            average = {}",
        ["tests/test_checkpoints.py::test_best_weights_name_an_equal_source_and_load_it_back"],
    ),
    (
        "best weights: a named source not loaded",
        T,
        '            self.keep(name=state["weights"])',
        "            self.weights = None",
        [
            "tests/test_checkpoints.py::test_best_weights_name_an_equal_source_and_load_it_back",
            "tests/test_checkpoints.py::test_sigusr1_stops_at_the_epoch_end_with_the_best_weights_named_and_resumes_bit_exact",
        ],
    ),
    (
        "SIGUSR1: the stop never acted on",
        T,
        "        return not stop and state.epoch < args.num_train_epochs and accelerator.check_trigger()",
        "        return False",
        [
            "tests/test_checkpoints.py::test_sigusr1_stops_at_the_epoch_end_with_the_best_weights_named_and_resumes_bit_exact"
        ],
    ),
    (
        "SIGUSR1: no checkpoint at the epoch end",
        T,
        "        save_checkpoint(accelerator, out_dir, state.step, cache, rank, args.checkpoints_total_limit)\n        saved = ",
        "        saved = ",
        [
            "tests/test_checkpoints.py::test_sigusr1_stops_at_the_epoch_end_with_the_best_weights_named_and_resumes_bit_exact"
        ],
    ),
    (
        "quality runs: a run stopped by SIGUSR1 taken for finished",
        "examples/quality_runs.py",
        '    if stopped := [kind for kind, run_dir in runs.items() if not (run_dir / "results.json").exists()]:',
        "    if stopped := []:",
        ["tests/test_quality_runs.py::test_a_run_stopped_by_sigusr1_is_reported_and_the_same_pair_resumes"],
    ),
    (
        "SIGUSR1: ignored without a validation split",
        T,
        "            if paused := stop_asked():\n                break\n            continue",
        "            continue",
        ["tests/test_checkpoints.py::test_sigusr1_stops_a_run_without_validation_at_its_epoch_end"],
    ),
    (
        "SIGUSR1: a run at its step limit stopped instead of finished",
        T,
        "        return not stop and state.epoch < args.num_train_epochs and accelerator.check_trigger()",
        "        return state.epoch < args.num_train_epochs and accelerator.check_trigger()",
        ["tests/test_checkpoints.py::test_sigusr1_stops_a_run_without_validation_at_its_epoch_end"],
    ),
    (
        "checkpoint: written under its final name",
        T,
        "    accelerator.save_state(tmp)",
        "    tmp = final\n    accelerator.save_state(tmp)",
        CKPT,
    ),
    (
        "checkpoint: a file's size not checked",
        T,
        "if not path.is_file() or path.stat().st_size != size:",
        "if not path.is_file():",
        CKPT,
    ),
    (
        "checkpoint: half-deleted folders left behind",
        T,
        '            say(f"removing {folder}: incomplete ({why})")\n            shutil.rmtree(folder)',
        '            say(f"removing {folder}: incomplete ({why})")',
        CKPT,
    ),
    (
        "checkpoint: tied weights left to accelerate (a warning per save)",
        T,
        "    accelerator.register_save_state_pre_hook(save_tied_weights_once)",
        "",
        CKPT,
    ),
    (
        "checkpoint: an incomplete folder named on the command line accepted",
        T,
        "        if why := incomplete(Path(args.resume_from_checkpoint)):",
        "        if why := None:",
        CKPT,
    ),
    (
        "text rules: no @-@ for a hyphen inside a word",
        TOK,
        '    (r"(?<=\\w|<unk>)-(?=\\w|<unk>)", " @-@ "),  # a hyphen between words\n',
        "",
        RULES,
    ),
    (
        "text rules: a kept word may start a longer one",
        TOK,
        '(?!\\\\w)"] if kept else []',
        '"] if kept else []',
        RULES,
    ),
    ("text rules: the vocabulary's words not kept whole", TOK, "] if kept else []", "] if False else []", RULES),
    ("text rules: @,@ joined only before a space", TOK, '(r" @,@(?: |$)", ",")', '(r" @,@ ", ",")', RULES),
    ("text rules: PTB's own N lower-cased", TOK, '(r"(?<!\\S)N(?!\\S)", "0"),', "", RULES),
    (
        "text rules: PTB drops its own marks ($)",
        TOK,
        'Regex(f"^(?!(?:{marks})$)[^\\\\w\\\\s]+$")',
        'Regex(f"^[^\\\\w\\\\s]+$")',
        RULES,
    ),
    ("text rules: not recorded in the config", TOK, '    tokenizer.init_kwargs["text_rules"] = rules\n', "", RULES),
    ("text rules: never detected", TOK, '    if counts["@-@"] or counts["@,@"]:', "    if False:", RULES),
    (
        "generation: <unk> not suppressed by default",
        TR,
        "        model.generation_config.suppress_tokens = [unk]",
        "        pass",
        [
            "tests/test_train.py::test_end_to_end_saves_a_model_pipeline_can_use",
            "tests/test_pretrained.py::test_export_a_trained_run_end_to_end",
        ],
    ),
    (
        "generation: the shipped WikiText-2 folder suppresses nothing",
        "pretrained/wt2-pointer-sentinel-lstm-2x200/generation_config.json",
        '  "suppress_tokens": [\n    4\n  ],\n',
        "",
        ["tests/test_text_rules.py", "tests/test_pretrained.py::test_shipped_model_loads_without_the_package"],
    ),
    (
        "text rules: train.py ignores --text_rules",
        T,
        "build_word_level_tokenizer(train_lines, text_rules=args.text_rules)",
        "build_word_level_tokenizer(train_lines)",
        ["tests/test_train.py::test_text_rules_flag_builds_the_tokenizer_asked_for"],
    ),
    (
        "text rules: the export keeps whitespace rules",
        EXPORT,
        'add_text_rules(tok, info["text_rules"])',
        'add_text_rules(tok, "whitespace")',
        ["tests/test_pretrained.py::test_export_a_trained_run_end_to_end"],
    ),
    (
        "lm-eval: the round trip counts the re-tokenised tokens as given back",
        "examples/lm_eval_wikitext.py",
        "kept += sum(m.size for m in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks())",
        "kept += min(len(a), len(b))",
        ["tests/test_lm_eval.py"],
    ),
    (
        "lm-eval: per-token perplexity over the words",
        "examples/lm_eval_wikitext.py",
        '"token_perplexity": math.exp(math.log(word_ppl) * words / tokens)',
        '"token_perplexity": word_ppl',
        ["tests/test_lm_eval.py"],
    ),
    (
        "NT-ASGD: the trigger counts the latest loss among the earlier ones",
        TR,
        "    *earlier, latest = val_losses\n    return len(earlier) > nonmono and latest > min(earlier[:-nonmono])",
        "    return len(val_losses) > nonmono and val_losses[-1] > min(val_losses[:-nonmono])",
        ["tests/test_train.py::test_parameter_averager_and_nt_asgd_trigger"],
    ),
    (
        "time budget: a resumed run starts its clock from zero",
        T,
        "time_limit = TimeLimit(accelerator, args.max_train_minutes, args.clock, state.train_seconds)",
        "time_limit = TimeLimit(accelerator, args.max_train_minutes, args.clock)",
        ["tests/test_train.py::test_time_budget_counts_every_resumed_run_and_the_cpu_clock"],
    ),
    (
        "time budget: --clock cpu reads the wall clock",
        T,
        'self.now = time.perf_counter if clock == "wall" else time.process_time',
        "self.now = time.perf_counter",
        ["tests/test_train.py::test_time_budget_counts_every_resumed_run_and_the_cpu_clock"],
    ),
    (
        "grids: a NaN perplexity passes through",
        E,
        "    if math.isnan(mean_nll) or mean_nll > 709.0:",
        "    if mean_nll > 709.0:",
        DYN,
    ),
    (
        "grids: exp overflows on a diverged point",
        E,
        "    if math.isnan(mean_nll) or mean_nll > 709.0:",
        "    if math.isnan(mean_nll):",
        DYN,
    ),
    ("grids: diverged points not reported", "examples/evaluate.py", "    if diverged:", "    if False:", DYN),
    (
        "cache grid mixes one lambda for all",
        E,
        "mixed = NeuralCache.mix(lp, log_cache, any_key, lam)",
        "mixed = NeuralCache.mix(lp, log_cache, any_key, lambdas[0])",
        ["tests/test_evaluation.py"],
    ),
    (
        "cache grid tuned on the test split",
        "examples/evaluate.py",
        'val = out if args.split == "validation" else run(model, "validation")',
        "val = out",
        ["tests/test_evaluation.py"],
    ),
    (
        "dynamic grid tuned on the test split",
        "examples/evaluate.py",
        'val = ids["validation"][: args.dynamic_grid_tokens + 1]',
        "val = ids[args.split][: args.dynamic_grid_tokens + 1]",
        DYN,
    ),
    (
        "load errors: only OSError and ValueError caught",
        "examples/cli.py",
        "    return OSError, ValueError, RuntimeError, TypeError, KeyError, StrictDataclassError",
        "    return OSError, ValueError",
        [
            "tests/test_cli.py::test_a_damaged_saved_config_ends_in_one_error_line",
            "tests/test_cli.py::test_try_pretrained_bad_input_is_one_error_line_before_any_sample",
        ],
    ),
    (
        "config hint printed at every load",
        C,
        '        logger.warning_once(f"{type(config).__name__}: unknown key',
        '        logger.warning(f"{type(config).__name__}: unknown key',
        ["tests/test_cli.py::test_a_damaged_saved_config_ends_in_one_error_line"],
    ),
    (
        "train config may set vocab_size",
        T,
        "    if given := sorted(set(from_tokenizer) & set(args.model)):",
        "    if given := []:",
        ["tests/test_cli.py::test_a_wrong_model_entry_in_a_train_config_ends_in_one_error_line"],
    ),
    (
        "try_pretrained checks the test file after the samples",
        "examples/try_pretrained.py",
        "    if args.test_file and not Path(args.test_file).is_file():",
        "    if False:",
        ["tests/test_cli.py::test_try_pretrained_bad_input_is_one_error_line_before_any_sample"],
    ),
    (
        "try_pretrained: sample count unchecked",
        "examples/try_pretrained.py",
        '("--num_samples", positive, "a positive integer"),',
        "",
        ["tests/test_cli.py::test_try_pretrained_bad_input_is_one_error_line_before_any_sample"],
    ),
    (
        "try_pretrained: pipeline unguarded",
        "examples/try_pretrained.py",
        "    except load_errors() as e:  # a damaged folder",
        "    except ImportError as e:  # a damaged folder",
        ["tests/test_cli.py::test_try_pretrained_bad_input_is_one_error_line_before_any_sample"],
    ),
    (
        "window stride longer than the streams accepted",
        T,
        '    if args.scheme == "window" and stride >= train.shape[1] - 1:',
        "    if False:",
        ["tests/test_train.py::test_a_window_stride_longer_than_the_streams_is_one_error_before_training"],
    ),
    (
        "no validation: NaN drives the schedule again",
        T,
        '            continue\n        val = evaluate("validation")',
        '            pass\n        val = evaluate("validation") if "validation" in evals else float("nan")',
        ["tests/test_train.py::test_without_validation_trains_to_the_epoch_limit_and_says_so"],
    ),
    (
        "generate.py prompts from the zero state",
        G,
        "ids = torch.tensor([prompt_ids if prompt_ids[:1] == [eos] else [eos, *prompt_ids]])",
        "ids = torch.tensor([prompt_ids])",
        [
            "tests/test_cli.py::test_generate_docstring_example_continues_its_prompt_on_the_shipped_ptb_model",
            "tests/test_cli.py::test_generate_show_gate_prints_each_words_pointer_share",
        ],
    ),
    (
        "help: train.py's examples lose their line breaks",
        T,
        'r"""Train a Pointer',
        '"""Train a Pointer',
        ["tests/test_cli.py"],
    ),
    (
        "size check: refuses nothing",
        T,
        "    if need > available:\n        fail(",
        "    if False:\n        fail(",
        [f"{TT}::test_a_model_that_cannot_fit_is_refused_with_the_size_it_needs"],
    ),
    (
        "size check: the pointer window left out",
        T,
        "    need = 4 * params * copies + window",
        "    need = 4 * params * copies",
        [f"{TT}::test_a_model_that_cannot_fit_is_refused_with_the_size_it_needs"],
    ),
]
MUTS += [
    (
        "fast decode: the ring's slot never advances",
        M,
        "    state.slot.add_(1).remainder_(state.keys.shape[1])",
        "    state.slot.remainder_(state.keys.shape[1])",
        [f"{FD}::test_decode_step_equals_forward_one_token_at_a_time"],
    ),
    (
        "fast decode: zoneout's expectation dropped",
        M,
        "        if p > 0:  # zoneout at evaluation: the expectation",
        "        if False:",
        [f"{FD}::test_decode_step_equals_forward_one_token_at_a_time"],
    ),
    (
        "fast decode: the vocabulary logits mixed unnormalised",
        M,
        "    vocab_log_probs = vocab if w.output is None else torch.log_softmax(_upcast(vocab), -1)",
        "    vocab_log_probs = vocab",
        [f"{FD}::test_decode_step_equals_forward_one_token_at_a_time"],
    ),
    (
        "fast decode: the cache's window rolled the wrong way",
        M,
        "        shift = -int(state.slot)",
        "        shift = int(state.slot)",
        [
            f"{FD}::test_fast_generate_equals_forward_generate",
            f"{FD}::test_continuing_from_the_fast_cache_equals_one_run",
        ],
    ),
    (
        "fast decode: the prompt's last position left unmixed",
        M,
        "        processors, step_scores = logits_processor, logits",
        "        processors, step_scores = later, logits",
        [f"{FD}::test_fast_generate_equals_forward_generate"],
    ),
    (
        "fast decode: suppressed tokens not suppressed",
        M,
        "            p = _TokenMask(p.suppress_tokens, math.inf)",
        "            p = _TokenMask(p.suppress_tokens, 0)",  # never active
        [
            f"{FD}::test_fast_generate_equals_forward_generate",
            f"{FD}::test_suppressed_and_early_eos_tokens_get_no_mass",
        ],
    ),
    (
        "fast decode: min_new_tokens off by one",
        M,
        "p.prompt_length_to_skip + p.min_new_tokens)",
        "p.prompt_length_to_skip + p.min_new_tokens + 1)",  # one token too many masked
        [
            f"{FD}::test_fast_generate_equals_forward_generate",
            f"{FD}::test_suppressed_and_early_eos_tokens_get_no_mass",
        ],
    ),
    (
        "fast decode: EOS read from the wrong column",
        M,
        "        return torch.isin(input_ids[:, -1], self.eos.to(input_ids.device))",
        "        return torch.isin(input_ids[:, -2], self.eos.to(input_ids.device))",
        [f"{FD}::test_eos_rows_continue_with_padding_and_generation_stops"],
    ),
    (
        "fast decode: finished rows not padded",
        M,
        "                tokens = torch.where(unfinished, tokens, pad)",
        "                tokens = tokens",
        [f"{FD}::test_eos_rows_continue_with_padding_and_generation_stops"],
    ),
    (
        "fast decode: packed weights kept after an in-place change",
        M,
        "        key = tuple((p.data_ptr(), p.dtype, p.device, p._version) for p in self.parameters())",
        "        key = tuple((p.data_ptr(), p.dtype, p.device) for p in self.parameters())",
        [f"{FD}::test_changed_weights_are_repacked"],
    ),
    (
        "onnx: the plain LSTM's graph returns logits",
        OX,
        "            log_p = torch.log_softmax(log_p, -1)",
        "            log_p = log_p",
        [f"{ONNX}::test_onnx_log_probs_match_pytorch_over_500_steps"],
    ),
    (
        "onnx int8: the adaptive head not folded, so not quantized",
        OX,
        "    fold_constants(folded)\n",
        "",
        [f"{ONNX}::test_int8_keeps_the_shipped_models_perplexity"],
    ),
    (
        "onnx int8: the tied lookup keeps its own table",
        OX,
        '        if f"{table}_Transposed_quantized" in initializers:',
        "        if False:",
        [f"{ONNX}::test_int8_file_holds_one_int8_table_for_tied_weights"],
    ),
    (
        "onnx int8: the embedding table dequantized with twice its scale",
        OX,
        "                numpy_helper.from_array(np.array(step, np.float32), scale),",
        "                numpy_helper.from_array(np.array(2 * step, np.float32), scale),",
        [f"{ONNX}::test_int8_keeps_the_shipped_models_perplexity"],
    ),
    (
        "onnx runner: rows stacked without rotating their rings",
        OG,
        "            shift = -int(s[at])",
        "            shift = 0",
        [f"{ONNX}::test_runner_greedy_equals_generate", f"{ONNX}::test_rows_prefilled_apart_step_as_one_batch"],
    ),
    (
        "onnx runner: suppress_tokens ignored",
        OG,
        "            scores[:, self.suppress] = -np.inf",
        "            pass",
        [f"{ONNX}::test_runner_suppresses_the_tokens_generate_suppresses"],
    ),
    (
        "benchmark floor: the pointer's scores not counted",
        R,
        "        macs += model.config.pointer_window * model.config.output_size",
        "        pass",
        ["tests/test_benchmarks.py::test_step_work_counts_the_issues_arithmetic_for_the_shipped_ptb_model"],
    ),
    (
        "lstm dtype: the fused LSTM stays inside autocast",
        M,
        "        with torch.autocast(x.device.type, enabled=False):",
        "        with torch.autocast(x.device.type, enabled=True):",
        ["tests/test_modeling.py::test_lstm_runs_outside_autocast_in_a_dtype_chosen_per_device"],
    ),
    (
        "lstm dtype: CUDA's LSTM in the weights' dtype, not autocast's",
        M,
        '    return torch.get_autocast_dtype("cuda") if device_type == "cuda" else weight_dtype',
        "    return weight_dtype",
        ["tests/test_modeling.py::test_lstm_runs_outside_autocast_in_a_dtype_chosen_per_device"],
    ),
    (
        "quality runs recipe: --recipe sgd trains with the adamw recipe",
        "examples/quality_runs.py",
        "    runs = train_pair(name, out, data, RECIPES[recipe],",
        '    runs = train_pair(name, out, data, RECIPES["adamw"],',
        ["tests/test_quality_runs.py::test_converge_adds_each_dataset_block_beside_the_others"],
    ),
    (
        "quality runs recipe: every recipe's block under the dataset's name",
        "examples/quality_runs.py",
        '    return name if recipe == "adamw" else f"{name}_{recipe}"',
        "    return name",
        ["tests/test_quality_runs.py::test_converge_adds_each_dataset_block_beside_the_others"],
    ),
    (
        "fast decode loop: the token masks never recomputed past min length",
        M,
        "            self.valid_below = min([u for u in untils if u > n], default=math.inf)",
        "            self.valid_below = math.inf",
        [FD],
    ),
    (
        "fast decode loop: finished rows of a batch of 2 not padded",
        M,
        "            if has_eos and B > 1:",
        "            if has_eos and B > 2:",
        [FD],
    ),
    (
        "fast decode loop: each token written over the one before",
        M,
        "            buffer.select(1, n).copy_(tokens)",
        "            buffer.select(1, n - 1).copy_(tokens)",
        [FD],
    ),
    (
        "fast decode loop: a single eos id compared the wrong way",
        M,
        "            return input_ids[:, -1] == self.eos[0]",
        "            return input_ids[:, -1] != self.eos[0]",
        [FD],
    ),
    (
        "fast decode loop, one row: the eos test inverted",
        M,
        "        return n >= self.max_length or token in self.eos_ids",
        "        return n >= self.max_length or token not in self.eos_ids",
        [f"{FD}::test_a_single_row_stops_at_eos"],
    ),
    (
        "fast decode loop, one row: the max length passed by one",
        M,
        "        return n >= self.max_length or token in self.eos_ids",
        "        return n > self.max_length or token in self.eos_ids",
        [f"{FD}::test_continuing_from_the_fast_cache_equals_one_run"],
    ),
    (
        "fast decode loop, one row: only the first eos id stops it",
        M,
        "        self.eos_ids = frozenset(self.eos.tolist()) if eos else frozenset()",
        "        self.eos_ids = frozenset(self.eos.tolist()[:1]) if eos else frozenset()",
        [f"{FD}::test_a_single_row_stops_at_eos"],
    ),
    (
        "fast decode loop: a batch takes the one-row stop",
        M,
        "        one_row = B == 1 and stop.usual",
        "        one_row = stop.usual",
        [f"{FD}::test_eos_rows_continue_with_padding_and_generation_stops"],
    ),
    (
        "fast decode loop: the in-place mask reaches the logits kept for output_logits",
        M,
        "            step_scores = log_p.float() if mix else logits.clone() if raw_logits is not None else logits",
        "            step_scores = log_p.float() if mix else logits",
        [f"{FD}::test_fast_generate_equals_forward_generate"],
    ),
    (
        "recipe study: its runs read the test split",
        "examples/recipe_study.py",
        "*data_flags(Path(data), dataset, test=False),",
        "*data_flags(Path(data), dataset),",
        ["tests/test_quality_runs.py::test_the_recipe_study_never_reads_the_test_split"],
    ),
    (
        "data flags: test=False keeps the test file",
        "examples/quality_runs.py",
        '    return flags + ["--test_file", str(f["test"])] if test else flags',
        '    return flags + ["--test_file", str(f["test"])]',
        ["tests/test_quality_runs.py::test_the_recipe_study_never_reads_the_test_split"],
    ),
    (
        "export recipe: the run folder's own block ignored",
        EXPORT,
        '        names = [run_dir.name.rsplit("_", 1)[0], dataset]',
        "        names = [dataset]",
        ["tests/test_pretrained.py::test_export_takes_the_recipe_of_the_run_it_exports"],
    ),
    (
        "export recipe: a results.json without the run's block takes the last name anyway",
        EXPORT,
        "            fail(f\"--recipe {path} has no run {' or '.join(map(repr, names))}: it has {sorted(recipe['runs'])}\")",
        "            block = names[-1]",
        ["tests/test_pretrained.py::test_export_takes_the_recipe_of_the_run_it_exports"],
    ),
    # the scripts check their command line before they import torch ("args first" picks these)
    *(
        (
            f"args first: {f} imports torch at its top",
            f"examples/{f}",
            "import argparse\n",
            "import argparse\nimport torch\n",
            ARGS_FIRST,
        )
        for f in (
            "train.py",
            "evaluate.py",
            "generate.py",
            "export_onnx.py",
            "try_pretrained.py",
            "export_pretrained.py",
            "cli.py",
        )
    ),
    (
        "args first: train.py parses only in main, after the imports",
        T,
        'if __name__ == "__main__":  # a mistaken command line fails here',
        "if False:  # a mistaken command line fails here",
        ARGS_FIRST,
    ),
    (
        "args first: train.py imports the config class before the range checks",
        T,
        "    model_overrides = read_config(p, argv)",
        "    from modeling_pointer_sentinel import PointerSentinelConfig  # noqa: F401\n    model_overrides = read_config(p, argv)",
        ARGS_FIRST,
    ),
    (
        "args first: train.py's text rules differ from the tokenizer's",
        T,
        'TEXT_RULES = ("wikitext", "ptb", "whitespace")',
        'TEXT_RULES = ("wikitext", "ptb")',
        ["tests/test_cli.py::test_train_names_the_tokenizers_text_rules"],
    ),
    (
        "args first: evaluate.py lets --dynamic_segment 0 through to main",
        "examples/evaluate.py",
        'for n in ("segment", "stats_batch_size", "grid_segments", "grid_tokens")',
        'for n in ("stats_batch_size", "grid_segments", "grid_tokens")',
        ARGS_FIRST,
    ),
    (
        "args first: evaluate.py takes --dynamic_grid without --dynamic",
        "examples/evaluate.py",
        '        p.error("--dynamic_grid needs --dynamic")',
        "        pass",
        ARGS_FIRST,
    ),
]
# An entry is (name, file, code, broken code) and may end with the test files that guard it; the default is TESTS.
TESTS = ["tests/test_modeling.py", "tests/test_regularisers.py", "tests/test_hf_fit.py"]


def failures(work, env, tests) -> list[str]:
    """The tests of `tests` that fail in the copy `work`."""
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *tests],
                         cwd=work, env=env, capture_output=True, text=True)  # fmt: skip
    if run.returncode not in (0, 1):  # pytest did not run the tests (no pytest or torch here, a bad test id, ...)
        sys.exit(f"pytest exited {run.returncode}, so nothing can be judged:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    # A test whose fixture breaks ERRORs rather than FAILs: that is a catch too.
    return sorted({ln.split(" ")[1].split("[")[0] for ln in run.stdout.splitlines()
                   if ln.startswith(("FAILED", "ERROR"))})  # fmt: skip


def main(words=()):
    missed = []
    chosen = [m for m in MUTS if not words or any(w in m[0] for w in words)]
    if not chosen:  # else the guards would be no test files, and pytest would run the whole suite
        sys.exit(f"no break's name contains any of {list(words)}")
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp) / "copy"
        subprocess.run(f"git -C {ROOT} archive --format=tar HEAD | tar -x -C {tmp} --one-top-level=copy", shell=True,
                       check=True)  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(work), "OMP_NUM_THREADS": "1"}
        # The unbroken suite first: a test that already fails would make every break look caught.
        guards = sorted({t for _, _, _, _, *tests in chosen for t in (tests[0] if tests else TESTS)})
        if baseline := failures(work, env, guards):
            sys.exit(f"the unbroken suite fails, so no break can be judged: {baseline}")
        print(json.dumps({"baseline": "passed", "tests": guards}), flush=True)
        for name, f, old, new, *tests in chosen:
            # The shipped folders' copies of the model's code are broken alike: a catch by the test that holds the
            # copies equal to the package would be no catch.
            paths = [work / f]
            if f in (M, C) and "stay stale" not in name:  # that entry checks the copies-equal test itself
                paths += [p for p in (work / "pretrained").glob(f"*/{pathlib.Path(f).name}") if old in p.read_text()]
            originals = {p: p.read_text() for p in paths}
            assert originals[work / f].count(old) == 1, f"{name}: the code to break is not found once in {f}"
            for p, text in originals.items():
                p.write_text(text.replace(old, new))
            failed = failures(work, env, tests[0] if tests else TESTS)
            for p, text in originals.items():
                p.write_text(text)
            print(json.dumps({"break": name, "failed": failed}), flush=True)
            if not failed:
                missed.append(name)
    if missed:
        sys.exit(f"breaks no test caught: {missed}")


if __name__ == "__main__":
    main(sys.argv[1:])
