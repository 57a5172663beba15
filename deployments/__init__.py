"""GRACE's deployments: names and schedules (``definitions``) and the settings of when and where
they run (``config``). No logic: what runs is in ``flows/``."""
