"""Config loading shared by every job: defaults live once, in each job's dataclass; a YAML file overrides them;
`--key value` on the command line overrides the YAML. The resolved config is saved with every output.

    cfg = parse(CollectConfig, argv, doc=__doc__)   # --config FILE.yaml --max-new-tokens 64 ...

Field help comes from `field(metadata={"help": ...})`; checks live in each dataclass's __post_init__.
A class attribute PRESETS = {"quick": {...}} defines named override sets for `--preset NAME`.
A class attribute SECTIONS = ("train", ...) names mapping-valued fields that hold another job's overrides
(the pipeline's stage settings). They merge key by key instead of being replaced, and in them a preset's keys
win over the YAML's (a preset asked for on the command line shrinks a YAML-defined run):
    section = {**YAML's, **preset's, **--flag's}
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path

import yaml

from decode.errors import UserError


def _kind(tp) -> str:
    """Map a field's annotation to how its command-line text is parsed."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _kind(args[0]) if len(args) == 1 else "yaml"
    if tp is bool:
        return "bool"
    if tp in (int, float, str):
        return tp.__name__
    return "yaml"  # lists, dicts: parsed as YAML, e.g. --layers "[0, 29]" or --loss "{fkl: 1.0}"


def _shape(tp, value, name: str):
    """A single value given for a list field becomes a one-item list; a dict field must get a mapping."""
    base = typing.get_origin(tp) or tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        kinds = [typing.get_origin(a) or a for a in typing.get_args(tp) if a is not type(None)]
        if len(kinds) != 1:
            return value
        base = kinds[0]
    if base is list and value is not None and not isinstance(value, list):
        return [value]
    if base is dict and not isinstance(value, dict):
        raise UserError(f"--{name.replace('_', '-')} expects a mapping such as '{{key: value}}', got {value!r}")
    return value


def _convert(kind: str, text):
    if not isinstance(text, str):
        return text
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "str":
        return text
    return yaml.safe_load(text)


def parse(cls, argv=None, doc: str | None = None):
    """Build a `cls` config from --config YAML and --key value overrides (see module docstring)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file overriding the defaults (command-line flags override it)")
    presets = getattr(cls, "PRESETS", {})
    if presets:
        p.add_argument("--preset", choices=sorted(presets), help="a named set of overrides applied before the YAML")
    for name, f in fields.items():
        if name == "preset" and presets:
            continue  # a `preset` field is set by the --preset flag above
        kind = _kind(hints[name])
        default = f.default if f.default is not dataclasses.MISSING else "(computed)"
        help_text = f"{f.metadata.get('help', '')} [default: {default}]"
        flag = "--" + name.replace("_", "-")
        if kind == "bool":
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
        else:
            p.add_argument(flag, default=argparse.SUPPRESS, help=help_text, metavar=kind.upper())
    args = vars(p.parse_args(argv))
    sections = getattr(cls, "SECTIONS", ())
    preset = presets[args["preset"]] if args.get("preset") else {}
    values: dict = {k: v for k, v in preset.items() if k not in sections}
    config_file = args.pop("config", None)
    if config_file:
        values.update(load_yaml(config_file, fields))
    for name in sections:  # preset over YAML, key by key
        if name in preset:
            values[name] = {**(values.get(name) or {}), **preset[name]}
    for name in fields:
        if name in args:
            try:
                text = args[name]
                is_list = (typing.get_origin(hints[name]) or hints[name]) is list
                value = text if is_list and not text.lstrip().startswith("[") else _convert(_kind(hints[name]), text)
                if name in sections and isinstance(value, dict):  # a section flag changes only the keys it names
                    value = {**(values.get(name) or {}), **value}
                values[name] = value
            except (ValueError, yaml.YAMLError) as e:
                raise UserError(f"--{name.replace('_', '-')}: cannot parse {args[name]!r} ({e})") from None
    values = {k: _shape(hints[k], v, k) for k, v in values.items()}
    if "preset" in fields and args.get("preset"):
        values["preset"] = args["preset"]
    try:
        return cls(**values)
    except TypeError as e:
        raise UserError(f"bad config: {e}") from None


def load_yaml(path: str | Path, fields: dict) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: malformed YAML ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of option: value, got {type(data).__name__}")
    data = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise UserError(f"{path}: unknown option(s) {unknown}; valid options: {sorted(fields)}")
    return data


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def save(cfg, path: str | Path) -> None:
    """Write the resolved config next to an output (JSON, so any tool reads it)."""
    Path(path).write_text(json.dumps(to_dict(cfg), indent=2, default=str) + "\n")
