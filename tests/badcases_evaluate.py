"""Bad inputs of distill.evaluate and its report rewriter (python -m distill.evaluate.report EVAL_DIR)."""

import shutil

from badinputs import Case


def _ev(env, *args) -> list[str]:
    """evaluate against the tiny target, writing under the case's folder (never runs/eval in the checkout)."""
    return ["--target", env.base.target, "--limit", "1", "--max-new-tokens", "4", "--output", str(env.tmp / "eval"),
            *args]


def _dir(env, name: str = "run") -> str:
    p = env.tmp / name
    p.mkdir(exist_ok=True)
    return str(p)


def _file(env, name: str, text: str) -> str:
    p = env.tmp / name
    p.write_text(text)
    return str(p)


def _truncated(env) -> str:
    """A copy of the tiny target with half its model.safetensors: weights cut short by a full disk."""
    dst = env.tmp / "cut-draft"
    shutil.copytree(env.base.target, dst)
    w = dst / "model.safetensors"
    w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    return str(dst)


CASES = [
    Case("evaluate", "neither --run nor --drafts", lambda env: ["--output", str(env.tmp / "eval")], "give --run RUN_DIR"),
    Case("evaluate", "--run folder without checkpoints", lambda env: _ev(env, "--run", _dir(env)),
         "no complete checkpoints in"),
    Case("evaluate", "--run pointing at a file", lambda env: _ev(env, "--run", _file(env, "run.txt", "x")),
         "is a file; pass the training run folder"),
    Case("evaluate", "--run folder that does not exist", lambda env: _ev(env, "--run", str(env.tmp / "nope")),
         "no such folder"),
    Case("evaluate", "--checkpoints neither all nor last", lambda env: _ev(env, "--drafts", "x", "--checkpoints", "best"),
         "--checkpoints must be 'all' or 'last'"),
    Case("evaluate", "--anchors value unknown", lambda env: _ev(env, "--drafts", "x", "--anchors", "sglang"),
         "--anchors must be hf, vllm or none"),
    Case("evaluate", "--gamma 0", lambda env: _ev(env, "--drafts", "x", "--gamma", "0"), "--gamma must be in 1..64"),
    Case("evaluate", "--parallel-gamma 0", lambda env: _ev(env, "--drafts", "x", "--parallel-gamma", "[3, 0]"),
         "--parallel-gamma must be in 1..64"),
    Case("evaluate", "--tree-nodes 65", lambda env: _ev(env, "--drafts", "x", "--tree-nodes", "65"), "--tree-nodes"),
    Case("evaluate", "--lookup negative", lambda env: _ev(env, "--drafts", "x", "--lookup", "[0, -1]"), "--lookup"),
    Case("evaluate", "--long-limit negative", lambda env: _ev(env, "--drafts", "x", "--long-limit", "-1"),
         "--long-limit must be >= 0"),
    Case("evaluate", "--screen-limit negative", lambda env: _ev(env, "--drafts", "x", "--screen-limit", "-1"),
         "--screen-limit must be >= 0"),
    Case("evaluate", "--draft-context negative", lambda env: _ev(env, "--drafts", "x", "--draft-context", "-1"),
         "--draft-context must be 0 (the window chosen by cost) or 1..the draft's trained length"),
    Case("evaluate", "--long-schedule unknown", lambda env: _ev(env, "--drafts", "x", "--long-schedule", "fastest"),
         "--long-schedule must be one of"),
    Case("evaluate", "prompt file that does not exist",
         lambda env: _ev(env, "--drafts", "x", "--prompts", str(env.tmp / "missing.jsonl")), "missing.jsonl"),
    Case("evaluate", "prompt category unknown",
         lambda env: _ev(env, "--drafts", "x", "--categories", "[poetry]"), "unknown category ['poetry']"),
    Case("evaluate", "--drafts all missing",
         lambda env: _ev(env, "--drafts", str(env.tmp / "d1"), str(env.tmp / "d2")),
         "nothing evaluated, no draft could be loaded"),
    Case("evaluate", "the only draft's weights cut short", lambda env: _ev(env, "--drafts", _truncated(env)),
         "nothing evaluated, no draft could be loaded"),
    Case("report", "a folder without report.json", lambda env: [_dir(env, "eval")], "report.json not found"),
    Case("report", "EVAL_DIR is a file", lambda env: [_file(env, "eval", "x")], "is a file; pass the folder"),
    Case("report", "report.json that is not JSON",
         lambda env: [str(env.tmp)] if _file(env, "report.json", '{"entries": [') else [], "is not valid JSON"),
    Case("report", "report.json without entries",
         lambda env: [str(env.tmp)] if _file(env, "report.json", '{"target": "t"}') else [], "not a distill.evaluate report"),
]
