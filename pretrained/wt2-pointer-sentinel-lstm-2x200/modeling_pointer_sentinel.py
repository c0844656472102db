"""Pointer Sentinel-LSTM (Merity, Xiong, Bradbury & Socher, 2016, "Pointer Sentinel Mixture Models").

The file follows the data: embedding and regularisers, LSTM layer, pointer head and window, mixture and loss, the
models, then generate's decode step (forward's arithmetic at T = 1). The recurrent cache and generate's glue (stash,
logits processor, token masks, stops, the overrides of its hooks) are generation_pointer_sentinel.py's, which this
file imports and which imports nothing from it. Equations, by the paper's sections:

§2.1 softmax-RNN.   x_t = E w_t;  (h^l_t, c^l_t) = LSTM_l(h^{l-1}_t, h^l_{t-1}, c^l_{t-1});  h_t = h^N_t
                    p_vocab(w) = softmax(U h_t + b)                                                       (2.1)
                    or Grave et al.'s adaptive softmax (2017), ids in frequency order, cutoffs c_0 < ... < c_n = V:
                    p_vocab(w) = p_head(w) for w < c_0, else p_head(cluster i) p_i(w) for w in [c_i, c_{i+1})
§2.2 pointer.       q = tanh(W h_t + b_q)                                                                 (2.2a)
                    z_i = q^T h_i  for i in the window t-L+1 ... t (the current position included)       (2.2b)
                    p_ptr(w) = sum_{i in window, x_i = w} a_i: mass on h_i goes to its input token x_i    (2.2c)
§2.3 mixture.       p(w) = g p_vocab(w) + (1 - g) p_ptr(w)                                                (2.3)
§2.4 sentinel gate. a = softmax([z; q^T s]),  g = a[sentinel], so the pointer's share 1 - g is the attention's
                    own mass and (2.3) becomes p(w) = g p_vocab(w) + sum_{i: x_i = w} a_i                 (2.4)
                    The switch ablation (Gulcehre et al.'s pointer softmax): g = sigmoid(MLP(h_t)), a = (1 - g)
                    softmax(z).
§2.5 loss.          -log p(y_t), plus the optional auxiliary -log(g + sum_{i in window, x_i = y_t} a_i)    (2.5)
§2.6 computation.   Training needs p(y_t) alone: log(g p_vocab(y) + sum_{x_i = y} a_i) in log space, with no
                    vocabulary-sized mixture; prediction mixes at most L vocabulary entries.              (2.6)

Regularisers (all off by default; AWD-LSTM, Merity et al. 2017, and zoneout, Krueger et al. 2017, the paper's):
    embedding dropout: whole rows of E;  locked dropout: one mask per sequence, shared over time;
    weight drop: DropConnect on W_hh, one mask per call;  zoneout: each unit keeps its previous h / c with
    probability p (at evaluation, the expectation h = p h_prev + (1 - p) h_new).

The recurrent state and the window of L hidden states travel between calls in a `PointerSentinelCache`, so chunked ==
whole-sequence at evaluation. `pointer_mixture` (2.4) and `pointer_target_log_prob` (2.5/2.6) are the only
implementations of the mixture; forward, the logits processor and evaluation use them. Open vocabulary
(`config.oov_slots`): ids V ... V+N-1 are placeholders for a text's unseen words; each reads <unk>'s embedding (or, with
`config.oov_pointer`, the placeholders' own, and the pointer scores them with its own queries of each one and of the
state before it), the pointer copies it (2.4), and <unk>'s vocabulary share is split between them and a new word
(`split_unknown`). Tokens added to the tokenizer (`config.added_tokens`, `resize_token_embeddings`) are words: rows
after the vocabulary's, their ids after the placeholders or spelling symbols, renumbered where ids come in and columns
go out (`model_ids`, `id_order`).
"""

import copy
import math
from dataclasses import dataclass, field
from itertools import pairwise
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_utils import slice_logits_to_keep
from transformers.utils import ModelOutput

from .configuration_pointer_sentinel import PointerSentinelConfig
from .generation_pointer_sentinel import DecodeState, PointerSentinelCache, PointerSentinelGenerationMixin, PointerStash

# ---- Regularisers ---------------------------------------------------------------------------------------------------


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Drops whole words: each row of the embedding matrix is zeroed with probability p, the rest scaled."""
    if not training or p == 0:
        return weight
    return weight * weight.new_empty(weight.shape[0], 1).bernoulli_(1 - p) / (1 - p)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout on (B, T, D): one mask per sequence (B, 1, D), shared over time (Gal & Ghahramani)."""
    if not training or p == 0:
        return x
    mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1 - p) / (1 - p)
    return x * mask


def weight_drop(w_hh: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """DropConnect on the hidden-to-hidden matrix: one mask for every step of the call. The dropped matrix stays in
    the graph, so W_hh itself trains (wrapping it in a new Parameter, a widely copied fix, cuts the gradient)."""
    return F.dropout(w_hh, p, training) if p else w_hh


def zoneout_masks(p: float, steps: int, h: torch.Tensor) -> torch.Tensor:
    """Keep masks for h and c over all steps at once, (2, T, B, H): 1 keeps a unit's previous value (prob. p)."""
    return torch.empty(2, steps, *h.shape, dtype=h.dtype, device=h.device).bernoulli_(p)


def zoneout(new: torch.Tensor, previous: torch.Tensor, keep: torch.Tensor | float) -> torch.Tensor:
    """keep * previous + (1 - keep) * new; `keep` is a 0/1 mask in training and p at evaluation (the expectation)."""
    return torch.lerp(new, previous, keep)


# ---- LSTM layer (§2.1) ----------------------------------------------------------------------------------------------


class PointerSentinelLSTMLayer(nn.Module):
    """One LSTM layer with weight drop and zoneout, on the fused `torch.lstm` kernel (cuDNN on GPU) where it can:
    zoneout and padded (masked) inputs need the step loop."""

    def __init__(self, input_size: int, hidden_size: int, weight_drop: float, zoneout: float):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_drop, self.zoneout = weight_drop, zoneout
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))

    def forward(self, x, h0, c0, mask=None, split: int | None = None):
        """x (B, T, I), h0/c0 (B, H), mask (B, T) bool or None -> outputs (B, T, H), h (B, H), c (B, H), and the
        state after the first `split` steps (None without split)."""
        w_hh = weight_drop(self.weight_hh, self.weight_drop, self.training)
        weights = _one_chunk([self.weight_ih, w_hh, self.bias_ih, self.bias_hh], x)
        if not split:
            return *self._run(x, h0, c0, mask, weights), None
        m1, m2 = (None, None) if mask is None else (mask[:, :split], mask[:, split:])
        out1, h1, c1 = self._run(x[:, :split], h0, c0, m1, weights)
        out2, h, c = self._run(x[:, split:], h1, c1, m2, weights)
        return torch.cat([out1, out2], 1), h, c, (h1, c1)

    def _run(self, x, h0, c0, mask, weights):
        if x.shape[1] == 0:
            return x.new_zeros(x.shape[0], 0, self.hidden_size), h0, c0
        if self.zoneout == 0 and (mask is None or x.shape[1] == 1):
            out, h, c = _fused_lstm(x, h0, c0, weights, self.training)
            if mask is not None:  # one step (decoding): a padded row keeps its state, decided on the device
                h, c = torch.where(mask, h, h0), torch.where(mask, c, c0)
                out = h[:, None]
            return out, h, c
        return self._step_loop(x, h0, c0, mask, weights)

    def _step_loop(self, x, h, c, mask, weights):
        """One step at a time. Both biases fold into one input projection for all steps and zoneout draws its masks
        for all steps at once, so a step is one matmul and a few pointwise ops (which `torch.compile` fuses)."""
        w_ih, w_hh, b_ih, b_hh = weights
        x_proj = F.linear(x, w_ih, b_ih + b_hh)
        p, T = self.zoneout, x.shape[1]
        keep = zoneout_masks(p, T, h) if p > 0 and self.training else None
        outputs = []
        for t in range(T):
            h_new, c_new = lstm_cell(torch.addmm(x_proj[:, t], h.to(x_proj.dtype), w_hh.t()), c)
            if p > 0:
                keep_h, keep_c = (keep[0, t], keep[1, t]) if keep is not None else (p, p)
                h_new, c_new = zoneout(h_new, h, keep_h), zoneout(c_new, c, keep_c)
            if mask is not None:  # padding neither moves the state nor produces a new output
                m = mask[:, t, None]
                h_new, c_new = torch.where(m, h_new, h), torch.where(m, c_new, c)
            h, c = h_new, c_new
            outputs.append(h)
        return torch.stack(outputs, 1), h, c


def lstm_cell(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(2.1) one LSTM step from its pre-activations [i, f, g, o] (B, 4H) and the cell c (B, H): returns (h, c).
    Plain pointwise ops, so `torch.compile` fuses them into one kernel (`nn.LSTM` is opaque to it)."""
    i, f, g, o = gates.chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


def _fused_lstm(x, h0, c0, weights, training):
    """torch.lstm over the whole chunk; under autocast, outside it in the dtype `_lstm_dtype` picks."""
    if torch.is_autocast_enabled(x.device.type):
        dtype = _lstm_dtype(x.device.type, weights[0].dtype)
        with torch.autocast(x.device.type, enabled=False):  # the weights are in that dtype already (`_one_chunk`)
            return _fused_lstm(x.to(dtype), h0.to(dtype), c0.to(dtype), weights, training)
    out, h, c = torch.lstm(x, (h0[None], c0[None]), weights, True, 1, 0.0, training, False, True)
    return out, h[0], c[0]


def _lstm_dtype(device_type: str, weight_dtype: torch.dtype) -> torch.dtype:
    """The LSTM's dtype under autocast. CUDA: autocast's own. Torch's autocast runs cuDNN's LSTM in float16 whatever
    that is, and bf16 training has no loss scaler: 7% of a 2x650 LSTM's weight gradients underflowed to zero
    (benchmarks/cuda_checks.py on an H200), where cuDNN's own bf16 LSTM loses none at the same speed. CPU: the
    weights' dtype, since oneDNN's bf16 LSTM needs CPU support that many machines lack (it fails to build its
    primitive)."""
    return torch.get_autocast_dtype("cuda") if device_type == "cuda" else weight_dtype


def _one_chunk(weights: list[torch.Tensor], x: torch.Tensor) -> list[torch.Tensor]:
    """cuDNN wants a layer's four tensors as views of one buffer; otherwise it warns and re-packs them on every
    call (weight drop and autocast both make new tensors). One cat in the compute dtype gives it that buffer."""
    if not x.is_cuda:
        return weights
    dtype = _lstm_dtype("cuda", weights[0].dtype) if torch.is_autocast_enabled("cuda") else weights[0].dtype
    flat = torch.cat([w.reshape(-1) for w in weights]).to(dtype)
    return [t.view_as(w) for t, w in zip(flat.split([w.numel() for w in weights]), weights, strict=True)]


# ---- Pointer head and window (§2.2, §2.4) ---------------------------------------------------------------------------


def sliding_window(memory: torch.Tensor, L: int) -> torch.Tensor:
    """The pointer's window, defined once. memory (B, L+T, *) holds the L positions before this call, then this
    call's T. Returns the view (B, T, *, L) whose row t holds positions t-L+1 ... t (oldest first, current last);
    the cache keeps row T-1, the last L entries of memory."""
    return memory[:, 1:].unfold(1, L, 1)


def window_scores(q: torch.Tensor, keys: torch.Tensor, L: int) -> torch.Tensor:
    """(2.2b) z[b, t, j] = q_t . k for the j-th state k of sliding_window(keys, L): (B, T, D), (B, L+T, D) ->
    (B, T, L), without materialising that (B, T, D, L) view.

    Queries in blocks of b = min(T, L) score the b+L-1 keys they can see with one matmul per block (O(T L D) work
    for any T; one block while decoding or for T <= L), and each (b, b+L-1) score block's band, row r at columns
    r ... r+L-1, is read off as a strided view: in the flattened block, row r's band starts r (b+L) elements in.
    """
    B, T, D = q.shape
    b = min(T, L)
    n = -(-T // b)
    if n * b != T:  # pad the last block (scores of padded queries are dropped)
        q, keys = F.pad(q, (0, 0, 0, n * b - T)), F.pad(keys, (0, 0, 0, n * b - T))
    blocks = []
    for j in range(0, n * b, b):
        scores = q[:, j : j + b] @ keys[:, j + 1 : j + b + L].transpose(1, 2)  # (B, b, b+L-1)
        blocks.append(scores.flatten(-2).unfold(-1, L, b + L))  # (B, b, L)
    return torch.cat(blocks, 1)[:, :T] if n > 1 else blocks[0]


def _left_fit(t: torch.Tensor, L: int) -> torch.Tensor:
    """The newest L positions of t (B, n, *), with empty (zero / False) slots in front when n < L."""
    if t.shape[1] >= L:
        return t[:, t.shape[1] - L :]
    return torch.cat([t.new_zeros(t.shape[0], L - t.shape[1], *t.shape[2:]), t], 1)


class PointerSentinelHead(nn.Module):
    """Pointer attention over the window and the gate between pointer and vocabulary softmax."""

    def __init__(self, config: PointerSentinelConfig):
        super().__init__()
        d = config.output_size
        self.gate_type = config.gate_type
        self.query = nn.Linear(d, d)  # (2.2a) W, b_q
        # q~ = tanh(W~ h + b~) scores placeholder positions: copying an unseen word is learned apart from the
        # closed-vocabulary pointer, which it leaves exactly as it was
        self.oov_query = nn.Linear(d, d) if config.oov_pointer else None
        # plus q^ = W^ h + b^ against c_i, the state that predicted placeholder i (the key before it): placeholders
        # enter the LSTM alike, so the words before them tell them apart, as in Grave et al.'s cache
        self.oov_context = nn.Linear(d, d) if config.oov_pointer else None
        self.oov_repeat = nn.Linear(d, 1) if config.oov_pointer else None  # r's logit (`split_unknown`)
        if config.gate_type == "sentinel":
            self.sentinel = nn.Parameter(torch.empty(d))  # (2.4) s
        else:  # the switch ablation: g = sigmoid(MLP(h_t))
            self.switch = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, 1))

    def forward(self, h, keys, valid, oov=None, context=None):
        """h (B, T, D) queries; keys (B, L+T, D) = [cached window; this chunk]; valid (B, T, L) the window's real
        positions; with `oov_query`, oov (B, T, L) its placeholders and context (B, L+T, D) each key's c_i. Returns
        log g (B, T) and log a (B, T, L) over positions t-L+1 ... t."""
        L = valid.shape[-1]
        q = torch.tanh(self.query(h))  # (2.2a)
        z = window_scores(q, keys, L)  # (2.2b)
        if self.oov_query is not None:
            z_oov = window_scores(torch.tanh(self.oov_query(h)), keys, L)
            z = torch.where(oov, z_oov + window_scores(self.oov_context(h), context, L), z)
        return self.attend(h, q, z, valid)

    def attend(self, h, q, z, valid):
        """The window's scores z (..., L) and queries q (..., D) -> log g (...) and log a (..., L)."""
        z = z.masked_fill(~valid, -torch.inf)
        if self.gate_type == "sentinel":  # (2.4)
            log_a = torch.log_softmax(torch.cat([z, (q @ self.sentinel).unsqueeze(-1)], -1), -1)
            return log_a[..., -1], log_a[..., :-1]
        # Switch: a padded position with an empty window gets g = 1 rather than a softmax over nothing.
        any_valid = valid.any(-1, keepdim=True)
        log_ptr = torch.log_softmax(z.masked_fill(~any_valid, 0), -1).masked_fill(~valid, -torch.inf)
        switch = self.switch(h).squeeze(-1).masked_fill(~any_valid.squeeze(-1), torch.inf)
        return F.logsigmoid(switch), log_ptr + F.logsigmoid(-switch).unsqueeze(-1)


class Pointer(NamedTuple):
    """The pointer's output for one call: log g (B, T), log a (B, T, L), the window's token ids (B, T, L) and, with
    `oov_pointer`, r's logit (B, T)."""

    log_gate: torch.Tensor
    log_attention: torch.Tensor
    window_ids: torch.Tensor
    repeat_logit: torch.Tensor | None = None


# ---- Vocabulary softmax, mixture and loss (§2.1, §2.3-2.6) ----------------------------------------------------------


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision scores are mixed in float32: log-probabilities of rare words underflow in bf16."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _finite(logits: torch.Tensor | None) -> torch.Tensor | None:
    """Columns that cannot occur hold the dtype's lowest value rather than -inf, as transformers' masks do: their
    probability is still exactly 0, and a hand-written entropy, -(p * log p).sum(), stays finite."""
    return None if logits is None else logits.clamp_min(torch.finfo(logits.dtype).min)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, input_first: bool) -> torch.Tensor:
    """x W^T + b for W stored (out, in) as torch stores it, or x W + b for W stored input first, (in, out): the decode
    step's layout (`PackedWeights`)."""
    if not input_first:
        return F.linear(x, weight, bias)
    return x @ weight if bias is None else torch.addmm(bias, x, weight)


def _safe_log(x: torch.Tensor) -> torch.Tensor:
    """log(x) with -inf where x == 0 and a zero (not NaN) gradient there."""
    positive = x > 0
    return torch.where(positive, torch.log(torch.where(positive, x, torch.ones_like(x))), -torch.inf)


def in_window(log_attention: torch.Tensor) -> torch.Tensor:
    """The one test of "this window slot holds a word": its log attention is above -inf. Mass is summed in log space
    from there on, so a slot whose attention underflows exp() in float32 still counts, in `logits` as in the loss."""
    return log_attention > -torch.inf


def _logsumexp_where(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log sum exp(x) over the last axis where mask, -inf where none; NaN-free gradients (a row without a hit sums a
    finite dummy, then takes the constant -inf)."""
    any_hit = mask.any(-1)
    lse = torch.logsumexp(x.masked_fill(~mask, -torch.inf).masked_fill(~any_hit.unsqueeze(-1), 0), -1)
    return lse.masked_fill(~any_hit, -torch.inf)


class AdaptiveSoftmax(nn.Module):
    """(2.1) p_vocab as Grave et al.'s adaptive softmax: the head is a softmax over the c_0 frequent words and one
    token per tail cluster i = [c_i, c_{i+1}); p_i = softmax(W_i P_i h + b_i) over cluster i's words, where P_i
    projects h to d // div^(i+1) units. Returns normalised log-probabilities.

    `weight` holds the head's rows of the frequent words. With tied embeddings transformers ties it to the whole
    embedding matrix (`_tied_weights_keys`) and the head reads its first c_0 rows: no copy, and the gradient reaches
    the embedding. The cluster tokens' rows, the biases and the tails are the head's own.
    """

    def __init__(self, config: PointerSentinelConfig):
        super().__init__()
        d, cut = config.output_size, config.adaptive_softmax_cutoffs
        self.cutoffs = [*cut, config.num_words]  # the added tokens join the last cluster
        sizes = [b - a for a, b in pairwise(self.cutoffs)]
        widths = [int(d // config.adaptive_softmax_div_value ** (i + 1)) for i in range(len(cut))]
        self.weight = nn.Parameter(torch.empty(cut[0], d))
        self.cluster_weight = nn.Parameter(torch.empty(len(cut), d))
        self.head_bias = nn.Parameter(torch.empty(cut[0] + len(cut)))  # not `bias`: tying pads a `bias` to V rows
        self.tail_proj = nn.ParameterList(nn.Parameter(torch.empty(w, d)) for w in widths)  # P_i
        self.tail_weight = nn.ParameterList(nn.Parameter(torch.empty(n, w)) for n, w in zip(sizes, widths, strict=True))
        self.tail_bias = nn.ParameterList(nn.Parameter(torch.empty(n)) for n in sizes)  # b_i

    def head_weight(self) -> torch.Tensor:
        """The head's matrix (c_0 + n, D): the frequent words' rows, then one row per cluster."""
        return torch.cat([self.weight[: self.cutoffs[0]], self.cluster_weight])

    def head_log_probs(self, h: torch.Tensor, packed: "PackedAdaptiveSoftmax | None" = None) -> torch.Tensor:
        """log p_head (..., c_0 + n): the frequent words, then one entry per cluster."""
        weight = packed.head if packed else self.head_weight()
        return torch.log_softmax(_upcast(_linear(h, weight, self.head_bias, packed is not None)), -1)

    def tail_log_probs(self, i: int, h: torch.Tensor, packed: "PackedAdaptiveSoftmax | None" = None) -> torch.Tensor:
        """log p_i (..., c_{i+1} - c_i): cluster i's words given the cluster."""
        source, first = (packed, True) if packed else (self, False)
        projected = _linear(h, source.tail_proj[i], None, first)
        tail = _linear(projected, source.tail_weight[i], self.tail_bias[i], first)
        return torch.log_softmax(_upcast(tail), -1)

    def forward(self, h: torch.Tensor, packed: "PackedAdaptiveSoftmax | None" = None) -> torch.Tensor:
        """log p_vocab (..., V); `packed` (2-D h only): the same from the decode step's transposed matrices."""
        head, c0 = self.head_log_probs(h, packed), self.cutoffs[0]
        tails = (head[..., c0 + i, None] + self.tail_log_probs(i, h, packed) for i in range(len(self.tail_proj)))
        return torch.cat([head[..., :c0], *tails], -1)

    def target_log_prob(self, h: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """log p_vocab(y) (...) for targets y (...), without the (..., V) tensor: the head at every position, each
        tail only where it is needed. Finding the positions whose target is in a cluster takes a host read of their
        count: on the CPU that read is free, and each tail runs on its positions alone (torch's
        AdaptiveLogSoftmaxWithLoss does the same). On an accelerator it would stall the device, and under
        torch.compile break the graph, so there each tail runs at every position and a mask keeps its targets."""
        head, c0 = self.head_log_probs(h), self.cutoffs[0]
        log_p = head.gather(-1, y.clamp(max=c0 - 1).unsqueeze(-1)).squeeze(-1)
        select = h.device.type == "cpu" and not torch.compiler.is_compiling()
        for i, (lo, hi) in enumerate(pairwise(self.cutoffs)):
            in_cluster = (y >= lo) & (y < hi)
            rows = (lambda t, m=in_cluster: t[m]) if select else (lambda t: t)
            word = self.tail_log_probs(i, rows(h)).gather(-1, (rows(y) - lo).clamp(0, hi - lo - 1).unsqueeze(-1))
            value = rows(head[..., c0 + i]) + word.squeeze(-1)
            log_p = log_p.masked_scatter(in_cluster, value) if select else torch.where(in_cluster, value, log_p)
        return log_p


class Placeholders(NamedTuple):
    """Ids first ... first + n - 1 stand for the words of a text that the vocabulary lacks, one id per distinct word
    (`config.oov_slots`; the tokenizer numbers a row's words 0, 1, 2, ... in order of first occurrence); unk is
    `<unk>`'s id. Per position: repeat_logit (with `config.oov_pointer`), the logit of r, the chance that a word
    outside the vocabulary is one the window holds; the row's history up to it (inputs so far, cache included), used,
    the slots it has used (k: its largest placeholder + 1 - first), and unk_count, its literal `<unk>` (`new_word`).
    Without the history a new word reads as `<unk>`, as with a closed vocabulary."""

    first: int
    n: int
    unk: int
    repeat_logit: torch.Tensor | None = None
    used: torch.Tensor | None = None
    unk_count: torch.Tensor | None = None

    @classmethod
    def of(cls, config) -> "Placeholders | None":
        return cls(config.num_words, config.oov_slots, config.unk_token_id) if config.oov_slots else None

    def history(self, ids: torch.Tensor, valid: torch.Tensor, used: torch.Tensor, unk_count: torch.Tensor):
        """(k, n_unk) after each position of ids (B, T) (padding, valid False, counts for nothing), from the (B,)
        values before them: the row's history as `new_word` reads it."""
        slot = torch.where(valid, ids - self.first + 1, 0).clamp(min=0)
        k = torch.maximum(slot.cummax(1).values if ids.shape[1] > 1 else slot, used.unsqueeze(1))  # ONNX: no cummax
        return k, (valid & (ids == self.unk)).long().cumsum(1) + unk_count.unsqueeze(1)

    def at(self, pick) -> "Placeholders":
        """The per-position fields, each (B, T), through `pick` (positions to keep)."""
        return self._replace(**{f: pick(getattr(self, f)) for f in ("repeat_logit", "used", "unk_count")
                                if getattr(self, f) is not None})  # fmt: skip


def embed(ids: torch.Tensor, weight: torch.Tensor, places: Placeholders | None, oov_embedding=None) -> torch.Tensor:
    """E[x_t]; a placeholder reads the placeholders' own embedding (`config.oov_pointer`), else <unk>'s."""
    if places is None:
        return F.embedding(ids, weight)
    oov = ids >= places.first
    x = F.embedding(ids.masked_fill(oov, places.unk), weight)
    return x if oov_embedding is None else torch.where(oov.unsqueeze(-1), oov_embedding.to(x.dtype), x)


def split_unknown(log_gate, vocab_unk_log_prob, log_attention, window_ids, places: Placeholders):
    """`<unk>`'s vocabulary share u = g p_vocab(<unk>) stands for every word outside the vocabulary. The window's
    placeholders (pointer mass M in all) and a new word share it: the placeholders u r, each in proportion to its
    copy mass m_k, and a new word u (1 - r). r, the chance that the word repeats one the window holds, has the odds
    the pointer gives its placeholders against the sentinel, M / g, times exp(`places.repeat_logit`), learned with
    `config.oov_pointer` (else 0: a new word keeps u g / (g + M), m_k grows by m_k u / (g + M)). Returns whether the
    window holds a placeholder, log(u (1 - r)) and log(1 + u r / M); without one, log u and 0 exactly, so text
    without placeholders scores as with a closed vocabulary."""
    oov = (window_ids >= places.first) & in_window(log_attention)
    has = oov.any(-1)
    # Rows without a placeholder take a finite dummy log M, then the exact values: NaN-free gradients.
    log_M = _logsumexp_where(log_attention, oov).masked_fill(~has, 0)
    log_odds = log_M - log_gate
    if places.repeat_logit is not None:
        log_odds = log_odds + _upcast(places.repeat_logit)
    log_u = log_gate + vocab_unk_log_prob
    log_new = torch.where(has, log_u + F.logsigmoid(-log_odds), log_u)
    log_grow = torch.where(has, log_u + F.logsigmoid(log_odds) - log_M, -torch.inf)
    return has, log_new, torch.log1p(torch.exp(log_grow))


def new_word(log_new, window_ids, held, places: Placeholders):
    """Where the new-word mass P_new = u (1 - r) (`split_unknown`) goes: to the columns a word outside the vocabulary
    and outside the window is written as, so that `logits` score every target as the loss does. A row that has used
    k slots and shown n_unk literal `<unk>` writes such a word as `<unk>` (corpus text, or slots full) or as a slot:
    the next unused one, V+k (k < N: the tokenizer's numbering), or a used one the window no longer holds (a repeat
    out of reach). The two surfaces share P_new by the Krichevsky-Trofimov estimate from the row's own counts,
        w_unk = (n_unk + 1/2) / (n_unk + k + 1),   w_slot = 1 - w_unk  (w_unk = 1 where no slot qualifies),
    and w_slot is shared evenly by the qualifying slots. No tuning, and every target stays finite: corpus text costs
    log((n + 1) / (n + 1/2)) at its (n+1)-th `<unk>` (about 1/2 log(pi n) a row in all), an open text as much at
    each new word; other columns are untouched. Without the history (`places.used` None) w_unk = 1, today's closed
    reading. held (..., L): the window's real positions. Returns log P_new w_unk (...) and each slot's log share
    (..., N), -inf off the set."""
    if places.used is None:
        return log_new, log_new.new_full((*log_new.shape, places.n), -torch.inf)
    V, n = places.first, places.n
    k, slots = places.used.unsqueeze(-1), torch.arange(n, device=window_ids.device)
    index = torch.where(held & (window_ids >= V), window_ids - V, n)  # the window's slots; the rest to a spare column
    in_window = torch.zeros((*window_ids.shape[:-1], n + 1), dtype=torch.bool, device=window_ids.device)
    in_window = in_window.scatter_(-1, index, True)[..., :n]
    qualify = ((slots < k) & ~in_window) | (slots == k)
    size = qualify.sum(-1)
    kf, cf = places.used.to(log_new.dtype), places.unk_count.to(log_new.dtype)
    log_w_unk = torch.where(size > 0, torch.log((cf + 0.5) / (cf + kf + 1)), 0)
    log_w_slot = torch.log((kf + 0.5) / (cf + kf + 1)) - torch.log(size.clamp(min=1).to(log_new.dtype))
    return log_new + log_w_unk, torch.where(qualify, (log_new + log_w_slot).unsqueeze(-1), -torch.inf)


def pointer_mixture(vocab_log_probs: torch.Tensor, log_gate: torch.Tensor, log_attention: torch.Tensor,
                    window_ids: torch.Tensor, placeholders: Placeholders | None = None) -> torch.Tensor:  # fmt: skip
    """(2.4) log p(w) = log(g p_vocab(w) + sum_{i: x_i = w} a_i) over the vocabulary, touching only the window's
    <= L entries after one pass over V (§2.6). With `placeholders`, V + n outputs: the pointer's mass on a
    placeholder goes to it, and `<unk>`'s share is split as `split_unknown` says.

    vocab_log_probs (..., V), log_gate (...), log_attention (..., L) with -inf on empty slots (`in_window`),
    window_ids (..., L). The pointer's mass is summed in log space, as `pointer_target_log_prob` sums it. Finite
    wherever the mixture is positive, also for g = 0 or a window word with p_vocab = 0.
    """
    log_p = vocab_log_probs + log_gate.unsqueeze(-1)
    if placeholders is not None:
        log_p = F.pad(log_p, (0, placeholders.n), value=-torch.inf)
    held = in_window(log_attention)
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in (vocab_log_probs, log_gate, log_attention))):
        # No gradient (decoding, scoring): the mass per word by scatter, shifted by each word's largest log attention
        # (found among the window's L slots, not over the vocabulary) so that no term underflows; duplicate ids then
        # write equal values.
        shift = log_attention  # an empty window (the plain LSTM's) has nothing to shift: amax needs a slot
        if window_ids.shape[-1]:
            same_word = window_ids.unsqueeze(-1) == window_ids.unsqueeze(-2)  # (..., L, L)
            shift = log_attention.unsqueeze(-2).masked_fill(~same_word, -torch.inf).amax(-1)
        shift = torch.where(shift > -torch.inf, shift, 0)  # a word's slots all share its shift
        mass = torch.zeros_like(log_p).scatter_add_(-1, window_ids, torch.exp(log_attention - shift))
        word_log_mass = _safe_log(mass.gather(-1, window_ids)) + shift
        mixed = log_p.scatter_(-1, window_ids, torch.logaddexp(log_p.gather(-1, window_ids), word_log_mass))
    else:
        # Total pointer mass per window slot's word: a word seen k times in the window collects all k attentions.
        same_word = window_ids.unsqueeze(-1) == window_ids.unsqueeze(-2)  # (..., L, L)
        each = log_attention.unsqueeze(-2).expand_as(same_word)
        word_log_mass = _logsumexp_where(each, same_word & held.unsqueeze(-2))
        m = torch.logaddexp(log_p.gather(-1, window_ids), word_log_mass)
        # Every copy of a word writes the same value; only the first copy carries the gradient, or it would count twice
        first = ~(same_word & torch.ones_like(same_word).tril(-1)).any(-1)
        mixed = log_p.scatter(-1, window_ids, torch.where(first, m, m.detach()))
    if placeholders is None:
        return mixed
    V, unk = placeholders.first, placeholders.unk
    has, log_new, log_grow = split_unknown(log_gate, vocab_log_probs[..., unk], log_attention, window_ids, placeholders)
    log_new_unk, log_new_slots = new_word(log_new, window_ids, held, placeholders)
    # <unk> keeps its share of a new word and the pointer's mass on literal <unk> positions
    log_unk = torch.logaddexp(log_new_unk, _logsumexp_where(log_attention, held & (window_ids == unk)))
    if placeholders.used is None:  # the closed reading, exactly as before
        log_unk = torch.where(has, log_unk, mixed[..., unk])
    # a slot is a copy (in the window) or a new word (not): never both, and no NaN gradient from logaddexp
    slots = torch.where(log_new_slots > -torch.inf, log_new_slots, mixed[..., V:] + log_grow[..., None])
    return torch.cat([mixed[..., :unk], log_unk.unsqueeze(-1), mixed[..., unk + 1 : V], slots], -1)


def pointer_target_log_prob(
    vocab_target_log_prob: torch.Tensor,
    log_gate: torch.Tensor,
    log_attention: torch.Tensor,
    window_ids: torch.Tensor,
    targets: torch.Tensor,
    placeholders: Placeholders | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(2.6) log p(y) of the mixture and (2.5) log(g + sum_{x_i = y} a_i), for the targets alone (no vocabulary-
    sized tensor). Everything is in log space; the gradient stays finite when g -> 0 or y is absent from the window.
    With `placeholders`, a placeholder target's vocab_target_log_prob is `<unk>`'s, which the split reads: one the
    window holds is a copy, any other takes its share of the new-word mass (`new_word`), as `pointer_mixture` gives it.
    """
    held = in_window(log_attention)  # empty slots hold a dummy id
    pointer = _logsumexp_where(log_attention, (window_ids == targets.unsqueeze(-1)) & held)
    vocab, hit_or_gate = log_gate + vocab_target_log_prob, torch.logaddexp(log_gate, pointer)
    if placeholders is not None:
        V, n, unk = placeholders.first, placeholders.n, placeholders.unk
        # at the targets that read them (<unk>, placeholders) log_new and log_grow see <unk>'s p_vocab
        _, log_new, log_grow = split_unknown(log_gate, vocab_target_log_prob, log_attention, window_ids, placeholders)
        log_new_unk, log_new_slots = new_word(log_new, window_ids, held, placeholders)
        copy = targets >= V
        new_slot = log_new_slots.gather(-1, (targets - V).clamp(0, n - 1).unsqueeze(-1)).squeeze(-1)
        vocab = torch.where(copy, new_slot, torch.where(targets == unk, log_new_unk, vocab))
        pointer = torch.where(copy, pointer + log_grow, pointer)
    return torch.logaddexp(vocab, pointer), hit_or_gate


# ---- Speller: a word outside the vocabulary spelled in bytes, copied through its bytes -------------------------------
# A word the vocabulary lacks is written in the ids as its UTF-8 bytes and an end symbol, at every occurrence. At a
# word boundary the unseen-word mass (the speller's new word N, plus the pointer's mass c_j on each window slot j that
# holds a spelled word w_j) is spread over first bytes; inside a word, each next byte is the share of the candidates
# that continue the bytes so far (a trie over the window's spelled words, plus the speller's new word):
#     p(s | prefix) = [sum_{j: w_j continues prefix with s} c_j + N p_spell(prefix) p_spell(s | prefix)]
#                     / [sum_{j: w_j starts with prefix} c_j + N p_spell(prefix)],
# so the product over a word's bytes and its end telescopes to sum_{j: w_j = w} c_j + N p_spell(w): the word's
# probability, as a copy or as a new word. Symbols 0 ... 255 are bytes, SPELL_END ends a word, SPELL_CONT goes on.

SPELL_END, SPELL_CONT, SPELL_SYMBOLS = 256, 257, 258  # after the 256 bytes: `</w>`, `<+w>` (a word over 64 bytes)
COPIED_SYMBOLS = 66  # a window word of at most 65 symbols and its end is copied through its bytes; longer: spelled


class SpellerLSTM(nn.Module):
    """The speller's one-layer LSTM: `nn.LSTM`'s parameter names, on the word LSTM's kernel path (`_fused_lstm`, so
    bf16 autocast runs cuDNN in bf16), and each tensor in its own storage: `nn.LSTM` on CUDA packs its four into one
    buffer, which safetensors' `load_model` (accelerate's `load_state`) refuses to load into."""

    def __init__(self, size: int):
        super().__init__()
        self.weight_ih_l0 = nn.Parameter(torch.empty(4 * size, size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(4 * size, size))
        self.bias_ih_l0 = nn.Parameter(torch.empty(4 * size))
        self.bias_hh_l0 = nn.Parameter(torch.empty(4 * size))
        for p in self.parameters():  # drawn as nn.LSTM draws them, when it does
            init.uniform_(p, -1 / math.sqrt(size), 1 / math.sqrt(size))

    def forward(self, x, h0, c0):
        """x (B, T, H), h0/c0 (B, H) -> outputs (B, T, H)."""
        weights = _one_chunk([self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0, self.bias_hh_l0], x)
        return _fused_lstm(x, h0, c0, weights, self.training)[0]


class Speller(nn.Module):
    """p_spell(w | h_t): a one-layer byte LSTM whose state starts from the word LSTM's output h_t (the context of the
    word to spell). Its first step cannot end the word (no word is empty)."""

    def __init__(self, hidden_size: int, speller_size: int):
        super().__init__()
        self.init_state = nn.Linear(hidden_size, 2 * speller_size)  # (h_0, c_0) of the byte LSTM from h_t
        self.embed_bytes = nn.Embedding(SPELL_SYMBOLS, speller_size)  # bytes, `<+w>`, and SPELL_END as the start
        self.lstm = SpellerLSTM(speller_size)
        self.out = nn.Linear(speller_size, SPELL_SYMBOLS)

    def forward(self, h: torch.Tensor, spellings: torch.Tensor) -> torch.Tensor:
        """log p_spell(next symbol | h, the bytes before) at each prefix of `spellings` (N, K) (bytes, then
        SPELL_END, padded with any symbol), for N contexts h (N, D): (N, K, SPELL_SYMBOLS), row k after k bytes."""
        h0, c0 = torch.tanh(self.init_state(h)).chunk(2, -1)
        start = spellings.new_full((spellings.shape[0], 1), SPELL_END)
        x = self.embed_bytes(torch.cat([start, spellings[:, :-1].clamp(0, SPELL_END)], 1))
        logits = self.out(self.lstm(x, h0, c0))
        logits[:, 0, SPELL_END:] = -torch.inf  # a word starts with a byte
        return torch.log_softmax(_upcast(logits), -1)


def spelled_mixture(log_copy, window_spellings, prefix, log_new, log_spell_prefix, log_spell_next):
    """The unseen word's next symbol at one position (the block's comment above): at a word boundary (empty prefix)
    the joint mass of each first byte, log(sum_j c_j [w_j starts with s] + N p_spell(s)), which sums to the whole
    unseen-word mass; inside a word the conditional log p(s | prefix), which sums to 1.

    log_copy (..., L): log c_j, -inf on slots without a spelled word; window_spellings (..., L, K): each slot's word,
    bytes then SPELL_END, padded with -1; prefix (..., K): the bytes so far, padded with -1 (an empty prefix: all -1);
    log_new (...): log N; log_spell_prefix (...): log p_spell(prefix); log_spell_next (..., SPELL_SYMBOLS):
    log p_spell(s | prefix). Returns (..., SPELL_SYMBOLS)."""
    k = (prefix >= 0).sum(-1, keepdim=True)  # (..., 1)
    K = window_spellings.shape[-1]
    before = torch.arange(K, device=prefix.device) < k  # (..., K): the prefix's places
    same = (window_spellings == prefix.unsqueeze(-2)) | ~before.unsqueeze(-2)
    starts = same.all(-1) & (log_copy > -torch.inf)  # (..., L): w_j starts with the prefix
    following = window_spellings.gather(-1, k.unsqueeze(-1).expand(*window_spellings.shape[:-1], 1).clamp(max=K - 1))
    # each candidate's mass to its symbol after the prefix (the others to a spare column), summed per symbol in log
    # space by scatter, shifted by the symbol's largest term so that none underflows: (..., L) work, not (..., S, L)
    column = torch.where(starts, following.squeeze(-1).clamp(min=0), SPELL_SYMBOLS)  # (..., L)
    top = log_copy.new_full((*log_copy.shape[:-1], SPELL_SYMBOLS + 1), -torch.inf)
    top = top.scatter_reduce(-1, column, log_copy.detach(), "amax", include_self=False)  # a constant of the sum
    terms = torch.exp(torch.where(starts, log_copy - top.gather(-1, column), -torch.inf))
    mass = torch.zeros_like(top).scatter_add(-1, column, terms)
    copied = (_safe_log(mass) + top)[..., :SPELL_SYMBOLS]
    spelled = (log_new + log_spell_prefix).unsqueeze(-1) + log_spell_next
    # -inf on both sides (the speller's first `</w>`, no copy) is -inf, with a zero gradient rather than NaN
    neither = (copied == -torch.inf) & (spelled == -torch.inf)
    joint = torch.logaddexp(copied.masked_fill(neither, 0), spelled.masked_fill(neither, 0))
    joint = joint.masked_fill(neither, -torch.inf)
    none = (joint == -torch.inf).all(-1, keepdim=True)
    total = joint.masked_fill(none, 0).logsumexp(-1, keepdim=True).masked_fill(none, -torch.inf)
    # an impossible prefix (no candidate left, the speller's share underflowed) reads the speller alone
    conditional = torch.where(total > -torch.inf, joint - total, log_spell_next)
    return torch.where(k > 0, conditional, joint)


class SpellAnchor(NamedTuple):
    """What a word step leaves for the bytes of the word after it, per row: h_t, the window's spellings (L, K) and
    their log copy masses (L,), and log N, the speller's share."""

    h: torch.Tensor
    window_spellings: torch.Tensor
    log_copy: torch.Tensor
    log_new: torch.Tensor


@dataclass
class SpelledRow:
    """One row's spelled words so far: each distinct word's slot (reused once its word is the least recent, which
    `oov_slots` > L keeps outside the window), the spellings of the last L word steps, and the word in progress."""

    slots: dict = field(default_factory=dict)  # spelling (symbols, then SPELL_END) -> slot
    last_seen: dict = field(default_factory=dict)  # slot -> clock
    window: list = field(default_factory=list)  # the last L real word steps' spellings (None: a vocabulary word)
    word: list = field(default_factory=list)  # the symbols of the word being spelled
    clock: int = 0

    def slot(self, spelling: tuple, n: int) -> int:
        k = self.slots.get(spelling)
        if k is None:
            if len(self.slots) < n:
                k = len(self.slots)
            else:
                k = min(self.last_seen, key=self.last_seen.get)
                del self.slots[next(w for w, j in self.slots.items() if j == k)]
            self.slots[spelling] = k
        self.last_seen[k], self.clock = self.clock, self.clock + 1
        return k


class SpelledRows(NamedTuple):
    rows: list

    def select(self, index: list[int]) -> "SpelledRows":
        return SpelledRows([copy.deepcopy(self.rows[i]) for i in index])


def read_spelled(ids: list[list[int]], valid: list[list[bool]], state: SpelledRows, V: int, n: int, L: int):
    """Each row's word steps (a vocabulary word, or a spelled word's `</w>`, read as its slot V + k) and, per position,
    the word step before it or at it (-1: the cache's anchor) and the symbols of the word in progress. Malformed ids
    (bytes not closed before a word, `</w>` or `<+w>` after no byte) raise ValueError."""
    steps, step_valid, spellings, anchors, prefixes = [], [], [], [], []
    for row, ok, st in zip(ids, valid, state.rows, strict=True):
        w_ids, w_ok, w_spell, anc, pre = [], [], [], [], []
        for x, real in zip(row, ok, strict=True):
            s = x - V
            if 0 <= s < SPELL_SYMBOLS and real:
                if s != SPELL_END:
                    if s == SPELL_CONT and (not st.word or st.word[-1] == SPELL_CONT):
                        raise ValueError("`<+w>` must follow a spelled byte.")
                    st.word.append(s)
                    anc.append(len(w_ids) - 1)
                    pre.append(tuple(st.word))
                    continue
                if not st.word or st.word[-1] == SPELL_CONT:
                    raise ValueError("`</w>` must close a spelled word: it follows no byte here.")
                spelling, st.word = (*st.word, SPELL_END), []
                x = V + st.slot(spelling, n)
            elif st.word and real:
                raise ValueError("A spelled word must end with `</w>` before the next word.")
            else:
                spelling, x = None, x if real else 0  # padding is a word step that counts for nothing
            w_ids.append(x)
            w_ok.append(real)
            w_spell.append(spelling if spelling is None or len(spelling) <= COPIED_SYMBOLS else ())
            if real:
                st.window = [*st.window, w_spell[-1]][-L:]
            anc.append(len(w_ids) - 1)
            pre.append(())
        steps.append(w_ids)
        step_valid.append(w_ok)
        spellings.append(w_spell)
        anchors.append(anc)
        prefixes.append(pre)
    return steps, step_valid, spellings, anchors, prefixes


def window_copies(log_slots: torch.Tensor, window_slots: torch.Tensor, copyable: torch.Tensor):
    """A word step's copies of spelled words: each window slot (..., L) that `copyable` marks gets its word's slot mass
    (log_slots (..., N): the mixture's columns V ... V+N-1), shared evenly by the word's occurrences in the window; the
    slots no window word holds are the speller's new word. Returns log c_j (..., L), -inf off `copyable`, and log N."""
    slot = window_slots.clamp(0, log_slots.shape[-1] - 1)
    in_slots = torch.zeros_like(log_slots, dtype=torch.long).scatter_add_(-1, slot, copyable.long())
    copies = in_slots.gather(-1, slot).clamp(min=1).to(log_slots.dtype)
    log_copy = torch.where(copyable, log_slots.gather(-1, slot) - copies.log(), -torch.inf)
    return log_copy, _logsumexp_where(log_slots, in_slots == 0)


def fold_vocabulary(scores: torch.Tensor, limit: int, unk: int) -> torch.Tensor:
    """`config.vocab_limit`: the words from `limit` on leave the softmax, their mass (scores are logits or log
    probabilities over the vocabulary) joining `<unk>`'s; the softmax over the kept columns is unchanged otherwise."""
    rest = scores[..., limit:].logsumexp(-1, keepdim=True)
    kept = scores[..., :limit].scatter(-1, scores.new_full((*scores.shape[:-1], 1), unk, dtype=torch.long),
                                       torch.logaddexp(scores[..., unk : unk + 1], rest))  # fmt: skip
    return F.pad(kept, (0, scores.shape[-1] - limit), value=-torch.inf)


def spelling_tensor(spellings: list, K: int, device) -> torch.Tensor:
    """Spellings as (n, K) symbols padded with -1; None (a vocabulary word) and () (too long to copy) all -1."""
    out = torch.full((len(spellings), K), -1, dtype=torch.long)
    for i, w in enumerate(spellings):
        if w:
            out[i, : len(w)] = torch.tensor(w)
    return out.to(device)


# ---- Outputs --------------------------------------------------------------------------------------------------------


@dataclass
class PointerSentinelModelOutput(ModelOutput):
    """
    last_hidden_state (B, T, D): h_t, the last LSTM layer's outputs after output dropout (what the heads read).
    past_key_values (`PointerSentinelCache`): the recurrent state after this call (the pointer window in it is
        the causal-LM head's).
    hidden_states: the embeddings and every LSTM layer's outputs, each (B, T, *), when requested.
    split_state: (hidden, cell) per layer after the first `split_state_at` tokens, when asked for.
    """

    last_hidden_state: torch.FloatTensor | None = None
    past_key_values: "PointerSentinelCache | None" = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    split_state: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None


@dataclass
class PointerSentinelCausalLMOutput(ModelOutput):
    """
    loss: mean -log p(y) of the mixture over counted targets (+ pointer_loss_weight * pointer_loss).
    logits (B, T', V'): log p_mix, normalised (so softmax(logits) is the model's distribution); plain vocabulary
        logits when `use_pointer=False` (log p_vocab with the adaptive softmax). Column j is id j: the vocabulary, the
        placeholders or spelling symbols, the added tokens (`mixture_size`). T' follows `logits_to_keep`. None
        in a training-mode call with labels: the loss needs no vocabulary-sized mixture (§2.6), as transformers'
        fused-loss forwards skip logits there.
    past_key_values (`PointerSentinelCache`): recurrent state and pointer window after this call.
    hidden_states: the embeddings and every LSTM layer's outputs, when requested.
    vocab_logits (B, T', V): U h_t + b, the RNN softmax component (None where `logits` is); with the adaptive
        softmax, log p_vocab itself (normalised: its softmax is p_vocab). With added tokens, in id order as `logits`,
        -inf on the placeholders or spelling symbols.
    gate (B, T): g, the sentinel's share (1 where `use_pointer=False`).
    pointer_attention (B, T, L): a on positions t-L+1 ... t (oldest first, current last), 0 where no token.
    pointer_loss: mean -log(g + sum_{x_i = y} a_i) over counted targets (paper section 2.5).
    last_hidden_state (B, T, D): h_t as the heads see it (after output dropout).
    split_state: (hidden, cell) per layer after the first `split_state_at` tokens, when asked for.
    target_log_probs (B, T'): log p(y_t) of the mixture for each counted target, 0 elsewhere (with labels; T' is
        shift_labels' length).
    vocab_target_log_probs (B, T'): log p_vocab(y_t), the RNN softmax alone (g forced to 1), 0 elsewhere.
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    past_key_values: "PointerSentinelCache | None" = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    vocab_logits: torch.FloatTensor | None = None
    gate: torch.FloatTensor | None = None
    pointer_attention: torch.FloatTensor | None = None
    pointer_loss: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    split_state: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
    target_log_probs: torch.FloatTensor | None = None
    vocab_target_log_probs: torch.FloatTensor | None = None


class _Loss(NamedTuple):
    loss: torch.Tensor
    pointer_loss: torch.Tensor | None
    target_log_probs: torch.Tensor
    vocab_target_log_probs: torch.Tensor
    vocab_logits: torch.Tensor | None  # U h_t + b on the labelled positions (None: the adaptive softmax)
    vocab_log_probs: torch.Tensor | None  # their log-softmax, reused by the report when it covers the same positions


# ---- Models ---------------------------------------------------------------------------------------------------------


class PointerSentinelPreTrainedModel(PreTrainedModel):
    config_class = PointerSentinelConfig
    config: PointerSentinelConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _is_stateful = True  # generate refuses assisted decoding, which would need to roll the state back
    _no_split_modules = ["PointerSentinelLSTMLayer"]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except Exception as e:  # a damaged weights file: say which, without transformers' long traceback
            if type(e).__name__ != "SafetensorError":
                raise
            raise OSError(f"Cannot read the weights in {pretrained_model_name_or_path}: {e}. The file is damaged "
                          "or incomplete; save or download it again.") from None  # fmt: skip

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers writes auto_map only for the saved class; list all three so AutoModel works remotely too.
        self.config.auto_map = {
            "AutoConfig": "configuration_pointer_sentinel.PointerSentinelConfig",
            "AutoModel": "modeling_pointer_sentinel.PointerSentinelModel",
            "AutoModelForCausalLM": "modeling_pointer_sentinel.PointerSentinelForCausalLM",
        }
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:  # fmt: skip
        """`tokenizer.add_tokens(...)`, then `resize_token_embeddings(len(tokenizer))`: each added token becomes a word
        of the model, a new row of its word tables (with the adaptive softmax, of its last cluster, the rarest words';
        `config.added_tokens` counts them), its id after the placeholders or the spelling symbols, as the tokenizer
        numbers it. A smaller size drops the last added words; one that would cut into the vocabulary, the
        placeholders or the spelling symbols is refused.

        New rows: an input row is the old rows' mean (`mean_resizing`, transformers' default, without its noise) or,
        with mean_resizing=False, drawn as `_init_weights` draws them. An output row of the full softmax (the input
        row where tied) or of the last cluster is its softmax's mean row, with a bias ADDED_WORD_MARGIN below the mean
        bias: its logit is then the old logits' mean less the margin, so (Jensen) each new word starts with at most
        exp(-ADDED_WORD_MARGIN) / n of the probability (n: the old words of that softmax), text without it scores as
        before (log-probs move by under A exp(-ADDED_WORD_MARGIN) / n), and a new word still has a finite loss to
        learn from. pad_to_multiple_of is refused: the rows past the tokenizer's ids would be words with no token."""
        embeddings = self.get_input_embeddings()
        if pad_to_multiple_of is not None:
            raise ValueError("resize_token_embeddings: pad_to_multiple_of is not supported: the rows past the "
                             "tokenizer's ids would be words no token writes; pass len(tokenizer) alone.")  # fmt: skip
        if new_num_tokens is None:
            return embeddings
        cfg = self.config
        V, E = cfg.vocab_size, extra_ids(cfg)
        kind = "spelling symbols" if cfg.speller_size else "placeholders"
        if cfg.vocab_limit:
            raise ValueError(f"resize_token_embeddings: a model with vocab_limit={cfg.vocab_limit} spells every word "
                             "past its first vocab_limit; it takes no added tokens.")  # fmt: skip
        if not isinstance(new_num_tokens, int) or new_num_tokens < V + E:
            raise ValueError(
                f"resize_token_embeddings({new_num_tokens!r}): ids 0 ... {V + E - 1} are the model's {V} words"
                + (f" and its {E} {kind}" if E else "")
                + f", which stay; pass len(tokenizer) (at least {V + E}), its added tokens counted after them."
            )
        W = new_num_tokens - E  # the word tables' rows from now on
        if W == cfg.num_words:
            return embeddings

        def resized(p: nn.Parameter, n: int, bias: bool = False):
            """p's first n rows, then a new row (the rule above) for each it lacks."""
            t, k = p.data, n - p.shape[0]
            if k <= 0:
                p.data = t[:n].clone()
                return
            if bias:
                new = (_upcast(t).mean() - ADDED_WORD_MARGIN).expand(k)
            elif mean_resizing:
                new = _upcast(t).mean(0).expand(k, -1)
            else:
                new = t.new_empty(k, t.shape[1]).uniform_(-cfg.init_range, cfg.init_range)
            p.data = torch.cat([t, new.to(t.dtype)])

        head = getattr(self, "lm_head", None)
        if isinstance(head, AdaptiveSoftmax):  # the last cluster's words, then the new ones
            resized(head.tail_weight[-1], W - head.cutoffs[-2])
            resized(head.tail_bias[-1], W - head.cutoffs[-2], bias=True)
            head.cutoffs[-1] = W
        elif head is not None:
            if head.weight is not embeddings.weight:  # a tied one is resized as the embedding, below
                resized(head.weight, W)
            resized(head.bias, W, bias=True)
            head.out_features = W
        resized(embeddings.weight, W)
        embeddings.num_embeddings = W
        cfg.added_tokens = W - V
        return embeddings

    @torch.no_grad()
    def _init_weights(self, module):
        """AWD-LSTM / PyTorch-word-LM init: embeddings and softmax U(+-init_range), the rest U(+-1/sqrt(fan))."""
        r, head = self.config.init_range, getattr(self, "pointer", None)
        if isinstance(module, nn.Embedding):
            init.uniform_(module.weight, -r, r)
        elif isinstance(module, PointerSentinelModel) and module.oov_embedding is not None:
            init.uniform_(module.oov_embedding, -r, r)
        elif isinstance(module, PointerSentinelLSTMLayer):
            bound = 1 / math.sqrt(module.hidden_size)
            for p in (module.weight_ih, module.weight_hh, module.bias_ih, module.bias_hh):
                init.uniform_(p, -bound, bound)
        elif isinstance(module, AdaptiveSoftmax):  # output rows as the full softmax's, projections by fan-in
            for w in (module.weight, module.cluster_weight, *module.tail_weight):
                init.uniform_(w, -r, r)
            for p in module.tail_proj:
                init.uniform_(p, -1 / math.sqrt(p.shape[1]), 1 / math.sqrt(p.shape[1]))
            for b in (module.head_bias, *module.tail_bias):
                init.zeros_(b)
        elif isinstance(module, PointerSentinelHead):
            if module.gate_type == "sentinel":
                bound = 1 / math.sqrt(module.sentinel.numel())
                init.uniform_(module.sentinel, -bound, bound)
        elif isinstance(module, nn.Linear):
            if module is getattr(self, "lm_head", None):
                init.uniform_(module.weight, -r, r)
                init.zeros_(module.bias)
            elif head is not None and module in (head.oov_repeat, head.oov_context):  # r's odds M / g; c_i unread
                init.zeros_(module.weight)
                init.zeros_(module.bias)
            else:
                bound = 1 / math.sqrt(module.in_features)
                init.uniform_(module.weight, -bound, bound)
                init.uniform_(module.bias, -bound, bound)


def _check_ids(name: str, ids: torch.Tensor, vocab_size: int, allow_ignore: bool = False):
    """Range check where it is free: on an accelerator reading the range back would stall the device on every call
    (an out-of-range id then fails inside the kernel), and under torch.compile it breaks the graph."""
    if ids.device.type != "cpu" or torch.compiler.is_compiling():
        return
    real = ids[ids != -100] if allow_ignore else ids
    if real.numel() == 0:
        return
    lo, hi = (int(v) for v in torch.aminmax(real))
    if lo < 0 or hi >= vocab_size:
        extra = " (or -100 to ignore a position)" if allow_ignore else ""
        raise ValueError(f"{name} must lie in [0, {vocab_size}){extra}, got values in [{lo}, {hi}].")


class PointerSentinelModel(PointerSentinelPreTrainedModel):
    """Embeddings and the LSTM stack, a plain LSTM: tokens -> h_t, plus the recurrent state. The pointer and its
    window of past states belong to `PointerSentinelForCausalLM`."""

    # Loading this base model from a causal-LM checkpoint leaves the heads' weights unused, as intended.
    _keys_to_ignore_on_load_unexpected = [r"^pointer\.", r"^lm_head\."]

    def __init__(self, config: PointerSentinelConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.num_words, config.embedding_size)
        self.oov_embedding = nn.Parameter(torch.empty(config.embedding_size)) if config.oov_pointer else None
        n = config.num_hidden_layers
        sizes = [config.embedding_size] + [config.hidden_size] * (n - 1) + [config.output_size]
        self.layers = nn.ModuleList(
            PointerSentinelLSTMLayer(sizes[i], sizes[i + 1], config.weight_drop, config.zoneout) for i in range(n)
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def _validate(self, input_ids, mask, cache, split_state_at):
        if input_ids is None or input_ids.dim() != 2:
            raise ValueError("input_ids must be a (batch, sequence) tensor of token ids.")
        B, T = input_ids.shape
        if T == 0 or B == 0:
            raise ValueError(f"input_ids is empty (shape {tuple(input_ids.shape)}); give at least one token.")
        _check_ids("input_ids", input_ids, self.config.num_words + self.config.oov_slots)
        seen = cache.seen_tokens if cache is not None else 0
        # The mask covers this call (T columns) or, as generate passes it, the whole sequence so far.
        if mask is not None and (mask.dim() != 2 or mask.shape[0] != B or mask.shape[1] not in (T, seen + T)):
            raise ValueError(
                f"attention_mask of shape {tuple(mask.shape)} does not fit input_ids of shape {tuple(input_ids.shape)}"
                f" after {seen} cached tokens: give ({B}, {T}) or ({B}, {seen + T})."
            )
        if cache is not None and cache.batch_size is not None and cache.batch_size != B:
            raise ValueError(f"The cache holds a batch of {cache.batch_size}, input_ids a batch of {B}.")
        if split_state_at is not None and not 0 < split_state_at <= T:
            raise ValueError(f"split_state_at must lie in [1, {T}] (the tokens of this call), got {split_state_at}.")

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: "PointerSentinelCache | None" = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        split_state_at: int | None = None,
        model_order: bool = False,
        **kwargs,
    ):
        r"""
        split_state_at: also return the recurrent state after this many tokens (`split_state`). Sliding-window
            training carries it to the next window, which starts there, without a second forward pass.
        model_order: input_ids are in the model's numbering already (`model_ids`), as the causal LM passes them.
        """
        _reject_unsupported(kwargs)
        if input_ids is not None and not model_order:
            input_ids = model_ids(input_ids, self.config)
        self._validate(input_ids, attention_mask, past_key_values, split_state_at)
        cfg = self.config
        output_hidden_states = output_hidden_states if output_hidden_states is not None else cfg.output_hidden_states
        return_dict = return_dict if return_dict is not None else cfg.return_dict
        B, T = input_ids.shape
        mask = _call_mask(attention_mask, T)
        if mask is not None and T > 1 and not torch.compiler.is_compiling() and bool(mask.all()):
            mask = None  # an unpadded chunk takes the fused kernel: one host read per masked multi-token call
        cache = past_key_values if past_key_values is not None else PointerSentinelCache()
        if cache.hidden is None:
            cache.hidden = [input_ids.new_zeros(B, layer.hidden_size, dtype=self.dtype) for layer in self.layers]
            cache.cell = [h.clone() for h in cache.hidden]

        weight = embedding_dropout(self.embed_tokens.weight, cfg.embedding_dropout, self.training)
        x = embed(input_ids, weight, Placeholders.of(cfg), self.oov_embedding)
        all_hidden = [x] if output_hidden_states else None
        x = locked_dropout(x, cfg.input_dropout, self.training)
        new_h, new_c, split_h, split_c = [], [], [], []
        for i, layer in enumerate(self.layers):
            x, h, c, at_split = layer(x, cache.hidden[i], cache.cell[i], mask, split_state_at)
            new_h.append(h)
            new_c.append(c)
            if at_split is not None:
                split_h.append(at_split[0])
                split_c.append(at_split[1])
            if output_hidden_states:
                all_hidden.append(x)
            last = i == len(self.layers) - 1
            x = locked_dropout(x, cfg.output_dropout if last else cfg.hidden_dropout, self.training)
        # The state keeps the parameters' dtype: a bf16 state from an autocast call would break a later fp32 call.
        cache.hidden, cache.cell = [h.to(self.dtype) for h in new_h], [c.to(self.dtype) for c in new_c]
        cache.seen_tokens += T

        use_cache = use_cache if use_cache is not None else (cfg.use_cache and not self.training)
        out = PointerSentinelModelOutput(
            last_hidden_state=x,
            past_key_values=cache if (use_cache or past_key_values is not None) else None,
            hidden_states=tuple(all_hidden) if output_hidden_states else None,
            split_state=(split_h, split_c) if split_state_at else None,
        )
        return out if return_dict else out.to_tuple()


def _call_mask(attention_mask, T):
    """The mask of this call's T positions as bool: generate passes the mask of the whole sequence so far."""
    return None if attention_mask is None else attention_mask[:, -T:].bool()


def _reject_unsupported(kwargs: dict):
    """One clear error for inputs transformers models often take but this one cannot honour."""
    if kwargs.get("inputs_embeds") is not None:
        raise ValueError("inputs_embeds is not supported: the pointer copies input tokens, so pass input_ids.")
    if kwargs.get("output_attentions"):
        raise ValueError(
            "output_attentions is not supported: the model has no self-attention layers. The pointer's attention "
            "over its window is returned as `pointer_attention`."
        )
    # generate hands its `tokenizer` (for stop strings) on to forward, as to every transformers model
    unknown = set(kwargs) - {"inputs_embeds", "output_attentions", "shift_labels", "num_items_in_batch", "tokenizer"}
    if unknown:
        raise TypeError(f"forward() got unexpected keyword arguments {sorted(unknown)}.")


def extra_ids(config) -> int:
    """The ids between the vocabulary and the added tokens: the spelling symbols (with the speller) or the
    placeholders."""
    return SPELL_SYMBOLS if config.speller_size else config.oov_slots


def mixture_size(config) -> int:
    """The width of `logits`: the vocabulary, the placeholders or the spelling symbols, then the added tokens."""
    return config.num_words + extra_ids(config)


# ---- Added tokens: the tokenizer's ids and the model's numbering ----------------------------------------------------
# The tokenizer numbers the A tokens added after its words (`config.added_tokens`) after its E extra ids: words 0 ...
# V-1, extras V ... V+E-1, added tokens V+E ... V+E+A-1. The model keeps its words together, as rows of its word
# tables: words 0 ... V-1, added tokens V ... V+A-1 (W = `config.num_words`), extras W ... W+E-1, so that everything
# inside it reads a model with W words. Ids are renumbered where they come in and columns put back in id order where
# they go out (forward, the decode steps, the pointer's logits processor); with no added token both are the identity.

ADDED_WORD_MARGIN = 20.0  # nats below its softmax's mean logit that an added word starts (`resize_token_embeddings`)


def model_ids(ids: torch.Tensor, config) -> torch.Tensor:
    """Token ids in the model's numbering. Ids past the added tokens, and -100, stay as they are (the range checks
    report them)."""
    A = config.added_tokens
    if not A:
        return ids
    V, E = config.vocab_size, extra_ids(config)
    return ids + torch.where(ids < V, 0, torch.where(ids < V + E, A, torch.where(ids < V + E + A, -E, 0)))


def id_order(x: torch.Tensor | None, config) -> torch.Tensor | None:
    """The model's columns (..., W words, then the E extras or none: the vocabulary's own scores) in token-id order,
    -inf on extras it lacks."""
    A = config.added_tokens
    if not A or x is None:
        return x
    V, W = config.vocab_size, config.num_words
    extras = x[..., W:] if x.shape[-1] > W else x.new_full((*x.shape[:-1], extra_ids(config)), -torch.inf)
    return torch.cat([x[..., :V], extras, x[..., V:W]], -1)


def word_columns(x: torch.Tensor, config) -> torch.Tensor:
    """Columns in token-id order (..., V + E + A) -> the model's W words (the extras dropped)."""
    if not config.added_tokens:
        return x
    V = config.vocab_size
    return torch.cat([x[..., :V], x[..., V + extra_ids(config) :]], -1)


def _validate_targets(config, input_ids, labels, shift_labels, logits_to_keep):
    """The causal-LM forward's checks of its targets and settings (the base model checks input_ids)."""
    L = config.pointer_window
    if not isinstance(L, int) or L < 1:
        raise ValueError(f"config.pointer_window must be a positive integer, got {L!r}.")
    if isinstance(logits_to_keep, int) and logits_to_keep < 0:
        raise ValueError(f"logits_to_keep must be >= 0 (0 keeps every position), got {logits_to_keep}.")
    if input_ids is None:
        return  # the base model reports it
    if labels is not None and shift_labels is None:
        if labels.shape != input_ids.shape:
            raise ValueError(
                f"labels shape {tuple(labels.shape)} differs from input_ids shape {tuple(input_ids.shape)}."
            )
        _check_ids("labels", labels, mixture_size(config), allow_ignore=True)
    if shift_labels is not None:
        if (
            shift_labels.dim() != 2
            or shift_labels.shape[0] != input_ids.shape[0]
            or not 0 < shift_labels.shape[1] <= input_ids.shape[1]
        ):
            raise ValueError(
                f"shift_labels shape {tuple(shift_labels.shape)} does not fit input_ids shape "
                f"{tuple(input_ids.shape)}: give (batch, T') targets for the last T' <= T positions."
            )
        _check_ids("shift_labels", shift_labels, mixture_size(config), allow_ignore=True)


class PointerSentinelForCausalLM(PointerSentinelPreTrainedModel, PointerSentinelGenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: PointerSentinelConfig):
        super().__init__(config)
        self.model = PointerSentinelModel(config)
        if config.adaptive_softmax_cutoffs:
            self.lm_head = AdaptiveSoftmax(config)
        else:
            self.lm_head = nn.Linear(config.output_size, config.num_words)  # (2.1) U, b
        self.pointer = PointerSentinelHead(config) if config.use_pointer else None
        self.speller = Speller(config.output_size, config.speller_size) if config.speller_size else None
        self.post_init()

    def get_output_embeddings(self):
        # The adaptive softmax is no (V, D) output matrix: code that skips "the" output embedding must not take it for
        # one (`resize_token_embeddings` resizes it itself). Tying goes by `_tied_weights_keys` alone.
        return None if self.config.adaptive_softmax_cutoffs else self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    # --- step 1: the pointer over its window (§2.2, §2.4) --------------------------------------------------------
    def _pointer_memory(self, cache, h, input_ids, mask):
        """The pointer's keys, their ids and validity, (B, L+T, *): the cached window, then this call. The cache
        keeps the last L *real* positions: padding (right padding included) never evicts a real one. The keys stay
        in h's (compute) dtype; only the L kept states are stored in the parameters' dtype. With `oov_pointer`, also
        each key's c_i, the key before it (padding carries the state: the newest real position's key, or zero), else
        None. The cache keeps its keys' own: the key before its oldest is gone, and sorting moves padding in front."""
        L, B, D = self.config.pointer_window, h.shape[0], h.shape[-1]
        if cache.window_states is None:
            cache.window_states = h.new_zeros(B, 0, D, dtype=self.dtype)
            cache.window_ids = input_ids.new_zeros(B, 0)
            cache.window_mask = torch.zeros(B, 0, dtype=torch.bool, device=h.device)
            cache.window_context = None
        valid = mask if mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        keys = torch.cat([_left_fit(cache.window_states, L).to(h.dtype), h], 1)
        ids = torch.cat([_left_fit(cache.window_ids, L), input_ids], 1)
        key_valid = torch.cat([_left_fit(cache.window_mask, L), valid], 1)
        kept = (cache.window_context if cache.window_context is not None else keys[:, :0]).to(h.dtype)
        context = torch.cat([_left_fit(kept, L), keys[:, L - 1 : -1]], 1) if self.config.oov_pointer else None
        # Without a mask every new position is real, and empty slots only ever sit in front. With one, a stable sort
        # moves padding in front, real positions keep their order: keep the last L of those.
        order = None if mask is None else torch.sort(key_valid.to(torch.int8), dim=1, stable=True).indices[:, -L:]

        def keep(t):
            if order is None:
                return t[:, -L:]
            return t.gather(1, order if t.dim() == 2 else order.unsqueeze(-1).expand(-1, -1, D))

        cache.window_states, cache.window_ids, cache.window_mask = keep(keys).to(self.dtype), keep(ids), keep(key_valid)
        cache.window_context = None if context is None else keep(context).to(self.dtype)
        return keys, ids, key_valid, context

    def _pointer(self, cache, h, input_ids, mask) -> Pointer:
        keys, key_ids, key_valid, context = self._pointer_memory(cache, h, input_ids, mask)
        L = self.config.pointer_window
        window_ids, head = sliding_window(key_ids, L), self.pointer
        oov = window_ids >= self.config.num_words if head.oov_query is not None else None  # only its head reads it
        log_gate, log_attention = head(h, keys, sliding_window(key_valid, L), oov, context)
        repeat_logit = head.oov_repeat(h).squeeze(-1) if head.oov_repeat is not None else None
        return Pointer(log_gate, log_attention, window_ids, repeat_logit)

    def _placeholders(self, cache, input_ids, mask, pointer: Pointer | None) -> Placeholders | None:
        """The placeholders with their per-position fields: r's logit and the row's history, which the cache carries
        (k and n_unk, (B,): `new_word`)."""
        places = Placeholders.of(self.config)
        if places is None:
            return None
        if cache.oov_used is None:
            cache.oov_used = cache.unk_count = input_ids.new_zeros(input_ids.shape[0])
        valid = mask if mask is not None else torch.ones_like(input_ids, dtype=torch.bool)
        used, unk_count = places.history(input_ids, valid, cache.oov_used, cache.unk_count)
        cache.oov_used, cache.unk_count = used[:, -1], unk_count[:, -1]
        r = pointer.repeat_logit if pointer is not None else None
        return places._replace(repeat_logit=r, used=used, unk_count=unk_count)

    # --- step 2: the loss on the targets alone (§2.5, §2.6) ------------------------------------------------------
    def _loss(self, h, shift_labels, mask, pointer: Pointer | None, places, num_items_in_batch) -> _Loss:
        """Every position is computed and the uncounted ones are masked out: boolean indexing would sync the host
        and give data-dependent shapes (a graph break under torch.compile)."""
        B, T, _ = h.shape
        Tl = shift_labels.shape[1]
        at = slice(T - Tl, None)  # the positions that have targets
        counted = shift_labels != -100
        if mask is not None:
            counted = counted & mask[:, at]
        y = shift_labels.masked_fill(~counted, 0)
        places = None if places is None else places.at(lambda t: t[:, at])
        # p_vocab of a placeholder target is <unk>'s, for a new word (the copies are the pointer's)
        y_vocab = y if places is None else y.masked_fill(y >= places.first, places.unk)
        if isinstance(self.lm_head, AdaptiveSoftmax):  # (2.1) for the targets alone
            vocab_logits = vocab_log_probs = None
            vocab_lp = self.lm_head.target_log_prob(h[:, at], y_vocab)
        else:
            vocab_logits = self.lm_head(h[:, at])
            vocab_log_probs = torch.log_softmax(_upcast(vocab_logits), -1)  # (2.1), the one pass over V
            vocab_lp = vocab_log_probs.gather(-1, y_vocab.unsqueeze(-1)).squeeze(-1)
        n = num_items_in_batch if num_items_in_batch is not None else counted.sum().clamp(min=1)
        vocab_target = torch.where(counted, vocab_lp.detach(), 0)
        if pointer is None:
            log_p = vocab_lp
            if places is not None:  # the new word's split (`new_word`) over an empty window
                empty = y.unsqueeze(-1)[..., :0]
                log_p = pointer_target_log_prob(vocab_lp, torch.zeros_like(vocab_lp), empty.to(vocab_lp.dtype), empty,
                                                y, places)[0]  # fmt: skip
            return _Loss(-torch.where(counted, log_p, 0).sum() / n, None, torch.where(counted, log_p.detach(), 0),
                         vocab_target, vocab_logits, vocab_log_probs)  # fmt: skip
        log_p, log_gate_or_hit = pointer_target_log_prob(
            vocab_lp, _upcast(pointer.log_gate[:, at]), _upcast(pointer.log_attention[:, at]),
            pointer.window_ids[:, at], y, places,
        )  # fmt: skip
        loss = -torch.where(counted, log_p, 0).sum() / n
        pointer_loss = -torch.where(counted, log_gate_or_hit, 0).sum() / n
        if self.config.pointer_loss_weight:
            loss = loss + self.config.pointer_loss_weight * pointer_loss
        return _Loss(loss, pointer_loss, torch.where(counted, log_p.detach(), 0), vocab_target, vocab_logits,
                     vocab_log_probs)  # fmt: skip

    # --- step 3: the mixture over the vocabulary, for scoring and generation (§2.4) ------------------------------
    def _report(self, h, pointer: Pointer | None, places, loss: _Loss | None, logits_to_keep, pointer_stash):
        """(logits, vocab_logits) at the kept positions. Next to a loss the mixture is a report: it carries no
        gradient, and reuses the loss's log-softmax when it covers the same positions."""
        T = h.shape[1]
        if loss is not None and loss.vocab_logits is not None and loss.vocab_logits.shape[1] == T:
            vocab_logits = slice_logits_to_keep(loss.vocab_logits, logits_to_keep)
            vocab_log_probs = slice_logits_to_keep(loss.vocab_log_probs, logits_to_keep)
        else:
            vocab_logits = self.lm_head(slice_logits_to_keep(h, logits_to_keep))
            vocab_log_probs = vocab_logits if isinstance(self.lm_head, AdaptiveSoftmax) else None  # normalised
        if self.config.vocab_limit:  # a K-word model: the other words' p_vocab is <unk>'s
            vocab_logits = fold_vocabulary(vocab_logits, self.config.vocab_limit, self.config.unk_token_id)
            if vocab_log_probs is not None:
                vocab_log_probs = fold_vocabulary(vocab_log_probs, self.config.vocab_limit, self.config.unk_token_id)
        if places is not None:
            places = places.at(lambda t: t[:, -1] if pointer_stash is not None else
                               slice_logits_to_keep(t[..., None], logits_to_keep)[..., 0])  # fmt: skip
        if pointer is None:  # nothing to copy: the new word's split alone, on the logits (softmax is shift-invariant)
            if places is None or pointer_stash is not None:  # generate offers the vocabulary alone
                return vocab_logits, vocab_logits
            empty = vocab_logits.new_zeros(*vocab_logits.shape[:-1], 0)
            no_gate = vocab_logits.new_zeros(vocab_logits.shape[:-1])
            return pointer_mixture(vocab_logits, no_gate, empty, empty.long(), places), vocab_logits
        if pointer_stash is not None:  # generate: the processor normalises once, then mixes the last position
            pointer_stash.log_gate = pointer.log_gate[:, -1]
            pointer_stash.log_attention = pointer.log_attention[:, -1]
            pointer_stash.window_ids = pointer.window_ids[:, -1]
            pointer_stash.placeholders = places
            return vocab_logits, vocab_logits
        if vocab_log_probs is None:
            vocab_log_probs = torch.log_softmax(_upcast(vocab_logits), -1)
        kept = [slice_logits_to_keep(t, logits_to_keep) for t in (pointer.log_attention, pointer.window_ids)]
        log_gate = slice_logits_to_keep(pointer.log_gate.unsqueeze(-1), logits_to_keep).squeeze(-1)
        with torch.set_grad_enabled(torch.is_grad_enabled() and loss is None):
            logits = pointer_mixture(vocab_log_probs, _upcast(log_gate), _upcast(kept[0]), kept[1], places)
        return logits, vocab_logits

    def _mix_stashed(self, scores, s: PointerStash):
        """(2.4) at the position `_report` stashed for generate: `PointerSentinelLogitsProcessor`'s mixture of the
        vocabulary scores, normalised once here."""
        log_probs = torch.log_softmax(_upcast(word_columns(scores, self.config)), -1)
        mixed = pointer_mixture(log_probs, _upcast(s.log_gate), _upcast(s.log_attention), s.window_ids, s.placeholders)
        return id_order(mixed, self.config)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        past_key_values: "PointerSentinelCache | None" = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        pointer_stash: PointerStash | None = None,
        split_state_at: int | None = None,
        **kwargs,
    ):
        r"""
        labels (B, T): as input_ids, shifted inside; -100 is ignored.
        shift_labels (B, T') with T' <= T, a keyword argument: targets already aligned with the last T' inputs (y_t
            for position t), so truncated BPTT loses no target at chunk ends, and positions that only feed the
            pointer window (T - T' in front) skip the vocabulary softmax. When given, `labels` is ignored (as in
            transformers' causal-LM loss).
        num_items_in_batch, a keyword argument: the loss is sum / num_items_in_batch (Trainer's gradient
            accumulation) instead of the mean.
        logits_to_keep: int k keeps the last k positions (0 = all), a tensor keeps those positions; the loss never
            needs the mixture over the vocabulary.
        pointer_stash: set by generate; the forward then returns the vocabulary logits and leaves the mixing of
            the last position to `PointerSentinelLogitsProcessor`.

        In training mode with labels, `logits` and `vocab_logits` are None: the loss needs p(y) alone (§2.6), and
        the vocabulary-sized mixture would cost as much again as the rest of the step. Call in eval mode for them.
        """
        _reject_unsupported(kwargs)
        shift_labels, num_items_in_batch = kwargs.get("shift_labels"), kwargs.get("num_items_in_batch")
        _validate_targets(self.config, input_ids, labels, shift_labels, logits_to_keep)
        if labels is not None and shift_labels is None:
            shift_labels = F.pad(labels[:, 1:], (0, 1), value=-100)
        if input_ids is not None:  # in the model's numbering from here on; `logits` go out in id order
            input_ids = model_ids(input_ids, self.config)
        if shift_labels is not None:
            shift_labels = model_ids(shift_labels, self.config)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)
        cache = past_key_values if past_key_values is not None else PointerSentinelCache()
        if self.speller is not None:  # generate's pointer_stash carries its decode step alone: forward mixes all
            if split_state_at is not None or output_hidden_states:
                raise ValueError("With the speller, forward takes no split_state_at or output_hidden_states.")
            out = self._spelled_forward(input_ids, attention_mask, cache, shift_labels, num_items_in_batch)
            # every position is computed: bytes need their word step
            out.logits = _finite(id_order(slice_logits_to_keep(out.logits, logits_to_keep), self.config))
            out.past_key_values = cache if (use_cache or past_key_values is not None) else None
            return out if return_dict else out.to_tuple()
        base = self.model(input_ids, attention_mask, cache, True, output_hidden_states, return_dict=True,
                          split_state_at=split_state_at, model_order=True)  # fmt: skip
        h = base.last_hidden_state  # (B, T, D)
        B, T, _ = h.shape
        mask = _call_mask(attention_mask, T)
        pointer = self._pointer(cache, h, input_ids, mask) if self.pointer is not None else None
        places = self._placeholders(cache, input_ids, mask, pointer)
        loss = None if shift_labels is None else self._loss(h, shift_labels, mask, pointer, places, num_items_in_batch)
        if self.training and loss is not None:
            logits = vocab_logits = None
        else:
            logits, vocab_logits = self._report(h, pointer, places, loss, logits_to_keep, pointer_stash)
        L = self.config.pointer_window
        out = PointerSentinelCausalLMOutput(
            loss=None if loss is None else loss.loss,
            logits=_finite(id_order(logits, self.config)),
            past_key_values=cache if (use_cache or past_key_values is not None) else None,
            hidden_states=base.hidden_states,
            vocab_logits=id_order(vocab_logits, self.config),
            gate=h.new_ones(B, T) if pointer is None else pointer.log_gate.exp(),
            pointer_attention=h.new_zeros(B, T, L) if pointer is None else pointer.log_attention.exp(),
            pointer_loss=None if loss is None else loss.pointer_loss,
            last_hidden_state=h,
            split_state=base.split_state,
            target_log_probs=None if loss is None else loss.target_log_probs,
            vocab_target_log_probs=None if loss is None else loss.vocab_target_log_probs,
        )
        return out if return_dict else out.to_tuple()

    # --- the ids carry the text: spelled words (`config.speller_size`) -------------------------------------------
    def _spelled_forward(self, input_ids, attention_mask, cache, shift_labels, num_items_in_batch):
        """Forward over ids in which each word outside the vocabulary is spelled. The word LSTM and the pointer run on
        the word steps alone (a spelled word is one step, at its `</w>`, read as its slot: `read_spelled`); each
        position's logits are then the word step's mixture over the vocabulary and the first bytes of spelled words,
        or, inside a word, `spelled_mixture`'s next symbol after the bytes so far. Normalised at every position, and
        cross-entropy of `logits` is the loss."""
        cfg, K = self.config, COPIED_SYMBOLS
        V, n, L = cfg.num_words, cfg.oov_slots, cfg.pointer_window
        if input_ids is None or input_ids.dim() != 2 or 0 in input_ids.shape:
            raise ValueError("input_ids must be a non-empty (batch, sequence) tensor of token ids.")
        _check_ids("input_ids", input_ids, V + SPELL_SYMBOLS)
        if cfg.vocab_limit and bool(((input_ids >= cfg.vocab_limit) & (input_ids < V)).any()):
            raise ValueError(f"input_ids hold words beyond vocab_limit={cfg.vocab_limit}: spell them.")
        B, T = input_ids.shape
        mask = _call_mask(attention_mask, T)
        if cache.spelled_rows is None:
            cache.spelled_rows = SpelledRows([SpelledRow() for _ in range(B)])
        window_before = [[None] * (L - len(r.window)) + r.window for r in cache.spelled_rows.rows]
        valid = [[True] * T] * B if mask is None else mask.tolist()
        steps, step_valid, spellings, anchors, prefixes = read_spelled(input_ids.tolist(), valid, cache.spelled_rows,
                                                                       V, n, L)  # fmt: skip
        device, Tw = input_ids.device, max(map(len, steps))
        h = self.model.embed_tokens.weight.new_zeros(B, 0, cfg.output_size)
        if Tw:  # the word steps, right-padded: padding keeps the state and never enters the window
            pad = cfg.pad_token_id if cfg.pad_token_id is not None else 0
            word_ids = torch.tensor([r + [pad] * (Tw - len(r)) for r in steps], device=device)
            word_mask = torch.tensor([r + [False] * (Tw - len(r)) for r in step_valid], device=device)
            word_mask = None if bool(word_mask.all()) else word_mask
            h = self.model(word_ids, word_mask, cache, True, return_dict=True, model_order=True).last_hidden_state
            pointer = self._pointer(cache, h, word_ids, word_mask) if self.pointer is not None else None
            places = self._placeholders(cache, word_ids, word_mask, pointer)
            log_p = self._report(h, pointer, places, None, 0, None)[0].log_softmax(-1)  # (B, Tw, V + n)
            memory = torch.stack([spelling_tensor(w + s + [None] * (Tw - len(s)), K, device)
                                  for w, s in zip(window_before, spellings, strict=True)])  # fmt: skip
            window_spellings = sliding_window(memory, L).transpose(-1, -2)  # (B, Tw, L, K)
            if pointer is not None:
                copyable = (
                    in_window(pointer.log_attention) & (pointer.window_ids >= V) & (window_spellings[..., 0] >= 0)
                )
                log_copy, log_new = window_copies(log_p[..., V:], pointer.window_ids - V, copyable)
            else:
                log_copy, log_new = log_p.new_full((B, Tw, L), -torch.inf), log_p[..., V:].logsumexp(-1)
        # the word step before each position, or at it; step 0 of these is the cache's (else an empty start)
        start = cache.spell_anchor or SpellAnchor(h.new_zeros(B, cfg.output_size), input_ids.new_full((B, L, K), -1),
                                                  h.new_full((B, L), -torch.inf), h.new_zeros(B))  # fmt: skip
        # each anchor field over the steps: the cache's, then this call's (none without a word step)
        now = (h, window_spellings, log_copy, log_new) if Tw else (None,) * 4
        steps_all = [b.unsqueeze(1) if a is None else torch.cat([b.unsqueeze(1).to(a.dtype), a], 1)
                     for a, b in zip(now, start, strict=True)]  # fmt: skip
        at = torch.tensor(anchors, device=device) + 1  # (B, T)
        gathered = [t[torch.arange(B, device=device)[:, None], at] for t in steps_all]
        a_h, a_window, a_copy, a_new = gathered
        k_max = max((len(p) for row in prefixes for p in row), default=0)
        prefix = [[list(p) + [-1] * (k_max - len(p)) for p in row] for row in prefixes]
        prefix = torch.tensor(prefix, dtype=torch.long, device=device)
        prefix = prefix.view(B, T, k_max)
        spell_in = F.pad(prefix.clamp(min=0), (0, 1)).view(B * T, k_max + 1)
        log_spell = self.speller(a_h.reshape(B * T, -1), spell_in).view(B, T, k_max + 1, SPELL_SYMBOLS)
        k = (prefix >= 0).sum(-1)
        log_next = log_spell.gather(2, k[..., None, None].expand(B, T, 1, SPELL_SYMBOLS)).squeeze(2)
        chosen = log_spell[:, :, :k_max].gather(-1, prefix.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        log_prefix = chosen.masked_fill(prefix < 0, 0).sum(-1)
        # a prefix longer than any copyable word is cut to K places: no window word matches it either way
        prefix_k = F.pad(prefix, (0, K - k_max), value=-1)
        symbols = spelled_mixture(a_copy, a_window, prefix_k, a_new, log_prefix, log_next)
        if Tw:
            words = log_p[..., :V].gather(1, (at - 1).clamp(min=0).unsqueeze(-1).expand(B, T, V))
            words = words.masked_fill((k > 0).unsqueeze(-1) | (at == 0).unsqueeze(-1), -torch.inf)
        else:
            words = symbols.new_full((B, T, V), -torch.inf)
        logits = torch.cat([words.to(symbols.dtype), symbols], -1)
        # the last word step of each row is the anchor for the bytes of the next call
        last = [max((i for i, ok in enumerate(r) if ok), default=-1) + 1 for r in step_valid]
        last = torch.tensor(last, device=device)
        cache.spell_anchor = SpellAnchor(*(t[torch.arange(B, device=device), last].detach() for t in steps_all))
        cache.seen_tokens += T - Tw
        loss = target_log_probs = None
        if shift_labels is not None:
            Tl = shift_labels.shape[1]
            counted = shift_labels != -100
            if mask is not None:
                counted = counted & mask[:, T - Tl :]
            picked = logits[:, T - Tl :].gather(-1, shift_labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            target_log_probs = torch.where(counted, picked, 0)
            items = num_items_in_batch if num_items_in_batch is not None else counted.sum().clamp(min=1)
            loss = -target_log_probs.sum() / items
        return PointerSentinelCausalLMOutput(loss=loss, logits=logits, target_log_probs=target_log_probs,
                                             last_hidden_state=a_h)  # fmt: skip

    # --- generate's step after the prompt: forward at T = 1 (`decode_step`, below) -------------------------------
    def _packed_weights(self) -> "PackedWeights":
        """`pack_weights`, kept while the parameters are unchanged (same tensors, dtype, device and version)."""
        key = tuple((p.data_ptr(), p.dtype, p.device, p._version) for p in self.parameters())
        if getattr(self, "_packed", (None,))[0] != key:
            self._packed = (key, pack_weights(self))
        return self._packed[1]

    def _decode_step(self, weights: "PackedWeights", state: DecodeState, ids: torch.Tensor, mix: bool, compiled=False):
        """`decode_step` for generate's loop, on token ids and in id order (`model_ids`, `id_order`); `compiled`: under
        torch.compile. Compiled code is specialised per model and, from the second batch size on, compiled once for
        any batch size; without fullgraph, past torch's recompile limit the step runs eagerly (with torch's warning)
        rather than failing (tests/test_fast_decode.py holds the step to one graph)."""
        if compiled and getattr(self, "_compiled_step", None) is None:
            self._compiled_step = torch.compile(decode_step)
        step = self._compiled_step if compiled else decode_step
        log_p, vocab = step(self, weights, state, model_ids(ids, self.config), mix)
        return id_order(log_p, self.config), id_order(vocab, self.config)

    def _spell_state(self, cache, state: DecodeState) -> tuple[DecodeState, "SpellState"]:
        """generate's spelled decoding after the prompt (one row): the word state with room for the step's attention,
        and `spell_state`."""
        if state.keys is not None:
            state = state._replace(attention=state.keys.new_zeros(state.ids.shape, dtype=torch.float32))
        return state, spell_state(self, self._packed_weights(), cache)

    def _spelled_step(self, weights: "PackedWeights", state: DecodeState, spell: "SpellState", token: int,
                      lazy: bool = False):  # fmt: skip
        if self.config.added_tokens:
            token = int(model_ids(torch.tensor(token), self.config))
        return id_order(spelled_decode_step(self, weights, state, spell, token, lazy), self.config)

    def _word_step(self, weights: "PackedWeights", token: int) -> bool:
        """Whether generate's token (without added tokens) is a word step, as `spelled_decode_step` reads it."""
        return not inside_word(token - weights.sizes[0])

    def _finish_word_step(self, weights: "PackedWeights", state: DecodeState, spell: "SpellState", log_p):
        return id_order(finish_word_step(self, weights, state, spell, log_p), self.config)

    def _spell_write_back(self, state: DecodeState, spell: "SpellState", cache):
        spell_write_back(state, spell, cache)


# ---- Generate's decode step: forward at T = 1 (§2.1-2.4) ------------------------------------------------------------


class PackedAdaptiveSoftmax(NamedTuple):
    """The adaptive softmax's matrices for the decode step: its head matrix (frequent words' rows, then the
    clusters'), and each tail's P_i and W_i, transposed (in, out); the biases are the module's own."""

    head: torch.Tensor
    tail_proj: list[torch.Tensor]
    tail_weight: list[torch.Tensor]


class PackedWeights(NamedTuple):
    """The weights as the decode step reads them. Input dimension first (`input_first`): a (1, in) @ (in, out)
    product streams the matrix row after row, which on CPU at batch 1 runs several times faster than torch's (out,
    in) layout. An exported graph keeps (out, in): its runtime lays weights out itself, and a tied embedding then
    stays one tensor in the file."""

    embedding: torch.Tensor  # (V, E), the model's own
    lstm: list[tuple[torch.Tensor, torch.Tensor]]  # per layer [W_ih | W_hh] (4H, I + H) and b_ih + b_hh
    query: tuple[torch.Tensor, torch.Tensor] | None  # W (D, D), b_q
    oov_query: tuple[torch.Tensor, torch.Tensor] | None  # W~ (D, D), b~ (`config.oov_pointer`)
    oov_context: tuple[torch.Tensor, torch.Tensor] | None  # W^ (D, D), b^ (`config.oov_pointer`)
    output: tuple[torch.Tensor, torch.Tensor] | None  # U (V, D), b; None with the adaptive softmax
    adaptive: PackedAdaptiveSoftmax | None  # the adaptive softmax's matrices, input first only
    input_first: bool  # the matrices above transposed, (in, out)
    speller: tuple | None = None  # init_state, [W_ih | W_hh], output layer (W, b); a word's first step's constants
    sizes: tuple[int, int, int] = (0, 0, 0)  # V + added tokens, oov_slots, L: read once (each config read costs µs)


def pack_weights(model: PointerSentinelForCausalLM, input_first: bool = True) -> PackedWeights:
    if not input_first and model.config.added_tokens:  # an exported step is fed token ids, which it would misread
        raise ValueError("A model with added tokens (config.added_tokens) is not exported: the exported step reads "
                         "ids in the model's own numbering, not the tokenizer's.")  # fmt: skip

    def t(w):  # (out, in): the parameter itself, so an exporter sees tied weights as one tensor
        return w.detach().t().contiguous() if input_first else w

    lstm = [(t(torch.cat([layer.weight_ih, layer.weight_hh], 1).detach()), (layer.bias_ih + layer.bias_hh).detach())
            for layer in model.model.layers]  # fmt: skip
    head = model.pointer
    query = (t(head.query.weight), head.query.bias.detach()) if head is not None else None
    oov = query and head.oov_query
    oov_query = (t(head.oov_query.weight), head.oov_query.bias.detach()) if oov else None
    oov_context = (t(head.oov_context.weight), head.oov_context.bias.detach()) if oov else None
    lm_head = model.lm_head
    adaptive = isinstance(lm_head, AdaptiveSoftmax)
    output = None if adaptive else (t(lm_head.weight), lm_head.bias.detach())
    packed = None
    if adaptive and input_first:
        packed = PackedAdaptiveSoftmax(t(lm_head.head_weight()), [t(p) for p in lm_head.tail_proj],
                                       [t(w) for w in lm_head.tail_weight])  # fmt: skip
    speller = None
    if model.speller is not None:
        sp, lstm_s = model.speller, model.speller.lstm
        speller = ((t(sp.init_state.weight), sp.init_state.bias.detach()),
                   (t(torch.cat([lstm_s.weight_ih_l0, lstm_s.weight_hh_l0], 1).detach()),
                    (lstm_s.bias_ih_l0 + lstm_s.bias_hh_l0).detach()),
                   (t(sp.out.weight), sp.out.bias.detach()),
                   # a word's first step reads the start symbol and cannot end the word: its input's gates and the
                   # mask on the end symbols are constants, so that step multiplies the state alone
                   (F.linear(sp.embed_bytes.weight[SPELL_END], lstm_s.weight_ih_l0, lstm_s.bias_ih_l0).detach()
                    + lstm_s.bias_hh_l0.detach(), sp.out.bias.detach().index_fill(0, torch.arange(SPELL_END,
                    SPELL_SYMBOLS, device=sp.out.bias.device), -torch.inf)))  # fmt: skip
    cfg = model.config
    return PackedWeights(model.model.embed_tokens.weight, lstm, query, oov_query, oov_context, output, packed,
                         input_first, speller, (cfg.num_words, cfg.oov_slots, cfg.pointer_window))  # fmt: skip


def ring_write(ring: torch.Tensor, slot: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """ring (B, L, ...) at slot (1,) <- value (B, ...), in place. A scatter along L: an exported graph's one
    ScatterElements, where index_copy_ exports as the whole ring transposed before and after a ScatterND."""
    index = slot.view(1, *(1,) * value.dim()).expand(value.shape[0], 1, *value.shape[1:])
    return ring.scatter_(1, index, value.unsqueeze(1))


def decode_step(model, w: PackedWeights, state: DecodeState, ids: torch.Tensor, mix: bool):
    """One token per row, ids (B,) -> (log p_mix (B, V + oov_slots), the vocabulary logits (B, V)): forward's
    arithmetic at T = 1 in eval mode, with nothing allocated beyond the step's activations. log p_mix is the
    vocabulary logits themselves without the pointer (or with mix=False), as `generate`'s processors receive them
    from forward."""
    places = Placeholders.of(model.config)
    if places is not None:  # the row's history, as forward's `_placeholders` carries it
        used, unk_count = places.history(ids.unsqueeze(1), torch.ones_like(ids, dtype=torch.bool).unsqueeze(1),
                                         state.used, state.unk_count)  # fmt: skip
        state.used.copy_(used[:, 0])
        state.unk_count.copy_(unk_count[:, 0])
        places = places._replace(used=state.used, unk_count=state.unk_count)
    x = embed(ids, w.embedding, places, model.model.oov_embedding)
    p = model.config.zoneout
    for layer, h, c in zip(w.lstm, state.hidden, state.cell, strict=True):
        h_new, c_new = lstm_cell(_linear(torch.cat([x, h], 1), *layer, w.input_first), c)
        if p > 0:  # zoneout at evaluation: the expectation
            h_new, c_new = zoneout(h_new, h, p), zoneout(c_new, c, p)
        h.copy_(h_new)
        c.copy_(c_new)
        x = h_new
    vocab = _linear(x, *w.output, w.input_first) if w.output is not None else model.lm_head(x, w.adaptive)
    if state.keys is None:
        return vocab, vocab
    if state.context is not None:  # c_i of the new key: the key before it, the newest in the ring
        newest = (state.slot - 1).remainder(state.keys.shape[1]).view(1)
        ring_write(state.context, state.slot, state.keys.index_select(1, newest)[:, 0])
    ring_write(state.keys, state.slot, x)
    ring_write(state.ids, state.slot, ids)
    ring_write(state.valid, state.slot, torch.ones_like(ids, dtype=torch.bool))
    state.slot.add_(1).remainder_(state.keys.shape[1])
    if not mix:
        return vocab, vocab
    q = torch.tanh(_linear(x, *w.query, w.input_first))  # (2.2a)
    z = (state.keys * q.unsqueeze(1)).sum(-1)  # (2.2b); at batch 32 a quarter of bmm's time, at batch 1 level
    if w.oov_query is not None:  # `config.oov_pointer`: placeholders' own query and repeat odds
        q_oov = torch.tanh(_linear(x, *w.oov_query, w.input_first))
        q_context = _linear(x, *w.oov_context, w.input_first)
        z_oov = (state.keys * q_oov.unsqueeze(1)).sum(-1) + (state.context * q_context.unsqueeze(1)).sum(-1)
        z = torch.where(state.ids >= places.first, z_oov, z)
        places = places._replace(repeat_logit=model.pointer.oov_repeat(x).squeeze(-1))
    log_gate, log_attention = model.pointer.attend(x, q, z, state.valid)
    if state.attention is not None:
        state.attention.copy_(log_attention)
    vocab_log_probs = vocab if w.output is None else torch.log_softmax(_upcast(vocab), -1)
    return pointer_mixture(vocab_log_probs, _upcast(log_gate), _upcast(log_attention), state.ids, places), vocab


# ---- Generate's decode step with the speller: forward at T = 1 on spelled ids ----------------------------------------


class SpellState(NamedTuple):
    """What the spelled decode step reads and updates in place, besides the word step's `DecodeState`: the row's
    spelled words (`SpelledRow`), the spellings of the window's words in the order of the state's ring (L, K), the
    last word step's copy masses over that ring and the speller's share (`SpellAnchor`), and the speller after the
    bytes so far: its LSTM state, those bytes (K places), their log probability and the next symbol's."""

    rows: "SpelledRows"
    spellings: torch.Tensor  # (1, L, K)
    log_copy: torch.Tensor  # (1, L)
    log_new: torch.Tensor  # (1,)
    hidden: torch.Tensor  # (1, S)
    cell: torch.Tensor  # (1, S)
    prefix: torch.Tensor  # (1, K), -1 past the bytes so far
    log_prefix: torch.Tensor  # (1,)
    log_next: torch.Tensor  # (1, SPELL_SYMBOLS)


def speller_start(model, w: "PackedWeights", h_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The speller's (h_0, c_0) from the word LSTM's output h_t (`Speller.forward`'s first line)."""
    h, c = torch.tanh(_linear(h_t, *w.speller[0], w.input_first)).chunk(2, -1)
    return h.contiguous(), c.contiguous()


def speller_step(model, w: "PackedWeights", symbol: torch.Tensor, h: torch.Tensor, c: torch.Tensor, first: bool):
    """The speller's LSTM one symbol on (`Speller.forward` at one position) on packed weights: the symbol read
    (SPELL_END starts a word, `<+w>` reads as it), the state in place, and log p_spell of the next symbol."""
    (lstm_w, lstm_b), (out_w, out_b), (start_gates, first_out_b) = w.speller[1:]
    if first:  # the start symbol's gates and "a word starts with a byte" are in the constants
        S = h.shape[-1]
        gates = _linear(h, lstm_w[S:] if w.input_first else lstm_w[:, S:], start_gates, w.input_first)
    else:
        x = F.embedding(symbol.clamp(0, SPELL_END), model.speller.embed_bytes.weight)
        gates = _linear(torch.cat([x, h], 1), lstm_w, lstm_b, w.input_first)
    h_new, c_new = lstm_cell(gates, c)
    h.copy_(h_new)
    c.copy_(c_new)
    return torch.log_softmax(_upcast(_linear(h_new, out_w, first_out_b if first else out_b, w.input_first)), -1)


def spell_state(model, w: "PackedWeights", cache: PointerSentinelCache) -> SpellState:
    """The spelled cache after the prompt (one row) as a SpellState, in the ring order of `decode_state`'s window
    (oldest first); a word the prompt left unfinished is read by the speller again from its anchor."""
    anchor, row, K = cache.spell_anchor, cache.spelled_rows.rows[0], COPIED_SYMBOLS
    h, c = speller_start(model, w, anchor.h.to(w.speller[0][0].dtype))
    start = torch.full((1,), SPELL_END, dtype=torch.long, device=h.device)
    log_next, log_prefix = speller_step(model, w, start, h, c, first=True), anchor.log_new.new_zeros(1)
    for s in row.word:
        log_prefix += log_next[:, s]
        log_next = speller_step(model, w, start.new_full((1,), s), h, c, first=False)
    prefix = spelling_tensor([tuple(row.word[:K])], K, h.device)
    return SpellState(cache.spelled_rows, anchor.window_spellings.clone(), anchor.log_copy.clone(),
                      anchor.log_new.clone(), h, c, prefix, log_prefix, log_next)  # fmt: skip


def inside_word(s: int) -> bool:
    """Whether spelling symbol s (id V + s; any s for other ids) is read inside a word: a byte, or `<+w>`. A word
    and `</w>` are word steps."""
    return 0 <= s < SPELL_SYMBOLS and s != SPELL_END


def spelled_decode_step(model, w: "PackedWeights", state: DecodeState, spell: SpellState, token: int,
                        lazy: bool = False) -> torch.Tensor:  # fmt: skip
    """One token of one row -> log p over the V + SPELL_SYMBOLS ids, forward's arithmetic at T = 1: a byte moves the
    speller alone; a word (a vocabulary id, or `</w>` read as its slot, as `read_spelled` reads it) is a word step
    (`decode_step`), whose window's spelled words can then be copied and whose h_t starts the speller again. The row's
    bookkeeping (its word in progress, its slots) is here; the arithmetic is `spelled_byte_step` and
    `spelled_word_step`, which examples/export_onnx.py exports as they are. With `lazy` a word step stops at its log p
    over the words and slots (`spelled_word_step`'s), which `finish_word_step` completes."""
    (V, n, L), K = w.sizes, COPIED_SYMBOLS
    row, s, device = spell.rows.rows[0], token - V, spell.prefix.device
    if inside_word(s):
        if s == SPELL_CONT and (not row.word or row.word[-1] == SPELL_CONT):
            raise ValueError("`<+w>` must follow a spelled byte.")
        row.word.append(s)
        return spelled_byte_step(model, w, spell, torch.full((1,), s, dtype=torch.long, device=device))
    if s == SPELL_END:
        if not row.word or row.word[-1] == SPELL_CONT:
            raise ValueError("`</w>` must close a spelled word: it follows no byte here.")
        spelling, row.word = (*row.word, SPELL_END), []
        token = V + row.slot(spelling, n)
    elif row.word:
        raise ValueError("A spelled word must end with `</w>` before the next word.")
    else:
        spelling = None
    kept = spelling if spelling is None or len(spelling) <= K else ()
    row.window = [*row.window, kept][-L:]
    ids = torch.full((1,), token, dtype=torch.long, device=device)
    return spelled_word_step(model, w, state, spell, ids, spelling_tensor([kept], K, device), lazy=lazy)


def spelled_byte_step(model, w: "PackedWeights", spell: SpellState, symbol: torch.Tensor, few: bool = True):
    """A byte (or `<+w>`) inside a word, symbol (B,): the speller one symbol on, the bytes so far and their log
    probability in `spell` updated in place -> log p (B, V + SPELL_SYMBOLS), -inf on the words (no word starts inside
    one). A prefix past K places is not written: it matches no window word (`spelled_mixture`'s K places)."""
    k = (spell.prefix >= 0).sum(-1, keepdim=True)  # the bytes so far, at most K
    written = spell.prefix.scatter(-1, k.clamp(max=spell.prefix.shape[-1] - 1), symbol.unsqueeze(-1))
    spell.prefix.copy_(torch.where(k < spell.prefix.shape[-1], written, spell.prefix))
    spell.log_prefix.add_(spell.log_next.gather(-1, symbol.unsqueeze(-1)).squeeze(-1))
    spell.log_next.copy_(speller_step(model, w, symbol, spell.hidden, spell.cell, first=False))
    symbols = _spelled_symbols(spell, few)
    return torch.cat([symbols.new_full((symbols.shape[0], model.config.num_words), -torch.inf), symbols], -1)


def spelled_word_step(model, w: "PackedWeights", state: DecodeState, spell: SpellState, ids: torch.Tensor,
                      kept: torch.Tensor, few: bool | torch.Tensor = True, lazy: bool = False):  # fmt: skip
    """A word step, ids (B,) (a vocabulary id, or a spelled word's slot V + k) and kept (B, K) (its spelling, bytes
    then SPELL_END padded with -1; all -1 for a vocabulary word or one too long to copy): `decode_step`, then
    `finish_word_step` -> log p (B, V + SPELL_SYMBOLS). `state.attention` must be given with the pointer
    (`_spell_state`). With `lazy`, the step's log p over the words and the slots (B, V + oov_slots) alone, up to a
    constant of the row (not yet renormalised): the slots' total is the unseen word's whole mass, which bounds every
    first byte's (generate's greedy, `_sample`)."""
    if state.keys is not None:  # the ring slot this word's key goes to
        ring_write(spell.spellings, state.slot.view(1), kept)
    if model.pointer is None:  # the new word's split of <unk>'s share alone, as `_report` gives it: one empty slot
        vocab, _ = decode_step(model, w, state, ids, mix=False)  # (ONNX Runtime's reductions over no slot give NaN)
        places = Placeholders.of(model.config)._replace(used=state.used, unk_count=state.unk_count)
        nothing = vocab.new_zeros(vocab.shape[0], 1)
        log_p = pointer_mixture(vocab, nothing[:, 0], nothing - torch.inf, nothing.long(), places)
    else:
        log_p = decode_step(model, w, state, ids, mix=True)[0]
    return log_p if lazy else finish_word_step(model, w, state, spell, log_p, few)


def finish_word_step(model, w: "PackedWeights", state: DecodeState, spell: SpellState, log_p: torch.Tensor,
                     few: bool | torch.Tensor = True) -> torch.Tensor:  # fmt: skip
    """A word step from its log p over the words and slots (B, V + oov_slots) on, renormalised as forward's logits
    are: the copies of the window's spelled words (`window_copies`) and the speller started from h_t, all in `spell`
    in place (the spellings in the ring order of `state`) -> log p (B, V + SPELL_SYMBOLS)."""
    V, log_p = model.config.num_words, log_p.log_softmax(-1)
    if model.pointer is None:
        spell.log_copy.fill_(-torch.inf)  # nothing to copy: every slot's mass is the new word's
        spell.log_new.copy_(log_p[:, V:].logsumexp(-1))
    else:
        copyable = in_window(state.attention) & (state.ids >= V) & (spell.spellings[..., 0] >= 0)
        log_copy, log_new = window_copies(log_p[:, V:], state.ids - V, copyable)
        spell.log_copy.copy_(log_copy)
        spell.log_new.copy_(log_new)
    h, c = speller_start(model, w, state.hidden[-1])
    spell.hidden.copy_(h)
    spell.cell.copy_(c)
    spell.prefix.fill_(-1)
    spell.log_prefix.zero_()
    start = torch.full(log_p.shape[:1], SPELL_END, dtype=torch.long, device=log_p.device)
    spell.log_next.copy_(speller_step(model, w, start, spell.hidden, spell.cell, first=True))
    symbols = _spelled_symbols(spell, few)
    return torch.cat([log_p[:, :V].to(symbols.dtype), symbols], -1)


def _spelled_symbols(spell: SpellState, few: bool | torch.Tensor = True) -> torch.Tensor:
    """`spelled_mixture` over the window's slots. `few` (one row, eager): over the slots that hold a word to copy
    alone (the others add nothing), so the (SPELL_SYMBOLS, L) comparison shrinks to those few, and with none, at a
    word's start, the speller's share alone (its logaddexp with -inf); the same values, in shapes that depend on the
    data, which an exported graph cannot have. `few` may instead be those slots (H,), any superset of them, read by
    every row: an exported graph's runner knows which of its window's slots hold spelled words."""
    if few is False:
        return spelled_mixture(spell.log_copy, spell.spellings, spell.prefix, spell.log_new, spell.log_prefix,
                               spell.log_next)  # fmt: skip
    if isinstance(few, torch.Tensor):
        held = few
    else:
        held = (spell.log_copy[0] > -torch.inf).nonzero()[:, 0]
        if held.numel() == 0 and spell.prefix[0, 0] < 0:
            return (spell.log_new + spell.log_prefix).unsqueeze(-1) + spell.log_next
    # index_select: an exported graph's Gather, where [:, held] exports as transposes around a GatherND
    return spelled_mixture(spell.log_copy.index_select(1, held), spell.spellings.index_select(1, held), spell.prefix,
                           spell.log_new, spell.log_prefix, spell.log_next)  # fmt: skip


def spell_write_back(state: DecodeState, spell: SpellState, cache: PointerSentinelCache):
    """The speller's anchor into the cache, its window oldest first again (`write_back` moves the word state)."""
    shift = -int(state.slot) if state.keys is not None else 0
    cache.spell_anchor = SpellAnchor(state.hidden[-1].clone(), torch.roll(spell.spellings, shift, 1),
                                     torch.roll(spell.log_copy, shift, 1), spell.log_new.clone())  # fmt: skip


__all__ = ["AdaptiveSoftmax", "PointerSentinelCausalLMOutput", "PointerSentinelForCausalLM", "PointerSentinelModel",
           "PointerSentinelModelOutput", "PointerSentinelPreTrainedModel", "SPELL_END", "Speller", "decode_step",
           "embedding_dropout", "locked_dropout", "pack_weights", "pointer_mixture", "pointer_target_log_prob",
           "spelled_mixture", "weight_drop", "zoneout"]  # fmt: skip
