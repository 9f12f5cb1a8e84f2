#!/usr/bin/env bash
# Installs the Debian packages the harness needs, and only those still missing,
# so that a second run is quiet and quick.
set -euo pipefail

packages=(
  openjdk-17-jre-headless   # ZooKeeper, Kafka and Spark
  zookeeper                 # its jars run the ensemble (QuorumPeerMain)
  maven                     # resolves Apache Kafka's jars from Maven Central
  openssh-server openssh-client  # one sshd per local node; paramiko reaches it
  iptables conntrack iproute2    # namespaces, partitions, cutting live TCP flows
  fuse3 libfuse3-3          # the fault-injecting filesystem under data dirs
  procps psmisc             # ps, pkill, fuser for clean-up
  sudo                      # the ssh provider's non-root users (tests run the same path)
  ruby                      # tests evaluate the Vagrantfile (it cannot boot VMs here)
  docker.io debootstrap     # the docker provider: its daemon, and its node image from Debian's packages
  chromium                  # the report's browser tests (headless: no window, no network)
  python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: need root to install: ${missing[*]}" >&2
  exit 2
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
