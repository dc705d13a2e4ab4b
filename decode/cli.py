"""The one config mechanism every job uses, built on transformers' HfArgumentParser.

Defaults live once, in each job's dataclass (`field(metadata={"help": ...})`, checks in `__post_init__`); a YAML
file overrides them; `--key value` on the command line overrides the YAML. The resolved config is saved with
every output.

    cfg = parse(CollectConfig, argv, doc=__doc__)   # --config FILE.yaml --max-new-tokens 64 ...

HfArgumentParser turns the plain fields (str, int, float, bool, Optional of those) into flags: `--max-new-tokens`
and `--max_new_tokens`, `--chat-template` / `--no-chat-template`. Fields it cannot type (lists, dicts, unions such
as `int | list`) take YAML text: `--layers "[0, 29]"`, `--loss "{fkl: 1.0}"`, or several values: `--gamma 2 4`.
A class attribute PRESETS = {"quick": {...}} defines named override sets for `--preset NAME`, applied before the
YAML. A class attribute SECTIONS = ("train", ...) names mapping-valued fields that hold another job's overrides
(the pipeline's stage settings). They merge key by key instead of being replaced, and in them a preset's keys
win over the YAML's (a preset asked for on the command line shrinks a YAML-defined run):
    section = {**YAML's, **preset's, **--flag's}
A field with metadata {"positional": True} is a positional argument (publish's DRAFT_DIR; a list field takes several).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import tempfile
import types
import typing
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from decode.errors import UserError
from decode.prompts import decode_utf8


def _is_plain(tp) -> bool:
    """Types HfArgumentParser parses itself: str, int, float, bool, and Optional of one of them."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return len(args) == 1 and args[0] in (str, int, float, bool)
    return tp in (str, int, float, bool)


def _base(tp):
    """list for list fields, dict for dict fields (also inside Optional), else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        kinds = [typing.get_origin(a) or a for a in typing.get_args(tp) if a is not type(None)]
    else:
        kinds = [typing.get_origin(tp) or tp]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (list, dict) else None


class JobParser(HfArgumentParser):
    """HfArgumentParser over one job's config dataclass, plus --config, --preset and YAML-valued fields.
    Every flag's default is suppressed: the namespace holds only what the command line gave."""

    def __init__(self, cls, doc: str | None = None):
        self.hints = typing.get_type_hints(cls)
        super().__init__(cls, prog=_prog(cls), description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
        self.add_argument("--config", help="YAML file overriding the defaults (command-line flags override it)")
        # `--lr -1e-3`: argparse takes "-1e-3" for a flag (its pattern knows -1 and -.5, not exponents)
        self._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d*\.?\d+[eE][-+]?\d+$")
        defaults = {f.name: _shown_default(f) for f in dataclasses.fields(cls)}
        for action in self._actions:
            if not action.option_strings or action.dest not in defaults:
                continue  # -h, --config, a positional argument (it has no default to show)
            # --max-new-tokens before --max_new_tokens: usage lines show the first spelling, the README the hyphens
            action.option_strings.sort(key=lambda o: "_" in o)
            if not getattr(action, "_yaml", False) and action.dest != "preset":
                action.help = f"{action.help or ''}{defaults[action.dest]}"
                if action.type in (int, float):
                    action.type = _strict(action.type, action.option_strings[0])
            action.default = argparse.SUPPRESS

    def error(self, message: str):
        """argparse's own mistakes (an unknown flag, a bad choice, a missing value) as one line, not a usage block."""
        raise UserError(f"{message} (--help lists the options)")

    def _add_dataclass_arguments(self, dtype):
        presets = getattr(dtype, "PRESETS", {})
        if presets:
            self.add_argument("--preset", choices=sorted(presets), help="a named set of overrides applied before the YAML")
        for f in dataclasses.fields(dtype):
            if f.name == "preset" and presets:
                continue  # set by the --preset flag above
            f.type = self.hints[f.name]
            help_text = f.metadata.get("help", "")
            if f.metadata.get("positional"):  # one value, or one or more for a list field
                self.add_argument(f.name, help=help_text, metavar=f.name.upper(), nargs="+" if _base(f.type) is list else None)
            elif _is_plain(f.type):
                self._parse_dataclass_field(self, f)
            else:
                flags = dict.fromkeys([f"--{f.name.replace('_', '-')}", f"--{f.name}"])  # both spellings, once
                action = self.add_argument(*flags, dest=f.name,
                                           nargs=None if _base(f.type) is dict else "+", metavar="YAML",
                                           help=f"{help_text}{_shown_default(f)}")
                action._yaml = True


def _shown_default(f: dataclasses.Field) -> str:
    """' [default: X]' for a field's help; nothing for an empty string (a required value such as --repo-id)."""
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()  # [] or {"fkl": 1.0}, not "(computed)"
    else:
        return ""
    return "" if value == "" else f" [default: {value}]"


def _prog(cls) -> str | None:
    """`python -m distill.collect` for the usage line when the job runs as a module (argparse would say
    `__main__.py`); None (the script's name) otherwise, e.g. under accelerate launch or when called in-process."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = spec.name.removesuffix(".__main__") if spec is not None else ""
    return f"python -m {name}" if name and cls.__module__.startswith((name, "__main__")) else None


def _strict(convert, flag: str):
    """A flag's type conversion whose failure is a UserError naming the flag (argparse would exit)."""
    def parse_value(text: str):
        try:
            return convert(text)
        except ValueError as e:
            raise UserError(f"{flag}: cannot parse {text!r} ({e})") from None
    return parse_value


def _yaml_value(name: str, tp, given):
    """A YAML-valued flag's text (or texts, with several values) -> the field's value."""
    texts = given if isinstance(given, list) else [given]
    if _base(tp) is list and not (len(texts) == 1 and texts[0].lstrip().startswith("[")):
        return texts  # list items stay text: --stop "###" is the string, not a YAML comment
    try:
        values = [yaml.safe_load(t) for t in texts]
    except yaml.YAMLError as e:
        raise UserError(f"--{name.replace('_', '-')}: cannot parse {' '.join(texts)!r} ({e})") from None
    return values[0] if len(values) == 1 else values


def _shape(tp, value, name: str):
    """A single value given for a list field becomes a one-item list; a dict field must get a mapping."""
    base = _base(tp)
    if base is list and value is not None and not isinstance(value, list):
        return [value]
    if base is dict and not isinstance(value, dict):
        raise UserError(f"--{name.replace('_', '-')} expects a mapping such as '{{key: value}}', got {value!r}")
    return value


def parse(cls, argv=None, doc: str | None = None):
    """Build a `cls` config from --preset, --config YAML and --key value overrides (see module docstring)."""
    parser = JobParser(cls, doc)
    args = vars(parser.parse_args(argv))
    hints, fields = parser.hints, {f.name for f in dataclasses.fields(cls)}
    sections, presets = getattr(cls, "SECTIONS", ()), getattr(cls, "PRESETS", {})
    preset = presets[args["preset"]] if args.get("preset") else {}
    values: dict = {k: v for k, v in preset.items() if k not in sections}
    if args.get("config"):
        values.update(check_values(cls, load_yaml(args["config"], fields), args["config"]))
    for name in sections:  # preset over YAML, key by key
        if name in preset:
            values[name] = {**(values.get(name) or {}), **preset[name]}
    for name in fields & set(args) - {"preset"}:
        value = _yaml_value(name, hints[name], args[name]) if not _is_plain(hints[name]) else args[name]
        if name in sections and isinstance(value, dict):  # a section flag changes only the keys it names
            value = {**(values.get(name) or {}), **value}
        values[name] = value
    # the YAML's values are checked above (naming the file); what is left to name is a flag
    values = check_values(cls, {k: _shape(hints[k], v, k) for k, v in values.items()}, "")
    if "preset" in fields and args.get("preset"):
        values["preset"] = args["preset"]
    try:
        return cls(**values)
    except TypeError as e:
        raise UserError(f"bad config: {e}") from None


_PLAIN_NAMES = {str: "a string", int: "an int", float: "a float", bool: "true or false", list: "a list",
                dict: "a mapping"}
# PyYAML reads YAML 1.1, where `lr: 1e-3` (no dot) is the string '1e-3': a float field takes such text.
_FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _accepts(kind, value):
    """(True, value converted) when `value` fits the plain or list/dict `kind`, else (False, None).
    bool is not an int here (True as a batch size is a mistake); an int fits a float field and becomes a float."""
    kind = typing.get_origin(kind) or kind
    if kind is bool or kind is str or kind in (list, dict):
        return isinstance(value, kind), value
    if isinstance(value, bool):
        return False, None
    if kind is int:
        return isinstance(value, int), value
    if kind is float:
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            return True, float(value)
        return isinstance(value, int | float), float(value) if isinstance(value, int | float) else None
    return True, value  # a type this check does not know (a nested dataclass, Any): the job's own checks apply


def _check_one(tp, value, default):
    """(ok, converted value) for one field. `int | list` means an int or a list of ints (γ to sweep, layers)."""
    options = [a for a in typing.get_args(tp) if a is not type(None)] if _base_union(tp) else [tp]
    if value is None:
        return _base_union(tp) and type(None) in typing.get_args(tp) or default is None, None
    if _base(tp) is list and not isinstance(value, list):
        value = [value]  # one value for a list field is a one-item list, as on the command line
    for kind in options:
        ok, converted = _accepts(kind, value)
        if ok and (typing.get_origin(kind) or kind) is list and not typing.get_args(kind):
            items = [o for o in options if o not in (list, dict)]  # `int | list`: a list of that int
            fits = [_accepts(items[0], v) for v in value] if len(items) == 1 else []
            if fits and not all(f for f, _ in fits):
                continue
            converted = [c for _, c in fits] if fits else value
        if ok:
            return True, converted
    return False, None


def _base_union(tp) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _kind_name(tp) -> str:
    """'an int', 'an int or a list of ints', 'a string (or null)': what a field takes, in words."""
    options = [a for a in typing.get_args(tp) if a is not type(None)] if _base_union(tp) else [tp]
    names = [_PLAIN_NAMES.get(typing.get_origin(o) or o, getattr(o, "__name__", str(o))) for o in options]
    plain = [o for o in options if o not in (list, dict)]
    if list in options and len(plain) == 1:
        names = [n if n != "a list" else f"a list of {_PLAIN_NAMES[plain[0]].split(' ', 1)[1]}s" for n in names]
    return " or ".join(names)


def check_values(cls, values: dict, where: str) -> dict:
    """Each value checked against its `cls` field's annotation -> the values, ints in float fields made floats.
    A mismatch is a UserError naming `where` (a YAML file, 'pipeline train section'; '' for the merged
    command line + YAML, where the field is named as its flag) and the field. Keys `cls` lacks pass through
    (the caller reports unknown keys with its own list of valid ones)."""
    hints = typing.get_type_hints(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out = dict(values)
    for name, value in values.items():
        if name not in hints:
            continue
        ok, out[name] = _check_one(hints[name], value, defaults.get(name))
        if not ok:
            field_name = f"{where}: {name}" if where else f"--{name.replace('_', '-')}"
            raise UserError(f"{field_name} must be {_kind_name(hints[name])}, got {value!r} "
                            f"({type(value).__name__})")
    return out


def run_job(cls, job, argv=None, doc: str | None = None):
    """A job's main(): parse argv (sys.argv[1:] by default) into a `cls` config, then job(cfg, argv). Any UserError,
    from parsing or from the job, ends the process with its one line on stderr (exit 1), not a traceback.
    Returns (cfg, what job returned)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        cfg = parse(cls, argv, doc)
        if isinstance(getattr(cfg, "output", None), str) and cfg.output:
            check_output(cfg.output)
        return cfg, job(cfg, argv)
    except UserError as e:
        sys.exit(f"error: {e}")


def check_output(path: str | Path, flag: str = "--output") -> None:
    """Fail in the first second, not after hours of work, when `path` cannot become a writable folder: it is a
    file, or the nearest folder that exists refuses a file (read-only, no permission; probed, as root passes
    os.access everywhere)."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{flag} {p} is a file, not a folder; pass a folder path (it is created if missing)")
    base = next(q for q in (p, *p.parents) if q.exists())
    if not base.is_dir():
        raise UserError(f"{flag} {p}: {base} is a file, so no folder can be made under it; pass another path")
    try:
        fd, probe = tempfile.mkstemp(dir=base, prefix=".specdistill-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"{flag} {p}: cannot write in {base} ({e.strerror}); pass a folder you can write to") from None


def load_yaml(path: str | Path, fields: set[str]) -> dict:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(decode_utf8(path.read_bytes(), str(path))) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{path}: malformed YAML ({e})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of option: value, got {type(data).__name__}")
    data = {k.replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise UserError(f"{path}: unknown option(s) {unknown}; valid options: {sorted(fields)}")
    return data


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def save(cfg, path: str | Path) -> None:
    """Write the resolved config next to an output (JSON, so any tool reads it)."""
    Path(path).write_text(json.dumps(to_dict(cfg), indent=2, default=str) + "\n")
