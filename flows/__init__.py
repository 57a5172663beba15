"""Prefect flows, the settings object and the ``grace`` command: thin wiring of storage → grace_core → storage."""
