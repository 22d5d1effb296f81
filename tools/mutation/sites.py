"""Mutation sites: where a target file can be changed in one place, and the changed source.

Each site has the chain of functions whose body holds it (outermost first, as Python's `__qualname__`s), so that
the runner can put the mutated code into the live functions of an imported module; a site outside any function body
(a table, a constant, a decorator or default argument) has an empty chain and runs at import.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

_COMPARE_FLIPS = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
                  ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BOUNDARY = {ast.Lt: ast.LtE, ast.Gt: ast.GtE, ast.LtE: ast.Lt, ast.GtE: ast.Gt}
_SEVERITY_SWAPS = {"FAIL": "WARN", "WARN": "PASS", "PASS": "FAIL", "UNKNOWN": "PASS", "SKIP": "FAIL"}
_ACTION_SWAPS = {"none": "watch", "watch": "none", "drain": "watch", "reset": "drain", "reboot": "reset",
                 "rma": "reboot"}
_SYMBOL = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in",
           ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


@dataclass(frozen=True)
class Mutant:
    path: str  # relative to the project root
    index: int  # the index-th mutation site of this file, in visiting order
    line: int
    description: str
    scope: tuple[str, ...] = ()  # qualnames of the enclosing functions, outermost first; () = runs at import


class _Sites(ast.NodeTransformer):
    """Visits every mutation site in order; applies the one numbered `apply` (or none, when listing) and records
    the source span it replaces and the replacement node(s) in `patch`."""

    def __init__(self, apply: Optional[int] = None) -> None:
        self.apply = apply
        self.found: list[tuple[int, str, tuple[str, ...]]] = []  # (line, description, scope) per site
        self.patch: Optional[tuple[ast.AST, object]] = None  # (original span node, replacement node or statements)
        self._names: list[str] = []  # qualname parts
        self._scope: list[str] = []  # enclosing function qualnames

    def _site(self, node: ast.AST, description: str) -> bool:
        self.found.append((getattr(node, "lineno", 0), description, tuple(self._scope)))
        return len(self.found) - 1 == self.apply

    def _visit_list(self, nodes: list) -> list:
        out: list = []
        for node in nodes:
            new = self.visit(node)
            if new is not None:
                out.extend(new) if isinstance(new, list) else out.append(new)
        return out

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        # Same order as generic_visit (args, body, decorators, returns); only the body runs inside the function.
        node.args = self.visit(node.args)
        qualname = ".".join([*self._names, node.name])
        self._names += [node.name, "<locals>"]
        self._scope.append(qualname)
        node.body = self._visit_list(node.body)
        self._scope.pop()
        del self._names[-2:]
        node.decorator_list = self._visit_list(node.decorator_list)
        if node.returns is not None:
            node.returns = self.visit(node.returns)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.bases = self._visit_list(node.bases)
        node.keywords = self._visit_list(node.keywords)
        self._names.append(node.name)
        node.body = self._visit_list(node.body)
        self._names.pop()
        node.decorator_list = self._visit_list(node.decorator_list)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            for table, kind in ((_COMPARE_FLIPS, "flip"), (_BOUNDARY, "boundary")):
                new = table.get(type(op))
                if new is not None and self._site(node, f"{kind} `{_SYMBOL[type(op)]}` → `{_SYMBOL[new]}`"):
                    node.ops[i] = new()
                    self.patch = (node, node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        other = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"`{'and' if isinstance(node.op, ast.And) else 'or'}` → "
                            f"`{'or' if other is ast.Or else 'and'}`"):
            node.op = other()
            self.patch = (node, node)
        return node

    def _negate(self, node: ast.AST) -> None:
        if self._site(node.test, "condition negated"):
            self.patch = (node.test, ast.UnaryOp(op=ast.Not(), operand=node.test))
            node.test = self.patch[1]

    def visit_If(self, node: ast.If) -> Optional[ast.AST]:
        self.generic_visit(node)
        self._negate(node)
        if node.body and isinstance(node.body[-1], ast.Return) and self._site(node, "early return removed"):
            replacement = [ast.Pass()] if not node.orelse else node.orelse  # the guard and its return go
            self.patch = (node, replacement)
            return replacement
        return node

    def visit_While(self, node: ast.While) -> ast.AST:
        self.generic_visit(node)
        self._negate(node)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        self._negate(node)
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            if self._site(node, "returns None"):
                self.patch = (node.value, ast.Constant(None))
                node.value = self.patch[1]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "Status" and node.attr in _SEVERITY_SWAPS:
            new = _SEVERITY_SWAPS[node.attr]
            if self._site(node, f"Status.{node.attr} → Status.{new}"):
                node.attr = new
                self.patch = (node, node)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, str) and node.value in _ACTION_SWAPS:
            new = _ACTION_SWAPS[node.value]
            if self._site(node, f'action "{node.value}" → "{new}"'):
                replacement = ast.copy_location(ast.Constant(new), node)
                self.patch = (node, replacement)
                return replacement
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node  # f-string parts are text, not actions

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node  # docstrings
        return self.generic_visit(node)


def list_mutants(path: str, root: Path) -> list[Mutant]:
    sites = _Sites()
    sites.visit(ast.parse((root / path).read_text()))
    return [Mutant(path, i, line, text, scope) for i, (line, text, scope) in enumerate(sites.found)]


def _splice(source: str, span: ast.AST, replacement: object) -> str:
    """The source with the span's text replaced, every other line (comments, numbering) as it was."""
    lines = source.splitlines(keepends=True)
    start = sum(len(x) for x in lines[:span.lineno - 1]) + len(lines[span.lineno - 1].encode()[:span.col_offset]
                                                                 .decode())
    end = sum(len(x) for x in lines[:span.end_lineno - 1]) + len(lines[span.end_lineno - 1].encode()
                                                                 [:span.end_col_offset].decode())
    extra = span.end_lineno - span.lineno  # line breaks the span held: kept, so that later lines keep their number
    if isinstance(replacement, list):  # statements replacing a statement, at its indentation
        text = ast.unparse(ast.Module(body=replacement, type_ignores=[]))
        text = text.replace("\n", "\n" + " " * span.col_offset) + "\n" * max(0, extra - text.count("\n"))
    else:
        text = f"({ast.unparse(replacement)}{chr(10) * extra})"
    return source[:start] + text + source[end:]


def mutated_source(mutant: Mutant, root: Path) -> str:
    """The file with the mutant applied: the original text changed at the site only; where that splice does not
    parse to the mutated tree, the whole mutated tree unparsed (comments and line numbers then lost)."""
    source = (root / mutant.path).read_text()
    sites = _Sites(apply=mutant.index)
    tree = ast.fix_missing_locations(sites.visit(ast.parse(source)))
    if sites.patch is not None:
        try:
            spliced = _splice(source, *sites.patch)
            if ast.dump(ast.parse(spliced)) == ast.dump(tree):
                return spliced
        except (SyntaxError, ValueError, IndexError):
            pass
    return ast.unparse(tree) + "\n"


@lru_cache(maxsize=None)
def body_lines(path: str, root: Path) -> dict[str, range]:
    """Each function's qualname → the lines of its body (which run only when it is called)."""
    spans: dict[str, range] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                spans[prefix + child.name] = range(child.body[0].lineno, (child.end_lineno or child.lineno) + 1)
                walk(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse((root / path).read_text()), "")
    return spans
