"""Hand-computed small graphs: edge typing, closeness, status, priority, confidence (DESIGN §1–§4)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from grace_core.edges import EDGE_TYPES, SOURCE_KINDS, validate_edges
from grace_core.errors import InvalidEdgeTable, InvalidSettings
from grace_core.graph import build_graphs
from grace_core.params import ScoringParams
from grace_core.scoring import score_edges

P = ScoringParams()


def edges(*rows: tuple[str, str, str, str]) -> pl.DataFrame:
    """Rows of (source_id, source_kind, claim_id, label) in one document 'd'."""
    return pl.DataFrame(
        [{"doc_id": "d", "source_id": s, "source_kind": k, "claim_id": c, "label": lab} for s, k, c, lab in rows]
    )


def by_claim(scores: pl.DataFrame) -> dict[str, dict]:
    return {r["claim_id"]: r for r in scores.iter_rows(named=True)}


def test_edge_types_follow_the_first_rule_that_holds() -> None:
    e = validate_edges(edges(
        ("p", "prior", "a", "entails"),
        ("r", "response", "a", "entails"),       # a ∈ C_P → agree
        ("r", "response", "b", "entails"),       # nothing said → neutral
        ("p", "prior", "c", "contradicts"),
        ("r", "response", "c", "entails"),       # contradicted, not entailed → contra
        ("v:x", "verified", "e", "entails"),
        ("r", "response", "e", "entails"),       # verified prior entails e → agree
        ("r", "response", "f", "entails"),       # rejected by reviewers → contra
    ))
    rejected = pl.DataFrame({"doc_id": ["d"], "claim_id": ["f"]})
    g = build_graphs(e, P, rejected=rejected)
    ids = g.node_ids.gather(g.node).to_list()
    got = {(ids[s], ids[c]): (EDGE_TYPES[t], 1 / cost) for s, c, t, cost in zip(g.src, g.dst, g.edge_type, g.cost)}
    assert got == {
        ("p", "a"): ("anchor", 3.0), ("r", "a"): ("agree", 2.0), ("r", "b"): ("neutral", 1.0),
        ("r", "c"): ("contra", 0.25), ("v:x", "e"): ("anchor", 3.0), ("r", "e"): ("agree", 2.0),
        ("r", "f"): ("contra", 0.25),
    }


def test_closeness_status_priority_and_confidence_by_hand() -> None:
    # p —(1/3)— c1 —(1/2)— r —(1)— c2 ; N = 4, one component.
    s = by_claim(score_edges(validate_edges(edges(
        ("p", "prior", "c1", "entails"), ("r", "response", "c1", "entails"), ("r", "response", "c2", "entails"),
    )), P))
    # c1: d = 1/3 (p), 1/2 (r), 3/2 (c2) → Σ = 7/3 → CC = (3/3)·3/(7/3) = 9/7
    assert s["c1"]["closeness"] == pytest.approx(9 / 7)
    # c2: d = 1 (r), 3/2 (c1), 11/6 (p) → Σ = 13/3 → CC = 9/13
    assert s["c2"]["closeness"] == pytest.approx(9 / 13)
    assert s["c1"]["status"] == "grounded" and s["c2"]["status"] == "boundary"
    assert (s["c1"]["closeness_norm"], s["c2"]["closeness_norm"]) == (1.0, 0.0)
    assert s["c1"]["confidence"] == pytest.approx(1 / (1 + math.exp(-5)))
    assert s["c2"]["confidence"] == pytest.approx(1 / (1 + math.exp(5)))
    # c2 is the only boundary claim: G_boundary = {r, c2} has 2 vertices → B = 0, B̂ = 0; N̂ = 0.5
    assert s["c2"]["novelty"] == pytest.approx(11 / 6)
    assert (s["c2"]["betweenness"], s["c2"]["betweenness_norm"], s["c2"]["novelty_norm"]) == (0.0, 0.0, 0.5)
    assert s["c2"]["priority"] == pytest.approx(0.25)
    assert s["c1"]["priority"] is None and s["c1"]["betweenness"] is None
    assert s["c1"]["novelty"] == pytest.approx(1 / 3)


def test_boundary_betweenness_and_novelty_by_hand() -> None:
    # r1 — b1 — r2 — b2 ; b3 isolated claim; prior p entails only g. Boundary: b1, b2, b3? b3 is
    # isolated (CC 0 < half the median) → refuted. G_boundary = {r1, r2, b1, b2}: a path.
    s = by_claim(score_edges(validate_edges(edges(
        ("r1", "response", "b1", "entails"), ("r2", "response", "b1", "entails"), ("r2", "response", "b2", "entails"),
        ("p", "prior", "g", "entails"), ("r1", "response", "g", "entails"), ("p", "prior", "b3", "contradicts"),
    )), P))
    assert s["b3"]["status"] == "refuted" and s["b3"]["closeness"] == 0.0
    assert s["b1"]["status"] == s["b2"]["status"] == "boundary"
    # path r1-b1-r2-b2 (n = 4): b1 lies on (r1,r2), (r1,b2) → 2 · 2/((3)(2)) = 2/3; b2 is an end → 0
    assert s["b1"]["betweenness"] == pytest.approx(2 / 3) and s["b2"]["betweenness"] == 0.0
    assert (s["b1"]["betweenness_norm"], s["b2"]["betweenness_norm"]) == (1.0, 0.0)
    # novelty: p —1/3— g —1/2— r1 —1— b1 —1— r2 —1— b2; b3 unreachable → max finite + 1
    assert s["b1"]["novelty"] == pytest.approx(1 / 3 + 1 / 2 + 1)
    assert s["b2"]["novelty"] == pytest.approx(1 / 3 + 1 / 2 + 3)
    assert s["b3"]["novelty"] == pytest.approx(1 / 3 + 1 / 2 + 3 + 1)
    assert (s["b1"]["novelty_norm"], s["b2"]["novelty_norm"]) == (0.0, 1.0)
    assert s["b1"]["priority"] == pytest.approx(0.5) and s["b2"]["priority"] == pytest.approx(0.5)


def test_status_rules() -> None:
    s = by_claim(score_edges(validate_edges(edges(
        ("p", "prior", "grounded", "entails"), ("r", "response", "grounded", "entails"),
        ("p", "prior", "contested", "entails"), ("q", "prior", "contested", "contradicts"), ("r", "response", "contested", "entails"),
        ("q", "prior", "contradicted", "contradicts"), ("r", "response", "contradicted", "entails"),
        ("r", "response", "novel", "entails"), ("r", "response", "rejected", "entails"),
    )), P, rejected=pl.DataFrame({"doc_id": ["d"], "claim_id": ["rejected"]})))
    assert {c: r["status"] for c, r in s.items()} == {
        "grounded": "grounded", "contested": "boundary", "contradicted": "refuted", "novel": "boundary", "rejected": "refuted",
    }


def test_uniformly_decent_document_refutes_nothing() -> None:
    # every claim entailed by two responses, no priors: all claims look alike → none refuted
    rows = [(f"r{i}", "response", f"c{j}", "entails") for j in range(6) for i in (j % 3, (j + 1) % 3)]
    s = score_edges(validate_edges(edges(*rows)), P)
    assert set(s["status"]) == {"boundary"}
    assert set(s["closeness_norm"]) == {0.5}  # all equal → 0.5


def test_low_closeness_refutes_only_claims_a_response_contradicts() -> None:
    # a and b are entailed by p and both responses; far1/far2 hang off r2 alone (low closeness);
    # r1 contradicts far2 only → far2 refuted, far1 stays on the frontier
    rows = [("p", "prior", c, "entails") for c in ("a", "b")] + [(r, "response", c, "entails") for r in ("r1", "r2") for c in ("a", "b")]
    rows += [("r2", "response", "far1", "entails"), ("r2", "response", "far2", "entails"), ("r1", "response", "far2", "contradicts")]
    rows += [("x", "response", "lone1", "entails"), ("y", "response", "lone2", "entails"), ("r1", "response", "lone2", "contradicts")]
    s = by_claim(score_edges(validate_edges(edges(*rows)), P))
    median = sorted(r["closeness"] for r in s.values())[len(s) // 2]
    assert s["lone1"]["closeness"] < 0.5 * median and s["lone2"]["closeness"] < 0.5 * median
    assert s["lone1"]["status"] == "boundary" and s["lone2"]["status"] == "refuted"
    assert s["a"]["status"] == "grounded"


def test_isolated_claims_from_an_extra_claims_table_are_vertices() -> None:
    e = validate_edges(edges(("p", "prior", "a", "entails"), ("r", "response", "a", "entails")))
    s = by_claim(score_edges(e, P, claims=pl.DataFrame({"doc_id": ["d"], "claim_id": ["lonely"]})))
    # nothing contradicts it: however far from the priors, it is frontier, not refuted (DESIGN §3)
    assert s["lonely"]["closeness"] == 0.0 and s["lonely"]["status"] == "boundary"
    # N = 4 (p, r, a, lonely): a reaches p and r only: CC = (2/3)·(2/(1/3 + 1/2))
    assert s["a"]["closeness"] == pytest.approx((2 / 3) * (2 / (1 / 3 + 1 / 2)))


def test_graphs_number_vertices_by_id_and_keep_one_edge_per_pair() -> None:
    e = validate_edges(pl.DataFrame([
        {"doc_id": d, "source_id": s, "source_kind": k, "claim_id": c, "label": lab} for d, s, k, c, lab in (
            ("d2", "r", "response", "z", "entails"), ("d2", "r", "response", "z", "entails"),  # judged twice: one edge
            ("d2", "p", "prior", "a", "entails"), ("d2", "r", "response", "a", "contradicts"),  # contradicts: no edge
            ("d1", "q", "prior", "m", "entails"),
        )
    ]))
    g = build_graphs(
        e, P,
        sources=pl.DataFrame({"doc_id": ["d1", "d2"], "source_id": ["v:m", "p"], "source_kind": ["verified", "response"]}),
        claims=pl.DataFrame({"doc_id": ["d3"], "claim_id": ["alone"]}),
        rejected=pl.DataFrame({"doc_id": ["d1", "d2"], "claim_id": ["z", "z"]}),  # z is no claim of d1
    )
    assert g.doc_ids.to_list() == ["d1", "d2", "d3"] and g.node_offsets.tolist() == [0, 3, 7, 8]
    ids, kinds = g.node_ids.gather(g.node).to_list(), [(SOURCE_KINDS + ("claim",))[k] for k in g.kind]
    # sources first, then claims, each in id order; a source keeps the kind of its first row
    assert list(zip(ids, kinds)) == [("q", "prior"), ("v:m", "verified"), ("m", "claim"),
                                     ("p", "prior"), ("r", "response"), ("a", "claim"), ("z", "claim"), ("alone", "claim")]
    assert g.rejected.tolist() == [False] * 6 + [True, False] and g.response_contradicted.tolist()[5] is True
    edges_of = [[(ids[a + s], ids[a + t], EDGE_TYPES[y]) for s, t, y in zip(g.src[p:q], g.dst[p:q], g.edge_type[p:q])]
                for a, p, q in zip(g.node_offsets, g.edge_offsets[:-1], g.edge_offsets[1:])]
    assert edges_of == [[("q", "m", "anchor")], [("p", "a", "anchor"), ("r", "z", "contra")], []]


@pytest.mark.parametrize(
    "weights",
    [dict(w_anchor=1.0), dict(w_agree=0.9), dict(w_contra=0.0), dict(w_neutral=2.0), dict(w_contra=-1.0)],
)
def test_weights_out_of_order_are_refused(weights: dict) -> None:
    with pytest.raises(InvalidSettings, match="w_anchor > w_agree > w_neutral > w_contra > 0"):
        ScoringParams(**weights)


def _valid() -> pl.DataFrame:
    return edges(("p", "prior", "a", "entails"), ("r", "response", "a", "entails"), ("r", "response", "b", "entails"))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.drop("label"), "e.parquet: missing column(s) label"),
        (lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 1).then(None).otherwise(pl.col("claim_id")).alias("claim_id")),
         "e.parquet: row 2: field 'claim_id' is null"),
        (lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 2).then(pl.lit("oracle")).otherwise(pl.col("source_kind")).alias("source_kind")),
         "e.parquet: row 3: field 'source_kind' has unknown value 'oracle'"),
        (lambda d: d.with_columns(pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("supports")).otherwise(pl.col("label")).alias("label")),
         "e.parquet: row 1: field 'label' has unknown value 'supports'"),
        (lambda d: pl.concat([d, edges(("x", "response", "p", "entails"))]),
         "e.parquet: row 4: field 'claim_id': id 'p' is used both as a source and as a claim in document 'd'"),
    ],
)
def test_bad_edge_tables_name_file_row_and_field(mutate, message: str) -> None:
    with pytest.raises(InvalidEdgeTable) as err:
        validate_edges(mutate(_valid()), origin="e.parquet")
    assert str(err.value).startswith(message)


def test_same_id_as_source_and_claim_in_different_documents_is_fine() -> None:
    other = pl.DataFrame([{"doc_id": "d2", "source_id": "r", "source_kind": "response", "claim_id": "p", "label": "entails"}])
    assert validate_edges(pl.concat([_valid(), other])).height == 4


def test_an_id_shared_across_documents_does_not_hide_one_used_twice_in_a_document() -> None:
    def row(doc: str, source: str, kind: str, claim: str) -> dict:
        return {"doc_id": doc, "source_id": source, "source_kind": kind, "claim_id": claim, "label": "entails"}

    table = pl.DataFrame([row("d1", "p", "prior", "a"), row("d2", "r", "response", "p"),  # 'p': source in d1, claim in d2: fine
                          row("d3", "q", "prior", "b"), row("d3", "s", "response", "q")])  # 'q': source and claim in d3
    with pytest.raises(InvalidEdgeTable, match="row 4: field 'claim_id': id 'q' is used both as a source and as a claim in document 'd3'"):
        validate_edges(table, origin="e.parquet")
