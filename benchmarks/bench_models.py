"""Benchmark the model roles on QASPER dev papers.

1. Offline throughput: per paper, the priors (title + abstract, then each section) and the
   offline responder's answers to the paper's questions (3 samples each, full paper as
   context) are decomposed into claims, every unique claim and source unit is embedded, and
   every source is judged against every claim of the paper. Reported: claims per second
   through decompose + embed + judge (the responder's own time and embeddings are kept apart).
2. litellm judge cost: the same judge requests through the litellm judge (``gpt-4o-mini``
   answered by litellm's ``mock_response``), one call per source with at most K prefiltered
   claims, against the pairwise count |sources| × |claims|. Tokens are counted with
   ``litellm.token_counter`` on the prompts actually sent (pairwise: on the one-claim prompts).

Run: ``.venv/bin/python -m benchmarks.bench_models [--papers 20] [--threads 1] [--k 24]``
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from grace_core.models.cache import MemoryCallCache
from grace_core.models.config import ModelConfig
from grace_core.models.litellm_client import LiteLLMClient, litellm
from grace_core.models.litellm_roles import LiteLLMJudge, judge_messages
from grace_core.models.offline_decomposer import OfflineDecomposer
from grace_core.models.offline_embedder import OfflineEmbedder
from grace_core.models.offline_judge import OfflineJudge
from grace_core.models.offline_responder import OfflineResponder
from grace_core.models.offline_support import source_units
from grace_core.models.roles import JudgeRequest, RespondRequest
from benchmarks.shared_data import QASPER_DEV, require_data

DEFAULT_DATA = QASPER_DEV
TOKEN_MODEL = "gpt-4o-mini"


def paper_sources(paper: dict, responder: OfflineResponder) -> list[str]:
    """Priors (title + abstract, each non-empty section) and the responder's answers."""
    priors = [f"{paper['title']}\n\n{paper['abstract']}"]
    priors += ["\n\n".join(s["paragraphs"]) for s in paper["sections"] if any(p.strip() for p in s["paragraphs"])]
    full = "\n\n".join(priors)
    samples = responder.respond([RespondRequest(q["question"], full) for q in paper["questions"]])
    return priors + [r.text for rs in samples for r in rs if r.text]


def mock_judge_completion(**kwargs: Any) -> Any:
    """litellm.completion answered by ``mock_response``: a valid judge reply for the claims sent."""
    n = len(re.findall(r"^\d+\. ", kwargs["messages"][1]["content"].split("\n\nClaims:\n", 1)[1], re.MULTILINE))
    reply = json.dumps({"judgements": [{"id": i, "label": "neutral"} for i in range(1, n + 1)]})
    return litellm.completion(**kwargs, mock_response=reply)


def tokens_of(messages: list[dict[str, str]]) -> int:
    """Prompt tokens of a chat request."""
    return int(litellm.token_counter(model=TOKEN_MODEL, messages=messages))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--papers", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (2 helps only on an otherwise idle 2-core machine)")
    ap.add_argument("--k", type=int, default=ModelConfig().judge_batch_size, help="judge batch size K")
    args = ap.parse_args()

    cfg = ModelConfig(torch_threads=args.threads, judge_batch_size=args.k)
    with require_data(args.data).open(encoding="utf-8") as fh:
        papers = [json.loads(line) for _, line in zip(range(args.papers), fh, strict=False)]

    responder = OfflineResponder(OfflineEmbedder.from_config(cfg), cfg)
    embedder = OfflineEmbedder.from_config(cfg)
    decomposer, judge = OfflineDecomposer(), OfflineJudge(embedder, cfg)
    t = {"respond": 0.0, "decompose": 0.0, "embed": 0.0, "judge": 0.0}
    n_sources = n_claims = n_pairs = 0
    labels: dict[str, int] = {}
    per_paper: list[tuple[list[str], tuple[str, ...]]] = []
    for paper in papers:
        t0 = time.perf_counter()
        sources = paper_sources(paper, responder)
        t1 = time.perf_counter()
        claims = tuple(dict.fromkeys(c for d in decomposer.decompose(sources) for c in d.claims))
        t2 = time.perf_counter()
        embedder.embed(list(dict.fromkeys([u for s in sources for u in source_units(s)] + list(claims))))
        t3 = time.perf_counter()
        rows = judge.judge([JudgeRequest(s, claims) for s in sources])
        t4 = time.perf_counter()
        for key, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            t[key] += dt
        n_sources, n_claims, n_pairs = n_sources + len(sources), n_claims + len(claims), n_pairs + len(sources) * len(claims)
        for row in rows:
            for j in row:
                labels[j.label] = labels.get(j.label, 0) + 1
        per_paper.append((sources, claims))

    work = t["decompose"] + t["embed"] + t["judge"]
    print(f"## Offline roles on {len(papers)} QASPER dev papers (torch threads: {args.threads})\n")
    print(f"{n_sources} sources ({n_sources / len(papers):.1f}/paper), {n_claims} unique claims ({n_claims / len(papers):.1f}/paper), "
          f"{n_pairs} (source, claim) pairs judged; {embedder.encoded} texts embedded\n")
    print("| stage | seconds | per paper (s) |\n|---|---|---|")
    for key, dt in t.items():
        print(f"| {key}{' (not counted)' if key == 'respond' else ''} | {dt:.2f} | {dt / len(papers):.3f} |")
    print(f"\n**{n_claims / work:.0f} claims/s** through decompose + embed + judge ({n_pairs / work:.0f} pairs/s); "
          f"labels: {', '.join(f'{k} {v}' for k, v in sorted(labels.items()))}\n")

    cache = MemoryCallCache()
    client = LiteLLMClient(ModelConfig(backend="litellm", judge_model=TOKEN_MODEL, judge_batch_size=args.k, concurrency=1),
                           cache, completion=mock_judge_completion)
    llm_judge = LiteLLMJudge(client, TOKEN_MODEL, client.config, embedder)
    calls = prompt = completion = pair_calls = pair_prompt = pair_completion = 0
    one_reply = int(litellm.token_counter(model=TOKEN_MODEL, text=json.dumps({"judgements": [{"id": 1, "label": "neutral"}]})))
    for sources, claims in per_paper:
        before = len(cache.records)
        llm_judge.judge([JudgeRequest(s, claims) for s in sources])
        for rec in cache.records[before:]:
            calls += 1
            prompt += tokens_of(json.loads(rec.request)["messages"])
            completion += int(litellm.token_counter(model=TOKEN_MODEL, text=rec.response or ""))
        base = [tokens_of(judge_messages(s, [])) for s in sources]
        per_claim = [int(litellm.token_counter(model=TOKEN_MODEL, text=f"1. {c}")) for c in claims]
        pair_calls += len(sources) * len(claims)
        pair_prompt += len(claims) * sum(base) + len(sources) * sum(per_claim)
        pair_completion += len(sources) * len(claims) * one_reply
    n = len(per_paper)
    print(f"## litellm judge per paper (K = {args.k}, mock responses, tokens by litellm.token_counter for {TOKEN_MODEL})\n")
    print("| judge | calls/paper | prompt tokens/paper | completion tokens/paper |\n|---|---|---|---|")
    print(f"| batched (one call per source, ≤ K claims) | {calls / n:.1f} | {prompt / n:,.0f} | {completion / n:,.0f} |")
    print(f"| pairwise (|sources| × |claims|) | {pair_calls / n:,.0f} | {pair_prompt / n:,.0f} | {pair_completion / n:,.0f} |")
    print(f"\nbatched / pairwise: calls {calls / pair_calls:.4f}, prompt tokens {prompt / pair_prompt:.4f}")


if __name__ == "__main__":
    main()
