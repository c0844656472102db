"""Pictures for the analyses in `evaluation.py`: gate histogram, per-frequency-bucket bars (paper Figure 4) and the
pointer's attention over its window (paper Figures 5-12). Needs matplotlib (`pip install matplotlib`, or the
`analysis` extra)."""

import html

import torch

from .evaluation import StreamOutputs


def plot_gate_histogram(outputs: StreamOutputs, path, title="gate g over the split"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.hist(outputs.gate.flatten().numpy(), bins=50, color="#4472c4")
    ax.set_xlabel("g (share of the vocabulary softmax)")
    ax.set_ylabel("positions")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_bucket_differences(diffs, path, label_a="pointer", label_b="plain"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(range(1, len(diffs) + 1), diffs, color=["#2e7d32" if d > 0 else "#c62828" for d in diffs])
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xlabel("word-frequency bucket (1 = most frequent, equal numbers of targets)")
    ax.set_ylabel(f"mean log p_{label_a} - log p_{label_b}")
    ax.set_title(f"{label_a} vs {label_b}: log-perplexity gain by training frequency")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@torch.no_grad()
def pointer_window_picture(model, tokenizer, ids: torch.Tensor, position: int, png_path, html_path=None) -> dict:
    """The paper's Figures 5-12: the window before `position` coloured by pointer attention, with the gate, the
    predicted word and the true next word."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model.eval()
    out = model(ids[None, : position + 1], logits_to_keep=1)
    L = model.config.pointer_window
    attention = out.pointer_attention[0, -1].tolist()  # oldest first
    start = position + 1 - L
    words = [tokenizer.convert_ids_to_tokens(int(ids[i])) if i >= 0 else "" for i in range(start, position + 1)]
    gate = out.gate[0, -1].item()
    predicted = tokenizer.convert_ids_to_tokens(int(out.logits[0, -1].argmax()))
    actual = tokenizer.convert_ids_to_tokens(int(ids[position + 1])) if position + 1 < len(ids) else None
    top = max(attention) or 1.0
    fig, ax = plt.subplots(figsize=(12, 5))
    ax.axis("off")
    x, y = 0.0, 1.0
    for word, a in zip(words, attention, strict=True):
        if not word:
            continue
        width = 0.012 * (len(word) + 1)
        if x + width > 1:
            x, y = 0.0, y - 0.09
        ax.text(x, y, word, fontsize=10, va="top", family="monospace",
                bbox=dict(facecolor=plt.cm.Reds(a / top), edgecolor="none", pad=1.5))  # fmt: skip
        x += width
    ax.set_title(f"gate g = {gate:.3f} (pointer {1 - gate:.3f}) | predicted: {predicted} | actual: {actual}")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    if html_path is not None:
        spans = "".join(
            f'<span style="background: rgba(200,0,0,{a / top:.3f})" title="{a:.4f}">{html.escape(w)}</span> '
            for w, a in zip(words, attention, strict=True)
            if w
        )
        head = f"<p>g = {gate:.3f}; predicted <b>{html.escape(predicted)}</b>; actual <b>{html.escape(actual)}</b></p>"
        with open(html_path, "w") as f:
            f.write(f"<html><body style='font-family: monospace'>{head}<p>{spans}</p></body></html>")
    return dict(gate=gate, predicted=predicted, actual=actual, attention=attention, words=words)


def pointer_picture_positions(
    outputs: StreamOutputs, train_ids: torch.Tensor | None = None, exclude_ids=(), n: int = 3, row: int = 0,
    min_position: int = 0,
) -> list[int]:  # fmt: skip
    """Positions of stream `row` worth a pointer picture, chosen like the paper's Figures 5-12: the target is a rare
    word (training frequency at most the median of the split's targets; never one of `exclude_ids`, e.g. `<eos>` and
    `<unk>`), the pointer supplies most of its probability, and the model predicts it well (p(y) >= 0.5, so y is the
    mixture's argmax). Ranked by the probability the pointer puts on the target, one position per word; when fewer
    than `n` qualify, the rest come from positions meeting fewer of the conditions (rare and pointer-supplied, then
    pointer-supplied, then any). `train_ids` gives the frequencies (default: the split's own targets); positions
    before `min_position` (e.g. the pointer window, so the picture shows a full window) are skipped."""
    y = outputs.targets[row]
    p = outputs.log_probs[row].double().exp()
    vocab_part = outputs.gate[row].double() * outputs.vocab_log_probs[row].double().exp()
    pointer_p = (p - vocab_part).clamp_min(0)  # probability the pointer put on the target
    pointer_supplies = pointer_p > 0.5 * p
    ref = (outputs.targets if train_ids is None else train_ids).flatten()
    counts = torch.bincount(ref, minlength=int(max(ref.max(), outputs.targets.max())) + 1)
    rare = counts[y] <= counts[outputs.targets.flatten()].double().median()  # the rarer half of the targets
    allowed = torch.arange(y.numel()) >= min_position
    for bad in exclude_ids:
        if bad is not None:
            allowed &= y != bad
    tier = torch.full_like(p, 3.0)
    tier[pointer_supplies] = 2
    tier[pointer_supplies & rare] = 1
    tier[pointer_supplies & rare & (p >= 0.5)] = 0
    order = torch.sort(2 * tier - pointer_p, stable=True).indices  # tier first, then the pointer's probability
    positions, words = [], set()
    for t in order.tolist():
        if len(positions) == n:
            break
        if allowed[t] and int(y[t]) not in words:
            positions.append(t)
            words.add(int(y[t]))
    return positions
