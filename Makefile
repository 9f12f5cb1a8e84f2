# One command sets everything up and runs the main job; one sets up and tests.
#   make run    a real chaos run on the local default, ending in report.html
#   make test   the whole test suite (what CI runs)
# Setup is idempotent: a second `make setup` does nothing and says nothing.

VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
HARNESS := $(VENV)/bin/harness
STAMP   := $(VENV)/.installed
SYSTEM_STAMP := .cache/system.stamp
# Apache Kafka's jars (infra/kafka_dist.py); 3.9.x is the last line with ZooKeeper mode.
KAFKA_VERSION ?= 3.9.2
KAFKA_STAMP := .cache/kafka/$(KAFKA_VERSION)/.complete
# Apache's command-line clients beside them (tests drive the own broker with them).
TOOLS_STAMP := .cache/kafka/$(KAFKA_VERSION)/tools/.complete
# Kafka 4 (KRaft only): the first line with eligible leader replicas on by default, and the newest.
KAFKA4_VERSIONS ?= 4.1.2 4.4.0
KAFKA4_STAMPS := $(foreach v,$(KAFKA4_VERSIONS),.cache/kafka/$(v)/.complete)
# Their kafka-tools too: from 4.2 Kafka's log dump tool (DumpLogSegments) lives there.
KAFKA4_TOOLS_STAMPS := $(foreach v,$(KAFKA4_VERSIONS),.cache/kafka/$(v)/tools/.complete)
# Each version's class-data archive of its JVMs (infra/kafka_archive.py).
KAFKA_ARCHIVE_STAMPS := $(foreach v,$(KAFKA_VERSION) $(KAFKA4_VERSIONS),.cache/kafka/$(v)/cds/.complete)

.PHONY: setup run test bench clean docker-image spark-archive
.SILENT:

setup: $(SYSTEM_STAMP) $(STAMP) $(KAFKA_STAMP) $(TOOLS_STAMP) $(KAFKA4_STAMPS) $(KAFKA4_TOOLS_STAMPS) \
	$(KAFKA_ARCHIVE_STAMPS) spark-archive

$(SYSTEM_STAMP): scripts/setup-system.sh
	scripts/setup-system.sh
	mkdir -p .cache && touch $@

$(STAMP): pyproject.toml requirements.lock
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

# Resolved from Maven Central once into .cache/kafka/<version>/ (its .complete
# is written last); order-only, so a newer venv does not resolve again.
$(KAFKA_STAMP): | $(SYSTEM_STAMP) $(STAMP)
	$(PY) -m infra.kafka_dist --version $(KAFKA_VERSION)

$(TOOLS_STAMP): | $(KAFKA_STAMP)
	$(PY) -m infra.kafka_dist --version $(KAFKA_VERSION) --tools

$(KAFKA4_STAMPS): .cache/kafka/%/.complete: | $(SYSTEM_STAMP) $(STAMP)
	$(PY) -m infra.kafka_dist --version $*

$(KAFKA4_TOOLS_STAMPS): .cache/kafka/%/tools/.complete: | .cache/kafka/%/.complete
	$(PY) -m infra.kafka_dist --version $* --tools

# The class-data archive of a version's Kafka JVMs (infra/kafka_archive.py): one
# KRaft broker started and stopped once, its classes dumped into
# .cache/kafka/<version>/cds/; a run's brokers, controllers and Kafka's tools then
# start sooner (docs/kafka.md, "Where the jars come from"). After the tools, as
# their jars are on its class path. cds/.complete is written once the archive is
# there; where the JVM cannot make one, one line, and the next setup tries again.
$(KAFKA_ARCHIVE_STAMPS): .cache/kafka/%/cds/.complete: | .cache/kafka/%/tools/.complete
	$(PY) -m infra.kafka_archive --version $*

# The Spark driver's class-data archive (checkers/spark_archive.py), made once per
# JDK and pyspark into .cache/spark/ (a check, then the dump): a cold Spark session
# starts sooner with it (docs/decisions.md, "The driver JVM's class-data archive").
# Silent when it is there already.
spark-archive: | $(SYSTEM_STAMP) $(STAMP)
	$(PY) -m checkers.spark_archive

# The docker provider's node image, built from Debian's packages once per recipe
# (infra/docker.py; a few minutes); starts dockerd if none runs. Not part of
# setup: the local default never uses it, and the first docker cluster builds
# it when missing. `make test` builds it ahead, strictly: its docker tests need it.
docker-image: | $(SYSTEM_STAMP) $(STAMP)
	$(PY) -m infra.docker image --strict

# The main job: a minute of the own broker on 5 local nodes under network
# partitions, checked, with results/latest/report.html. `harness run` exits 1
# when the checker found anomalies: for the demo that is a finding, not a
# failure, so make succeeds and says so; only 2 (the run could not be carried
# out) or another failure fails make.
run: setup
	status=0; $(HARNESS) run --nemesis partition || status=$$?; \
	if [ $$status -eq 1 ]; then \
		echo "make run: the checker found anomalies (harness run exit status 1): a finding, see the report above"; \
	elif [ $$status -ne 0 ]; then \
		echo "make run: the run could not be carried out (harness run exit status $$status)" >&2; exit $$status; \
	fi

# The whole suite, slow end-to-end cases included (they are marked `slow` so
# `pytest -m "not slow"` gives a quick loop, but CI runs them all): the
# integration tests one at a time, the rest beside them, niced (scripts/test-suite.sh).
test: setup docker-image
	scripts/test-suite.sh $(PY)

bench: setup
	$(HARNESS) bench check --out .cache/bench/check.json

clean:
	$(HARNESS) clean
