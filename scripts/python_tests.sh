#!/usr/bin/env bash
# Builds the Python package (maturin, through pip) into a virtual environment under target/ and
# runs its pytest suite against the release `chorus` binary. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyenv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir)
"${pip[@]}" -r python/requirements-test.txt
"${pip[@]}" --force-reinstall --no-deps ./python
# The binary as `cargo test --workspace --release` builds it (a `cargo build -p chorus` would resolve
# other features and rebuild much of the dependency graph): a no-op after the test run.
cargo test --workspace --release --no-run --quiet
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests "$@"
