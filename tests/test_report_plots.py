"""distill.evaluate.plots with the pipeline's own settings (one checkpoint, one γ): what each plot draws from.
The data functions are checked, not pixels; one test writes the PNGs to see that all three have something."""

from __future__ import annotations

import json

import pytest

from decode.bench import costmodel
from distill.evaluate import job, plots, report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
V = {"1": 1.1045, "2": 1.1641, "3": 1.3041, "4": 1.4417, "5": 1.4783, "6": 1.6082, "8": 1.7618}


def _entry(label, gamma=2, step=550, alpha=0.217, alpha_iid=0.3, c=0.031, speedup=1.10, lookup=0, tree_nodes=0):
    return {"label": label, "gamma": gamma, "step": step, "lookup": lookup, "tree_nodes": tree_nodes,
            "schedule": "constant", "speedup": speedup, "speculative": {"acceptance_rate": alpha, "tau": 1.42},
            "cost_model": {"c": c, "alpha_iid": alpha_iid, "v": V}}


@pytest.fixture
def pipeline_like():
    """The entries distill.pipeline's settings give: the last checkpoint at γ=2, with lookup and tree variants,
    and the untrained anchor; plus the run's proxy curve."""
    entries = [_entry("step 550"), _entry("step 550 + lookup 2", alpha=0.223, speedup=1.13, lookup=2),
               _entry("step 550 tree-6", alpha=0.276, speedup=0.97, tree_nodes=6),
               _entry("untrained layers:0,1", step=None, alpha=0.022, alpha_iid=0.03, c=0.048, speedup=0.78)]
    return {"entries": entries, "training_proxy": [[0, 0.09], [50, 0.16], [100, 0.28]]}


def test_acceptance_by_step_draws_the_training_proxy_and_the_measured_alpha(pipeline_like):
    assert plots.proxy_curve(pipeline_like) == [(0, 0.09), (50, 0.16), (100, 0.28)]
    # the draft alone only (lookup and top-K change what α counts); the table's α and the per-token estimate
    assert plots.step_points(pipeline_like["entries"]) == [(550, 0.217, 0.3, 1.10, 2)]


def test_the_proxy_is_read_from_the_runs_metrics(tmp_path):
    rows = [{"step": 0, "eval/acceptance_proxy": 0.09}, {"step": 10, "train/loss": 3.0},
            {"step": 50, "eval/acceptance_proxy": 0.16}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 6')  # cut short
    assert job.training_proxy(tmp_path) == [[0, 0.09], [50, 0.16]]
    assert job.training_proxy(tmp_path / "elsewhere") == []


def test_speedup_by_gamma_is_the_cost_model_over_gamma_1_to_8_through_the_measured_point(pipeline_like):
    curves = {d["label"]: d for d in plots.gamma_curves(pipeline_like["entries"])}
    main = curves["step 550"]
    assert [g for g, _ in main["predicted"]] == list(range(1, 9))
    assert main["measured"] == [(2, 1.10)]
    v = {int(g): x for g, x in V.items()}
    pred = dict(main["predicted"])
    assert pred[2] == pytest.approx(costmodel.speedup(0.3, 2, 0.031, v[2]), abs=1e-4)
    assert pred[7] == pytest.approx(costmodel.speedup(0.3, 7, 0.031, (v[6] + v[8]) / 2), abs=1e-4)  # v(7) unmeasured
    # lookup and top-K runs are measured points only: the prediction needs their round mix
    assert curves["step 550 + lookup 2"] == {"label": "step 550 + lookup 2", "measured": [(2, 1.13)], "predicted": []}
    assert curves["untrained layers:0,1"]["predicted"]


def test_design_map_uses_the_tables_alpha_distinct_colours_and_numbered_labels(pipeline_like):
    pts = plots.map_points(pipeline_like["entries"])
    assert [p["alpha"] for p in pts] == [e["speculative"]["acceptance_rate"] for e in pipeline_like["entries"]]
    assert [p["n"] for p in pts] == [1, 2, 3, 4] and pts[0]["text"] == "1: step 550 γ=2, 1.1×"
    assert not {p["colour"] for p in pts} & set(plots.ISO_COLOURS)
    g, curves = plots.iso_curves(pipeline_like["entries"], c_max=0.2)
    assert g == 2 and [s for s, *_ in curves] == list(plots.ISO_SPEEDUPS)
    # a curve point (c, table α) is where the cost model, fed the matching per-token α, gives that speedup
    s, cs, alphas, _ = curves[2]
    a_iid = costmodel.alpha_for_speedup(s, 2, cs[10], V["2"])
    assert alphas[10] == pytest.approx(plots.table_alpha(a_iid, 2)) and alphas[10] < a_iid


def test_design_map_draws_a_curve_that_never_enters_the_plot(pipeline_like, tmp_path, monkeypatch):
    """Timings from a busy machine can put a whole iso-speedup curve above α 0.97: it is drawn without a label."""
    g, curves = plots.iso_curves(pipeline_like["entries"], c_max=0.2)
    s, cs, _, col = curves[0]
    monkeypatch.setattr(plots, "iso_curves", lambda *a: (g, [*curves, (9.9, cs, [0.99] * len(cs), col)]))
    assert plots.design_map(pipeline_like, tmp_path / "map.png").read_bytes().startswith(PNG_MAGIC)


def test_label_heights_never_overprint():
    ys = plots.spread([0.217, 0.223, 0.276, 0.273, 0.022], gap=0.035)
    order = sorted(ys)
    assert all(b - a >= 0.035 - 1e-9 for a, b in zip(order, order[1:]))
    assert ys[4] == 0.022 and ys[0] == 0.217  # the lowest of each cluster stays at its point


def test_all_three_plots_are_written_for_one_checkpoint_at_one_gamma(pipeline_like, tmp_path):
    makers = (plots.by_step, plots.by_gamma, plots.design_map)  # as report.write calls them
    pngs = [make(pipeline_like, tmp_path / name) for make, name in zip(makers, report.PLOT_FILES)]
    assert all(p is not None and p.read_bytes().startswith(PNG_MAGIC) for p in pngs)
