"""Turning an evaluation result into what people read: report.md, a headline, W&B tables.

    python -m distill.evaluate.report EVAL_DIR      # rewrite EVAL_DIR/report.md from its report.json (no re-measuring)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from decode import cli
from decode.drafting import lossless
from decode.errors import UserError
from distill.evaluate import long_check, offshelf, positions, timing
from distill.evaluate.kinds import kind

# the plots distill.evaluate writes, in report order: by training step, by γ, the design map
PLOT_FILES = ("acceptance_by_step.png", "speedup_by_gamma.png", "design_map.png", positions.PLOT_FILE)


def best(entries: list[dict]) -> dict | None:
    """The trained entry with the highest measured speedup (any entry if none is trained); after a screen
    (distill.evaluate --screen-limit), the winner confirmed on every prompt."""
    trained = [e for e in entries if e.get("trained")]
    pool = [e for e in trained if e.get("confirmed")] or trained or entries
    if not pool:
        return None
    e = max(pool, key=lambda x: x["speedup"])
    return {"draft": e["draft"], "label": e["label"], "kind": kind(e), "gamma": e["gamma"], "lookup": e.get("lookup", 0),
            "tree_nodes": e.get("tree_nodes", 0), "speedup": e["speedup"],
            "acceptance_rate": e["speculative"]["acceptance_rate"], "tau": e["speculative"]["tau"],
            "predicted_speedup": e["cost_model"]["predicted_speedup"], "lossless": e["lossless"],
            # the rule lossless was judged by (decode.drafting.lossless), its ε and the near-ties it excused; absent in old reports
            **{k: e[k] for k in ("lossless_rule", "epsilon", "excused_divergences", "excused_margins") if k in e},
            # the cost model checked where it matters: (predicted - measured) / measured at the best measured γ
            "prediction_error": _error(e["cost_model"]["predicted_speedup"], e["speedup"]),
            **_in_run_error(e),
            "speedup_vs_hf_assisted": e["speedup_vs_hf_assisted"], "prompts": e.get("prompts")}


KIND_NAMES = {"feature_head": "feature head", "standalone": "standalone", "parallel": "parallel",
              "other_tokenizer": "another tokenizer"}


def design_text(e: dict) -> str:
    """The design column of report.md: the kind, then what its specdistill.json design says in a few words."""
    k = kind(e)
    d = e.get("design") if isinstance(e.get("design"), dict) else {}
    if k == "feature_head":
        parts = [f"features of layers {','.join(map(str, d['feature_layers']))}" if d.get("feature_layers") else None,
                 f"{d['head_layers']} layer{'s' if d['head_layers'] != 1 else ''}" if d.get("head_layers") else None,
                 f"vocab {d['vocab_size']}" if d.get("vocab_size") else None]
    else:
        layers = d.get("layers")
        parts = [(f"layers {','.join(map(str, layers))}" if isinstance(layers, list) else f"{layers} layers")
                 if layers is not None else None,
                 d.get("init") if d.get("init") not in (None, "target_layers") else None,
                 f"vocab {d['vocab']}" if d.get("vocab") not in (None, "full") else None,
                 f"block {d['parallel']}" if d.get("parallel") else None]  # a parallel draft's K
    parts += [f"{d['params'] / 1e6:.1f}M params"] if isinstance(d.get("params"), (int, float)) else []
    parts += [f"{e['other_tokenizer']['shared_ids']} ids shared"] if e.get("other_tokenizer") else []
    shown = "; ".join(p for p in parts if p)
    return KIND_NAMES.get(k, k) + (f" ({shown})" if shown else "")


def _in_run_error(e: dict) -> dict:
    ir = e["cost_model"].get("in_run")
    if not ir:
        return {}
    return {"predicted_speedup_in_run": ir["predicted_speedup"],
            "prediction_error_in_run": _error(ir["predicted_speedup"], e["speedup"])}


def _error(predicted: float, measured: float) -> float:
    return round((predicted - measured) / measured, 4)


def headline(result: dict) -> str:
    b = result.get("best")
    if not b:
        return f"no draft evaluated; see {result.get('output')}/report.md"
    skipped = len(result.get("errors") or [])
    skipped = f"; skipped {skipped} (listed in report.md)" if skipped else ""
    lookup = f", context lookup {b['lookup']}" if b.get("lookup") else ""
    lookup += f", token tree of {b['tree_nodes']} nodes" if b.get("tree_nodes") else ""
    what = f"{KIND_NAMES.get(b['kind'], b['kind'])}, " if b.get("kind", "standalone") != "standalone" else ""
    return (f"{timing.headline_note(result)}best draft {b['draft']} ({what}γ={b['gamma']}{lookup}): speedup {b['speedup']}x over the target alone "
            f"(cost model predicted {b['predicted_speedup']}x, {b['prediction_error']:+.1%}{_in_run_note(b)}), "
            f"α={b['acceptance_rate']}, τ={b['tau']}, "
            f"lossless={lossless.describe(b)}{skipped}; report: {result.get('output')}/report.md"
            + long_check.headline(result))


def _in_run_note(b: dict) -> str:
    if "prediction_error_in_run" not in b:
        return ""
    return f"; with c, v from the run: {b['predicted_speedup_in_run']}x, {b['prediction_error_in_run']:+.1%}"


def _f(x, nd=3):
    return "–" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def markdown(result: dict, pngs: list[str]) -> str:
    entries = result["entries"]
    lines = [f"# specdistill evaluation: target `{result['target']}`", "",
             f"{result['prompts']} prompts from `{result['prompt_set']}`; command: `{result['command']}`", ""]
    warn = timing.warning_line(result)
    lines += [warn, ""] if warn else []
    if entries:
        e0 = entries[0]
        # transformers' own target alone, on the prompts of the entries that ran it: an anchor for every device
        hfg = next((e["hf_generate"] for e in entries if e.get("hf_generate")), None)
        lines += [f"Device: {e0['device']}, dtype {e0['dtype']}, max_new_tokens {e0['max_new_tokens']}, "
                  f"temperature {e0['temperature']}, schedule {e0['schedule']}." + (
                      f" Target alone: {_f(e0['baseline']['tokens_per_s'], 1)} tokens/s here, "
                      f"{_f(hfg['tokens_per_s'], 1)} with transformers' generate." if hfg else ""), "",
                  *_screen_lines(result),
                  "| draft | design | step | γ | prompts | α | τ | target tok/s | spec tok/s | speedup | predicted | "
                  "vs HF assisted | c | lossless |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in entries:
            s, cm = e["speculative"], e["cost_model"]
            lines.append(f"| {e['label']} | {design_text(e)} | {_f(e.get('step'))} | {e['gamma']} | {_f(e.get('prompts'))} | "
                         f"{_f(s['acceptance_rate'])} | {_f(s['tau'], 2)} | "
                         f"{_f(e['baseline']['tokens_per_s'], 1)} | {_f(s['tokens_per_s'], 1)} | **{_f(e['speedup'], 2)}×** | "
                         f"{_f(cm['predicted_speedup'], 2)}× | {_f(e['speedup_vs_hf_assisted'], 2)} | {_f(cm['c'])} | "
                         f"{lossless.describe(e)} |")  # bf16/fp16: with the near-ties excused and ε
        b = result.get("best")
        if b:
            top = next(e for e in entries if e["label"] == b["label"] and e["gamma"] == b["gamma"])
            lines += ["", f"## Per category: {top['label']} at γ={top['gamma']}", "",
                      "| category | prompts | α | τ | speedup |", "|---|---|---|---|---|"]
            for cat, c in top["per_category"].items():
                lines.append(f"| {cat} | {c['prompts']} | {_f(c['acceptance_rate'])} | {_f(c['tau'], 2)} | {_f(c['speedup'], 2)}× |")
            lines += _context_lines(top)
            cm = top["cost_model"]
            lines += ["", f"Cost model at the best measured γ ({top['gamma']}): predicted {cm['predicted_speedup']}× vs measured "
                      f"{top['speedup']}× ({b['prediction_error']:+.1%})."]
            lines += ["", f"Cost model on this device: target step {cm['target_step_ms']} ms, draft step {cm['draft_step_ms']} ms "
                      f"(c = {cm['c']}), v(γ) = {cm['v']}; best γ predicted: {cm['best_gamma']} "
                      f"({cm['best_gamma_predicted_speedup']}×)."]
            if cm.get("in_run"):
                ir = cm["in_run"]
                lines += ["", f"The same cost model with c and v from this run's own forward timings (c = {ir['c']}, "
                          f"v = {ir['v']}): predicted {ir['predicted_speedup']}× ({b['prediction_error_in_run']:+.1%})."]
    pl = result.get("anchors", {}).get("prompt_lookup")
    vl = result.get("anchors", {}).get("vllm")
    if pl or vl:
        lines += ["", "## Anchors", ""]
    if pl:
        lines += [f"- transformers prompt-lookup decoding (γ={pl['gamma']}): {pl['speedup_vs_hf_target_alone']}× "
                  f"over transformers' target alone ({pl['tokens_per_s']} vs {pl['hf_target_alone_tokens_per_s']} tokens/s)",
                  "- transformers assisted generation with one draft (the first it can run, at the first lookup "
                  "setting and as a chain): the 'vs HF assisted' column (same draft, same γ)"]
        lines += [f"  - not for {name}: {why}" for name, why in hf_skipped(entries).items()]
        lines += ["- the untrained layer cut: the 'untrained layers:…' rows (standalone drafts only; feature heads "
                  "have no layers to cut)"]
    if vl:
        lines += vllm_lines(vl)
    lines += long_check.lines(result)  # [] without --long-prompts
    lines += positions.table(entries)  # [] without a parallel draft
    lines += offshelf.lines(result)  # [] without an off-the-shelf draft
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {x}" for x in result["notes"]]
    if result.get("errors"):
        lines += ["", "## Not evaluated", ""] + [f"- skipped `{x['draft']}`: {x['error']}" for x in result["errors"]]
    if result.get("stage_times"):  # added by the pipeline after its last stage (add_stage_times)
        lines += ["", "## Pipeline stage times", "", *stage_lines(result["stage_times"])]
    if pngs:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in pngs]
    return "\n".join(lines) + "\n"


def _screen_lines(result: dict) -> list[str]:
    """What a screened evaluation timed on how many prompts ([] when every row ran on every prompt)."""
    sc = result.get("screen")
    if not sc:
        return []
    n = result["prompts"]
    return [f"Each draft's plausible settings were timed on {sc['prompts']} of the {n} prompts (the screen), and the "
            f"fastest trained ones again on all {n}, beside one baseline: the rows marked (all {n} prompts). The "
            f"faster of those, {sc['winner']} ({sc['speedup']}× in the screen), is what the headline and the pipeline "
            "take.", ""]


STAGE_NAMES = {"collect_s": "collect (train + held-out prompts)", "plan_s": "plan (each design's draft timed)",
               "train_s": "train standalone", "train_head_s": "train feature head", "train_parallel_s": "train parallel",
               "onpolicy_s": "on-policy rounds", "evaluate_s": "evaluate", "total_s": "total"}


def stage_lines(times: dict) -> list[str]:
    """A pipeline run's stage times ({"collect_s": seconds, ...}) as a markdown table."""
    rows = [f"| {STAGE_NAMES.get(k, k)} | {v:,.1f} |" for k, v in times.items()
            if isinstance(v, (int, float)) and k != "total_s"]
    total = times.get("total_s")
    if isinstance(total, (int, float)):
        rows.append(f"| total | {total:,.1f} ({int(total // 60)} min {int(total % 60)} s) |")
    return ["| stage | seconds |", "|---|---|", *rows]


def add_stage_times(eval_dir: Path, times: dict) -> None:
    """The pipeline's stage times into its evaluation's report.json and report.md (the plots as they are)."""
    result = load(eval_dir)
    result["stage_times"] = times
    (eval_dir / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    rewrite(ReportConfig(str(eval_dir)))


def _context_lines(top: dict) -> list[str]:
    """The best entry by the prompt's length (decode.bench.results.context_bucket), where its prompts span more than
    the shortest bucket (a long prompt set; a run on the short sets has one row and no table)."""
    rows = top.get("per_context") or {}
    if list(rows) in ([], ["<512"]):
        return []
    lines = ["", f"## By context length: {top['label']} at γ={top['gamma']}", "",
             "| prompt tokens | prompts | α | τ | target tok/s | speedup |", "|---|---|---|---|---|---|"]
    for name, c in rows.items():
        lines.append(f"| {name} | {c['prompts']} | {_f(c['acceptance_rate'])} | {_f(c['tau'], 2)} | "
                     f"{_f(c['baseline_tokens_per_s'], 1)} | {_f(c['speedup'], 2)}× |")
    return lines


def hf_skipped(entries: list[dict]) -> dict[str, str]:
    """{draft label: why transformers' assisted generation did not run it} (decode.bench's hf_assisted_skipped),
    once per draft, for the drafts it ran for none of their entries."""
    ran = {e["draft"] for e in entries if e.get("hf_assisted")}
    out: dict[str, str] = {}
    for e in entries:
        if e.get("hf_assisted_skipped") and e["draft"] not in ran:
            out.setdefault(e["label"], e["hf_assisted_skipped"])
    return out


def vllm_lines(v: dict) -> list[str]:
    """The vLLM anchor (distill.evaluate.vllm_anchors) as report.md lines: a table of vLLM's numbers, ours beside."""
    if "target_alone" not in v:
        return ["", f"vLLM anchor: {v.get('error', 'no numbers')}"]
    lines = ["", f"{v['engine']}, same prompts, max_new_tokens {v['max_new_tokens']}, greedy, batch {v['batch']}, "
             f"dtype {v['dtype']}, γ={v['gamma']}; α and τ from vLLM's spec-decode counters; target alone: "
             f"{_f(v['target_alone']['tokens_per_s'], 1)} tokens/s.", "",
             "| vLLM with | tok/s | speedup vs vLLM target | α | τ | outputs = target | ours: α | τ | speedup |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in ([v["ngram"]] if v.get("ngram") else []) + v.get("drafts", []):
        name = "n-gram lookup" if e["method"] == "ngram" else e["label"]
        o = e.get("ours") or {}
        mine = f"{_f(o.get('acceptance_rate'))} | {_f(o.get('tau'), 2)} | {_f(o.get('speedup'), 2)}{'×' if o else ''}"
        if "tokens_per_s" not in e:  # not servable or failed: the reason, and our numbers still beside it
            lines.append(f"| {name} | {e.get('not_servable') or e.get('error')} |  |  |  |  | {mine} |")
            continue
        lines.append(f"| {name} | {_f(e['tokens_per_s'], 1)} | **{_f(e['speedup_vs_vllm_target_alone'], 2)}×** | "
                     f"{_f(e.get('acceptance_rate'))} | {_f(e.get('tau'), 2)} | {e.get('outputs_matching_target')}/{v['prompts']} | "
                     f"{mine} |")
    if v.get("error"):
        lines += ["", f"vLLM anchor error: {v['error']}"]
    return lines


def write(result: dict, out: Path) -> list[Path]:
    """The plots (PLOT_FILES, those with data) and report.md of an evaluation result into `out`; the PNG paths."""
    from distill.evaluate import plots

    makers = (plots.by_step, plots.by_gamma, plots.design_map, positions.plot)  # in PLOT_FILES order
    pngs = [p for p in (make(result, out / name) for make, name in zip(makers, PLOT_FILES)) if p]
    (out / "report.md").write_text(markdown(result, [p.name for p in pngs]))
    return pngs


def log_wandb(result: dict, pngs: list[Path], project: str, out: Path) -> None:
    import wandb

    from distill.tracking import offline_without_key

    offline_without_key()
    run = wandb.init(project=project, job_type="eval", dir=str(out), config=result["config"])
    cols = ["draft", "kind", "step", "gamma", "acceptance_rate", "tau", "speedup", "predicted_speedup", "c", "lossless",
            "excused_divergences"]
    table = wandb.Table(columns=cols, data=[
        [e["label"], kind(e), e.get("step"), e["gamma"], e["speculative"]["acceptance_rate"], e["speculative"]["tau"], e["speedup"],
         e["cost_model"]["predicted_speedup"], e["cost_model"]["c"], e["lossless"], e.get("excused_divergences")]
        for e in result["entries"]])
    run.log({"eval/report": table, **{f"eval/{p.stem}": wandb.Image(str(p)) for p in pngs}})
    if result.get("best"):
        run.summary.update({f"eval/best_{k}": v for k, v in result["best"].items() if isinstance(v, (int, float))})
    run.finish()


@dataclass
class ReportConfig:
    eval_dir: str = field(default="", metadata={"positional": True, "help": "a folder written by distill.evaluate"})


def load(out: Path) -> dict:
    """EVAL_DIR/report.json, checked to be one distill.evaluate wrote."""
    path = out / "report.json"
    if out.is_file():
        raise UserError(f"{out} is a file; pass the folder python -m distill.evaluate wrote (it holds report.json)")
    if not path.is_file():
        raise UserError(f"{path} not found; run python -m distill.evaluate --output {out} first")
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise UserError(f"{path} is not valid JSON ({e}); rerun python -m distill.evaluate --output {out}") from None
    if not isinstance(result, dict) or not isinstance(result.get("entries"), list):
        raise UserError(f"{path} is not a distill.evaluate report (no 'entries' list); pass the folder "
                        "python -m distill.evaluate wrote")
    return result


def rewrite(cfg: ReportConfig, argv=None) -> dict:
    """report.md from report.json again (no re-measuring); the plots already there are linked."""
    out = Path(cfg.eval_dir)
    result = load(out)
    if result["entries"]:
        result["best"] = best(result["entries"])
    pngs = [name for name in PLOT_FILES if (out / name).is_file()]
    (out / "report.md").write_text(markdown(result, pngs))
    result["output"] = str(out)
    return result


def main(argv: list[str] | None = None) -> None:
    _, result = cli.run_job(ReportConfig, rewrite, argv, __doc__)
    print(headline(result))


if __name__ == "__main__":
    main()
