"""What the demo page (examples/app.py) shows of a text, computed from the model's own outputs: where the pointer
looked (its window and attention a), how far the sentinel gate g opened, and how each word's probability splits into
a vocabulary part g p_vocab(w), a pointer part sum_{i in window, x_i = w} a_i (the paper's 2.4) and, with a speller,
the speller's part N p_spell(w) (N: the new-word mass).

`explain` reads a word-level forward's `logits`, `vocab_logits`, `gate` and `pointer_attention`, and reaches the
model's own formulas (the mixture with the pointer off, the copies of spelled words) through the module of the model
it is given, so it serves a model loaded from this package or from a folder's remote code alike, and it imports
nothing from the package.

`<unk>` and the placeholders of unseen words share `<unk>`'s vocabulary mass g p_vocab(<unk>) (`split_unknown`): their
vocabulary part is their probability less their pointer part, and those parts sum to g p_vocab(<unk>).

A spelling model (`config.speller_size`) runs its word LSTM and pointer on word steps (a vocabulary word, or a spelled
word's `</w>` read as its slot, `read_spelled`); its forward reports the mixture over bytes but not the gate or the
attention. `word_model` is its word-level twin (the same weights, no speller): the twin's forward over the word steps
is the spelled forward's word step, so `explain` reads the gate, the attention and the mixture over vocabulary and
slots there. A spelled word w at a word step is then a copy, the mass c_j of the window slots j that hold it
(`window_copies`: the slot's column, its pointer part and its share of <unk>'s vocabulary mass), plus the speller's
new word, N p_spell(w) (`Speller`); `spelled_parts` splits it so.
"""

import copy
import sys
from dataclasses import dataclass

import torch


@dataclass
class Explanation:
    """Per position t, the moment the token after t was chosen; each tensor (T, ...), probabilities in float64."""

    gate: torch.Tensor  # (T,) g, the vocabulary softmax's share
    window_ids: torch.Tensor  # (T, L) the tokens t-L+1 ... t, oldest first; -1 where none
    attention: torch.Tensor  # (T, L) a on them
    top_ids: torch.Tensor  # (T, k) the most probable next tokens, most probable first
    top_prob: torch.Tensor  # (T, k) their p(w); each p = top_vocab + top_pointer
    top_vocab: torch.Tensor
    top_pointer: torch.Tensor
    target_prob: torch.Tensor | None = None  # (T,) p(y) of the `targets`, and its two parts
    target_vocab: torch.Tensor | None = None
    target_pointer: torch.Tensor | None = None
    # log p(y) of the same model with the pointer off (g = 1, an empty window): the mixture's own formula, so an
    # unseen word gets the share of p_vocab(<unk>) the model without a pointer gives a new word, not all of it
    target_log_prob_without_pointer: torch.Tensor | None = None
    log_p: torch.Tensor | None = None  # (T, V + n) the word-level mixture, log p
    log_p_without_pointer: torch.Tensor | None = None  # (T, V + n) the same with the pointer off
    log_p_vocab: torch.Tensor | None = None  # (T, V) log p_vocab
    hidden: torch.Tensor | None = None  # (T, D) h_t, what the speller starts from
    vocab_size: int = 0
    unk: int = 0

    @property
    def target_share(self) -> torch.Tensor:
        """The share of p(y) that came from the pointer."""
        return self.target_pointer / self.target_prob


def model_module(model):
    """The module of the model's class: its own formulas, whether loaded from this package or a folder's code."""
    return sys.modules[type(model).__module__]


_TWINS = {}  # id(model) -> (model, its word-level twin)


def word_model(model):
    """The model whose forward over the word steps gives the gate, the attention and the word-level mixture: the
    model itself, or for a spelling model its twin without the speller (same weights; built once per model)."""
    if not getattr(model.config, "speller_size", 0):
        return model
    if (kept := _TWINS.get(id(model))) is not None and kept[0] is model:
        return kept[1]
    config = copy.deepcopy(model.config)
    config.speller_size = 0
    twin = type(model)(config).to(model.device, model.dtype)
    result = twin.load_state_dict(model.state_dict(), strict=False)
    unexpected = [k for k in result.unexpected_keys if not k.startswith("speller.")]
    if result.missing_keys or unexpected:
        raise ValueError(f"the word-level twin does not take the model's weights: {result.missing_keys}, {unexpected}")
    _TWINS[id(model)] = (model, twin.eval())
    return twin


@torch.no_grad()
def word_steps(model, ids: list[int], state=None):
    """The word steps of `ids` (1-D, a row from its start, or its continuation with the `state` returned before): for
    a spelling model the model's own `read_spelled` (a vocabulary id, or a spelled word's `</w>` read as its slot);
    else every token is a step. Returns (step ids, the index in `ids` of the token that ends each step, whether each
    step is a spelled word the pointer can copy (at most `COPIED_SYMBOLS` symbols), state)."""
    if not getattr(model.config, "speller_size", 0):
        V = model.config.vocab_size
        return list(ids), list(range(len(ids))), [i >= V for i in ids], state
    mod, cfg = model_module(model), model.config
    state = state if state is not None else mod.SpelledRows([mod.SpelledRow()])
    steps, _, spellings, anchors, _ = mod.read_spelled([list(ids)], [[True] * len(ids)], state, cfg.vocab_size,
                                                       cfg.oov_slots, cfg.pointer_window)  # fmt: skip
    # a position ends a word where read_spelled anchors it to a new step
    ends = [i for i, (a, b) in enumerate(zip([-1, *anchors[0]], anchors[0], strict=False)) if b > a]
    return steps[0], ends, [bool(s) for s in spellings[0]], state


def without_pointer(out, ids, model) -> torch.Tensor:
    """log p (T, V + n) of the model with the pointer off at the positions of `out` (g = 1, an empty window): the
    model's own `pointer_mixture` over p_vocab, with the row's history of slots (`new_word`), as the model without a
    pointer reads it."""
    mod, cfg = model_module(model), model.config
    log_pv = torch.log_softmax(out.vocab_logits[0].double(), -1)
    T = log_pv.shape[0]
    places = mod.Placeholders.of(cfg)
    if places is None:
        return log_pv
    ids = torch.as_tensor(ids).flatten()[None]
    start = ids.new_zeros(1)
    used, unk_count = places.history(ids, torch.ones_like(ids, dtype=torch.bool), start, start)
    places = places._replace(used=used[0, -T:], unk_count=unk_count[0, -T:])
    empty = log_pv.new_zeros(T, 0)
    return mod.pointer_mixture(log_pv, log_pv.new_zeros(T), empty, empty.long(), places)


@torch.no_grad()
def explain(out, ids, model, targets=None, top_k: int = 10) -> Explanation:
    """The pointer's view at the positions of `out`, a word-level model output for one row (no padding) whose T
    positions are the last T of `ids` (1-D: the row's tokens so far; the earlier ones fill the window). `targets`
    (T,): the token that followed each position (its probability, parts and log p without the pointer; every target,
    an unseen word's first occurrence included, is read in its own column, as the model's loss reads it); `model`
    gives the vocabulary size, `<unk>` and the formulas. The plain LSTM (use_pointer=False) reads g = 1 and a = 0."""
    config = model.config
    # in float64: a float32 log-softmax over tens of thousands of columns is off by 1e-5 of p; the mixture is
    # normalised already, the plain model's logits are not
    log_p = torch.log_softmax(out.logits[0].double(), -1)
    log_pv = torch.log_softmax(out.vocab_logits[0].double(), -1)  # (T, V) log p_vocab
    T, L = log_p.shape[0], out.pointer_attention.shape[-1]
    gate, attention = out.gate[0, -T:].double(), out.pointer_attention[0, -T:].double()
    ids = torch.as_tensor(ids).flatten()
    n = ids.numel()
    # row t holds ids t-L+1 ... t, as `sliding_window` lays the model's window out
    window_ids = torch.cat([ids.new_full((L - 1,), -1), ids])[n - T : n + L - 1].unfold(0, L, 1)
    e = Explanation(gate, window_ids, attention, *(None,) * 4, log_p=log_p, log_p_vocab=log_pv,
                    vocab_size=config.vocab_size, unk=config.unk_token_id)  # fmt: skip
    e.top_ids, e.top_prob, e.top_vocab, e.top_pointer = top_words(e, top_k)
    e.log_p_without_pointer = without_pointer(out, ids, model)
    if getattr(out, "last_hidden_state", None) is not None:
        e.hidden = out.last_hidden_state[0, -T:]
    if targets is not None:
        y = torch.as_tensor(targets).reshape(T, 1)  # a new unseen word's column holds its new-word share
        e.target_prob, e.target_vocab, e.target_pointer = (t[:, 0] for t in word_parts(e, y))
        e.target_log_prob_without_pointer = e.log_p_without_pointer.gather(-1, y)[:, 0]
    return e


def word_parts(e: Explanation, w: torch.Tensor):
    """w (T, k) -> p(w), its vocabulary part and its pointer part at each position of `e`."""
    V, unk = e.vocab_size, e.unk
    p = e.log_p.gather(-1, w).exp()
    pointer = ((e.window_ids[:, :, None] == w[:, None, :]) * e.attention[:, :, None]).sum(1)
    own = (w < V) & (w != unk)  # a word of the vocabulary other than <unk> has g p_vocab(w) to itself
    vocab = e.gate[:, None] * e.log_p_vocab.gather(-1, w.clamp(max=V - 1)).exp()
    return p, torch.where(own, vocab, p - pointer), pointer


def top_words(e: Explanation, k: int, columns: int | None = None):
    """The k most probable next tokens among the first `columns` (all: None) at each position, most probable first,
    and word_parts' p and parts of each."""
    log_p = e.log_p[:, :columns]
    top = log_p.topk(min(k, log_p.shape[-1]), -1).indices
    return top, *word_parts(e, top)


def row(e: Explanation, t: int) -> Explanation:
    """Position t of `e` alone (each per-position field sliced to t:t+1)."""
    fields = {f: getattr(e, f) for f in Explanation.__dataclass_fields__}
    return Explanation(**{f: v[t : t + 1] if isinstance(v, torch.Tensor) else v for f, v in fields.items()})


# ---- a spelling model's words: copies of the window's spelled words and the speller's new word ----------------------


@torch.no_grad()
def spelling_log_prob(model, h: torch.Tensor, spellings: list[tuple]) -> torch.Tensor:
    """log p_spell(w | h) of each spelling (symbols, then `</w>`) after each context h (n, D): the model's `Speller`
    over the word's symbols. (n,) float64."""
    if not spellings:
        return torch.zeros(0, dtype=torch.float64)
    K = max(map(len, spellings))
    symbols = torch.full((len(spellings), K), -1, dtype=torch.long)
    for i, s in enumerate(spellings):
        symbols[i, : len(s)] = torch.tensor(s)
    log_next = model.speller(h.to(model.speller.out.weight.dtype), symbols.clamp(min=0)).double()
    picked = log_next.gather(-1, symbols.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked.masked_fill(symbols < 0, 0).sum(-1)


@torch.no_grad()
def new_word_mass(model, e: Explanation, copyable: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """At each word position of `e` (a spelling model's twin), the model's `window_copies`: log c_j (T, L) of each
    window slot that holds a spelled word it copies (`copyable` (T, L): the slot holds a spelled word short enough to
    copy), and log N (T,), the speller's new-word mass. A model without a pointer copies nothing."""
    V = model.config.vocab_size
    log_slots = e.log_p[:, V:]
    if not model.config.use_pointer:
        return log_slots.new_full(e.window_ids.shape, -torch.inf), log_slots.logsumexp(-1)
    held = copyable & (e.window_ids >= V)
    return model_module(model).window_copies(log_slots, (e.window_ids - V).clamp(min=0), held)


@torch.no_grad()
def spelled_parts(e: Explanation, t: int, log_copy: torch.Tensor, log_new: torch.Tensor, slot: int | None,
                  log_spell: float) -> dict:  # fmt: skip
    """p(w) of a spelled word w at word position t and its parts: the copies c_j of the window slots that hold it (its
    slot's column in the window: the pointer's attention on it, and the rest, its share of <unk>'s vocabulary mass)
    and the speller's new word N p_spell(w). `slot`: the word's column V + k, None where the window does not hold it.
    p = vocabulary + pointer + speller, the sum over the word's symbols `spelled_mixture` telescopes to."""
    hold = (e.window_ids[t] == slot) & (log_copy[t] > -torch.inf) if slot is not None else None
    copied = float(log_copy[t][hold].logsumexp(0).exp()) if hold is not None and hold.any() else 0.0
    pointer = float(e.attention[t][hold].sum()) if hold is not None and hold.any() else 0.0
    speller = float((log_new[t] + log_spell).exp())
    return {"probability": copied + speller, "vocabulary": copied - pointer, "pointer": pointer, "speller": speller}


@torch.no_grad()
def spelled_top(model, e: Explanation, t: int, log_copy: torch.Tensor, log_new: torch.Tensor,
                window_spellings: list) -> list[dict]:  # fmt: skip
    """The spelled words a spelling model may write next at word position t, each with `spelled_parts`: every word
    of the window it can copy (its distinct slots; `window_spellings`: the spelling of each of the row's L window
    entries, None for a vocabulary word), then the speller's new word, any spelling the window does not hold:
    N (1 - sum of the listed words' p_spell). Never a word the text has not shown yet."""
    V, words = e.vocab_size, {}
    for i, (w, s) in enumerate(zip(e.window_ids[t].tolist(), window_spellings, strict=True)):
        if w >= V and s and log_copy[t, i] > -torch.inf:
            words.setdefault(w, tuple(s))
    log_spell = spelling_log_prob(model, e.hidden[t].expand(len(words), -1), list(words.values())) if words else []
    rows = [{"slot": w, "spelling": s, **spelled_parts(e, t, log_copy, log_new, w, float(ls))}
            for (w, s), ls in zip(words.items(), log_spell, strict=True)]  # fmt: skip
    rest = 1 - float(torch.as_tensor(log_spell).exp().sum()) if words else 1.0
    new = float(log_new[t].exp()) * max(rest, 0.0)
    return rows + [{"slot": None, "spelling": None, "probability": new, "vocabulary": 0.0, "pointer": 0.0,
                    "speller": new}]  # fmt: skip
