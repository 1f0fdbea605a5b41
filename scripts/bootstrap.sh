#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine: Java if absent, a venv, the package.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  echo "java not found: installing openjdk-17-jre-headless"
  as_root=""
  [ "$(id -u)" -ne 0 ] && as_root="sudo"
  $as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends openjdk-17-jre-headless
fi

python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test]"
# The first Spark start resolves Delta's jars from Maven Central into Ivy's cache; later runs reuse it.
.venv/bin/python -c "from quarantine_assets.engine.session import build_spark_session as b; b('local[1]').stop()"
