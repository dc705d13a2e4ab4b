"""Real tokenizers other than the default's, built offline, for drafts with another tokenizer (decode.drafting.translate).

GPT-2's (byte-level BPE, 50,257 ids, MIT-licensed ranks): from `whisper/assets/gpt2.tiktoken`, which the
`openai-whisper` package ships (scripts/setup.sh installs it with --no-deps; found with importlib.util.find_spec,
never imported: whisper pulls numba). Its ids match GPT-2's ("Hello world" -> [15496, 995]). Built in ~1.5 s and
saved once per session. A SentencePiece-style one ('▁', byte fallback, a dummy prefix like Llama 2's), trained in
a second on a short text by the `tokenizers` library: the other family's decoding rules without a download.
"""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

GPT2_RANKS = "assets/gpt2.tiktoken"


def gpt2_ranks_path() -> Path:
    spec = importlib.util.find_spec("whisper")
    if spec is None or spec.origin is None:
        raise RuntimeError("the GPT-2 test tokenizer needs openai-whisper's ranks: pip install --no-deps openai-whisper")
    return Path(spec.origin).parent / GPT2_RANKS


def gpt2_tokenizer(out: Path):
    """GPT-2's tokenizer from tiktoken ranks: every split of a token into two vocabulary tokens is a merge of that
    token's rank (as transformers' TikTokenConverter builds it); saved to `out`, loaded back with AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    if (out / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(out)
    ranks = {}
    for line in gpt2_ranks_path().read_bytes().splitlines():
        if line.strip():
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    to_str = bytes_to_unicode()

    def s(b: bytes) -> str:
        return "".join(to_str[c] for c in b)

    vocab = {s(t): r for t, r in ranks.items()}
    merges = sorted((r, ranks[t[:i]], ranks[t[i:]], s(t[:i]), s(t[i:])) for t, r in ranks.items() if len(t) > 1
                    for i in range(1, len(t)) if t[:i] in ranks and t[i:] in ranks)
    tk = Tokenizer(models.BPE(vocab, [(a, b) for *_, a, b in merges], fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                  unk_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": []})
    tok.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


SP_TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step.\n"
           "def add(a, b):\n    return a + b\n\nQuestion: what is 12 times 7? Answer: 84. Les enfants jouent.\n") * 20


def sentencepiece_tokenizer(out: Path, vocab_size: int = 600):
    """A SentencePiece-style BPE tokenizer as Llama 2's is built ('▁' for a space, a dummy prefix before every text,
    <0x00>..<0xFF> byte-fallback pieces in the vocabulary, Llama 2's decoder), trained on SP_TEXT, saved to `out`."""
    import json

    from tokenizers import SentencePieceBPETokenizer, Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (out / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(out)
    sp = SentencePieceBPETokenizer(add_prefix_space=True)
    sp.train_from_iterator([SP_TEXT], vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                           show_progress=False)
    spec = json.loads(sp._tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):  # byte pieces are ordinary vocabulary entries, as in Llama 2's
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), unk_token="<unk>",
                                  bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


def trimmed(tok, n: int, out: Path):
    """A BPE tokenizer cut to n ids (as Llama 2's and Mistral's both have 32,000): its special tokens (those at ids
    past n moved to the top ids), its ordinary tokens of the lowest ids, and the merges among those; saved to `out`
    with the source's special-token roles and chat template, loaded back with AutoTokenizer."""
    import json

    from tokenizers import Tokenizer
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (out / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(out)
    spec = json.loads(tok.backend_tokenizer.to_str())
    late = [a for a in spec["added_tokens"] if a["id"] >= n]
    for k, a in enumerate(late):
        a["id"] = n - len(late) + k
    specials = {a["content"]: a["id"] for a in spec["added_tokens"]}
    vocab = {t: i for t, i in spec["model"]["vocab"].items() if i < n - len(late) and t not in specials}
    spec["model"]["vocab"] = {**vocab, **specials}
    pairs = [m.split(" ") if isinstance(m, str) else m for m in spec["model"]["merges"]]
    spec["model"]["merges"] = [[a, b] for a, b in pairs if a in vocab and b in vocab and a + b in vocab]
    roles = {k: getattr(tok, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token") if getattr(tok, k)}
    small = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), **roles,
                                    chat_template=getattr(tok, "chat_template", None))
    small.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)


def permuted_copy(src, out: Path, seed: int = 0):
    """src's model and tokenizer with the ordinary tokens' ids shuffled (the special tokens keep theirs) and the
    embedding and head rows moved with them: the same size, the same strings and merges, other ids. Beside src it
    is a same-size pair of two tokenizers (a plain folder: decoded through its own text); saved to `out`."""
    import json

    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    tok = AutoTokenizer.from_pretrained(src)
    spec = json.loads(tok.backend_tokenizer.to_str())
    specials = {a["id"] for a in spec["added_tokens"]}
    ordinary = sorted(set(spec["model"]["vocab"].values()) - specials)
    shuffled = torch.randperm(len(ordinary), generator=torch.Generator().manual_seed(seed)).tolist()
    new_id = {i: i for i in specials} | {old: ordinary[k] for old, k in zip(ordinary, shuffled)}
    spec["model"]["vocab"] = {t: new_id[i] for t, i in spec["model"]["vocab"].items()}
    roles = {k: getattr(tok, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token") if getattr(tok, k)}
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), **roles,
                            chat_template=getattr(tok, "chat_template", None)).save_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    old_of_new = torch.arange(model.config.vocab_size)
    old_of_new[torch.tensor(list(new_id.values()))] = torch.tensor(list(new_id.keys()))
    with torch.no_grad():
        for w in {id(t.weight): t.weight for t in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            w.copy_(w[old_of_new])  # a tied head shares the input table's weight: moved once
    model.save_pretrained(out)
    return AutoTokenizer.from_pretrained(out)
