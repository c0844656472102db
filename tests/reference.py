"""A slow, obviously-correct loop implementation of the paper's equations, read from a model's parameters."""

import math

import torch


def lstm_step(x, h, c, layer, zoneout=0.0):
    gates = layer.weight_ih @ x + layer.bias_ih + layer.weight_hh @ h + layer.bias_hh
    i, f, g, o = gates.chunk(4)
    c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    h_new = torch.sigmoid(o) * torch.tanh(c_new)
    # zoneout at evaluation: each unit keeps its old value with probability p, so use the expectation
    return zoneout * h + (1 - zoneout) * h_new, zoneout * c + (1 - zoneout) * c_new


@torch.no_grad()
def reference(model, ids):
    """For one sequence ids (T,): per position, the mixture distribution p (V,), the gate g, and the attention over
    positions t-L+1..t (list, oldest first, None where no position exists). Plain Python loops, float64."""
    cfg, lstm = model.config, model.model
    L, T = cfg.pointer_window, len(ids)
    hs = [torch.zeros(layer.hidden_size, dtype=torch.float64) for layer in lstm.layers]
    cs = [h.clone() for h in hs]
    top = []
    for t in range(T):
        x = lstm.embed_tokens.weight[ids[t]]
        for k, layer in enumerate(lstm.layers):
            hs[k], cs[k] = lstm_step(x, hs[k], cs[k], layer, cfg.zoneout)
            x = hs[k]
        top.append(x)
    out = []
    for t in range(T):
        h = top[t]
        logits = model.lm_head.weight @ h + model.lm_head.bias
        p_vocab = torch.softmax(logits, 0)
        if model.pointer is None:
            out.append((p_vocab, 1.0, [None] * L))
            continue
        window = [i for i in range(t - L + 1, t + 1)]  # oldest first, current last
        q = torch.tanh(model.pointer.query.weight @ h + model.pointer.query.bias)
        z = {i: float(q @ top[i]) for i in window if i >= 0}
        if cfg.gate_type == "sentinel":
            e = {i: math.exp(v) for i, v in z.items()}
            e_s = math.exp(float(q @ model.pointer.sentinel))
            total = sum(e.values()) + e_s
            a = {i: v / total for i, v in e.items()}
            g = e_s / total
        else:
            m = model.pointer.switch
            g = float(torch.sigmoid(m[2].weight @ torch.tanh(m[0].weight @ h + m[0].bias) + m[2].bias))
            total = sum(math.exp(v) for v in z.values())
            a = {i: (1 - g) * math.exp(v) / total for i, v in z.items()}
        p = g * p_vocab.clone()
        for i, ai in a.items():
            p[ids[i]] += ai  # mass on h_i goes to its input token x_i
        out.append((p, g, [a.get(i) for i in window]))
    return out
