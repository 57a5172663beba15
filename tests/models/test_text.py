"""Sentence and clause splitting, lexical mismatch detection and recorded corruptions (pure, no model)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from grace_core.models.corruption import change_number, corrupt, flip_negation, swap_term, term_pool
from grace_core.models.hashing import call_key, stable_seed
from grace_core.models.lexicon import content_stems, mismatch, numbers
from grace_core.models.segment import claim_units, clauses, is_fragment, sentences


def test_sentences_respect_abbreviations_and_paragraphs() -> None:
    text = "We follow Smith et al. in this work. Results improve by 3.5% overall.\n\nTable 2: Results"
    assert sentences(text) == ("We follow Smith et al. in this work.", "Results improve by 3.5% overall.", "Table 2: Results")


def test_clauses_split_at_semicolons_and_contrast_but_keep_short_sides() -> None:
    assert clauses("We train the model for ten epochs; it converges after about eight epochs.") == (
        "We train the model for ten epochs.", "It converges after about eight epochs.",
    )
    assert clauses("The encoder is very small, but it outperforms all the larger baselines.") == (
        "The encoder is very small.", "It outperforms all the larger baselines.",
    )
    assert clauses("The model is small, but it wins.") == ("The model is small, but it wins.",)


def test_claim_units_drop_fragments_questions_markers_and_duplicates() -> None:
    text = (
        "However, the parser reaches 91.2 F1 on the test set. Table 3: Results. Why does it work? "
        "The parser reaches 91.2 F1 on the test set. [1]"
    )
    assert claim_units(text) == ("The parser reaches 91.2 F1 on the test set.",)
    assert is_fragment("Results on SQuAD:")
    assert is_fragment("BERT GPT ELMo XLNet")
    assert not is_fragment("The model uses two layers.")


def test_numbers_and_stems_are_normalised() -> None:
    assert numbers("We used 10,000 tweets, 85.0% accuracy and two GPUs.") == frozenset({"10000", "85", "2"})
    assert content_stems("Accuracy increases") == content_stems("accuracy increased")


def test_mismatch_finds_each_kind_between_near_identical_texts() -> None:
    unit = "The model is trained for 10 epochs with BERT on SQuAD and accuracy increases."
    cases = {
        "The model is not trained for 10 epochs with BERT on SQuAD and accuracy increases.": "negation",
        "The model is trained for 12 epochs with BERT on SQuAD and accuracy increases.": "number",
        "The model is trained for 10 epochs with BERT on SQuAD and accuracy decreases.": "antonym",
        "The model is trained for 10 epochs with ELMo on SQuAD and accuracy increases.": "term",
    }
    for claim, kind in cases.items():
        found = mismatch(claim, unit)
        assert found is not None and found.kind == kind, claim
    assert mismatch(unit, unit) is None


def test_mismatch_needs_the_claim_to_be_mostly_covered_by_the_unit() -> None:
    unit = "We do not use any pretrained embeddings in the experiments."
    assert mismatch("The corpus contains news articles from three agencies.", unit) is None
    assert mismatch("We use BERT and ELMo for the encoder.", "We use BERT for the encoder.") is None
    source = "The tagger is trained for 12 epochs. The parser is trained for 10 epochs with BERT."
    claim, unit = "The parser is trained for 12 epochs with BERT.", "The parser is trained for 10 epochs with BERT."
    assert mismatch(claim, unit, source) is None
    assert mismatch(claim, unit).kind == "number"


def test_corruptions_are_recorded_and_detected() -> None:
    rng = random.Random(1)
    assert flip_negation("It does not use GloVe vectors.") == ("does not", "does", "It does use GloVe vectors.")
    assert flip_negation("It uses GloVe vectors.") is None
    before, after, text = change_number("We train for 10 epochs.", rng)
    assert before == "10" and after != "10" and text == f"We train for {after} epochs."
    assert swap_term("We use BERT here.", ("BERT",), rng) is None
    assert term_pool("We compare BERT with ELMo. Results are in Table 2.") == ("BERT", "ELMo")


WORDS = st.sampled_from(["model", "corpus", "encoder", "baseline", "parser", "classifier", "tagger"])
TERMS = st.sampled_from(["BERT", "ELMo", "GloVe", "SQuAD", "LSTM", "GPT2", "RoBERTa"])


@settings(max_examples=60, deadline=None)
@given(noun=WORDS, term=TERMS, other=TERMS, value=st.integers(min_value=0, max_value=5000), seed=st.integers(0, 2**32))
def test_every_corruption_changes_the_sentence_and_the_change_is_a_mismatch(noun: str, term: str, other: str, value: int, seed: int) -> None:
    sentence = f"The {noun} is trained with {term} for {value} steps on the benchmark."
    c = corrupt(sentence, 3, random.Random(seed), (term, other))
    assert c is not None and c.sentence_index == 3 and c.original == sentence
    assert c.corrupted != sentence and c.after in c.corrupted
    found = mismatch(c.corrupted, sentence)
    assert found is not None and found.kind == c.kind


def test_hashes_are_stable_and_sensitive() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    assert call_key("m", msgs, {"t": 0}) == call_key("m", msgs, {"t": 0})
    assert call_key("m", msgs, {"t": 0}) != call_key("m", msgs, {"t": 1})
    assert call_key("m", msgs, {"t": 0}) != call_key("n", msgs, {"t": 0})
    assert stable_seed(0, "q", 1) == stable_seed(0, "q", 1) != stable_seed(0, "q", 2)
