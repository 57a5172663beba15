"""The offline responder's rewordings (seeded, recorded, truth-keeping) and the offline judge's
containment entailment, on the real packaged all-MiniLM-L6-v2."""

from __future__ import annotations

import random
from types import SimpleNamespace

import polars as pl
import pytest

from grace_core.claims import claim_id
from grace_core.evaluation.expansion import hallucinated_claims
from grace_core.models.config import ModelConfig
from grace_core.models.corruption import change_number, flip_negation, swap_term
from grace_core.models.lexicon import content_stems, negated_heads, numbers, terms
from grace_core.models.offline_decomposer import OfflineDecomposer
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.models.offline_judge import OfflineJudge
from grace_core.models.offline_responder import OfflineResponder
from grace_core.models.offline_verifier import OfflineVerifier
from grace_core.models.paraphrase import (
    OPERATIONS,
    drop_lead,
    drop_parenthetical,
    drop_trailing,
    keep_clause,
    merge,
    paraphrase,
    swap_clauses,
)
from grace_core.models.roles import JudgeRequest, RespondRequest, VerifyRequest
from grace_core.models.segment import claim_units, is_fragment, sentences

DOC = (
    "We train the tagger on the CoNLL-2003 corpus (English newswire) for 10 epochs, which takes two hours on one GPU. "
    "In our experiments, the tagger reaches an F1 score of 91.2 on the test set because the GloVe vectors cover most words. "
    "The tagger uses no character embeddings, while the baseline system relies on them heavily. "
    "We freeze the word embeddings during training. We tune the learning rate of Adam on the development set. "
    "The dropout rate is set to 0.5 for every layer; the hidden size of the LSTM is 256 units."
)


def _keeps_truth(original: str, reworded: str) -> bool:
    """The rewording says nothing its original does not: content words, numbers, terms and
    negations all come from it."""
    return (content_stems(reworded) <= content_stems(original) and numbers(reworded) <= numbers(original)
            and {t.lower() for t in terms(reworded)} <= {t.lower() for t in terms(original)} | {t.lower() for t in original.split()}
            and negated_heads(reworded) <= negated_heads(original))


def test_each_operation_rewords_without_adding_anything() -> None:
    rng = random.Random(0)
    s = sentences(DOC)
    assert drop_parenthetical(s[0], rng) == "We train the tagger on the CoNLL-2003 corpus for 10 epochs, which takes two hours on one GPU."
    assert drop_trailing(s[0], rng) == "We train the tagger on the CoNLL-2003 corpus (English newswire) for 10 epochs."
    assert drop_lead(s[1], rng) == "The tagger reaches an F1 score of 91.2 on the test set because the GloVe vectors cover most words."
    assert swap_clauses(s[1], rng) == "Because the GloVe vectors cover most words, in our experiments, the tagger reaches an F1 score of 91.2 on the test set."
    assert keep_clause(s[5], random.Random(1)) in {"The dropout rate is set to 0.5 for every layer.", "The hidden size of the LSTM is 256 units."}
    assert merge(s[3], s[4]) == "We freeze the word embeddings during training and tune the learning rate of Adam on the development set."
    assert merge(s[2], s[3]) == ("The tagger uses no character embeddings, while the baseline system relies on them heavily and we "
                                 "freeze the word embeddings during training.")
    # a negated or conditional part is never dropped or moved
    assert swap_clauses(s[2], rng) is None
    assert drop_trailing("The model improves accuracy, which does not hold for the small corpus.", rng) is None
    assert drop_lead("If the corpus is small, the tagger overfits within three epochs.", rng) is None
    assert drop_parenthetical("The tagger overfits quickly (but not on the large corpus of news).", rng) is None
    assert merge("Is the tagger any good?", s[3]) is None
    for sent in s:
        for op in OPERATIONS.values():
            out = op(sent, random.Random(3))
            if out is not None:
                assert out != sent and not is_fragment(out) and _keeps_truth(sent, out), (op.__name__, sent, out)


def test_paraphrase_records_every_rewording_with_its_original() -> None:
    s = list(sentences(DOC))
    out, done = paraphrase(s, [True] * (len(s) - 1), 1.0, random.Random(5))
    assert done and len(out) == len(s) - sum(p.kind == "merge" for p in done)
    for p in done:
        assert out[p.sentence_index] == p.paraphrased and p.original != p.paraphrased
        assert p.original in DOC and _keeps_truth(p.original, p.paraphrased)
    untouched = set(range(len(out))) - {p.sentence_index for p in done}
    assert all(out[i] in s for i in untouched)
    assert paraphrase(s, [True] * (len(s) - 1), 1.0, random.Random(5)) == (out, done)
    assert paraphrase(s, [False] * (len(s) - 1), 0.0, random.Random(5)) == (s, [])
    _, no_merge = paraphrase(s, [False] * (len(s) - 1), 1.0, random.Random(5))
    assert all(p.kind != "merge" for p in no_merge)


def _responder(embedder: OfflineEmbedder, **overrides: object) -> OfflineResponder:
    return OfflineResponder(embedder, ModelConfig(torch_threads=1, **overrides))


def test_responder_rewords_samples_seeded_and_recorded(embedder: OfflineEmbedder) -> None:
    req = RespondRequest("How is the tagger trained and how well does it do?", DOC, n=8)
    first = _responder(embedder, temperature=1.0, paraphrase_rate=1.0).respond([req])[0]
    assert [r.text for r in first] == [r.text for r in _responder(embedder, temperature=1.0, paraphrase_rate=1.0).respond([req])[0]]
    assert [r.paraphrases for r in first] != [r.paraphrases for r in _responder(embedder, temperature=1.0, paraphrase_rate=1.0, seed=7).respond([req])[0]]
    assert sum(len(r.paraphrases) for r in first) >= len(first)
    doc_units = set(claim_units(DOC))
    new_claims = set()
    for r in first:
        assert r.corruptions == ()
        for p in r.paraphrases:
            assert p.paraphrased in r.text and p.original in DOC and _keeps_truth(p.original, p.paraphrased)
        new_claims |= set(claim_units(r.text)) - doc_units
    assert new_claims, "rewordings give claims the extractive responder never made"
    # the reworded claims stay true: the offline verifier confirms them against the document
    verdicts = OfflineVerifier(embedder, ModelConfig(torch_threads=1)).verify([VerifyRequest(c, DOC) for c in sorted(new_claims)])
    assert sum(v.verdict == "confirm" for v in verdicts) >= 0.75 * len(verdicts)
    assert all(v.verdict != "reject" for v in verdicts)
    # no rewording at temperature 0 (greedy samples are identical) nor at rate 0
    assert all(r.paraphrases == () for r in _responder(embedder, temperature=0.0, paraphrase_rate=1.0).respond([req])[0])
    plain = _responder(embedder, temperature=1.0, paraphrase_rate=0.0).respond([req])[0]
    assert all(r.paraphrases == () and set(claim_units(r.text)) <= doc_units for r in plain)


def test_corruptions_of_reworded_sentences_keep_the_truth_known(embedder: OfflineEmbedder) -> None:
    req = RespondRequest("How is the tagger trained and how well does it do?", DOC, n=8)
    both = _responder(embedder, temperature=1.0, paraphrase_rate=1.0, hallucination_rate=0.5).respond([req])[0]
    rows, true_claims, all_claims = [], set(), set()
    for r in both:
        reworded = {p.sentence_index: p.paraphrased for p in r.paraphrases}
        clean = r.text
        for c in r.corruptions:
            # a corruption's original is the sentence as reworded (or as in the context)
            assert c.original == reworded.get(c.sentence_index, c.original) and c.corrupted in r.text
            rows.append({"doc_id": "d", "corrupted": c.corrupted, "original": c.original})
            clean = clean.replace(c.corrupted, c.original)
        assert all(_keeps_truth(DOC, claim) for claim in claim_units(clean))
        true_claims |= set(claim_units(clean))
        all_claims |= set(claim_units(r.text))
    assert rows, "some reworded sentences are corrupted at rate 0.5"
    false = set(hallucinated_claims(pl.DataFrame(rows), SimpleNamespace(decomposer=OfflineDecomposer()))["claim_id"].to_list())
    assert false and all(claim_id("d", c) not in false for c in true_claims)
    assert all(claim_id("d", c) in false for c in all_claims - true_claims)
    # the offline verifier never rejects a reworded true claim
    asked = sorted(all_claims | true_claims)
    verdicts = OfflineVerifier(embedder, ModelConfig(torch_threads=1)).verify([VerifyRequest(c, DOC) for c in asked])
    by_truth = {c: v.verdict for c, v in zip(asked, verdicts, strict=True)}
    assert all(by_truth[c] != "reject" for c in true_claims)


@pytest.fixture(scope="module")
def judge(embedder: OfflineEmbedder) -> OfflineJudge:
    return OfflineJudge(embedder, ModelConfig(torch_threads=1))


LONG = ("In our experiments, the tagger trained on the CoNLL-2003 corpus reaches an F1 score of 91.2 on the English test set "
        "(averaged over five runs), because the pretrained GloVe vectors cover most of the rare named entities.")


def test_judge_entails_the_shorter_claims_a_verified_claim_contains(judge: OfflineJudge) -> None:
    shorter = (
        "The tagger trained on the CoNLL-2003 corpus reaches an F1 score of 91.2.",
        "The tagger reaches an F1 score of 91.2 on the English test set.",
        "The pretrained GloVe vectors cover most of the rare named entities.",
        "Because the pretrained GloVe vectors cover most of the rare named entities, the tagger reaches an F1 score of 91.2.",
        "The tagger reaches an F1 score of 91.2 averaged over five runs.",
    )
    [row] = judge.judge([JudgeRequest(LONG, shorter)])
    assert [j.label for j in row] == ["entails"] * len(shorter)
    # the other way round: a short verified claim does not entail the longer one
    [[back]] = judge.judge([JudgeRequest(shorter[0], (LONG,))])
    assert back.label != "entails"


def test_judge_still_refuses_corrupted_shorter_claims(judge: OfflineJudge) -> None:
    short = "The tagger trained on the CoNLL-2003 corpus reaches an F1 score of 91.2 on the English test set."
    rng = random.Random(0)
    corrupted = [
        change_number(short, rng)[2],
        flip_negation(short.replace("reaches", "does reach"))[2],
        swap_term(short, ("OntoNotes",), rng)[2],
        "The pretrained GloVe vectors cover none of the rare named entities.",
    ]
    [row] = judge.judge([JudgeRequest(LONG, tuple(corrupted))])
    assert all(j.label != "entails" for j in row), list(zip(corrupted, [j.label for j in row]))
    assert [j.label for j in row[:3]] == ["contradicts"] * 3
