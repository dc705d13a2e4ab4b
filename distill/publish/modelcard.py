"""The model card of a published draft: measured numbers (model-index), design, training, commands, usage.

The numbers come from an evaluation report (`python -m distill.evaluate`, EVAL_DIR/report.json): one entry per
draft × γ with the result schema of docs/architecture.md. The card's headline is the γ with the best measured speedup; the
model-index holds, per prompt category (plus "all"), the acceptance rate α, τ and the speedup at that γ, with
the hardware, γ and dtype in each metric's config/args, so the numbers never travel without their conditions.

A feature head (EAGLE-3 style, a speculators eagle3 folder) gets the same numbers and checks; its card says what it
is, that vLLM serves it as `method: eagle3` and transformers' assistant_model cannot use it, and its design table
names its feature layers and draft vocabulary.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from decode.errors import UserError
from decode.models.feature_head import FORMAT as HEAD_FORMAT
from distill.publish import card_parallel, usage, vllm_check
from distill.publish.card_design import design_section, fmt, head_design_section, is_head, training_section

TAGS = ["speculative-decoding", "draft-model", "specdistill"]
HEAD_TAGS = ["eagle3", "speculators", "vllm"]  # what the Hub's other eagle3 speculator repos are tagged with
METRICS = (  # (metric_type, pretty name, where in an entry / per_category row)
    ("acceptance_rate", "Acceptance rate α (accepted / proposed draft tokens)", "acceptance_rate"),
    ("tau", "τ (tokens emitted per target forward)", "tau"),
    ("speedup", "Speedup vs the target alone (tokens/s ratio)", "speedup"),
)


# --- evaluation report


def load_report(eval_dir: Path) -> tuple[Path, dict]:
    path = eval_dir / "report.json" if eval_dir.is_dir() else eval_dir
    if not path.is_file():
        raise UserError(
            f"no evaluation report at {path}: give --eval the folder `python -m distill.evaluate` wrote (it holds report.json)"
        )
    try:
        report = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(report.get("entries"), list):
        raise UserError(f"{path} has no `entries` list; is it a report written by distill.evaluate?")
    return path, report


def select_entries(report: dict, report_path: Path, draft_dir: Path) -> list[dict]:
    """The report's entries (one per γ) for this draft: same resolved path, or the report's only trained draft.

    Each returned entry gets the report's `prompt_set` (the entries themselves count prompts, not name them) and
    `tree_variants`: the same draft's token-tree entries at its γ (decode.drafting.tree), which the card shows apart.
    """
    # entries decoded with the decoder's context lookup (decode.drafting.lookup) measure draft + lookup, and tree entries
    # our decoder's token trees: the card's numbers are what the draft does as a plain chain, as engines run it
    measured = [e for e in report["entries"] if isinstance(e, dict) and "draft" in e and "speedup" in e
                and not e.get("lookup")]
    entries = [e for e in measured if not e.get("tree_nodes")]

    def same(d: str) -> bool:
        p = Path(d).expanduser()
        return draft_dir.resolve() in (p.resolve(), (report_path.parent / p).resolve())

    mine = [e for e in entries if same(str(e["draft"]))]
    # anchors (`layers:...`, the untrained self-speculative baseline) are never the draft being published
    drafts = sorted(
        {
            str(e["draft"])
            for e in entries
            if e.get("trained", True) and not str(e["draft"]).startswith("layers:")
        }
    )
    if not mine and len(drafts) == 1:
        print(f"note: {report_path} measures one draft, {drafts[0]}; using its numbers for {draft_dir}")
        mine = [e for e in entries if str(e["draft"]) == drafts[0]]
    if not mine:
        raise UserError(
            f"{report_path} has no entry for {draft_dir}; it measures: {', '.join(drafts) or 'no trained draft'}"
        )
    trees = [e for e in measured if e.get("tree_nodes") and str(e["draft"]) == str(mine[0]["draft"])]
    return sorted(
        ({"prompt_set": report.get("prompt_set"), **e,
          "tree_variants": [t for t in trees if t.get("gamma") == e.get("gamma")]} for e in mine),
        key=lambda e: e.get("gamma", 0),
    )


def tree_section(best: dict | None, head: bool) -> str:
    """The measured token trees beside the chain numbers; for a head, the static tree they suggest for vLLM."""
    trees = sorted((best or {}).get("tree_variants") or [], key=lambda e: -e["speedup"])
    if not trees:
        return ""
    t = trees[0]
    nodes, gamma = t["tree_nodes"], t["gamma"]
    lines = [
        "## Token trees",
        f"In specdistill's decoder, a tree of up to {nodes} nodes and {gamma} levels drafted from this "
        f"{'head' if head else 'draft'} and verified in one target pass gave τ {fmt(card_numbers(t)['tau'], '.2f')} "
        f"(chain at γ={gamma}: {fmt(card_numbers(best)['tau'], '.2f')}) and {fmt(t['speedup'], '.2f')}x over the target "
        f"alone (chain: {fmt(best['speedup'], '.2f')}x), lossless: {t.get('lossless')}.",
    ]
    static = ((t.get("cost_model") or {}).get("tree") or {}).get("static_tree")
    if head and static:
        lines.append(f"vLLM serves EAGLE-3 heads with a static tree. The one this measured acceptance by depth and "
                     f"child rank suggests (not measured in vLLM here): `\"num_speculative_tokens\": {nodes}, "
                     f"\"speculative_token_tree\": \"{static}\"` in `speculative_config`.")
    return "\n\n".join(lines)


def headline(entries: list[dict]) -> dict:
    return max(entries, key=lambda e: e["speedup"])


def card_numbers(entry: dict) -> dict:
    """Flat numbers of the headline entry (for W&B and the CLI summary)."""
    spec = entry.get("speculative", {})
    out = {
        "gamma": entry.get("gamma"),
        "speedup": entry["speedup"],
        "acceptance_rate": spec.get("acceptance_rate"),
        "tau": spec.get("tau"),
        "tokens_per_s": spec.get("tokens_per_s"),
        "device": entry.get("device"),
        "dtype": entry.get("dtype"),
    }
    for cat, row in sorted((entry.get("per_category") or {}).items()):
        for key in ("acceptance_rate", "tau", "speedup"):
            if key in row:
                out[f"{cat}/{key}"] = row[key]
    return out


def _prompt_set_name(entry: dict) -> str:
    return Path(str(entry.get("prompt_set") or "prompts")).stem or "prompts"


def conditions(entry: dict) -> dict:
    return {
        k: entry.get(k) for k in ("gamma", "schedule", "dtype", "device", "temperature", "max_new_tokens")
    }


def eval_results(entry: dict, target_name: str) -> list[EvalResult]:
    """model-index rows: per category (and "all") × (α, τ, speedup), conditions stated on every metric."""
    cond = conditions(entry)
    metric_config = (
        f"gamma={cond['gamma']}, schedule={cond['schedule']}, dtype={cond['dtype']}, device={cond['device']}"
    )
    prompts = _prompt_set_name(entry)
    rows = {
        "all": {**entry.get("speculative", {}), "speedup": entry["speedup"]},
        **(entry.get("per_category") or {}),
    }
    results = []
    for cat, row in rows.items():
        for metric_type, name, key in METRICS:
            if row.get(key) is None:
                continue
            results.append(
                EvalResult(
                    task_type="text-generation",
                    task_name=f"Speculative decoding with {target_name}",
                    dataset_type=f"specdistill/{prompts}",
                    dataset_name=f"{prompts} ({cat})",
                    dataset_config=cat,
                    dataset_args={
                        "prompt_set": str(entry.get("prompt_set")),
                        "prompts": entry.get("prompts"),
                        "max_new_tokens": cond["max_new_tokens"],
                        "temperature": cond["temperature"],
                    },
                    metric_type=metric_type,
                    metric_name=name,
                    metric_value=round(float(row[key]), 4),
                    metric_config=metric_config,
                    metric_args=cond,
                )
            )
    return results


# --- card body


def _measured(entries: list[dict], best: dict, weights_dtype: str) -> str:
    c, spec = conditions(best), best.get("speculative", {})
    dtype_note = (
        f" (the weights here are published in {weights_dtype}; acceptance may shift slightly in that dtype)"
        if c["dtype"] not in (None, weights_dtype)
        else ""
    )
    lines = [
        "## Measured speed",
        "",
        f"Measured by `distill.evaluate` on **{c['device']}**, target and draft in **{c['dtype']}**{dtype_note}, γ = **{c['gamma']}** "
        f"({c['schedule']} schedule), temperature {c['temperature']}, up to {c['max_new_tokens']} new tokens per prompt, "
        f"{best.get('prompts')} prompts from `{best.get('prompt_set')}`. Speedup is speculative tokens/s ÷ target-alone tokens/s, same process, same prompts.",
        "",
        f"**Best γ = {c['gamma']}: {best['speedup']:.2f}× the target alone** (α = {fmt(spec.get('acceptance_rate'))}, "
        f"τ = {fmt(spec.get('tau'), '.2f')}, {fmt(spec.get('tokens_per_s'), '.1f')} tokens/s vs "
        f"{fmt(best.get('baseline', {}).get('tokens_per_s'), '.1f')}; lossless: {best.get('lossless')}).",
        "",
        "| category | acceptance rate α | τ | speedup |",
        "| --- | --- | --- | --- |",
        f"| all | {fmt(spec.get('acceptance_rate'))} | {fmt(spec.get('tau'), '.2f')} | {best['speedup']:.2f}× |",
    ]
    for cat, row in sorted((best.get("per_category") or {}).items()):
        lines.append(
            f"| {cat} | {fmt(row.get('acceptance_rate'))} | {fmt(row.get('tau'), '.2f')} | {fmt(row.get('speedup'), '.2f')}× |"
        )
    if len(entries) > 1:
        lines += [
            "",
            "Every γ measured:",
            "",
            "| γ | α | τ | tokens/s | speedup | lossless |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for e in entries:
            s = e.get("speculative", {})
            lines.append(
                f"| {e.get('gamma')} | {fmt(s.get('acceptance_rate'))} | {fmt(s.get('tau'), '.2f')} | "
                f"{fmt(s.get('tokens_per_s'), '.1f')} | {e['speedup']:.2f}× | {e.get('lossless')} |"
            )
    return "\n".join(lines)


def slow_warnings(best: dict | None, vllm: dict | None) -> list[str]:
    """One line per measurement in which the draft made decoding slower than the target alone."""
    lines = []
    if best and best["speedup"] < 1:
        lines.append(f"the draft is SLOWER than the target alone in the bundled decoder: {best['speedup']:.2f}× "
                     f"at its best γ = {best.get('gamma')} on {best.get('device')}; it only costs time there")
    if vllm and vllm.get("speedup") is not None and vllm["speedup"] < 1:
        lines.append(f"the draft is SLOWER than the target alone in vLLM: {vllm['speedup']:.2f}× at γ = "
                     f"{vllm.get('gamma')} ({vllm.get('dtype')}); serve the target without it there")
    return lines


NO_EVAL = """## Measured speed

> **Warning: no speed numbers were measured for this draft.** It was published without an evaluation report, so
> this card carries no acceptance rate, τ or speedup, and γ below is a default, not a tuned value. Measure it with
> `python -m distill.evaluate --drafts DRAFT_DIR` and republish with `--eval EVAL_DIR`."""


def _result(check) -> str:
    return "skipped" if getattr(check, "skipped", False) else "pass" if check.ok else "FAIL"


def _checks(checks) -> str:
    lines = [
        "## Compatibility checks (run before upload)",
        "",
        "| check | result | detail |",
        "| --- | --- | --- |",
    ]
    return "\n".join(
        lines
        + [f"| {c.name} | {_result(c)} | {c.detail.replace('|', '/')} |" for c in checks]
    )


def build_card(
    *,
    repo_id: str,
    target_id: str | None,
    target_spec: str,
    meta: dict,
    config: dict,
    target_config: dict,
    n_params: int,
    weights_dtype: str,
    entries: list[dict] | None,
    checks,
    gamma: int,
    reduced: bool,
    license: str | None = None,
    vllm: dict | None = None,
) -> ModelCard:
    name = repo_id.split("/")[-1]
    best = headline(entries) if entries else None
    shown = target_id or target_spec
    head = is_head(config)
    parallel = not head and card_parallel.mask_of(config) is not None  # distill/publish/card_parallel.py
    data = ModelCardData(
        base_model=target_id,
        tags=TAGS + HEAD_TAGS if head else TAGS,
        library_name="speculators" if head else "transformers",
        pipeline_tag="text-generation",
        license=license,
        model_name=name,
        eval_results=eval_results(best, shown) if best else None,
    )
    link = f"[{shown}](https://huggingface.co/{shown})" if target_id else f"`{shown}`"
    intro = (
        f"An EAGLE-3 style **feature head** for speculative decoding with {link}, in the "
        f"[speculators](https://github.com/vllm-project/speculators) `{HEAD_FORMAT}` format, built and measured with "
        "specdistill. It drafts from the target's own hidden states, so it runs only beside that target: vLLM "
        "serves it as `method: eagle3`; transformers' `assistant_model=` cannot use it (it is not a causal LM). "
        f"Weights are {weights_dtype} safetensors; the tokenizer files are the target's own."
        if head else
        f"A draft model for speculative decoding with {link}, built and measured with "
        f"specdistill.{card_parallel.intro(config) if parallel else ''} Weights are {weights_dtype} safetensors; the "
        "tokenizer files are the target's own."
    )
    body = "\n\n".join(part for part in [
            f"# {name}",
            intro,
            *[f"> **Warning: {w}.**" for w in slow_warnings(best, vllm)],
            _measured(entries, best, weights_dtype) if best else NO_EVAL,
            vllm_check.card_section(vllm, best),
            tree_section(best, head),
            (usage.head_section(repo_id, shown, gamma, bool(target_id)) if head
             else usage.section(repo_id, shown, gamma, reduced, parallel)),
            (head_design_section if head else design_section)(meta, config, target_config, n_params),
            training_section(meta),
            _checks(checks),
        ] if part
    )
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}\n")
