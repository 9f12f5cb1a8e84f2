"""The driver's folds: what the checker takes from a history as it validates it.

The driver reads every batch of a history once, in order, to validate it
(core/history/parquet.py, core/history/jsonl.py). Each fold is one
analysis of that read: it is made empty, given every batch in order
(`add`, a batch decoded as NumPy columns: `core.history.batches.Events`),
and then asked for what it found. Each keeps only what later batches need,
so the driver's memory follows the history's few events, not its length:

- `few.Few`: the nemesis's events and the final-reads and committed
  operations (few in any history): the faults, the final logs, the groups'
  committed reads;
- `restarts.Restarts`: the completions that restart a consumer's read order;
- `pairs.Pairs`: every operation paired with its invocation (a completion
  that answers none refuses the history), the latency histograms, the
  invocations by operation, and those never answered;
- `reads.Reads`: per partition the highest offset read and the records
  read, and per (process, partition) the lowest offset read;
- `groups.Groups`: which process belongs to which consumer group, and
  which groups record processing;
- `liveness.LivenessFacts`: what liveness's walk must know of the whole
  history, and for a history of ordinary size its chunks;
- `clock.Clock`: the first index of each stretch of the history's time
  (the buckets of the results' series);
- `transactions.Transactions`: each transaction's invocation and
  completion (the realtime order of the cycles' second pass).

Folds run in that order on each batch: `Pairs` leaves each batch's sends'
pairs on it (`Events.send_pairs`) for the folds after it. A new analysis of
every event is a new fold here and a line in `FOLDS`, not an edit of
another.
"""

from checkers.folds.clock import Clock
from checkers.folds.few import Few
from checkers.folds.groups import Groups
from checkers.folds.liveness import LivenessFacts
from checkers.folds.pairs import Pairs
from checkers.folds.reads import Reads
from checkers.folds.restarts import Restarts
from checkers.folds.transactions import Transactions

# The folds, in the order each batch is handed to them.
FOLDS = (Few, Restarts, Pairs, Reads, Groups, LivenessFacts, Clock, Transactions)
