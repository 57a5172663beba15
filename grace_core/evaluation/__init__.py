"""Evaluation metrics of the paper's tables (DESIGN §7): pure functions over answers."""
