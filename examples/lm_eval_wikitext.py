"""WikiText-2 through lm-evaluation-harness, offline (needs the `lm-eval` extra: pip install -e ".[lm-eval]").

    python examples/lm_eval_wikitext.py roundtrip                 # the tokenizer on lm-eval's detokenised test split
    python examples/lm_eval_wikitext.py task [--limit N]          # lm-eval's own `wikitext` task, scored

Both read the bundled WikiText-2 test split as 62 articles (a level-1 heading ` = Title = ` starts one) and the
shipped WikiText-2 model (--model to change).
- roundtrip: each article is detokenised with lm-eval's `wikitext_detokenizer` (`Du Fu 's` -> `Du Fu's`, ` @-@ ` ->
  `-`), re-tokenised by the model's tokenizer, and aligned with the original tokens: the share of the original tokens
  given back, and the `<unk>` rate before and after.
- task: lm-eval's `wikitext` task definition (its detokeniser and word counts) on the bundled articles as a local
  dataset (no Hub access), through lm-eval's own HF model class (`--model hf`) with remote code: the model's `logits`
  score every word, one the vocabulary lacks included, as its loss does. It prints lm-eval's word_perplexity
  and byte_perplexity, and the per-token perplexity in the card's unit: exp(total NLL / tokens scored), where lm-eval
  gives NLL = log(word_perplexity) x words.
"""

import argparse
import difflib
import json
import lzma
import math
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_MODEL = ROOT / "pretrained" / "wt2-pointer-sentinel-lstm-2x200"
HEADING = re.compile(r"^ = [^=].* = $")  # an article's title; section headings have two or more '='


def articles(path: Path | None = None) -> list[str]:
    """The test split as articles, each the text of its lines (line breaks kept), as lm-eval's document-level set."""
    from modeling_pointer_sentinel.training import BUNDLED

    lines = lzma.open(path or BUNDLED / "wiki.test.tokens.xz", "rt").read().splitlines(keepends=True)
    before, docs = [], []  # the blank line before the first title belongs to the first article
    for line in lines:
        if HEADING.match(line.rstrip("\n")):
            docs.append([])
        (docs[-1] if docs else before).append(line)
    return ["".join(before + docs[0]), *("".join(d) for d in docs[1:])]


def roundtrip(tokenizer, docs: list[str]) -> dict:
    """Re-tokenising lm-eval's detokenised articles: the share of original tokens given back and the <unk> rates."""
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    unk = tokenizer.convert_tokens_to_ids("<unk>")
    kept = original = unk_before = unk_after = retokenised = 0
    for doc in docs:
        a = tokenizer(doc)["input_ids"]
        b = tokenizer(wikitext_detokenizer({"page": doc}))["input_ids"]
        kept += sum(m.size for m in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks())
        original, retokenised = original + len(a), retokenised + len(b)
        unk_before, unk_after = unk_before + a.count(unk), unk_after + b.count(unk)
    return {"articles": len(docs), "tokens": original, "given_back": kept / original,
            "unk_rate": unk_before / original, "unk_rate_detokenised": unk_after / retokenised}  # fmt: skip


def run_task(model: str, docs: list[str], limit: int | None, max_length: int) -> dict:
    """lm-eval's `wikitext` task on `docs` as a local dataset; its metrics and the per-token perplexity."""
    import lm_eval.tasks.wikitext.preprocess_wikitext as wikitext_task
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from lm_eval.tasks.wikitext.preprocess_wikitext import wikitext_detokenizer

    docs = docs[:limit] if limit else docs
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "test.jsonl"
        data.write_text("".join(json.dumps({"page": d}) + "\n" for d in docs))
        # lm-eval's own task file (detokeniser, word counts, metrics), its data read from the local file
        (Path(tmp) / "wikitext_bundled.yaml").write_text(
            f"include: {Path(wikitext_task.__file__).parent / 'wikitext.yaml'}\ntask: wikitext_bundled\n"
            f"dataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
            "training_split: null\nvalidation_split: null\ntest_split: test\n"
        )  # fmt: skip
        device = "cuda" if torch.cuda.is_available() else "cpu"
        lm = HFLM(pretrained=model, trust_remote_code=True, dtype="float32", max_length=max_length,
                               batch_size=1, device=device)  # fmt: skip
        out = simple_evaluate(model=lm, tasks=["wikitext_bundled"], task_manager=TaskManager(include_path=tmp))
    metrics = out["results"]["wikitext_bundled"]
    words = sum(len(re.split(r"\s+", d)) for d in docs)  # lm-eval's count: the original article's words
    tokens = sum(len(lm.tokenizer(wikitext_detokenizer({"page": d}))["input_ids"]) for d in docs)
    word_ppl = metrics["word_perplexity,none"]
    return {"articles": len(docs), "word_perplexity": word_ppl, "byte_perplexity": metrics["byte_perplexity,none"],
            "words": words, "tokens_scored": tokens,
            "token_perplexity": math.exp(math.log(word_ppl) * words / tokens)}  # fmt: skip


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["roundtrip", "task"])
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="a saved model folder (default: the shipped WT2 one)")
    p.add_argument("--limit", type=int, help="task: the first N articles only")
    p.add_argument("--max_length", type=int, default=16384, help="task: lm-eval's window (covers every article)")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error(f"--limit must be a positive integer, got {args.limit}")
    if not Path(args.model).is_dir():
        p.error(f"--model {args.model}: no such folder")
    from transformers import AutoTokenizer

    docs = articles()
    if args.what == "roundtrip":
        result = roundtrip(AutoTokenizer.from_pretrained(args.model), docs)
        print(f"{result['articles']} articles, {result['tokens']:,} tokens: {result['given_back']:.2%} given back "
              f"after lm-eval's detokeniser; <unk> {result['unk_rate']:.2%} -> "
              f"{result['unk_rate_detokenised']:.2%}")  # fmt: skip
    else:
        result = run_task(args.model, docs, args.limit, args.max_length)
        print(f"lm-eval wikitext on {result['articles']} bundled test articles: word_perplexity "
              f"{result['word_perplexity']:.2f} over {result['words']:,} words, byte_perplexity "
              f"{result['byte_perplexity']:.4f}; per token: {result['token_perplexity']:.2f} over "
              f"{result['tokens_scored']:,} tokens")  # fmt: skip
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
