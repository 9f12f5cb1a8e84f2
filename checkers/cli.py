"""Check a history (placeholder until written)."""


def configure(parser):
    pass


def run(args):
    return 0
