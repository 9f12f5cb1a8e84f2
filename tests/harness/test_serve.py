"""`harness serve`: the real server in a subprocess (`python -m harness.cli
serve`), fetched over HTTP. It answers on 127.0.0.1 only, serves nothing
outside the results folder whatever the path's disguise, filters the index,
escapes what runs say, and compares two real runs side by side."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support import REPO

EVIL = "<script>alert('x')</script>"
SECRET = "the-secret-outside-the-results-folder"


class Served:
    """A `harness serve` process over one folder; its URL and log."""

    def __init__(self, results: Path, log: Path, *flags: str):
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", "--results", str(results),
                                      "--port", "0", *flags], cwd=REPO, stdout=subprocess.PIPE,
                                     stderr=log.open("w"), text=True)
        first = self.proc.stdout.readline()
        m = re.search(r"at http://([0-9.]+):(\d+)/", first)
        assert m, f"no address in {first!r}; {log.read_text()}"
        self.host, self.port = m.group(1), int(m.group(2))
        self.url = f"http://{self.host}:{self.port}"

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=20)

    def raw(self, method: str, target: str, headers: dict | None = None) -> tuple[int, bytes]:
        """A request with the target exactly as given (http.client normalises nothing)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            conn.putrequest(method, target, skip_host="Host" in (headers or {}), skip_accept_encoding=True)
            for k, v in (headers or {}).items():
                conn.putheader(k, v)
            conn.endheaders()
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=20) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()


def write_run(root: Path, rel: str, started: str, system: str, scenario: str, valid: bool | None,
              name: str | None = None) -> Path:
    """A run folder as `harness run` leaves one (run.json, results.json, a report),
    its contents written here: enough for the index and its filters."""
    path = root / rel
    path.mkdir(parents=True)
    run = {"name": name or rel.split("/")[0], "started": started, "outcome": "completed",
           "spec": {"system": system, "scenario": scenario, "nemesis": ["partition"]}}
    (path / "run.json").write_text(json.dumps(run))
    if valid is not None:
        anomalies = {"lost-write": {"count": 0 if valid else 3, "error": not valid, "examples": []}}
        (path / "results.json").write_text(json.dumps({"valid": valid, "anomalies": anomalies,
                                                       "counts": {"sends": {"ok": 10}}}))
    (path / "report.html").write_text(f"<html>report of {rel}</html>")
    return path


@pytest.fixture
def folder(tmp_path):
    """results/ with four runs, a symlink `latest` inside, symlinks out, and a secret beside it."""
    root = tmp_path / "results"
    write_run(root, "own-partition/20261101T100000Z", "2026-11-01T10:00:00Z", "own", "", True)
    write_run(root, "own-hw/20261102T100000Z", "2026-11-02T10:00:00Z", "own", "own-hw-truncation", False)
    write_run(root, "kafka-acks1/20261203T100000Z", "2026-12-03T10:00:00Z", "kafka", "kafka-acks1-leader-isolate",
              False)
    write_run(root, "evil/20261204T100000Z", "2026-12-04T10:00:00Z", "own", "", None, name=EVIL)
    write_run(root, "nightly/n1/runs/own-tiny/20261205T100000Z", "2026-12-05T10:00:00Z", "own", "", True)
    (root / "latest").symlink_to("own-partition/20261101T100000Z")
    (tmp_path / "secret.txt").write_text(SECRET)
    (root / "out").symlink_to(tmp_path / "secret.txt")
    (root / "own-partition" / "20261101T100000Z" / "up").symlink_to(tmp_path)
    (root / "etc").symlink_to("/etc")
    return root


@pytest.fixture
def served(folder, tmp_path):
    s = Served(folder, tmp_path / "serve.log")
    yield s
    assert s.stop() == 0, s.log.read_text()


def test_runs_and_their_files_are_served(served, folder):
    status, page = served.get("/")
    assert status == 200
    for rel in ("own-partition/20261101T100000Z", "own-hw/20261102T100000Z", "kafka-acks1/20261203T100000Z",
                "nightly/n1/runs/own-tiny/20261205T100000Z"):  # a nightly's runs are runs too
        assert f"href='{rel}/report.html'" in page
    assert served.get("/own-hw/20261102T100000Z/report.html") == (200, "<html>report of own-hw/20261102T100000Z</html>")
    status, listing = served.get("/own-hw/20261102T100000Z/")
    assert status == 200 and "run.json" in listing and "results.json" in listing
    # A symlink inside the folder to a place inside it is followed.
    assert served.get("/latest/report.html")[0] == 200
    status, body = served.raw("HEAD", "/own-hw/20261102T100000Z/run.json")
    assert status == 200 and body == b""


def test_nothing_outside_the_results_folder_is_served(served, folder):
    targets = [
        "/../secret.txt", "/own-partition/../../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt",
        "/own-partition%2f..%2f..%2fsecret.txt", "/..%2fsecret.txt", "/.%2e/secret.txt", "/..%5csecret.txt",
        "/..\\secret.txt", "//etc/passwd", "/etc/passwd", "/etc/", "/out",
        "/own-partition/20261101T100000Z/up/secret.txt", "/latest/up/secret.txt", "/latest/../../secret.txt",
        "/secret.txt%00.html", "/%00", f"/{folder.parent}/secret.txt", "/.latest.tmp", "/./own-partition/",
        "http://127.0.0.1/../secret.txt", "/%252e%252e/secret.txt",
    ]
    for target in targets:
        status, body = served.raw("GET", target)
        assert status in (403, 404), (target, status)
        assert SECRET.encode() not in body and b"root:" not in body, target
    # A symlink out of the folder is refused as such, not served.
    assert served.raw("GET", "/out")[0] == 403
    assert served.raw("GET", "/etc/passwd")[0] == 403


def test_only_get_and_head(served):
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        assert served.raw(method, "/")[0] == 405, method


def test_bound_to_127_0_0_1_only(served):
    assert served.host == "127.0.0.1"
    # /proc/net/tcp: the listening socket (state 0A) on our port is 127.0.0.1's alone.
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port = local.split(":")
            if state == "0A" and int(port, 16) == served.port:
                listening.append((table, address))
    assert listening == [("/proc/net/tcp", "0100007F")]
    # Another address of this machine, loopback or not, does not answer.
    others = ["127.0.0.2"] + [a for a in _local_addresses() if a != "127.0.0.1"]
    for address in others:
        with pytest.raises(OSError):
            socket.create_connection((address, served.port), timeout=3).close()
    # A page of another site whose name resolves to 127.0.0.1 is not answered.
    assert served.raw("GET", "/", {"Host": f"attacker.example:{served.port}"})[0] == 403
    assert served.raw("GET", "/", {"Host": f"localhost:{served.port}"})[0] == 200


def _local_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    return re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out)


def test_the_index_filters(served):
    def rows(query: str) -> set[str]:
        status, page = served.get("/?" + query)
        assert status == 200
        return set(re.findall(r"<td><a href='([^']+)/'>", page))

    everything = {"own-partition/20261101T100000Z", "own-hw/20261102T100000Z", "kafka-acks1/20261203T100000Z",
                  "evil/20261204T100000Z", "nightly/n1/runs/own-tiny/20261205T100000Z"}
    assert rows("") == everything
    assert rows("system=kafka") == {"kafka-acks1/20261203T100000Z"}
    assert rows("system=own&verdict=INVALID") == {"own-hw/20261102T100000Z"}
    assert rows("verdict=VALID") == {"own-partition/20261101T100000Z", "nightly/n1/runs/own-tiny/20261205T100000Z"}
    assert rows("verdict=no+results") == {"evil/20261204T100000Z"}
    assert rows("scenario=own-hw-truncation") == {"own-hw/20261102T100000Z"}
    assert rows("date=2026-12") == {"kafka-acks1/20261203T100000Z", "evil/20261204T100000Z",
                                    "nightly/n1/runs/own-tiny/20261205T100000Z"}
    assert rows("date=2026-11-02") == {"own-hw/20261102T100000Z"}
    assert rows("system=nothing") == set()


def test_what_runs_and_requests_say_is_escaped(served):
    status, page = served.get("/")
    assert EVIL not in page and "&lt;script&gt;" in page
    status, page = served.get("/?date=" + urllib.request.quote(EVIL))
    assert status == 200 and EVIL not in page and "&lt;script&gt;" in page
    status, page = served.get("/compare?a=" + urllib.request.quote(EVIL) + "&b=x")
    assert status == 404 and EVIL not in page


def test_compare_needs_two_known_runs(served):
    assert served.get("/compare")[0] == 400
    assert served.get("/compare?run=own-hw/20261102T100000Z")[0] == 400
    assert served.get("/compare?a=own-hw/20261102T100000Z&b=no/such")[0] == 404
    assert served.get("/compare?a=../secret.txt&b=own-hw/20261102T100000Z")[0] == 404


def test_compare_takes_any_number_of_runs(served):
    runs = ("own-hw/20261102T100000Z", "kafka-acks1/20261203T100000Z", "own-partition/20261101T100000Z")
    status, page = served.get("/compare?" + "&".join(f"run={r}" for r in runs))
    assert status == 200 and all(f"href='/{r}/'" in page for r in runs)
    assert "<tr class=differ><th>verdict</th><td>INVALID</td><td>INVALID</td><td>VALID</td></tr>" in page


@pytest.mark.parametrize("flags, words", [
    (["--port", "99999"], "--port"), (["--port", "x"], "--port"), (["--bind", "example.org"], "--bind"),
    (["--results", "/no/such/folder"], "--results"), (["--bogus"], "unrecognized"),
])
def test_bad_flags_are_one_line_and_exit_2(flags, words):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "serve", *flags], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_port_in_use_is_one_line_and_exit_2(served, folder):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "serve", "--results", str(folder),
                           "--port", str(served.port)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot listen" in proc.stderr, proc.stderr


def _row(page: str, key: str) -> tuple[str, str] | None:
    m = re.search(rf"<tr[^>]*><th>{re.escape(key)}</th><td>(.*?)</td><td>(.*?)</td></tr>", page)
    return (m.group(1), m.group(2)) if m else None


@pytest.mark.integration
@pytest.mark.slow
def test_compare_two_real_runs(real_runs, tmp_path):
    results, plain, buggy = real_runs
    s = Served(results, tmp_path / "serve.log")
    try:
        a, b = (r.dir.relative_to(results).as_posix() for r in (plain, buggy))
        ra, rb = (json.loads((r.dir / "results.json").read_text()) for r in (plain, buggy))
        status, page = s.get(f"/compare?a={a}&b={b}")
        assert status == 200
        # Settings that differ, marked; the same ones folded below.
        assert _row(page, "scenario") == ("", "own-bug-no-dedup")
        assert _row(page, "idempotent") == ("False", "True")
        assert _row(page, "debug_bug") == ("[]", "[&quot;no-dedup&quot;]")
        assert _row(page, "time_limit") == ("12.0", "16.0")
        assert _row(page, "nemesis") == ("[&quot;partition&quot;, &quot;kill&quot;, &quot;pause&quot;]",
                                         "[&quot;pause&quot;]")
        assert "<tr class=differ><th>scenario</th>" in page
        assert "<tr><th>nodes</th><td>3</td><td>3</td></tr>" in page
        # Anomaly counts as each run's results.json has them.
        for name in ("lost-write", "duplicate", "nonmonotonic-send"):
            got = _row(page, name)
            assert got is not None, name
            for cell, res in zip(got, (ra, rb)):
                assert cell.split(" ")[0] == str(res["anomalies"][name]["count"]), (name, got)
        assert _row(page, "sends ok") == (str(ra["counts"]["sends"]["ok"]), str(rb["counts"]["sends"]["ok"]))
        assert _row(page, "verdict")[0] == ("VALID" if ra["valid"] else "INVALID")
        # The index filters the real runs by scenario and verdict; each report is served as written.
        status, index = s.get("/?scenario=own-bug-no-dedup")
        assert f"href='{b}/'" in index and f"href='{a}/'" not in index
        verdict = "VALID" if rb["valid"] else "INVALID"
        assert f"href='{b}/'" in s.get(f"/?verdict={verdict}")[1]
        for r, rel in ((plain, a), (buggy, b)):
            status, report = s.get(f"/{rel}/report.html")
            assert status == 200 and report == (r.dir / "report.html").read_text()
        assert s.get(f"/{b}/harness.log")[0] == 200
    finally:
        assert s.stop() == 0, s.log.read_text()
