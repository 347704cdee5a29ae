"""No tracked file narrates the project's own past work.

Comments, docstrings and documents say what is true now and why; how the code got there is in
git log and CHANGELOG.md, and figures go to docs/measurements.md with the command that
reproduces them and the date (the house style, "Words"). What this refuses, in every tracked
text file but CHANGELOG.md, is history given as provenance: a test-command run named by number
or name or by the commit it ran, what such a run showed, a period of work named as one, a commit
hash as where a figure or a fact comes from, and changes told as history (the samples below
show each shape). This file is scanned too: its patterns are written, and its samples assembled
from placeholders, so that no line of it matches one. The same words keep their product
meanings: an IAM role's or boto3's sessions and tokens, a process's own (``setsid``),
``CI=true`` and "under CI" (the test command's mode), a workflow's earlier runs. Each pattern
is checked both ways below, so a pattern that matches nothing cannot pass unnoticed.
"""

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().relative_to(ROOT).as_posix()
SKIPPED = {"CHANGELOG.md"}
HEX = r"(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]"  # a hex string with a letter and a digit

PATTERNS: dict[str, re.Pattern[str]] = {
    "a CI run by number": re.compile(r"\bci[- ]?runs?[- ]?\d+", re.IGNORECASE),
    "a CI run's name": re.compile(r"\bci\d+\b", re.IGNORECASE),
    "CI at a commit": re.compile(r"\bCI at `?[0-9a-f]{7,40}\b", re.IGNORECASE),
    "an observation of CI": re.compile(
        r"\b(seen|found|observed) (in|on|by) C[I]\b|\bC[I] (saw|failure|failed)\b|\bfresh-clone C[I]\b",
        re.IGNORECASE,
    ),
    "a work session": re.compile(
        r"\b(previous|last|earlier|prior|this|next) (work(ing)? )?session\b"
        r"(?!'s|\s+(token|credential|polic|name|duration|tag))|\bsessions? \d+\b",
        re.IGNORECASE,
    ),
    "a commit as provenance": re.compile(rf"\b(commit|fixed in)\s+`?{HEX}{{7,40}}\b", re.IGNORECASE),
    "a commit hash in backticks": re.compile(rf"`{HEX}{{7,12}}`"),
    "a change told as history": re.compile(
        r"\b(before|after|since|until) this (merge|change|session|round|branch)\b", re.IGNORECASE
    ),
}

# The shapes the guard refuses, as bare fragments assembled from placeholders (no sentence
# around them, so the file itself tells nothing of any run, session or commit).
_WORDS = {"ci": "CI", "run": "run", "session": "session", "hex": "0a1b2c3", "n": "7", "seen": "seen"}
_WORDS |= {"fresh": "fresh", "failure": "failure", "before": "before", "merge": "merge"}
_WORDS |= {"until": "until", "change": "change"}
_SAMPLES = [
    ("a CI run by number", "{ci} {run} {n}"),
    ("a CI run by number", "{ci} {run}s {n}"),
    ("a CI run by number", "{ci}-{run}{n}"),
    ("a CI run's name", "{ci}{n}"),
    ("CI at a commit", "{ci} at {hex}"),
    ("an observation of CI", "{seen} in {ci}"),
    ("an observation of CI", "{fresh}-clone {ci}"),
    ("an observation of CI", "{ci} {failure}"),
    ("a work session", "last {session}"),
    ("a work session", "previous {session}"),
    ("a work session", "{session} {n}"),
    ("a commit as provenance", "commit {hex}"),
    ("a commit hash in backticks", "`{hex}`"),
    ("a change told as history", "{before} this {merge}"),
    ("a change told as history", "{until} this {change}"),
]
NARRATION = [(name, line.format(**_WORDS)) for name, line in _SAMPLES]

DOMAIN = [
    "every request signed with a role's session (Lambda functions run with their role's session)",
    "session = boto3.session.Session(region_name=REGION)",
    "a detached process (setsid + nohup, its own session, so it survives the group)",
    "an inactive access key, or session credentials without their session token",
    "this {session}'s credentials expire now; this {session} token is refused".format(**_WORDS),
    'export CI="${CI:-true}"  # under CI a missing tool fails, never skips',
    "report-paths of the last run, or a later one; an earlier run still holds the lock",
    "the previous run of the workflow left its alarm in ALARM",
    "Root=1-6b0284e0-0a1b2c3d4e5f60718293a4b1; apiId a1b2c3d4e5; vol-0a1b2c3d4e5f60718",
    "nvmet takes any `DHHC-1:<hash id>:…` key; the hash hmac(sha256)",
    "the next round skips the start (make localcloud-stop stops it)",
]


def narration(line: str) -> list[str]:
    """The names of the patterns ``line`` matches."""
    return [name for name, pattern in PATTERNS.items() if pattern.search(line)]


@cache
def tracked_text() -> dict[str, str]:
    """Every tracked file that is text, by path (binary files and CHANGELOG.md left out)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    texts = {}
    for path in listed.stdout.decode().split("\0"):
        file = ROOT / path
        if not path or path in SKIPPED or not file.is_file():  # a tracked file deleted in the work tree
            continue
        data = file.read_bytes()
        if b"\0" in data:
            continue
        try:
            texts[path] = data.decode()
        except UnicodeDecodeError:
            continue
    return texts


@pytest.mark.parametrize(("name", "line"), NARRATION)
def test_each_pattern_matches_the_narration_it_is_for(name: str, line: str) -> None:
    # Given a line that narrates past work, Then its pattern finds it
    assert name in narration(line), f"{name!r} misses: {line}"


@pytest.mark.parametrize("line", DOMAIN)
def test_the_domains_own_words_are_not_narration(line: str) -> None:
    # Given a line that uses session, CI, run or a hex id in the product's sense, Then no pattern fires
    assert narration(line) == [], line


def test_every_pattern_is_exercised_by_a_sample() -> None:
    assert {name for name, _ in NARRATION} == set(PATTERNS)


def test_the_scan_reads_the_repository() -> None:
    # (a scan that read nothing would pass everything)
    texts = tracked_text()
    assert {"README.md", "template.yaml", "docs/measurements.md"} <= set(texts)
    assert "CHANGELOG.md" not in texts
    assert HERE in texts  # the guard holds for its own text


def test_no_tracked_file_narrates_past_work() -> None:
    found = [
        f"{path}:{number}: {', '.join(names)}: {line.strip()[:160]}"
        for path, text in tracked_text().items()
        for number, line in enumerate(text.splitlines(), 1)
        if (names := narration(line))
    ]
    assert not found, (
        "say what is true now and why (history belongs in git log and CHANGELOG.md, figures in "
        "docs/measurements.md with their command and date):\n" + "\n".join(found)
    )
