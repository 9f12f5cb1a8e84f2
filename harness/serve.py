"""harness serve: a read-only web server over the results folder (the index with filters, each run's report and files, runs compared side by side).

It listens on 127.0.0.1 unless --bind names another address, answers GET
and HEAD only, and serves nothing outside the results folder (the paths'
checks are `resolve`'s, here). The pages are harness/pages/'s; this
module is the command, the HTTP and the mapping of a path to a file.

    /                 every run, newest first; ?system=&scenario=&verdict=&date=
    /compare?a=RUN&b=RUN   two runs side by side (RUN: NAME/TIMESTAMP); ?run=RUN&run=RUN&... any number
    /NAME/TIMESTAMP/  a run's files; report.html among them
    /trends.html, /nightly/NIGHT/nightly.html   `harness nightly`'s pages (linked from /)
"""

from __future__ import annotations

import ipaddress
import mimetypes
import re
import shutil
import signal
import socket
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote

from core import runs
from core.errors import UserError
from harness.pages import runs as pages
from harness.pages.html import esc

# Percent-escapes that could smuggle a separator or a dot past the check of
# path segments: / \ . and NUL. No link the harness writes needs them.
_SMUGGLED = re.compile(r"%(2f|5c|2e|00)", re.IGNORECASE)


class Refused(Exception):
    """A request path that names nothing servable: `status` is 404 (no such
    file, or a form of path the server never serves) or 403 (it leads outside
    the results folder)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def resolve(root: Path, raw_path: str) -> Path:
    """The file or folder inside `root` that `raw_path` (a request's path,
    still percent-encoded, without the query) names, with symlinks resolved.

    Refused: NUL bytes, backslashes, percent-encoded slashes, dots,
    backslashes or NULs, empty, `.`, `..` or hidden (dot) segments, anything
    not starting with `/`, and every path whose real location (symlinks
    followed) is not inside `root`."""
    if not raw_path.startswith("/") or "\x00" in raw_path or "\\" in raw_path or _SMUGGLED.search(raw_path):
        raise Refused(404, "not a path this server serves")
    try:
        decoded = unquote(raw_path, errors="strict")
    except UnicodeDecodeError:
        raise Refused(404, "not a path this server serves") from None
    if "\x00" in decoded or "\\" in decoded:
        raise Refused(404, "not a path this server serves")
    parts = decoded[1:].split("/")
    if parts and parts[-1] == "":  # a folder's trailing slash
        parts.pop()
    for part in parts:
        if part == "" or part.startswith("."):  # '', '.', '..' and hidden files
            raise Refused(404, "not a path this server serves")
    real_root = root.resolve()
    try:
        real = real_root.joinpath(*parts).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, a symlink loop, a name too long
        raise Refused(404, "no such file") from None
    if real != real_root and not real.is_relative_to(real_root):
        raise Refused(403, "outside the results folder")
    return real


DEFAULT_PORT = 8000
# Pages fetch nothing from elsewhere (reports are self-contained); the policy
# makes the browser hold them to it.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self' 'unsafe-inline' data: blob:; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# What a run folder holds that mimetypes does not know: text to read in the browser.
TEXT_SUFFIXES = {".log", ".jsonl", ".out", ".err", ".toml", ".txt", ".properties", ".cfg"}


def configure(parser) -> None:
    parser.add_argument("--results", metavar="DIR", default="results", help="the results folder (default results)")
    parser.add_argument("--port", metavar="N", type=_port, default=DEFAULT_PORT,
                        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--bind", metavar="ADDR", type=_address, default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UserError(f"--port {text!r}: not a port number (0 to 65535)")
    return port


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise UserError(f"--bind {text!r}: not an IP address (e.g. 127.0.0.1 or ::1)") from None


def run(args) -> int:
    root = Path(args.results)
    if not root.is_dir():
        raise UserError(f"--results {args.results}: no such folder")
    server = make_server(root, args.bind, args.port)
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {root.resolve()} at http://{shown}:{port}/ (read-only; Ctrl-C stops)", flush=True)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the normal end of serving
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
    return 0


def _stop(signum, frame):
    raise KeyboardInterrupt


class Server(ThreadingHTTPServer):
    """A threading HTTP server over one results folder; IPv4 or IPv6 after the address."""

    daemon_threads = True

    def __init__(self, root: Path, address: tuple[str, int]):
        self.root = root.resolve()
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # Only loopback names are accepted in Host on a loopback address: a web
        # page elsewhere cannot rebind its DNS name to 127.0.0.1 and read results.
        self.loopback = ipaddress.ip_address(address[0]).is_loopback
        super().__init__(address, Handler)


def make_server(root: Path, bind: str, port: int) -> Server:
    """The server bound to (bind, port), not yet serving; a UserError when the
    address cannot be had."""
    try:
        return Server(root, (bind, port))
    except OSError as e:
        raise UserError(f"cannot listen on {bind} port {port}: {e.strerror or e}"
                        + (" (--port picks another; 0 any free one)" if e.errno == 98 else "")) from None


class Handler(BaseHTTPRequestHandler):
    """GET and HEAD over the results folder; every other method is refused."""

    server: Server
    server_version = "harness-serve"

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _refuse_method(self) -> None:
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse_method

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        sys.stderr.write(f"serve: {self.address_string()} {format % args}\n")

    def _answer(self, body: bool) -> None:
        root = self.server.root
        if self.server.loopback and not self._host_is_loopback():
            return self._error(HTTPStatus.FORBIDDEN, "this server answers to localhost only")
        # The request target is taken apart by hand: urlsplit of "//x" would take x for a host.
        raw, _, query = self.path.partition("?")
        raw = raw.partition("#")[0]
        filters = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        if raw in ("/", "/index.html"):
            return self._html(index(root, {k: filters.get(k, "") for k in runs.FILTERS}), body)
        if raw == "/compare":
            entries = {r.rel: r for r in runs.runs(root)}
            # Two runs picked on the index (a, b), or any number named by `run`.
            wanted = parse_qs(query).get("run") or [filters.get("a", ""), filters.get("b", "")]
            if len(wanted) < 2 or not all(wanted):
                return self._error(HTTPStatus.BAD_REQUEST, "compare needs two runs or more: "
                                   "/compare?a=NAME/TIME&b=NAME/TIME or /compare?run=...&run=...&run=...")
            chosen = [entries.get(w) for w in wanted]
            if None in chosen:
                return self._error(HTTPStatus.NOT_FOUND, "no such run in the results folder")
            return self._html(pages.compare(chosen), body)
        try:
            path = resolve(root, raw)
        except Refused as e:
            return self._error(e.status, e.reason)
        if path.is_dir():
            if not raw.endswith("/"):
                self.send_response(HTTPStatus.MOVED_PERMANENTLY)
                self.send_header("Location", raw + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            rel = path.relative_to(root).as_posix()
            return self._html(pages.listing("" if rel == "." else rel, path), body)
        if not path.is_file():  # a socket, a fifo: nothing to read
            return self._error(HTTPStatus.NOT_FOUND, "no such file")
        self._file(path, body)

    def _host_is_loopback(self) -> bool:
        """Whether every Host header names this machine's loopback (or there is none, as in HTTP/1.0)."""
        return all(_loopback_name(h) for h in self.headers.get_all("Host") or [])

    def _headers(self, status: int, content_type: str, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()

    def _html(self, page: str, body: bool, status: int = HTTPStatus.OK) -> None:
        data = page.encode("utf-8")
        self._headers(status, "text/html; charset=utf-8", len(data))
        if body:
            self.wfile.write(data)

    def _error(self, status: int, reason: str) -> None:
        # Fixed words only: nothing of the request is echoed back.
        self._html(f"<!doctype html><title>{int(status)}</title><p>{int(status)} {esc(reason)}</p>"
                   "<p><a href='/'>all runs</a></p>", self.command != "HEAD", status)

    def _file(self, path: Path, body: bool) -> None:
        try:
            f = path.open("rb")
        except OSError:
            return self._error(HTTPStatus.NOT_FOUND, "cannot read the file")
        with f:
            size = path.stat().st_size
            self._headers(HTTPStatus.OK, content_type(path), size)
            if body:
                shutil.copyfileobj(f, self.wfile)


def index(root: Path, filters: dict[str, str]) -> str:
    """The server's index: links to the nightly pages (where `harness nightly`
    wrote trends.html), the filters, then the matching runs with a compare form."""
    entries = runs.runs(root)
    chosen = runs.select(entries, filters)
    nightly = ""
    if (root / "trends.html").is_file():
        nightly = pages.nightly_links(sorted(p.parent.name for p in root.glob("nightly/*/nightly.html")))
    form = pages.filters_form(runs.filter_options(entries), filters, len(chosen), len(entries))
    return pages.index_page(chosen, before=nightly + form, compare=True)


def _loopback_name(host: str) -> bool:
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def content_type(path: Path) -> str:
    """The Content-Type of a file of a run; text as UTF-8."""
    if path.suffix in TEXT_SUFFIXES or path.name.endswith((".log.1", ".log.2")):
        return "text/plain; charset=utf-8"
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed is None:
        return "application/octet-stream"
    if guessed.startswith("text/") or guessed in ("application/json", "image/svg+xml"):
        return f"{guessed}; charset=utf-8"
    return guessed

