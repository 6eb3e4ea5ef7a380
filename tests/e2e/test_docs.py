"""Every Python example in the docs (``docs/**/*.md``) and in ``README.md`` runs as shown.

The convention, for anyone writing a page:

- A **runnable** example is a ````` ```python ````` block immediately followed (blank lines
  only in between) by its output, a ````` ```text title="Output" ````` block. The test
  runs the block with ``sys.executable -c`` in a fresh temporary directory and checks
  that its exit status is 0 and that its whole stdout matches the output block. stderr
  is free (logs, Spark's progress) and shown only when a block fails.
- Parts of the output that vary between runs are written ``...``: inside a line it
  stands for any text on that line (``nats://127.0.0.1:...`` for a random port); a
  line that is only ``...`` stands for any number of lines, none included. Trailing
  whitespace and trailing blank lines are ignored. Nothing else is a placeholder.
- A **fragment**, a block that is not meant to run on its own (a handler shown
  alone, configuration), is a ````` ```python title="Fragment" ````` block (the title
  may go on: ``title="Fragment: a test module"``). Fragments are not run, but they
  must compile (top-level ``await`` allowed), and no output block may follow them.
- Any other Python block (````` ```python `````, ````` ```py `````, with any other or no
  title) without an output block after it fails the test, as does an output block
  with no runnable block before it: nothing slips through unnoticed.

Examples start what they need themselves (``goflux.testing.NatsServer`` for a real
nats-server, a local Spark session); ``NATS_URL`` is removed from their environment.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
PYTHON = {"python", "py", "python3"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
TITLE = re.compile(r"""\btitle=(?:"([^"]*)"|'([^']*)'|(\S+))""")
OUTPUT_TITLE = "Output"
FRAGMENT_TITLE = "Fragment"
BLOCK_TIMEOUT = 240  # seconds; the Spark example starts a JVM


@dataclass(frozen=True)
class Block:
    """A fenced code block of a Markdown file."""

    path: Path
    start: int  # line number of the opening fence (1-based)
    end: int  # line number of the closing fence
    language: str
    title: str
    code: str

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.start}"

    @property
    def is_python(self) -> bool:
        return self.language in PYTHON

    @property
    def is_fragment(self) -> bool:
        return self.is_python and self.title.startswith(FRAGMENT_TITLE)

    @property
    def is_output(self) -> bool:
        return self.language == "text" and self.title == OUTPUT_TITLE


def fenced_blocks(path: Path) -> list[Block]:
    """Return the fenced code blocks of a Markdown file, in order (indented ones too)."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        body = [line.removeprefix(indent) for line in lines[i + 1 : j]]
        title = TITLE.search(info)
        blocks.append(
            Block(
                path=path,
                start=i + 1,
                end=j + 1,
                language=info.split()[0].lower() if info else "",
                title=next((g for g in title.groups() if g is not None), "") if title else "",
                code="\n".join(body) + "\n",
            )
        )
        i = j + 1
    return blocks


def adjacent(first: Block, second: Block) -> bool:
    """Whether only blank lines stand between two blocks of the same file."""
    if first.path != second.path:
        return False
    between = first.path.read_text().splitlines()[first.end : second.start - 1]
    return all(not line.strip() for line in between)


def examples(sources: list[Path]) -> tuple[list[tuple[Block, Block]], list[Block], list[str]]:
    """Return (runnable block, its output) pairs, the fragments, and convention errors."""
    runnable: list[tuple[Block, Block]] = []
    fragments: list[Block] = []
    errors: list[str] = []
    for source in sources:
        blocks = fenced_blocks(source)
        for n, block in enumerate(blocks):
            after = blocks[n + 1] if n + 1 < len(blocks) else None
            before = blocks[n - 1] if n > 0 else None
            has_output = after is not None and after.is_output and adjacent(block, after)
            if block.is_fragment:
                fragments.append(block)
                if has_output:
                    errors.append(f"{block.where}: a fragment has an output block after it")
            elif block.is_python:
                if has_output:
                    assert after is not None
                    runnable.append((block, after))
                else:
                    errors.append(
                        f"{block.where}: a python block with neither an output block after it"
                        f' (```text title="{OUTPUT_TITLE}"```) nor title="{FRAGMENT_TITLE}"'
                    )
            elif block.is_output and not (
                before is not None
                and before.is_python
                and not before.is_fragment
                and adjacent(before, block)
            ):
                errors.append(f"{block.where}: an output block without a python block before it")
    return runnable, fragments, errors


RUNNABLE, FRAGMENTS, ERRORS = examples(SOURCES)


def output_pattern(expected: str) -> re.Pattern[str]:
    """Compile an output block into a pattern for the whole stdout (see the module doc)."""
    parts = []
    for line in (raw.rstrip() for raw in expected.rstrip().splitlines()):
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\\n]*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def output_matches(expected: str, stdout: str) -> bool:
    """Whether ``stdout`` is what the output block ``expected`` shows."""
    actual = "".join(line.rstrip() + "\n" for line in stdout.rstrip().splitlines())
    return output_pattern(expected).fullmatch(actual) is not None


def test_every_python_block_runs_or_is_a_fragment() -> None:
    assert not ERRORS, "\n".join(ERRORS)
    # A parser that found nothing would pass everything: the docs hold at least these.
    assert len(RUNNABLE) >= 10
    assert any(block.path.name == "README.md" for block, _ in RUNNABLE)


@pytest.mark.parametrize("fragment", FRAGMENTS, ids=[block.where for block in FRAGMENTS])
def test_fragment_compiles(fragment: Block) -> None:
    try:
        compile(fragment.code, fragment.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError as exc:
        pytest.fail(f"{fragment.where}: the fragment is not valid Python: {exc}")


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)
@pytest.mark.parametrize(("block", "output"), RUNNABLE, ids=[b.where for b, _ in RUNNABLE])
def test_example_prints_its_output(block: Block, output: Block, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    result = subprocess.run(
        [sys.executable, "-c", block.code],
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert result.returncode == 0, f"{block.where} exited {result.returncode}:\n{result.stderr}"
    if not output_matches(output.code, result.stdout):
        diff = "\n".join(
            difflib.unified_diff(
                output.code.rstrip().splitlines(),
                result.stdout.rstrip().splitlines(),
                f"{output.where} (the output block)",
                "stdout",
                lineterm="",
            )
        )
        pytest.fail(f"{block.where} printed something else:\n{diff}\n--- stderr:\n{result.stderr}")


@pytest.mark.timeout(240)
def test_runnable_examples_pass_mypy_strict(tmp_path: Path) -> None:
    """Strict typing is what goflux sells: every runnable example passes ``mypy --strict``.

    Each block becomes a module of its own (named after its page and line), checked
    with the project's mypy settings (``pyproject.toml``: the pydantic plugin) against
    this checkout's goflux. Fragments are left out: they use names defined elsewhere.
    """
    modules = {}
    for block, _ in RUNNABLE:
        name = "ex_" + re.sub(r"\W", "_", block.where)
        (tmp_path / f"{name}.py").write_text(block.code)
        modules[name] = block.where
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(tmp_path / ".mypy_cache"), *sorted(f"{m}.py" for m in modules)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        timeout=200,
        check=False,
    )  # fmt: skip

    def where(match: re.Match[str]) -> str:  # ex_docs_state_md_195.py:39 -> docs/state.md:234
        page, fence = modules[match[1]].rsplit(":", 1)
        return f"{page}:{int(fence) + int(match[2])}"

    report = re.sub(r"^(ex_\w+)\.py:(\d+)", where, result.stdout, flags=re.MULTILINE)
    assert result.returncode == 0, f"docs examples that fail mypy --strict:\n{report}"
    assert f"no issues found in {len(modules)} source files" in result.stdout


@pytest.mark.parametrize(
    ("expected", "stdout", "matches"),
    [
        ("a\nb\n", "a\nb\n", True),
        ("a\nb\n", "a\nb  \n\n", True),  # trailing whitespace and blank lines
        ("a\nb\n", "a\nc\n", False),
        ("a\n", "a\nb\n", False),  # the whole stdout, not a part of it
        ("b\n", "a\nb\n", False),
        ("...\nb\n", "a\nb\n", True),
        ("a\n...\n", "a\n", True),  # "..." may stand for no line
        ("a\n...\nd\n", "a\nb\nc\nd\n", True),
        ("on nats://127.0.0.1:...\n", "on nats://127.0.0.1:4222\n", True),
        ("on nats://127.0.0.1:...\n", "on nats://127.0.0.1:4222\nmore\n", False),
        ("x=... y=2\n", "x=1 y=2\n", True),
        ("x=... y=2\n", "x=1 y=3\n", False),
        ("(1+1)*[2]\n", "(1+1)*[2]\n", True),  # regex characters are literal
        ("(1+1)*[2]\n", "11[2]\n", False),
    ],
)
def test_output_convention(expected: str, stdout: str, matches: bool) -> None:
    assert output_matches(expected, stdout) is matches


def test_the_convention_is_enforced(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '```python\nprint(1)\n```\n\n```text title="Output"\n1\n```\n'  # runnable
        '\n```python title="Fragment"\nawait handler(msg)\n```\n'  # fragment
        "\n```python\nprint(2)\n```\n"  # neither: an error
        '\ntext\n\n```text title="Output"\n2\n```\n'  # an orphan output: an error
        "\n```sh\nls\n```\n"  # not Python: not checked
    )
    blocks = fenced_blocks(page)
    assert [(b.language, b.title) for b in blocks] == [
        ("python", ""),
        ("text", "Output"),
        ("python", "Fragment"),
        ("python", ""),
        ("text", "Output"),
        ("sh", ""),
    ]
    runnable, fragments, errors = examples([page])
    assert [(b.start, o.start) for b, o in runnable] == [(1, 5)]
    assert [b.start for b in fragments] == [9]
    assert len(errors) == 2
    assert "page.md:13: a python block with neither" in errors[0]
    assert "page.md:19: an output block without a python block" in errors[1]


# ---------------------------------------------------------------- the API reference

PUBLIC_PACKAGES = {  # each public package and its reference page
    "goflux": "reference/goflux.md",
    "goflux.codecs": "reference/codecs.md",
    "goflux.middleware": "reference/middleware.md",
    "goflux.testing": "reference/testing.md",
    "goflux.service": "reference/service.md",
    "goflux.asgi": "reference/asgi.md",
    "goflux.asyncapi": "reference/asyncapi.md",
    "goflux.transports.channel": "reference/channel.md",
    "goflux.transports.nats": "reference/nats.md",
    "goflux.transports.jetstream": "reference/jetstream.md",
    "goflux.transports.spark": "reference/spark.md",
    "goflux.transports.http": "reference/http.md",
}
DIRECTIVE = re.compile(r"^[ \t]*:::[ \t]+(\S+)", re.MULTILINE)


def public_names(package: str) -> list[str]:
    return [name for name in importlib.import_module(package).__all__ if not name.startswith("_")]


def test_api_reference_uses_public_import_paths_only() -> None:
    """``::: path`` names a public package or a name it exports, never a private module."""
    wrong = []
    for page in (ROOT / "docs").rglob("*.md"):
        for path in DIRECTIVE.findall(page.read_text()):
            package = max((p for p in PUBLIC_PACKAGES if f"{path}.".startswith(f"{p}.")), key=len)
            rest = path.removeprefix(package).lstrip(".")
            if rest and rest.split(".")[0] not in public_names(package):
                wrong.append(f"{page.relative_to(ROOT)}: ::: {path}")
    assert not wrong, "not a public import path:\n" + "\n".join(wrong)
    for package, page in PUBLIC_PACKAGES.items():
        assert f"::: {package}" in DIRECTIVE.sub(r"::: \1", (ROOT / "docs" / page).read_text())


LINK = re.compile(r"""\b(?:href|src)=["']([^"']*)["']""")


def broken_links(site: Path) -> list[str]:
    """The links of a built site that do not open a file of the site from disk.

    A link to a folder (``concepts/``) works on a web server, which answers with its
    ``index.html``, but opens a directory listing in a browser reading the files.
    ``404.html`` is left out: only a web server shows it, for a path it lacks.
    """
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site) == Path("404.html"):
            continue
        for target in LINK.findall(page.read_text()):
            path = target.split("#", 1)[0].split("?", 1)[0]
            if not path or re.match(r"^[a-z][a-z0-9+.-]*:|^//", path, re.IGNORECASE):
                continue  # in-page, or another site (https:, mailto:, data:)
            if not (page.parent / path).is_file():
                broken.append(f"{page.relative_to(site)}: {target}")
    return broken


def test_broken_links_finds_folder_links(tmp_path: Path) -> None:
    (tmp_path / "concepts").mkdir()
    (tmp_path / "concepts" / "index.html").write_text("")
    (tmp_path / "index.html").write_text(
        '<a href="concepts/index.html#x">ok</a> <a href="https://example.org/">ok</a>'
        ' <a href="#top">ok</a> <a href="concepts/">folder</a> <img src="missing.png">'
    )
    assert broken_links(tmp_path) == ["index.html: concepts/", "index.html: missing.png"]


@pytest.mark.timeout(180)
def test_api_reference_shows_every_public_name(tmp_path: Path) -> None:
    """The built site has an entry for every name in every public package's ``__all__``.

    And it browses from disk: every link opens a file of the site.
    """
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=150,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    missing = []
    for package, page in PUBLIC_PACKAGES.items():
        html = (tmp_path / page.replace(".md", ".html")).read_text()
        missing += [
            f"{package}.{name}"
            for name in public_names(package)
            if f'id="{package}.{name}"' not in html
        ]
    assert not missing, "not in the API reference:\n" + "\n".join(missing)
    broken = broken_links(tmp_path)
    assert not broken, "links that open no file from disk:\n" + "\n".join(broken)
