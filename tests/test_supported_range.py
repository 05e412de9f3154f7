"""The OpenTelemetry range the project declares is the one CI proves and the README states."""

from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# What CI's floor environment installs: every OpenTelemetry package at its lowest release.
FLOOR = {
    requirement.name: Version(str(requirement.specifier).removeprefix("=="))
    for requirement in (
        Requirement(line) for line in (ROOT / ".ci" / "opentelemetry-floor.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
}


def lowest_accepted(requirement: Requirement) -> Version:
    (lowest,) = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "~=")]
    return lowest


def test_every_declared_opentelemetry_floor_is_the_one_ci_installs() -> None:
    declared = [*PYPROJECT["dependencies"], *PYPROJECT["optional-dependencies"]["test"]]
    floors = {
        requirement.name: lowest_accepted(requirement)
        for requirement in map(Requirement, declared) if requirement.name.startswith("opentelemetry-")
    }
    assert len(floors) == 8  # api, instrumentation, semantic conventions; sdk, test utils, distro, two exporters
    assert {name: FLOOR.get(name) for name in floors} == floors


def test_the_readme_states_the_floor() -> None:
    floor = f"{FLOOR['opentelemetry-api']} / {FLOOR['opentelemetry-instrumentation']}"
    assert f"OpenTelemetry {floor}" in (ROOT / "README.md").read_text()
    # Where the docs show scraping the process itself, they name the exporter release that keeps labels right.
    exporter = f"`opentelemetry-exporter-prometheus` {FLOOR['opentelemetry-exporter-prometheus']}"
    assert exporter in (ROOT / "docs" / "operations.md").read_text()
