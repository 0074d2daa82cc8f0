"""A query's analyzed plan as a tree of nodes, read from the text Spark prints for `df.explain("extended")`.

That call is the one both Spark Classic and Spark Connect serve (Connect has no JSON form of a plan): its
"== Analyzed Logical Plan ==" section is the analyzed plan's verbose tree string, one line per node in
pre-order, each indented by its depth, named by its class, `~` before a node a stream feeds, then the node's
arguments as Spark prints them (columns as `name#id`, a watermarked one `name#id-T<ms>ms`). The text holds no
data types but the root's; query_plan.py reads the operators from the tree.
"""

from __future__ import annotations

import contextlib
import io
import re
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Spark is imported only when a command needs it
    from pyspark.sql import DataFrame

# Spark shortens a printed list longer than this conf ("... 3 more fields"): raised for the one call.
_MAX_FIELDS = "spark.sql.debug.maxToStringFields"
_ALL_FIELDS = str(2**31 - 1)
_SECTION = "== Analyzed Logical Plan =="
# A line's indent: "   " or ":  " per level above its parent, then "+- " (last child) or ":- ".
_INDENT = re.compile(r"^((?:[: ]  )*)([:+]- )?")
# A column: its name, `#`, the id Spark numbers it by, `L` for a long, a watermark's delay mark.
_COLUMN = re.compile(r"^(?P<name>.+?)#(?P<id>\d+)L?(?:-T\d+ms)?$")
_OPENING, _CLOSING = "([", ")]"


@dataclass
class PlanNode:
    kind: str
    # Its arguments as Spark prints them, after its name.
    text: str
    # Whether a stream feeds it (Spark marks such a node `~`).
    streaming: bool
    children: list[PlanNode] = field(default_factory=list)

    def walk(self) -> Iterator[PlanNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    @property
    def arguments(self) -> list[str]:
        return split_top(self.text, ", ")


def analyzed_plan(result: DataFrame) -> PlanNode:
    """The analyzed plan of `result`, as Spark prints it for explain("extended") on either kind of session:
    printed once per DataFrame (a start reads it two or three times; a DataFrame's plan does not change, and
    printing it plans the whole query again, 20-150 ms)."""
    if result not in _READ:
        _READ[result] = parse_tree(analyzed_text(result))
    return _READ[result]


_READ: weakref.WeakKeyDictionary[DataFrame, PlanNode] = weakref.WeakKeyDictionary()


def analyzed_text(result: DataFrame) -> str:
    """The analyzed plan's tree string, without the line of the root's column types above it."""
    conf = result.sparkSession.conf
    before = conf.get(_MAX_FIELDS)
    printed = io.StringIO()
    conf.set(_MAX_FIELDS, _ALL_FIELDS)
    try:
        with contextlib.redirect_stdout(printed):
            result.explain("extended")
    finally:
        if before is None:
            conf.unset(_MAX_FIELDS)
        else:
            conf.set(_MAX_FIELDS, before)
    section = printed.getvalue().split(_SECTION + "\n", 1)[1].split("\n== ", 1)[0]
    return section.split("\n", 1)[1].strip("\n")


def parse_tree(text: str) -> PlanNode:
    """Each line a node; its indent says its depth, and a node's children are the deeper lines below it."""
    stack: list[PlanNode] = []
    root = None
    for line in text.splitlines():
        indent = _INDENT.match(line)
        assert indent is not None  # the pattern matches any line, with an empty indent at least
        depth = len(indent.group(1)) // 3 + (1 if indent.group(2) else 0)
        body = line[indent.end() :]
        if depth > len(stack) or (depth and not stack):  # a node's text that runs onto another line
            stack[-1].text += "\n" + line
            continue
        streaming = body.startswith("~")
        kind, _, arguments = body.lstrip("~'!").partition(" ")
        node = PlanNode(kind, arguments, streaming)
        del stack[depth:]
        if stack:
            stack[-1].children.append(node)
        else:
            root = node
        stack.append(node)
    assert root is not None, "an empty plan"
    return root


def split_top(text: str, separator: str) -> list[str]:
    """`text` split at each `separator` outside brackets: a printed list's items, a node's arguments."""
    parts, depth, start, index = [], 0, 0, 0
    while index < len(text):
        char = text[index]
        if char in _OPENING:
            depth += 1
        elif char in _CLOSING and depth:
            depth -= 1
        elif depth == 0 and text.startswith(separator, index):
            parts.append(text[start:index])
            index += len(separator)
            start = index
            continue
        index += 1
    parts.append(text[start:])
    return [part for part in parts if part]


def items(listed: str) -> list[str]:
    """The items of a printed list, `[a#1, b#2]`; none when `listed` is not a list."""
    if not (listed.startswith("[") and listed.endswith("]")):
        return []
    return split_top(listed[1:-1], ", ")


def column(expression: str) -> tuple[str, int] | None:
    """A column's name and id (`key#3`, `window#5-T600000ms`), None for another expression."""
    match = _COLUMN.match(expression)
    return (match.group("name"), int(match.group("id"))) if match and "(" not in expression else None


def named(expression: str) -> tuple[str, str | None]:
    """An expression and the name it is given (`expr AS name#id`), or the column's own name."""
    *body, alias = split_top(expression, " AS ")
    if body and (aliased := column(alias)):
        return " AS ".join(body), aliased[0]
    own = column(expression)
    return expression, own[0] if own else None


def calls(text: str, function: str) -> Iterator[list[str]]:
    """The arguments of each call of `function` in `text`, outermost first."""
    for match in re.finditer(rf"(?<![\w.]){re.escape(function)}\(", text):
        inner = enclosed(text, match.end() - 1)
        yield split_top(inner, ", ")


def enclosed(text: str, opening: int) -> str:
    """What the bracket at `opening` encloses."""
    depth = 0
    for index in range(opening, len(text)):
        if text[index] in _OPENING:
            depth += 1
        elif text[index] in _CLOSING:
            depth -= 1
            if depth == 0:
                return text[opening + 1 : index]
    return text[opening + 1 :]


def unwrapped(expression: str) -> str:
    """An expression without the brackets around the whole of it: `(a + b)` -> `a + b`."""
    while expression.startswith("(") and enclosed(expression, 0) == expression[1:-1]:
        expression = expression[1:-1]
    return expression


def python_udfs(text: str) -> Iterator[str]:
    """The Python functions a node's text calls: Spark prints one `name(arguments)#id`, a built-in without
    the id (a column named after a call, `lower(key)#7`, holds no column among its `arguments`)."""
    for match in re.finditer(r"\)#\d", text):
        depth, index = 0, match.start()
        while index >= 0:
            depth += {")": 1, "(": -1}.get(text[index], 0)
            if depth == 0:
                break
            index -= 1
        name = re.search(r"[^\s,(\[]*$", text[:index])
        if name and name.group() and "#" in text[index : match.start()]:
            yield name.group()
