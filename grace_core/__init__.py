"""GRACE's pure domain core: tables and values in, tables and values out.

Nothing here imports Prefect or the storage layer; see DESIGN.md §9.
"""
