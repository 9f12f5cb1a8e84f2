"""Checkers: turn a history into results (docs/history.md), with PySpark."""
