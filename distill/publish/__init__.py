"""publish: ship a draft to the Hugging Face Hub with its measured numbers, checked to load where users serve it.

    job.py        publish(), main(): `python -m distill.publish DRAFT_DIR --repo-id ORG/NAME`
    compat.py     the checks run on the assembled folder before anything is uploaded
    modelcard.py  the model card: measured numbers, design, training
    usage.py      the card's usage snippets (each runs as printed: tests/test_model_card_snippets.py)
    redact.py     no local absolute path in the card or the uploaded specdistill.json
    hub.py        the token, offline mode, the one-commit upload, the W&B record
    servable.py   a reduced-vocabulary draft expanded to the target's vocabulary (transformers, vLLM load it)
    vllm_check.py the vllm check: vLLM serves the target with the draft (vllm_run.py, in vLLM's python)
"""

from distill.publish.job import main, publish

__all__ = ["main", "publish"]
