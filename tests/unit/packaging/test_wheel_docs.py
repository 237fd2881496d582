"""The installed wheel carries docs/, so mevedel:// reads the packaged
documentation wherever the package is installed, not only in a checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (path,) = out.glob("mevedel_lsp-*.whl")
    return path


def test_wheel_contains_both_packages_and_the_docs(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "mevedel_server/docs/architecture.md" in names
    assert "mevedel_server/docs/protocol.md" in names
    assert "mevedel_protocol/methods.py" in names
    assert "mevedel_server/lsp/server.py" in names


def test_installed_wheel_reads_packaged_docs(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # Run from an empty directory with the installed copy first on the path,
    # so neither the checkout nor its docs/ can answer.
    script = (
        "import mevedel_server, sys\n"
        "from mevedel_server.cli.main import main\n"
        "print('FROM', mevedel_server.__file__)\n"
        "sys.exit(main(['read', 'mevedel://architecture.md', '--limit', '3']))\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run([sys.executable, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"FROM {site}" in ran.stdout
    assert "# Architecture" in ran.stdout
    listing = subprocess.run(
        [sys.executable, "-c", script.replace("'mevedel://architecture.md', '--limit', '3'", "'mevedel://'")],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "mevedel://protocol.md" in listing.stdout, listing.stdout + listing.stderr
