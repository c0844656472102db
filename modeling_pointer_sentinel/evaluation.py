"""Evaluation measures: perplexity with and without the pointer, Grave et al.'s neural cache, rare-word buckets and
gate statistics. Everything works on per-target outputs of the model's own forward (one implementation of the
mixture). The pictures (gate histogram, bucket bars, pointer windows) are in `plotting.py`."""

import math
from dataclasses import dataclass

import torch

from .modeling_pointer_sentinel import PointerSentinelCache


@dataclass
class StreamOutputs:
    """Per-target results over (B, N) streams, in stream order: position t predicts targets[:, t]."""

    targets: torch.Tensor  # (B, N)
    log_probs: torch.Tensor  # (B, N) log p(y) of the model (the mixture; the softmax alone for plain models)
    vocab_log_probs: torch.Tensor  # (B, N) log p_vocab(y): pointer switched off (g forced to 1)
    gate: torch.Tensor  # (B, N) g
    hidden: torch.Tensor | None = None  # (B, N, D) last-layer outputs, for the neural cache

    def perplexity(self, pointer: bool = True) -> float:
        return math.exp(-(self.log_probs if pointer else self.vocab_log_probs).double().mean().item())


@torch.no_grad()
def collect_outputs(model, streams: torch.Tensor, bptt: int = 200, keep_hidden: bool = False, progress=None):
    """Run the model over (B, N+1) streams with its state carried across chunks (the standard word-LM evaluation)."""
    model.eval()
    cache, parts = PointerSentinelCache(), []
    for p in range(0, streams.shape[1] - 1, bptt):
        k = min(bptt, streams.shape[1] - 1 - p)
        y = streams[:, p + 1 : p + k + 1]
        out = model(streams[:, p : p + k], shift_labels=y, past_key_values=cache, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        hidden = out.last_hidden_state.float().cpu() if keep_hidden else None
        parts.append((y.cpu(), out.target_log_probs.cpu(), out.vocab_target_log_probs.cpu(), out.gate.cpu(), hidden))
        if progress is not None:
            progress.update(k * streams.shape[0])
    cat = [torch.cat(xs, 1) if xs[0] is not None else None for xs in zip(*parts, strict=True)]
    return StreamOutputs(*cat)


# ---------------------------------------------------------------------------------------------------------------
# Neural cache (Grave, Joulin & Usunier, 2017)
# ---------------------------------------------------------------------------------------------------------------


class NeuralCache:
    """Continuous cache over the last `window` hidden states of each stream, vectorised over chunks and batch.

    p(w) = (1 - lam) p_model(w) + lam p_cache(w),  p_cache(w) ∝ Σ_{i in window, x_{i+1} = w} exp(theta h_t·h_i)

    Alignment (Grave's): the state h_i is the key of the token that followed it, x_{i+1}; query t sees the states of
    positions t-window ... t-1, whose next tokens are all known. The cache applies from the first token on (positions
    with an empty cache keep p_model). Only the targets' probabilities are computed: no vocabulary-sized tensor.
    """

    def __init__(self, window: int = 3785, theta: float = 0.662, lam: float = 0.1279, chunk: int = 256):
        if window < 1 or not 0 <= lam <= 1 or chunk < 1:
            raise ValueError(f"Need window >= 1, 0 <= lambda <= 1, chunk >= 1; got {window}, {lam}, {chunk}.")
        self.window, self.theta, self.lam, self.chunk = window, theta, lam, chunk
        self.keys = self.values = None  # rolling memory (B, <= window, D), (B, <= window)

    def reset(self):
        self.keys = self.values = None

    def __call__(self, hidden: torch.Tensor, targets: torch.Tensor, model_log_probs: torch.Tensor) -> torch.Tensor:
        """hidden (B, T, D), targets (B, T) (the token after each position), model log p(y) (B, T) -> mixed (B, T)."""
        out = []
        for s in range(0, hidden.shape[1], self.chunk):
            out.append(self._chunk(hidden[:, s : s + self.chunk], targets[:, s : s + self.chunk],
                                   model_log_probs[:, s : s + self.chunk]))  # fmt: skip
        return torch.cat(out, 1)

    def _chunk(self, h, y, model_lp):
        B, T, _ = h.shape
        mem_k = h.new_zeros(B, 0, h.shape[-1]) if self.keys is None else self.keys
        mem_v = y.new_zeros(B, 0) if self.values is None else self.values
        keys, values, M = torch.cat([mem_k, h], 1), torch.cat([mem_v, y], 1), mem_k.shape[1]
        scores = self.theta * (h @ keys.transpose(1, 2))  # (B, T, M+T)
        t = torch.arange(T, device=h.device)[:, None] + M  # query positions in key coordinates
        j = torch.arange(M + T, device=h.device)[None]
        valid = (j < t) & (j >= t - self.window)  # strictly earlier keys: h_t's own next token is the target
        scores = scores.masked_fill(~valid, -torch.inf)
        hit = valid & (values[:, None, :] == y[:, :, None])
        any_key, any_hit = valid.any(-1).expand(B, -1), hit.any(-1)
        lse_all = torch.logsumexp(scores.masked_fill(~any_key[..., None], 0), -1)
        lse_hit = torch.logsumexp(scores.masked_fill(~hit, -torch.inf).masked_fill(~any_hit[..., None], 0), -1)
        log_cache = torch.where(any_hit, lse_hit - lse_all, -torch.inf)
        if self.lam == 0:
            mixed = model_lp
        else:
            keep = math.log1p(-self.lam) if self.lam < 1 else -math.inf
            mixed = torch.logaddexp(keep + model_lp, math.log(self.lam) + log_cache)
        self.keys, self.values = keys[:, -self.window :], values[:, -self.window :]
        return torch.where(any_key, mixed, model_lp)


def neural_cache_loop_reference(hidden, targets, model_log_probs, window, theta, lam):
    """Per-token loop, as the public cache code does it (one stream at a time, Python loop): the slow reference."""
    B, N, _ = hidden.shape
    out = model_log_probs.clone()
    for b in range(B):
        for t in range(N):
            lo = max(0, t - window)
            if t == lo:
                continue
            weights = torch.softmax(theta * (hidden[b, lo:t] @ hidden[b, t]), 0)
            p_cache = sum(
                w for w, v in zip(weights.tolist(), targets[b, lo:t].tolist(), strict=True) if v == targets[b, t]
            )
            p = (1 - lam) * math.exp(model_log_probs[b, t]) + lam * p_cache
            out[b, t] = math.log(p)
    return out


def cache_grid_search(outputs: StreamOutputs, windows, thetas, lambdas, base: str = "mixture", progress=None):
    """Perplexity of the model + cache for every (window, theta, lambda) on stored outputs; rows sorted best first.
    `progress` (e.g. a tqdm bar) gets `update(1)` after each grid point."""
    lp = outputs.log_probs if base == "mixture" else outputs.vocab_log_probs
    rows = []
    for w in windows:
        for th in thetas:
            for lam in lambdas:
                mixed = NeuralCache(w, th, lam)(outputs.hidden, outputs.targets, lp)
                rows.append(dict(window=w, theta=th, lam=lam, ppl=math.exp(-mixed.double().mean().item())))
                if progress is not None:
                    progress.update(1)
    return sorted(rows, key=lambda r: r["ppl"])


# ---------------------------------------------------------------------------------------------------------------
# Analyses
# ---------------------------------------------------------------------------------------------------------------


def frequency_buckets(train_ids: torch.Tensor, targets: torch.Tensor, n_buckets: int = 10) -> torch.Tensor:
    """Bucket of each target (0 = most frequent words): targets sorted by their training frequency and cut into
    `n_buckets` groups of equal size, as in the paper's Figure 4. Ties keep the targets' order (stable sort)."""
    counts = torch.bincount(train_ids.flatten(), minlength=int(max(train_ids.max(), targets.max())) + 1)
    flat = targets.flatten()
    order = torch.sort(counts[flat], descending=True, stable=True).indices
    buckets = torch.empty_like(flat)
    buckets[order] = torch.arange(flat.numel()) * n_buckets // flat.numel()
    return buckets.view_as(targets)


def bucket_log_ppl_difference(log_probs_a, log_probs_b, buckets, n_buckets: int = 10) -> list[float]:
    """Mean of log p_a(y) - log p_b(y) per bucket (positive: model A better on those words)."""
    diff = (log_probs_a - log_probs_b).double().flatten()
    b = buckets.flatten()
    return [diff[b == k].mean().item() for k in range(n_buckets)]


def gate_statistics(outputs: StreamOutputs, tokenizer=None, top: int = 20, min_count: int = 20) -> dict:
    """Mean gate, the share of the targets' probability that came from the pointer, and the words whose probability
    came mostly from the pointer."""
    lp, vlp, g = outputs.log_probs.double(), outputs.vocab_log_probs.double(), outputs.gate.double()
    pointer_share = (1 - torch.exp(g.clamp_min(1e-300).log() + vlp - lp)).clamp(0, 1)  # of p(y)
    by_word: dict[int, list[float]] = {}
    for w, s in zip(outputs.targets.flatten().tolist(), pointer_share.flatten().tolist(), strict=True):
        by_word.setdefault(w, []).append(s)
    words = [(w, sum(v) / len(v), len(v)) for w, v in by_word.items() if len(v) >= min_count]
    words.sort(key=lambda r: -r[1])
    name = (lambda i: tokenizer.convert_ids_to_tokens(i)) if tokenizer is not None else str
    return {
        "mean_gate": g.mean().item(),
        "mean_pointer_share_of_target_prob": pointer_share.mean().item(),
        "top_pointer_words": [(name(w), round(s, 3), n) for w, s, n in words[:top]],
    }
