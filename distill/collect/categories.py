"""Prompt categories from the target's own hidden states: a text's embedding (the mean-pooled last hidden state),
a k-nearest-neighbour classifier over labelled seed prompts, and per-category quotas.

    embed(model, tok, texts) -> (n, H); Classifier(seeds, labels, k).predict(emb) -> (categories, confidence)
    quotas(n, counts) -> {category: share of n}
"""

from __future__ import annotations

import numpy as np
import torch


def user_text(row: dict) -> str:
    """What a prompt row asks: its raw prompt, or its user turns (system turns and earlier answers left out)."""
    return row["prompt"] if "prompt" in row else "\n".join(m["content"] for m in row["messages"] if m["role"] == "user")


@torch.inference_mode()
def embed(model, tok, texts: list[str], max_tokens: int = 128, batch: int = 16) -> np.ndarray:
    """(n, H) float32: the target's last hidden state, mean-pooled over each text's first max_tokens tokens."""
    ids = [tok(t, add_special_tokens=False)["input_ids"][:max_tokens] or [0] for t in texts]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths share a batch: little padding
    out = np.zeros((len(ids), model.config.hidden_size), dtype=np.float32)
    dev = model.device
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        L = max(len(ids[i]) for i in rows)
        x = torch.zeros((len(rows), L), dtype=torch.long, device=dev)  # (B, L) right-padded
        mask = torch.zeros((len(rows), L), dtype=torch.long, device=dev)
        for j, i in enumerate(rows):
            x[j, :len(ids[i])], mask[j, :len(ids[i])] = torch.tensor(ids[i], device=dev), 1
        h = model.base_model(input_ids=x, attention_mask=mask).last_hidden_state.float()  # (B, L, H)
        m = mask.to(h.device)[..., None].float()  # (B, L, 1)
        out[rows] = ((h * m).sum(1) / m.sum(1)).cpu().numpy()  # (B, H)
    return out


class Classifier:
    """k-nearest seed prompts by cosine, after centring on the seed mean (a language model's hidden states share
    one large common direction that would make every cosine near 1); the similarity-weighted majority wins."""

    def __init__(self, seeds: np.ndarray, labels: list[str], k: int):
        self.mean = seeds.mean(0)  # (H,)
        self.seeds = _unit(seeds - self.mean)  # (S, H)
        self.labels, self.k = np.array(labels), min(k, len(labels))

    def predict(self, emb: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(n, H) -> the n categories and their confidence: the winner's share of the neighbours' similarity."""
        sim = _unit(emb - self.mean) @ self.seeds.T  # (n, S)
        top = np.argsort(-sim, axis=1)[:, :self.k]  # (n, k)
        cats, conf = [], np.zeros(len(emb))
        for i, row in enumerate(top):
            w = np.clip(sim[i, row], 1e-6, None)  # (k,) a neighbour's vote: its similarity
            votes = {c: w[self.labels[row] == c].sum() for c in set(self.labels[row])}
            best = max(sorted(votes), key=votes.get)
            cats.append(str(best))
            conf[i] = votes[best] / w.sum()
        return cats, conf


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def quotas(n: int, counts: dict[str, int]) -> dict[str, int]:
    """n x each category's share, rounded so the quotas sum to n (largest remainders get the leftover ones)."""
    total = sum(counts.values())
    exact = {c: n * k / total for c, k in counts.items()}
    q = {c: int(v) for c, v in exact.items()}
    for c in sorted(exact, key=lambda c: (q[c] - exact[c], c))[: n - sum(q.values())]:
        q[c] += 1
    return q
