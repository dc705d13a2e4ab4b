"""What a batch of generating rows has produced so far, kept on the device until the batch ends.

One decode step of B rows ends with Outputs.record(logits): the top-k of the raw logits, the next token (greedy
or sampled: race()), whether the row has just ended (an EOS id) written into preallocated device buffers at column t.
Nothing in it reads a host value, so a GPU step (forward + record) can be one CUDA graph replay and the host
reads the buffers once per batch (to_generated), plus a few flags at the loop's check points.

    tokens   (B0, T) long          response token t of each original row
    topk_ids (B0, T, k) int32       the target's top-k ids at response position t (k = 0: not kept)
    topk_lp  (B0, T, k) float16     their logprobs (log-softmax of the raw logits: temperature 1, no top-k/top-p)
    length   (B0,) long             tokens each row produced, its EOS included
    done     (B,) bool              per row of the current batch (rows may be dropped: select)
    rows     (B,) long              the original row of each current batch row
    next     (B,) long              the token each current row reads next
    t        () long                the column the next record writes

The buffers have T + 1 columns: the last is scratch for a CUDA graph's warm-up runs (llama_steps.py).
"""

from __future__ import annotations

import torch

from decode.drafting.sampling import SamplingParams, logits_to_probs


def topk_rows(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, V) raw logits -> (B, k) ids (int32) and logprobs (float16)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    vals, ids = torch.topk(logp, k, dim=-1)
    return ids.to(torch.int32), vals.to(torch.float16)


def race(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, V) probabilities -> (B,) one draw a row from them: an exponential race, argmax_i p_i / E_i with E_i ~
    Exp(1) i.i.d. (the first of independent exponential clocks of rates p_i to ring is i with probability p_i).
    No host read and fixed shapes, unlike torch.multinomial, so a CUDA graph can hold it (its generator registered).
    E is clamped above 0 (a draw of exactly 0 would divide by it) and p = 0 never wins."""
    e = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / e.clamp_min_(torch.finfo(e.dtype).tiny)).argmax(-1)


class Outputs:

    def __init__(self, batch: int, max_new_tokens: int, k: int, eos_ids: set[int], device):
        cols = max_new_tokens + 1  # + a scratch column
        self.max_new_tokens, self.k, self.device = max_new_tokens, k, device
        self.tokens = torch.zeros(batch, cols, dtype=torch.long, device=device)
        self.topk_ids = torch.zeros(batch, cols, k, dtype=torch.int32, device=device)
        self.topk_lp = torch.zeros(batch, cols, k, dtype=torch.float16, device=device)
        self.length = torch.zeros(batch, dtype=torch.long, device=device)
        self.done = torch.zeros(batch, dtype=torch.bool, device=device)
        self.rows = torch.arange(batch, device=device)
        self.next = torch.zeros(batch, dtype=torch.long, device=device)
        self.t = torch.zeros((), dtype=torch.long, device=device)
        # (E,) the EOS ids; at least one entry (-1 matches no token) so the comparison below keeps its shape
        self.eos = torch.tensor(sorted(eos_ids) or [-1], dtype=torch.long, device=device)

    def reset(self) -> None:
        """For a new batch of as many rows, in place (a captured graph holds these very tensors)."""
        self.length.zero_()
        self.done.zero_()
        self.t.zero_()

    def record(self, logits: torch.Tensor, sampling: SamplingParams, generator=None) -> None:
        """logits (B, V) of the current rows' last position: keep their top-k, pick each row's next token, count
        it for rows still going, and mark the rows whose token ends them."""
        col = self.t.expand(len(self.rows))  # (B,) the same column for every row
        if self.k:
            ti, tl = topk_rows(logits, self.k)
            self.topk_ids.index_put_((self.rows, col), ti)
            self.topk_lp.index_put_((self.rows, col), tl)
        if sampling.greedy:
            nxt = logits.argmax(-1)
        else:
            nxt = race(logits_to_probs(logits, sampling), generator)
        self.tokens.index_put_((self.rows, col), nxt)
        self.length.index_add_(0, self.rows, (~self.done).long())
        self.done |= (nxt[:, None] == self.eos[None]).any(-1)
        self.next.copy_(nxt)
        self.t += 1

    def select(self, keep: torch.Tensor) -> None:
        """Keep only these current rows (keep (B',) indices into the current batch), in that order."""
        self.rows, self.done, self.next = self.rows[keep], self.done[keep], self.next[keep]

    def stop_strings(self, tokenizer, stops: tuple[str, ...], since: int) -> None:
        """Mark the current rows whose text holds a stop string, ending them at the first token where it appears
        (a stop string ends a row as soon as the decoded tail of its last 16 tokens holds it, unless that token was an
        EOS). Tokens past the first `since` are the new ones. One host read of the current rows' tokens."""
        t = int(self.t)
        rows, done = self.rows.tolist(), self.done.tolist()
        tokens = self.tokens[self.rows, :t].tolist()
        lengths = self.length[self.rows].tolist()
        for j, (b, ended) in enumerate(zip(rows, done)):
            for n in range(since + 1, lengths[j] + 1):  # the row's response up to token n
                if n == lengths[j] and ended:
                    break  # it ended at an EOS there, before a stop string could be checked
                if any(s in tokenizer.decode(tokens[j][:n][-16:]) for s in stops):
                    self.length[b] = n
                    self.done[j] = True
                    break

    def to_generated(self) -> list[tuple[list[int], list | None, list | None]]:
        """(response ids, top-k ids per position or None, their logprobs or None) of every original row: one
        device-to-host copy for the whole batch."""
        length = self.length.tolist()
        tokens = self.tokens.cpu().numpy()
        ids = self.topk_ids.cpu().numpy() if self.k else None
        lp = self.topk_lp.cpu().numpy() if self.k else None
        return [(tokens[b, :n].tolist(), ids[b, :n].tolist() if self.k else None,
                 lp[b, :n].tolist() if self.k else None) for b, n in enumerate(length)]
