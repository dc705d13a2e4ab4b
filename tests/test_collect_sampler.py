"""Collection's sampler (distill/collect/outputs.race, issue 62): an exponential race with no host read. Its draws
follow the distribution they are asked for (a chi-square test), the same test rejects a sampler that draws from
another one, and Outputs.record samples what logits_to_probs says (temperature, top-k, top-p)."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import chisquare

from decode.drafting.sampling import SamplingParams, logits_to_probs
from distill.collect.outputs import Outputs, race

DRAWS = 40_000
P_MIN = 1e-3  # a right sampler fails this at this seed with probability 1e-3; the wrong one below is at ~1e-300


def chi_square_p(draws: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of the draws (n,) against probs (V,): Pearson's chi-square over the tokens of nonzero probability
    (a draw of a zero-probability token fails outright)."""
    counts = torch.bincount(draws, minlength=len(probs)).double()
    if counts[probs == 0].sum() > 0:
        return 0.0
    keep = probs > 0
    expected = probs[keep].double() / probs[keep].double().sum() * len(draws)
    return float(chisquare(counts[keep].numpy(), expected.numpy()).pvalue)


PROBS = torch.tensor([0.42, 0.2, 0.15, 0.1, 0.06, 0.04, 0.02, 0.01, 0.0, 0.0])


def test_the_race_draws_the_distribution_it_is_given():
    g = torch.Generator().manual_seed(0)
    draws = race(PROBS.expand(DRAWS, -1).contiguous(), g)
    assert chi_square_p(draws, PROBS) > P_MIN


def test_the_chi_square_test_rejects_draws_from_another_distribution():
    g = torch.Generator().manual_seed(0)
    sharper = PROBS ** 1.3 / (PROBS ** 1.3).sum()  # a sampler that drew at a temperature of 1/1.3 instead of 1
    assert chi_square_p(race(sharper.expand(DRAWS, -1).contiguous(), g), PROBS) < 1e-12


@pytest.mark.parametrize("sampling", [SamplingParams(0.8), SamplingParams(1.2, 5), SamplingParams(0.9, 0, 0.8)])
def test_record_samples_what_logits_to_probs_gives(sampling):
    logits = torch.randn(12, generator=torch.Generator().manual_seed(1)) * 2
    out = Outputs(DRAWS, 1, 0, set(), "cpu")
    out.record(logits.expand(DRAWS, -1), sampling, torch.Generator().manual_seed(2))
    assert chi_square_p(out.tokens[:, 0], logits_to_probs(logits, sampling)) > P_MIN
