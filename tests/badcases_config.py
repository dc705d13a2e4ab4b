"""Bad inputs every job shares: the config mechanism (decode/cli.py) and the output folder."""

from badinputs import Case


def _yaml(env, text: str, name: str = "bad.yaml") -> str:
    p = env.tmp / name
    p.write_text(text)
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
]
