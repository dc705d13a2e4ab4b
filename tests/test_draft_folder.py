"""decode.models.draft_folder: the draft-folder format and the vocabulary map's one inversion."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import GenerationConfig

from decode.errors import UserError
from decode.models import draft_folder
from decode.models.draft_folder import META_FILE, VOCAB_MAP_FILE, VocabMap

D2T = [7, 2, 9, 0]  # draft id j -> target id D2T[j], in a target vocabulary of 10


def test_the_map_and_its_inversion():
    v = VocabMap(D2T, 10)
    assert v.t2d.tolist() == [3, -1, 1, -1, -1, -1, -1, 0, -1, 2]  # -1: the draft has no such token
    ids = torch.tensor([[7, 5], [9, 0]])
    assert v.teacher(ids).tolist() == [[0, -1], [2, 3]]  # teacher ids keep -1 (the loss's tail bin)
    assert v.inputs(ids).tolist() == [[0, 0], [2, 3]]  # context outside the vocabulary is read as draft id 0
    assert v.to_draft([7, 5, 9]) == [0, 0, 2]  # the decode loop's list form agrees with the tensor form
    assert [v.to_target(j) for j in range(4)] == D2T
    assert v.targets(torch.tensor([[3, 0], [2, 1]])).tolist() == [[0, 7], [9, 2]]
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    assert v.expand(q).tolist() == pytest.approx([0.4, 0, 0.2, 0, 0, 0, 0, 0.1, 0, 0.3])


def test_no_map_is_the_identity():
    v = VocabMap(None, 10)
    ids = torch.tensor([1, 9])
    assert not v.reduced and v.inputs(ids) is ids and v.teacher(ids) is ids
    assert v.to_draft([3, 4]) == [3, 4] and v.to_target(5) == 5
    q = torch.rand(10)
    assert v.expand(q) is q


def test_save_then_read(tmp_path, tiny_llama, tiny_tokenizer):
    model, tok = tiny_llama(), tiny_tokenizer()
    folder = draft_folder.save(tmp_path / "hf", model, tok, {"target": "t", "step": 3}, vocab_map=None)
    assert (folder / "config.json").is_file() and draft_folder.weight_files(folder) == [folder / "model.safetensors"]
    assert draft_folder.read_meta(folder) == {"target": "t", "step": 3}
    assert draft_folder.read_vocab_map(folder) is None and draft_folder.require(folder)["step"] == 3
    (folder / VOCAB_MAP_FILE).write_text(json.dumps({"draft_to_target": D2T}))
    assert draft_folder.read_vocab_map(folder) == D2T
    with pytest.raises(UserError, match="4 entries but the draft has vocab_size 5"):
        draft_folder.read_vocab_map(folder, vocab_size=5)


def test_reading_bad_folders(tmp_path):
    assert draft_folder.read_meta(tmp_path) == {}  # a plain HF folder has no metadata
    (tmp_path / META_FILE).write_text("{not json")
    with pytest.raises(UserError, match="is not valid JSON"):
        draft_folder.read_meta(tmp_path)
    (tmp_path / VOCAB_MAP_FILE).write_text(json.dumps({"wrong": []}))
    with pytest.raises(UserError, match="draft_to_target"):
        draft_folder.read_vocab_map(tmp_path)
    with pytest.raises(UserError, match="is not a draft checkpoint: it has no config.json, model.safetensors"):
        draft_folder.require(tmp_path)
    with pytest.raises(UserError, match="is not a folder"):
        draft_folder.require(tmp_path / "missing")


def test_assistant_config_is_a_copy_set_for_transformers():
    gc = GenerationConfig(num_assistant_tokens=20)
    out = draft_folder.assistant_config(gc, 3)
    assert (out.num_assistant_tokens, out.num_assistant_tokens_schedule, out.assistant_confidence_threshold) == (
        3, "constant", 0.0)
    assert gc.num_assistant_tokens == 20  # the draft's own config is untouched
    assert draft_folder.assistant_config(gc, 2, "heuristic").num_assistant_tokens_schedule == "heuristic_transient"
