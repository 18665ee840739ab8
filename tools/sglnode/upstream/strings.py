"""Read a message out of upstream Python source as a format template, without running it.

SGLang builds its log lines and error messages with f-strings (`f"Load weight end. elapsed=
{self.weight_load_time:.2f} s, ..."`) and a few %-style logging calls. `extract` finds the string
expression in a source file that contains a given literal and returns it as a `str.format`
template whose fields are named after upstream's own expressions:

    "Load weight end. elapsed={weight_load_time:.2f} s, type={model_class}, ..."

so a line can be rendered exactly as upstream would print it (`Template.render`), and a copy of
the template can be compared with a later release's source.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
# %-style conversion inside a logging call's first argument: flags, width, precision, type.
PERCENT_RE = re.compile(r"%(?P<spec>[-+ #0]*\d*(?:\.\d+)?)(?P<type>[sdirfgexXc%])")


class ExtractError(LookupError):
    """The anchor text is not in the file, or is ambiguous there."""


@dataclass(frozen=True)
class Field:
    """One placeholder: its name in the template and the upstream expression behind it."""

    name: str
    expression: str


@dataclass(frozen=True)
class Template:
    """A message as upstream formats it, with where it sits in the source."""

    file: str
    line: int
    function: str
    template: str
    fields: tuple[Field, ...] = field(default=())

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def render(self, **values: Any) -> str:
        """The message upstream would print with these values for its expressions."""
        missing = [name for name in self.field_names if name not in values]
        if missing:
            raise KeyError(f"{self.file}:{self.line}: no value for {', '.join(missing)}")
        return self.template.format(**values)


def _name_of(node: ast.AST) -> str:
    """A short, stable placeholder name for an upstream expression."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        # `type(self.model).__name__` reads better as "type" than as "__name__".
        return _name_of(node.value) if node.attr.startswith("__") else node.attr
    if isinstance(node, ast.Subscript):
        return _name_of(node.value)
    if isinstance(node, ast.Call):
        return _name_of(node.func)
    if isinstance(node, ast.IfExp):
        # `'a' if flag else 'b'` is named after the flag; `x if x else ''` after x.
        return _name_of(node.test if isinstance(node.body, ast.Constant) else node.body)
    if isinstance(node, ast.BinOp):
        return _name_of(node.left)
    if isinstance(node, ast.Compare):
        return _name_of(node.left)
    return "value"


class _Fields:
    """Names placeholders, one name per distinct expression."""

    def __init__(self) -> None:
        self.by_expression: dict[str, Field] = {}

    def name(self, node: ast.AST) -> str:
        expression = ast.unparse(node)
        known = self.by_expression.get(expression)
        if known is not None:
            return known.name
        base = _name_of(node)
        taken = {f.name for f in self.by_expression.values()}
        name, suffix = base, 2
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        self.by_expression[expression] = Field(name, expression)
        return name

    def all(self) -> tuple[Field, ...]:
        return tuple(self.by_expression.values())


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _spec_text(spec: ast.AST | None) -> str:
    if spec is None:
        return ""
    if isinstance(spec, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in spec.values):
        return ":" + "".join(str(v.value) for v in spec.values)  # type: ignore[attr-defined]
    return ":" + ast.unparse(spec)


def _joined(node: ast.JoinedStr, fields: _Fields) -> str:
    parts: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(_escape(str(value.value)))
        elif isinstance(value, ast.FormattedValue):
            conversion = "" if value.conversion == -1 else "!" + chr(value.conversion)
            parts.append("{" + fields.name(value.value) + conversion + _spec_text(value.format_spec) + "}")
    return "".join(parts)


def _percent(text: str, args: list[ast.expr], fields: _Fields) -> str:
    """A %-style logging format as a str.format template, naming fields after the call's arguments."""
    out: list[str] = []
    position = 0
    arg_index = 0
    for match in PERCENT_RE.finditer(text):
        out.append(_escape(text[position : match.start()]))
        position = match.end()
        if match.group("type") == "%":
            out.append("%")
            continue
        if arg_index >= len(args):
            raise ExtractError(f"more %-conversions than arguments in {text!r}")
        kind = match.group("type")
        spec = match.group("spec")
        name = fields.name(args[arg_index])
        arg_index += 1
        if kind in "sr":
            out.append("{" + name + ("!r" if kind == "r" else "") + (":" + spec if spec else "") + "}")
        elif kind == "i":
            out.append("{" + name + ":" + spec + "d}")
        else:
            out.append("{" + name + ":" + spec + kind + "}")
    out.append(_escape(text[position:]))
    return "".join(out)


def _string_nodes(tree: ast.AST) -> list[tuple[ast.AST, ast.AST | None]]:
    """Every string expression with the logging call it is the format of (None if not one)."""
    found: list[tuple[ast.AST, ast.AST | None]] = []
    logging_formats: dict[int, ast.Call] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LOG_METHODS
            and len(node.args) > 1
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            logging_formats[id(node.args[0])] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str)
        ):
            found.append((node, logging_formats.get(id(node))))
    return found


def _render_node(node: ast.AST, call: ast.AST | None) -> tuple[str, tuple[Field, ...]]:
    fields = _Fields()
    if isinstance(node, ast.JoinedStr):
        return _joined(node, fields), fields.all()
    text = str(node.value)  # type: ignore[attr-defined]
    if isinstance(call, ast.Call):
        return _percent(text, list(call.args[1:]), fields), fields.all()
    return _escape(text), ()


def _enclosing_functions(tree: ast.AST) -> dict[int, str]:
    """For every node id, the qualified name of the function (or class) around it."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            child_scope = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                child_scope = f"{scope}.{child.name}" if scope else child.name
            names[id(child)] = child_scope
            visit(child, child_scope)

    visit(tree, "")
    return names


@dataclass(frozen=True)
class _Found:
    line: int
    column: int
    function: str
    template: str
    literal: str
    fields: tuple[Field, ...]


@lru_cache(maxsize=64)
def _outer_strings(source: str, file: str) -> tuple[_Found, ...]:
    """Every outermost string expression of a module, rendered once (modules run to 6,000 lines)."""
    tree = ast.parse(source, filename=file)
    scopes = _enclosing_functions(tree)
    nodes = _string_nodes(tree)
    inner: set[int] = set()
    for node, _ in nodes:
        if isinstance(node, ast.JoinedStr):
            inner.update(id(child) for child in ast.walk(node) if child is not node)
    found = []
    for node, call in nodes:
        if id(node) in inner:
            continue
        template, fields = _render_node(node, call)
        literal = template.replace("{{", "{").replace("}}", "}")
        found.append(
            _Found(node.lineno, node.col_offset, scopes.get(id(node), ""), template, literal, fields)  # type: ignore[attr-defined]
        )
    found.sort(key=lambda f: (f.line, f.column))
    return tuple(found)


def _matching(source: str, file: str, contains: str) -> list[_Found]:
    return [f for f in _outer_strings(source, file) if contains in f.literal or contains in f.template]


def extract(source: str, file: str, contains: str, occurrence: int = 0) -> Template:
    """The string expression in `source` whose template contains `contains` (the n-th, in order)."""
    matches = _matching(source, file, contains)
    if not matches:
        raise ExtractError(f"{file}: no string contains {contains!r}")
    if occurrence >= len(matches):
        raise ExtractError(f"{file}: {len(matches)} strings contain {contains!r}, no occurrence {occurrence}")
    found = matches[occurrence]
    return Template(
        file=file, line=found.line, function=found.function, template=found.template, fields=found.fields
    )


def literals(source: str, file: str = "<source>") -> tuple[str, ...]:
    """Every outermost string expression of a module as its literal text (fields as {name})."""
    return tuple(found.literal for found in _outer_strings(source, file))


def count(source: str, contains: str, file: str = "<source>") -> int:
    """How many distinct string expressions in `source` contain the text (for anchor checks)."""
    return len(_matching(source, file, contains))
