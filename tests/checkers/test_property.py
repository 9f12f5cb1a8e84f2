"""Property: on generated histories with planted anomalies, the Spark checker,
the reference implementation and the generator's own count all agree; and
the in-process engine gives what Spark's gives."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checkers.check import Options, check_history
from checkers.registry import NAMES as ANOMALIES
from core.history.parquet import write_parquet
from lab.synthetic import ANOMALY_OF, PLANTABLE, Plan, generate
from tests.checkers.conftest import without_timing
from tests.checkers.reference import reference_counts

pytestmark = pytest.mark.spark

plans = st.builds(
    Plan,
    events=st.integers(3_000, 12_000),
    seed=st.integers(0, 2**32 - 1),
    partitions=st.integers(1, 8),
    producers=st.integers(1, 5),
    consumers=st.integers(1, 4),
    batch=st.integers(1, 40),
    **{name: st.integers(0, 4) for name in PLANTABLE},
    fail_rate=st.floats(0, 0.05),
    info_rate=st.floats(0, 0.05),
    hole_rate=st.floats(0, 0.02),
    transactions=st.sampled_from([0.0, 0.3]),
)


def test_the_generator_plants_only_anomalies_of_the_vocabulary():
    # lab.synthetic names each plantable kind by its anomaly; a name the
    # checker does not know would make the agreement below vacuous for it.
    assert set(ANOMALY_OF.values()) <= set(ANOMALIES)
    assert set(PLANTABLE) <= set(ANOMALY_OF)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=plans, parquet=st.booleans())
def test_spark_reference_and_plan_agree(spark, tmp_path_factory, plan, parquet):
    # One partition cannot hold both an unseen tail and a known final log.
    assume(plan.partitions > 1 or not plan.unseen or not (plan.lost_acked or plan.dirty_reads))
    syn = generate(plan)
    reference = reference_counts(syn.events)
    # What was planted is what the generator expects, consequences aside:
    # lost writes also skip, and a lost write with nothing read after it is unseen.
    for name in PLANTABLE:
        planted, expected = getattr(plan, name), syn.expected[ANOMALY_OF[name]]
        if name not in ("skips", "unseen", "lost", "lost_acked", "dirty_reads"):
            assert expected == planted, name
    # A lost write nobody read past is lost-acked where the final log is
    # known, else unseen; an inconsistent offset is also a dirty read there.
    assert (syn.expected["lost-write"] + syn.expected["unseen"] + syn.expected["lost-acked"]
            == plan.lost + plan.unseen + plan.lost_acked)
    assert syn.expected["unseen"] >= plan.unseen and syn.expected["lost-acked"] >= plan.lost_acked
    assert plan.dirty_reads <= syn.expected["dirty-read"] <= plan.dirty_reads + plan.inconsistent
    assert syn.expected["poll-skip"] >= plan.skips

    directory = tmp_path_factory.mktemp("syn")
    if parquet:
        path = directory / "history.parquet"
        write_parquet(syn.events, path)
    else:
        import orjson

        path = directory / "history.jsonl"
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in syn.events))
    results = check_history(path, Options(), spark=spark)
    counts = {name: a["count"] for name, a in results["anomalies"].items()}
    assert counts == {name: reference[name] for name in counts}
    assert counts == {name: syn.expected.get(name, 0) for name in counts}
    assert results["counts"]["sends"] == syn.sends
    assert results["stats"]["info_sends"] == {"read": syn.info_read, "unread": syn.info_unread}
    assert results["stats"]["info_sends"] == {"read": reference["_info_read"], "unread": reference["_info_unread"]}

    # The same history in this process, with no Spark: everything but the timing is the same.
    local = check_history(path, Options(engine="local"))
    assert without_timing(local) == without_timing(results)


@pytest.mark.parametrize("final_reads", [True, False])
def test_gen_history_plants_durability_anomalies_the_checker_finds(spark, tmp_path, capsys, final_reads):
    from harness.cli import main

    planted = ["--lost", "2", "--unseen", "2"] + (["--lost-acked", "3", "--dirty-reads", "2", "--inconsistent", "1"]
                                                   if final_reads else ["--no-final-reads"])
    assert main(["gen-history", "--events", "6000", "--seed", "4", "--out", str(tmp_path), "--format", "jsonl",
                 *planted]) == 0
    import orjson

    expected = orjson.loads((tmp_path / "expected.json").read_bytes())["anomalies"]
    results = check_history(tmp_path / "history.jsonl", Options(), spark=spark)
    counts = {name: a["count"] for name, a in results["anomalies"].items()}
    assert counts == {name: expected.get(name, 0) for name in counts}
    if final_reads:
        # Planted ones, and the consequences the generator counted (an inconsistent
        # read is also a dirty read where its partition's final log is known).
        assert counts["lost-acked"] >= 3 and counts["dirty-read"] >= 2
        # The unseen tail's partition (the last of 6) is the one the final reads did not finish.
        assert [w for w in results["warnings"] if "durability" in w] == [
            "durability of partitions 5 was not checked: the final reads did not report reaching their end"]
    else:
        assert counts["lost-acked"] == counts["dirty-read"] == 0
        assert any(w.startswith("durability was not checked") for w in results["warnings"])
