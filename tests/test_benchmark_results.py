"""benchmarks/RESULTS.md ends with benchmarks/FINDINGS.md, as ``benchmarks/run.py`` writes it.

A run rebuilds RESULTS.md from its generated sections and FINDINGS.md: a finding written
into RESULTS.md only would be lost by the next run.
"""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
#: The heading FINDINGS.md starts with (``run.py``'s ``_FINDINGS``).
HEADING = "## Findings (profiling notes"


def test_the_findings_of_results_md_are_findings_md() -> None:
    findings = (BENCHMARKS / "FINDINGS.md").read_text()
    results = (BENCHMARKS / "RESULTS.md").read_text()
    assert findings.startswith(HEADING)
    assert results.count(HEADING) == 1
    tail = results[results.index(HEADING) :]
    assert tail.rstrip() == findings.rstrip(), (
        "benchmarks/RESULTS.md's findings differ from benchmarks/FINDINGS.md: write "
        "findings into FINDINGS.md and copy them into RESULTS.md (run.py rebuilds them "
        "from FINDINGS.md)"
    )
