"""--prompts self:N (distill/collect/self_prompts.py): the target writes its own user prompts (Magpie).

A tiny random llama with the real default tokenizer (and so SmolLM2's chat template) writes the prompts; its
end-of-turn set is every 16th token id, so a random model ends a turn after ~16 tokens like a chat model would.
Tests that need exact texts (duplicates, held-out copies, quotas) script the candidates instead of sampling them.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from decode.errors import UserError
from decode.models.targets import load_target, load_tokenizer
from decode.prompts import read_prompts
from distill.collect import CollectConfig, main, run, self_prompts
from distill.collect.categories import Classifier, quotas
from distill.collect.near_duplicates import MinHashIndex
from distill.collect.self_prompts import FILE, LOG, STATS, Judge, SelfOptions
from distill.collect.shards import load_collected
from distill.prompts import load_prompts

VOCAB = 49152  # the default tokenizer's
EOS_EVERY = 16


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: op overhead dominates, one thread is faster on a shared box
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("default")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory, tiny_llama, tok) -> Path:
    path = tmp_path_factory.mktemp("self-target")
    model = tiny_llama(0, vocab=VOCAB, tie_word_embeddings=True, max_position_embeddings=512)
    model.generation_config.eos_token_id = sorted({tok.eos_token_id, *range(5, VOCAB, EOS_EVERY)})
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(target_dir):
    return load_target(str(target_dir), "float32", "cpu")[0]


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> str:
    """Two categories, 3:1: quotas of 8 prompts are a=6, b=2."""
    rows = [{"id": f"s{i}", "category": c, "messages": [{"role": "user", "content": f"{c} seed prompt number {i}"}]}
            for i, c in enumerate("aaab")]
    path = tmp_path_factory.mktemp("seeds") / "seeds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def words(i: int, n: int = 8) -> str:
    """n pseudo-words drawn from a 5,000-word vocabulary with seed i: two such texts share no word 3-gram."""
    r = random.Random(i)
    return " ".join(f"w{r.randrange(5000)}" for _ in range(n))


def script(monkeypatch, texts_by_batch: list[list[tuple[str, bool]]]) -> list[int]:
    """Candidates come from this script (batch b gets texts_by_batch[b]) instead of the target; returns the list
    of batch indices asked for."""
    asked = []

    def fake(model, tok, prefix, opts, size, seed, batch, eos, pad):
        asked.append(batch)
        got = texts_by_batch[batch][:size] if batch < len(texts_by_batch) else [("", False)] * size
        return got, sum(len(t.split()) for t, _ in got)

    monkeypatch.setattr(self_prompts, "candidates", fake)
    return asked


def by_first_word(monkeypatch):
    """The classifier replaced by the candidate's first word: quota logic tested apart from the embedding."""
    monkeypatch.setattr(Judge, "classify", lambda self, texts, model, tok: ([t.split()[0] for t in texts],
                                                                             [1.0 - i / 100 for i in range(len(texts))]))


def contents(out: Path) -> list[str]:
    return [r["messages"][0]["content"] for r in read_prompts(out / FILE)]


# --- the pre-query prefix and the spec ---------------------------------------------------------------------------


def test_prefix_ends_right_where_the_user_content_starts(tok):
    prefix = self_prompts.pre_query_ids(tok)
    text = tok.decode(prefix)
    # SmolLM2's template adds its default system prompt: the target writes as a user talking to that assistant
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_end|>\n<|im_start|>user\n")
    asked = "How do tides work?"
    full = tok.apply_chat_template([{"role": "user", "content": asked}], tokenize=False, add_generation_prompt=True)
    assert full[len(text):].startswith(asked)  # the content follows the prefix at once
    ids = tok.apply_chat_template([{"role": "user", "content": asked}], tokenize=True, add_generation_prompt=True)
    ids = list(ids["input_ids"] if not isinstance(ids, list) else ids)
    assert ids[:len(prefix)] == prefix  # the same tokens the answer collection will see


def test_prefix_of_a_template_without_a_system_prompt(tok):
    other = load_tokenizer("default")
    other.chat_template = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]: {{ m['content'] }}{{ eos_token }}"
                           "{% endfor %}{% if add_generation_prompt %}[assistant]: {% endif %}")
    assert other.decode(self_prompts.pre_query_ids(other)) == f"{other.bos_token}[user]: "


def test_a_tokenizer_without_a_chat_template_is_refused():
    other = load_tokenizer("default")
    other.chat_template = None
    with pytest.raises(UserError, match="has a chat template.*give --prompts FILE"):
        self_prompts.pre_query_ids(other)


@pytest.mark.parametrize("spec, message", [
    ("self:abc", "'abc' is not a number of prompts; give --prompts self:N with N >= 1"),
    ("self:", "'' is not a number of prompts"),
    ("self:2.5", "'2.5' is not a number of prompts"),
    ("self:0", "needs N >= 1"),
    ("self:-3", "needs N >= 1"),
    ("self:10:temperature=0", "temperature must be > 0"),
    ("self:10:tempreature=1", "unknown option 'tempreature=1'; give self:N:key=value,... with keys ['attempts'"),
    ("self:10:dedup=1.5", "dedup must be in (0, 1]"),
    ("self:10:max_tokens=x", "max_tokens must be int, got 'x'"),
])
def test_bad_specs_name_the_fix(spec, message):
    assert self_prompts.is_self(spec)
    with pytest.raises(UserError) as e:
        self_prompts.parse(spec)
    assert message in str(e.value)


def test_spec_options_and_defaults_defined_once():
    assert self_prompts.parse("self:2000") == SelfOptions(2000)
    o = self_prompts.parse("self:50:temperature=0.8,seeds=none,attempts=3")
    assert (o.n, o.temperature, o.seeds, o.attempts, o.dedup) == (50, 0.8, "none", 3, SelfOptions(1).dedup)
    assert not self_prompts.is_self("train") and not self_prompts.is_self("selfies.jsonl")


def test_score_mode_is_refused():
    with pytest.raises(UserError, match="--mode score teacher-forces given responses"):
        self_prompts.parse("self:10", mode="score")


# --- near-duplicates and categories ------------------------------------------------------------------------------


def test_minhash_finds_near_duplicates_at_the_threshold_only():
    idx = MinHashIndex(0.7)
    base = words(1, 30)
    idx.add(base)
    w = base.split()
    assert idx.near(base) and idx.near(base.upper())  # same words, case ignored
    assert idx.near(" ".join(w[:29] + ["changed"]))  # one word of 30 changed at the end: Jaccard 27/29
    assert not idx.near(" ".join(w[:15] + words(2, 15).split()))  # half shared: Jaccard < 0.5
    assert not idx.near(words(3, 30))
    for i in range(10, 2010):
        idx.add(words(i, 20))
    hits = sum(idx.near(words(i, 20)) for i in range(10, 2010)) + sum(idx.near(words(i, 20)) for i in range(3000, 3500))
    assert hits == 2000  # every stored text found, no unrelated one


def test_classifier_votes_by_cosine_around_the_seed_mean():
    g = np.random.default_rng(0)
    centres = g.normal(size=(3, 16)) + 10  # a large shared offset, as language-model hidden states have
    seeds = np.concatenate([c + 0.3 * g.normal(size=(20, 16)) for c in centres])
    labels = [c for c in "xyz" for _ in range(20)]
    clf = Classifier(seeds, labels, k=5)
    queries = np.concatenate([c + 0.3 * g.normal(size=(10, 16)) for c in centres])
    cats, conf = clf.predict(queries)
    assert cats == [c for c in "xyz" for _ in range(10)]
    assert conf.min() > 0.5 and conf.max() <= 1.0


def test_quotas_follow_the_seed_shares_and_sum_to_n():
    counts = {"chat": 77, "code": 77, "math": 77, "qa": 76, "translation": 79, "writing": 76, "summarization": 75,
              "context_qa": 75}
    for n in (1, 7, 200, 2000):
        q = quotas(n, counts)
        assert sum(q.values()) == n and all(abs(q[c] - n * k / 612) < 1 for c, k in counts.items())
    assert quotas(8, {"a": 3, "b": 1}) == {"a": 6, "b": 2}


# --- writing: rejections, quotas, overflow, resume, settings -----------------------------------------------------


def test_duplicates_heldout_copies_short_and_truncated_are_rejected(tmp_path, model, tok, monkeypatch, seeds):
    heldout = [r["messages"][-1]["content"] for r in load_prompts("heldout")[:3]]
    batch0 = [
        ("a " + words(1), False),
        ("a " + words(1).upper(), False),  # duplicate of the first, in the same batch
        (heldout[0], False),  # a held-out prompt: the evaluation set must not leak into training data
        (heldout[1].rstrip("?.!") + " please?", False),  # a near-copy of one
        ("a too", False),  # 2 words < min_words 3
        ("", False),
        ("a " + words(2), True),  # stopped at max_tokens without the end-of-turn token
        ("b " + words(3), False),
    ]
    batch1 = [("a " + words(1) + " ", False), ("a " + words(4), False), ("a " + words(5), False)]
    script(monkeypatch, [batch0, batch1])
    by_first_word(monkeypatch)
    stats = self_prompts.write(SelfOptions(4, seeds=seeds), model, tok, tmp_path, "t", batch_size=8)
    assert contents(tmp_path) == ["a " + words(1), "b " + words(3), "a " + words(4), "a " + words(5)]
    assert stats["rejected"] == {"truncated": 1, "short": 2, "heldout": 2, "duplicate": 2, "quota": 0}
    assert stats["generated"] == 11 and stats["accepted"] == 4 and stats["categories"] == {"a": 3, "b": 1}
    assert [r["id"] for r in read_prompts(tmp_path / FILE)] == [f"self-00000{i}" for i in range(1, 5)]


def test_quotas_are_respected_and_overflow_fills_the_rest(tmp_path, model, tok, monkeypatch, seeds, capsys):
    # 8 prompts at 3:1 -> a=6, b=2; the target writes only `a` prompts in its 2 x 8 attempts
    script(monkeypatch, [[("a " + words(100 * b + i), False) for i in range(8)] for b in range(2)])
    by_first_word(monkeypatch)
    stats = self_prompts.write(SelfOptions(8, seeds=seeds, attempts=2), model, tok, tmp_path, "t", batch_size=8)
    assert stats["quotas"] == {"a": 6, "b": 2}
    assert stats["generated"] == 16 and stats["rejected"]["quota"] == 10
    assert stats["accepted"] == 8 and stats["filled_from_overflow"] == 2 and stats["categories"] == {"a": 8, "b": 0}
    assert len(set(contents(tmp_path))) == 8
    assert "did not fill" in capsys.readouterr().err


def test_quota_full_categories_wait_for_the_others(tmp_path, model, tok, monkeypatch, seeds):
    batches = [[("a " + words(10 * b + i), False) for i in range(7)] + [("b " + words(10 * b + 9), False)]
               for b in range(4)]
    script(monkeypatch, batches)
    by_first_word(monkeypatch)
    stats = self_prompts.write(SelfOptions(8, seeds=seeds), model, tok, tmp_path, "t", batch_size=8)
    rows = read_prompts(tmp_path / FILE)
    assert [r["category"] for r in rows].count("a") == 6 and [r["category"] for r in rows].count("b") == 2
    assert stats["generated"] == 16 and stats["filled_from_overflow"] == 0  # b's second prompt came in batch 1


def test_real_generation_writes_a_prompt_file_and_records_stats(tmp_path, model, tok, seeds):
    opts = SelfOptions(12, seeds=seeds, max_tokens=24, knn=1)
    stats = self_prompts.write(opts, model, tok, tmp_path, "t", batch_size=16)
    rows = read_prompts(tmp_path / FILE)  # the bundled prompt format: every row a user turn
    assert len(rows) == 12 == stats["accepted"] and all(r["category"] in ("a", "b") for r in rows)
    assert len({r["messages"][0]["content"] for r in rows}) == 12
    rejected = stats["rejected"]
    # every candidate is accepted or rejected for one reason (a filled one was first rejected for its quota)
    assert stats["generated"] == 12 - stats["filled_from_overflow"] + sum(rejected.values())
    assert rejected["truncated"] > 0 and rejected["short"] > 0  # a random model ends some turns early, some never
    assert stats["tokens"] > 0 and stats["tokens_per_s"] > 0 and stats["prompts_per_s"] > 0
    assert json.loads((tmp_path / STATS).read_text()) == stats


def test_classifier_accuracy_is_measured_on_the_heldout_prompts(tmp_path, model, tok):
    # the bundled train set's 8 categories (a random model's embeddings: any accuracy, but measured on all 126)
    clf, quota, accuracy = self_prompts.build_classifier(SelfOptions(16), model, tok, tmp_path)
    assert sorted(quota) == sorted({r["category"] for r in load_prompts("train")}) and sum(quota.values()) == 16
    assert 0 <= accuracy <= 1 and (tmp_path / self_prompts.SEEDS).is_file()
    again = self_prompts.build_classifier(SelfOptions(16), model, tok, tmp_path)  # from the cache
    assert again[2] == accuracy
    none = self_prompts.build_classifier(SelfOptions(16, seeds="none"), model, tok, tmp_path)
    assert none == (None, {"self": 16}, None)


def test_a_killed_run_resumes_to_exactly_n_unique_prompts(tmp_path, model, tok, seeds, monkeypatch):
    opts = SelfOptions(12, seeds=seeds, max_tokens=24, knn=1)
    whole = self_prompts.write(opts, model, tok, tmp_path / "whole", "t", batch_size=4)  # 3 batches at least
    real_append = self_prompts._append
    for kill_after in (0, 1, 2):  # batches whose log line got written before the kill
        out = tmp_path / f"killed{kill_after}"
        calls = []

        def dying(out_, rows, entry, n=kill_after, calls=calls):
            calls.append(1)
            if len(calls) <= n:
                return real_append(out_, rows, entry)
            with open(out_ / FILE, "a") as f:  # the prompts made it, the log line only half
                f.write("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "self-9')
            with open(out_ / LOG, "a") as f:
                f.write(json.dumps(entry)[:20])
            raise KeyboardInterrupt

        monkeypatch.setattr(self_prompts, "_append", dying)
        with pytest.raises(KeyboardInterrupt):
            self_prompts.write(opts, model, tok, out, "t", batch_size=4)
        monkeypatch.setattr(self_prompts, "_append", real_append)
        stats = self_prompts.write(opts, model, tok, out, "t", batch_size=4)
        assert (out / FILE).read_text() == (tmp_path / "whole" / FILE).read_text()  # as if never killed
        assert len(set(contents(out))) == 12 and stats["generated"] == whole["generated"]
        assert (stats["rejected"], stats["categories"]) == (whole["rejected"], whole["categories"])


def test_a_rerun_with_other_settings_is_refused(tmp_path, model, tok, seeds):
    self_prompts.write(SelfOptions(4, seeds=seeds, max_tokens=24, knn=1), model, tok, tmp_path, "t", batch_size=8)
    before = (tmp_path / FILE).read_text()
    with pytest.raises(UserError, match=r"other settings \(temperature: 1.0 there, 0.7 now\).*new --output"):
        self_prompts.write(SelfOptions(4, seeds=seeds, max_tokens=24, knn=1, temperature=0.7), model, tok, tmp_path, "t")
    with pytest.raises(UserError, match="seed: 0 there, 1 now"):
        self_prompts.write(SelfOptions(4, seeds=seeds, max_tokens=24, knn=1), model, tok, tmp_path, "t", seed=1)
    assert (tmp_path / FILE).read_text() == before
    self_prompts.write(SelfOptions(4, seeds=seeds, max_tokens=24, knn=1), model, tok, tmp_path, "t", batch_size=3)  # resumes


def test_max_tokens_past_the_context_is_refused(tmp_path, model, tok):
    with pytest.raises(UserError, match="exceeds the target's context of 512; lower max_tokens"):
        self_prompts.write(SelfOptions(4, max_tokens=500), model, tok, tmp_path, "t")


# --- distill.collect --prompts self:N and the pipeline's check ------------------------------------------------


def no_template(target_dir: Path, dest: Path) -> Path:
    """A copy of the target whose tokenizer has no chat template (a base model)."""
    shutil.copytree(target_dir, dest)
    (dest / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((dest / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg))
    return dest


def collect_self(target, out: Path, spec: str, **kw) -> dict | None:
    args = dict(target=str(target), prompts=spec, output=str(out), max_new_tokens=4, topk=2, batch_size=8)
    return run(CollectConfig(**{**args, **kw}))


def test_collect_writes_the_prompts_then_answers_them(tmp_path, target_dir, seeds):
    spec = f"self:6:seeds={seeds},knn=1,max_tokens=24"
    info = collect_self(target_dir, tmp_path, spec)
    prompts = read_prompts(tmp_path / FILE)
    ds = load_collected(tmp_path)
    assert info["rows"] == info["prompts"] == 6 and sorted(ds["id"]) == sorted(r["id"] for r in prompts)
    assert json.loads((tmp_path / STATS).read_text())["accepted"] == 6
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name.startswith("self-")}
    assert collect_self(target_dir, tmp_path, spec)["rows"] == 6  # a rerun writes nothing new
    assert before == {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p.name.startswith("self-")}
    with pytest.raises(UserError, match="other settings"):
        collect_self(target_dir, tmp_path, spec, seed=3)


def test_a_generator_answers_the_self_written_prompts(tmp_path, target_dir, tiny_llama, seeds):
    gen = tmp_path / "generator"
    tiny_llama(1, vocab=VOCAB, tie_word_embeddings=True, max_position_embeddings=512).save_pretrained(gen)
    load_tokenizer("default").save_pretrained(gen)
    info = collect_self(target_dir, tmp_path / "out", f"self:4:seeds={seeds},knn=1,max_tokens=24", generator=str(gen))
    assert info["rows"] == 4 and set(load_collected(tmp_path / "out")["source"]) == {"on_policy"}


def test_collect_refuses_what_self_prompts_cannot_do(tmp_path, target_dir, seeds):
    with pytest.raises(UserError, match="--mode score teacher-forces given responses"):
        CollectConfig(prompts="self:10", mode="score")
    with pytest.raises(UserError, match="'x' is not a number of prompts"):
        CollectConfig(prompts="self:x")
    with pytest.raises(UserError, match="give --prompts FILE"):
        collect_self(no_template(target_dir, tmp_path / "base"), tmp_path / "out", "self:4")
    with pytest.raises(UserError, match="run the same command once without a launcher"):
        collect_self(target_dir, tmp_path / "ranks", "self:4", num_shards=2, shard_index=0)
    with pytest.raises(SystemExit) as e:
        main(["--target", str(target_dir), "--prompts", "self:0", "--output", str(tmp_path / "o")])
    assert str(e.value.code) == "error: --prompts self:N needs N >= 1 (prompts the target writes), got 0"


def test_the_pipeline_checks_a_self_spec_without_loading_prompts(tmp_path, target_dir):
    from distill.pipeline import check_data

    check_data(str(target_dir), [CollectConfig(target=str(target_dir), prompts="self:8", output=str(tmp_path))])
    base = str(no_template(target_dir, tmp_path / "base"))
    with pytest.raises(UserError, match="give --prompts FILE"):
        check_data(base, [CollectConfig(target=base, prompts="self:8", output=str(tmp_path / "o"))])


@pytest.mark.slow
def test_the_default_target_writes_prompts_and_answers_them(tmp_path):
    # attempts=2: two batches of 16 candidates, then the over-quota fill (with the default 10 attempts the 8
    # quotas of 2 kept the 135M target writing all 160 candidates, ~300 of this test's 450 s in CI)
    info = collect_self("default", tmp_path, "self:16:attempts=2", max_new_tokens=16, topk=4, batch_size=16)
    stats = json.loads((tmp_path / STATS).read_text())
    assert info["rows"] == stats["accepted"] == 16 and sum(stats["categories"].values()) == 16
    assert stats["classifier"]["heldout_accuracy"] > 0.5  # 8 categories: chance is 1/8
    assert stats["generated"] <= 32  # attempts x N
    texts = contents(tmp_path)
    assert len(set(texts)) == 16 and all(len(t.split()) >= 3 for t in texts)
