#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine: Debian packages if absent, a venv, the package.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: Java for Spark; PostgreSQL and Chromium for the tests of the production instance and the UI.
packages=()
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || packages+=(postgresql)
if [ ${#packages[@]} -gt 0 ]; then
  echo "installing ${packages[*]}"
  as_root=""
  [ "$(id -u)" -ne 0 ] && as_root="sudo"
  $as_root apt-get update -q
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends "${packages[@]}"
fi

python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[test]"
# The first Spark start resolves Delta's jars from Maven Central into Ivy's cache; later runs reuse it.
.venv/bin/python -c "from quarantine_assets.engine.spark.session import build_spark_session as b; b('local[1]').stop()"
