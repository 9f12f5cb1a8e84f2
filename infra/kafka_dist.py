"""Apache Kafka's jars without a Kafka package: resolved once with Maven.

The setup step (`make setup`, or `python -m infra.kafka_dist --version 3.9.2`)
asks Maven Central for `org.apache.kafka:kafka_2.13:<version>` and its runtime
dependencies, plus an SLF4J binding so the broker logs, and keeps them in a
cache folder laid out like Apache's binary distribution:

    .cache/kafka/<version>/libs/*.jar           the classpath
    .cache/kafka/<version>/config/log4j.properties  a console+file log config
    .cache/kafka/<version>/.complete            written last: the cache is whole

Apache's own command-line clients (`kafka-tools`: VerifiableProducer,
VerifiableConsumer, the topic and consumer-group commands), for testing
other brokers with them, are resolved on request beside the broker's jars
(`ensure_tools`, `--tools`):

    .cache/kafka/<version>/tools/*.jar          kafka-tools and what it adds
    .cache/kafka/<version>/tools/.complete

`make setup` then makes a class-data archive of the version's JVMs
(infra/kafka_archive.py), named for the JDK that made it (`class_archive`):

    .cache/kafka/<version>/cds/classes-<jdk>.jsa
    .cache/kafka/<version>/cds/.complete         written once it is there

Runs never download: `kafka_home` / `kafka_classpath` only look in the cache
and name the command that fills it when it is missing. The same layout is what
a user's `--kafka-dist` names (an Apache tarball or an unpacked folder), so a
system can run either with `java -cp '<home>/libs/*' kafka.Kafka server.properties`.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from core.class_archive import jdk_id
from core.errors import UserError, first_line

log = logging.getLogger(__name__)

# The last Kafka line with ZooKeeper mode (4.0 removed it).
DEFAULT_VERSION = "3.9.2"
SCALA = "2.13"
GROUP = "org.apache.kafka"
ARTIFACT = f"kafka_{SCALA}"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO_ROOT / ".cache" / "kafka"
COMPLETE = ".complete"
ARCHIVE_DIR = "cds"  # the class-data archive (`class_archive`), beside libs/ and tools/
# Kafka's own 3.x distribution logs through reload4j; pin its fixed release.
RELOAD4J_VERSION = "1.2.25"

_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+(?:[-.][A-Za-z0-9]+)*$")

LOG4J_PROPERTIES = """\
# Written by infra.kafka_dist: broker logs to stdout and ${kafka.logs.dir}/server.log.
log4j.rootLogger=INFO, stdout, file
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.kafka.request.logger=WARN
"""

LOG4J2_PROPERTIES = """\
# Written by infra.kafka_dist: broker logs to stdout and ${sys:kafka.logs.dir}/server.log.
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRefs = stdout, file
rootLogger.appenderRef.stdout.ref = STDOUT
rootLogger.appenderRef.file.ref = FILE
"""


def check_version(version: str) -> str:
    """Return `version` if it looks like a Kafka release number, else UserError."""
    if not isinstance(version, str) or not _VERSION_RE.match(version):
        raise UserError(f"bad Kafka version {version!r}: expected a release number such as {DEFAULT_VERSION}")
    return version


def version_home(version: str, cache_dir: str | os.PathLike = DEFAULT_CACHE) -> Path:
    """The cache folder of one version (whether or not it is filled)."""
    return Path(cache_dir) / check_version(version)


def is_cached(version: str, cache_dir: str | os.PathLike = DEFAULT_CACHE) -> bool:
    home = version_home(version, cache_dir)
    return (home / COMPLETE).is_file() and any((home / "libs").glob(f"{ARTIFACT}-*.jar"))


def kafka_home(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike = DEFAULT_CACHE) -> Path:
    """The cached Kafka home (libs/, config/) of `version`; never downloads."""
    home = version_home(version, cache_dir)
    if not is_cached(version, cache_dir):
        raise UserError(f"Kafka {version} jars are not in the cache {home} "
                        f"(run `make setup` or `python -m infra.kafka_dist --version {version}`)")
    return home


def kafka_classpath(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike = DEFAULT_CACHE) -> str:
    """A `java -cp` value for the cached jars of `version`; never downloads."""
    return str(kafka_home(version, cache_dir) / "libs") + "/*"


def class_archive(home: str | os.PathLike, java: str = "java") -> Path:
    """Where the class-data archive of the Kafka home's JVMs run by `java`
    is (or would be): named for that JDK, so another JDK's JVMs never map it."""
    key = hashlib.sha256(jdk_id(java).encode()).hexdigest()[:16]
    return Path(home) / ARCHIVE_DIR / f"classes-{key}.jsa"


def log4j_config(home: str | os.PathLike) -> Path:
    """The log config shipped in a Kafka home (ours, or an Apache distribution's)."""
    home = Path(home)
    for name in ("log4j.properties", "log4j2.yaml", "log4j2.properties"):
        if (home / "config" / name).is_file():
            return home / "config" / name
    raise UserError(f"{home}: no log4j config under config/")


def log4j_jvm_flag(home: str | os.PathLike) -> str:
    """The JVM flag that points the broker at `log4j_config(home)`."""
    path = log4j_config(home)
    if path.name.startswith("log4j2"):
        return f"-Dlog4j2.configurationFile={path}"
    return f"-Dlog4j.configuration=file:{path}"


# --------------------------------------------------------------------------
# Resolution with Maven


def known_versions(timeout_s: float = 20.0) -> list[str]:
    """Release numbers of kafka_2.13 on Maven Central (its maven-metadata.xml)."""
    url = f"{MAVEN_CENTRAL}/{GROUP.replace('.', '/')}/{ARTIFACT}/maven-metadata.xml"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            root = ElementTree.fromstring(response.read())
    except (urllib.error.URLError, OSError, ElementTree.ParseError) as e:
        reason = first_line(getattr(e, "reason", e))
        raise UserError(f"cannot read the Kafka versions from Maven Central ({url}): {reason}") from None
    return [v.text for v in root.iter("version") if v.text]


def ensure_kafka(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike = DEFAULT_CACHE,
                 quiet: bool = False) -> Path:
    """Return the folder of Kafka `version`'s jars, resolving them once with Maven.

    Concurrent callers (two test sessions, a setup and a test) serialize on a
    lock file; the folder is filled under a temporary name and renamed whole.
    """
    check_version(version)
    cache = Path(cache_dir)
    home = cache / version
    if is_cached(version, cache):
        return home / "libs"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".lock-{version}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_cached(version, cache):
            return home / "libs"
        mvn = _maven()
        versions = known_versions()
        if version not in versions:
            same_line = [v for v in versions if v.rsplit(".", 1)[0] == version.rsplit(".", 1)[0]]
            hint = f"; {', '.join(same_line)} exist" if same_line else f"; the newest is {versions[-1]}" if versions else ""
            raise UserError(f"unknown Kafka version {version}: {GROUP}:{ARTIFACT}:{version} is not on Maven Central{hint}")
        if not quiet:
            print(f"kafka_dist: resolving Kafka {version} jars from Maven Central into {home}", file=sys.stderr)
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache))
        try:
            _resolve_into(mvn, version, staging)
            staging.chmod(0o755)  # mkdtemp makes it private; brokers may run as other users
            if home.exists():  # a half-filled folder from a killed run: no .complete in it
                shutil.rmtree(home)
            staging.rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if not quiet:
            jars = len(list((home / "libs").glob("*.jar")))
            print(f"kafka_dist: {jars} jars in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return home / "libs"


def ensure_tools(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike = DEFAULT_CACHE,
                 quiet: bool = False) -> Path:
    """The folder of Apache's `kafka-tools` jars of `version` (and what they
    need beyond the broker's jars), resolved once with Maven: a classpath is
    then `libs/*` and this folder's `*`."""
    libs = ensure_kafka(version, cache_dir, quiet)
    tools = libs.parent / "tools"
    if (tools / COMPLETE).is_file():
        return tools
    with open(Path(cache_dir) / f".lock-{version}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tools / COMPLETE).is_file():
            return tools
        mvn = _maven()
        if not quiet:
            print(f"kafka_dist: resolving kafka-tools {version} from Maven Central into {tools}", file=sys.stderr)
        staging = Path(tempfile.mkdtemp(prefix=".tools-", dir=libs.parent))
        try:
            _copy_dependencies(mvn, [(GROUP, "kafka-tools", version)], staging)
            have = {p.name for p in libs.glob("*.jar")}
            for jar in staging.glob("*.jar"):
                if jar.name in have:  # the broker's classpath has it already
                    jar.unlink()
            if not any(staging.glob("kafka-tools-*.jar")):
                raise UserError(f"Maven did not deliver kafka-tools-{version}.jar")
            staging.chmod(0o755)
            (staging / COMPLETE).write_text(json.dumps({"version": version,
                                                        "jars": sorted(p.name for p in staging.glob("*.jar"))}) + "\n")
            if tools.exists():
                shutil.rmtree(tools)
            staging.rename(tools)
            # The class-data archive was made with the old jars on its class path: the JVM would refuse it.
            shutil.rmtree(libs.parent / ARCHIVE_DIR, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return tools


def tools_classpath(version: str = DEFAULT_VERSION, cache_dir: str | os.PathLike = DEFAULT_CACHE) -> str:
    """A `java -cp` value for Apache's command-line clients of `version` (resolved once)."""
    tools = ensure_tools(version, cache_dir, quiet=True)
    return f"{tools.parent / 'libs'}/*:{tools}/*"


def _maven() -> str:
    """The mvn command's path, else a UserError saying how to get it."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise UserError("mvn is not installed (run `make setup`, which installs Debian's maven)")
    return mvn


def _pom(dependencies: list[tuple[str, str, str]]) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in dependencies)
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>harness.local</groupId>
  <artifactId>kafka-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def _copy_dependencies(mvn: str, dependencies: list[tuple[str, str, str]], out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kafka-pom-") as work:
        (Path(work) / "pom.xml").write_text(_pom(dependencies))
        cmd = [mvn, "-q", "-B", "-f", str(Path(work) / "pom.xml"),
               "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies",
               f"-DoutputDirectory={out}", "-DincludeScope=runtime"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        missing = re.search(r"Could not (?:find|resolve) artifact ([^\s]+)", text)
        if missing:
            raise UserError(f"Maven cannot resolve {missing.group(1)} from Maven Central")
        errors = [line.strip() for line in text.splitlines() if "ERROR" in line]
        raise UserError(f"mvn failed resolving Kafka's jars: {(errors or ['exit status %d' % proc.returncode])[0][:300]}")


def _jar_version(libs: Path, artifact: str) -> str | None:
    for jar in libs.glob(f"{artifact}-*.jar"):
        m = re.match(rf"^{re.escape(artifact)}-(\d[^-]*(?:-[A-Za-z0-9.]+)?)\.jar$", jar.name)
        if m:
            return m.group(1)
    return None


def _resolve_into(mvn: str, version: str, home: Path) -> None:
    """Fill `home` with libs/ (Kafka, its runtime deps, a log binding) and config/."""
    kafka = (GROUP, ARTIFACT, version)
    with tempfile.TemporaryDirectory(prefix="kafka-probe-", dir=home) as probe:
        # First pass: what Kafka brings, to pick the log binding that matches it.
        _copy_dependencies(mvn, [kafka], Path(probe))
        slf4j = _jar_version(Path(probe), "slf4j-api")
        log4j2 = _jar_version(Path(probe), "log4j-core")
    binding: list[tuple[str, str, str]] = []
    if log4j2:  # Kafka 4.x logs through Log4j 2
        impl = "log4j-slf4j2-impl" if slf4j and slf4j.startswith("2.") else "log4j-slf4j-impl"
        binding = [("org.apache.logging.log4j", impl, log4j2)]
        config_name, config_text = "log4j2.properties", LOG4J2_PROPERTIES
    else:  # Kafka 3.x: SLF4J over reload4j, as Apache's distribution ships it
        binding = [("org.slf4j", "slf4j-reload4j", slf4j or "1.7.36"),
                   ("ch.qos.reload4j", "reload4j", RELOAD4J_VERSION)]
        config_name, config_text = "log4j.properties", LOG4J_PROPERTIES
    libs = home / "libs"
    _copy_dependencies(mvn, [kafka] + binding, libs)
    if not (libs / f"{ARTIFACT}-{version}.jar").is_file():
        raise UserError(f"Maven did not deliver {ARTIFACT}-{version}.jar")
    (home / "config").mkdir(exist_ok=True)
    (home / "config" / config_name).write_text(config_text)
    manifest = {"version": version, "jars": sorted(p.name for p in libs.glob("*.jar")),
                "resolved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (home / COMPLETE).write_text(json.dumps(manifest, indent=1) + "\n")


# --------------------------------------------------------------------------
# A distribution the user names (`--kafka-dist`)


@dataclass(frozen=True)
class KafkaDist:
    """Kafka binaries to ship to nodes: an unpacked home folder or a tarball."""

    path: Path
    kind: str  # "folder" or "tarball"
    version: str
    # Inside a tarball, the folder that holds libs/ (e.g. "kafka_2.13-3.9.2").
    top: str = ""


_KAFKA_JAR_RE = re.compile(r"^kafka_\d+\.\d+-(\d[^/]*?)\.jar$")
_CLASSIFIERS = ("-sources.jar", "-javadoc.jar", "-test.jar", "-tests.jar", "-test-sources.jar")


def _kafka_jar_version(name: str) -> str | None:
    """The version in a Kafka core jar's name (kafka_2.13-3.9.2.jar), else None."""
    m = _KAFKA_JAR_RE.match(name)
    return m.group(1) if m and not name.endswith(_CLASSIFIERS) else None


def resolve_kafka_dist(path: str | os.PathLike) -> KafkaDist:
    """Check what `--kafka-dist` names: a folder with libs/kafka_2.13-*.jar (an
    unpacked Apache distribution or our cache) or a .tgz/.tar.gz of one."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"--kafka-dist {p}: no such file or directory")
    if p.is_dir():
        libs = p / "libs" if (p / "libs").is_dir() else p
        for jar in sorted(libs.glob("kafka_*.jar")):
            version = _kafka_jar_version(jar.name)
            if version:
                if libs == p:
                    raise UserError(f"--kafka-dist {p}: put the jars under {p}/libs/ (the layout of Apache's distribution)")
                return KafkaDist(p.resolve(), "folder", version)
        raise UserError(f"--kafka-dist {p}: no libs/kafka_2.13-<version>.jar in this folder")
    if not tarfile.is_tarfile(p):
        raise UserError(f"--kafka-dist {p}: neither a folder nor a tar archive")
    try:
        with tarfile.open(p) as tar:
            for member in tar:
                parts = member.name.strip("./").split("/")
                if len(parts) >= 2 and parts[-2] == "libs":
                    version = _kafka_jar_version(parts[-1])
                    if version:
                        return KafkaDist(p.resolve(), "tarball", version, "/".join(parts[:-2]))
    except (tarfile.TarError, OSError, EOFError) as e:
        raise UserError(f"--kafka-dist {p}: unreadable archive ({first_line(e)})") from None
    raise UserError(f"--kafka-dist {p}: the archive has no libs/kafka_2.13-<version>.jar")


def dist_tarball(dist: KafkaDist | Path, dest_dir: str | os.PathLike) -> Path:
    """One .tgz to upload to a remote node: the tarball itself, or a folder
    packed once into `dest_dir` (reused while the folder's manifest is unchanged)."""
    if isinstance(dist, Path):
        dist = resolve_kafka_dist(dist)
    if dist.kind == "tarball":
        return dist.path
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / f"kafka-{dist.version}.tgz"
    # Nodes are prepared in parallel threads: one packs, the others reuse it.
    with _PACKING:
        newest = max(f.stat().st_mtime for f in dist.path.rglob("*") if f.is_file())
        if out.is_file() and out.stat().st_mtime >= newest:
            return out
        tmp = out.with_suffix(f".tgz.tmp{os.getpid()}")
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
            for sub in ("libs", "tools", "config"):
                if (dist.path / sub).is_dir():
                    tar.add(dist.path / sub, arcname=f"kafka-{dist.version}/{sub}")
        tmp.rename(out)
        return out


_PACKING = threading.Lock()


# --------------------------------------------------------------------------
# Entry point for the Makefile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.kafka_dist",
                                     description="Resolve Apache Kafka's jars from Maven Central into a cache, once.")
    parser.add_argument("--version", default=DEFAULT_VERSION, help=f"Kafka version (default {DEFAULT_VERSION})")
    parser.add_argument("--cache-dir", default=str(DEFAULT_CACHE), help="cache folder (default .cache/kafka)")
    parser.add_argument("--print-classpath", action="store_true", help="print the java -cp value afterwards")
    parser.add_argument("--tools", action="store_true",
                        help="also resolve kafka-tools (Apache's command-line clients) beside the jars")
    def one_line_error(message: str):
        print(f"kafka_dist: error: {message}", file=sys.stderr)
        sys.exit(2)

    parser.error = one_line_error
    args = parser.parse_args(argv)
    try:
        ensure_kafka(args.version, args.cache_dir)
        if args.tools:
            ensure_tools(args.version, args.cache_dir)
        if args.print_classpath:
            print(tools_classpath(args.version, args.cache_dir) if args.tools
                  else kafka_classpath(args.version, args.cache_dir))
    except UserError as e:
        print(f"kafka_dist: error: {e}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("kafka_dist: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
