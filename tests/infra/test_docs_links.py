"""The documents' references hold: README.md and every docs/*.md.

- Every relative Markdown link and image (``[text](path#anchor)``, ``![alt](path)``, reference
  definitions ``[id]: path``, HTML ``href``/``src``) names a file or directory of the repository,
  never one outside it; an ``#anchor`` on a link to a Markdown file (or on the page itself)
  names one of its headings, slugged as GitHub slugs them.
- A link that leaves the repository is an ``https`` URL (no ``http``, ``file`` or ``mailto``).
- Every ``make <target>`` shown in code (spans and fenced blocks) is a target of the Makefile it
  runs (``-C dir``: that directory's).
- Every ``vsactl …`` command shown in code reaches a command of the CLI: its subcommand path
  (``vsactl backup create demo --mode application`` → ``backup create``) answers ``--help``.

Prose that names a page's section in italics (*Failover settings*) is not a link and is not
checked here.
"""

import fnmatch
import re
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import typer
from typer.testing import CliRunner
from vsactl.main import app  # the CLI as installed from cli/ (pip install -e)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
INLINE_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^\s)>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^\s>]+)>", re.IGNORECASE)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
SHELL_BREAK = re.compile(r"&&|\|\||;|\s\|\s|\$\(")  # a|b unspaced is an alternative, not a pipe


@dataclass(frozen=True)
class Code:
    """A piece of code shown on a page: an inline span or one line of a fenced block."""

    page: Path
    line: int
    text: str
    block: bool

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _split(page: Path) -> tuple[str, list[Code]]:
    """The page's prose with its code blanked out (offsets and line numbers kept), and its code."""
    lines = page.read_text().splitlines(keepends=True)
    prose, code, fence = [], [], ""
    for number, line in enumerate(lines, 1):
        opening = FENCE.match(line)
        if fence:
            if opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence):
                fence = ""
            else:
                code.append(Code(page, number, line.rstrip("\n"), block=True))
            prose.append("\n")
        elif opening:
            fence = opening.group(1)
            prose.append("\n")
        else:
            prose.append(line)
    text = "".join(prose)
    blanked = list(text)
    for span in CODE_SPAN.finditer(text):
        if "\n\n" in span.group(2):  # a span never crosses a paragraph: a lone backtick
            continue
        at = text.count("\n", 0, span.start()) + 1
        code.append(Code(page, at, " ".join(span.group(2).split()), block=False))
        blanked[span.start() : span.end()] = [c if c == "\n" else " " for c in span.group(0)]
    return "".join(blanked), code


@cache
def prose_and_code(page: Path) -> tuple[str, list[Code]]:
    return _split(page)


# ------------------------------------------------------------------------------------- links


def _plain(heading: str) -> str:
    """A heading's text as GitHub renders it: links and images to their text, no code or
    emphasis markers (a heading's anchor is made from its rendered text)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    parts = re.split(r"(`+[^`]*`+)", text)  # code keeps its characters, emphasis does not
    return "".join(
        part.strip("`")
        if part.startswith("`")
        else re.sub(r"<[^>]+>", "", re.sub(r"(\*{1,3}|_{1,3})(\S(?:.*?\S)?)\1(?![\w*])", r"\2", part))
        for part in parts
    )


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped except hyphens and
    underscores, each space a hyphen (github-slugger)."""
    kept = "".join(c for c in _plain(heading).lower() if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return kept.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of a page's headings; a repeated heading's get ``-1``, ``-2`` … as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_and_code(page)[0].splitlines():
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(page: Path) -> Iterator[tuple[int, str]]:
    """Every link and image target on a page (outside code), with its line."""
    prose = prose_and_code(page)[0]
    for pattern, group in ((INLINE_LINK, 3), (REFERENCE, 1), (HTML_LINK, 1), (AUTOLINK, 1)):
        for found in pattern.finditer(prose):
            yield prose.count("\n", 0, found.start()) + 1, found.group(group)


def link_problem(page: Path, target: str) -> str | None:
    """What is wrong with ``target`` as a link from ``page``, or None."""
    if SCHEME.match(target):
        return None if target.lower().startswith("https://") else "leaves the repository, not over https"
    if target.startswith("/"):
        return "absolute path: GitHub and a checkout resolve it differently; link relative to the page"
    path, _, anchor = target.partition("#")
    file = (page.parent / unquote(path)).resolve() if path else page
    if not file.is_relative_to(ROOT):
        return "points outside the repository"
    if not file.exists():
        return f"{file.relative_to(ROOT)} does not exist"
    if anchor and file.suffix == ".md" and unquote(anchor).lower() not in anchors(file):
        return f"no heading of {file.relative_to(ROOT)} has the anchor #{anchor}"
    return None


def test_slugs_follow_github() -> None:
    assert slug("GET /arrays/{array_id}") == "get-arraysarray_id"
    assert slug("Many arrays per deployment") == "many-arrays-per-deployment"
    assert slug("`make bench`: the planner *vs* hindsight (#18)") == "make-bench-the-planner-vs-hindsight-18"
    assert slug("Steering the local cloud: `/_localcloud`") == "steering-the-local-cloud-_localcloud"
    assert slug("[ArraySpec](configuration.md#the-array-spec) and `__init__`") == "arrayspec-and-__init__"
    assert slug("and __init__") == "and-init"  # GitHub renders __init__ outside code as bold init


def test_a_broken_link_is_found() -> None:
    # (the checks below pass on good pages; here each kind of fault is seen to fail)
    page = ROOT / "docs" / "testing.md"
    assert link_problem(page, "measurements.md") is None
    assert link_problem(page, "measurements.md#the-test-command-from-a-fresh-clone") is None
    assert "does not exist" in (link_problem(page, "no-such-page.md") or "")
    assert "anchor" in (link_problem(page, "measurements.md#no-such-heading") or "")
    assert "outside" in (link_problem(page, "../../etc/passwd") or "")
    assert "https" in (link_problem(page, "http://example.com/") or "")
    assert link_problem(page, "https://docs.aws.amazon.com/") is None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    broken = [
        f"{page.relative_to(ROOT)}:{line}: ({target}) {problem}"
        for line, target in links(page)
        if (problem := link_problem(page, target))
    ]
    assert not broken, "\n".join(broken)


# --------------------------------------------------------------------------------- make targets


def make_targets(makefile: Path) -> set[str]:
    """The targets a Makefile defines (rules' left-hand sides; no variables, no special targets)."""
    name = r"[A-Za-z0-9_][A-Za-z0-9_.%/-]*"
    rule = re.compile(rf"^({name}(?:[ \t]+{name})*)[ \t]*::?(?!=)")
    return {
        t for line in makefile.read_text().splitlines() if (m := rule.match(line)) for t in m.group(1).split()
    }


def make_commands(code: Code) -> Iterator[tuple[Path, str]]:
    """Each target a ``make`` command in ``code`` asks for, with the Makefile it runs."""
    text = code.text.split(" #", 1)[0] if code.block else code.text
    if code.block and text.lstrip().startswith("#"):
        return
    for part in SHELL_BREAK.split(text):
        words = [w.strip("()") for w in part.split()]  # (…) and $(…) subshells
        if "make" not in words:
            continue
        words = words[words.index("make") + 1 :]
        makefile = ROOT / "Makefile"
        while words:
            word = words.pop(0)
            if word == "-C" and words:
                makefile = ROOT / words.pop(0) / "Makefile"
            elif word.startswith("-") or "=" in word:
                continue
            elif re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.*-]*(\|[A-Za-z0-9_.*-]+)*", word):
                first, *others = word.split("|")  # localcloud-start|stop|logs
                yield makefile, first
                for other in others:
                    yield makefile, first.rsplit("-", 1)[0] + "-" + other if "-" in first else other
            else:
                break  # a quoted word, a redirection: the command's targets are over


def shown_make_targets() -> list[tuple[Code, Path, str]]:
    return [(c, mf, t) for page in PAGES for c in prose_and_code(page)[1] for mf, t in make_commands(c)]


def test_make_commands_are_read_from_code() -> None:
    block = Code(ROOT / "README.md", 1, "make bench PORT=4610   # generated trace families", block=True)
    assert [t for _, t in make_commands(block)] == ["bench"]
    span = Code(ROOT / "README.md", 1, "make localcloud-start|stop|logs", block=False)
    assert [t for _, t in make_commands(span)] == ["localcloud-start", "localcloud-stop", "localcloud-logs"]
    chain = Code(ROOT / "README.md", 1, "cd x && make -C layers/core build", block=True)
    assert list(make_commands(chain)) == [(ROOT / "layers/core/Makefile", "build")]
    assert shown_make_targets(), "no make command found in the documents"


def test_every_make_target_shown_exists() -> None:
    missing = []
    for code, makefile, target in shown_make_targets():
        defined = make_targets(makefile) if makefile.exists() else set()
        if not fnmatch.filter(defined, target):  # `make bench-*`: at least one
            missing.append(f"{code.where()}: make {target} ({makefile.relative_to(ROOT)} has no such target)")
    assert not missing, "\n".join(missing)


# ------------------------------------------------------------------------------- vsactl commands


@cache
def cli() -> Any:
    """The CLI's root command (click's, as typer builds it; typer's click is its own copy, so the
    tree is read by duck typing: a group has ``commands``)."""
    return typer.main.get_command(app)


def vsactl_commands(code: Code) -> Iterator[list[str]]:
    """The words after ``vsactl`` of each command in ``code`` (placeholders like ``…`` and
    ``<command>`` end it; a diagram's ``vsactl (SigV4) ──►`` is no command)."""
    text = code.text.split(" #", 1)[0]
    for part in SHELL_BREAK.split(text):
        try:
            words = shlex.split(part.strip().removeprefix("$ "), comments=False)
        except ValueError:
            words = part.split()
        if not words:
            continue
        words = [words[0].lstrip("("), *(w.rstrip(")") for w in words[1:])]  # (…) and $(…) subshells
        if words[0] != "vsactl":
            continue
        args = []
        for word in words[1:]:
            if "…" in word or word.startswith(("<", "[")) or word == "]":
                break
            args.append(word)
        if not args or re.fullmatch(r"-{1,2}[a-z][a-z-]*(=.*)?|[a-z][a-z0-9-]*", args[0]):
            yield args


def command_path(args: list[str]) -> list[str]:
    """The subcommand path ``args`` reach: groups and their subcommands, skipping options (and an
    option's value); a word that no group knows ends it, kept, so its --help fails."""
    node, path, words = cli(), [], list(args)
    while words:
        word = words.pop(0)
        if word.startswith("-"):
            name = word.split("=")[0]
            option = next((p for p in node.params if p.param_type_name == "option" and name in p.opts), None)
            if option is not None and not option.is_flag and not option.count and "=" not in word and words:
                words.pop(0)
            continue
        if not hasattr(node, "commands"):
            break  # a command's arguments
        path.append(word)
        node = node.commands.get(word)
        if node is None:
            break
    return path


def options(path: list[str]) -> set[str] | None:
    """The options the commands along ``path`` take, or None when the path does not exist."""
    nodes = [cli()]
    for word in path:
        node = getattr(nodes[-1], "commands", {}).get(word)
        if node is None:
            return None
        nodes.append(node)
    return {"--help"} | {o for n in nodes for p in n.params for o in (*p.opts, *p.secondary_opts)}


def shown_vsactl_commands() -> Iterator[tuple[Code, list[str]]]:
    for page in PAGES:
        for code in prose_and_code(page)[1]:
            for args in vsactl_commands(code):
                yield code, args


@cache
def shown_vsactl_paths() -> dict[tuple[str, ...], list[str]]:
    """Each subcommand path the documents show, with where."""
    shown: dict[tuple[str, ...], list[str]] = {}
    for code, args in shown_vsactl_commands():
        shown.setdefault(tuple(command_path(args)), []).append(code.where())
    return shown


# Commands the documents show that the CLI does not have yet (being added): none today.
NOT_YET: dict[tuple[str, ...], str] = {}


def _vsactl_cases() -> list[Any]:
    return [
        pytest.param(
            path,
            id=" ".join(("vsactl", *path)),
            marks=[pytest.mark.xfail(strict=False, reason=NOT_YET[path])] if path in NOT_YET else [],
        )
        for path in sorted(shown_vsactl_paths())
    ]


def test_vsactl_commands_are_read_from_code() -> None:
    block = Code(ROOT / "README.md", 1, "vsactl backup create demo --mode application --wait  # x", True)
    assert [command_path(a) for a in vsactl_commands(block)] == [["backup", "create"]]
    piped = Code(ROOT / "README.md", 1, "vsactl get NEW -o yaml | vsactl apply -f -", block=False)
    assert [command_path(a) for a in vsactl_commands(piped)] == [["get"], ["apply"]]
    diagram = Code(ROOT / "README.md", 1, "vsactl (SigV4) ──► API Gateway", block=True)
    assert list(vsactl_commands(diagram)) == []
    assert command_path(["--region", "eu-west-1", "no-such-command", "x"]) == ["no-such-command"]
    assert options(["no-such-command"]) is None
    assert len(shown_vsactl_paths()) > 5


@pytest.mark.parametrize("path", _vsactl_cases())
def test_every_vsactl_command_shown_exists(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, (
        f"vsactl {' '.join(path)} --help exited {result.exit_code} (shown in "
        f"{', '.join(shown_vsactl_paths()[path])}):\n{result.output}"
    )


def test_every_vsactl_option_shown_exists() -> None:
    unknown = [
        f"{code.where()}: vsactl {' '.join(path)} has no option {word}"
        for code, args in shown_vsactl_commands()
        if (known := options(path := command_path(args))) is not None  # a missing command: the test above
        for word in args
        if word.startswith("-") and word != "-" and word.split("=")[0] not in known
    ]
    assert not unknown, "\n".join(unknown)
