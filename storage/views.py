"""SQL of the catalog's derived views, in the order they must be created (later views use
earlier ones). Each is plain DuckDB SQL over the table views, so the catalog file shows them
in any DuckDB client.

Votes are decided in exactly one place, :func:`grace_core.decisions.decide` (each reviewer's
latest vote, majority of the decisive votes once ``quorum`` of them are in), persisted
by every round's settle step as the ``decisions`` table; every view below reads that table and
none aggregates votes itself.

- ``latest_decisions``: each claim's decision from its document's latest settle step.
- ``verdict_outcomes``: one row per claim with votes: the vote counts, the ``quorum`` in force
  and the ``outcome`` (confirm | reject | abstain | pending) of ``latest_decisions``, with
  ``decided_round`` (the settle step it comes from).
- ``deferral_outcomes``: one row per deferral (``round``, ``doc_id``, ``claim_id``; its
  ``n_assigned`` reviewers and the ``n_answered`` who voted on it) with its one ``outcome``
  (DESIGN §5, accounting per deferral): the first decision other than pending that a settle
  step after the deferral stored, up to the claim's next deferral (``decided_round``: that
  settle's round); ``abstain`` when the claim was deferred again before any was (its reviewers
  missed the deadline: ``decided_round`` is the next deferral's round); else ``pending``. Only
  the first stored decision counts, so a row changes once, pending → decided, and never
  after; the claim is never deferred again after a confirm or reject, so the one deferral
  decided confirm is the one whose settle step promoted the claim. ``audit``: an audit sample
  (table ``audits``).
- ``claim_status``: the latest status and scores of every scored claim, with its review
  ``decision`` (null when never voted on) and, for a Boundary claim, the ``reach`` and
  ``prior_distance`` its scoring stored (table ``review_inputs``). Scoring is per document, so
  a claim's latest row is its row in the latest round its document was scored.
- ``claim_texts``: one row per unique claim: its text, first round, number of sources it was
  decomposed from and ``from_response`` (decomposed from some sampled response). Join it to
  ``claim_status`` ``USING (doc_id, claim_id)`` when the text is wanted (kept apart so status
  queries need not aggregate every claim row).
- ``round_metrics``: per round with a scoring step (one that rescored no document included), as
  of the end of that round (a document not rescored in a round keeps its previous scores):
  counts per status; PCR (grounded response claims / all
  response claims); KF (boundary claims per document); the round's own deferrals (audit
  samples left out) counted by their ``deferral_outcomes`` — ``n_confirmed, n_rejected,
  n_abstained`` and ``n_pending`` (a vote is decided in the next round's settle step), so
  Σ ``n_confirmed`` over rounds is the claims review promoted and a row, once its deferrals
  are decided, never changes; yield =
  confirmed / deferred and ``yield_decided`` = confirmed / (confirmed + rejected); cascade =
  claims per document that turned from Boundary to Grounded since the previous scored round
  without a confirm decision of their own (DESIGN §7, as :func:`grace_core.round.cascaded`).
  The status, coverage and cascade figures sum the counts each scoring stored (table
  ``scoring_counts``, :func:`grace_core.metrics.scoring_counts`), so the view never joins claims
  to claims and stays within the catalog's memory limit at any size.
  Every claim counted confirmed has been promoted: a decision and its promotion are one commit.
  Audit claims (table ``audits``) are left out of the deferral figures. Audited precision
  (:mod:`grace_core.audit`): of the Grounded claims audited in the round and decided (confirm
  or reject) so far, ``n_audited_grounded`` and ``grounded_precision`` = confirmed share with
  its 95% Wilson interval ``grounded_precision_low, _high``
  (:func:`grace_core.intervals.wilson_interval`); of the audited Refuted claims,
  ``n_audited_refuted`` and ``refuted_false`` = rejected share (really false) with
  ``refuted_false_low, _high``; the ``cum_*`` columns pool the audits of all rounds up to it.
  Null when nothing audited is decided; an audit is decided in the next round's settle step.
  User questions (table ``queries``, :mod:`grace_core.queries`): ``n_questions_rechecked``
  earlier unanswered ``grace ask`` questions asked again after the round's dispatch, of which
  ``n_questions_answered`` the knowledge base now answers.
- ``round_costs``: per round (of ``round_metrics`` or with model calls or votes), the cost of
  knowledge: ``n_llm_calls`` (every call made, failures included; a cache replay is not a call),
  ``tokens`` (prompt + completion), ``cost_usd`` (what the backend priced; 0 offline),
  ``expert_seconds`` (the seconds reviewers reported on the votes answering that round's
  deferrals), the round's ``n_confirmed`` (its deferrals decided confirm so far, as
  ``round_metrics``) and each of the four per confirmed claim (null when none).
- ``review_queue``: open deferrals: each claim × reviewer's latest deferral that this reviewer
  has not answered and that is not decided for good (confirm or reject), with the claim's
  text, current status and decision; ``overdue`` once past its deadline (the flows return
  overdue claims to the pool).
- ``reviewer_stats``: per round and reviewer: counts per verdict, mean seconds per verdict,
  agreement (share of their votes of the round, on claims with ≥ 2 votes in it, that equal the
  claim's decided outcome) and the round's Fleiss' kappa over claims with ≥ 2 votes
  (categories confirm, reject, abstain; each reviewer's latest vote of the round, p_j pooled
  over all votes, so items may have different numbers of raters); ``agreement`` compares a
  vote with the outcome of the deferral it answered (``deferral_outcomes``); beside them each
  reviewer's ``reliability``: their latest Dawid–Skene accuracy (table
  ``reviewer_reliability``, :mod:`grace_core.reliability`, estimated over every vote of the lake
  at each round's scoring step; what weighted decisions use) with ``reliability_overlap``, the
  confirm/reject votes it rests on (null and 0 without overlap). A reviewer who answers at
  random scores about 1/2 and one who always contradicts the truth near 0; a reviewer whom the
  others outvote is not thereby wrong (the estimate weighs each reviewer by their record).
"""

from __future__ import annotations

_LATEST_VOTES = """
    SELECT * FROM verdicts
    QUALIFY row_number() OVER (PARTITION BY round, doc_id, claim_id, reviewer ORDER BY created_at DESC) = 1
"""

def _audited_columns() -> str:
    """The ``audited`` columns of ``round_metrics``: per audited status (grounded → its
    precision, refuted → the share really false) and scope (the round, cumulative) the number
    audited, the estimate and its Wilson interval."""
    columns = []
    for status, metric in (("grounded", "grounded_precision"), ("refuted", "refuted_false")):
        for scope, prefix, count in (("round", "", f"n_audited_{status}"), ("cumulative", "cum_", f"cum_audited_{status}")):
            where = f"FILTER (WHERE status = '{status}' AND scope = '{scope}')"
            columns += [f"coalesce(max(n) {where}, 0) AS {count}", f"max(p) {where} AS {prefix}{metric}",
                        f"max(low) {where} AS {prefix}{metric}_low", f"max(high) {where} AS {prefix}{metric}_high"]
    return ",\n".join(" " * 19 + c for c in columns)


DERIVED_VIEWS: dict[str, str] = {
    "latest_decisions": """
        SELECT d.* FROM decisions d
        JOIN (SELECT doc_id, max(round) AS round FROM decisions GROUP BY doc_id) l
          ON l.doc_id = d.doc_id AND l.round = d.round
    """,
    "verdict_outcomes": """
        SELECT round AS decided_round, doc_id, claim_id, n_votes, n_confirm, n_reject, n_abstain, quorum,
               decision AS outcome
        FROM latest_decisions
    """,
    "deferral_outcomes": """
        WITH d AS (
            SELECT round, doc_id, claim_id, count(DISTINCT reviewer) AS n_assigned,
                   lead(round) OVER (PARTITION BY doc_id, claim_id ORDER BY round) AS next_round
            FROM deferrals GROUP BY round, doc_id, claim_id
        ),
        settled AS (
            SELECT d.round, d.doc_id, d.claim_id, x.round AS decided_round, x.decision
            FROM d JOIN decisions x
              ON x.doc_id = d.doc_id AND x.claim_id = d.claim_id AND x.round > d.round
             AND (d.next_round IS NULL OR x.round <= d.next_round)
            WHERE x.decision <> 'pending'
            QUALIFY row_number() OVER (PARTITION BY d.round, d.doc_id, d.claim_id ORDER BY x.round) = 1
        ),
        answers AS (
            SELECT round, doc_id, claim_id, count(DISTINCT reviewer) AS n_answered FROM verdicts GROUP BY ALL
        )
        SELECT d.round, d.doc_id, d.claim_id, d.n_assigned, coalesce(a.n_answered, 0) AS n_answered,
               CASE WHEN s.decision IS NOT NULL THEN s.decision WHEN d.next_round IS NOT NULL THEN 'abstain' ELSE 'pending' END AS outcome,
               CASE WHEN s.decision IS NOT NULL THEN s.decided_round ELSE d.next_round END AS decided_round,
               EXISTS (SELECT 1 FROM audits u WHERE u.round = d.round AND u.doc_id = d.doc_id AND u.claim_id = d.claim_id) AS audit
        FROM d
        LEFT JOIN settled s ON s.round = d.round AND s.doc_id = d.doc_id AND s.claim_id = d.claim_id
        LEFT JOIN answers a ON a.round = d.round AND a.doc_id = d.doc_id AND a.claim_id = d.claim_id
    """,
    "claim_status": """
        WITH latest AS (SELECT doc_id, max(round) AS round FROM scores GROUP BY doc_id)
        SELECT s.doc_id, s.claim_id, s.status, s.round AS scored_round, s.confidence, s.priority,
               s.closeness, s.closeness_norm, s.betweenness, s.novelty, s.in_prior, s.contradicted, s.rejected,
               d.decision, r.reach, r.prior_distance
        FROM scores s
        JOIN latest l ON l.doc_id = s.doc_id AND l.round = s.round
        LEFT JOIN latest_decisions d ON d.doc_id = s.doc_id AND d.claim_id = s.claim_id
        LEFT JOIN review_inputs r ON r.doc_id = s.doc_id AND r.claim_id = s.claim_id AND r.round = s.round
    """,
    "claim_texts": """
        SELECT doc_id, claim_id, arg_min(text, round) AS text, min(round) AS first_round,
               count(DISTINCT source_id) AS n_sources,
               bool_or(source_kind = 'response') AS from_response
        FROM claims GROUP BY doc_id, claim_id
    """,
    "round_metrics": """
        WITH scored_rounds AS (SELECT DISTINCT round FROM scoring_counts UNION SELECT DISTINCT round FROM rounds WHERE stage = 'score'),
        -- each document's scorings with the one before and after it: the state at the end of a
        -- round is each document's latest scoring up to it, so the per-round counts are running
        -- sums of what each scoring changed, from the counts stored with it (table scoring_counts):
        -- work grows with the documents scored, never with the claims
        scorings AS (
            SELECT *, lag(round) OVER (PARTITION BY doc_id ORDER BY round) AS prev_round,
                   lead(round) OVER (PARTITION BY doc_id ORDER BY round) AS next_round
            FROM scoring_counts
        ),
        changes AS (
            SELECT c.round, count(*) FILTER (WHERE c.prev_round IS NULL) AS n_documents,
                   sum(c.n_claims - coalesce(p.n_claims, 0)) AS n_claims,
                   sum(c.n_grounded - coalesce(p.n_grounded, 0)) AS n_grounded,
                   sum(c.n_boundary - coalesce(p.n_boundary, 0)) AS n_boundary,
                   sum(c.n_refuted - coalesce(p.n_refuted, 0)) AS n_refuted,
                   sum(c.n_response_claims - coalesce(p.n_response_claims, 0)) AS n_response_claims,
                   sum(c.n_grounded_response_claims - coalesce(p.n_grounded_response_claims, 0)) AS n_grounded_response_claims,
                   sum(c.n_cascade) AS n_cascade
            FROM scorings c
            LEFT JOIN scoring_counts p ON p.doc_id = c.doc_id AND p.round = c.prev_round
            GROUP BY c.round
        ),
        -- response claims first decomposed after the scoring that holds them count from their
        -- first round on, until the document's next scoring (a round's pipeline rescores such a
        -- document, so this is empty there): candidates are the response rows between two
        -- scorings, and of those the claims with no response row up to the scoring. The
        -- source_kind tests name the other side of the join (always true there) so that DuckDB
        -- cannot push them into the claims scan: it then reckons with every claim row, tens per
        -- document, and hashes the scorings, not the claims (at 100,000 documents, 20M response
        -- rows: 1.4 GB of hash table and 2.7 s, against 80 MB and 0.7 s streamed)
        late_rows AS (
            SELECT c.doc_id, c.claim_id, g.round AS scored_round, g.next_round, min(c.round) AS first_round
            FROM claims c
            JOIN scorings g ON g.doc_id = c.doc_id AND c.round > g.round AND (g.next_round IS NULL OR c.round < g.next_round)
            WHERE (c.source_kind = 'response') = (g.round IS NOT NULL)
            GROUP BY ALL
        ),
        earlier AS (
            SELECT DISTINCT l.doc_id, l.claim_id, l.scored_round
            FROM late_rows l
            JOIN claims e ON e.doc_id = l.doc_id AND e.claim_id = l.claim_id AND e.round <= l.scored_round
            WHERE (e.source_kind = 'response') = (l.scored_round IS NOT NULL)
        ),
        late_responses AS (
            SELECT r.round, count(*) AS n_response_claims, count(*) FILTER (WHERE s.status = 'grounded') AS n_grounded_response_claims
            FROM late_rows l
            JOIN scores s ON s.doc_id = l.doc_id AND s.claim_id = l.claim_id AND s.round = l.scored_round
            JOIN scored_rounds r ON r.round >= l.first_round AND (l.next_round IS NULL OR r.round < l.next_round)
            WHERE NOT EXISTS (SELECT 1 FROM earlier e WHERE e.doc_id = l.doc_id AND e.claim_id = l.claim_id AND e.scored_round = l.scored_round)
            GROUP BY r.round
        ),
        running AS (
            SELECT r.round,
                   CAST(sum(coalesce(c.n_documents, 0)) OVER w AS BIGINT) AS n_documents,
                   CAST(sum(coalesce(c.n_claims, 0)) OVER w AS BIGINT) AS n_claims,
                   CAST(sum(coalesce(c.n_grounded, 0)) OVER w AS BIGINT) AS n_grounded,
                   CAST(sum(coalesce(c.n_boundary, 0)) OVER w AS BIGINT) AS n_boundary,
                   CAST(sum(coalesce(c.n_refuted, 0)) OVER w AS BIGINT) AS n_refuted,
                   CAST(sum(coalesce(c.n_response_claims, 0)) OVER w AS BIGINT) AS n_response_claims,
                   CAST(sum(coalesce(c.n_grounded_response_claims, 0)) OVER w AS BIGINT) AS n_grounded_response_claims,
                   CAST(coalesce(c.n_cascade, 0) AS BIGINT) AS n_cascade
            FROM scored_rounds r LEFT JOIN changes c ON c.round = r.round
            WINDOW w AS (ORDER BY r.round ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        ),
        per_round AS (SELECT * FROM running WHERE n_documents > 0),
        coverage AS (
            SELECT p.round, p.n_response_claims + coalesce(l.n_response_claims, 0) AS n_response_claims,
                   p.n_grounded_response_claims + coalesce(l.n_grounded_response_claims, 0) AS n_grounded_response_claims
            FROM per_round p LEFT JOIN late_responses l ON l.round = p.round
        ),
        reviewed AS (
            SELECT round, count(*) AS n_deferred,
                   count(*) FILTER (WHERE outcome = 'confirm') AS n_confirmed,
                   count(*) FILTER (WHERE outcome = 'reject') AS n_rejected,
                   count(*) FILTER (WHERE outcome = 'abstain') AS n_abstained,
                   count(*) FILTER (WHERE outcome = 'pending') AS n_pending
            FROM deferral_outcomes WHERE NOT audit
            GROUP BY round
        ),
        questions AS (
            SELECT round, count(*) AS n_questions_rechecked, count(*) FILTER (WHERE answerable) AS n_questions_answered
            FROM queries WHERE origin = 'recheck' GROUP BY round
        ),
        audit_outcomes AS (
            SELECT a.round, a.status, o.decision = CASE a.status WHEN 'grounded' THEN 'confirm' ELSE 'reject' END AS hit
            FROM audits a
            JOIN latest_decisions o ON o.doc_id = a.doc_id AND o.claim_id = a.claim_id
            WHERE o.decision IN ('confirm', 'reject')
        ),
        audit_counts AS (
            SELECT r.round, a.status, 'round' AS scope, count(*) FILTER (WHERE a.hit) AS k, count(*) AS n
            FROM scored_rounds r JOIN audit_outcomes a ON a.round = r.round GROUP BY ALL
            UNION ALL
            SELECT r.round, a.status, 'cumulative' AS scope, count(*) FILTER (WHERE a.hit) AS k, count(*) AS n
            FROM scored_rounds r JOIN audit_outcomes a ON a.round <= r.round GROUP BY ALL
        ),
        wilson AS (  -- the 95% Wilson score interval of k/n, as grace_core.intervals.wilson_interval
            SELECT round, status, scope, n, k / n AS p,
                   greatest(0.0, ((k / n) + z2 / (2 * n)) / (1 + z2 / n)
                                 - sqrt(z2) / (1 + z2 / n) * sqrt((k / n) * (1 - k / n) / n + z2 / (4 * n * n))) AS low,
                   least(1.0, ((k / n) + z2 / (2 * n)) / (1 + z2 / n)
                              + sqrt(z2) / (1 + z2 / n) * sqrt((k / n) * (1 - k / n) / n + z2 / (4 * n * n))) AS high
            FROM (SELECT *, 1.959963984540054 ** 2 AS z2 FROM audit_counts)
        ),
        audited AS (
            SELECT round,
{AUDITED_COLUMNS}
            FROM wilson GROUP BY round
        ),
        SELECT p.round, p.n_documents, p.n_claims, p.n_grounded, p.n_boundary, p.n_refuted,
               coalesce(c.n_response_claims, 0) AS n_response_claims,
               c.n_grounded_response_claims / nullif(c.n_response_claims, 0) AS pcr,
               p.n_boundary / p.n_documents AS kf,
               coalesce(r.n_deferred, 0) AS n_deferred,
               coalesce(r.n_confirmed, 0) AS n_confirmed,
               coalesce(r.n_rejected, 0) AS n_rejected,
               coalesce(r.n_abstained, 0) AS n_abstained,
               coalesce(r.n_pending, 0) AS n_pending,
               r.n_confirmed / nullif(r.n_deferred, 0) AS yield,
               r.n_confirmed / nullif(r.n_confirmed + r.n_rejected, 0) AS yield_decided,
               p.n_cascade,
               p.n_cascade / p.n_documents AS cascade,
               coalesce(au.n_audited_grounded, 0) AS n_audited_grounded,
               au.grounded_precision, au.grounded_precision_low, au.grounded_precision_high,
               coalesce(au.cum_audited_grounded, 0) AS cum_audited_grounded,
               au.cum_grounded_precision, au.cum_grounded_precision_low, au.cum_grounded_precision_high,
               coalesce(au.n_audited_refuted, 0) AS n_audited_refuted,
               au.refuted_false, au.refuted_false_low, au.refuted_false_high,
               coalesce(au.cum_audited_refuted, 0) AS cum_audited_refuted,
               au.cum_refuted_false, au.cum_refuted_false_low, au.cum_refuted_false_high,
               coalesce(q.n_questions_rechecked, 0) AS n_questions_rechecked,
               coalesce(q.n_questions_answered, 0) AS n_questions_answered
        FROM per_round p
        LEFT JOIN coverage c ON c.round = p.round
        LEFT JOIN reviewed r ON r.round = p.round
        LEFT JOIN audited au ON au.round = p.round
        LEFT JOIN questions q ON q.round = p.round
        ORDER BY p.round
    """.replace("{AUDITED_COLUMNS}", _audited_columns()),
    "round_costs": """
        WITH calls AS (
            SELECT round, count(*) AS n_llm_calls,
                   coalesce(sum(coalesce(prompt_tokens, 0) + coalesce(completion_tokens, 0)), 0) AS tokens,
                   coalesce(sum(cost_usd), 0.0) AS cost_usd
            FROM llm_calls GROUP BY round
        ),
        experts AS (SELECT round, coalesce(sum(seconds_spent), 0.0) AS expert_seconds FROM verdicts GROUP BY round),
        all_rounds AS (SELECT round FROM round_metrics UNION SELECT round FROM calls UNION SELECT round FROM experts)
        SELECT a.round, coalesce(c.n_llm_calls, 0) AS n_llm_calls, coalesce(c.tokens, 0) AS tokens,
               coalesce(c.cost_usd, 0.0) AS cost_usd, coalesce(e.expert_seconds, 0.0) AS expert_seconds,
               coalesce(m.n_confirmed, 0) AS n_confirmed,
               coalesce(c.n_llm_calls, 0) / nullif(m.n_confirmed, 0) AS llm_calls_per_confirmed,
               coalesce(c.tokens, 0) / nullif(m.n_confirmed, 0) AS tokens_per_confirmed,
               coalesce(c.cost_usd, 0.0) / nullif(m.n_confirmed, 0) AS usd_per_confirmed,
               coalesce(e.expert_seconds, 0.0) / nullif(m.n_confirmed, 0) AS expert_seconds_per_confirmed
        FROM all_rounds a
        LEFT JOIN calls c ON c.round = a.round
        LEFT JOIN experts e ON e.round = a.round
        LEFT JOIN round_metrics m ON m.round = a.round
        ORDER BY a.round
    """,
    "review_queue": """
        WITH latest AS (
            SELECT * FROM deferrals
            QUALIFY row_number() OVER (PARTITION BY doc_id, claim_id, reviewer ORDER BY round DESC, created_at DESC) = 1
                AND round = max(round) OVER (PARTITION BY doc_id, claim_id)
        )
        SELECT d.doc_id, d.claim_id, d.round, d.reviewer, d.rank, d.gain, d.priority, d.confidence,
               d.cost, d.deadline, coalesce(d.deadline < now(), false) AS overdue, d.created_at,
               cs.status, cs.decision, t.text
        FROM latest d
        LEFT JOIN claim_status cs ON cs.doc_id = d.doc_id AND cs.claim_id = d.claim_id
        LEFT JOIN (
            SELECT doc_id, claim_id, arg_min(text, round) AS text FROM claims
            WHERE (doc_id, claim_id) IN (SELECT doc_id, claim_id FROM latest)
            GROUP BY doc_id, claim_id
        ) t ON t.doc_id = d.doc_id AND t.claim_id = d.claim_id
        WHERE NOT EXISTS (
            SELECT 1 FROM verdicts v
            WHERE v.doc_id = d.doc_id AND v.claim_id = d.claim_id
              AND v.reviewer = d.reviewer AND v.round = d.round
        )
          AND coalesce(cs.decision NOT IN ('confirm', 'reject'), true)
    """,
    "reviewer_stats": f"""
        WITH votes AS ({_LATEST_VOTES}),
        items AS (
            SELECT v.round, count(*) AS n,
                   count(*) FILTER (WHERE v.verdict = 'confirm') AS a,
                   count(*) FILTER (WHERE v.verdict = 'reject') AS b,
                   count(*) FILTER (WHERE v.verdict = 'abstain') AS c
            FROM votes v GROUP BY v.round, v.doc_id, v.claim_id HAVING count(*) >= 2
        ),
        pooled AS (
            SELECT round,
                   avg((a * a + b * b + c * c - n)::DOUBLE / (n * (n - 1))) AS p_bar,
                   (sum(a) / sum(n)) ** 2 + (sum(b) / sum(n)) ** 2 + (sum(c) / sum(n)) ** 2 AS p_e
            FROM items GROUP BY round
        ),
        kappa AS (
            SELECT round, CASE WHEN p_e < 1 THEN (p_bar - p_e) / (1 - p_e) END AS fleiss_kappa FROM pooled
        ),
        reliability AS (  -- each reviewer's latest Dawid–Skene estimate (table reviewer_reliability)
            SELECT reviewer, n_overlap, accuracy FROM reviewer_reliability
            QUALIFY row_number() OVER (PARTITION BY reviewer ORDER BY round DESC) = 1
        )
        SELECT v.round, v.reviewer, count(*) AS n_verdicts,
               count(*) FILTER (WHERE v.verdict = 'confirm') AS n_confirm,
               count(*) FILTER (WHERE v.verdict = 'reject') AS n_reject,
               count(*) FILTER (WHERE v.verdict = 'abstain') AS n_abstain,
               avg(v.seconds_spent) AS mean_seconds,
               avg(CASE WHEN i.n >= 2 AND o.outcome <> 'pending' THEN (v.verdict = o.outcome)::DOUBLE END) AS agreement,
               any_value(k.fleiss_kappa) AS fleiss_kappa,
               any_value(a.accuracy) AS reliability,
               coalesce(any_value(a.n_overlap), 0) AS reliability_overlap
        FROM votes v
        LEFT JOIN deferral_outcomes o ON o.round = v.round AND o.doc_id = v.doc_id AND o.claim_id = v.claim_id
        LEFT JOIN (SELECT round, doc_id, claim_id, count(*) AS n FROM votes GROUP BY ALL) i
          ON i.round = v.round AND i.doc_id = v.doc_id AND i.claim_id = v.claim_id
        LEFT JOIN kappa k ON k.round = v.round
        LEFT JOIN reliability a ON a.reviewer = v.reviewer
        GROUP BY v.round, v.reviewer
    """,
}
