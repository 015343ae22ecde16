"""``| line_format "<template>"`` for the LogQL subset (tests/deploy/logql_subset.py).

Loki's ``line_format`` renders a Go text/template over the line's labels and makes the result the
line (LogQL documentation, "Line format expression"). This subset knows literal text and
``{{.label}}`` actions only (a label the line lacks renders as nothing); any other action (a
pipeline, a function, ``range``) is refused with ``LogQLError``, so a query that grows one fails
a test instead of being evaluated wrongly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ACTION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_LABEL = re.compile(r"\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*")


class LineFormatError(ValueError):
    """The template uses a form outside this subset."""


@dataclass(frozen=True)
class LineFormat:
    """``| line_format``: its template (unquoted), as literal text and label actions."""

    template: str

    @property
    def labels(self) -> frozenset[str]:
        """The labels the template refers to."""
        return frozenset(_label(action) for action in _ACTION.findall(self.template))

    def render(self, row: dict[str, str]) -> str:
        """The new line for a line whose labels are ``row``."""
        return _ACTION.sub(lambda match: row.get(_label(match.group(1)), ""), self.template)


def _label(action: str) -> str:
    matched = _LABEL.fullmatch(action)
    if matched is None:
        raise LineFormatError(f"template action {{{{{action}}}}} is outside this subset")
    return matched.group(1)


def parse(template: str) -> LineFormat:
    """A ``line_format`` stage of ``template``; refuses actions other than ``{{.label}}`` and stray braces."""
    stage = LineFormat(template)
    _ = stage.labels
    if "{{" in _ACTION.sub("", template) or "}}" in _ACTION.sub("", template):
        raise LineFormatError(f"unbalanced template braces in {template!r}")
    return stage
