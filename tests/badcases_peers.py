"""Bad inputs of distill.peers (our drafts against a peer trainer's)."""

from badinputs import Case


def _pipeline_without_collection(env) -> str:
    run = env.tmp / "run"
    run.mkdir(exist_ok=True)
    (run / "pipeline.config.json").write_text("{}")
    return str(run)


CASES = [
    Case("peers", "no --run", lambda env: [], "give --run RUN"),
    Case("peers", "--run that is not a pipeline folder", lambda env: ["--run", str(env.tmp)],
         "not a pipeline folder (no pipeline.config.json)"),
    Case("peers", "--run without a finished collection", lambda env: ["--run", _pipeline_without_collection(env)],
         "has no finished collection"),
    Case("peers", "--recipes naming no speculators recipe", lambda env: ["--run", str(env.tmp), "--recipes", "[fast]"],
         "choose from defaults, small-data"),
    Case("peers", "--limit 0", lambda env: ["--run", str(env.tmp), "--limit", "0"], "--limit >= 1"),
]
