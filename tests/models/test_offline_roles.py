"""The offline roles on the real packaged all-MiniLM-L6-v2 (loaded once per session)."""

from __future__ import annotations

import numpy as np
import pytest

from grace_core.models.config import ModelConfig
from grace_core.models.factory import build_roles
from grace_core.models.offline_answerer import OfflineAnswerer
from grace_core.models.offline_decomposer import OfflineDecomposer
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.models.offline_judge import OfflineJudge
from grace_core.models.offline_responder import OfflineResponder
from grace_core.models.offline_verifier import OfflineVerifier
from grace_core.models.roles import (
    Answerer,
    AnswerRequest,
    Decomposer,
    Embedder,
    Judge,
    JudgeRequest,
    Responder,
    RespondRequest,
    Verifier,
    VerifyRequest,
)
from grace_core.models.segment import claim_units, is_fragment

DOC = (
    "We train a bidirectional LSTM tagger on the CoNLL-2003 corpus. The tagger is trained for 10 epochs "
    "with the Adam optimizer. It reaches an F1 score of 91.2 on the test set. The tagger does not use "
    "character embeddings. Pretrained GloVe vectors initialise the word embeddings. Larger batch sizes "
    "decrease the training time of the tagger."
)


@pytest.fixture(scope="module")
def cfg(offline_config: ModelConfig) -> ModelConfig:
    return offline_config


def test_embedder_gives_unit_vectors_cached_by_text(embedder: OfflineEmbedder) -> None:
    texts = ["The tagger reaches 91.2 F1.", "The tagger reaches an F1 of 91.2.", "Bananas are yellow fruit."]
    vecs = embedder.embed(texts)
    assert vecs.shape == (3, embedder.dim) == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.3
    before = embedder.encoded
    again = embedder.embed([texts[2], texts[0], texts[0]])
    assert embedder.encoded == before
    assert np.array_equal(again[1], vecs[0]) and np.array_equal(again[0], vecs[2])
    assert embedder.embed([]).shape == (0, 384)


def test_judge_labels_entailment_contradiction_and_neutral(embedder: OfflineEmbedder, cfg: ModelConfig) -> None:
    judge = OfflineJudge(embedder, cfg)
    claims = (
        "The tagger is trained for 10 epochs with the Adam optimizer.",
        "The tagger is trained for 25 epochs with the Adam optimizer.",
        "The tagger does use character embeddings.",
        "It reaches an F1 score of 91.2 on the test set.",
        "The corpus was collected from French parliamentary debates.",
        "Larger batch sizes increase the training time of the tagger.",
    )
    [row] = judge.judge([JudgeRequest(DOC, claims)])
    assert [j.label for j in row] == ["entails", "contradicts", "contradicts", "entails", "neutral", "contradicts"]
    assert all(j.outcome == "ok" for j in row)
    assert row[0].score == pytest.approx(1.0, abs=1e-4)
    assert row[4].score is None  # one content word of five in the source: neutral without embedding it
    [[empty]] = judge.judge([JudgeRequest("", claims[:1])])
    assert empty.label == "neutral" and empty.score is None


def test_judge_embeds_only_claims_with_words_in_common_and_labels_as_if_it_embedded_all(
    embedder: OfflineEmbedder, cfg: ModelConfig, qasper_papers: list[dict]
) -> None:
    """The lexical screen changes no label: every claim of a paper (and a corrupted copy of each
    one a corruption applies to, for contradictions), judged against the paper's first
    paragraphs, labelled as the rule labels each claim's full support; and most claims are not
    embedded at all."""
    import random

    from grace_core.models.corruption import corrupt, term_pool
    from grace_core.models.offline_judge import CONTAINMENT_OVERLAP, CONTAINMENT_SIMILARITY, label_of, lexically_reachable
    from grace_core.models.offline_support import SupportScorer

    paragraphs = [p for s in qasper_papers[0]["sections"] for p in s["paragraphs"] if p.strip()]
    text = "\n\n".join(paragraphs)
    rng, pool = random.Random(0), term_pool(text)
    units = [u for p in paragraphs for u in claim_units(p)]
    corrupted = [c.corrupted for i, u in enumerate(units) if (c := corrupt(u, i, rng, pool)) is not None]
    claims = tuple(dict.fromkeys(units + corrupted))
    sources = paragraphs[:6]
    judged = OfflineJudge(embedder, cfg).judge([JudgeRequest(src, claims) for src in sources])

    floor = min(cfg.judge_entail_similarity, cfg.judge_contradict_similarity, CONTAINMENT_SIMILARITY)
    reference = SupportScorer(embedder).support(sources, [claims] * len(sources), floor=floor,
                                                contradict_similarity=cfg.judge_contradict_similarity)
    labels = {"entails": 0, "contradicts": 0}
    left_out = 0
    for src, row, ref in zip(sources, judged, reference, strict=True):
        reachable = set(lexically_reachable(src, claims, entail_share=min(cfg.judge_entail_overlap, CONTAINMENT_OVERLAP)))
        for i, (j, support) in enumerate(zip(row, ref, strict=True)):
            expected = label_of(support, entail_similarity=cfg.judge_entail_similarity, entail_overlap=cfg.judge_entail_overlap,
                                contradict_similarity=cfg.judge_contradict_similarity)
            assert j.label == expected, (src, claims[i])
            labels[expected] = labels.get(expected, 0) + 1
            if i in reachable:
                assert j.score == pytest.approx(support.similarity, abs=1e-5)
            else:
                assert j.score is None and j.label == "neutral"
                left_out += 1
    assert labels["entails"] >= 10 and labels["contradicts"] >= 3, labels
    assert left_out > 0.8 * len(claims) * len(sources), (left_out, len(claims) * len(sources))


def test_decomposer_gives_self_contained_claims_of_a_paper(qasper_papers: list[dict]) -> None:
    text = "\n\n".join(p for s in qasper_papers[0]["sections"] for p in s["paragraphs"])
    [dec] = OfflineDecomposer().decompose([text])
    assert dec.outcome == "ok" and len(dec.claims) > 100
    assert len(set(dec.claims)) == len(dec.claims)
    assert not any(is_fragment(c) for c in dec.claims)
    assert all(c[0].isupper() or not c[0].isalpha() for c in dec.claims)


def _responder(embedder: OfflineEmbedder, **overrides: object) -> OfflineResponder:
    return OfflineResponder(embedder, ModelConfig(torch_threads=1, **overrides))


def test_responder_is_extractive_seeded_and_diverse(embedder: OfflineEmbedder) -> None:
    req = RespondRequest("How is the tagger trained?", DOC, n=6)
    first = _responder(embedder, temperature=1.0, paraphrase_rate=0.0).respond([req])[0]
    again = _responder(embedder, temperature=1.0, paraphrase_rate=0.0).respond([req])[0]
    assert [r.text for r in first] == [r.text for r in again]
    assert len({r.text for r in first}) > 1
    units = set(claim_units(DOC))
    for r in first:
        assert r.corruptions == () and r.outcome == "ok"
        assert set(claim_units(r.text)) <= units
    other_seed = _responder(embedder, temperature=1.0, paraphrase_rate=0.0, seed=7).respond([req])[0]
    assert [r.text for r in other_seed] != [r.text for r in first]
    greedy = _responder(embedder, temperature=0.0).respond([req])[0]
    assert len({r.text for r in greedy}) == 1


def test_responder_hallucinations_are_seeded_and_recorded(embedder: OfflineEmbedder) -> None:
    req = RespondRequest("What does the tagger use and how well does it do?", DOC, n=5)
    clean = _responder(embedder, temperature=1.0, paraphrase_rate=0.0).respond([req])[0]
    dirty = _responder(embedder, temperature=1.0, paraphrase_rate=0.0, hallucination_rate=1.0).respond([req])[0]
    n_corrupted = 0
    for c, d in zip(clean, dirty, strict=True):
        assert d.corruptions, "every sentence should be corrupted at rate 1"
        text = c.text
        for k in d.corruptions:
            assert k.original in text and k.before in k.original
            text = text.replace(k.original, k.corrupted)
        assert text == d.text
        n_corrupted += len(d.corruptions)
    assert n_corrupted >= len(dirty)
    assert [r.corruptions for r in dirty] == [
        r.corruptions for r in _responder(embedder, temperature=1.0, paraphrase_rate=0.0, hallucination_rate=1.0).respond([req])[0]
    ]


def test_verifier_confirms_rejects_and_abstains(embedder: OfflineEmbedder, cfg: ModelConfig) -> None:
    verifier = OfflineVerifier(embedder, cfg)
    verdicts = verifier.verify([
        VerifyRequest("The tagger is trained for 10 epochs with the Adam optimizer.", DOC),
        VerifyRequest("It reaches an F1 score of 87.5 on the test set.", DOC),
        VerifyRequest("The authors plan to release the code next year.", DOC),
        VerifyRequest("Pretrained GloVe vectors initialise the word embeddings.", ""),
    ])
    assert [v.verdict for v in verdicts] == ["confirm", "reject", "abstain", "abstain"]
    assert "number" in verdicts[1].reason and "91.2" in verdicts[1].reason


def test_answerer_extracts_abstains_and_scores_options(embedder: OfflineEmbedder, cfg: ModelConfig) -> None:
    answerer = OfflineAnswerer(embedder, cfg)
    found, none, choice = answerer.answer([
        AnswerRequest("What F1 score does the tagger reach on the test set?", DOC),
        AnswerRequest("What is the capital city of Peru?", DOC),
        AnswerRequest("Which optimizer trains the tagger?", DOC, options=("Stochastic gradient descent", "Adam", "Adagrad")),
    ])
    assert not found.abstained and found.text == found.evidence == "It reaches an F1 score of 91.2 on the test set."
    assert none.abstained and none.text is None and none.score < cfg.answer_min_score
    assert choice.option == 1 and not choice.abstained


def test_answerer_says_yes_or_no_to_polar_questions(embedder: OfflineEmbedder, cfg: ModelConfig) -> None:
    from grace_core.models.offline_answerer import is_polar

    assert is_polar("Do they use character embeddings?") and is_polar("is the tagger trained with Adam?")
    assert not is_polar("Is the tagger trained with Adam or SGD?") and not is_polar("What does the tagger use?")
    negated, plain, open_ = OfflineAnswerer(embedder, cfg).answer([
        AnswerRequest("Does the tagger use character embeddings?", DOC),
        AnswerRequest("Is the tagger trained with the Adam optimizer?", DOC),
        AnswerRequest("How many epochs is the tagger trained for?", DOC),
    ])
    assert (negated.text, negated.evidence) == ("No", "The tagger does not use character embeddings.")
    assert (plain.text, plain.evidence) == ("Yes", "The tagger is trained for 10 epochs with the Adam optimizer.")
    assert open_.text == open_.evidence == "The tagger is trained for 10 epochs with the Adam optimizer."


def test_offline_factory_builds_offline_roles_without_litellm(cfg: ModelConfig) -> None:
    roles = build_roles(cfg)
    assert roles.client is None and not roles.spend_cap_reached
    assert isinstance(roles.judge, OfflineJudge) and isinstance(roles.responder, OfflineResponder)
    for role, protocol in ((roles.responder, Responder), (roles.decomposer, Decomposer), (roles.judge, Judge),
                           (roles.verifier, Verifier), (roles.answerer, Answerer), (roles.embedder, Embedder)):
        assert isinstance(role, protocol)
    roles.start_round(3)
    assert roles.usage().calls == 0
