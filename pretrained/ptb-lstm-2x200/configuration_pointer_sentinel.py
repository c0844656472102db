"""Configuration of the Pointer Sentinel-LSTM (Merity, Xiong, Bradbury & Socher, 2016)."""

import dataclasses
import difflib
from itertools import pairwise

from huggingface_hub.dataclasses import strict
from transformers import GenerationConfig, PreTrainedConfig
from transformers.utils import logging

logger = logging.get_logger(__name__)

GATE_TYPES = ("sentinel", "switch")
# Keys that are not fields yet reach __post_init__ from a config.json or from transformers itself: PreTrainedConfig
# consumes them (dtype and label BC, attention settings, the checkpoint's name) or to_dict writes them (model_type,
# auto_map). Generation settings are dropped by PreTrainedConfig on purpose (they belong in generation_config.json).
TRANSFORMERS_KEYS = frozenset({
    "model_type", "auto_map", "name_or_path", "_name_or_path", "_commit_hash", "torch_dtype", "num_labels",
    "output_attentions", "attn_implementation", "experts_implementation", "per_layer_config", "quantization_config",
    "_attn_implementation_internal", "_experts_implementation_internal", "_attn_implementation_autoset",
    "custom_pipelines",  # read by transformers.pipeline for a folder's own pipeline class
})  # fmt: skip
GENERATION_KEYS = frozenset(GenerationConfig().to_dict())


def warn_unknown_keys(config, kwargs: dict):
    """Warn about each key that is neither a field of `config` nor one transformers handles, naming the nearest field.

    A warning, not an error, as transformers does it: every PreTrainedConfig subclass accepts unknown keyword
    arguments (`accept_kwargs`, huggingface_hub's strict dataclasses) and PreTrainedConfig.__post_init__ keeps them as
    attributes, so that a config.json written by a newer version (with fields this version lacks) or carrying a
    user's own keys still loads. Raising would break that for this model alone; loading silently would hide a typo
    such as `pointer_windw` behind the default.
    """
    fields = [f.name for f in dataclasses.fields(config)] + list(config.attribute_map)
    for key in sorted(set(kwargs) - set(fields) - TRANSFORMERS_KEYS - GENERATION_KEYS):
        near = difflib.get_close_matches(key, fields, n=1)
        hint = f"did you mean {near[0]!r}?" if near else "no field has a similar name."
        logger.warning_once(f"{type(config).__name__}: unknown key {key!r} (kept as an attribute, unused by the "
                            f"model); {hint}")  # fmt: skip


@strict
class PointerSentinelConfig(PreTrainedConfig):
    r"""
    An LSTM language model with a pointer over its last `pointer_window` hidden states, mixed with the
    vocabulary softmax by a sentinel gate. Every regulariser defaults to off, so a bare config is the plain model.

    vocab_size (`int`): words in the vocabulary (10,000 for PTB, 33,278 for WikiText-2), added tokens not counted.
    embedding_size (`int`): width of the word embeddings; may differ from `hidden_size` (AWD-LSTM style).
    hidden_size (`int`): units of every LSTM layer but the last (see `output_size`).
    num_hidden_layers (`int`): LSTM layers (alias `num_layers`).
    tie_word_embeddings (`bool`): share the output softmax matrix with the embeddings; the last LSTM layer then
        has `embedding_size` units so the shapes match (AWD-LSTM).
    pointer_window (`int`): L, the number of most recent positions (current one included) the pointer sees.
    use_pointer (`bool`): False gives the plain LSTM LM baseline through the same code.
    gate_type (`str`): "sentinel" (the paper) or "switch" (a sigmoid MLP on h_t, Gulcehre et al.'s pointer
        softmax; the ablation).
    pointer_loss_weight (`float`): weight of the auxiliary loss -log(g + sum_{x_i = y} a_i) (paper section 2.6).
    embedding_dropout (`float`): drops whole rows of the embedding matrix (whole words).
    input_dropout / hidden_dropout / output_dropout (`float`): locked (variational) dropout on the embeddings,
        between LSTM layers, and on the last layer's outputs; one mask per sequence, shared over time.
    weight_drop (`float`): DropConnect on the hidden-to-hidden matrices (AWD-LSTM).
    zoneout (`float`): zoneout probability on the LSTM cell and hidden states (the paper's LSTM); runs a
        step-by-step loop instead of the fused kernel.
    init_range (`float`): embeddings and the untied softmax matrix are drawn from U(-init_range, init_range);
        other weights from U(-1/sqrt(fan), 1/sqrt(fan)).
    adaptive_softmax_cutoffs (`list[int]`): Grave et al.'s adaptive softmax for p_vocab; empty (the default) keeps
        the full softmax. Cutoffs c_0 < c_1 < ... split the ids: the head scores words [0, c_0) and one token per
        tail cluster [c_i, c_{i+1}) (the last ends at vocab_size), and p(w) = p_head(cluster) p_cluster(w). Ids must
        be numbered by frequency, as the word-level tokenizer numbers them. Tail i projects h_t to
        output_size // div^(i+1) units, then scores its words. With `tie_word_embeddings` the head's rows of the
        frequent words are the embedding matrix's first c_0 rows; the cluster tokens' rows and the tails are their
        own. The output rows are drawn as the softmax matrix's (U(-init_range, init_range), biases 0), the tails'
        projections from U(-1/sqrt(fan), 1/sqrt(fan)).
    adaptive_softmax_div_value (`float`): div, >= 1: each tail cluster's projection is div times narrower than the
        one before (Grave's 4). Below 1 a tail would be wider than h_t, adding parameters but no rank.
    oov_slots (`int`): N placeholder ids vocab_size ... vocab_size + N - 1 for words outside the vocabulary, one per
        distinct word of a text (the tokenizer assigns them and writes the words back). A placeholder reads
        `unk_token_id`'s embedding; the pointer copies it, so the mixture has vocab_size + N outputs. 0 (the
        default) keeps the closed vocabulary.
    oov_pointer (`bool`): the placeholders get their own embedding and their own pointer query q~_t =
        tanh(W~ h_t + b~), which scores the window's placeholder positions (q_t scores the rest): a head trained to
        copy unseen words (`examples/train.py --oov_pointer`). Text without placeholders scores exactly as without
        it. Needs `oov_slots` and the pointer.
    unk_token_id (`int`): the vocabulary's `<unk>`, whose softmax mass stands for every word outside the vocabulary
        (needed with `oov_slots`).
    speller_size (`int`): > 0: the ids carry the text. A word outside the vocabulary is written at every occurrence
        as its UTF-8 bytes, ids vocab_size ... vocab_size + 255, closed by `</w>` (vocab_size + 256; a word over 64
        bytes goes on after `<+w>`, vocab_size + 257), and a byte LSTM of this size, started from h_t, spells it
        (`Speller`). The `oov_slots` become the model's own numbering of a text's spelled words (the tokenizer
        writes none), so the mixture has vocab_size + 258 outputs. Needs `oov_slots` > `pointer_window`. 0 (the
        default): placeholders, as above.
    vocab_limit (`int`): with the speller, K > 0 keeps only the K most frequent words (ids below K): the others are
        spelled, and their share of p_vocab goes to `<unk>`'s, the unseen-word mass, so the model is a K-word model
        with a speller (an open-vocabulary protocol: its figures on a corpus measure the speller on real words). 0
        (the default) keeps the whole vocabulary.
    added_tokens (`int`): tokens added to the tokenizer after its words and the ids above (`tokenizer.add_tokens`,
        then `model.resize_token_embeddings(len(tokenizer))`, which sets it): words of the model's own, whose ids
        follow the placeholders or the spelling symbols and whose rows follow the vocabulary's in the word tables
        (`num_words`; with the adaptive softmax, in its last cluster). 0 (the default): none.
    """

    model_type = "pointer_sentinel_lstm"
    attribute_map = {"num_layers": "num_hidden_layers"}
    # Trainer's predictions are the logits alone (as for GPT-2): every other output is left out of evaluation.
    keys_to_ignore_at_inference = ["past_key_values", "hidden_states", "vocab_logits", "gate", "pointer_attention",
                                   "pointer_loss", "last_hidden_state", "split_state", "target_log_probs",
                                   "vocab_target_log_probs"]  # fmt: skip

    vocab_size: int = 10000
    embedding_size: int = 650
    hidden_size: int = 650
    num_hidden_layers: int = 2
    tie_word_embeddings: bool = False
    pointer_window: int = 100
    use_pointer: bool = True
    gate_type: str = "sentinel"
    pointer_loss_weight: float = 0.0
    embedding_dropout: float = 0.0
    input_dropout: float = 0.0
    hidden_dropout: float = 0.0
    output_dropout: float = 0.0
    weight_drop: float = 0.0
    zoneout: float = 0.0
    init_range: float = 0.1
    adaptive_softmax_cutoffs: list[int] = dataclasses.field(default_factory=list)
    adaptive_softmax_div_value: float = 4.0
    oov_slots: int = 0
    oov_pointer: bool = False
    unk_token_id: int | None = None
    speller_size: int = 0
    vocab_limit: int = 0
    added_tokens: int = 0
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    use_cache: bool = True

    def __post_init__(self, **kwargs):
        warn_unknown_keys(self, kwargs)
        super().__post_init__(**kwargs)
        self.validate_architecture()

    @property
    def output_size(self) -> int:
        """Width of h_t, the last LSTM layer's output that feeds the softmax and the pointer."""
        return self.embedding_size if self.tie_word_embeddings else self.hidden_size

    @property
    def num_words(self) -> int:
        """Rows of the word tables (embedding, output layer): the vocabulary, then the added tokens."""
        return self.vocab_size + self.added_tokens

    def validate_architecture(self):
        """Raise a clear ValueError for any setting the model cannot run with."""
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "pointer_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        if self.gate_type not in GATE_TYPES:
            raise ValueError(f"gate_type must be one of {GATE_TYPES}, got {self.gate_type!r}.")
        for name in ("embedding_dropout", "input_dropout", "hidden_dropout", "output_dropout", "weight_drop"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must lie in [0, 1), got {getattr(self, name)}.")
        if not 0.0 <= self.zoneout < 1.0:
            raise ValueError(f"zoneout must lie in [0, 1), got {self.zoneout}.")
        if self.pointer_loss_weight < 0:
            raise ValueError(f"pointer_loss_weight must be >= 0, got {self.pointer_loss_weight}.")
        if self.init_range <= 0:
            raise ValueError(f"init_range must be > 0, got {self.init_range}.")
        cutoffs, div = self.adaptive_softmax_cutoffs, self.adaptive_softmax_div_value
        if any(b <= a for a, b in pairwise(cutoffs)) or not all(0 < c < self.vocab_size for c in cutoffs):
            raise ValueError(f"adaptive_softmax_cutoffs must increase strictly, each in (0, vocab_size="
                             f"{self.vocab_size}), got {cutoffs}.")  # fmt: skip
        if not div >= 1:
            raise ValueError(f"adaptive_softmax_div_value must be >= 1, got {div}.")
        if cutoffs and self.output_size // div ** len(cutoffs) < 1:
            raise ValueError(
                f"adaptive_softmax_div_value={div} leaves the last of {len(cutoffs)} tail clusters no "
                f"units (output size {self.output_size}); use a smaller div or fewer cutoffs."
            )
        if self.oov_slots < 0:
            raise ValueError(f"oov_slots must be >= 0, got {self.oov_slots}.")
        if self.oov_slots and self.unk_token_id is None:
            raise ValueError("oov_slots needs unk_token_id: a placeholder reads the <unk> embedding.")
        if self.oov_pointer and not (self.oov_slots and self.use_pointer):
            raise ValueError(
                "oov_pointer needs oov_slots > 0 and use_pointer: it is the pointer's head for placeholders."
            )
        if self.speller_size < 0 or self.speller_size and self.oov_slots <= self.pointer_window:
            raise ValueError(
                f"speller_size must be >= 0, and > 0 needs oov_slots > pointer_window (a slot is reused only once its"
                f" word has left the window), got speller_size={self.speller_size}, oov_slots={self.oov_slots}."
            )
        if self.vocab_limit and not (self.speller_size and max(self.eos_token_id or 0, self.unk_token_id or 0)
                                      < self.vocab_limit < self.vocab_size):  # fmt: skip
            raise ValueError(
                f"vocab_limit={self.vocab_limit} needs the speller and must lie above <eos> and <unk> and below "
                f"vocab_size={self.vocab_size}."
            )
        if self.added_tokens < 0 or self.added_tokens and self.vocab_limit:
            raise ValueError(
                f"added_tokens must be >= 0, and 0 with vocab_limit (a K-word model spells every other word), got "
                f"added_tokens={self.added_tokens}, vocab_limit={self.vocab_limit}."
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} is outside the vocabulary [0, {self.vocab_size}).")


__all__ = ["PointerSentinelConfig"]
