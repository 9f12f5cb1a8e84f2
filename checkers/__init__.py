"""Checkers: turn a history into results (shared/HISTORY.md), with PySpark."""
