"""Bad inputs every job shares: the config mechanism (decode/cli.py) and the output folder."""

from badinputs import Case


def _yaml(env, text: str, name: str = "bad.yaml") -> str:
    p = env.tmp / name
    p.write_text(text)
    return str(p)


def _latin1_yaml(env) -> str:
    p = env.tmp / "latin1.yaml"
    p.write_bytes("prompts: café.jsonl\n".encode("latin-1"))
    return str(p)


def _file(env) -> str:
    p = env.tmp / "a-file"
    p.write_text("not a folder")
    return str(p)


CASES = [
    Case("collect", "--output is an existing file", lambda env: ["--target", env.base.target, "--output", _file(env)],
         "is a file, not a folder"),
    Case("train", "--output under a file", lambda env: ["--data", env.base.data, "--output", _file(env) + "/run"],
         "so no folder can be made under it"),
    Case("evaluate", "--output in a read-only place", lambda env: ["--drafts", "default", "--output", "/proc/specdistill-eval"],
         "cannot write in /proc"),
    Case("pipeline", "a config file that does not exist", lambda env: ["--config", str(env.tmp / "missing.yaml")],
         "config file not found"),
    Case("collect", "a YAML option that does not exist", lambda env: ["--config", _yaml(env, "max_new_tokns: 12\n")],
         "unknown option(s) ['max_new_tokns']"),
    Case("collect", "a YAML number given as a string", lambda env: ["--config", _yaml(env, 'max_new_tokens: "12"\n')],
         "max_new_tokens must be an int, got '12' (str)"),
    Case("collect", "a YAML int option given a fraction", lambda env: ["--config", _yaml(env, "batch_size: 2.5\n")],
         "batch_size must be an int, got 2.5 (float)"),
    Case("collect", "a YAML file saved as Latin-1", lambda env: ["--config", _latin1_yaml(env)],
         "not UTF-8 text (byte 0xe9 at offset 12); save the file as UTF-8"),
    Case("collect", "a YAML list option given a mapping", lambda env: ["--config", _yaml(env, "columns: [prompt]\n")],
         "columns must be a mapping"),
    Case("train", "a YAML float option given a word", lambda env: ["--config", _yaml(env, "lr: fast\n")],
         "lr must be a float, got 'fast' (str)"),
    Case("evaluate", "--gamma four", lambda env: ["--drafts", "layers:0", "--gamma", "four"],
         "--gamma must be an int or a list of ints, got 'four' (str)"),
    Case("collect", "a flag that does not exist", lambda env: ["--max-new-token", "12", "--frobnicate"],
         "unrecognized arguments: --frobnicate"),
    Case("train", "--lr -1e-3 (a negative number in exponent form)",
         lambda env: ["--data", env.base.data, "--lr", "-1e-3", "--output", str(env.tmp / "run")],
         "--lr must be a number > 0, got -0.001"),
    Case("evaluate", "a flag given without its value", lambda env: ["--drafts", "default", "--limit"],
         "argument --limit: expected one argument"),
    Case("report", "no EVAL_DIR", lambda env: [], "the following arguments are required: EVAL_DIR"),
]
