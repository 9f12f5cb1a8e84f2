"""Synthetic histories with planted anomalies (placeholder until written)."""


def configure(parser):
    pass


def run(args):
    return 0
