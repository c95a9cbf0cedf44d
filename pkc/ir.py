"""Parsing, verifying and printing pk IR, with diagnostics that name file:line:col.

This is the one place where pkc turns MLIR text into xDSL IR and back:

- :func:`make_context` builds an xDSL :class:`~xdsl.context.Context` with the dialects
  pkc understands (builtin, func, arith, scf, pk and pks); each but builtin is imported
  and loaded the first time the parser meets one of its ops, types or attributes.
- :func:`parse_module` parses text with a parser that records the source position of
  every operation as a ``FileLineColLoc`` on ``op.location``.
- :func:`verify_module` verifies every operation and turns the first failure into a
  :class:`PkcDiagnostic` located at the failing operation.
- :func:`print_module` prints IR (custom or generic form). Locations are never printed:
  xDSL only prints them with ``print_debuginfo=True``.

Every error a user can cause (bad syntax, unknown op, failed verifier) surfaces as a
:class:`PkcDiagnostic`, never as a raw xDSL exception.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import StringIO
from typing import Any

from xdsl.context import Context
from xdsl.dialects import builtin
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FileLineColLoc,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnknownLoc,
    UnregisteredOp,
)
from xdsl.ir import Attribute, Dialect, Operation
from xdsl.parser import Parser
from xdsl.parser.core import ForwardDeclaredValue
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import MultipleSpansParseError, ParseError, VerifyException
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

from pkc.dominance import DominanceChecker
from pkc.mlir_ints import GenericPrinter, retype_integer_attributes

__all__ = [
    "PkcDiagnostic",
    "PkcParser",
    "check_nesting",
    "deep_recursion",
    "diagnostic_at",
    "load_dialects_named_in",
    "load_pk_dialect",
    "make_context",
    "op_position",
    "op_where",
    "parse_module",
    "print_module",
    "source_snippet",
    "verify_module",
]


# --------------------------------------------------------------------------------------
# Diagnostics
# --------------------------------------------------------------------------------------


@dataclass(eq=False)
class PkcDiagnostic(Exception):
    """A user-facing diagnostic: ``file:line:col: severity: message``.

    ``line``/``col`` are 1-based and ``None`` when the diagnostic has no position (for
    example an error raised by a pass about the module as a whole). ``snippet`` is an
    optional source excerpt (the offending line and a caret) printed under the header.
    """

    file: str | None
    line: int | None
    col: int | None
    message: str
    severity: str = "error"
    snippet: str | None = None

    def __post_init__(self) -> None:
        super().__init__(self.message)

    @property
    def where(self) -> str:
        """``file:line:col: `` (or ``file: ``, or nothing) for the start of a line."""
        if self.file is not None and self.line is not None:
            return f"{self.file}:{self.line}:{self.col or 1}: "
        if self.file is not None:
            return f"{self.file}: "
        return ""

    @property
    def header(self) -> str:
        """The one-line form, without the snippet."""
        return f"{self.where}{self.severity}: {self.message}"

    def __str__(self) -> str:
        if self.snippet:
            return f"{self.header}\n{self.snippet}"
        return self.header


def _one_line(message: str) -> str:
    """Collapse a (possibly multi-line) xDSL message into one line."""
    return " ".join(part.strip() for part in str(message).splitlines() if part.strip())


def source_snippet(source: str, line: int, col: int, length: int = 1) -> str | None:
    """The ``line`` of ``source`` with a caret under columns ``col..col+length-1``."""
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].rstrip("\r")
    col = max(1, min(col, len(text) + 1))
    length = max(1, min(length, len(text) - col + 1))
    return f"{text}\n{' ' * (col - 1)}{'^' * length}"


def op_position(op: Operation) -> tuple[str | None, int | None, int | None]:
    """(file, line, col) of ``op`` if it carries a ``FileLineColLoc``, else Nones."""
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        return loc.filename.data, loc.line.data, loc.column.data
    return None, None, None


def op_where(op: Operation) -> str:
    """``'pk.wait' at file:line:col`` when the op came from a file, else just the name
    (for messages of the interpreter and codegen, which must not import each other)."""
    file, line, col = op_position(op)
    if file is not None:
        return f"'{op.name}' at {file}:{line}:{col}"
    return f"'{op.name}'"


def diagnostic_at(
    op: Operation,
    message: str,
    *,
    severity: str = "error",
    source: str | None = None,
    default_file: str | None = None,
) -> PkcDiagnostic:
    """A diagnostic located at ``op``, in MLIR's style: ``'dialect.op' op <message>``.

    Passes can ``raise diagnostic_at(op, "...")`` to report a user-facing error at an op.
    """
    text = _one_line(message)
    if not text.startswith(f"'{op.name}' "):  # unless the verifier named the op itself
        text = f"'{op.name}' op {text}"
    file, line, col = op_position(op)
    snippet = None
    if source is not None and line is not None and (file is None or file == default_file):
        snippet = source_snippet(source, line, col or 1)
    return PkcDiagnostic(file or default_file, line, col, text, severity, snippet)


# --------------------------------------------------------------------------------------
# Context
# --------------------------------------------------------------------------------------


def load_pk_dialect() -> Dialect | None:
    """``pkc.dialects.PK`` if it exists yet, else ``None``.

    Only the *absence* of the dialect is tolerated (no ``PK`` attribute, or no
    ``pkc.dialects`` package). An error inside the dialect's own code propagates: a broken
    dialect must not silently look like a missing one.
    """
    module = _pkc_dialects_module()
    pk = getattr(module, "PK", None) if module is not None else None
    return pk if isinstance(pk, Dialect) else None


def _pkc_dialects_module() -> Any:
    try:
        return importlib.import_module("pkc.dialects")
    except ModuleNotFoundError as err:
        if err.name in ("pkc", "pkc.dialects"):
            return None
        raise


# The dialects every context knows besides builtin, by name: where each one's Dialect is.
# They are registered, not loaded: xDSL imports one (through the factory) the first time
# the parser meets one of its ops, types or attributes. Importing a dialect's Python is
# most of pkc-opt's start-up (arith alone ~50 ms, pk and pks ~100 ms), and most inputs use
# a few of them.
_UPSTREAM_DIALECTS = {
    "func": ("xdsl.dialects.func", "Func"),
    "arith": ("xdsl.dialects.arith", "Arith"),
    "scf": ("xdsl.dialects.scf", "Scf"),
}
_PKC_DIALECTS = {"pk": "PK", "pks": "PKS"}  # attributes of pkc.dialects


def _dialect_factory(module: Any, attr: str, name: str) -> Callable[[], Dialect]:
    def load() -> Dialect:
        source = importlib.import_module(module) if isinstance(module, str) else module
        dialect = getattr(source, attr)
        if not isinstance(dialect, Dialect) or dialect.name != name:
            raise TypeError(f"{source.__name__}.{attr} is not the '{name}' dialect: {dialect!r}")
        return dialect

    return load


def make_context(
    *,
    allow_unregistered: bool = False,
    extra_dialects: Iterable[Dialect] = (),
) -> Context:
    """An xDSL context with builtin loaded and func, arith, scf, pk and pks registered
    (loaded on first use; pk and pks when ``pkc.dialects`` exports them)."""
    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(builtin.Builtin)
    for name, (module, attr) in _UPSTREAM_DIALECTS.items():
        ctx.register_dialect(name, _dialect_factory(module, attr, name))
    package = _pkc_dialects_module()
    # What the package exports, read without building the dialects (a broken package
    # raises here rather than looking like a missing dialect).
    exported = getattr(package, "__all__", ()) if package is not None else ()
    for name, attr in _PKC_DIALECTS.items():
        if attr in exported:
            ctx.register_dialect(name, _dialect_factory(package, attr, name))
    for dialect in extra_dialects:
        if dialect.name not in ctx.registered_dialect_names:
            ctx.load_dialect(dialect)
    return ctx


def load_dialects_named_in(ctx: Context, text: str) -> None:
    """Load now each registered dialect whose name ``text`` mentions (``name.`` as a
    word): the parser would load them on first use; a tool loads them up front, where it
    imports cheaply (:func:`pkc.tools.fast_start.light_imports`). A name only mentioned
    in a comment costs the load, nothing else."""
    loaded = {d.name for d in ctx.loaded_dialects}
    for name in list(ctx.registered_dialect_names):
        if name not in loaded and re.search(rf"(?<![\w.$-]){re.escape(name)}\.", text):
            ctx.get_optional_dialect(name)


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------


# xDSL's string-literal pattern nests quantifiers ('"(?:[^"\\...]+|\\...)*"'): on a string
# with no closing quote the regex engine tries every way of splitting it into runs, which
# is exponential in its length (a 30-character unterminated string hung pkc-opt). The
# same language with possessive quantifiers (Python >= 3.11) never backtracks into a run.
_STRING_LITERAL = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')
MLIRLexer._unescaped_characters_regex = _STRING_LITERAL


class PkcParser(Parser):
    """xDSL's parser, plus: every op gets a ``FileLineColLoc`` of where it starts.

    An explicit ``loc(...)`` written in the source wins (as in MLIR). Unknown operations
    are reported at the op name, saying whether the dialect or only the op is unknown.
    """

    def __init__(self, ctx: Context, input: str, name: str = "<unknown>") -> None:
        super().__init__(ctx, input, name)
        self.filename = name
        self._last_consumed: Span[str] | None = None
        self._last_consumed_kind: MLIRTokenKind | None = None

    # Remember the last consumed token so that errors about it can point at it.
    def _consume_token(self, expected_kind=None):  # type: ignore[override]
        token = super()._consume_token(expected_kind)
        self._last_consumed = token.span
        self._last_consumed_kind = token.kind
        return token

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        if self._current_token.kind == MLIRTokenKind.EOF:
            # MLIR accepts an empty input (only comments/whitespace) as an empty module.
            return ModuleOp([])
        start = self._current_token.span
        module = super().parse_module(allow_implicit_module)
        if isinstance(module.location, UnknownLoc):
            # An implicit module starts where its first op does: errors about the module
            # as a whole (a symbol defined twice, no kernel to emit) then have a place.
            loc = start.get_location()
            module.location = FileLineColLoc(
                StringAttr(self.filename), IntAttr(loc.line), IntAttr(loc.col)
            )
        return module

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as err:
            # An attribute or type built while parsing this op failed its verifier:
            # report it at the op (the innermost op being parsed catches it first).
            self.raise_error(_one_line(str(err)), start)
        except (ParseError, RecursionError):
            raise
        except Exception as err:  # noqa: BLE001 - see below
            # xDSL's parsers assume well-formed values in places (an f80 constant cannot
            # even be printed in an error message): whatever they raise on bad input is
            # reported at the op being parsed, never as pkc-opt's internal error.
            detail = _one_line(str(err))
            detail = f"{type(err).__name__}: {detail}" if detail else type(err).__name__
            self.raise_error(f"cannot parse this operation ({detail})", start)
        if isinstance(op.location, UnknownLoc):
            loc = start.get_location()
            op.location = FileLineColLoc(
                StringAttr(self.filename), IntAttr(loc.line), IntAttr(loc.col)
            )
        return op

    def parse_optional_builtin_int_or_float_attr(self):  # type: ignore[override]
        start = self._current_token.span.start
        try:
            attr = super().parse_optional_builtin_int_or_float_attr()
        except (OverflowError, ValueError) as err:
            # xDSL packs a float constant into its type to round it, and that fails for
            # a value beyond the type's range (1.0e39 : f32): say so at the constant.
            text = self.lexer.input.content[start : self.pos].strip()
            self.raise_error(f"constant '{text}' is out of the range of its type ({err})",
                             start, self.pos)
        if isinstance(attr, FloatAttr) and not _printable_float_type(attr.type):
            # xDSL can hold an f80 / f128 constant but neither print nor pack it.
            text = self.lexer.input.content[start : self.pos].strip()
            self.raise_error(f"constant '{text}': {attr.type} constants are not supported",
                             start, self.pos)
        if isinstance(attr, FloatAttr) and math.isinf(attr.value.data):
            # bf16 rounds without an error: a finite literal that became infinite overflowed.
            text = self.lexer.input.content[start : self.pos].strip()
            literal = text.split(":")[0].strip()
            try:
                finite = not literal.lower().startswith(("0x", "-0x")) and math.isfinite(float(literal))
            except ValueError:
                finite = False
            if finite:
                self.raise_error(f"constant '{text}' is out of the range of its type", start, self.pos)
        return attr

    def _get_op_by_name(self, name: str):  # type: ignore[override]
        op_type = self.ctx.get_optional_op(name, dialect_stack=self._parser_state.dialect_stack)
        dialect = name.split(".", 1)[0] if "." in name else None
        dialect_known = dialect in self.ctx.registered_dialect_names
        custom_form = self._last_consumed_kind == MLIRTokenKind.BARE_IDENT
        if op_type is not None and not issubclass(op_type, UnregisteredOp):
            return op_type
        if op_type is not None and not dialect_known and not custom_form:
            return op_type  # --allow-unregistered-dialect: keep it opaque
        if dialect is None:
            msg = f"unknown operation '{name}'"
        elif dialect_known:
            msg = f"unknown operation '{name}': dialect '{dialect}' has no such op"
        else:
            msg = f"unknown operation '{name}': dialect '{dialect}' is not registered"
            if dialect == "pk":
                msg += " (pkc.dialects does not export PK)"
            elif op_type is not None:
                msg += " (an unregistered op must be written in the generic form)"
        self.raise_error(msg, self._last_consumed)


def _printable_float_type(t: Attribute) -> bool:
    try:
        t.format  # type: ignore[attr-defined]  # f80/f128: NotImplementedError
    except NotImplementedError:
        return False
    except AttributeError:
        pass
    return True


def _parse_error_to_diagnostic(err: ParseError, filename: str) -> PkcDiagnostic:
    span = err.span
    loc = span.get_location()
    text = span.input.content
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    length = max(1, span.end - span.start)
    snippet = source_snippet(text, loc.line, loc.col, length)
    if isinstance(err, MultipleSpansParseError):
        notes: list[str] = []
        default_note = _one_line(err.ref_text or "").rstrip(":")
        for ref_span, ref_msg in err.refs:
            ref_loc = ref_span.get_location()
            note = _one_line(ref_msg or "") or default_note
            notes.append(f"{filename}:{ref_loc.line}:{ref_loc.col}: note: {note}")
        snippet = "\n".join(filter(None, [snippet, *notes]))
    return PkcDiagnostic(filename, loc.line, loc.col, _one_line(err.msg), snippet=snippet)


# Regions nested deeper than this are refused before parsing, with a located error.
# xDSL's parser, verifier and printer recurse about 7-20 Python frames per level; pkc-opt
# runs under a recursion limit of RECURSION_LIMIT (see :func:`deep_recursion`), so every
# nesting up to MAX_NESTING works (mlir-opt handles about 400).
MAX_NESTING = 1000
RECURSION_LIMIT = 40_000
_NESTING_TOKEN = re.compile(r'"(?:[^"\\\n]++|\\.)*+"?|//[^\n]*+|[{(\[]|[})\]]')


def check_nesting(text: str, filename: str) -> None:
    """Raise a located :class:`PkcDiagnostic` where brackets nest deeper than MAX_NESTING."""
    depth = 0
    for m in _NESTING_TOKEN.finditer(text):
        c = m.group()
        if c in "{([":
            depth += 1
            if depth > MAX_NESTING:
                line = text.count("\n", 0, m.start()) + 1
                col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                raise PkcDiagnostic(
                    filename, line, col,
                    f"regions and brackets nest more than {MAX_NESTING} levels deep here "
                    "(pkc-opt's limit)",
                    snippet=source_snippet(text, line, col),
                )
        elif c in "})]":
            depth = max(0, depth - 1)


@contextmanager
def deep_recursion(limit: int = RECURSION_LIMIT):
    """Raise Python's recursion limit for the duration (xDSL recurses once per nesting
    level); the previous limit is restored after."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def parse_module(
    text: str,
    filename: str = "<stdin>",
    *,
    ctx: Context | None = None,
    first_line: int = 1,
) -> ModuleOp:
    """Parse MLIR text into a ``ModuleOp``; raise :class:`PkcDiagnostic` on bad input.

    ``first_line`` is the line of ``filename`` on which ``text`` starts (for chunks of a
    split input file), so that positions name lines of the whole file.
    """
    if ctx is None:
        ctx = make_context()
    padded = "\n" * (first_line - 1) + text
    check_nesting(padded, filename)
    parser: PkcParser | None = None
    try:
        # The constructor lexes the first token: a bad first character fails here.
        parser = PkcParser(ctx, padded, filename)
        module = parser.parse_module()
        _check_forward_references(module, padded, filename)
        # mlir-opt prints pkc's plain integers back as `N : i64` (pkc.mlir_ints).
        retype_integer_attributes(module)
        return module
    except ParseError as err:
        raise _parse_error_to_diagnostic(err, filename) from None
    except VerifyException as err:
        # A verifier that ran outside any op (e.g. of a top-level alias definition):
        # point at where the parser stopped.
        assert parser is not None  # the constructor verifies nothing
        span = parser._last_consumed or parser._current_token.span
        raise _parse_error_to_diagnostic(ParseError(span, str(err)), filename) from None


def _check_forward_references(module: ModuleOp, text: str, filename: str) -> None:
    """xDSL leaves a forward reference unresolved when the name is defined only inside a
    nested region of a later op (``scf.for ... step %s { %s = ... }``): name it."""
    for op in _preorder(module):
        for i, value in enumerate(op.operands):
            if isinstance(value, ForwardDeclaredValue):
                name = f" (%{value.name_hint})" if value.name_hint else ""
                raise diagnostic_at(
                    op, f"operand #{i}{name} is not defined in any region that encloses "
                    "this use", source=text, default_file=filename,
                )


# --------------------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------------------


def verify_module(
    module: Operation, *, source: str | None = None, filename: str | None = None
) -> None:
    """Verify every op (pre-order); raise the first failure as a :class:`PkcDiagnostic`.

    The message names the op (``'pk.matmul' op ...``) and the diagnostic carries the op's
    source position when it has one. ``source``/``filename`` add a snippet of the line.
    """
    dominance = DominanceChecker()
    for op in _preorder(module):
        try:
            op.verify(verify_nested_ops=False)
            _verify_blocks_of(op)
            _verify_upstream(op)
            dominance.check(op)
        except VerifyException as err:
            raise diagnostic_at(op, str(err), source=source, default_file=filename) from None


def _preorder(root: Operation) -> Iterator[Operation]:
    """``root.walk()`` without nested generators: xDSL's walk resumes one generator per
    nesting level for every op, quadratic in the depth of deeply nested IR."""
    stack = [root]
    while stack:
        op = stack.pop()
        yield op
        children = [child for region in op.regions for block in region.blocks for child in block.ops]
        stack.extend(reversed(children))


def _verify_upstream(op: Operation) -> None:
    """Checks MLIR makes on upstream ops that xDSL's verifiers do not."""
    # arith / scf are looked up, not imported: an op of a dialect never loaded is not here.
    arith, scf = sys.modules.get("xdsl.dialects.arith"), sys.modules.get("xdsl.dialects.scf")
    if arith is None:
        return
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, FloatAttr):
        from pkc.dialects.types import float_fits

        if not float_fits(op.value.value.data, op.value.type):
            raise VerifyException(f"'arith.constant' value {op.value.value.data} is out of the "
                                  f"range of {op.value.type}")
    if scf is not None and isinstance(op, scf.ForOp):
        step = op.step.owner
        if isinstance(step, arith.ConstantOp) and isinstance(step.value, IntegerAttr):
            if step.value.value.data <= 0:
                raise VerifyException(
                    f"'scf.for' constant step operand must be positive, got {step.value.value.data}"
                )


def _verify_blocks_of(op: Operation) -> None:
    """The one check xDSL makes in ``Block.verify`` (skipped with verify_nested_ops=False)."""
    if op.has_trait(NoTerminator):
        return
    for region in op.regions:
        if len(region.blocks) == 1 and region.block.first_op is None:
            raise VerifyException(
                "contains empty block in single-block region that expects at least a terminator"
            )


# --------------------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------------------


def _sorted_attribute(attr: Attribute) -> Attribute:
    if isinstance(attr, DictionaryAttr):
        return DictionaryAttr({k: _sorted_attribute(attr.data[k]) for k in sorted(attr.data)})
    if isinstance(attr, ArrayAttr):
        return ArrayAttr([_sorted_attribute(a) for a in attr.data])
    return attr


def sort_attributes(root: Operation) -> None:
    """Put every attribute dictionary (an op's attributes and properties, and nested
    dictionaries) in MLIR's order, sorted by name, as mlir-opt prints them; xDSL keeps
    insertion order."""
    for op in _preorder(root):
        op.attributes = {k: _sorted_attribute(op.attributes[k]) for k in sorted(op.attributes)}
        op.properties = {k: _sorted_attribute(op.properties[k]) for k in sorted(op.properties)}


def print_module(module: Operation, *, generic: bool = False) -> str:
    """Print ``module`` (custom or generic form), without locations, ending in a newline.

    The generic form is what mlir-opt reads and writes, so its attribute dictionaries are
    sorted as mlir-opt sorts them and their plain integers print as ``N : i64``
    (:mod:`pkc.mlir_ints`): a round trip through mlir-opt compares as text."""
    if generic:
        sort_attributes(module)
    out = StringIO()
    # The generic form prints plain integers (IntAttr) as MLIR's `N : i64`: upstream
    # mlir-opt cannot parse `#builtin.int<N>` (pkc.mlir_ints, read back by parse_module).
    printer = GenericPrinter(stream=out, print_generic_format=generic)
    printer.print_op(module)
    text = out.getvalue()
    return text if text.endswith("\n") else text + "\n"
