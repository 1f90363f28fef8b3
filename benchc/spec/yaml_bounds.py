"""YAML read with bounds: size, nesting depth, and values after alias expansion.

PyYAML composes aliases as references to one node, so a "billion laughs" document
(`b: [*a, *a, ...]`, `c: [*b, *b, ...]`, ...) is small when composed and explodes only
when it is turned into Python data; an alias may also refer to a node that contains it
(`a: &x [*x]`, a cycle). Its composer recurses once per nesting level, so a deeply
nested document overflows Python's stack. Here a document is refused, with the line and
column where it crossed a bound, before any of that happens:

- at most MAX_BYTES bytes of text (a spec is a few kilobytes; PyYAML reads about a
  megabyte a second, so this also bounds the time);
- at most MAX_DEPTH levels of nesting, with aliases expanded;
- at most MAX_VALUES values (scalars, lists and mappings), with aliases expanded;
- no alias that refers to a value containing it.

docs/spec.md's "Limits" section states the same numbers.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.reader import ReaderError

MAX_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_VALUES = 10_000


class YamlLimitError(Exception):
    """A document broke a bound or cannot be read as text; `line` and `col` are 1-based."""

    def __init__(self, line: int, col: int, message: str):
        self.line, self.col, self.message = line, col, message
        super().__init__(f"line {line}, column {col}: {message}")


def _at(mark: yaml.Mark | None) -> tuple[int, int]:
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing deep nesting and too many values while it composes
    (so neither the stack nor the node graph can grow past the bounds)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._composed = 0

    def fetch_flow_collection_start(self, TokenClass: type) -> None:  # noqa: N803 - PyYAML's name
        # The scanner keeps one possible simple key per open `[` or `{` and walks them all at
        # every token: quadratic in flow depth, so it is bounded here, before the composer.
        if self.flow_level >= MAX_DEPTH:
            raise YamlLimitError(*_at(self.get_mark()), f"nested more than {MAX_DEPTH} levels deep")
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            return super().compose_node(parent, index)
        self._depth += 1
        self._composed += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlLimitError(*_at(self.peek_event().start_mark),
                                     f"nested more than {MAX_DEPTH} levels deep")
            if self._composed > MAX_VALUES:
                raise YamlLimitError(*_at(self.peek_event().start_mark),
                                     f"more than {MAX_VALUES:,} values")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def check_size(data: bytes | str, size: int | None = None) -> None:
    """`size`: the file's, when only its first MAX_BYTES + 1 bytes were read."""
    if len(data) > MAX_BYTES:
        raise YamlLimitError(1, 1, f"{size or len(data):,} bytes is more than benchc reads "
                             f"({MAX_BYTES:,} bytes at most)")


def decode(raw: bytes) -> str:
    """UTF-8 text of `raw`; an undecodable byte is refused with its line and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        before = raw[: e.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        raise YamlLimitError(line, col, f"byte 0x{raw[e.start]:02x} is not UTF-8 text "
                             "(save the file as UTF-8)") from e


def _reader_error(text: str, e: ReaderError) -> YamlLimitError:
    """PyYAML's reader names only a character offset; turn it into line and column."""
    pos = max(0, min(e.position, len(text)))
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    char = e.character if isinstance(e.character, int) else 0
    return YamlLimitError(line, col, f"control character U+{char:04X} is not allowed in YAML "
                          "(remove it, or write it as an escape in a double-quoted string)")


def compose(text: str) -> tuple[BoundedLoader, yaml.Node | None]:
    """The composed root node of a single-document `text` (None when empty), checked against
    every bound. Raises YamlLimitError, or yaml.MarkedYAMLError for a syntax error."""
    check_size(text)
    try:
        loader = BoundedLoader(text)
    except ReaderError as e:
        raise _reader_error(text, e) from e
    try:
        node = loader.get_single_node()
    except ReaderError as e:
        raise _reader_error(text, e) from e
    finally:
        loader.dispose()
    if node is not None:
        check_expansion(node)
    return loader, node


def check_expansion(root: yaml.Node) -> None:
    """Refuse a node graph whose expansion (every alias replaced by a copy of what it
    refers to) is deeper than MAX_DEPTH or holds more than MAX_VALUES values, or that
    holds a cycle. Sizes are memoised per node, so this costs one visit per node."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) of its expansion
    active: set[int] = set()

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    def walk(node: yaml.Node, level: int) -> tuple[int, int]:
        key = id(node)
        if key in active:
            raise YamlLimitError(*_at(node.start_mark), "an alias refers to a value that contains "
                                 "it (a cycle); write the value out instead")
        if key not in done:
            if level > MAX_DEPTH:
                raise YamlLimitError(*_at(node.start_mark), f"nested more than {MAX_DEPTH} levels "
                                     "deep once aliases are expanded")
            active.add(key)
            values, depth = 1, 1
            for child in children(node):
                v, d = walk(child, level + 1)
                values, depth = values + v, max(depth, d + 1)
                if values > MAX_VALUES:
                    raise YamlLimitError(*_at(node.start_mark), "this value expands to more than "
                                         f"{MAX_VALUES:,} values through aliases")
            active.discard(key)
            done[key] = (values, depth)
        values, depth = done[key]
        if level + depth - 1 > MAX_DEPTH:
            raise YamlLimitError(*_at(node.start_mark), f"nested more than {MAX_DEPTH} levels deep "
                                 "once aliases are expanded")
        return values, depth

    walk(root, 1)


def load_value(text: str) -> Any:
    """One YAML value (a --set or --param value) as Python data, within the bounds.
    Raises YamlLimitError or yaml.YAMLError."""
    loader, node = compose(text)
    if node is None:
        return None
    try:
        return loader.construct_document(node)
    except (ValueError, TypeError, OverflowError, LookupError, AttributeError) as e:
        # `!!int x`, `!!int ""`, `!!timestamp x`, 5000-digit integers: the tag cannot make the value
        raise yaml.YAMLError(str(e)) from e
