"""scripts/parallel_gap.py (issue 52): the draft fed along an output as the decoder feeds a parallel draft gives the
same first choices as one uncached forward over the whole sequence, at the real tokens and at the mask."""
import importlib.util
from pathlib import Path

import torch

from decode.models.draft_folder import VocabMap

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "parallel_gap.py"


def _script():
    spec = importlib.util.spec_from_file_location("parallel_gap", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_position_reads_what_decoding_reads(tiny_llama):
    pg = _script()
    draft, mask = tiny_llama(3, vocab=40), 39
    vocab = VocabMap(None, 40)
    prompt, out = [5, 9, 2, 17], [3, 3, 8, 21, 8, 30, 1]
    rows = pg.along_output(draft, vocab, mask, prompt, out)
    assert len(rows) == len(out) - 2
    with torch.no_grad():
        real = draft(torch.tensor([prompt + out])).logits[0, len(prompt) - 1:-1]  # (len(out), V): row t predicts out[t]
        real[:, mask] = float("-inf")
        for t, (p1, ok1, mask2, real2) in enumerate(rows):
            assert ok1 == (int(real[t].argmax()) == out[t]) and real2 == (int(real[t + 1].argmax()) == out[t + 1])
            assert abs(p1 - float(torch.softmax(real[t], -1).max())) < 1e-4
            z = draft(torch.tensor([prompt + out[:t] + [mask]])).logits[0, -1]
            z[mask] = float("-inf")
            assert mask2 == (int(z.argmax()) == out[t + 1])


def test_the_table_splits_by_confidence():
    lines = _script().table([(0.95, True, True, True), (0.95, True, False, True), (0.2, False, False, False)])
    assert "| 0.9-1.0 | 0.667 | 1.000 | 0.500 | 1.000 |" in lines
    assert "| 0.0-0.4 | 0.333 | 0.000 | – | – |" in lines
    assert lines[-1] == "| all | 1.000 | 0.667 | 0.500 | 1.000 |"
