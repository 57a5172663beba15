"""Document batch parsing (grace_core.documents): shapes, priors, ids and every bad-input case."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grace_core.documents import CHUNK_WORDS, DocumentBatch, chunk_text, parse_batch
from grace_core.errors import InvalidBatch


def jsonl(*docs: object) -> bytes:
    return "".join(json.dumps(d) + "\n" for d in docs).encode("utf-8")


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def test_text_document_becomes_chunks_of_at_most_1000_words() -> None:
    text = "\n\n".join(words(400, k * 400) for k in range(6))  # 2,400 words in 6 paragraphs
    batch = parse_batch(jsonl({"id": "d1", "title": "T", "text": text}), "b.jsonl")
    priors = batch.priors
    assert priors["name"].to_list() == ["Chunk 1", "Chunk 2", "Chunk 3"]
    assert [len(t.split()) for t in priors["text"]] == [800, 800, 800]
    assert " ".join(priors["text"]).split() == text.split()
    doc = batch.documents.row(0, named=True)
    assert (doc["source_format"], doc["n_words"], doc["n_priors"], doc["line"]) == ("text", 2400, 3, 1)


def test_sections_become_named_priors_in_order_and_empty_sections_are_skipped() -> None:
    doc = {
        "id": "d1", "title": "T",
        "sections": [
            {"name": "Intro", "paragraphs": ["First para.", "  ", "Second para."]},
            {"name": "Empty", "paragraphs": ["", " "]},
            {"name": "Method", "paragraphs": ["We did things."]},
        ],
        "questions": [{"question": "What did they do?"}, {"id": "q7", "question": "Why?", "answers": ["because"]}],
    }
    batch = parse_batch(jsonl(doc), "b.jsonl")
    assert batch.priors.select("name", "ord", "text").rows() == [
        ("Intro", 0, "First para.\n\nSecond para."), ("Method", 1, "We did things."),
    ]
    q = batch.questions
    assert q["question_id"][0].startswith("q:") and q["question_id"][1] == "q7"
    assert q["gold_json"].to_list() == [None, '{"answers": ["because"]}']


def test_ids_are_content_hashes_stable_across_parses_and_key_order() -> None:
    doc = {"id": "d1", "title": "T", "text": "Alpha beta.\n\nGamma."}
    reordered = {"text": "Alpha beta.\n\nGamma.", "title": "T", "id": "d1"}
    a = parse_batch(jsonl(doc), "a.jsonl")
    b = parse_batch(jsonl(reordered), "b.jsonl")
    assert a.priors["source_id"].to_list() == b.priors["source_id"].to_list()
    assert a.documents["content_hash"].to_list() == b.documents["content_hash"].to_list()
    changed = parse_batch(jsonl({**doc, "text": "Alpha beta.\n\nDelta."}), "c.jsonl")
    assert changed.documents["content_hash"][0] != a.documents["content_hash"][0]
    assert a.batch_id != b.batch_id  # the batch id is the hash of the exact bytes


def test_a_document_repeated_with_identical_content_is_kept_once() -> None:
    doc = {"id": "d1", "title": "T", "text": "Same text."}
    batch = parse_batch(jsonl(doc, {"id": "d2", "title": "U", "text": "Other."}, doc), "b.jsonl")
    assert batch.documents["doc_id"].to_list() == ["d1", "d2"]
    assert batch.priors.height == 2 and batch.n_lines == 3


def test_real_qasper_papers_are_accepted(qasper_sample: Path) -> None:
    raw = qasper_sample.read_bytes()
    papers = [json.loads(line) for line in raw.splitlines()]
    batch = parse_batch(raw, qasper_sample.name)
    assert isinstance(batch, DocumentBatch) and batch.skipped == ()
    assert batch.documents.height == len(papers) == 6
    assert batch.questions.height == sum(len(p["questions"]) for p in papers)
    assert set(batch.documents["source_format"]) == {"qasper"}
    first = batch.priors.filter(batch.priors["ord"] == 0)
    assert first.height == len(papers) and set(first["name"]) == {"Abstract"}
    assert batch.priors["text"].str.strip_chars().str.len_chars().min() > 0
    gold = json.loads(batch.questions["gold_json"][0])
    assert gold["answers"][0]["answer_type"] in ("extractive", "abstractive", "boolean", "none")
    for paper in papers:  # sections without paragraphs (one paper has one) are left out
        assert batch.priors.filter(batch.priors["doc_id"] == paper["id"])["name"].to_list() == ["Abstract"] + [
            s["name"].strip() for s in paper["sections"] if any(p.strip() for p in s["paragraphs"])
        ]


def test_real_quality_articles_are_chunked(quality_sample: Path) -> None:
    raw = quality_sample.read_bytes()
    articles = [json.loads(line) for line in raw.splitlines()]
    batch = parse_batch(raw, quality_sample.name)
    n = sum(len(a["questions"]) for a in articles)
    assert batch.documents.height == 3 and batch.questions.height == n
    assert batch.documents["doc_id"].to_list() == [a["article_id"] for a in articles]
    assert set(batch.documents["source_format"]) == {"quality"}
    assert max(len(t.split()) for t in batch.priors["text"]) <= CHUNK_WORDS
    assert batch.questions["options"].list.len().to_list() == [4] * n
    # the first article opens with an HTML comment (a Gutenberg header): it is not a prior's text
    assert articles[0]["article"].startswith("<!-- $Id")
    assert "<!--" not in "".join(batch.priors["text"]) and "vlsimpson" not in "".join(batch.priors["text"])


@pytest.mark.slow
def test_full_dev_files_are_accepted(shared_data: Path) -> None:
    """Every line of the full dev files (only where the machine has them: GRACE_DATA_DIR)."""
    qasper = parse_batch((shared_data / "qasper" / "qasper_dev.jsonl").read_bytes(), "qasper_dev.jsonl")
    assert (qasper.documents.height, qasper.questions.height, qasper.skipped) == (281, 1005, ())
    quality = parse_batch((shared_data / "quality" / "quality_dev_subset.jsonl").read_bytes(), "quality_dev_subset.jsonl")
    assert (quality.documents.height, quality.questions.height, quality.skipped) == (20, 357, ())


BAD_BATCHES = [
    (b'{"id": "d1", "title": "T", "text": "ok"}\n{"id": "d2", "title": \n', "line 2", "not valid JSON"),
    (b'{"id": "d1", "title": "T", "text": "caf\xe9"}\n', "line 1", "not valid UTF-8 (byte 0xe9"),
    (b'["not", "an", "object"]\n', "line 1", "expected a JSON object"),
    (jsonl({"id": "d1", "title": "T"}), "line 1", "field 'text': the document has no text"),
    (jsonl({"id": "d1", "title": "T", "text": "  \n "}), "line 1", "field 'text': is empty"),
    (jsonl({"id": "d1", "title": "T", "sections": [{"name": "A", "paragraphs": [""]}]}), "line 1", "field 'sections': the document has no text"),
    (jsonl({"id": ["d1"], "title": "T", "text": "x"}), "line 1", "field 'id': expected a string, got list"),
    (jsonl({"id": 7, "title": "T", "text": "x"}), "line 1", "field 'id': expected a string, got int"),
    (jsonl({"id": "d1", "text": "x"}), "line 1", "field 'title': missing"),
    (jsonl({"id": "d1", "title": "T", "text": "x", "sections": []}), "line 1", "field 'text': give either 'text' or 'sections'"),
    (jsonl({"id": "d1", "title": "T", "sections": [{"name": "A", "paragraphs": "text"}]}), "line 1", "field 'sections[0].paragraphs': expected a list"),
    (jsonl({"id": "d1", "title": "T", "sections": [{"name": "A", "paragraphs": ["a", 3]}]}), "line 1", "field 'sections[0].paragraphs[1]': expected a string"),
    (jsonl({"id": "d1", "title": "T", "sections": [{"name": 3, "paragraphs": ["a"]}]}), "line 1", "field 'sections[0].name': expected a string"),
    (jsonl({"id": "d1", "title": "T", "text": "x", "questions": [{"id": "q", "question": "a?"}]},
           {"id": "d1", "title": "T", "text": "x", "questions": [{"id": "q", "question": "b?"}]}), "line 2",
     "field 'questions[0].id': question id 'q' already appears on line 1 with a different question"),
    (jsonl({"id": "d1", "title": "T", "text": "x", "questions": [{"id": "q"}]}), "line 1", "field 'questions[0].question': missing"),
    (jsonl({"id": "d1", "title": "T", "text": "x", "questions": [{"id": "q", "question": "a?"}, {"id": "q", "question": "b?"}]}), "line 1", "field 'questions[1].id': question id 'q' appears twice"),
    (jsonl({"id": "d1", "title": "T", "text": "x", "questions": [{"question": "a?", "options": ["a", 1]}]}), "line 1", "field 'questions[0].options': expected a list of strings"),
    (jsonl({"id": "d1", "title": "T", "text": "one"}, {"id": "d1", "title": "T", "text": "two"}), "line 2", "field 'id': document 'd1' already appears on line 1 with different content"),
    (b"\n  \n", None, "no documents"),
]


@pytest.mark.parametrize(("data", "line", "message"), BAD_BATCHES)
def test_bad_batches_name_file_line_and_field(data: bytes, line: str | None, message: str) -> None:
    with pytest.raises(InvalidBatch) as err:
        parse_batch(data, "inbox/bad.jsonl")
    text = str(err.value)
    assert text.startswith("inbox/bad.jsonl: ")
    if line:
        assert f": {line}: " in text
    assert message in text
    assert "\n" not in text


@settings(max_examples=200, deadline=None)
@given(
    paragraphs=st.lists(st.lists(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=6), min_size=0, max_size=40), max_size=12),
    limit=st.integers(min_value=1, max_value=50),
)
def test_chunks_keep_every_word_in_order_and_respect_the_limit(paragraphs: list[list[str]], limit: int) -> None:
    text = "\n\n".join(" ".join(p) for p in paragraphs)
    chunks = chunk_text(text, limit)
    assert " ".join(chunks).split() == text.split()
    assert all(1 <= len(c.split()) <= limit for c in chunks)
    # greedy: a chunk is only closed when what follows would not fit into it
    sizes = [len(c.split()) for c in chunks]
    assert all(a + b > limit for a, b in zip(sizes, sizes[1:]))


@settings(max_examples=50, deadline=None)
@given(
    docs=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.text(alphabet="xyz ", min_size=1, max_size=30).filter(str.strip)),
        min_size=1, max_size=8,
    )
)
def test_batch_accepts_exactly_the_consistent_documents(docs: list[tuple[str, str]]) -> None:
    data = jsonl(*({"id": i, "title": "T", "text": t} for i, t in docs))
    texts: dict[str, set[str]] = {}
    for i, t in docs:
        texts.setdefault(i, set()).add(t.strip())
    consistent = all(len(v) == 1 for v in texts.values())
    if consistent:
        batch = parse_batch(data, "b.jsonl")
        assert batch.documents["doc_id"].to_list() == list(dict.fromkeys(i for i, _ in docs))
    else:
        with pytest.raises(InvalidBatch, match="with different content"):
            parse_batch(data, "b.jsonl")


def _chunk_text_before(text: str, chunk_words: int) -> list[str]:
    """The quadratic chunker this module had before it was made linear (the oracle for
    identical output): a long paragraph's word list was re-sliced after every chunk."""
    import re

    chunks: list[str] = []
    current: list[str] = []
    count = 0
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", text)):
        words = paragraph.split()
        if not words:
            continue
        if len(words) > chunk_words:
            if current:
                chunks.append("\n\n".join(current))
                current, count = [], 0
            while len(words) > chunk_words:
                chunks.append(" ".join(words[:chunk_words]))
                words = words[chunk_words:]
            paragraph = " ".join(words)
        if current and count + len(words) > chunk_words:
            chunks.append("\n\n".join(current))
            current, count = [], 0
        current.append(paragraph)
        count += len(words)
    if current:
        chunks.append("\n\n".join(current))
    return chunks


def test_linear_chunking_gives_the_same_chunks_as_before() -> None:
    texts = [
        "\n\n".join(words(n, k * 10_000) for k, n in enumerate([10, 999, 1000, 1001, 2000, 2001, 3500, 7, 0, 12_345])),
        words(25_000),  # one long paragraph
        "  lead\n \n\n  spaced   words \t here\n\n\n\n" + words(1500) + "\n\n" + "x\n" * 700,
    ]
    sample = Path(__file__).resolve().parents[1] / "flows" / "samples" / "qasper_demo.jsonl"
    texts += ["\n\n".join(p for s in json.loads(raw)["sections"] for p in s["paragraphs"]) for raw in sample.read_bytes().splitlines()]
    for text in texts:
        for limit in (1, 7, CHUNK_WORDS):
            assert chunk_text(text, limit) == _chunk_text_before(text, limit)


@pytest.mark.parametrize(("data", "message"), [
    (jsonl({"id": "a\x00b", "title": "T", "text": "x"}), "field 'id': id contains '\\x00'"),
    (jsonl({"id": "../../etc/x", "title": "T", "text": "x"}), "field 'id': id contains '/'"),
    (jsonl({"id": "a..b", "title": "T", "text": "x"}), "field 'id': id contains '..'"),
    (jsonl({"id": "-a", "title": "T", "text": "x"}), "field 'id': id starts with '-'"),
    (jsonl({"id": "d", "title": "T", "text": "x", "questions": [{"id": "q/1", "question": "?"}]}), "field 'questions[0].id': id contains '/'"),
    (b'{"id": "d", "title": "T\\ud800", "text": "x"}\n', "field 'title': holds a lone surrogate ('\\ud800' at character 2)"),
    (b'{"id": "d", "title": "T", "text": "x", "g": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n", "nested more than 64 levels"),
    (b'{"id": "d", "title": "T", "text": "x", "n": 1' + b"0" * 5000 + b"}\n", "not valid JSON"),
])
def test_hostile_ids_and_values_name_file_line_and_field(data: bytes, message: str) -> None:
    with pytest.raises(InvalidBatch) as err:
        parse_batch(data, "b.jsonl")
    assert str(err.value).startswith("b.jsonl: line 1: ") and message in str(err.value) and "\n" not in str(err.value)


def test_limits_name_their_setting() -> None:
    from grace_core.limits import InputLimits

    doc = {"id": "d", "title": "T", "text": "\n\n".join(["para"] * 5)}
    cases = [
        (InputLimits(max_batch_bytes=10), "b.jsonl: ", "over the limit of 10 (GRACE_MAX_BATCH_BYTES)"),
        (InputLimits(max_line_bytes=10), "b.jsonl: line 1: the line is ", "over the limit of 10 (GRACE_MAX_LINE_BYTES)"),
        (InputLimits(max_field_chars=10), "b.jsonl: line 1: field 'text': 28 characters", "(GRACE_MAX_FIELD_CHARS)"),
        (InputLimits(max_paragraphs=4), "b.jsonl: line 1: field 'text': the document has 5 paragraphs", "(GRACE_MAX_PARAGRAPHS)"),
        (InputLimits(max_json_depth=1), "b.jsonl: line 1: field 'questions'", "(GRACE_MAX_JSON_DEPTH)"),
    ]
    for limits, start, end in cases:
        with pytest.raises(InvalidBatch) as err:
            parse_batch(jsonl({**doc, "questions": []}), "b.jsonl", limits=limits)
        assert str(err.value).startswith(start) and str(err.value).endswith(end), str(err.value)
    assert parse_batch(jsonl(doc), "b.jsonl", limits=InputLimits(max_paragraphs=5)).priors.height == 1


def _n_values(value: object) -> int:
    if isinstance(value, dict):
        return 1 + sum(map(_n_values, value.values()))
    if isinstance(value, list):
        return 1 + sum(map(_n_values, value))
    return 1


_JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from(["", "a,b", 'q\\"[{', "\\\\", 'x\\\\"y,{', "é,ü", "]}"]))
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["k", 'a"b', "[,", "z\\"]), inner, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["f", "g,", "h[", 'i"']), _JSON, max_size=4), piece=st.sampled_from([1, 2, 3, 7, 64]),
       ascii_only=st.booleans(), compact=st.booleans())
def test_json_values_are_counted_on_the_bytes_exactly(fields: dict, piece: int, ascii_only: bool, compact: bool) -> None:
    """The pre-parse count (strings with commas, brackets, escaped quotes and backslashes;
    pieces as small as one byte, so every state crosses a piece boundary) agrees with the parsed
    line, and names the top-level field in whose value the limit is passed."""
    import grace_core.documents as documents

    obj = {"id": "x", **fields}
    raw = json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":") if compact else (", ", ": ")).encode()
    total = _n_values(obj)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(documents, "_PIECE", piece)
        assert documents._values_over(raw, total) == (False, None)
        over, member = documents._values_over(raw, total - 1)
    assert over
    passed, crowded = 1, None
    for key, value in obj.items():
        passed += _n_values(value)
        if passed > total - 1:
            crowded = key
            break
    assert json.loads(documents._MEMBER_KEY.match(raw, member + 1).group(1)) == crowded


def test_a_wide_unknown_field_is_refused_before_parsing_naming_it() -> None:
    from grace_core.limits import InputLimits

    data = b'{"id": "d", "title": "T", "text": "a, [b], {c}", "extra": {"deep": [' + b"{}," * 20 + b"[]]}}\n"
    assert parse_batch(data, "b.jsonl", limits=InputLimits(max_json_values=30)).documents.height == 1
    with pytest.raises(InvalidBatch) as err:
        parse_batch(data, "b.jsonl", limits=InputLimits(max_json_values=20))
    assert str(err.value) == ("b.jsonl: line 1: field 'extra': the line holds more than 20 JSON values, "
                              "over the limit of 20 (GRACE_MAX_JSON_VALUES)")
