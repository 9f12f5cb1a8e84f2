#!/usr/bin/env bash
# Builds the Docker provider's node image from Debian's packages; no image
# registry is needed. Called by infra/docker.py's build_image (the first
# docker cluster, or `make docker-image`), which names the tag (a hash of this
# recipe) and the Python packages a node runs, and skips this script when the
# image exists.
#
#   scripts/build-node-image.sh TAG PYTHON REQUIREMENT...
#
# 1. debootstrap a minimal Debian bookworm with what a node runs (Java 17 and
#    ZooKeeper's jars, iptables and conntrack for partitions, fuse3 for the
#    faulty-disk layer, procps, python3), `docker import` it as
#    harness-node-base:TAG;
# 2. download the wheels of the node's Python packages here (with PYTHON, the
#    same Python version as the image's), and install them offline into
#    /opt/harness/venv, first on the PATH, as harness-node:TAG.
# Downloaded .debs are kept in .cache/docker/debs for the next build.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 TAG PYTHON REQUIREMENT..." >&2
  exit 2
fi
tag=$1 python=$2
shift 2

packages=(
  openjdk-17-jre-headless zookeeper   # ZooKeeper and Kafka
  iptables conntrack iproute2         # partitions, cutting live TCP flows
  fuse3 libfuse3-3                    # the fault-injecting filesystem
  procps psmisc                       # ps, kill, pkill
  python3 python3-venv                # the own broker and the faultfs
)

repo=$(cd "$(dirname "$0")/.." && pwd)
debs="$repo/.cache/docker/debs"
work=$(mktemp -d /var/tmp/harness-node-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$debs" "$work/context/wheels"

echo "docker: building the node image harness-node:$tag (debootstrap, a few minutes)"
include=$(IFS=,; echo "${packages[*]}")
debootstrap --variant=minbase --include="$include" --cache-dir="$debs" bookworm "$work/rootfs" \
  >"$work/debootstrap.log" 2>&1 || { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
tar -C "$work/rootfs" -c . | docker import - "harness-node-base:$tag" >/dev/null
rm -rf "$work/rootfs"

"$python" -m pip download -q --only-binary=:all: -d "$work/context/wheels" "$@"
cat >"$work/context/Dockerfile" <<EOF
FROM harness-node-base:$tag
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/harness/venv \\
 && /opt/harness/venv/bin/pip install -q --no-index --find-links /tmp/wheels $* \\
 && rm -rf /tmp/wheels \\
 && install -d -m 0755 /var/lib/harness/node
ENV PATH=/opt/harness/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL harness.node-image=$tag
CMD ["sleep", "infinity"]
EOF
docker build --network none -t "harness-node:$tag" "$work/context" >"$work/build.log" 2>&1 \
  || { tail -n 20 "$work/build.log" >&2; exit 1; }
echo "docker: built harness-node:$tag"
