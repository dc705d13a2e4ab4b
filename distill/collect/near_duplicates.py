"""Near-duplicate text lookup that stays fast at 100k texts: MinHash signatures over word 3-grams, banded for
locality-sensitive hashing, each candidate confirmed by the exact Jaccard similarity of the two shingle sets.

    index = MinHashIndex(threshold=0.7); index.near(text) -> bool; index.add(text)
"""

from __future__ import annotations

import hashlib
import re

import numpy as np


def shingles(text: str) -> np.ndarray:
    """Sorted unique 64-bit hashes of the word 3-grams (lower-cased); a text of fewer words is one shingle."""
    words = re.findall(r"\w+", text.lower())
    grams = {" ".join(words[i:i + 3]) for i in range(max(len(words) - 2, 1))}
    return np.unique(np.array([int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "little")
                               for g in grams], dtype=np.uint64))


class MinHashIndex:
    """Near-duplicate lookup that stays fast at 100k texts: a 128-value MinHash signature per text, cut into 32 bands
    of 4 values; a text sharing any whole band with a stored one is a candidate (at Jaccard 0.7 that happens with
    probability 1-(1-0.7^4)^32 > 0.999, at 0.3 with 0.23), and a candidate is a duplicate when the exact Jaccard of
    the two shingle sets reaches `threshold`."""

    PRIME = (1 << 31) - 1  # (a * x + b) mod p with a, x < 2^31 stays inside uint64
    PERM, BANDS = 128, 32

    def __init__(self, threshold: float):
        rng = np.random.default_rng(20240611)  # fixed: signatures mean the same in every run
        self.a = rng.integers(1, self.PRIME, self.PERM, dtype=np.uint64)
        self.b = rng.integers(0, self.PRIME, self.PERM, dtype=np.uint64)
        self.threshold = threshold
        self.sets: list[np.ndarray] = []
        self.buckets: list[dict[bytes, list[int]]] = [{} for _ in range(self.BANDS)]

    def _bands(self, s: np.ndarray) -> list[bytes]:
        x = (s & np.uint64(self.PRIME))[:, None]  # (S, 1) shingle hashes reduced below p
        sig = ((x * self.a + self.b) % np.uint64(self.PRIME)).min(0)  # (PERM,) the minimum of each permutation
        return [band.tobytes() for band in sig.reshape(self.BANDS, -1)]

    def near(self, text: str) -> bool:
        s = shingles(text)
        cands = {i for band, key in zip(self.buckets, self._bands(s)) for i in band.get(key, ())}
        return any(_jaccard(s, self.sets[i]) >= self.threshold for i in cands)

    def add(self, text: str) -> None:
        s = shingles(text)
        for band, key in zip(self.buckets, self._bands(s)):
            band.setdefault(key, []).append(len(self.sets))
        self.sets.append(s)


def _jaccard(a: np.ndarray, b: np.ndarray) -> float:
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)
