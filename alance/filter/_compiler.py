"""The filter compiler: walks a sqlglot tree and builds a typed pyarrow expression.

Column references are resolved against the schema (recording which top-level columns the
filter reads), literals are coerced with the rules in :mod:`alance.filter._values`, and
each supported SQL construct is handled by a method (``on_<node class>`` for the less
common ones, looked up by name).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
from sqlglot import exp

from alance.errors import InvalidInputError, no_such_column
from alance.filter._arrow_types import arrow_type_named
from alance.filter._json_functions import JSON_FUNCTIONS, json_call
from alance.filter._list_functions import list_membership
from alance.filter._sql import (
    ARITHMETIC,
    COMPARISONS,
    PATTERN_FUNCS,
    SQL_META,
    UNARY_FUNCS,
    LiteralList,
    balanced,
    flatten_chain,
    is_column_ref,
    is_sql_literal,
    literal_list,
    quoted_sql,
    unparen,
)
from alance.filter._values import (
    Node,
    coerce_value,
    common_numeric,
    literal_array,
    make_literal,
    needs_cast_to,
    number_literal,
    plain,
    sql_type,
    string_to_timestamp,
)


def _nan_ordered(fn: Callable[..., pc.Expression], a: pc.Expression, b: pc.Expression,
                 ) -> pc.Expression:
    """A float comparison in Lance's (DataFusion's) order: NaN equals NaN and is greater
    than every other value; -0.0 equals 0.0. Nulls still give null."""
    a_nan, b_nan = pc.is_nan(a), pc.is_nan(b)
    either = pc.or_kleene(a_nan, b_nan)
    nan_case = {
        pc.equal: pc.and_kleene(a_nan, b_nan),
        pc.not_equal: pc.xor(a_nan, b_nan),
        pc.less: pc.and_kleene(pc.invert(a_nan), b_nan),
        pc.less_equal: b_nan,
        pc.greater: pc.and_kleene(a_nan, pc.invert(b_nan)),
        pc.greater_equal: a_nan,
    }[fn]
    return pc.if_else(either, nan_case, fn(a, b))


_NAN_ORDERED = frozenset({pc.equal, pc.not_equal, pc.less, pc.less_equal, pc.greater,
                          pc.greater_equal})

#: Deepest recursion of the compiler over a filter's tree. Parentheses and prefix operators
#: are limited before parsing and AND/OR chains are compiled flat; this bounds the rest (long
#: chains of other operators, ``a + a + ... + a``), whose trees are as deep as they are long.
MAX_COMPILE_DEPTH = 200


class _TooDeep(InvalidInputError):
    """Raised inside the compiler's recursion; reported with the filter text at its top."""


class Compiler:
    """Compiles one filter against one schema; remembers the columns it referenced."""

    def __init__(self, schema: pa.Schema, extra_columns: Iterable[str]) -> None:
        fields = list(schema)
        names = {f.name for f in fields}
        fields += [pa.field(name, pa.uint64()) for name in extra_columns if name not in names]
        self.schema = pa.schema(fields)
        self.columns: dict[str, None] = {}
        self._empty: pads.Dataset | None = None
        self._depth = 0

    # -- helpers -------------------------------------------------------------------------

    def infer(self, expr: pc.Expression) -> pa.DataType:
        """Bind ``expr`` against the schema and return its result type.

        Building a scanner binds the projection (type errors surface here) without running
        it: no rows, no plan, no hand-off to Arrow's threads, which under load would keep
        the calling event loop waiting for a thread to be scheduled.
        """
        if self._empty is None:
            self._empty = pads.dataset(self.schema.empty_table())
        try:
            projected = self._empty.scanner(columns={"v": expr}).projected_schema
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise InvalidInputError(f"unsupported operand types: {exc}") from exc
        return projected.field(0).type

    def column(self, node: exp.Expression) -> Node:
        path = self.path(node)
        top = path[0]
        field = self.schema.field(top)
        for name in path[1:]:
            field = field.type.field(name)
        if pa.types.is_float16(field.type):  # Arrow has no float16 kernels: widen (exact)
            return Node(pc.field(top, *path[1:]).cast(pa.float32()), pa.float32())
        return Node(pc.field(top, *path[1:]), field.type)

    def path(self, node: exp.Expression) -> list[str]:
        """The resolved ``[column, child, ...]`` names of a column reference (recorded as
        read); unknown names are :class:`InvalidInputError`."""
        node = unparen(node)
        path: list[str] = []
        while not isinstance(node, exp.Column):
            if isinstance(node, exp.Dot):
                path.append(node.expression.name)
            else:  # Bracket with a string key
                path.append(node.expressions[0].this)
            node = unparen(node.this)
        parts = node.parts
        quoted_single = len(parts) == 1 and bool(parts[0].args.get("quoted"))
        path = [p.name for p in parts] + path[::-1]
        top = self._top_level(path[0], exact=quoted_single)
        field = self.schema.field(top)
        for name in path[1:]:
            if not pa.types.is_struct(field.type):
                raise InvalidInputError(f"{field.name!r} is not a struct; cannot access {name!r}")
            index = field.type.get_field_index(name)
            if index < 0:
                raise InvalidInputError(f"struct {field.name!r} has no field {name!r}")
            field = field.type.field(index)
        self.columns.setdefault(top, None)
        return [top, *path[1:]]

    def _top_level(self, name: str, exact: bool) -> str:
        names = self.schema.names
        if name in names:
            return name
        if not exact:
            for candidate in names:
                if candidate.lower() == name.lower():
                    return candidate
        raise no_such_column(name, list(names))

    # -- dispatch ------------------------------------------------------------------------

    def compile(
        self, node: exp.Expression, resolve: bool = False, coerce_to: pa.DataType | None = None
    ) -> Node:
        """Compile ``node``.

        ``resolve`` marks positions where Lance checks column-vs-literal types (the top
        of the filter and operands of AND/OR). ``coerce_to`` asks for literals in this
        subtree (through arithmetic and comparisons) to be converted to that type.
        Trees nested deeper than :data:`MAX_COMPILE_DEPTH` are :class:`InvalidInputError`.
        """
        if self._depth >= MAX_COMPILE_DEPTH:
            raise _TooDeep("too deep")
        self._depth += 1
        try:
            return self._compile_node(node, resolve, coerce_to)
        except (RecursionError, _TooDeep):
            if self._depth > 1:
                raise
            text = node.meta.get(SQL_META)
            what = f"the filter {quoted_sql(text)}" if isinstance(text, str) else "the filter"
            raise InvalidInputError(f"{what} nests operators more than {MAX_COMPILE_DEPTH} "
                                    "deep (e.g. a very long chain of + or ||)") from None
        finally:
            self._depth -= 1

    def _compile_node(self, node: exp.Expression, resolve: bool,
                      coerce_to: pa.DataType | None) -> Node:
        if isinstance(node, exp.Paren):
            return self.compile(node.this, resolve, coerce_to)
        if is_sql_literal(node):
            lit = self.literal(node)
            if coerce_to is None:
                return lit
            scalar = coerce_value(lit.literal, lit.type, coerce_to)
            if scalar is None:
                raise InvalidInputError(
                    f"literal {node.sql()} cannot be converted to the column type {coerce_to}"
                )
            return Node(pc.scalar(scalar), scalar.type, lit.literal)
        if is_column_ref(node):
            return self.column(node)
        if isinstance(node, (exp.And, exp.Or)):
            # A chain of one operator is compiled flat and joined as a balanced tree: a
            # 100,000-term OR neither recurses 100,000 deep here nor makes an expression
            # that deep (Kleene AND/OR are associative, so the result is the same).
            fn = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
            parts = [self.boolean(self.compile(part, resolve)) for part in flatten_chain(node)]
            return Node(balanced(fn, parts), pa.bool_())
        if isinstance(node, exp.Not):
            inner = unparen(node.this)
            keep = resolve and isinstance(inner, (exp.In, exp.Between, exp.Like, exp.ILike))
            return Node(pc.invert(self.boolean(self.compile(inner, keep))), pa.bool_())
        if type(node) in COMPARISONS or type(node) in ARITHMETIC:
            return self.binary(node, resolve, coerce_to)
        if type(node) in UNARY_FUNCS or type(node) in PATTERN_FUNCS:
            return self.function(node)
        handler = getattr(self, f"on_{type(node).__name__.lower()}", None)
        if handler is None:
            raise InvalidInputError(f"unsupported SQL in filter: {node.sql()!r}")
        result: Node = handler(node, resolve)
        return result

    def literal(self, node: exp.Expression) -> Node:
        node = unparen(node)
        if isinstance(node, exp.Null):
            return Node(pc.scalar(None), pa.null(), None)
        if isinstance(node, exp.Boolean):
            return make_literal(bool(node.this), pa.bool_())
        if isinstance(node, exp.HexString):
            try:
                value = bytes.fromhex(node.this)
            except ValueError as exc:
                raise InvalidInputError(f"bad binary literal {node.sql()!r}") from exc
            return make_literal(value, pa.binary())
        if isinstance(node, exp.Neg):
            return number_literal(node.this.this, negative=True)
        if node.is_string:
            return make_literal(node.this, pa.string())
        return number_literal(node.this, negative=False)

    def boolean(self, node: Node) -> pc.Expression:
        if pa.types.is_null(node.type):
            return node.expr.cast(pa.bool_())
        return node.expr

    def binary(self, node: exp.Expression, resolve: bool, coerce_to: pa.DataType | None) -> Node:
        left_ast, right_ast = node.this, node.expression
        left_hint = right_hint = coerce_to
        if resolve and coerce_to is None:
            if is_column_ref(left_ast):
                col_type = self.column(left_ast).type
                bare = unparen(right_ast)
                if is_sql_literal(bare) or type(bare) in COMPARISONS or type(bare) in ARITHMETIC:
                    right_hint = col_type
            elif is_column_ref(right_ast) and is_sql_literal(left_ast):
                left_hint = self.column(right_ast).type
        left = self.compile(left_ast, coerce_to=left_hint)
        right = self.compile(right_ast, coerce_to=right_hint)
        if type(node) in COMPARISONS:
            stored = is_column_ref(left_ast) or is_column_ref(right_ast)
            return Node(self.apply(COMPARISONS[type(node)], left, right, nan_order=stored),
                        pa.bool_())
        common = common_numeric(left.type, right.type)
        if common is not None:  # widen explicitly: Arrow would narrow literals instead
            left = Node(left.expr.cast(common), common)
            right = Node(right.expr.cast(common), common)
        expr = self.apply(ARITHMETIC[type(node)], left, right)
        return Node(expr, self.infer(expr))

    # -- other node kinds (looked up by class name) -----------------------------------------

    def on_nullsafeneq(self, node: exp.Expression, resolve: bool) -> Node:
        """``a IS DISTINCT FROM b``: like ``<>`` but NULL counts as an ordinary value."""
        left, right = self.compile(node.this), self.compile(node.expression)
        differs = self.apply(pc.not_equal, left, right)
        null_differs = pc.not_equal(pc.is_null(left.expr), pc.is_null(right.expr))
        return Node(pc.coalesce(differs, null_differs), pa.bool_())

    def on_nullsafeeq(self, node: exp.Expression, resolve: bool) -> Node:
        """``a IS NOT DISTINCT FROM b``."""
        return Node(pc.invert(self.on_nullsafeneq(node, resolve).expr), pa.bool_())

    def on_neg(self, node: exp.Neg, resolve: bool) -> Node:
        inner = self.compile(node.this)
        return Node(pc.negate(inner.expr), inner.type)

    def on_is(self, node: exp.Is, resolve: bool) -> Node:
        inner = self.compile(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return Node(pc.is_null(inner.expr), pa.bool_())
        if isinstance(target, exp.Boolean):
            if not (pa.types.is_boolean(inner.type) or pa.types.is_null(inner.type)):
                raise InvalidInputError(f"IS TRUE/FALSE needs a boolean, got {inner.type}")
            value = self.boolean(inner)
            if not target.this:
                value = pc.invert(value)
            return Node(pc.coalesce(value, pc.scalar(False)), pa.bool_())
        raise InvalidInputError(f"unsupported IS expression: {node.sql()!r}")

    def on_between(self, node: exp.Between, resolve: bool) -> Node:
        hint = self.column(node.this).type if resolve and is_column_ref(node.this) else None
        value = self.compile(node.this)
        low = self.compile(node.args["low"], coerce_to=hint)
        high = self.compile(node.args["high"], coerce_to=hint)
        stored = is_column_ref(node.this)
        lower = self.apply(pc.greater_equal, value, low, nan_order=stored)
        upper = self.apply(pc.less_equal, value, high, nan_order=stored)
        return Node(pc.and_kleene(lower, upper), pa.bool_())

    @staticmethod
    def apply(fn: Callable[..., pc.Expression], a: Node, b: Node, *,
              nan_order: bool = False) -> pc.Expression:
        """Call a binary kernel after aligning operand types Arrow would not align itself.

        An untyped NULL takes the other operand's type, and a date or zone-less timestamp
        meeting a timestamp with a time zone is read as UTC (as Lance does). ``nan_order``:
        compare floats as Lance compares stored values (NaN equal to itself and above all
        other values); pylance does not do so for NaN computed in the filter (``f % 0``).
        """
        a_expr, b_expr = a.expr, b.expr
        if needs_cast_to(a.type, b.type):
            a_expr = a_expr.cast(b.type)
        elif needs_cast_to(b.type, a.type):
            b_expr = b_expr.cast(a.type)
        if nan_order and fn in _NAN_ORDERED and (
                pa.types.is_floating(a.type) or pa.types.is_floating(b.type)):
            return _nan_ordered(fn, a_expr, b_expr)
        return fn(a_expr, b_expr)

    def on_in(self, node: exp.In, resolve: bool) -> Node:
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise InvalidInputError("subqueries are not supported in filters")
        target = unparen(node.this)
        top_column = isinstance(target, exp.Column) and len(target.parts) == 1
        value = self.compile(target)
        hint = value.type if resolve and top_column else None
        literals = self._in_literals(node)
        if literals is not None:
            found = self._in_set(value, literals, hint)
            if found is not None:
                return Node(found, pa.bool_())
            items = [Node(pc.scalar(None), pa.null(), None) if pa.types.is_null(t)
                     else make_literal(v, t) for v, t in zip(literals.values, literals.types,
                                                            strict=True)]
        else:
            items = [self.compile(item, coerce_to=hint) for item in node.expressions]
        if not items:
            raise InvalidInputError("IN requires at least one value")
        return Node(balanced(pc.or_kleene, [self.apply(pc.equal, value, item)
                                            for item in items]), pa.bool_())

    def _in_literals(self, node: exp.In) -> LiteralList | None:
        """The IN list's values when every item is a plain literal (else None)."""
        lifted = literal_list(node)
        if lifted is not None:
            return lifted
        items = node.expressions
        if not items or not all(is_sql_literal(item) for item in items):
            return None
        nodes = [self.literal(item) for item in items]
        return LiteralList([n.literal for n in nodes], [n.type for n in nodes])

    def _in_set(self, value: Node, literals: LiteralList, hint: pa.DataType | None,
                ) -> pc.Expression | None:
        """``value IN (literals)`` as one set lookup (``None``: the literals' types differ
        from the value's, so they are compared one by one as Arrow promotes them).

        With ``hint`` (a column compared directly) the literals are converted to the
        column's type first, as Lance does; one that does not fit is an error.
        """
        set_type = value.type.value_type if pa.types.is_dictionary(value.type) else value.type
        if hint is not None:
            values = literal_array(literals.values, literals.types, hint)
        elif set(literals.types) - {pa.null()} <= {set_type}:
            values = pa.array(literals.values, set_type)
        else:
            return None
        has_null = values.null_count > 0
        present = values.drop_null() if has_null else values
        probe = value.expr
        if pa.types.is_floating(set_type):  # hashing tells -0.0 from 0.0; SQL does not
            probe = pc.add(probe, pa.scalar(0.0, set_type))
            present = pc.add(present, pa.scalar(0.0, set_type))
        found = pc.is_in(probe, value_set=present, skip_nulls=True)
        found = pc.if_else(pc.is_null(value.expr), pa.scalar(None, pa.bool_()), found)
        if has_null:  # a NULL in the list turns "not found" into NULL
            found = pc.if_else(found, True, pa.scalar(None, pa.bool_()))
        return found

    def on_like(self, node: exp.Like, resolve: bool) -> Node:
        return self._like(node, ignore_case=False)

    def on_ilike(self, node: exp.ILike, resolve: bool) -> Node:
        return self._like(node, ignore_case=True)

    def on_escape(self, node: exp.Escape, resolve: bool) -> Node:
        esc = node.expression
        if not (isinstance(esc, exp.Literal) and esc.is_string and esc.this == "\\"):
            raise InvalidInputError("LIKE only supports the backslash as escape character")
        if not isinstance(node.this, (exp.Like, exp.ILike)):
            raise InvalidInputError(f"unsupported SQL in filter: {node.sql()!r}")
        return self._like(node.this, ignore_case=isinstance(node.this, exp.ILike))

    def _like(self, node: exp.Expression, ignore_case: bool) -> Node:
        value = self.compile(node.this)
        pattern = self._constant_string(node.expression, "LIKE pattern")
        if pattern is None:
            return Node(pc.scalar(pa.scalar(None, pa.bool_())), pa.bool_())
        expr = pc.match_like(plain(value), pattern=pattern, ignore_case=ignore_case)
        if node.args.get("negate"):  # sqlglot's form of NOT LIKE
            expr = pc.invert(expr)
        return Node(expr, pa.bool_())

    def _constant_string(self, node: exp.Expression, what: str) -> str | None:
        node = unparen(node)
        if isinstance(node, exp.Null):
            return None
        if isinstance(node, exp.Literal) and node.is_string:
            return str(node.this)
        raise InvalidInputError(f"{what} must be a string literal, got {node.sql()!r}")

    def on_cast(self, node: exp.Cast, resolve: bool) -> Node:
        target = sql_type(node.args["to"])
        source = unparen(node.this)
        if isinstance(source, exp.Literal) and source.is_string:
            # typed literals such as DATE '2024-01-01' are converted once, here
            text = str(source.this)
            try:
                if pa.types.is_timestamp(target):
                    scalar = string_to_timestamp(text, target)
                elif pa.types.is_date(target):
                    scalar = pa.scalar(dt.date.fromisoformat(text.strip()), target)
                else:
                    scalar = pa.scalar(text).cast(target)
            except (pa.ArrowException, ValueError) as exc:
                raise InvalidInputError(f"cannot convert {text!r} to {target}: {exc}") from exc
            return Node(pc.scalar(scalar), target)
        inner = self.compile(source)
        opts = pc.CastOptions(target, allow_float_truncate=True)
        expr = inner.expr.cast(options=opts)
        self.infer(expr)  # reject impossible casts now rather than at scan time
        return Node(expr, target)

    def on_length(self, node: exp.Length, resolve: bool) -> Node:
        inner = self.compile(node.this)
        value_type = inner.type.value_type if pa.types.is_dictionary(inner.type) else inner.type
        func = pc.binary_length if pa.types.is_binary(value_type) else pc.utf8_length
        expr = func(plain(inner))
        return Node(expr, self.infer(expr))

    def on_dpipe(self, node: exp.DPipe, resolve: bool) -> Node:
        left, right = self.compile(node.this), self.compile(node.expression)
        expr = pc.binary_join_element_wise(plain(left), plain(right), "")
        return Node(expr, self.infer(expr))

    def on_anonymous(self, node: exp.Anonymous, resolve: bool) -> Node:
        name = str(node.this).lower()
        args = node.expressions
        if name == "is_valid" and len(args) == 1:
            return Node(pc.is_valid(self.compile(args[0]).expr), pa.bool_())
        if name in ("array_element", "list_element") and len(args) == 2:
            return self._element(self.compile(args[0]), args[1])
        if name == "arrow_cast" and len(args) == 2:
            return self._arrow_cast(args[0], args[1])
        if name in ("regexp_match", "regexp_like") and len(args) == 2:
            return self._regexp(args[0], args[1])
        if name in JSON_FUNCTIONS:
            return self._json(name, args[0] if args else None, args[1:])
        if name in ("array_has_any", "array_has_all", "array_contains", "array_has",
                    "list_has_any", "list_has_all", "list_contains", "list_has") and (
                len(args) == 2):
            return self._membership(name, args[0], args[1])
        raise InvalidInputError(f"unsupported function in filter: {node.sql()!r}")

    def on_jsonextract(self, node: exp.JSONExtract, resolve: bool) -> Node:
        """``json_extract(doc, '$.path')``: the value's JSON text."""
        path = node.expression
        if isinstance(path, exp.JSONPath):  # sqlglot parsed the path: give back its text
            path = exp.Literal.string(path.sql().strip("'"))
        return self._json("json_extract", node.this, [path])

    def _json(self, name: str, document: exp.Expression | None,
              args: list[exp.Expression]) -> Node:
        if document is None:
            raise InvalidInputError(f"{name} needs a JSON value")
        doc = self.compile(document)
        storage = doc.type.storage_type if isinstance(doc.type, pa.BaseExtensionType) \
            else doc.type
        if not (pa.types.is_string(storage) or pa.types.is_large_string(storage)):
            raise InvalidInputError(f"{name} needs a JSON column or JSON text, not {doc.type}")
        consts = []
        for arg in args:
            lit = unparen(arg)
            if not is_sql_literal(lit):
                raise InvalidInputError(f"{name} takes constant arguments after the document")
            value = self.literal(lit).literal
            consts.append(str(value).lower() if isinstance(value, bool) else str(value))
        expr, out_type = json_call(name, doc.expr.cast(pa.string()), consts)
        return Node(expr, out_type)

    def on_jsonarraycontains(self, node: exp.JSONArrayContains, resolve: bool) -> Node:
        """``json_array_contains(doc, '$.path', value)`` (sqlglot keeps the value as
        ``json_type``)."""
        value = node.args.get("json_type")
        if value is None:
            raise InvalidInputError("json_array_contains takes (document, path, value)")
        return self._json("json_array_contains", node.this, [node.expression, value])

    def on_arraycontains(self, node: exp.ArrayContains, resolve: bool) -> Node:
        """``array_contains(list, value)`` / ``array_has(list, value)``."""
        return self._membership("array_contains", node.this, node.expression)

    def on_arraycontainsall(self, node: exp.ArrayContainsAll, resolve: bool) -> Node:
        """``array_has_all(list, [...])``."""
        return self._membership("array_has_all", node.this, node.expression)

    def on_regexplike(self, node: exp.RegexpLike, resolve: bool) -> Node:
        """``regexp_like(text, 'pattern')``."""
        return self._regexp(node.this, node.expression)

    def on_currentdate(self, node: exp.CurrentDate, resolve: bool) -> Node:
        """``current_date`` / ``current_date()``: today (UTC), as a date."""
        today = pa.scalar(dt.datetime.now(dt.UTC).date(), pa.date32())
        return Node(pc.scalar(today), pa.date32(), today.as_py())

    def _regexp(self, value: exp.Expression, pattern: exp.Expression) -> Node:
        """``regexp_match(text, 'pattern')``: whether the pattern matches (anywhere)."""
        text = self.compile(value)
        pat = unparen(pattern)
        if not (isinstance(pat, exp.Literal) and pat.is_string):
            raise InvalidInputError("regexp_match needs the pattern as a string literal")
        if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
            raise InvalidInputError(f"regexp_match needs text, not {text.type}")
        try:
            re.compile(str(pat.this))
        except re.error as exc:
            raise InvalidInputError(f"invalid regular expression {pat.this!r}: {exc}") from exc
        return Node(pc.match_substring_regex(plain(text), str(pat.this)), pa.bool_())

    def _membership(self, name: str, lists: exp.Expression, values: exp.Expression) -> Node:
        """``array_has_any(list, [...])``, ``array_has_all(list, [...])``,
        ``array_contains(list, value)``."""
        base = self.compile(lists)
        if not (pa.types.is_list(base.type) or pa.types.is_large_list(base.type)
                or pa.types.is_fixed_size_list(base.type)):
            raise InvalidInputError(f"{name} needs a list, not {base.type}")
        given = unparen(values)
        if name.endswith(("contains", "has")):
            if not is_sql_literal(given):
                raise InvalidInputError(f"{name} needs a literal value")
            items = [self.literal(given).literal]
            kind = "any"
        else:
            if not isinstance(given, exp.Array) or not all(
                    is_sql_literal(unparen(i)) for i in given.expressions):
                raise InvalidInputError(f"{name} needs a list of literal values ([...])")
            items = [self.literal(i).literal for i in given.expressions]
            kind = "any" if name.endswith("any") else "all"
        try:
            scalar = pa.scalar(items, pa.list_(base.type.value_type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"{name}: the values do not fit {base.type}: {exc}") \
                from exc
        try:
            expr = list_membership(kind, base.expr, base.type, scalar)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidInputError(f"{name}: the values do not fit {base.type}: {exc}") \
                from exc
        return Node(expr, pa.bool_())

    def on_array(self, node: exp.Array, resolve: bool) -> Node:
        """A list literal, ``[1, 2]`` or ``ARRAY[1, 2]`` (its items must be literals)."""
        items = []
        for item in node.expressions:
            if not is_sql_literal(unparen(item)):
                raise InvalidInputError(f"list literals hold literals only: {node.sql()!r}")
            items.append(self.literal(item).literal)
        try:
            value = pa.scalar(items)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise InvalidInputError(f"list literal {node.sql()!r}: {exc}") from exc
        return Node(pc.scalar(value), value.type)

    def _arrow_cast(self, value: exp.Expression, type_name: exp.Expression) -> Node:
        """``arrow_cast(value, 'Int32')``: ``value`` converted to the named Arrow type."""
        name = unparen(type_name)
        if not (isinstance(name, exp.Literal) and name.is_string):
            raise InvalidInputError("arrow_cast needs the type name as a string literal")
        target = arrow_type_named(str(name.this))
        if isinstance(unparen(value), exp.Null):
            return Node(pc.scalar(pa.scalar(None, target)), target)
        inner = self.compile(value)
        expr = inner.expr.cast(options=pc.CastOptions(target, allow_float_truncate=True))
        self.infer(expr)
        return Node(expr, target)

    def on_bracket(self, node: exp.Bracket, resolve: bool) -> Node:
        """``list[i]`` (1-based, as in Lance) or ``value['field']`` on a computed struct (a
        column's own struct fields are column references, see :meth:`path`)."""
        if len(node.expressions) != 1:
            raise InvalidInputError(f"one index expected in {node.sql()!r}")
        key = unparen(node.expressions[0])
        base = self.compile(node.this)
        if isinstance(key, exp.Literal) and key.is_string:
            return self._struct_field(base, str(key.this))
        return self._element(base, key)

    def on_dot(self, node: exp.Dot, resolve: bool) -> Node:
        """``value.field`` on a computed struct (e.g. ``items[1].name``)."""
        return self._struct_field(self.compile(node.this), node.expression.name)

    def _struct_field(self, base: Node, name: str) -> Node:
        if not pa.types.is_struct(base.type):
            raise InvalidInputError(f"cannot access field {name!r} of a {base.type} value")
        index = base.type.get_field_index(name)
        if index < 0:
            raise InvalidInputError(f"the struct has no field {name!r}")
        return Node(pc.struct_field(base.expr, [index]), base.type.field(index).type)

    def _element(self, base: Node, key: exp.Expression) -> Node:
        """Element ``key`` (1-based) of a list; NULL where the list is shorter or null.

        Only constant positive indices are supported (Arrow's kernels take no per-row or
        from-the-end index); 0 gives NULL, as in Lance."""
        if not (pa.types.is_list(base.type) or pa.types.is_large_list(base.type)
                or pa.types.is_fixed_size_list(base.type)):
            raise InvalidInputError(f"cannot index a {base.type} value")
        key = unparen(key)
        if not (isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit()):
            raise InvalidInputError(
                f"unsupported list index {key.sql()!r}: only constant positive integers are "
                "supported")
        index = int(key.this)
        item = base.type.value_type
        if index == 0:
            return Node(pc.scalar(pa.scalar(None, item)), item)
        window = pc.list_slice(base.expr, index - 1, index, return_fixed_size_list=True)
        return Node(pc.list_element(window, 0), item)

    def function(self, node: exp.Expression) -> Node:
        if type(node) in UNARY_FUNCS:
            inner = self.compile(node.this)
            expr = UNARY_FUNCS[type(node)](plain(inner))
            return Node(expr, self.infer(expr))
        value = self.compile(node.this)
        pattern = self._constant_string(node.expression, f"{node.key}() pattern")
        if pattern is None:
            return Node(pc.scalar(pa.scalar(None, pa.bool_())), pa.bool_())
        return Node(PATTERN_FUNCS[type(node)](plain(value), pattern=pattern), pa.bool_())
