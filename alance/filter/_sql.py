"""The sqlglot side of filter compilation: Lance's SQL dialect, parsing, AST shape tests.

Also holds the tables mapping sqlglot node classes to the pyarrow kernels that implement
them. Nothing here looks at a schema.
"""

from __future__ import annotations

import re
import secrets
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError

from alance.errors import InvalidInputError


class LanceSql(Dialect):
    """sqlglot dialect matching Lance's filter grammar quirks."""

    class Tokenizer(tokens.Tokenizer):
        IDENTIFIERS: ClassVar = ["`"]
        QUOTES: ClassVar = ["'", '"']
        HEX_STRINGS: ClassVar = [("X'", "'"), ("x'", "'")]  # binary literals: X'0aff'
        STRING_ESCAPES: ClassVar = ["'"]  # backslashes stay in the literal (LIKE uses them)


COMPARISONS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.EQ: pc.equal,
    exp.NEQ: pc.not_equal,
    exp.LT: pc.less,
    exp.LTE: pc.less_equal,
    exp.GT: pc.greater,
    exp.GTE: pc.greater_equal,
}
ARITHMETIC: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Add: pc.add,
    exp.Sub: pc.subtract,
    exp.Mul: pc.multiply,
    exp.Div: pc.divide,  # integer inputs give truncating integer division
    exp.Mod: pc.remainder,  # sign of the dividend, like Rust's %
}
UNARY_FUNCS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.Lower: pc.utf8_lower,
    exp.Upper: pc.utf8_upper,
    exp.Abs: pc.abs,
}
PATTERN_FUNCS: dict[type[exp.Expression], Callable[..., pc.Expression]] = {
    exp.StartsWith: pc.starts_with,
    exp.EndsWith: pc.ends_with,
    exp.RegexpLike: pc.match_substring_regex,
    exp.Contains: pc.match_substring,
}


# -- limits ------------------------------------------------------------------------------------

#: Deepest nesting of parentheses and prefix operators (NOT, unary minus) a filter may have.
#: pylance (DataFusion's SQL parser) refuses 47 levels and more; sqlglot's recursive descent
#: takes about 21 Python frames per parenthesis, so deeper input is refused before parsing.
MAX_NESTING = 46
#: Python frames sqlglot may use per nesting level (parentheses cost the most).
_FRAMES_PER_LEVEL = 24
#: IN lists with at least this many items skip sqlglot: their literals are read by a regular
#: expression (sqlglot takes ~15 us per item to tokenize and parse, ~3 s for 200,000 items).
FAST_IN_LIST_ITEMS = 16
#: Longest filter text quoted in full in error messages.
_MESSAGE_SQL_CHARS = 300


def quoted_sql(sql: str) -> str:
    if len(sql) <= _MESSAGE_SQL_CHARS:
        return repr(sql)
    return f"{sql[:_MESSAGE_SQL_CHARS // 2]!r}...({len(sql)} characters)"


# Tokens that hide their contents from the scans below: string literals, quoted identifiers
# and comments (an unterminated one is left to sqlglot to report).
_HIDDEN = r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|--[^\n]*|/\*.*?(?:\*/|\Z)"""
_NESTING_TOKENS = re.compile(
    rf"(?P<hidden>{_HIDDEN})|(?P<open>\()|(?P<close>\))|(?P<word>[A-Za-z_][A-Za-z_0-9]*"
    r"|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+)|(?P<sign>[-+~])|(?P<other>\S)", re.S)
_NOT = re.compile(r"\bNOT\b", re.I)


def nesting_depth(sql: str) -> int:
    """How deeply ``sql`` nests: parentheses plus runs of prefix operators (``NOT``, unary
    ``-``/``+``/``~``) open at any point, as pylance counts them. Linear; a few filters
    with hardly any parentheses or prefix operators are answered by counting alone."""
    rough = sum(map(sql.count, "(-+~")) + len(_NOT.findall(sql))
    if rough <= MAX_NESTING:
        return rough
    depth = run = deepest = 0  # levels open, prefix operators pending at this level
    saved: list[tuple[int, int]] = []
    operand = False  # whether the previous token ended an operand (then -/+ are binary)
    for m in _NESTING_TOKENS.finditer(sql):
        kind = m.lastgroup
        if kind == "hidden":
            operand = operand or m.group()[0] in "'\"`"
            continue
        if kind == "open":
            saved.append((depth, run))
            depth, run, operand = depth + run + 1, 0, False
        elif kind == "close":
            depth, run = saved.pop() if saved else (0, 0)
            operand = True
        elif kind == "word":
            word = m.group().upper()
            if word == "NOT":
                run, operand = run + 1, False
            elif word in ("AND", "OR"):
                run, operand = 0, False
            else:
                operand = True
        elif kind == "sign" and not operand:
            run += 1
        else:  # a binary operator or a comma
            run, operand = 0, False
        deepest = max(deepest, depth + run)
    return deepest


_room_lock = threading.Lock()
_room_users = 0
_room_saved = 0


def _stack_depth() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1  # type: ignore[assignment]
    return n


@contextmanager
def _stack_room(levels: int) -> Iterator[None]:
    """Make sure the recursion limit leaves room for sqlglot to parse ``levels`` nested
    levels from here (raised for the duration, restored by the last user)."""
    global _room_users, _room_saved
    need = _stack_depth() + levels * _FRAMES_PER_LEVEL + 100
    with _room_lock:
        if _room_users == 0:
            _room_saved = sys.getrecursionlimit()
        _room_users += 1
        if need > sys.getrecursionlimit():
            sys.setrecursionlimit(need)
    try:
        yield
    finally:
        with _room_lock:
            _room_users -= 1
            if _room_users == 0:
                sys.setrecursionlimit(_room_saved)


# -- IN lists of literals, without sqlglot ------------------------------------------------------


@dataclass(frozen=True)
class LiteralList:
    """The items of an IN list that are all plain SQL literals: Python values (``None`` for
    NULL) with the Arrow type each literal has on its own (int64, uint64, float64, string,
    bool, binary, null), as :mod:`alance.filter._values` gives them."""

    values: list[object]
    types: list[pa.DataType]


#: Where a long IN list's literals are kept on the placeholder column that replaces them.
_LITERALS_META = "alance_literal_list"
#: Where the text a tree was parsed from is kept on its root (for messages).
SQL_META = "alance_sql"
# (Unambiguous on purpose: space may follow a minus sign only, so a list that turns out not
# to be all literals is given up on in linear time, with no backtracking.)
_NUMBER = r"(?:-\s*)?(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][-+]?\d++)?+"
_ITEM = rf"""(?:{_NUMBER}|'(?:[^']|'')*+'|"[^"']*+"|(?:NULL|TRUE|FALSE)\b)"""
_IN_OPEN = re.compile(rf"(?P<hidden>{_HIDDEN})|\bIN\s*\(", re.I | re.S)
_LIST_REST = re.compile(rf"\s*+{_ITEM}(?:\s*+,\s*+{_ITEM})*+\s*+\)", re.I)
_ITEMS = re.compile(rf"""(?P<num>{_NUMBER})|'(?P<sq>(?:[^']|'')*)'|"(?P<dq>[^"']*)"|"""
                    r"(?P<kw>NULL|TRUE|FALSE)\b", re.I)
_INT_MIN, _INT_MAX, _UINT_MAX = -(2**63), 2**63 - 1, 2**64 - 1


def _number(text: str) -> tuple[object, pa.DataType]:
    """A numeric literal's value and type, as ``_values.number_literal`` gives them."""
    text = text.replace(" ", "").replace("\t", "").replace("\n", "").replace("\r", "")
    try:
        value = int(text)
    except ValueError:
        return float(text), pa.float64()
    if _INT_MIN <= value <= _INT_MAX:
        return value, pa.int64()
    if 0 <= value <= _UINT_MAX:
        return value, pa.uint64()
    return float(value), pa.float64()


def _read_items(body: str) -> LiteralList:
    values: list[object] = []
    types: list[pa.DataType] = []
    string, null, boolean = pa.string(), pa.null(), pa.bool_()
    for m in _ITEMS.finditer(body):
        kind = m.lastgroup
        if kind == "num":
            value, typ = _number(m.group("num"))
        elif kind == "sq":
            value, typ = m.group("sq").replace("''", "'"), string
        elif kind == "dq":
            value, typ = m.group("dq"), string
        else:
            word = m.group("kw").upper()
            value, typ = (None, null) if word == "NULL" else (word == "TRUE", boolean)
        values.append(value)
        types.append(typ)
    return LiteralList(values, types)


def _lift_literal_lists(sql: str) -> tuple[str, dict[str, LiteralList]]:
    """``sql`` with every IN list of :data:`FAST_IN_LIST_ITEMS` or more plain literals
    replaced by a placeholder column name, and the literals of each placeholder."""
    if len(sql) < 4 * FAST_IN_LIST_ITEMS:
        return sql, {}
    lifted: dict[str, LiteralList] = {}
    parts: list[str] = []
    tag = f"__alance_in_{secrets.token_hex(6)}_"
    pos = scan = 0
    while (m := _IN_OPEN.search(sql, scan)) is not None:
        scan = m.end()
        if m.lastgroup == "hidden":
            continue
        rest = _LIST_REST.match(sql, m.end())
        if rest is None:
            continue
        body = sql[m.end(): rest.end() - 1]
        if body.count(",") + 1 < FAST_IN_LIST_ITEMS:
            continue
        name = f"{tag}{len(lifted)}"
        lifted[name] = _read_items(body)
        parts.append(sql[pos: m.end()])
        parts.append(f"{name})")
        pos = scan = rest.end()
    if not lifted:
        return sql, {}
    parts.append(sql[pos:])
    return "".join(parts), lifted


def _attach_literal_lists(tree: exp.Expression, lifted: dict[str, LiteralList]) -> bool:
    """Attach each lifted list to its placeholder; False unless every placeholder turned out
    to be the only item of an IN list (then the text was not cut where it looked)."""
    found = 0
    for column in tree.find_all(exp.Column):
        name = column.name
        if name not in lifted:
            continue
        parent = column.parent
        if (column.table or not isinstance(parent, exp.In) or len(parent.expressions) != 1
                or column.args.get("this") is None or column.this.args.get("quoted")):
            return False
        column.meta[_LITERALS_META] = lifted[name]
        found += 1
    return found == len(lifted)


def literal_list(node: exp.In) -> LiteralList | None:
    """The lifted literals of an IN list parsed with ``literal_lists=True`` (else None)."""
    items = node.expressions
    if len(items) == 1 and isinstance(items[0], exp.Column):
        found = items[0].meta.get(_LITERALS_META)
        return found if isinstance(found, LiteralList) else None
    return None


def _parse_text(sql: str, original: str) -> exp.Expression:
    depth = nesting_depth(sql)
    if depth > MAX_NESTING:
        raise InvalidInputError(
            f"the filter {quoted_sql(original)} nests {depth} levels deep (parentheses and "
            f"NOT/unary operators); at most {MAX_NESTING} are supported")
    try:
        with _stack_room(depth):
            parsed = sqlglot.parse(sql, dialect=LanceSql)
    except SqlglotError as exc:
        raise InvalidInputError(f"cannot parse filter {quoted_sql(original)}: "
                                f"{_shorter(str(exc))}") from exc
    except RecursionError:
        raise InvalidInputError(f"the filter {quoted_sql(original)} nests too deeply to "
                                "parse") from None
    if len(parsed) != 1 or parsed[0] is None:
        raise InvalidInputError(f"a filter must be a single expression: {quoted_sql(original)}")
    node = parsed[0]
    assert isinstance(node, exp.Expression)
    return node


def _shorter(text: str) -> str:
    text = _ANSI.sub("", text)  # the parser underlines the error with terminal codes
    return text if len(text) <= 2 * _MESSAGE_SQL_CHARS else text[: 2 * _MESSAGE_SQL_CHARS] + "..."


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_filter(sql: str, *, literal_lists: bool = False) -> exp.Expression:
    """Parse one filter expression, rejecting empty text and trailing statements.

    Input nesting deeper than :data:`MAX_NESTING` is refused before parsing. With
    ``literal_lists``, IN lists of many plain literals are read without sqlglot: each
    becomes one placeholder column whose :func:`literal_list` holds the values (callers
    that look at IN items must use it).
    """
    if not isinstance(sql, str):
        raise InvalidInputError(f"a filter must be a string, got {type(sql).__name__}")
    if not sql.strip():
        raise InvalidInputError("the filter is empty")
    if literal_lists:
        text, lifted = _lift_literal_lists(sql)
        if lifted:
            try:
                tree = _parse_text(text, sql)
            except InvalidInputError:
                tree = None
            if tree is not None and _attach_literal_lists(tree, lifted):
                tree.meta[SQL_META] = sql
                return tree
            # The placeholders did not land where expected (or the shortened text did not
            # parse): parse the text as written, so errors and results are sqlglot's.
    tree = _parse_text(sql, sql)
    tree.meta[SQL_META] = sql
    return tree


def flatten_chain(node: exp.Expression) -> list[exp.Expression]:
    """The operands of a chain of one associative operator (``AND`` or ``OR``), through
    parentheses, left to right. Iterative: a 100,000-term chain is a 100,000-deep tree."""
    kind = type(node)
    out: list[exp.Expression] = []
    stack = [node]
    while stack:
        item = unparen(stack.pop())
        if type(item) is kind:
            stack.append(item.expression)
            stack.append(item.this)
        else:
            out.append(item)
    return out


#: Arrow flattens a chain of one associative call however it is nested, and recurses once
#: per term when it binds the expression: about 9,000 terms overflow an 8 MB thread stack
#: (a segmentation fault). Longer chains are cut into groups of this many terms, each
#: wrapped in ``if_else(group, true, false)`` (same value, NULL included), which Arrow does
#: not flatten through.
ARROW_CHAIN_TERMS = 256


def _pairwise(fn: Callable[[pc.Expression, pc.Expression], pc.Expression],
              parts: list[pc.Expression]) -> pc.Expression:
    while len(parts) > 1:
        paired = [fn(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            paired.append(parts[-1])
        parts = paired
    return parts[0]


def balanced(fn: Callable[[pc.Expression, pc.Expression], pc.Expression],
             parts: list[pc.Expression]) -> pc.Expression:
    """``parts`` (boolean) joined by an associative binary ``fn`` (Kleene AND/OR) as a
    balanced tree (depth log2(n)), in groups Arrow binds without deep recursion (see
    :data:`ARROW_CHAIN_TERMS`)."""
    step = ARROW_CHAIN_TERMS
    while len(parts) > step:
        parts = [pc.if_else(_pairwise(fn, parts[i: i + step]), True, False)
                 for i in range(0, len(parts), step)]
    return _pairwise(fn, parts)


def unparen(node: exp.Expression) -> exp.Expression:
    """Strip any number of enclosing parentheses."""
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def is_sql_literal(node: exp.Expression) -> bool:
    """True for a plain SQL literal: a number (possibly negated), string, boolean or NULL."""
    node = unparen(node)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        return not node.this.is_string
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null, exp.HexString))


def is_column_ref(node: exp.Expression) -> bool:
    """True for a column, or a struct field of one (``a.b`` or ``a['b']``)."""
    node = unparen(node)
    if isinstance(node, exp.Column):
        return True
    if isinstance(node, exp.Dot):
        return is_column_ref(node.this)
    if isinstance(node, exp.Bracket):
        keys = node.expressions
        return (
            len(keys) == 1
            and isinstance(keys[0], exp.Literal)
            and keys[0].is_string
            and (is_column_ref(node.this))
        )
    return False
