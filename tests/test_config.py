"""decode.cli (the config mechanism every job uses): dataclass defaults < preset < YAML < --key value, and every bad input is a UserError."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from decode import cli
from decode.errors import UserError
from distill.collect import CollectConfig

REPO = Path(__file__).resolve().parents[1]


def parse(argv, cls=CollectConfig):
    return cli.parse(cls, argv)


def yaml_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return str(path)


@dataclass
class Job:
    """A job config with presets (like distill.pipeline's)."""

    name: str = field(default="job", metadata={"help": "a name"})
    steps: int = field(default=100, metadata={"help": "steps"})
    lr: float = field(default=1e-3, metadata={"help": "learning rate"})
    preset: str | None = field(default=None, metadata={"help": "named overrides"})

    PRESETS = {"quick": {"steps": 5, "name": "quick-job"}}


@dataclass
class NoPresets:
    steps: int = 1


# --- precedence ---------------------------------------------------------------------------------------------------


def test_no_arguments_gives_the_dataclass_defaults():
    assert parse([]) == CollectConfig()


def test_yaml_overrides_defaults_and_flags_override_yaml(tmp_path):
    y = yaml_file(tmp_path, "max_new_tokens: 7\ntopk: 3\ntemperature: 0.5\n")
    cfg = parse(["--config", y])
    assert (cfg.max_new_tokens, cfg.topk, cfg.temperature) == (7, 3, 0.5)
    assert cfg.batch_size == CollectConfig().batch_size  # untouched keys keep their defaults
    cfg = parse(["--config", y, "--max-new-tokens", "9", "--temperature", "0"])
    assert (cfg.max_new_tokens, cfg.topk, cfg.temperature) == (9, 3, 0.0)
    assert isinstance(cfg.max_new_tokens, int) and isinstance(cfg.temperature, float)
    assert parse(["--max-new-tokens", "9", "--config", y]).max_new_tokens == 9  # flag order does not matter


def test_yaml_keys_may_be_spelled_with_hyphens(tmp_path):
    assert parse(["--config", yaml_file(tmp_path, "max-new-tokens: 5\n")]).max_new_tokens == 5


def test_empty_yaml_file_changes_nothing(tmp_path):
    assert parse(["--config", yaml_file(tmp_path, "# nothing here\n")]) == CollectConfig()


def test_shipped_collect_config_parses():
    cfg = parse(["--config", str(REPO / "configs/collect/default.yaml")])
    assert cfg.target == "default" and cfg.topk == 32


@pytest.mark.parametrize("path", sorted((REPO / "configs/train").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_train_configs_parse_and_validate(path):
    from distill.train import TrainConfig

    cfg = cli.parse(TrainConfig, ["--config", str(path)])  # validation runs in __post_init__
    assert cfg.layers == 2 and cfg.loss and cfg.max_steps >= 1


# --- flag kinds ---------------------------------------------------------------------------------------------------


def test_bool_flags(tmp_path):
    assert parse([]).chat_template is True
    assert parse(["--no-chat-template"]).chat_template is False
    y = yaml_file(tmp_path, "chat_template: false\n")
    assert parse(["--config", y]).chat_template is False
    assert parse(["--config", y, "--chat-template"]).chat_template is True


def test_dict_and_list_flags_are_parsed_as_yaml():
    cfg = parse(
        [
            "--columns",
            "{prompt: question, category: kind}",
            "--categories",
            "[chat, code]",
            "--stop",
            '["\\n\\n", "###"]',
        ]
    )
    assert cfg.columns == {"prompt": "question", "category": "kind"}
    assert cfg.categories == ["chat", "code"]
    assert cfg.stop == ["\n\n", "###"]


def test_optional_string_flag():
    assert parse([]).generator is None
    assert parse(["--generator", "runs/draft/hf"]).generator == "runs/draft/hf"


def test_a_single_value_for_a_list_field_is_a_one_item_list(tmp_path):
    assert parse(["--categories", "chat"]).categories == ["chat"]
    assert parse(["--stop", "###"]).stop == ["###"]
    assert parse(["--config", yaml_file(tmp_path, "stop: '</s>'\n")]).stop == ["</s>"]


def test_a_non_mapping_for_a_dict_field_is_a_user_error():
    with pytest.raises(UserError, match="columns"):
        parse(["--columns", "question"])


# --- bad input ----------------------------------------------------------------------------------------------------


def test_unknown_yaml_key_lists_the_valid_ones(tmp_path):
    with pytest.raises(
        UserError, match=r"unknown option\(s\) \['max_tokens'\]; valid options: .*'max_new_tokens'"
    ):
        parse(["--config", yaml_file(tmp_path, "max_tokens: 5\n")])


def test_malformed_yaml(tmp_path):
    with pytest.raises(UserError, match="malformed YAML"):
        parse(["--config", yaml_file(tmp_path, "topk: [1, 2\n")])


def test_a_yaml_file_that_is_not_utf8_names_the_file_and_the_fix(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_bytes("target: café\n".encode("latin-1"))
    with pytest.raises(UserError, match=re.escape(f"{path}: not UTF-8 text (byte 0xe9 at offset 11); save")):
        parse(["--config", str(path)])


def test_yaml_that_is_not_a_mapping(tmp_path):
    with pytest.raises(UserError, match="expected a mapping"):
        parse(["--config", yaml_file(tmp_path, "- topk\n- 3\n")])


def test_missing_config_file(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        parse(["--config", str(tmp_path / "nope.yaml")])


def test_unparsable_number_is_a_user_error():
    with pytest.raises(UserError, match=r"--max-new-tokens: cannot parse 'many'"):
        parse(["--max-new-tokens", "many"])
    with pytest.raises(UserError, match=r"--columns: cannot parse"):
        parse(["--columns", "{prompt: [unclosed"])


def test_unknown_flag_is_one_error_line():
    with pytest.raises(UserError, match=r"^unrecognized arguments: --max-tokens 5 \(--help lists the options\)$"):
        parse(["--max-tokens", "5"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mode", "train"], "--mode must be 'generate' or 'score'"),
        (["--batch-size", "-1"], "--batch-size must be >= 0"),
        (["--max-new-tokens", "0"], "--max-new-tokens must be >= 1"),
        (["--topk", "-1"], "--topk must be >= 0"),
        (["--mode", "score", "--generator", "d"], "cannot be combined with --mode score"),
        (["--mode", "score", "--topk", "0"], "give --topk > 0"),
    ],
)
def test_checks_in_post_init_are_user_errors(argv, message):
    with pytest.raises(UserError, match=message):
        parse(argv)


def test_help_shows_field_help_and_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        parse(["--help"])
    text = capsys.readouterr().out
    assert e.value.code == 0
    assert "--max-new-tokens" in text and "tokens generated per prompt [default: 128]" in text
    assert "--no-chat-template" in text and "--preset" not in text  # CollectConfig has no presets


@dataclass
class WithPositional:
    folder: str = field(default="", metadata={"help": "a folder", "positional": True})
    max_rows: int = field(default=3, metadata={"help": "rows"})
    loss: dict = field(default_factory=lambda: {"fkl": 1.0}, metadata={"help": "weights"})
    repo_id: str = field(default="", metadata={"help": "ORG/NAME (required)"})


def test_help_usage_spells_flags_with_hyphens_and_names_the_module(capsys, monkeypatch):
    """Before: `usage: __main__.py ... [--max_new_tokens MAX_NEW_TOKENS]`, `[default: ]` on a positional and a
    required string, `[default: (computed)]` for a field with a default factory."""
    import sys
    import types

    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=types.SimpleNamespace(name=__name__)))
    with pytest.raises(SystemExit):
        parse(["--help"], WithPositional)
    text = capsys.readouterr().out
    assert text.startswith(f"usage: python -m {__name__} ") and "[--max-rows MAX_ROWS]" in text
    assert "--max-rows MAX_ROWS, --max_rows MAX_ROWS" in text and "a folder\n" in text and "[default: ]" not in text
    assert "weights [default: {'fkl': 1.0}]" in text and "ORG/NAME (required)\n" in text
    with pytest.raises(UserError, match="^--max-rows: cannot parse 'x'"):
        parse(["x", "--max_rows", "x"], WithPositional)


# --- presets ------------------------------------------------------------------------------------------------------


def test_preset_applies_before_yaml_and_flags(tmp_path):
    assert parse([], Job) == Job()
    cfg = parse(["--preset", "quick"], Job)
    assert (cfg.steps, cfg.name, cfg.preset) == (5, "quick-job", "quick")
    y = yaml_file(tmp_path, "steps: 7\n")
    cfg = parse(["--preset", "quick", "--config", y], Job)
    assert (cfg.steps, cfg.name) == (7, "quick-job")  # the YAML wins over the preset
    assert (
        parse(["--preset", "quick", "--config", y, "--steps", "9"], Job).steps == 9
    )  # and the flag over both


def test_unknown_preset_and_preset_without_presets_are_refused():
    """argparse's own refusals are one UserError line (its default is a usage block and exit 2)."""
    with pytest.raises(UserError, match=r"argument --preset: invalid choice: 'slow' .*\(--help lists the options\)$"):
        parse(["--preset", "slow"], Job)
    with pytest.raises(UserError, match="unrecognized arguments: --preset quick"):
        parse(["--preset", "quick"], NoPresets)


def test_a_negative_number_in_exponent_form_is_a_value_not_a_flag():
    assert parse(["--lr", "-1e-3"], Job).lr == -1e-3


# --- value types (cli.check_values) ---------------------------------------------------------------------------


@dataclass
class Typed:
    steps: int = 1
    lr: float = 1e-3
    name: str = "x"
    flag: bool = False
    gamma: int | list = 4
    data: str | list = "d"
    vocab: int | str = "full"
    layers: list = field(default_factory=list)
    loss: dict = field(default_factory=dict)
    limit: int | None = None


@pytest.mark.parametrize("values, message", [
    ({"steps": "4"}, "where: steps must be an int, got '4' (str)"),
    ({"steps": 2.5}, "where: steps must be an int, got 2.5 (float)"),
    ({"steps": True}, "where: steps must be an int, got True (bool)"),
    ({"steps": None}, "where: steps must be an int, got None (NoneType)"),
    ({"lr": "fast"}, "where: lr must be a float, got 'fast' (str)"),
    ({"lr": False}, "where: lr must be a float"),
    ({"name": 3}, "where: name must be a string, got 3 (int)"),
    ({"flag": "yes please"}, "where: flag must be true or false"),
    ({"gamma": "four"}, "where: gamma must be an int or a list of ints, got 'four' (str)"),
    ({"gamma": [2, "four"]}, "where: gamma must be an int or a list of ints"),
    ({"data": [1]}, "where: data must be a string or a list of strings"),
    ({"vocab": 2.5}, "where: vocab must be an int or a string"),
    ({"loss": [1]}, "where: loss must be a mapping"),
    ({"limit": "all"}, "where: limit must be an int, got 'all' (str)"),
])
def test_check_values_names_the_field_and_what_it_takes(values, message):
    with pytest.raises(UserError, match=re.escape(message)):
        cli.check_values(Typed, values, "where")


def test_check_values_converts_ints_in_float_fields_and_keeps_the_rest():
    given = {"steps": 3, "lr": 1, "gamma": [2, 4], "data": ["a", "b"], "vocab": 100, "layers": [0, "x"],
             "loss": {"fkl": 1}, "limit": None, "unknown": "left for the caller"}
    got = cli.check_values(Typed, given, "where")
    assert got == given and isinstance(got["lr"], float)
    assert cli.check_values(Typed, {"lr": "3e-3"}, "w") == {"lr": 0.003}  # YAML 1.1 reads 3e-3 as text
    assert cli.check_values(Typed, {"layers": 3}, "w") == {"layers": [3]}  # as `--layers 3` gives


def test_a_yaml_value_of_the_wrong_type_names_the_file_and_field(tmp_path):
    for text, message in (('max_new_tokens: "12"\n', "max_new_tokens must be an int, got '12' (str)"),
                          ("batch_size: 2.5\n", "batch_size must be an int, got 2.5 (float)")):
        y = yaml_file(tmp_path, text)
        with pytest.raises(UserError, match=re.escape(f"{y}: {message}")):
            parse(["--config", y])
    assert parse(["--config", yaml_file(tmp_path, "temperature: 1\n")]).temperature == 1.0


def test_a_yaml_valued_flag_of_the_wrong_type_names_the_flag():
    from distill.evaluate.job import EvalConfig

    with pytest.raises(UserError, match=re.escape("--gamma must be an int or a list of ints, got 'four' (str)")):
        parse(["--gamma", "four"], EvalConfig)
    assert parse(["--gamma", "2", "4", "--drafts", "d"], EvalConfig).gamma == [2, 4]


# --- saving -------------------------------------------------------------------------------------------------------


def test_save_writes_the_resolved_config_as_json(tmp_path):
    cfg = parse(["--max-new-tokens", "9", "--columns", "{prompt: q}"])
    cli.save(cfg, tmp_path / "c.json")
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved == cli.to_dict(cfg) == dataclasses.asdict(cfg)
    assert CollectConfig(**saved) == cfg  # the saved config rebuilds the same config
