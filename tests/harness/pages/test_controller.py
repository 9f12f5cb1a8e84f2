"""The report's section on the KRaft controller's records (harness/pages/controller.py)."""

from __future__ import annotations

from harness.pages.controller import controller_html
from tests.core.test_elections import WITH_ELR, broker, part


def test_the_section_says_each_election_and_lists_the_records():
    html = controller_html(WITH_ELR)
    assert "<li>25.0 s: n1 elected leader of partition 0 from the eligible leader replicas [n1, n2]" in html
    assert html.count("<tr>") == len(WITH_ELR) + 1


def test_the_section_escapes_what_it_shows_and_is_absent_without_records():
    assert controller_html([]) == ""
    hostile = [part(0, "<b>n1</b>", ["<b>n1</b>"]), part(2, None, [], lke=["<i>x</i>"]), part(3, "<i>x</i>", []),
               broker(4, "<script>", "fenced", 1)]
    html = controller_html(hostile)
    assert "<b>" not in html and "<i>" not in html and "<script>" not in html
    assert "&lt;i&gt;x&lt;/i&gt; elected leader of partition 0 as the last known eligible leader" in html


def test_the_section_names_the_finalized_features_escaped():
    html = controller_html(WITH_ELR, {"eligible.leader.replicas.version": 1, "transaction.version": 2})
    assert "Features finalized (its FeatureLevelRecords): eligible.leader.replicas.version 1, " \
           "transaction.version 2." in html
    assert "&lt;b&gt;" in controller_html([], {"<b>x</b>": 1}) and "<b>x" not in controller_html([], {"<b>x</b>": 1})
    assert "Features finalized" not in controller_html(WITH_ELR)
