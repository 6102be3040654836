"""Shared fixtures: the repository's paths, the `chorus` binary, and small models."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def chorus_bin() -> Path:
    """The CLI these tests compare against: $CHORUS_BIN, else the release build."""
    path = Path(os.environ.get("CHORUS_BIN", REPO / "target" / "release" / "chorus"))
    if not path.is_file():
        pytest.fail(f"the chorus binary is missing at {path}: run `cargo build --release -p chorus`")
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    """Runs the CLI and fails the test with its stderr if it fails."""
    proc = subprocess.run([str(chorus_bin()), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"chorus {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def decoder():
    """The real Mimi architecture with the seeded random weights the fixtures were made with."""
    import chorus

    return chorus.MimiDecoder("random", device="cpu", max_streams=4)
