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
