"""Generation for the Pointer Sentinel-LSTM: the recurrent cache and what `generate` runs after the prompt.

The floor below the model, as transformers' `cache_utils` and `generation` are: the modeling file imports this
module, never the other way round. It holds the recurrent cache (forward's too) and the decode step's ring state
(`DecodeState`), the token masks and stops the step's loop applies in place of transformers' per-step lists, the
stash and logits processor that mix the pointer into the scores, and `PointerSentinelGenerationMixin`, which holds
every override of transformers' private generate hooks (`_sample`, `_prepare_cache_for_generation`,
`_get_logits_processor`, `_supports_default_dynamic_cache`; `_sample` calls `_prefill` and
`_update_model_kwargs_for_generation`). tests/test_hf_integration.py checks each hook's signature against the
installed transformers.

No equation lives here: the mixin and the processor reach the model's maths through the model they serve, as
transformers' generate reaches its forward. The model provides `_packed_weights` and `_decode_step` (the fast decode
step, `decode_step`: forward's arithmetic at T = 1, beside forward in the modeling file) and `_mix_stashed` (the
mixture (2.4) at the position forward stashed).
"""

import math
import os
from typing import NamedTuple

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, LogitsProcessor
from transformers.generation.logits_process import (
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
)
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.generation.utils import GenerateDecoderOnlyOutput

# ---- The recurrent cache (forward's too) ----------------------------------------------------------------------------


class PointerSentinelCache:
    """Everything the model carries between calls: per-layer LSTM (h, c) and the pointer window.

    window_states (B, L, D), window_ids (B, L) and window_mask (B, L) hold the last L real positions, oldest first;
    the mask is False where no token exists yet. Duck-typed on purpose: a `transformers.Cache` would make `generate`
    build 4-D attention masks and try to compile the forward.
    """

    is_compileable = False
    is_croppable = False  # a recurrent state cannot be rolled back

    def __init__(self):
        self.hidden: list[torch.Tensor] | None = None  # per layer (B, H_l)
        self.cell: list[torch.Tensor] | None = None
        self.window_states: torch.Tensor | None = None
        self.window_ids: torch.Tensor | None = None
        self.window_mask: torch.Tensor | None = None
        self.window_context: torch.Tensor | None = None  # (B, L, D) each window key's c_i, with `config.oov_pointer`
        self.oov_used: torch.Tensor | None = None  # (B,) slots each row has used, k, with `config.oov_slots`
        self.unk_count: torch.Tensor | None = None  # (B,) its literal <unk>, n_unk (`new_word`)
        # With `config.speller_size`: each row's spelled words (`SpelledRows`), and what the last word step left for
        # the bytes after it (`SpellAnchor`)
        self.spelled_rows = None
        self.spell_anchor = None
        self.seen_tokens = 0

    @property
    def batch_size(self) -> int | None:
        return None if self.hidden is None else self.hidden[0].shape[0]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    def _map(self, fn):
        if self.hidden is not None:
            self.hidden = [fn(h) for h in self.hidden]
            self.cell = [fn(c) for c in self.cell]
        if self.window_states is not None:
            self.window_states, self.window_ids, self.window_mask = (
                fn(t) for t in (self.window_states, self.window_ids, self.window_mask)
            )
        if self.window_context is not None:
            self.window_context = fn(self.window_context)
        if self.oov_used is not None:
            self.oov_used, self.unk_count = fn(self.oov_used), fn(self.unk_count)
        if self.spell_anchor is not None:
            self.spell_anchor = type(self.spell_anchor)(*(fn(t) for t in self.spell_anchor))
        if self.spelled_rows is not None:  # rows of Python state: the same selection, read off the row numbers
            self.spelled_rows = self.spelled_rows.select(fn(torch.arange(len(self.spelled_rows.rows))).tolist())
        return self

    def reorder_cache(self, beam_idx: torch.LongTensor):
        return self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_select_indices(self, indices: torch.Tensor):
        return self._map(lambda t: t[indices])

    def batch_repeat_interleave(self, repeats: int):
        return self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def detach_(self):
        """Cut the graph (truncated BPTT): the state and window carry values, not gradients, into the next segment."""
        return self._map(torch.Tensor.detach)

    def reset(self):
        self.__init__()

    def crop(self, max_length: int):
        raise NotImplementedError("A recurrent state cannot be cropped.")

    def state_dict(self) -> dict:
        return dict(vars(self))

    def load_state_dict(self, state: dict):
        vars(self).update(state)


class DecodeState(NamedTuple):
    """What one decode step reads and updates in place: per-layer (h, c), and the window as a ring of L slots
    (keys, ids, valid; with `config.oov_pointer` also each key's c_i, context) of which `slot` is the next to write;
    with `config.oov_slots` each row's history, used (k) and unk_count (n_unk) (`new_word`). Attention is a softmax
    over the slots and the mixture sums per word, so their order does not matter; the cache gets them back oldest
    first."""

    hidden: list[torch.Tensor]
    cell: list[torch.Tensor]
    keys: torch.Tensor | None  # (B, L, D)
    ids: torch.Tensor | None  # (B, L)
    valid: torch.Tensor | None  # (B, L)
    slot: torch.Tensor  # () long
    context: torch.Tensor | None = None  # (B, L, D)
    used: torch.Tensor | None = None  # (B,) long
    unk_count: torch.Tensor | None = None  # (B,) long
    attention: torch.Tensor | None = None  # (B, L) the step's log attention, kept where given (the speller's copies)


def decode_state(cache: PointerSentinelCache) -> DecodeState:
    """The cache after the prompt as a DecodeState (copies: the cache is written back once, at the end)."""
    window = cache.window_states is not None
    return DecodeState(
        [h.clone() for h in cache.hidden], [c.clone() for c in cache.cell],
        cache.window_states.clone() if window else None, cache.window_ids.clone() if window else None,
        cache.window_mask.clone() if window else None, torch.zeros((), dtype=torch.long, device=cache.hidden[0].device),
        cache.window_context.clone() if cache.window_context is not None else None,
        *((cache.oov_used.clone(), cache.unk_count.clone()) if cache.oov_used is not None else ()),
    )  # fmt: skip


def write_back(state: DecodeState, cache: PointerSentinelCache, steps: int):
    """The decoded steps into the cache, the window oldest first again."""
    cache.hidden, cache.cell = state.hidden, state.cell
    if state.used is not None:
        cache.oov_used, cache.unk_count = state.used, state.unk_count
    if state.keys is not None:
        shift = -int(state.slot)
        cache.window_states, cache.window_ids, cache.window_mask = (
            torch.roll(t, shift, 1) for t in (state.keys, state.ids, state.valid)
        )
        if state.context is not None:
            cache.window_context = torch.roll(state.context, shift, 1)
    cache.seen_tokens += steps


class _TokenMask(LogitsProcessor):
    """-inf on fixed sets of tokens, each while the sequence is shorter than its `until` length: transformers'
    SuppressTokens, MinLength and MinNewTokensLength processors (next to each other in a list) as one index_fill.
    Theirs each build a (V,) mask with arange + isin and apply it with where at every call: passes over V that at
    V = 10k on one CPU thread cost as much as the decode step's own pointwise work. The ids to mask change only
    where a length passes an `until`, so they are found again only there. It masks in place: the decode loop hands
    it scores that nothing else holds."""

    def __init__(self, tokens: torch.Tensor, until: float):
        self.parts, self.ids = [(tokens.reshape(-1), until)], None
        self.valid_from, self.valid_below = math.inf, -math.inf  # the lengths the ids hold for: none yet

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        n = input_ids.shape[-1]
        if not self.valid_from <= n < self.valid_below:
            ids = torch.cat([t for t, until in self.parts if n < until] or [self.parts[0][0][:0]])
            ids = ids.to(scores.device).unique()
            self.ids = ids[(ids >= 0) & (ids < scores.shape[-1])]  # theirs ignores ids outside the vocabulary
            untils = [u for _, u in self.parts]
            self.valid_from = max([u for u in untils if u <= n], default=-math.inf)
            self.valid_below = min([u for u in untils if u > n], default=math.inf)
        return scores if self.ids.numel() == 0 else scores.index_fill_(-1, self.ids, -torch.inf)


LAZY_MARGIN = 1e-3  # nats: above the rounding of a byte's log p, so a word that clears it beats every byte


def _unchanged(input_ids, scores):
    return scores


def _mask_once(processors):
    """The decode loop's processors as one callable: the fixed-mask ones replaced by `_TokenMask`, every other one as
    given, called in turn. `LogitsProcessorList` reads each processor's signature at every call (0.1 ms a step)
    to pass extra keyword arguments, and `_sample` passes none."""
    out = []
    for p in processors:
        if type(p) is SuppressTokensLogitsProcessor:
            p = _TokenMask(p.suppress_tokens, math.inf)
        elif type(p) is MinLengthLogitsProcessor:
            p = _TokenMask(p.eos_token_id, p.min_length)
        elif type(p) is MinNewTokensLengthLogitsProcessor:
            p = _TokenMask(p.eos_token_id, p.prompt_length_to_skip + p.min_new_tokens)
        if isinstance(p, _TokenMask) and out and isinstance(out[-1], _TokenMask):
            out[-1].parts += p.parts
        else:
            out.append(p)

    def chain(processors):
        def call(input_ids, scores):
            for p in processors:
                scores = p(input_ids, scores)
            return scores

        return call

    call = chain(out)
    # The leading masks, which can only lower a score, and what follows them. When that is temperatures (which keep
    # the order) and then top-k, the k largest masked scores are the only ones sampling can draw (`top_k`).
    masks = next((i for i, p in enumerate(out) if not isinstance(p, _TokenMask)), len(out))
    rest = out[masks:]
    call.masks, call.rest, call.masks_only = chain(out[:masks]), chain(rest), not rest
    after = next((p for p in rest if type(p) is not TemperatureLogitsWarper), None)
    call.top_k = after.top_k if type(after) is TopKLogitsWarper else None
    return call


class _Stop:
    """The stopping criteria as one callable: generate's usual pair, max length and EOS ids, as an int comparison and
    one isin (transformers' list allocates and ORs a flag tensor per criterion at every step); any other list as
    given. For the usual pair `one(length, token)` is the same test on a single row's token read to the host."""

    def __init__(self, criteria):
        self.criteria = criteria
        self.usual = all(type(c) in (MaxLengthCriteria, EosTokenCriteria) for c in criteria) and not any(
            getattr(c, "max_position_embeddings", None) is not None for c in criteria
        )
        if not self.usual:
            return
        self.max_length = min((c.max_length for c in criteria if type(c) is MaxLengthCriteria), default=math.inf)
        eos = [c.eos_token_id.reshape(-1) for c in criteria if type(c) is EosTokenCriteria]
        self.eos = torch.cat(eos) if eos else None
        self.eos_ids = frozenset(self.eos.tolist()) if eos else frozenset()

    def one(self, n: int, token: int) -> bool:
        return n >= self.max_length or token in self.eos_ids

    def __call__(self, input_ids, scores):
        if not self.usual:
            return self.criteria(input_ids, scores)
        B, n = input_ids.shape
        if n >= self.max_length:
            return torch.ones(B, dtype=torch.bool, device=input_ids.device)
        if self.eos is None:
            return torch.zeros(B, dtype=torch.bool, device=input_ids.device)
        if self.eos.numel() == 1:  # half the time of isin at batch 1
            return input_ids[:, -1] == self.eos[0]
        return torch.isin(input_ids[:, -1], self.eos.to(input_ids.device))


class PointerStash:
    """Per-`generate` hand-off from forward to `PointerSentinelLogitsProcessor`: the last position's gate,
    attention and window ids. The forward then returns the vocabulary logits and the processor mixes; `mix=False`
    (generate's `pointer_mix=False`) leaves the vocabulary softmax alone."""

    def __init__(self, mix: bool = True, decode_step: str = "fast"):
        self.mix, self.decode_step = mix, decode_step
        self.log_gate: torch.Tensor | None = None
        self.log_attention: torch.Tensor | None = None
        self.window_ids: torch.Tensor | None = None
        self.placeholders = None  # the model's `Placeholders`, or None for a closed vocabulary
        self.suppress_new_slot = False  # generate suppresses <unk>, so each row's next unused slot too


class PointerSentinelLogitsProcessor(LogitsProcessor):
    """Mixes the pointer's mass over the current window into the vocabulary scores (§2.6: at prediction time at
    most L word probabilities are mixed), by the model's own mixture (`_mix_stashed`; it holds the model, as
    transformers' classifier-free guidance processor does). Returns log p_mix, so warpers that follow act on the
    mixture. The model puts it first in generate's processor list; pass `pointer_mix=False` to `generate` to skip it."""

    def __init__(self, stash: PointerStash, model):
        self.stash, self.model = stash, model

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.stash.log_gate is None:
            raise ValueError("PointerSentinelLogitsProcessor needs a forward pass that filled its PointerStash.")
        mixed, places = self.model._mix_stashed(scores, self.stash), self.stash.placeholders
        if self.stash.suppress_new_slot:  # columns in token-id order: the placeholders follow the vocabulary
            mixed = suppress_new_slot(mixed, self.model.config.vocab_size, places.n, places.used)
        return mixed


def suppress_new_slot(scores: torch.Tensor, first: int, n: int, used: torch.Tensor | None) -> torch.Tensor:
    """-inf, in place, on each row's next unused slot first + k (k = used < n): a new word, which has no spelling to
    write, as `<unk>` has none. scores (B, first + n), used (B,)."""
    if used is None:
        return scores
    k = used.unsqueeze(-1)
    column = (first + k).clamp(max=scores.shape[-1] - 1)
    return scores.scatter_(-1, column, torch.where(k < n, -torch.inf, scores.gather(-1, column)))


class PointerSentinelGenerationMixin(GenerationMixin):
    """`generate` for `PointerSentinelForCausalLM`: greedy search and sampling on the fast decode step, the pointer
    mixed first among the logits processors, and the model's own recurrent cache. The step itself is the model's
    (`_packed_weights`, `_decode_step`), as forward is."""

    def generate(self, *args, pointer_mix: bool | None = None, decode_step: str = "fast", **kwargs):
        r"""
        pointer_mix: False samples from the vocabulary softmax alone (default True: the pointer mixture).
        decode_step: how greedy search and sampling run after the prompt. "fast" (default): `decode_step`, one
            token per call on packed weights and a preallocated state and window, the same tokens and scores as
            "forward"; "compiled": that step under `torch.compile`, which pays only over long generations (compiling
            takes many seconds, once per model and batch size); "forward": the model's forward at each token, in
            transformers' own loop. Beam search always uses the forward.
        """
        if decode_step not in ("fast", "compiled", "forward"):
            raise ValueError(f'decode_step must be "fast", "compiled" or "forward", got {decode_step!r}.')
        config = kwargs.get("generation_config") or self.generation_config
        if kwargs.get("penalty_alpha", getattr(config, "penalty_alpha", None)):
            raise ValueError(
                "Contrastive search is not supported: it scores candidate tokens and rolls the cache back, and a "
                "recurrent state cannot be rolled back. Use greedy, sampling or beam search."
            )
        ids = args[0] if args else kwargs.get("inputs", kwargs.get("input_ids"))
        mask = kwargs.get("attention_mask")
        # generate drops an all-ones mask before the forward sees it, so check the shape here.
        if isinstance(ids, torch.Tensor) and isinstance(mask, torch.Tensor) and mask.shape != ids.shape:
            raise ValueError(
                f"attention_mask of shape {tuple(mask.shape)} does not fit the prompt's input_ids of shape "
                f"{tuple(ids.shape)}: give one mask entry per prompt token."
            )
        if self.config.speller_size:  # forward gives the whole mixture, bytes and all
            if pointer_mix is False:
                raise ValueError("pointer_mix=False: with the speller the pointer's copies are part of every word.")
            if decode_step == "compiled":
                raise ValueError('decode_step="compiled" is not available with the speller: use "fast" or "forward".')
        # Both travel in the per-call stash (a model kwarg), not in the generation config.
        kwargs["pointer_stash"] = PointerStash(mix=pointer_mix is not False, decode_step=decode_step)
        return super().generate(*args, **kwargs)

    def _sample(self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False,
                streamer=None, **model_kwargs):  # fmt: skip
        """Greedy search and sampling. After the prompt (transformers' prefill), each token is one `decode_step`
        instead of a forward call; token selection, processors, stopping criteria, streamer and outputs are those
        of transformers' `_sample`. Falls back to it where the step does not apply."""
        stash = model_kwargs.get("pointer_stash") or PointerStash()
        # the spelled step is one row's (its word steps and bytes interleave differently in each row)
        spelled = self.config.speller_size and not self.config.vocab_limit and input_ids.shape[0] == 1
        if (stash.decode_step == "forward" or synced_gpus or self.training or generation_config.output_hidden_states
                or model_kwargs.get("past_key_values") is None
                or (self.config.speller_size and not spelled)):  # fmt: skip
            return super()._sample(input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus,
                                   streamer, **model_kwargs)  # fmt: skip
        outputs = self._prefill(input_ids, generation_config, model_kwargs)
        model_kwargs = self._update_model_kwargs_for_generation(outputs, model_kwargs)
        cache = model_kwargs["past_key_values"]
        weights, state, compiled = self._packed_weights(), decode_state(cache), stash.decode_step == "compiled"
        mix = stash.mix and self.pointer is not None
        if spelled:
            state, spell = self._spell_state(cache, state)
        # The prompt's last position comes from forward, which leaves the mixing to the pointer's processor.
        later = _mask_once(p for p in logits_processor if not isinstance(p, PointerSentinelLogitsProcessor))
        logits = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=input_ids.device)
        processors, step_scores = logits_processor, logits
        del outputs

        pad = generation_config._pad_token_tensor
        has_eos, stop = any(hasattr(c, "eos_token_id") for c in stopping_criteria), _Stop(stopping_criteria)
        keep = generation_config.return_dict_in_generate
        scores = () if keep and generation_config.output_scores else None
        raw_logits = () if keep and generation_config.output_logits else None
        # Greedy, or top-k sampling, whose scores nothing keeps: a word step's speller is started only when a first
        # byte could be drawn. No byte can be among the k best when the k-th best word's log p is above the unseen
        # word's whole mass (a byte's share of it; a mask only lowers it), so the words decide alone: the same
        # choice, the speller's products skipped at most word steps.
        top = later.top_k if generation_config.do_sample else 1 if later.masks_only else None
        lazy = (spelled and top is not None and scores is None and raw_logits is None
                and not self.config.added_tokens)  # fmt: skip
        pending, V, width = None, self.config.vocab_size, logits.shape[-1]
        B, n = input_ids.shape
        unfinished = torch.ones(B, dtype=torch.bool, device=input_ids.device)
        one_row = B == 1 and stop.usual  # a single row's stop is a Python test on its token
        # The sequences grow in place in one buffer (a cat per token copies them all); processors see views. It
        # doubles when full, up to max length: a max_new_tokens of 10**12 holds no memory for tokens not yet made.
        total = max(generation_config.max_length, n + 1)  # max length stops it there
        buffer = input_ids.new_empty(B, min(total, n + 1024))
        buffer[:, :n] = input_ids
        steps = 0
        while True:
            next_scores = processors(input_ids, step_scores)
            if scores is not None:
                scores += (next_scores,)
            if raw_logits is not None:
                raw_logits += (logits,)
            if generation_config.do_sample:
                tokens = torch.multinomial(F.softmax(next_scores, -1), num_samples=1).squeeze(1)
            else:
                tokens = torch.argmax(next_scores, -1)
            if has_eos and B > 1:  # finished rows continue with padding (a single row stops when it finishes)
                tokens = torch.where(unfinished, tokens, pad)
            if n == buffer.shape[1]:
                buffer = torch.cat([buffer, buffer.new_empty(B, min(n, total - n))], 1)
            buffer.select(1, n).copy_(tokens)
            n += 1
            input_ids = buffer.narrow(1, 0, n)
            if one_row:  # reads the token to the host once, as any() below would
                last = tokens.item()
                done = stop.one(n, last)
            else:
                unfinished &= ~stop(input_ids, scores)
                done = not unfinished.any()
            if streamer is not None:
                streamer.put(tokens.cpu())
            if done:
                break
            steps += 1
            if spelled:  # the whole mixture, as forward's logits are
                token = last if one_row else int(tokens[0])
                word_step = lazy and self._word_step(weights, token)
                log_p = self._spelled_step(weights, state, spell, token, word_step)
                logits, processors, pending = log_p.float(), later, None
                if word_step:  # the words' log p, the bytes -inf; the slots' total bounds every byte
                    words = later.masks(input_ids, F.pad(logits[:, :V], (0, width - V), value=-torch.inf))
                    kth = words.amax(-1) if top == 1 else words.topk(min(top, V)).values[:, -1]  # amax: 1/6 the time
                    if bool(kth > logits[:, V:].logsumexp(-1) + LAZY_MARGIN):
                        step_scores, processors, pending = later.rest(input_ids, words), _unchanged, log_p
                        continue
                    logits = self._finish_word_step(weights, state, spell, log_p).float()
                step_scores = logits.clone() if raw_logits is not None else logits
                continue
            log_p, vocab = self._decode_step(weights, state, tokens, mix, compiled)  # generate runs under no_grad
            if mix and stash.suppress_new_slot:
                log_p = suppress_new_slot(log_p, self.config.vocab_size, self.config.oov_slots, state.used)
            logits = vocab.float()
            # later masks in place, so it gets scores of its own, never the logits kept for output_logits
            step_scores = log_p.float() if mix else logits.clone() if raw_logits is not None else logits
            processors = later
        write_back(state, cache, steps)
        if pending is not None:  # the anchor the cache keeps needs the last word step's copies
            self._finish_word_step(weights, state, spell, pending)
        if spelled:
            self._spell_write_back(state, spell, cache)
        if streamer is not None:
            streamer.end()
        input_ids = input_ids.contiguous()
        if keep:
            return GenerateDecoderOnlyOutput(sequences=input_ids, scores=scores, logits=raw_logits,
                                             past_key_values=cache)  # fmt: skip
        return input_ids

    def compute_transition_scores(self, sequences, scores, beam_indices=None, normalize_logits=False):
        """transformers' own, reading the scores at their width: with placeholders the mixture has vocab_size +
        oov_slots outputs, and transformers indexes the scores by config.vocab_size."""
        config, vocab_size = self.config, self.config.vocab_size
        config.vocab_size = scores[0].shape[-1]
        try:
            return super().compute_transition_scores(sequences, scores, beam_indices, normalize_logits)
        finally:
            config.vocab_size = vocab_size

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model makes its own PointerSentinelCache

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        beams, length = generation_config.num_beams or 1, generation_config.max_length or 0
        need, memory = beams * length * 8, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGESIZE")
        if beams > 1 and need > memory:  # transformers' beam search holds (batch, beams, max_length) ids up front
            raise ValueError(
                f"max_new_tokens: beam search keeps {beams} x {length:,} ids per prompt from the start, "
                f"{need / 2**30:,.0f} GiB, more than this machine's {memory / 2**30:,.0f} GiB; ask for fewer tokens."
            )
        cache = model_kwargs.get("past_key_values")
        if cache is not None:
            if not isinstance(cache, PointerSentinelCache) and type(cache).__name__ != "PointerSentinelCache":
                raise ValueError(f"past_key_values must be a PointerSentinelCache, got {type(cache).__name__}.")
            cache._is_user_defined = True
        elif generation_config.use_cache is not False:
            model_kwargs["past_key_values"] = PointerSentinelCache()

    def _get_logits_processor(self, generation_config, *args, model_kwargs=None, **kwargs):
        processors = super()._get_logits_processor(generation_config, *args, model_kwargs=model_kwargs, **kwargs)
        if self.pointer is not None and model_kwargs is not None and not self.config.speller_size:
            # Forward hands the pointer to this stash and returns vocabulary logits; the processor mixes first,
            # so repetition penalty, temperature, top-k/p act on the mixture. pointer_mix=False skips the mixing.
            stash = model_kwargs.setdefault("pointer_stash", PointerStash())
            stash.suppress_new_slot = self.config.unk_token_id in (generation_config.suppress_tokens or [])
            if stash.mix:
                processors.insert(0, PointerSentinelLogitsProcessor(stash, self))
        return processors


__all__ = [
    "DecodeState",
    "PointerSentinelCache",
    "PointerSentinelGenerationMixin",
    "PointerSentinelLogitsProcessor",
    "PointerStash",
    "decode_state",
    "write_back",
]
