"""The model card's usage section: transformers, vLLM and, for a reduced vocabulary, the bundled decoder; for a
feature head (speculators eagle3), vLLM's eagle3 and the bundled decoder (transformers cannot run a head).

Every python block here runs as printed (tests/test_model_card_snippets.py executes each one against a published
dry-run folder): the chat prompt as token ids, not the dict apply_chat_template returns by default in
transformers 5, and generation that ends at the target's EOS ids.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from decode.models.draft_folder import VOCAB_MAP_FILE
from distill.publish import card_parallel
from distill.publish.servable import REDUCED_DIR


def install_line() -> str:
    """pip's line for the `decode` package: the specdistill distribution, from the git remote this copy of the
    code came from (user and password stripped from the URL), else from a local checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        url = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        url = ""
    if url.startswith("git@") and ":" in url:  # git@github.com:org/specdistill.git
        host, path = url[len("git@"):].split(":", 1)
        url = f"https://{host}/{path}"
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        clean = urlunsplit((parts.scheme, parts.hostname, parts.path, "", ""))
        return f'pip install "specdistill @ git+{clean}"'
    return "pip install -e path/to/specdistill  # a checkout of specdistill, the project that built this draft"


def section(repo_id: str, target_id: str, gamma: int, reduced: bool, parallel: bool = False) -> str:
    """parallel: a parallel draft, served by vLLM with parallel_drafting (distill/publish/card_parallel.py)."""
    plain = _plain(repo_id, target_id, gamma, parallel)
    if not reduced:
        return plain
    return plain + f"""

### Reduced vocabulary (`{REDUCED_DIR}/`)

This draft was trained with a **reduced vocabulary**, a subset of the target's ids listed in
`{REDUCED_DIR}/{VOCAB_MAP_FILE}` (`draft_to_target[j]` is the target id of draft id j). The repo's top level holds the
same draft expanded to the target's full vocabulary, so that transformers and vLLM (which assume draft and target
ids coincide) load it as is: every id outside the subset reads as draft id 0 on input, and its output row is the
mean of the kept rows, so greedy decoding never proposes it. Both forms propose the same greedy tokens (checked
before upload); when sampling, the expanded form gives ids outside the subset a little probability (a few percent),
so its sampled acceptance is slightly lower.
specdistill's bundled decoder (the `decode` package of the specdistill distribution, which built this draft) runs
the smaller, faster form in `{REDUCED_DIR}/`. Install it with:

```bash
{install_line()}
```

```python
from huggingface_hub import snapshot_download
from decode.options import DecodeOptions
from decode.drafting.speculative import generate
from decode.models.targets import eos_ids, load_draft, load_target

target, tok = load_target("{target_id}", device="auto")  # the GPU(s) when there are, else the CPU
draft = load_draft(snapshot_download("{repo_id}") + "/{REDUCED_DIR}", target, tok, device=str(target.device))
ids = tok.apply_chat_template([{{"role": "user", "content": "Hello!"}}], add_generation_prompt=True,
                              return_dict=False)  # token ids (the default is a dict in transformers 5)
out, stats = generate(target, draft.model, ids, 128, DecodeOptions(gamma={gamma}), vocab_map=draft.vocab_map,
                      eos_token_ids=eos_ids(target, tok))  # stop at the end of the assistant's turn
print(tok.decode(out, skip_special_tokens=True), stats.tau)
```"""


def _plain(repo_id: str, target_id: str, gamma: int, parallel: bool = False) -> str:
    extra = card_parallel.vllm_keys() if parallel else ""
    return f"""## Usage

transformers (this repo's `generation_config.json` sets `num_assistant_tokens={gamma}` with a constant schedule;
transformers reads these from the assistant's generation config):

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("{target_id}")
target = AutoModelForCausalLM.from_pretrained("{target_id}", dtype="auto")
draft = AutoModelForCausalLM.from_pretrained("{repo_id}", dtype="auto")
inputs = tok.apply_chat_template([{{"role": "user", "content": "Hello!"}}], add_generation_prompt=True,
                                 return_tensors="pt", return_dict=True)
out = target.generate(**inputs, assistant_model=draft, max_new_tokens=128, do_sample=False,
                      eos_token_id=target.generation_config.eos_token_id)  # stop at the end of the turn
print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))
```

vLLM (applies the target's chat template and stops at its EOS by itself):

```python
from vllm import LLM, SamplingParams

llm = LLM(model="{target_id}", speculative_config={{"method": "draft_model", "model": "{repo_id}",
                                               "num_speculative_tokens": {gamma}{extra}}})
chat = [{{"role": "user", "content": "Hello!"}}]
print(llm.chat(chat, SamplingParams(temperature=0, max_tokens=128))[0].outputs[0].text)
```"""


def head_section(repo_id: str, target_id: str, gamma: int, verifier: bool) -> str:
    """A feature head's usage: vLLM (`method: eagle3`) and the bundled decoder that measured it; why not
    transformers. verifier: config.json names the target by its Hub id (then the repo alone is enough for vLLM)."""
    alone = (f"""

`config.json` names the target (`speculators_config.verifier.name_or_path`) and γ (`speculative_tokens`), so
`LLM(model="{repo_id}")` alone also serves it: vLLM then fetches the target itself.""" if verifier else "")
    return f"""## Usage

This is a feature head, not a standalone draft model: it reads the target's hidden states at the layers its
`config.json` names (`eagle_aux_hidden_state_layer_ids`) and proposes tokens from them, so it only runs inside a
decoder that runs the target too. transformers' `assistant_model=` cannot use it (`AutoModelForCausalLM` does not
load this folder).

vLLM (`method: eagle3`; applies the target's chat template and stops at its EOS by itself):

```python
from vllm import LLM, SamplingParams

llm = LLM(model="{target_id}", speculative_config={{"method": "eagle3", "model": "{repo_id}",
                                               "num_speculative_tokens": {gamma}}})
chat = [{{"role": "user", "content": "Hello!"}}]
print(llm.chat(chat, SamplingParams(temperature=0, max_tokens=128))[0].outputs[0].text)
```{alone}

specdistill's bundled decoder (the `decode` package of the specdistill distribution, which built and measured this
head). Install it with:

```bash
{install_line()}
```

```python
from huggingface_hub import snapshot_download
from decode.options import DecodeOptions
from decode.drafting.speculative import generate
from decode.models.targets import eos_ids, load_draft, load_target

target, tok = load_target("{target_id}", device="auto")  # the GPU(s) when there are, else the CPU
head = load_draft(snapshot_download("{repo_id}"), target, tok, device=str(target.device))
ids = tok.apply_chat_template([{{"role": "user", "content": "Hello!"}}], add_generation_prompt=True,
                              return_dict=False)  # token ids (the default is a dict in transformers 5)
out, stats = generate(target, head.model, ids, 128, DecodeOptions(gamma={gamma}),
                      eos_token_ids=eos_ids(target, tok))  # stop at the end of the assistant's turn
print(tok.decode(out, skip_special_tokens=True), stats.tau)
```"""
