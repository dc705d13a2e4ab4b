"""The vllm check (distill/publish/vllm_check.py): the comparison on recorded vLLM numbers, the skip when vLLM is
not installed, the card and the slow-draft warnings.

The real check (two vLLM engine loads, minutes on 2 CPU cores) runs once, in the README walk
(tests/test_readme_walk.py): publish --dry-run of the pipeline's reduced-vocabulary draft with --vllm-python, its
result and card checked there (issue 36: it was also a 311 s test here, on a layer cut of the default target).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

from distill.publish import modelcard, vllm_check

# Recorded: SmolLM2-135M-Instruct with its 8,192-id pipeline draft (expanded), γ = 3, 4 held-out prompts × 64
# tokens, float32 on 2 CPU cores, vLLM 0.32.0 (outputs shortened to 2 tokens a prompt: only equality matters)
OUTPUTS = [[504, 3458], [1848, 30], [504, 1380], [17495, 28]]
RECORDED = {
    "vllm": "0.32.0", "max_tokens": 64, "dtype": "float32",
    "target_alone": {"outputs": OUTPUTS, "tokens": 256, "seconds": 16.27, "drafts": 0, "draft_tokens": 0,
                     "accepted": 0},
    "speculative": {"outputs": OUTPUTS, "tokens": 256, "seconds": 19.77, "drafts": 178, "draft_tokens": 534,
                    "accepted": 76},
}
OURS = {"outputs": OUTPUTS, "proposed": 515, "accepted": 74, "rounds": 178}  # the bundled decoder, same prompts


def test_recorded_run_passes_with_its_numbers():
    ok, detail, n = vllm_check.compare(RECORDED, OURS, 3)
    assert ok, detail
    assert (n["acceptance_rate"], n["ours_acceptance_rate"]) == (round(76 / 534, 4), round(74 / 515, 4))
    assert n["tau"] == round(1 + 76 / 178, 3) and n["ours_tau"] == round((74 + 178) / 178, 3)
    assert n["speedup"] == round((256 / 19.77) / (256 / 16.27), 3) and n["lossless"]
    assert "equals its target alone" in detail and "α 0.142 vs bundled decoder 0.144" in detail


def test_tolerance_covers_the_end_of_prompt_rounds_and_little_more():
    # 4 prompts × B = γ(γ+1)/2 = 6 tokens each, over min(515, 534) drafted, scaled by (1 + α), + numerics
    tol = vllm_check.alpha_tolerance(4, 3, 515, 74 / 515)
    assert tol == pytest.approx((1 + 74 / 515) * 24 / 515 + vllm_check.NUMERICS_ALLOWANCE)
    assert 0.05 < tol < 0.08  # the recorded gap is 0.002; a draft vLLM runs wrongly drops α to ~0 (gap 0.14)


def _edited(**spec):
    r = copy.deepcopy(RECORDED)
    r["speculative"].update(spec)
    return r


@pytest.mark.parametrize("spec, says", [
    ({"accepted": 5}, "vLLM's acceptance rate 0.009 is not the bundled decoder's 0.144"),
    ({"accepted": 130}, "vLLM's acceptance rate 0.243"),  # too good is as wrong as too bad: another draft
    ({"outputs": [[504, 3458], [1848, 31], [504, 1380], [17495, 28]]},
     "differs from vLLM's target alone at new token 1 of prompt 1: [31] vs [30]"),
    ({"drafts": 0, "draft_tokens": 0, "accepted": 0}, "vLLM drafted no tokens"),
])
def test_a_wrong_vllm_run_fails(spec, says):
    ok, detail, _ = vllm_check.compare(_edited(**spec), OURS, 3)
    assert not ok and says in detail, detail


def test_a_divergence_is_excused_only_at_a_near_tie_under_the_numeric_rule():
    r = _edited(outputs=[[504, 3458], [1848, 31], [504, 1380], [17495, 28]])
    seen = []

    def margins(p, ref):  # decode.drafting.lossless.margin_fn's shape: the target's |z[ref[i]] - z[token]|, here 0.01
        return lambda i, token: seen.append((p, ref[i], token, i)) or 0.01

    ok, detail, n = vllm_check.compare(r, OURS, 3, "numeric", 0.02, margins)
    assert ok and seen == [(1, 30, 31, 1)] and n["lossless"] and not n["outputs_identical"]
    assert n["excused_divergences"] == 1 and n["unchecked_tokens"] == 0  # the divergence was the prompt's last token
    assert not vllm_check.compare(r, OURS, 3, "numeric", 0.005, margins)[0]  # outside ε
    assert not vllm_check.compare(r, OURS, 3, "exact", 0.02, margins)[0]  # float32: none excused


def test_skipped_only_when_vllm_is_missing(tmp_path, capsys):
    if vllm_check.vllm_installed(sys.executable):
        pytest.skip("this interpreter has vLLM: the skip path cannot be seen here")
    status, detail, numbers = vllm_check.prove(tmp_path, str(tmp_path), None, None, 3, sys.executable)
    assert (status, numbers) == ("skip", None)
    assert detail.startswith("skipped: vLLM is not installed for") and "--vllm-python" in detail


def test_card_states_vllm_numbers_next_to_ours_and_warns_when_slower():
    _, _, n = vllm_check.compare(RECORDED, OURS, 3)
    best = {"gamma": 2, "speedup": 1.10, "device": "cpu (2 cores)",
            "speculative": {"acceptance_rate": 0.217, "tau": 1.3, "tokens_per_s": 21.0},
            "baseline": {"tokens_per_s": 19.1}}
    text = vllm_check.card_section(n, best)
    assert "| vLLM 0.32.0 | 0.142 | 1.43 | 12.9 vs 15.7 | 0.82× |" in text
    assert "| bundled decoder, same prompts | 0.144 | 1.42 |" in text and "| 1.10× |" in text
    assert "Not measured" in vllm_check.card_section(None, best)
    warnings = modelcard.slow_warnings(best, n)
    assert len(warnings) == 1 and "SLOWER than the target alone in vLLM: 0.82×" in warnings[0]
    assert "bundled decoder: 0.90×" in modelcard.slow_warnings({**best, "speedup": 0.9}, None)[0]
    assert modelcard.slow_warnings(best, {**n, "speedup": 1.2}) == []


def test_a_relative_vllm_python_is_made_absolute_but_not_resolved(tmp_path, monkeypatch):
    """The check runs the interpreter from a temporary folder: `.venv-vllm/bin/python` as the README writes it
    failed there (FileNotFoundError). A venv's python is a link to the base one: resolving it would lose the venv."""
    from distill.publish.job import PublishConfig

    venv = tmp_path / ".venv-vllm" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    monkeypatch.chdir(tmp_path)
    cfg = PublishConfig(draft_dir="d", repo_id="org/x", vllm_python=".venv-vllm/bin/python")
    assert cfg.vllm_python == str(venv / "python")


def test_the_vllm_request_names_local_folders_by_absolute_path(tmp_path, monkeypatch):
    """vLLM runs in a temporary folder: the README's `--dry-run runs/publish-dry-run` reached it as a relative path
    and vLLM could not find the model there. A Hub id stays as it is."""
    from types import SimpleNamespace

    import torch

    seen = []
    monkeypatch.setattr(vllm_check, "vllm_installed", lambda python: True)
    monkeypatch.setattr(vllm_check, "check_prompts", lambda tok: [[1, 2, 3]])

    def refuse(python, request):
        seen.append(request)
        raise RuntimeError("stop here")

    monkeypatch.setattr(vllm_check, "run_vllm", refuse)
    (tmp_path / "runs" / "dry").mkdir(parents=True)
    (tmp_path / "target").mkdir()
    monkeypatch.chdir(tmp_path)
    target = SimpleNamespace(dtype=torch.float32)
    for target_path in ("target", "org/hub-target"):
        status, _, _ = vllm_check.prove(Path("runs/dry"), target_path, target, None, 2, sys.executable)
        assert status == "fail"
    assert [r["draft"] for r in seen] == [str(tmp_path / "runs" / "dry")] * 2
    assert [r["target"] for r in seen] == [str(tmp_path / "target"), "org/hub-target"]
