"""The speller and the byte-level mixture (`Speller`, `spelled_mixture`): an unseen word spelled in UTF-8 bytes, copied
through its bytes from the window's spelled words, or written anew by the speller."""

import math

import torch
from reference import spelled_next

from modeling_pointer_sentinel.modeling_pointer_sentinel import SPELL_END, Speller, spelled_mixture

K = 8


def pad(word, length=K):
    return list(word) + [SPELL_END] + [-1] * (length - len(word) - 1)


def speller_table(speller, h):
    """spell_next(prefix) for one context h, from the module: the probabilities of each symbol after `prefix`."""

    def spell_next(prefix):
        spelling = torch.tensor([list(prefix) + [0]])
        return speller(h[None], spelling)[0, len(prefix)].exp().tolist()

    return spell_next


def mix(speller, h, words, log_copy, log_new, *prefixes):
    """spelled_mixture after each of `prefixes` (one row each; one prefix gives one row), its speller inputs taken
    from the module."""
    spelling = torch.tensor([list(p) + [0] * (K - len(p)) for p in prefixes])
    log_spell = speller(h[None].expand(len(prefixes), -1), spelling)
    k = torch.tensor([len(p) for p in prefixes])
    log_prefix = log_spell.gather(-1, spelling[..., None])[..., 0].masked_fill(torch.arange(K) >= k[:, None], 0).sum(-1)
    window = torch.tensor([pad(w) if w is not None else [-1] * K for w in words]).expand(len(prefixes), -1, -1)
    prefix = spelling.masked_fill(torch.arange(K) >= k[:, None], -1)
    out = spelled_mixture(log_copy.expand(len(prefixes), -1), window, prefix, log_new.expand(len(prefixes)),
                          log_prefix, log_spell[torch.arange(len(prefixes)), k])  # fmt: skip
    return out[0] if len(prefixes) == 1 else out


def setup(seed=0):
    torch.manual_seed(seed)
    speller = Speller(6, 5).double()
    h = torch.randn(6, dtype=torch.float64)
    words = [b"ab", None, b"abc", b"b", b"ab", b"zq"]
    copy = torch.tensor([0.1, 0.0, 0.05, 0.2, 0.15, 0.03], dtype=torch.float64)
    log_copy = torch.where(torch.tensor([w is not None for w in words]), copy.log(), -torch.inf)
    return speller, h, words, copy, log_copy, torch.tensor(0.3, dtype=torch.float64).log()


def test_spelled_mixture_is_the_definition_candidate_by_candidate():
    """Against the slow loop: every prefix of the window's words and of words it lacks, the empty one included."""
    speller, h, words, copy, log_copy, log_new = setup()
    with torch.no_grad():
        spell_next = speller_table(speller, h)
        for prefix in [b"", b"a", b"ab", b"abc", b"b", b"z", b"x", b"xy"]:
            got = mix(speller, h, words, log_copy, log_new, list(prefix)).exp()
            want = spelled_next([list(w) if w else None for w in words], copy.tolist(), 0.3, spell_next, list(prefix))
            torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=1e-9, atol=1e-12)


def test_a_words_bytes_telescope_to_its_copy_mass_plus_the_spellers_new_word():
    """The joint at the boundary times each next byte's conditional and the end's: sum_{j: w_j = w} c_j + N p_spell(w),
    for words the window holds (twice, once, as a prefix of another) and one it lacks; the conditionals sum to 1 and
    the boundary's joint to the whole unseen-word mass."""
    speller, h, words, copy, log_copy, log_new = setup(1)
    with torch.no_grad():
        spell_next = speller_table(speller, h)
        for word in [b"ab", b"abc", b"b", b"xyz"]:
            log_p = 0.0
            for k in range(len(word) + 1):
                out = mix(speller, h, words, log_copy, log_new, list(word[:k]))
                if k == 0:
                    assert math.isclose(out.logsumexp(-1).exp().item(), copy.sum().item() + 0.3, rel_tol=1e-9)
                else:
                    assert math.isclose(out.logsumexp(-1).item(), 0.0, abs_tol=1e-9)
                log_p += out[word[k] if k < len(word) else SPELL_END].item()
            p_spell = math.prod(spell_next(list(word[:i]))[b] for i, b in enumerate([*word, SPELL_END]))
            held = sum(c for w, c in zip(words, copy.tolist(), strict=True) if w == word)
            assert math.isclose(math.exp(log_p), held + 0.3 * p_spell, rel_tol=1e-9), word


def test_no_candidates_mass_underflows_however_far_below_the_largest_it_lies():
    """In float32, copy masses 150 nats apart (exp(-150) is 0 in float32) on words with different first bytes, and two
    words sharing a byte far below the rest: each symbol gets its own candidates' mass exactly (the speller's share
    N = 0, so the joint is the copies alone), in log space, at the boundary and after a shared prefix."""
    words = [b"ab", b"xy", b"xz", b"q"]
    window = torch.tensor([pad(w) for w in words]).unsqueeze(0)
    log_copy = torch.tensor([[0.0, -150.0, -151.0, -300.0]])
    log_next = torch.full((1, 258), -math.log(258.0))
    for prefix, want in (
        ([], {ord("a"): 0.0, ord("x"): math.log(math.exp(0) + math.exp(-1)) - 150, ord("q"): -300.0}),
        ([ord("x")], {ord("y"): -math.log(1 + math.exp(-1)), ord("z"): -1 - math.log(1 + math.exp(-1))}),
    ):
        pre = torch.tensor([prefix + [-1] * (K - len(prefix))])
        out = spelled_mixture(log_copy, window, pre, torch.tensor([-torch.inf]), torch.zeros(1), log_next)[0]
        assert out.dtype == torch.float32
        for symbol, value in want.items():
            assert math.isclose(out[symbol].item(), value, rel_tol=1e-6, abs_tol=1e-5), (prefix, chr(symbol))
        assert abs(out.exp().sum().item() - 1) < 1e-5  # the copies' whole mass (1 to float32), or the conditionals


def test_every_spelling_up_to_two_bytes_sums_to_at_most_the_unseen_mass():
    """Enumerated over all 256 + 256^2 byte strings, their probabilities add up to no more than the unseen-word mass,
    and the window's one- and two-byte words are all in it (nothing is counted twice)."""
    speller, h, words, copy, log_copy, log_new = setup(2)
    with torch.no_grad():
        first = mix(speller, h, words, log_copy, log_new, []).exp()
        after = mix(speller, h, words, log_copy, log_new, *[[b] for b in range(256)]).exp()  # (256, 257)
        second = mix(speller, h, words, log_copy, log_new, *[[b, c] for b in range(256) for c in range(256)])
        ends = second[:, SPELL_END].exp().view(256, 256)
        total = (first[:256] * (after[:, SPELL_END] + (after[:, :256] * ends).sum(-1))).sum().item()
    unseen = copy.sum().item() + 0.3
    short = sum(c for w, c in zip(words, copy.tolist(), strict=True) if w is not None and len(w) <= 2)
    assert short < total <= unseen * (1 + 1e-9)


def test_the_speller_starts_every_word_with_a_byte_and_is_normalised():
    speller, h, *_ = setup()
    log_p = speller(h[None].expand(3, 6), torch.randint(0, 258, (3, 5)))
    assert (log_p[:, 0, SPELL_END:] == -torch.inf).all()  # neither `</w>` nor `<+w>` before a byte
    torch.testing.assert_close(log_p.logsumexp(-1), torch.zeros(3, 5, dtype=torch.float64))


def test_a_speller_models_checkpoint_loads_where_cudnn_packs_an_rnns_weights(tmp_path):
    """accelerate's save_state then load_state of a model with a speller, as train.py resumes. On CUDA, torch's
    RNN modules (`nn.LSTM`) pack their four tensors into one buffer (cuDNN's flatten_parameters, on every move to
    the GPU), and safetensors' load_model, which load_state calls, refuses a state that shares one storage among
    names ("None is covering the entire storage"). That packing is done here on the CPU to every torch RNN module
    of the model, so the test holds without a GPU (benchmarks/cuda_checks.py resumes a speller run on one)."""
    from accelerate import Accelerator
    from conftest import tiny_config

    from modeling_pointer_sentinel import PointerSentinelForCausalLM

    config = tiny_config(oov_slots=8, unk_token_id=1, speller_size=6)
    model = PointerSentinelForCausalLM(config)
    for m in model.modules():
        if isinstance(m, torch.nn.RNNBase):  # as flatten_parameters leaves it on CUDA
            flat = torch.cat([w.detach().reshape(-1) for w in m._flat_weights])
            for w, part in zip(m._flat_weights, flat.split([w.numel() for w in m._flat_weights]), strict=True):
                w.data = part.view_as(w)
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(model)
    accelerator.save_state(tmp_path / "state")
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    accelerator.load_state(tmp_path / "state")
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
