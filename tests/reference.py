"""A slow, obviously-correct loop implementation of the paper's equations, read from a model's parameters.

In training mode the regularisers' random masks are passed in (`draw_masks` replays the model's random draws in the
order its forward makes them), so a training-mode forward can be checked number for number.
"""

import math

import torch
import torch.nn.functional as F


def draw_masks(model, B: int, T: int) -> dict:
    """The masks one training-mode forward of `model` on a (B, T) batch draws, in the order it draws them:
    embedding rows, input (B, 1, E), then per layer the W_hh DropConnect mask, zoneout's keep masks (h and c, per
    step) and the locked mask after the layer. Call right after re-seeding torch the way the forward was seeded."""
    cfg, lstm, dt = model.config, model.model, model.dtype
    masks = {"layers": []}
    V, E = lstm.embed_tokens.weight.shape
    if cfg.embedding_dropout:
        masks["embedding"] = torch.empty(V, 1, dtype=dt).bernoulli_(1 - cfg.embedding_dropout)
        masks["embedding"] /= 1 - cfg.embedding_dropout
    if cfg.input_dropout:
        masks["input"] = torch.empty(B, 1, E, dtype=dt).bernoulli_(1 - cfg.input_dropout) / (1 - cfg.input_dropout)
    for k, layer in enumerate(lstm.layers):
        H = layer.hidden_size
        m = {}
        if cfg.weight_drop:
            m["w_hh"] = F.dropout(torch.ones(4 * H, H, dtype=dt), cfg.weight_drop, True)
        if cfg.zoneout:
            m["keep_h"], m["keep_c"] = torch.empty(2, T, B, H, dtype=dt).bernoulli_(cfg.zoneout)
        p = cfg.output_dropout if k == len(lstm.layers) - 1 else cfg.hidden_dropout
        if p:
            m["after"] = torch.empty(B, 1, H, dtype=dt).bernoulli_(1 - p) / (1 - p)
        masks["layers"].append(m)
    return masks


def lstm_step(x, h, c, layer, w_hh, zoneout=0.0, keep_h=None, keep_c=None):
    gates = layer.weight_ih @ x + layer.bias_ih + w_hh @ h + layer.bias_hh
    i, f, g, o = gates.chunk(4)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    if keep_h is not None:  # zoneout in training: each unit keeps its previous value where its mask is 1
        return keep_h * h + (1 - keep_h) * h_new, keep_c * c + (1 - keep_c) * c_new
    # zoneout at evaluation: each unit keeps its old value with probability p, so use the expectation
    return zoneout * h + (1 - zoneout) * h_new, zoneout * c + (1 - zoneout) * c_new


@torch.no_grad()
def vocab_probs(model, h):
    """p_vocab (V,) for one h: softmax(U h + b), or the adaptive softmax word by word from its definition: p_head(w)
    for a frequent word, else p_head(w's cluster) * softmax over that cluster's words of W_i P_i h + b_i."""
    cfg, head = model.config, model.lm_head
    if not cfg.adaptive_softmax_cutoffs:
        return torch.softmax(head.weight @ h + head.bias, 0)
    edges = [0, *cfg.adaptive_softmax_cutoffs, cfg.vocab_size]
    c0 = edges[1]
    frequent = model.model.embed_tokens.weight[:c0] if cfg.tie_word_embeddings else head.weight
    p_head = torch.softmax(torch.cat([frequent, head.cluster_weight]) @ h + head.head_bias, 0)
    p = torch.zeros(cfg.vocab_size, dtype=h.dtype)
    for w in range(cfg.vocab_size):
        if w < c0:
            p[w] = p_head[w]
            continue
        i = next(k for k in range(1, len(edges) - 1) if edges[k] <= w < edges[k + 1]) - 1  # w's tail cluster
        scores = [float(head.tail_weight[i][j] @ (head.tail_proj[i] @ h) + head.tail_bias[i][j])
                  for j in range(edges[i + 2] - edges[i + 1])]  # fmt: skip
        p[w] = p_head[c0 + i] * math.exp(scores[w - edges[i + 1]]) / sum(math.exp(x) for x in scores)
    return p


@torch.no_grad()
def reference_batch(model, ids, masks=None, state=None, window=None, history=None):
    """ids (B, T). Per position the mixture distribution p (B, T, V + oov_slots), the gate g (B, T) and the attention
    over positions t-L+1..t (B, T, L; 0 where no position exists), the state after the call and the last L (h, id)
    of each row (oldest first). `masks` from `draw_masks` for a training-mode forward; None for evaluation.
    history: per row (slots used, literal <unk> seen) before the call (default none)."""
    cfg, lstm = model.config, model.model
    masks = masks or {"layers": [{} for _ in lstm.layers]}
    L, (B, T) = cfg.pointer_window, ids.shape
    emb = lstm.embed_tokens.weight * masks.get("embedding", 1.0)
    V, N, unk = emb.shape[0], cfg.oov_slots, cfg.unk_token_id
    p_out, g_out, a_out = (torch.zeros(*s, dtype=emb.dtype) for s in ((B, T, V + N), (B, T), (B, T, L)))
    g_out += 1
    new_state, new_window = [], []
    for b in range(B):
        if state is None:
            hs = [torch.zeros(layer.hidden_size, dtype=emb.dtype) for layer in lstm.layers]
            cs = [h.clone() for h in hs]
        else:
            hs, cs = [h[b] for h in state[0]], [c[b] for c in state[1]]
        past = list(window[b]) if window is not None else []
        top, seen = [], []  # seen: (k, n_unk) after each position
        used, n_unk = history[b] if history is not None else (0, 0)
        for t in range(T):
            used, n_unk = max(used, int(ids[b, t]) - V + 1), n_unk + int(ids[b, t] == unk)
            seen.append((used, n_unk))
            word = int(ids[b, t]) if ids[b, t] < V else unk  # a placeholder reads <unk>'s embedding
            own = lstm.oov_embedding is not None and ids[b, t] >= V  # or the placeholders' own
            x = (lstm.oov_embedding if own else emb[word]) * (masks["input"][b, 0] if "input" in masks else 1.0)
            for k, layer in enumerate(lstm.layers):
                m = masks["layers"][k]
                w_hh = layer.weight_hh * m.get("w_hh", 1.0)
                keep = (m["keep_h"][t, b], m["keep_c"][t, b]) if "keep_h" in m else (None, None)
                hs[k], cs[k] = lstm_step(x, hs[k], cs[k], layer, w_hh, cfg.zoneout, *keep)
                x = hs[k] * (m["after"][b, 0] if "after" in m else 1.0)
            top.append((x, int(ids[b, t])))
        new_state.append((hs, cs))
        seq = list(past)  # every position this row has seen, oldest first, as (h_i, x_i, c_i)
        for x, i in top:  # c_i: the state before position i, the one that predicted it
            seq.append((x, i, seq[-1][0] if seq else torch.zeros_like(x)))
        top = seq[len(past) :]
        for t in range(T):
            h = top[t][0]
            p_vocab = vocab_probs(model, h)
            if model.pointer is None:  # no window: every used slot is out of reach
                p = torch.cat([p_vocab, p_vocab.new_zeros(N)])
                p_out[b, t] = new_word(p, float(p_vocab[unk]), set(), *seen[t], V, N, unk) if N else p
                continue
            now = len(past) + t
            win = [seq[i] if i >= 0 else None for i in range(now - L + 1, now + 1)]  # oldest first, current last
            q = torch.tanh(model.pointer.query.weight @ h + model.pointer.query.bias)
            oq = model.pointer.oov_query  # placeholders' own query, if any
            q_oov = torch.tanh(oq.weight @ h + oq.bias) if oq is not None else q
            oc = model.pointer.oov_context  # and its query of the state before each placeholder
            q_c = oc.weight @ h + oc.bias if oc is not None else torch.zeros_like(q)
            e = [math.exp(float(q_oov @ w[0] + q_c @ w[2] if w[1] >= V else q @ w[0])) if w is not None else 0.0
                 for w in win]  # fmt: skip
            if cfg.gate_type == "sentinel":
                e_s = math.exp(float(q @ model.pointer.sentinel))
                a, g = [v / (sum(e) + e_s) for v in e], e_s / (sum(e) + e_s)
            else:
                s = model.pointer.switch
                g = float(torch.sigmoid(s[2].weight @ torch.tanh(s[0].weight @ h + s[0].bias) + s[2].bias))
                a = [(1 - g) * v / sum(e) for v in e]
            p = torch.cat([g * p_vocab, p_vocab.new_zeros(N)])
            for w, ai in zip(win, a, strict=True):
                if w is not None:
                    p[w[1]] += ai  # mass on h_i goes to its input token x_i
            M = float(p[V:].sum())  # the pointer's mass on the window's out-of-vocabulary words
            u, r = g * float(p_vocab[unk]) if N else 0.0, 0.0
            if M > 0:  # <unk>'s vocabulary share u = g p_vocab(<unk>): r to those, 1 - r to a new word
                odds = (
                    M / g * (math.exp(float(oq_r.weight @ h + oq_r.bias)) if (oq_r := model.pointer.oov_repeat) else 1)
                )
                r = odds / (1 + odds)
                p[V:] += u * r * p[V:] / M
                p[unk] -= u * r
            held = {w[1] - V for w in win if w is not None and w[1] >= V}
            p = new_word(p, u * (1 - r), held, *seen[t], V, N, unk) if N else p
            p_out[b, t], g_out[b, t], a_out[b, t] = p, g, torch.tensor(a, dtype=a_out.dtype)
        new_window.append(seq[-L:])
    state_out = ([torch.stack([s[0][k] for s in new_state]) for k in range(len(lstm.layers))],
                 [torch.stack([s[1][k] for s in new_state]) for k in range(len(lstm.layers))])  # fmt: skip
    return p_out, g_out, a_out, state_out, new_window


def new_word(p, p_new, held, k, n_unk, V, N, unk):
    """p with the new-word mass p_new, which sits on <unk>, shared: <unk> keeps (n_unk + 1/2) / (n_unk + k + 1) of it,
    the rest goes evenly to the slots a new word is written as, the next unused one (k < N) and the used ones not in
    the window (`held`); all of it stays on <unk> where there is none."""
    group = [j for j in range(N) if (j < k and j not in held) or j == k]
    if not group:
        return p
    moved = p_new * (k + 0.5) / (n_unk + k + 1)
    p = p.clone()
    p[unk] -= moved
    for j in group:
        p[V + j] += moved / len(group)
    return p


def reference(model, ids):
    """For one sequence ids (T,) at evaluation: per position (p (V,), g, attention list oldest first with None
    where no position exists)."""
    p, g, a, _, _ = reference_batch(model, torch.as_tensor(ids)[None])
    L, out = model.config.pointer_window, []
    for t in range(len(ids)):
        att = [float(a[0, t, j]) if t - L + 1 + j >= 0 else None for j in range(L)]
        out.append((p[0, t], float(g[0, t]), att if model.pointer is not None else [None] * L))
    return out


def spelled_next(words, copy, new, spell_next, prefix):
    """The unseen word's next symbol by the definition, one candidate at a time: words are the window slots' spellings
    (lists of bytes, None for a slot without one), copy their masses, new the speller's mass N, spell_next(prefix)
    the speller's distribution over the symbols (bytes, then 256 = the end, ...) after `prefix`. Returns the joint
    masses at a word boundary (empty prefix), else the conditional probabilities."""
    end = 256

    def p_spell(bytes_):
        p = 1.0
        for i, b in enumerate(bytes_):
            p *= spell_next(bytes_[:i])[b]
        return p

    k, n = len(prefix), len(spell_next(prefix))
    out = [0.0] * n
    for s in range(n):
        for w, c in zip(words, copy, strict=True):
            if w is not None and list(w[:k]) == list(prefix) and (len(w) > k and w[k] == s or len(w) == k and s == end):
                out[s] += c
        out[s] += new * p_spell(prefix) * spell_next(prefix)[s]
    if k == 0:
        return out
    total = sum(out)
    return [o / total for o in out] if total > 0 else list(spell_next(prefix))
