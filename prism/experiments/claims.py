"""The words a write-up may use about a comparison, checked against the generated ratio table.

A sentence of a report, the README or the CHANGELOG that says **beats**, **ties**, **tie**, **tied**,
**matches**, **matched** or **as well** claims a comparison, and must cite the row of a committed
``docs/results/<preset>/ratios.csv`` it rests on, in brackets:

    PRISM beats the sparse baseline on walker2d [table1-study walker2d: e-prism / e-baseline].

The preset may be left out inside a study's own ``report.md`` (``[walker2d: e-prism / e-baseline]``); the env
is a grid name (``walker``), a short one (``walker2d``) or the env id. In a report, a table row under a heading
that names an env, whose first cell is ``A / B``, cites that env's row itself. The claim holds when one cited HV row's
verdict (:mod:`prism.experiments.inference`) allows the word: "beats" only a primary row at Holm p < 0.05
with A ahead of B (verdict ``beats``), the others only a TOST rejection at the preset's margin (verdict
``ties``). A word inside quotes or backticks is a mention, not a claim (e.g. a changelog saying a report no
longer says "beats").
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from prism.experiments.grid import ENV_FILES
from prism.experiments.inference import BEATS, TIES

CLAIM_WORDS: dict[str, str] = {
    "beats": BEATS,
    "ties": TIES,
    "tie": TIES,
    "tied": TIES,
    "matches": TIES,
    "matched": TIES,
    "as well": TIES,
}
"""Each claim word and the verdict its cited row must carry."""

# Hyphenated compounds are other words ("tie-breaking").
_WORD = re.compile(
    r"(?<![\w-])(" + "|".join(sorted(CLAIM_WORDS, key=len, reverse=True)) + r")(?![\w-])", re.IGNORECASE
)
_CITATION = re.compile(r"\[(?:(?P<preset>[a-z0-9-]+) )?(?P<env>[a-z0-9-]+): (?P<a>[\w-]+) / (?P<b>[\w-]+)\]")
# Quoted or code text is a mention of a word, not a use: "…", “…”, `…`.
_MENTION = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”|`[^`\n]*`")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*(\[])")
_ENVS = {
    **{key: env_id for key, env_id in ENV_FILES.items()},
    **{env_id: env_id for env_id in ENV_FILES.values()},
    **{env_id[3:-3]: env_id for env_id in ENV_FILES.values()},  # walker2d, halfcheetah, ...
}

Rows = Mapping[tuple[str, str, str, str], str]
"""(preset, env id, numerator, denominator) -> the verdict of its HV row."""


@dataclass(frozen=True)
class Problem:
    """A claim word its sentence does not back."""

    source: str
    line: int
    word: str
    sentence: str
    why: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.word!r} {self.why}: {self.sentence}"


def load_rows(results: Path) -> dict[tuple[str, str, str, str], str]:
    """The verdicts of every HV row of every ``<results>/<preset>/ratios.csv`` that has a verdict column."""
    rows = {}
    for path in sorted(results.glob("*/ratios.csv")):
        with path.open() as fh:
            for row in csv.DictReader(fh):
                if row.get("metric") == "hv" and row.get("verdict"):
                    key = (path.parent.name, row["env"], row["numerator"], row["denominator"])
                    rows[key] = row["verdict"]
    return rows


def _heading_env(line: str) -> str | None:
    """The env a markdown heading names (``## mo-walker2d-v5 (final …)``), if any."""
    for name in sorted(_ENVS, key=len, reverse=True):
        if re.search(rf"\b{re.escape(name)}\b", line):
            return _ENVS[name]
    return None


def _table_citations(text: str) -> dict[int, str]:
    """Line number -> env id of each table row under a heading that names an env: such a row whose first cell
    is ``A / B`` cites that env's row A / B (a hand-written ratio table with a verdict column)."""
    env, level, rows = None, 0, {}
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            depth = len(line) - len(line.lstrip("#"))
            named = _heading_env(line)
            if named or depth <= level:  # a subheading (### Ratios) stays under its env's heading
                env, level = named, depth if named else 0
        elif line.startswith("|") and env:
            rows[number] = env
    return rows


def _units(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each sentence: paragraphs and list items are joined over their wrapped
    lines, then cut at sentence ends; a table row or heading is a unit of its own."""
    blocks: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        starts_block = (
            not stripped
            or stripped.startswith(("#", "|", "```"))
            or re.match(r"([-*+]|\d+\.)\s", stripped) is not None
        )
        if starts_block or not blocks or not blocks[-1][1]:
            blocks.append((number, []))
        if stripped:
            blocks[-1][1].append(stripped)
        if stripped.startswith(("#", "|")):
            blocks.append((number + 1, []))
    units = []
    for number, lines in blocks:
        for sentence in _SENTENCE_END.split(" ".join(lines)):
            if sentence:
                units.append((number, sentence))
    return units


def check_text(text: str, source: str, rows: Rows, preset: str | None = None) -> list[Problem]:
    """Every claim word in ``text`` whose sentence does not cite a row of ``rows`` that allows it.
    ``preset`` is the study whose report ``text`` is (citations there may leave it out)."""
    problems = []
    table_envs = _table_citations(text)
    for line, sentence in _units(text):
        words = [m.group(1).lower() for m in _WORD.finditer(_MENTION.sub("", sentence))]
        if not words:
            continue
        verdicts, unknown = [], []
        cited = [(m.group("preset"), m.group("env"), m.group("a"), m.group("b"), m.group(0)) for m in
                 _CITATION.finditer(sentence)]  # fmt: skip
        first_cell = re.match(r"\|\s*\**([\w-]+) / ([\w-]+)", sentence)
        if line in table_envs and first_cell:
            cited.append((None, table_envs[line], *first_cell.groups(), first_cell.group(0)))
        for study, env, a, b, quoted in cited:
            study = study or preset
            env = _ENVS.get(env, env)
            key = (study or "", env, a, b)
            if key in rows:
                verdicts.append(rows[key])
            else:
                unknown.append(quoted)
        for word in dict.fromkeys(words):
            needed = CLAIM_WORDS[word]
            if needed in verdicts:
                continue
            if unknown and not verdicts:
                why = f"cites {', '.join(unknown)}, which no committed ratios.csv HV row has"
            elif verdicts:
                why = f"cites rows whose verdicts are {sorted(set(verdicts))}, not {needed!r}"
            else:
                why = "cites no ratio row ([preset env: A / B])"
            problems.append(Problem(source, line, word, sentence, why))
    return problems


def check_files(paths: list[Path], root: Path, rows: Rows) -> list[Problem]:
    """:func:`check_text` over files; a page under ``docs/results/<preset>/`` (its ``report.md``, or a linked
    page) is read as that preset's."""
    problems = []
    for path in paths:
        relative = path.relative_to(root)
        parts = relative.parts
        preset = parts[2] if parts[:2] == ("docs", "results") and len(parts) > 3 else None
        problems += check_text(path.read_text(), str(relative), rows, preset)
    return problems
