"""The six model roles (responder, decomposer, judge, verifier, answerer, embedder), each with
a litellm implementation (any hosted or local LLM) and an offline one (embedded, deterministic,
no key and no download). Flows call :func:`~grace_core.models.factory.build_roles` and the roles' batch methods.
The package imports nothing itself: the settings read :mod:`grace_core.models.config` without
loading numpy or a model library.
"""
