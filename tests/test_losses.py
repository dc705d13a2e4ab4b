"""Losses against hand-computed values and the inequalities they must satisfy."""

import math

import pytest
import torch
import torch.nn.functional as F

from distill.train.losses import (
    LOSS_NAMES,
    TAIL_FLOOR,
    coarsen,
    combined_loss,
    cross_entropy,
    forward_kl,
    jsd,
    per_position,
    reverse_kl,
    student_logprobs,
    tvd,
)

LOSSES = {"fkl": forward_kl, "rkl": reverse_kl, "jsd": jsd, "tvd": tvd}


def _all(n):
    return torch.ones(n, dtype=torch.bool)


def _topk(teacher_logits, k):
    """Teacher's top-k (ids, float32 log-probs) from full logits (N, V)."""
    lp, ids = torch.log_softmax(teacher_logits.float(), dim=-1).topk(k, dim=-1)
    return ids, lp


def _full(name, p, q, beta=0.5):
    """Reference divergence (N,) between full distributions p, q (N, V) in float64."""
    p, q = p.double(), q.double()
    if name == "fkl":
        return torch.xlogy(p, p).sum(-1) - torch.xlogy(p, q).sum(-1)
    if name == "rkl":
        return _full("fkl", q, p)
    if name == "jsd":
        m = beta * p + (1 - beta) * q
        return beta * _full("fkl", p, m) + (1 - beta) * _full("fkl", q, m)
    return 0.5 * (p - q).abs().sum(-1)


# --- hand-computed values on V = 4, k = 2


P4 = [0.5, 0.3, 0.15, 0.05]  # teacher; top-2 = ids 0, 1, rest bin 0.2
Q4 = [0.25, 0.25, 0.25, 0.25]  # student; bins 0.25, 0.25, rest 0.5


def _case4():
    logits = torch.tensor([Q4]).log()
    ids = torch.tensor([[0, 1]])
    lps = torch.tensor([P4[:2]]).log()
    return logits, ids, lps


def test_hand_values():
    p, q = [0.5, 0.3, 0.2], [0.25, 0.25, 0.5]
    m = [0.375, 0.275, 0.35]
    expected = {
        "fkl": 0.5 * math.log(2) + 0.3 * math.log(1.2) + 0.2 * math.log(0.4),
        "rkl": 0.25 * math.log(0.5) + 0.25 * math.log(0.25 / 0.3) + 0.5 * math.log(2.5),
        "jsd": 0.5 * sum(pi * math.log(pi / mi) for pi, mi in zip(p, m))
        + 0.5 * sum(qi * math.log(qi / mi) for qi, mi in zip(q, m)),
        "tvd": 0.3,
    }
    assert expected["fkl"] == pytest.approx(0.5 * 0.693147 + 0.3 * 0.182322 - 0.2 * 0.916291, abs=1e-6)
    logits, ids, lps = _case4()
    for name, fn in LOSSES.items():
        assert fn(logits, ids, lps, _all(1)).item() == pytest.approx(expected[name], abs=1e-6), name


def test_jsd_beta_hand_value():
    b, p, q = 0.3, [0.5, 0.3, 0.2], [0.25, 0.25, 0.5]
    m = [b * pi + (1 - b) * qi for pi, qi in zip(p, q)]
    expected = b * sum(pi * math.log(pi / mi) for pi, mi in zip(p, m)) + (1 - b) * sum(
        qi * math.log(qi / mi) for qi, mi in zip(q, m)
    )
    logits, ids, lps = _case4()
    assert jsd(logits, ids, lps, _all(1), beta=b).item() == pytest.approx(expected, abs=1e-6)


def test_cross_entropy_hand_value_and_ignored_label():
    logits, _, _ = _case4()
    logits = logits.repeat(2, 1)
    labels = torch.tensor([2, -1])
    assert cross_entropy(logits, labels, _all(2)).item() == pytest.approx(math.log(4), abs=1e-6)


# --- identities and inequalities on random distributions


@pytest.mark.parametrize("k", [16, 5])
def test_zero_on_identical(k):
    torch.manual_seed(0)
    z = torch.randn(8, 16) * 3
    ids, lps = _topk(z, k)
    if k == 16:  # full vocabulary in a shuffled order: no rest bin
        perm = torch.randperm(16)
        ids, lps = ids[:, perm], lps[:, perm]
    for name, fn in LOSSES.items():
        assert fn(z, ids, lps, _all(8)).item() == pytest.approx(0.0, abs=1e-6), name


def test_nonnegative_bounded_and_lower_bound_of_full_vocab():
    torch.manual_seed(1)
    zt, zs = torch.randn(64, 12) * 2, torch.randn(64, 12) * 2
    p, q = zt.softmax(-1), zs.softmax(-1)
    ids, lps = _topk(zt, 4)
    vals = per_position(zs, ids, lps, list(LOSSES))
    for name, v in vals.items():
        assert (v >= -1e-6).all(), name
        assert (v <= _full(name, p, q).float() + 1e-5).all(), name  # coarsening never increases a divergence
        assert (v < _full(name, p, q).float() - 1e-4).any(), name  # and here it strictly loses something
    assert (vals["jsd"] <= math.log(2) + 1e-6).all()
    assert (vals["tvd"] <= torch.sqrt(vals["fkl"] / 2) + 1e-6).all()  # Pinsker
    assert (vals["tvd"] <= torch.sqrt(vals["rkl"] / 2) + 1e-6).all()


def test_full_vocab_matches_reference():
    torch.manual_seed(2)
    zt, zs = torch.randn(16, 10), torch.randn(16, 10)
    ids, lps = _topk(zt, 10)
    vals = per_position(zs, ids, lps, list(LOSSES), jsd_beta=0.2)
    for name, v in vals.items():
        ref = _full(name, zt.softmax(-1), zs.softmax(-1), beta=0.2).float()
        torch.testing.assert_close(v, ref, atol=1e-5, rtol=1e-5)


def test_jsd_symmetry():
    torch.manual_seed(3)
    za, zb = torch.randn(16, 10) * 2, torch.randn(16, 10) * 2
    ids_a, lps_a = _topk(za, 10)
    ids_b, lps_b = _topk(zb, 10)
    m = _all(16)
    assert jsd(zb, ids_a, lps_a, m).item() == pytest.approx(jsd(za, ids_b, lps_b, m).item(), abs=1e-6)
    # generalised: swapping teacher and student is the same as beta -> 1 - beta
    assert jsd(zb, ids_a, lps_a, m, beta=0.2).item() == pytest.approx(
        jsd(za, ids_b, lps_b, m, beta=0.8).item(), abs=1e-6
    )
    assert jsd(zb, ids_a, lps_a, m).item() > 0.01


# --- reduced vocabulary (-1 ids), masks, dtypes


def test_minus_one_ids_move_teacher_mass_to_rest():
    # Student vocab {a, b, c} = ids 0..2; teacher's top-3 is (b 0.4, x 0.3, a 0.2) with x not in the student's
    # vocab. Teacher bins: b 0.4, a 0.2, rest 0.4; student q = (0.5, 0.3, 0.2): bins b 0.3, a 0.5, rest 0.2.
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    ids = torch.tensor([[1, -1, 0]])
    lps = torch.tensor([[0.4, 0.3, 0.2]]).log()
    expected = 0.4 * math.log(0.4 / 0.3) + 0.2 * math.log(0.2 / 0.5) + 0.4 * math.log(0.4 / 0.2)
    assert forward_kl(logits, ids, lps, _all(1)).item() == pytest.approx(expected, abs=1e-6)
    # the same as leaving the -1 column out
    dropped = forward_kl(logits, ids[:, [0, 2]], lps[:, [0, 2]], _all(1))
    assert forward_kl(logits, ids, lps, _all(1)).item() == pytest.approx(dropped.item(), abs=1e-7)


def test_several_minus_one_and_all_minus_one():
    torch.manual_seed(4)
    zs = torch.randn(3, 6, requires_grad=True)
    ids = torch.tensor([[2, -1, -1, 0], [-1, -1, -1, -1], [5, 4, 3, -1]])
    lps = torch.log(torch.tensor([[0.3, 0.2, 0.2, 0.1], [0.4, 0.3, 0.2, 0.05], [0.5, 0.2, 0.1, 0.1]]))
    for name in LOSSES:
        v = per_position(zs, ids, lps, [name])[name]
        assert torch.isfinite(v).all(), name
        assert v[1].item() == pytest.approx(0.0, abs=1e-6), name  # one bin each: nothing to compare
        v.sum().backward()
        assert torch.isfinite(zs.grad).all(), name
        zs.grad = None
    t_logp, _, live = coarsen(zs, ids, lps)
    assert live.tolist()[0] == [True, False, False, True, True]
    assert t_logp[0, 4].exp().item() == pytest.approx(0.6, abs=1e-6)  # 0.2 + 0.2 from -1 ids + 0.2 tail


def test_ids_cover_student_vocab_drops_teacher_rest():
    # Reduced student vocab of 3, all of them in the teacher's top-3, teacher tail 0.4 outside: no rest bin,
    # teacher renormalised over the 3 bins.
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log()
    ids = torch.tensor([[0, 1, 2]])
    lps = torch.tensor([[0.3, 0.18, 0.12]]).log()
    assert forward_kl(logits, ids, lps, _all(1)).item() == pytest.approx(0.0, abs=1e-6)


def test_mask_excludes_positions():
    torch.manual_seed(5)
    zs = torch.randn(6, 8, requires_grad=True)
    ids, lps = _topk(torch.randn(6, 8), 3)
    mask = torch.tensor([True, False, True, True, False, True])
    for name, fn in LOSSES.items():
        loss = fn(zs, ids, lps, mask)
        sub = fn(zs[mask], ids[mask], lps[mask], _all(4))
        assert loss.item() == pytest.approx(sub.item(), abs=1e-6), name
        loss.backward()
        assert (zs.grad[~mask] == 0).all() and (zs.grad[mask] != 0).any(), name
        zs.grad = None
    assert forward_kl(zs, ids, lps, torch.zeros(6, dtype=torch.bool)).item() == 0.0
    with pytest.raises(ValueError, match="bool"):
        forward_kl(zs, ids, lps, mask.long())


def test_float16_logprobs_and_bfloat16_logits():
    torch.manual_seed(6)
    zt, zs = torch.randn(4, 8), torch.randn(4, 8)
    ids, lps = _topk(zt, 3)
    ref = forward_kl(zs, ids, lps, _all(4))
    low = forward_kl(zs.bfloat16(), ids, lps.half(), _all(4))
    assert low.dtype == torch.float32
    assert low.item() == pytest.approx(ref.item(), abs=2e-2)


# --- gradients in the corners


@pytest.mark.parametrize("k", [8, 3])
@pytest.mark.parametrize("hot", [0, 7])  # the student's one-hot token: in the teacher's top-k, or (k=3) not
def test_gradients_finite_when_student_is_one_hot(k, hot):
    zt = torch.arange(8.0).flip(0) * 2  # teacher's top ids are 0, 1, 2, ...
    ids, lps = _topk(zt[None], k)
    zs = torch.full((1, 8), -50.0)
    zs[0, hot] = 50.0
    zs.requires_grad_(True)
    for name, fn in LOSSES.items():
        loss = fn(zs, ids, lps, _all(1))
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(zs.grad).all(), name
        zs.grad = None


def test_gradients_finite_when_teacher_tail_is_zero():
    # fp16 rounding: the stored top-k sums to more than 1. The rest bin is floored, rkl stays finite.
    ids = torch.tensor([[0, 1]])
    lps = torch.tensor([[0.7, 0.3005]]).log().half()
    assert lps.float().exp().sum() > 1
    zs = torch.randn(1, 5, requires_grad=True)
    t_logp, _, _ = coarsen(zs, ids, lps)
    assert t_logp.exp().sum().item() == pytest.approx(1.0, abs=1e-6)
    assert t_logp[0, 2].exp().item() == pytest.approx(TAIL_FLOOR, rel=1e-2)
    for name, fn in LOSSES.items():
        loss = fn(zs, ids, lps, _all(1))
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(zs.grad).all(), name
        zs.grad = None


@pytest.mark.parametrize("name", list(LOSSES))
def test_gradient_matches_float64_reference(name):
    # Reference: bins built naively in float64 from the full softmax, divergence by the formula in _full.
    torch.manual_seed(9)
    zt, zs = torch.randn(5, 10), torch.randn(5, 10, requires_grad=True)
    ids, lps = _topk(zt, 4)
    ids[0, 1] = -1
    LOSSES[name](zs, ids, lps, _all(5)).backward()
    z64 = zs.detach().double().requires_grad_(True)
    valid = ids >= 0
    q = torch.where(valid, z64.softmax(-1).gather(-1, ids.clamp(min=0)), 0.0)
    p = torch.where(valid, lps.double().exp(), 0.0)
    q_bins = torch.cat([q, 1 - q.sum(-1, keepdim=True)], -1)
    p_bins = torch.cat([p, 1 - p.sum(-1, keepdim=True)], -1)
    _full(name, p_bins, q_bins).mean().backward()
    torch.testing.assert_close(zs.grad, z64.grad.float(), atol=1e-6, rtol=1e-4)


def test_gradient_moves_student_toward_teacher():
    logits, ids, lps = _case4()
    logits.requires_grad_(True)
    for name, fn in LOSSES.items():
        fn(logits, ids, lps, _all(1)).backward()
        g = logits.grad[0]
        assert g[0] < 0 and g[2] > 0, name  # teacher over-weights id 0 and under-weights the tail
        logits.grad = None


# --- cross-entropy and the combined loss


def test_cross_entropy_matches_torch():
    torch.manual_seed(7)
    zs, labels = torch.randn(10, 7), torch.randint(0, 7, (10,))
    torch.testing.assert_close(cross_entropy(zs, labels, _all(10)), F.cross_entropy(zs, labels))
    labels[[2, 5]] = -1
    torch.testing.assert_close(
        cross_entropy(zs, labels, _all(10)), F.cross_entropy(zs, labels, ignore_index=-1)
    )


def test_combined_loss_weights_and_parts():
    torch.manual_seed(8)
    zs = torch.randn(6, 9, requires_grad=True)
    ids, lps = _topk(torch.randn(6, 9), 4)
    labels, mask = ids[:, 0].clone(), _all(6)
    weights = {"fkl": 0.5, "jsd": 1.0, "ce": 0.1, "rkl": 0.0}
    total, parts = combined_loss(zs, ids, lps, labels, mask, weights, jsd_beta=0.3)
    assert list(parts) == ["fkl", "jsd", "ce"]
    assert parts["fkl"].item() == pytest.approx(forward_kl(zs, ids, lps, mask).item(), abs=1e-6)
    assert parts["jsd"].item() == pytest.approx(jsd(zs, ids, lps, mask, beta=0.3).item(), abs=1e-6)
    assert parts["ce"].item() == pytest.approx(cross_entropy(zs, labels, mask).item(), abs=1e-6)
    assert total.item() == pytest.approx(sum(weights[n] * parts[n].item() for n in parts), abs=1e-6)
    assert all(not v.requires_grad for v in parts.values())
    total.backward()
    assert torch.isfinite(zs.grad).all() and zs.grad.abs().sum() > 0
    # every name is accepted; divergence-only weights need no labels
    combined_loss(zs, ids, lps, labels, mask, dict.fromkeys(LOSS_NAMES, 1.0))
    combined_loss(zs, ids, lps, None, mask, {"tvd": 1.0})


# --- the one-pass softmax (student_logprobs) against plain autograd


def _reference_logprobs(z, ids, rest_of):
    """log q at ids and log q(complement of rest_of's ids), by log_softmax and logsumexp (autograd)."""
    logq = torch.log_softmax(z, dim=-1)
    in_set = torch.zeros_like(z, dtype=torch.bool)
    for r, row in enumerate(rest_of.tolist()):
        in_set[r, [i for i in row if i >= 0]] = True
    rest = torch.logsumexp(logq.masked_fill(in_set, -math.inf), dim=-1, keepdim=True)
    return logq.gather(-1, ids.clamp(min=0)), rest


@pytest.mark.parametrize("scale", [1.0, 40.0])  # 40: peaked rows whose complement mass underflows float32
def test_student_logprobs_value_and_gradient_match_autograd(scale):
    torch.manual_seed(11)
    z = (torch.randn(6, 12) * scale).requires_grad_(True)
    rest_of = torch.stack([torch.randperm(12)[:5] for _ in range(6)])
    rest_of[1, 2] = -1
    if scale > 1:  # make the complement tiny on rows 0 and 3: the set holds each row's top 5 by a wide margin
        rest_of[[0, 3]] = z.detach()[[0, 3]].topk(5, dim=-1).indices
        z.data[[0, 3]] = z.data[[0, 3]].scatter(-1, rest_of[[0, 3]], 150.0)
    ids = torch.cat([rest_of, rest_of[:, :1], torch.randint(0, 12, (6, 1))], dim=-1)  # a duplicate id, a label
    at, rest = student_logprobs(z, ids, rest_of)
    g_at, g_rest = torch.randn(at.shape).masked_fill(ids < 0, 0.0), torch.randn(rest.shape)
    (at * g_at).sum().add((rest * g_rest).sum()).backward()
    z64 = z.detach().double().requires_grad_(True)
    ref_at, ref_rest = _reference_logprobs(z64, ids, rest_of)
    (ref_at * g_at.double()).sum().add((ref_rest * g_rest.double()).sum()).backward()
    live = ids >= 0
    tol = 1e-5 * scale  # float32 rounding of logits of that size
    torch.testing.assert_close(at[live], ref_at[live].float(), atol=tol, rtol=1e-5)
    torch.testing.assert_close(rest, ref_rest.float(), atol=tol, rtol=1e-5)
    if scale > 1:
        assert (ref_rest[[0, 3]] < -40).all()  # those rows' complement mass underflows float32 against the row max
    assert torch.isfinite(rest).all()
    torch.testing.assert_close(z.grad, z64.grad.float(), atol=1e-5, rtol=1e-4)


def test_student_logprobs_exact_when_the_complement_is_100_nats_below_the_max():
    # exp(z - row max) is 0 in float32 for the whole complement (exp(-110) < 1.4e-45): its log-mass and its
    # gradient come from the complement's own max, not from a row-max exp pass
    torch.manual_seed(14)
    z = torch.randn(3, 40)
    rest_of = torch.tensor([[0, 1, 2, 3], [5, 6, -1, -1], [7, 8, 9, 10]])
    z[0] -= 110.0
    z[0, :4] = torch.tensor([0.0, -1.0, -2.0, 0.5])  # the set holds the row's whole mass but for e^-110
    z[1, 20:] -= 100.0  # only part of the complement far below
    assert torch.exp(z[0, 4:] - z[0].max()).sum() == 0  # what a row-max exp pass sees
    z = z.requires_grad_(True)
    ids = torch.cat([rest_of, torch.tensor([[9], [20], [3]])], dim=-1)  # a label in the complement, far below
    at, rest = student_logprobs(z, ids, rest_of)
    g_at, g_rest = torch.randn(at.shape).masked_fill(ids < 0, 0.0), torch.randn(rest.shape)
    (at * g_at).sum().add((rest * g_rest).sum()).backward()
    z64 = z.detach().double().requires_grad_(True)
    ref_at, ref_rest = _reference_logprobs(z64, ids, rest_of)
    (ref_at * g_at.double()).sum().add((ref_rest * g_rest.double()).sum()).backward()
    assert ref_rest[0].item() < -100
    live = ids >= 0
    torch.testing.assert_close(rest, ref_rest.float(), atol=2e-4, rtol=1e-6)  # float32 holds ~110 to ~1e-5
    torch.testing.assert_close(at[live], ref_at[live].float(), atol=2e-4, rtol=1e-6)
    torch.testing.assert_close(z.grad, z64.grad.float(), atol=1e-5, rtol=1e-4)
    # the complement's gradient is g_rest * softmax over the complement alone, not 0 (which underflow would give)
    c0 = torch.softmax(z64.detach()[0, 4:], -1) * g_rest[0].double()
    torch.testing.assert_close(z.grad[0, 4:] - g_at[0, -1] * torch.nn.functional.one_hot(torch.tensor(5), 36),
                               c0.float(), atol=1e-6, rtol=1e-4)


def test_student_logprobs_counts_repeated_ids_once():
    # a label equal to a top-k id, and (defensively) a set id given twice: the set's mass counts each id once
    torch.manual_seed(15)
    z = torch.randn(3, 9, dtype=torch.float64, requires_grad=True)
    rest_of = torch.tensor([[4, 4, 1, -1], [0, 2, 8, 2], [-1, -1, -1, -1]])
    ids = torch.cat([rest_of, torch.tensor([[4], [8], [3]])], dim=-1)
    at, rest = student_logprobs(z, ids, rest_of)
    ref_at, ref_rest = _reference_logprobs(z, ids, rest_of)
    live = ids >= 0
    torch.testing.assert_close(at[live], ref_at[live])
    torch.testing.assert_close(rest, ref_rest)
    assert rest[2].item() == pytest.approx(0.0, abs=1e-12)  # no set: the rest is everything
    assert torch.autograd.gradcheck(lambda x: student_logprobs(x, ids, rest_of), (z,))


def test_student_logprobs_gradcheck_and_without_rest():
    torch.manual_seed(12)
    z = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    ids, rest_of = torch.randint(0, 7, (4, 3)), torch.tensor([[0, 1, -1], [2, 3, 4], [6, 5, 0], [-1, -1, 3]])
    assert torch.autograd.gradcheck(lambda x: student_logprobs(x, ids, rest_of), (z,))
    assert torch.autograd.gradcheck(lambda x: student_logprobs(x, ids)[0], (z,))
    assert student_logprobs(z, ids)[1] is None


def test_student_logprobs_finite_when_the_set_covers_the_vocabulary():
    z = torch.randn(2, 4, requires_grad=True)
    at, rest = student_logprobs(z, torch.tensor([[0], [1]]), torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]]))
    assert torch.isfinite(rest).all()
    at.sum().backward(retain_graph=True)  # the rest is unused here, as coarsen masks it when the set covers V
    assert torch.isfinite(z.grad).all()
    z.grad = None
    rest.sum().backward()  # and carries no gradient, were it used
    assert torch.equal(z.grad, torch.zeros_like(z))


def test_combined_loss_gradient_is_the_sum_of_the_separate_terms():
    # one shared softmax pass for fkl + ce + top1 must give the gradient the separate functions give
    torch.manual_seed(13)
    zs = torch.randn(8, 15, requires_grad=True)
    ids, lps = _topk(torch.randn(8, 15), 5)
    ids[2, 3], ids[5, 0] = -1, -1
    labels = torch.randint(0, 15, (8,))
    labels[4] = -1
    mask = _all(8)
    mask[6] = False
    combined_loss(zs, ids, lps, labels, mask, {"fkl": 1.0, "ce": 0.5, "top1": 2.0})[0].backward()
    z2 = zs.detach().clone().requires_grad_(True)
    (forward_kl(z2, ids, lps, mask) + 0.5 * cross_entropy(z2, labels, mask)
     + 2.0 * cross_entropy(z2, ids[:, 0], mask)).backward()
    torch.testing.assert_close(zs.grad, z2.grad, atol=1e-6, rtol=1e-5)


def test_top1_is_cross_entropy_on_the_teachers_first_id_not_the_sampled_label():
    # student probs (0.5, 0.25, 0.25); the teacher's most likely token is id 1, the sampled label id 0
    zs = torch.tensor([[math.log(0.5), math.log(0.25), math.log(0.25)]])
    ids, lps = torch.tensor([[1, 0]]), torch.log(torch.tensor([[0.6, 0.3]]))
    labels, mask = torch.tensor([0]), _all(1)
    _, parts = combined_loss(zs, ids, lps, labels, mask, {"ce": 1.0, "top1": 1.0})
    assert parts["ce"].item() == pytest.approx(math.log(2), abs=1e-6)
    assert parts["top1"].item() == pytest.approx(math.log(4), abs=1e-6)
    # needs no labels; a top id outside the student's vocabulary (-1) is left out of the mean
    ids2 = torch.tensor([[1, 0], [-1, 2]])
    _, parts = combined_loss(zs.repeat(2, 1), ids2, lps.repeat(2, 1), None, _all(2), {"top1": 1.0})
    assert parts["top1"].item() == pytest.approx(math.log(4), abs=1e-6)
    with pytest.raises(ValueError, match="top-k ids"):
        combined_loss(zs, None, None, labels, mask, {"top1": 1.0})


@pytest.mark.parametrize(
    ("weights", "labels", "match"),
    [
        ({"kl": 1.0}, True, "valid: fkl, rkl, jsd, tvd, ce"),
        ({}, True, "zero"),
        ({"fkl": 0.0, "ce": 0.0}, True, "zero"),
        ({"fkl": -1.0}, True, ">= 0"),
        ({"ce": 1.0}, False, "labels"),
    ],
)
def test_combined_loss_errors(weights, labels, match):
    zs = torch.randn(2, 5)
    ids, lps = _topk(torch.randn(2, 5), 2)
    with pytest.raises(ValueError, match=match):
        combined_loss(zs, ids, lps, ids[:, 0] if labels else None, _all(2), weights)


def test_bad_inputs_raise():
    zs = torch.randn(2, 5)
    ids, lps = _topk(torch.randn(2, 5), 2)
    with pytest.raises(ValueError, match="jsd_beta"):
        jsd(zs, ids, lps, _all(2), beta=1.0)
    with pytest.raises(ValueError, match="shape"):
        forward_kl(zs, ids, lps[:, :1], _all(2))


# --- the head and the loss over chunks of positions (chunked_loss)


@pytest.mark.parametrize("weights", [{"fkl": 1.0}, dict.fromkeys(LOSS_NAMES, 1.0), {"ce": 1.0, "top1": 0.5}])
def test_chunked_loss_equals_the_unchunked_loss_value_and_gradients(weights):
    from distill.train.losses import chunked_loss

    torch.manual_seed(0)
    n, h, v, k = 37, 8, 50, 4
    hidden = torch.randn(n, h, dtype=torch.float64, requires_grad=True)
    head = torch.nn.Linear(h, v, bias=False).double()
    ids = torch.stack([torch.randperm(v)[:k] for _ in range(n)])
    ids[::5, 1] = -1  # tokens outside the student's vocabulary
    lps = torch.log_softmax(torch.randn(n, k + 3, dtype=torch.float64), -1)[:, :k].sort(-1, descending=True).values
    labels = torch.randint(0, v, (n,))
    labels[::7] = -1
    mask = torch.rand(n) > 0.2

    def run(fn):
        hidden.grad, head.weight.grad = None, None
        total, parts = fn()
        total.backward()
        return total.detach(), parts, hidden.grad.clone(), head.weight.grad.clone()

    want = run(lambda: combined_loss(head(hidden), ids, lps, labels, mask, weights, 0.3))
    for chunk in (1, 8, 36, 37):
        got = run(lambda c=chunk: chunked_loss(hidden, head, ids, lps, labels, mask, weights, 0.3, c))
        torch.testing.assert_close(got[0], want[0], rtol=1e-12, atol=1e-12)
        assert got[1].keys() == want[1].keys()
        for a, b in zip(got[2:], want[2:]):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_chunked_loss_never_holds_a_tensor_of_all_positions_by_the_vocabulary():
    from torch.utils._python_dispatch import TorchDispatchMode

    from distill.train.losses import chunked_loss

    class Largest(TorchDispatchMode):
        biggest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else [out]:
                if isinstance(t, torch.Tensor):
                    self.biggest = max(self.biggest, t.numel())
            return out

    n, h, v, k, chunk = 512, 16, 1000, 8, 32
    hidden = torch.randn(n, h, requires_grad=True)
    head = torch.nn.Linear(h, v, bias=False)
    ids = torch.stack([torch.randperm(v)[:k] for _ in range(n)])
    lps = torch.log_softmax(torch.randn(n, k), -1)
    with Largest() as seen:
        total, _ = chunked_loss(hidden, head, ids, lps, ids[:, 0], _all(n), {"fkl": 1.0, "ce": 1.0}, chunk=chunk)
        total.backward()
    assert seen.biggest <= chunk * (v + 1), seen.biggest  # (chunk, V) at most, not (N, V)
