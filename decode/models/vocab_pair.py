"""A draft with another tokenizer than the target's: the two tokenizers side by side (decode.drafting.translate
decodes with them; docs/decoder.md, "Drafts with another tokenizer").

token_bytes: every id's raw bytes, read the way the tokenizer's own decoder reads it, decided once per tokenizer
(never per token: Gemma's literal 'â' is a character, not byte 0xE2):
    byte-level BPE (GPT-2, SmolLM2, Llama 3)   every character back through GPT-2's bytes_to_unicode ('Ġ' -> ' ')
    SentencePiece style (Llama 2, Gemma)       '▁' -> ' ', <0xNN> -> byte NN (byte fallback), the rest UTF-8
    anything else                              UTF-8
Special tokens have none (they are not text).

SharedVocab: the draft ids whose bytes a target id also has, one to one (where several ids of one side share the
bytes, e.g. Gemma's 'e' and '<0x65>', the one that side's tokenizer emits for that text). transformers' UAG-TLI and
vLLM compare strings after swapping a leading space sign instead, which misses newlines ('Ċ' against '\\n'),
indentation runs and byte-fallback ids: on Gemma 3 <- SmolLM2 their rule shares 45,568 ids and this one 46,145, and
over a mixed text 99.1% of the target's greedy tokens fall in this set against 87.2% in theirs (docs/results.md).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers.convert_slow_tokenizer import bytes_to_unicode

from decode.errors import UserError
from decode.models.draft_folder import META_FILE, read_meta

UNICODE_TO_BYTE = {ch: b for b, ch in bytes_to_unicode().items()}
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
ANCHOR = "\n"  # encoded before a text by tokenizers that prefix a space to it (SentencePiece's dummy prefix)
# Sampling and token trees need proposals that are single target tokens, from the shared vocabulary: below this
# share of a text's target tokens in it the draft could propose too little of what the target says (α <= that share)
MIN_COVERAGE = 0.5
# The text the share is measured on: prose, code, numbers and whitespace runs, as the bundled prompt set mixes them
REFERENCE_TEXT = (
    "The Industrial Revolution began in Great Britain in the late eighteenth century and spread to Europe and North "
    "America. Machines replaced hand tools, and factories replaced workshops.\n\n"
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "Question: What is 17 times 23?\nAnswer: 17 times 23 is 391. Les enfants jouent dans le jardin.")


def tokenizer_kind(tok) -> str:
    """byte_level | sentencepiece | plain: how the tokenizer's decoder turns its tokens into text."""
    backend = getattr(tok, "backend_tokenizer", None)
    decoder = json.loads(backend.to_str()).get("decoder") if backend is not None else None
    text = json.dumps(decoder or {})
    if '"ByteLevel"' in text:
        return "byte_level"
    if '"ByteFallback"' in text or '"Metaspace"' in text or "\u2581" in text:
        return "sentencepiece"
    return "plain"


def piece_bytes(piece: str, kind: str) -> bytes:
    """One (non-special) token string -> its raw bytes, for a tokenizer of this kind (tokenizer_kind)."""
    if kind == "byte_level":
        if all(ch in UNICODE_TO_BYTE for ch in piece):
            return bytes(UNICODE_TO_BYTE[ch] for ch in piece)
        return piece.encode()
    if kind == "sentencepiece":
        m = BYTE_PIECE.fullmatch(piece)
        return bytes([int(m.group(1), 16)]) if m else piece.replace("\u2581", " ").encode()
    return piece.encode()


def token_bytes(tok) -> list[bytes | None]:
    """(len(tok),) the raw bytes of every id; None for special tokens. Built once per tokenizer object (kept on it:
    a 262k vocabulary takes ~0.5 s)."""
    cached = tok.__dict__.get("_specdistill_bytes")
    if cached is not None:
        return cached
    kind = tokenizer_kind(tok)
    added = {i: t for i, t in tok.added_tokens_decoder.items()}  # their content is literal text, not encoded
    special = set(tok.all_special_ids) | {i for i, t in added.items() if t.special}
    pieces = tok.convert_ids_to_tokens(list(range(len(tok))))
    table = [None if i in special or p is None else added[i].content.encode() if i in added else piece_bytes(p, kind)
             for i, p in enumerate(pieces)]
    tok.__dict__["_specdistill_bytes"] = table
    return table


def joined(table: list[bytes | None], ids: list[int]) -> bytes:
    """The text bytes of ids (special tokens and ids past the tokenizer's: nothing)."""
    return b"".join(table[i] or b"" for i in ids if i < len(table))


def split_utf8(data: bytes, skip_invalid: bool = True) -> tuple[str, int]:
    """(text, bytes used): data's longest prefix of whole UTF-8 characters. A character cut at the end (a byte-level
    token can end inside one) waits for its other bytes: not used. A byte that can never start a character is
    skipped (used, not in the text) when skip_invalid, else the text stops before it."""
    parts, i = [], 0
    while i < len(data):
        try:
            parts.append(data[i:].decode("utf-8"))
            return "".join(parts), len(data)
        except UnicodeDecodeError as e:
            parts.append(data[i:i + e.start].decode("utf-8"))
            if e.reason == "unexpected end of data" or not skip_invalid:
                return "".join(parts), i + e.start
            i += e.end
    return "".join(parts), i


def encode_text(tok, text: str) -> list[int]:
    """Ids whose bytes are exactly text's where the tokenizer allows: a tokenizer that prefixes a space to every
    text (SentencePiece's dummy prefix: ' jumps' for 'jumps') encodes ANCHOR + text and drops the anchor's ids."""
    if not text:
        return []
    table = token_bytes(tok)
    want = text.encode()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    if joined(table, ids) == want:
        return ids
    anchored = tok(ANCHOR + text, add_special_tokens=False)["input_ids"]
    for k in range(1, len(anchored)):  # the first split after which the rest spells text
        if joined(table, anchored[k:]) == want:
            return anchored[k:]
    return ids  # a normalising tokenizer: its own reading of the text (verification keeps the output exact)


def bos_prefix(tok) -> list[int]:
    """The ids the tokenizer puts before every text (a BOS), [] when none."""
    with_special = tok("a")["input_ids"]
    plain = tok("a", add_special_tokens=False)["input_ids"]
    n = len(with_special) - len(plain)
    return with_special[:n] if n > 0 and with_special[n:n + len(plain)] == plain else []


def canonical_ids(tok) -> dict[bytes, int]:
    """bytes -> the one id of this tokenizer that stands for them: where several ids share bytes (Gemma's 'e' and
    '<0x65>'), the id the tokenizer emits for that text, else the smallest."""
    groups: dict[bytes, list[int]] = {}
    for i, b in enumerate(token_bytes(tok)):
        if b:
            groups.setdefault(b, []).append(i)
    out = {}
    for b, ids in groups.items():
        if len(ids) > 1:
            text, used = split_utf8(b, skip_invalid=False)
            enc = encode_text(tok, text) if used == len(b) else []
            out[b] = enc[0] if len(enc) == 1 and enc[0] in ids else min(ids)
        else:
            out[b] = ids[0]
    return out


class SharedVocab:
    """The ids both vocabularies have (same bytes), one to one; VocabMap's interface for the decoder's draft-side
    helpers (decode.drafting.proposers.choose, decode.drafting.tree.grow): to_target(j), expand(q).

    draft_ids, target_ids: (S,) the pairs, EOS paired with EOS; mask: (V_draft,) True on draft_ids; t2d: (V_target,)
    the draft id of each target id, -1 outside."""

    def __init__(self, target_tok, draft_tok, target_vocab: int, draft_vocab: int):
        t_canon, d_canon = canonical_ids(target_tok), canonical_ids(draft_tok)
        pairs = {d: t_canon[b] for b, d in d_canon.items() if b in t_canon and d < draft_vocab and t_canon[b] < target_vocab}
        if draft_tok.eos_token_id is not None and target_tok.eos_token_id is not None:
            pairs[draft_tok.eos_token_id] = target_tok.eos_token_id  # the draft may end the text where the target would
        d_ids = sorted(pairs)
        self.target_vocab = target_vocab
        self.draft_ids = torch.tensor(d_ids, dtype=torch.long)
        self.target_ids = torch.tensor([pairs[d] for d in d_ids], dtype=torch.long)
        self.mask = torch.zeros(draft_vocab, dtype=torch.bool)
        self.mask[self.draft_ids] = True
        self.t2d = torch.full((target_vocab,), -1, dtype=torch.long)
        self.t2d[self.target_ids] = self.draft_ids
        self._d2t = dict(pairs)
        self._t2d = {t: d for d, t in pairs.items()}
        ref = [t for t in encode_text(target_tok, REFERENCE_TEXT) if t < target_vocab]
        self.coverage = sum(int(self.t2d[t] >= 0) for t in ref) / max(len(ref), 1)

    @property
    def size(self) -> int:
        return len(self._d2t)

    def to_target(self, j: int) -> int:
        return self._d2t[j]

    def to_draft(self, ids: list[int]) -> list[int]:
        """Target ids of shared tokens (a tree's nodes) -> their draft ids."""
        return [self._t2d[t] for t in ids]

    def expand(self, q: torch.Tensor) -> torch.Tensor:
        """(V_draft,) draft probs, zero outside the shared ids -> (V_target,), zero outside them."""
        out = torch.zeros(self.target_vocab, dtype=q.dtype, device=q.device)
        return out.index_copy_(0, self.target_ids.to(q.device), q[self.draft_ids.to(q.device)])

    def restrict(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V_draft) draft logits -> the same with -inf outside the shared ids: q lives on them."""
        return logits.masked_fill(~self.mask.to(logits.device), float("-inf"))


@dataclass
class OtherTokenizerDraft:
    """A causal LM with its own tokenizer, as decode.drafting.speculative.generate takes it for `draft`."""

    model: torch.nn.Module
    tokenizer: object  # the draft's
    target_tokenizer: object
    target_vocab: int  # the target model's vocab_size (its logits' width; may exceed len(target_tokenizer))
    _shared: SharedVocab | None = field(default=None, repr=False)

    @property
    def shared(self) -> SharedVocab:
        """The shared vocabulary, built on first use (sampling and token trees need it; greedy chains do not)."""
        if self._shared is None:
            self._shared = SharedVocab(self.target_tokenizer, self.tokenizer, self.target_vocab,
                                       self.model.config.vocab_size)
        return self._shared

    def describe(self) -> dict:
        """What a result records about the pair (decode.bench): sizes, the shared vocabulary, its coverage."""
        s = self.shared
        return {"draft_tokenizer_size": len(self.tokenizer), "target_tokenizer_size": len(self.target_tokenizer),
                "draft_kind": tokenizer_kind(self.tokenizer), "target_kind": tokenizer_kind(self.target_tokenizer),
                "shared_ids": s.size, "coverage": round(s.coverage, 4)}


def special_ids(tok) -> dict[str, int]:
    """{string: id} of the tokenizer's special tokens (kept on it: get_vocab() takes 30 ms on a 50k vocabulary)."""
    cached = tok.__dict__.get("_specdistill_specials")
    if cached is None:
        ids = set(tok.all_special_ids) | {i for i, t in tok.added_tokens_decoder.items() if t.special}
        cached = tok.__dict__["_specdistill_specials"] = {tok.convert_ids_to_tokens(i): i for i in ids}
    return cached


def draft_prompt(prompt_ids: list[int], target_tok, draft_tok) -> list[int]:
    """The target's prompt as the draft reads it: its text encoded by the draft's tokenizer; a special token the draft
    has too (same string: '<|im_start|>' in two ChatML models) as the draft's id, any other (the target's BOS, another
    family's turn markers) left out; the draft's BOS first where its tokenizer adds one."""
    t_table, d_special = token_bytes(target_tok), special_ids(draft_tok)
    out, run = [], bytearray()
    for t in prompt_ids:
        b = t_table[t] if t < len(t_table) else None
        if b is not None:
            run += b
            continue
        out += encode_text(draft_tok, split_utf8(bytes(run))[0])
        run.clear()
        j = d_special.get(target_tok.convert_ids_to_tokens(t))
        if j is not None:
            out.append(j)
    out += encode_text(draft_tok, split_utf8(bytes(run))[0])
    bos = bos_prefix(draft_tok)
    if bos and out[:len(bos)] != bos:
        out = bos + out
    return out or [draft_tok.eos_token_id or 0]  # a prompt of specials only: one token for the draft's prefill


def check_chat_template(target_tok, draft_tok, row: dict) -> None:
    """A chat prompt both tokenizers have a template for must render to the same text: else the draft would read
    another conversation than the target (where only the target has one, the draft reads the target's text)."""
    msgs = row.get("messages")
    if not msgs or not getattr(target_tok, "chat_template", None) or not getattr(draft_tok, "chat_template", None):
        return
    a = target_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    b = draft_tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    if a != b:
        i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        raise UserError(f"prompt {row.get('id')!r}: the draft's chat template renders it otherwise than the target's "
                        f"(at character {i}: target {a[i:i + 24]!r}, draft {b[i:i + 24]!r}); the draft would read "
                        "another text: use a draft whose template matches, or --no-chat-template (raw text for both)")


# --- loading: which drafts speak the target's ids and which their own (decode.models.targets.load_draft)


def tokenizer_diffs(target_tok, draft_tok) -> list[str]:
    """What differs between two tokenizers ([] for the same one): sizes, BOS/EOS ids, else a few strings whose ids
    differ."""
    diffs = []
    if len(target_tok) != len(draft_tok):
        diffs.append(f"vocabulary size {len(target_tok)} vs {len(draft_tok)}")
    for name in ("eos_token_id", "bos_token_id"):
        a, b = getattr(target_tok, name, None), getattr(draft_tok, name, None)
        if a != b:
            diffs.append(f"{name} {a} vs {b}")
    if not diffs:
        va, vb = target_tok.get_vocab(), draft_tok.get_vocab()
        if va != vb:
            differing = [t for t in va if vb.get(t) != va[t]][:5]
            diffs.append(f"token-to-id maps differ (e.g. {differing})")
    return diffs


def check_tokenizers(target_tok, draft_tok, vocab_map: list[int] | None = None) -> None:
    """Drafts must speak the target's vocabulary; raise naming what differs.

    A reduced-vocabulary draft (vocab_map given: its N entries' target ids) only has to fit inside the target's.
    """
    if vocab_map is not None:
        n = len(target_tok)
        bad = [t for t in vocab_map if not 0 <= t < n]
        if bad:
            raise UserError(f"draft vocabulary map has ids outside the target vocabulary (size {n}): {bad[:5]}")
        return
    diffs = tokenizer_diffs(target_tok, draft_tok)
    if diffs:
        raise UserError(
            "the draft's tokenizer differs from the target's: " + "; ".join(diffs)
            + ". Use a draft built from this target (or give a draft vocabulary map)."
        )


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def require_tokenizer(folder: str, spec: str) -> None:
    """A draft folder carries its tokenizer: the decoder checks it against the target's, or reads through it."""
    path = Path(folder)
    if path.is_dir() and not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise UserError(f"{spec} has no tokenizer files ({', '.join(TOKENIZER_FILES)}): a draft's tokenizer is checked "
                        "against the target's, or read through when it differs; copy the tokenizer files of the model "
                        f"it was made from into {spec}")


def same_tokenizer(a, b) -> bool:
    """The same token-to-id map: two models with it speak the same ids, whatever their embedding tables' sizes
    (rows padded to a round number) or their BOS/EOS choices."""
    return len(a) == len(b) and a.get_vocab() == b.get_vocab()


def other_tokenizer(target_tok, tok, folder: str, spec: str, vocab_map: list[int] | None = None) -> bool:
    """The rule, decided from what the draft is, never from sizes: True for a draft decoded through its own tokenizer.

    A draft this project built (its specdistill.json; a reduced one's draft_vocab.json) speaks the target's ids: its
    tokenizer must be the target's (a one-line error says what differs), or its map must fit the target's vocabulary.
    Any other draft speaks the target's ids when its tokenizer is the target's (same_tokenizer), else its own."""
    if vocab_map is not None:
        check_tokenizers(target_tok, tok, vocab_map)
        return False
    meta = read_meta(folder)
    if not meta:
        return not same_tokenizer(target_tok, tok)
    diffs = tokenizer_diffs(target_tok, tok)
    if diffs:
        built_for = meta.get("target") or "another target"
        raise UserError(f"{spec} was built by specdistill for {built_for} ({META_FILE}) and speaks that target's ids, "
                        f"but its tokenizer is not this target's ({'; '.join(diffs)}): use it with the target it was "
                        f"built for, or a draft built for this one (a model of another family with a stray {META_FILE}: "
                        "remove that file to decode it through its own tokenizer)")
    return False


def fit_rows(model, rows: int) -> None:
    """A draft of the target's tokenizer whose embedding table has another number of rows (either model padded to a
    round size): its input and output tables cut or padded to the target's `rows`, so its logits are as wide as the
    target's. Cut rows are ids the target has no row for; added rows (zero: logit 0, far below a trained model's top
    logit) ids the draft had none for, padding where the tokenizer is smaller; a proposal of one is verified like any
    other (lossless)."""
    old = model.config.vocab_size
    if old == rows:
        return
    model.resize_token_embeddings(rows, mean_resizing=False)
    if rows > old:
        with torch.no_grad():
            model.get_input_embeddings().weight[old:] = 0
            model.get_output_embeddings().weight[old:] = 0
