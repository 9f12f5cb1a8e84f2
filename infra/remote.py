"""One node: run commands, move files, run daemons; over SSH (paramiko) here.

`NodeShell` is the seam every provider offers: `run`, the daemon and process
helpers (all built as shell commands on `exec_bytes`) and the file moves. A
transport subclasses it with `exec_bytes`, the file moves and the
connection: `Remote` over SSH (the local, ssh and vagrant providers),
`infra.docker.DockerRemote` through the Docker API.

`Remote` opens one SSH connection per node lazily, reuses it for every call
(each command is a new channel on it) and reopens it when it died. Failures
raise `RemoteError`, a `UserError` whose one line names the node and the
command.

Daemons are started detached with `setsid`, their output appended to a log
file, their pid written to `<run_dir>/<name>.pid`, and their environment
marked `HARNESS_DAEMON=<scope>/<name>`: before the harness signals a pid it
checks that mark, so a pid reused by an unrelated process is never touched.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import select
import shlex
import socket
import threading
import time
from dataclasses import dataclass

from core.errors import UserError
from infra.state import DAEMON_ENV

log = logging.getLogger(__name__)

SIGNALS = ("KILL", "STOP", "CONT", "TERM", "INT", "HUP", "QUIT", "USR1", "USR2")
DAEMON_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# sshd refuses more than MaxSessions (10 by default) channels per connection.
MAX_CHANNELS = 8


class RemoteError(UserError):
    """A command or transfer on a node failed; the message names both."""

    def __init__(self, node: str, what: str, detail: str, result: "CommandResult | None" = None):
        self.node = node
        self.what = what
        self.detail = detail
        self.result = result
        super().__init__(one_line(f"{node}: {what}: {detail}"))


class RemoteConnectError(RemoteError):
    """The node could not be reached or would not let us in."""


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_status(text: str) -> str:
    """`exit status N` as the shell's `wait` gave it, with the signal spelled out."""
    try:
        n = int(text.split()[-1])
    except (ValueError, IndexError):
        return "an unknown exit status"
    return f"exit status {n} (killed by signal {n - 128})" if n > 128 else f"exit status {n}"


def tail_or_empty(text: str, lines: int = 3) -> str:
    """The last few non-empty lines of some output, on one line; `empty` if none."""
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept) if kept else "empty"


def short_cmd(cmd: str) -> str:
    return "`" + one_line(cmd, 120) + "`"


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


class NodeShell:
    """What every transport offers: `run` and the daemon and process helpers,
    all shell commands sent through the transport's `exec_bytes`.

    A transport defines `exec_bytes`, `write_file`, `read_file`, `put`,
    `get`, `connect`, `close` and `where`, and names itself in `transport`
    (what `harness cluster status` says reached the node); commands run under
    the node's `timeout` (see `command_line`)."""

    transport = "shell"

    def __init__(self, node: str, run_dir: str, tag_scope: str | None = None):
        self.node = node
        self.run_dir = run_dir
        self.tag_scope = tag_scope or node

    @property
    def where(self) -> str:
        return self.node

    def command_line(self, cmd: str, env: dict | None, timeout: float) -> str:
        """`timeout -k 1 T sh -c 'exports; cmd'`: the node's own `timeout` kills the
        command's process group when time is up, so a command the harness gave up
        on does not linger on the node (daemons started with setsid have left that
        group and are not touched)."""
        script = cmd
        if env:
            exports = []
            for k, v in env.items():
                if not ENV_KEY_RE.match(str(k)):
                    raise RemoteError(self.node, short_cmd(cmd), f"bad environment variable name {k!r}")
                exports.append(f"export {k}={shlex.quote(str(v))}; ")
            script = "".join(exports) + cmd
        return f"timeout -k 1 {timeout:.3f} sh -c {shlex.quote(script)}"

    def check_timed_out(self, cmd: str, status: int, started: float, timeout: float) -> None:
        """Raises when the node's `timeout` ended the command (124: it sent TERM; 137: it had to KILL)."""
        if status in (124, 137) and time.monotonic() - started >= timeout - 0.01:
            raise RemoteError(self.node, short_cmd(cmd), f"timed out after {timeout:g}s")

    def exec_bytes(self, cmd: str, timeout: float = 60, env: dict | None = None,
                   stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        """Runs `cmd` with `sh -c` on the node; returns (status, stdout, stderr) as bytes."""
        raise NotImplementedError

    def write_file(self, remote_path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes `data` to a file on the node, creating its directory."""
        raise NotImplementedError

    def read_file(self, remote_path: str) -> bytes:
        raise NotImplementedError

    def put(self, local_path: str, remote_path: str) -> None:
        """Uploads a local file to the node."""
        raise NotImplementedError

    def get(self, remote_path: str, local_path: str) -> None:
        """Downloads a file from the node."""
        raise NotImplementedError

    def connect(self):
        raise NotImplementedError

    def close(self) -> None:
        """Lets go of the transport's connection; the next call opens a new one."""
        raise NotImplementedError

    # ------------------------------------------------------------------
    # Commands

    def run(self, cmd: str, timeout: float = 60, check: bool = True, env: dict | None = None,
            stdin: bytes | None = None) -> CommandResult:
        """Runs a shell command (`sh -c`) on the node and waits for it.

        Raises RemoteError on timeout, on a lost connection, and (with `check`)
        when it exits non-zero.
        """
        status, out, err = self.exec_bytes(cmd, timeout=timeout, env=env, stdin=stdin)
        result = CommandResult(status, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        if check and status != 0:
            detail = last_line(result.stderr) or last_line(result.stdout) or "no output"
            raise RemoteError(self.node, short_cmd(cmd), f"exit status {status}: {detail}", result)
        return result

    # ------------------------------------------------------------------
    # Daemons

    def _tag(self, name: str) -> str:
        return f"{self.tag_scope}/{name}"

    def pid_file(self, name: str) -> str:
        return posixpath.join(self.run_dir, f"{name}.pid")

    def _check_name(self, name: str) -> None:
        if not DAEMON_NAME_RE.match(name):
            raise RemoteError(self.node, "daemon", f"bad daemon name {name!r}")

    def _resolve_script(self, name: str) -> str:
        """Shell that sets $p to the daemon's pid if it runs (and is ours), else exits 3."""
        tag = shlex.quote(f"{DAEMON_ENV}={self._tag(name)}")
        pidf = shlex.quote(self.pid_file(name))
        return (f"p=$(cat {pidf} 2>/dev/null); case \"$p\" in ''|*[!0-9]*) exit 3;; esac; "
                f"grep -q '^State:[[:space:]]*Z' /proc/$p/status 2>/dev/null && exit 3; "
                f"grep -qxzF {tag} /proc/$p/environ 2>/dev/null || exit 3; ")

    def start_daemon(self, name: str, argv: list[str], log_file: str, env: dict | None = None,
                     cwd: str | None = None, start_timeout: float = 20.0) -> int:
        """Starts `argv` detached from the SSH session; returns its pid.

        Output is appended to `log_file`. Refuses to start a second daemon of
        the same name while the first still runs. Returns only once the
        daemon can be recognised as ours (its exec carried the HARNESS_DAEMON
        tag), so a check right after the start never mistakes it for dead; a
        daemon that exits before that is a RemoteError with its exit status
        and the end of its log, one that is not launched within
        `start_timeout` seconds is killed and a RemoteError.
        """
        self._check_name(name)
        if not argv:
            raise RemoteError(self.node, f"start {name}", "empty command")
        environment = {DAEMON_ENV: self._tag(name), **(env or {})}
        for k in environment:
            if not ENV_KEY_RE.match(str(k)):
                raise RemoteError(self.node, f"start {name}", f"bad environment variable name {k!r}")
        assignments = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in environment.items())
        q = shlex.quote
        polls = max(1, int(start_timeout / 0.01))
        script = (
            f"({self._resolve_script(name)} echo \"already running as pid $p\" >&2; exit 0) && exit 17; "
            f"mkdir -p {q(self.run_dir)} {q(posixpath.dirname(log_file) or '/')} || exit 1; "
            f"cd {q(cwd or self.run_dir)} || exit 1; "
            # A simple command alone in the background: the shell forks once and execs
            # env, which execs setsid (no fork: the job leads no group), which execs argv.
            f"env {assignments} setsid {' '.join(q(a) for a in argv)} >>{q(log_file)} 2>&1 </dev/null & "
            f"p=$!; echo $p > {q(self.pid_file(name))}; "
            # Until env has exec'd setsid, /proc/$p/environ is this shell's, without the
            # tag, and pid_of would call the daemon dead (issue 11: "exited while
            # starting" just after a start). So wait for the tag. The child is still
            # ours to wait for here, so if it dies first its exit status is known.
            f"i=0; until grep -qxzF {q(DAEMON_ENV + '=' + self._tag(name))} /proc/$p/environ 2>/dev/null; do "
            f"  if ! kill -0 $p 2>/dev/null || grep -q '^State:[[:space:]]*Z' /proc/$p/status 2>/dev/null; then "
            f"    wait $p; echo \"exit status $?\"; tail -c 2000 {q(log_file)} 2>/dev/null; exit 18; fi; "
            f"  i=$((i+1)); if [ $i -gt {polls} ]; then kill -9 $p; exit 19; fi; sleep 0.01; "
            f"done; echo $p"
        )
        res = self.run(script, check=False, timeout=start_timeout + 30)
        what = f"start {name} ({short_cmd(' '.join(argv))})"
        if res.exit_status == 17:
            raise RemoteError(self.node, f"start {name}", last_line(res.stderr))
        if res.exit_status == 18:
            status, _, output = res.stdout.partition("\n")
            raise RemoteError(self.node, what, f"exited at once with {describe_status(status)}; "
                                               f"{log_file}: {tail_or_empty(output)}; "
                                               f"starting shell: {last_line(res.stderr) or 'no output'}", res)
        if res.exit_status == 19:
            raise RemoteError(self.node, what, f"did not start within {start_timeout:g} s (still not "
                                               f"exec'd with its {DAEMON_ENV} tag); killed it", res)
        if res.exit_status != 0:
            raise RemoteError(self.node, what,
                              f"exit status {res.exit_status}: {last_line(res.stderr) or 'no output'}", res)
        try:
            return int(res.stdout.split()[-1])
        except (ValueError, IndexError):
            raise RemoteError(self.node, f"start {name}", f"no pid in output {res.stdout!r}") from None

    def pid_of(self, name: str) -> int | None:
        """The pid of the named daemon if it is running, else None."""
        self._check_name(name)
        res = self.run(self._resolve_script(name) + "echo $p", check=False)
        if res.exit_status == 0 and res.stdout.strip().isdigit():
            return int(res.stdout.strip())
        return None

    def is_running(self, pid_or_name: int | str) -> bool:
        if isinstance(pid_or_name, int):
            res = self.run(f"kill -0 {pid_or_name} 2>/dev/null && "
                           f"! grep -q '^State:[[:space:]]*Z' /proc/{pid_or_name}/status", check=False)
            return res.exit_status == 0
        return self.pid_of(pid_or_name) is not None

    def signal(self, pid_or_name: int | str, sig: str) -> bool:
        """Sends `sig` (KILL, STOP, CONT, TERM, ...); True if a process got it.

        A named daemon is signalled as a process group (it leads one, thanks to
        setsid), so helpers it spawned get the signal too.
        """
        sig = sig.upper().removeprefix("SIG")
        if sig not in SIGNALS:
            raise RemoteError(self.node, "signal", f"unknown signal {sig!r} (one of {', '.join(SIGNALS)})")
        if isinstance(pid_or_name, int):
            res = self.run(f"kill -s {sig} {int(pid_or_name)}", check=False)
        else:
            self._check_name(pid_or_name)
            res = self.run(self._resolve_script(pid_or_name) + f"kill -s {sig} -- -$p 2>/dev/null || kill -s {sig} $p",
                           check=False)
        return res.exit_status == 0

    def process_state(self, name: str) -> str | None:
        """The named daemon's process state letter (R, S, T, D, ...); None
        when it is not running (a zombie counts as gone)."""
        pid = self.pid_of(name)
        if pid is None:
            return None
        # The state follows the last ')': the command name before it may hold spaces.
        state = self.run(f"sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f1", check=False).stdout.strip()
        return None if state in ("", "Z", "X") else state

    def describe_daemon(self, name: str) -> str:
        """What the node shows of the named daemon, for an error message: its
        pid file, and whether that pid runs, is a zombie, is gone or is now
        another process. The exit status of a daemon that died after its start
        is not known: the node's init reaped it, not the harness."""
        self._check_name(name)
        pidf = shlex.quote(self.pid_file(name))
        tag = shlex.quote(f"{DAEMON_ENV}={self._tag(name)}")
        res = self.run(
            f"p=$(cat {pidf} 2>/dev/null) || {{ echo 'no pid file'; exit 0; }}; "
            f"case \"$p\" in ''|*[!0-9]*) echo \"no pid in the pid file\"; exit 0;; esac; "
            f"if [ ! -e /proc/$p ]; then echo \"pid $p is gone\"; "
            f"elif grep -q '^State:[[:space:]]*Z' /proc/$p/status; then echo \"pid $p is a zombie\"; "
            f"elif ! grep -qxzF {tag} /proc/$p/environ; then echo \"pid $p is now another process\"; "
            f"else echo \"pid $p runs, state $(sed 's/.*) //' /proc/$p/stat | cut -d' ' -f1)\"; fi",
            check=False)
        return f"{res.stdout.strip() or 'cannot tell'}, per {self.pid_file(name)}"

    def stop_daemon(self, name: str, timeout: float = 10.0) -> bool:
        """Kills the named daemon, paused or not, and waits until it is gone."""
        self.signal(name, "CONT")
        self.signal(name, "KILL")
        return self.wait_stopped(name, timeout)

    def daemons(self) -> dict[str, int | None]:
        """Every daemon with a pid file in the run dir: name -> pid if running."""
        res = self.run(f"ls {shlex.quote(self.run_dir)} 2>/dev/null", check=False)
        names = [f[:-4] for f in res.stdout.split() if f.endswith(".pid") and DAEMON_NAME_RE.match(f[:-4])]
        return {n: self.pid_of(n) for n in names}

    def wait_stopped(self, pid_or_name: int | str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running(pid_or_name):
                return True
            time.sleep(0.05)
        return False


class Remote(NodeShell):
    """A node reached over SSH. Thread-safe; one connection, many channels."""

    transport = "ssh"

    def __init__(
        self,
        node: str,
        host: str,
        *,
        port: int = 22,
        user: str = "root",
        key_file: str | None = None,
        known_hosts: str | None = None,
        insecure: bool = False,
        run_dir: str = "/var/lib/harness/run",
        tag_scope: str | None = None,
        sudo: bool | None = None,
        connect_timeout: float = 10.0,
        connect_retry_s: float = 0.0,
    ):
        super().__init__(node, run_dir, tag_scope)
        self.host = host
        self.port = port
        self.user = user
        self.key_file = key_file
        self.known_hosts = known_hosts
        self.insecure = insecure
        self.sudo = (user != "root") if sudo is None else sudo
        self.connect_timeout = connect_timeout
        # The local provider's sshd may take a moment to listen after it forks.
        self.connect_retry_s = connect_retry_s
        self._client = None
        self._sftp = None
        self._lock = threading.Lock()
        self._sftp_lock = threading.Lock()
        self._channels = threading.BoundedSemaphore(MAX_CHANNELS)

    def __repr__(self) -> str:
        return f"Remote({self.node!r}, {self.user}@{self.host}:{self.port})"

    @property
    def where(self) -> str:
        return f"{self.node} ({self.user}@{self.host}:{self.port})"

    # ------------------------------------------------------------------
    # Connection

    def connect(self):
        """Returns the live SSH client, opening (or reopening) it if needed."""
        with self._lock:
            client = self._client
            if client is not None:
                transport = client.get_transport()
                if transport is not None and transport.is_active():
                    return client
                log.info("%s: connection is dead, reopening", self.where)
                self._close_locked()
            self._client = self._open()
            return self._client

    def _open(self):
        import paramiko

        if not logging.getLogger().isEnabledFor(logging.DEBUG):
            # paramiko logs tracebacks for failed handshakes; our error says it in one line.
            logging.getLogger("paramiko").setLevel(logging.CRITICAL)
        client = paramiko.SSHClient()
        if self.insecure:
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        else:
            path = self.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
            if os.path.exists(path):
                try:
                    client.load_host_keys(path)
                except (OSError, paramiko.SSHException, ValueError) as e:
                    raise RemoteConnectError(self.where, "reading known_hosts", f"{path}: {e}") from None
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        kwargs = dict(hostname=self.host, port=self.port, username=self.user,
                      timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                      auth_timeout=self.connect_timeout)
        if self.key_file:
            kwargs.update(key_filename=self.key_file, look_for_keys=False, allow_agent=False)
        deadline = time.monotonic() + self.connect_retry_s
        while True:
            try:
                client.connect(**kwargs)
                break
            except paramiko.BadHostKeyException:
                client.close()
                raise RemoteConnectError(self.where, "connect",
                                         "host key differs from the one in known_hosts "
                                         f"({self.known_hosts or '~/.ssh/known_hosts'}); refusing") from None
            except paramiko.AuthenticationException:
                client.close()
                key = self.key_file or "agent/default keys"
                raise RemoteConnectError(self.where, "connect",
                                         f"authentication failed for user {self.user} with key {key}") from None
            except paramiko.SSHException as e:
                client.close()
                if "not found in known_hosts" in str(e):
                    raise RemoteConnectError(
                        self.where, "connect",
                        f"host key not in known_hosts ({self.known_hosts or '~/.ssh/known_hosts'}); "
                        "add it (ssh-keyscan) or pass --ssh-insecure") from None
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                if "banner" in str(e).lower():
                    raise RemoteConnectError(self.where, "connect",
                                             "no SSH server answers there (no SSH banner)") from None
                raise RemoteConnectError(self.where, "connect", f"SSH failed: {e}") from None
            except (OSError, EOFError) as e:
                client.close()
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise RemoteConnectError(self.where, "connect", _describe_socket_error(e, self.connect_timeout)) from None
        transport = client.get_transport()
        transport.set_keepalive(15)
        # Commands are small request/response exchanges: Nagle would add ~40 ms each.
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return client

    def _close_locked(self):
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:
                pass
            self._sftp = None
        if self._client is not None:
            try:
                self._client.close()
            except Exception:
                pass
            self._client = None

    def close(self) -> None:
        """Closes the connection; the next call opens a new one."""
        with self._lock:
            self._close_locked()

    def _drop_if_dead(self):
        with self._lock:
            if self._client is not None:
                transport = self._client.get_transport()
                if transport is None or not transport.is_active():
                    self._close_locked()

    def local_address(self) -> str:
        """The address of this (control) machine as the node sees it."""
        return self.connect().get_transport().sock.getsockname()[0]

    # ------------------------------------------------------------------
    # Commands

    def _wrap(self, cmd: str, env: dict | None, timeout: float, stdin: bool = False) -> str:
        """The command line sent to sshd: `[sudo -n] ` and `command_line`.

        The channel's end of input must never reach sshd after the command has
        ended: paramiko can send that EOF after the channel's CLOSE (paramiko
        issues 1115 and 1705), and OpenSSH then drops the whole connection with
        every command on it. So a command without input reads /dev/null and no
        EOF is sent; a command with input is followed by reading the rest of it,
        so the channel stays open until our EOF has arrived.
        """
        line = self.command_line(cmd, env, timeout)
        if self.sudo:
            line = "sudo -n -- " + line
        if stdin:
            return f"{line}; s=$?; cat >/dev/null; exit $s"
        return f"exec {line} </dev/null"

    def _open_channel(self, cmd: str):
        import paramiko

        for attempt in (0, 1):
            client = self.connect()
            try:
                return client.get_transport().open_session(timeout=self.connect_timeout)
            except (paramiko.SSHException, EOFError, OSError, AttributeError) as e:
                # Nothing ran yet, so opening the channel again is safe.
                self._drop_if_dead()
                if attempt:
                    raise RemoteError(self.where, short_cmd(cmd), f"cannot open a channel: {e}") from None
                with self._lock:
                    self._close_locked()

    def exec_bytes(self, cmd: str, timeout: float = 60, env: dict | None = None,
                   stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
        wrapped = self._wrap(cmd, env, timeout, stdin=stdin is not None)
        with self._channels:
            chan = self._open_channel(cmd)
            try:
                started = time.monotonic()
                status, out, err = self._exec_on(chan, cmd, wrapped, timeout, stdin)
            finally:
                chan.close()
        self.check_timed_out(cmd, status, started, timeout)
        return status, out, err

    def _exec_on(self, chan, cmd, wrapped, timeout, stdin):
        # The node's timeout normally reports first; this deadline covers a hung node.
        deadline = time.monotonic() + timeout + 3
        out, err = bytearray(), bytearray()
        try:
            chan.exec_command(wrapped)
            if stdin is not None:
                chan.sendall(stdin)
                chan.shutdown_write()
            # sshd may send the exit status before the last output, so the command is
            # done only when both the exit status and EOF have arrived.
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if chan.exit_status_ready() and chan.eof_received:
                    break
                if chan.closed or not chan.get_transport().is_active():
                    if chan.exit_status_ready():
                        break
                    self._drop_if_dead()
                    raise RemoteError(self.node, short_cmd(cmd), "connection lost before the command finished")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RemoteError(self.node, short_cmd(cmd), f"timed out after {timeout:g}s")
                if chan.eof_received:
                    # Both streams are done; only the exit status is still on its way.
                    chan.status_event.wait(min(remaining, 0.2))
                else:
                    select.select([chan], [], [], min(remaining, 0.2))
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            status = chan.recv_exit_status()
        except RemoteError:
            raise
        except (socket.error, EOFError, OSError) as e:
            self._drop_if_dead()
            raise RemoteError(self.node, short_cmd(cmd), f"connection failed: {e}") from None
        except Exception as e:  # paramiko.SSHException and kin
            self._drop_if_dead()
            raise RemoteError(self.node, short_cmd(cmd), f"{type(e).__name__}: {e}") from None
        if status == -1:
            raise RemoteError(self.node, short_cmd(cmd), "connection lost before the command finished")
        return status, bytes(out), bytes(err)

    # ------------------------------------------------------------------
    # Files

    def _sftp_client(self):
        client = self.connect()
        with self._sftp_lock:
            if self._sftp is None or self._sftp.get_channel().get_transport() is not client.get_transport():
                self._sftp = client.open_sftp()
            return self._sftp

    def _sftp_call(self, what: str, fn):
        for attempt in (0, 1):
            try:
                return fn(self._sftp_client())
            except FileNotFoundError:
                raise
            except PermissionError as e:
                raise RemoteError(self.node, what, f"permission denied: {e}") from None
            except (OSError, EOFError) as e:
                # A dead connection is reopened once; anything else is reported.
                self._drop_if_dead()
                with self._sftp_lock:
                    self._sftp = None
                if attempt:
                    raise RemoteError(self.node, what, str(e) or type(e).__name__) from None

    def write_file(self, remote_path: str, data: bytes, mode: int = 0o644) -> None:
        """Writes `data` to a file on the node, creating its directory."""
        what = f"write {remote_path}"
        parent = posixpath.dirname(remote_path) or "/"
        if self.sudo:
            self.run(f"mkdir -p {shlex.quote(parent)} && cat > {shlex.quote(remote_path)} && "
                     f"chmod {mode:o} {shlex.quote(remote_path)}", stdin=data)
            return

        def write(sftp):
            with sftp.open(remote_path, "wb") as f:
                f.set_pipelined(True)
                f.write(data)
            sftp.chmod(remote_path, mode)

        try:
            self._sftp_call(what, write)
        except FileNotFoundError:
            self.run(f"mkdir -p {shlex.quote(parent)}")
            try:
                self._sftp_call(what, write)
            except FileNotFoundError as e:
                raise RemoteError(self.node, what, f"no such directory: {e}") from None

    def read_file(self, remote_path: str) -> bytes:
        what = f"read {remote_path}"
        if self.sudo:
            status, out, err = self.exec_bytes(f"cat {shlex.quote(remote_path)}")
            if status != 0:
                raise RemoteError(self.node, what, last_line(err.decode("utf-8", "replace")) or f"exit {status}")
            return out

        def read(sftp):
            with sftp.open(remote_path, "rb") as f:
                f.prefetch()
                return f.read()

        try:
            return self._sftp_call(what, read)
        except FileNotFoundError:
            raise RemoteError(self.node, what, "no such file") from None

    def put(self, local_path: str, remote_path: str) -> None:
        """Uploads a local file to the node."""
        what = f"put {local_path} -> {remote_path}"
        if not os.path.isfile(local_path):
            raise UserError(f"{local_path}: no such file to upload to {self.node}")
        mode = os.stat(local_path).st_mode & 0o777
        if self.sudo:
            with open(local_path, "rb") as f:
                self.write_file(remote_path, f.read(), mode)
            return
        parent = posixpath.dirname(remote_path) or "/"

        def put(sftp):
            sftp.put(local_path, remote_path)
            sftp.chmod(remote_path, mode)

        try:
            self._sftp_call(what, put)
        except FileNotFoundError:
            self.run(f"mkdir -p {shlex.quote(parent)}")
            try:
                self._sftp_call(what, put)
            except FileNotFoundError as e:
                raise RemoteError(self.node, what, str(e)) from None

    def get(self, remote_path: str, local_path: str) -> None:
        """Downloads a file from the node."""
        what = f"get {remote_path}"
        os.makedirs(os.path.dirname(os.path.abspath(local_path)), exist_ok=True)
        if self.sudo:
            data = self.read_file(remote_path)
            with open(local_path, "wb") as f:
                f.write(data)
            return
        try:
            self._sftp_call(what, lambda sftp: sftp.get(remote_path, local_path))
        except FileNotFoundError:
            raise RemoteError(self.node, what, "no such file") from None


def _describe_socket_error(e: BaseException, timeout: float) -> str:
    if isinstance(e, socket.timeout) or "timed out" in str(e):
        return f"unreachable: no answer within {timeout:g}s"
    if isinstance(e, ConnectionRefusedError) or "Unable to connect" in str(e) or "refused" in str(e).lower():
        return "unreachable: connection refused"
    if isinstance(e, socket.gaierror):
        return f"unknown host: {e.strerror or e}"
    if isinstance(e, EOFError):
        return "the server closed the connection during the handshake"
    return f"unreachable: {getattr(e, 'strerror', None) or e}"
