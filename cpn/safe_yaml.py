"""YAML loading that a hostile document cannot turn against the process.

PyYAML's safe loaders stop code execution but not exhaustion: the C composer
recurses once per nesting level (100,000 `[` overflow the C stack and kill the
process), aliases share one object that later walks (error messages, dumping,
JSON) write out in full (a 1 KB "billion laughs" becomes gigabytes), and some
scalars raise plain Python errors (`2024-02-30`, an integer of 5,000 digits).

`load_one` parses with libyaml's event parser (fast, iterative) and composes the
node tree in Python with checks on the way in, so every limit holds before the
object that would break it exists:

- nesting depth (`Limits.max_depth`);
- nodes after alias expansion, across the whole stream (`Limits.max_nodes`), so
  an alias counts for everything it stands for; an alias inside its own anchor
  (a recursive structure) is refused;
- characters of one scalar (`Limits.max_scalar`) and of all scalars after
  alias expansion (`Limits.max_chars`);
- duplicate keys in one mapping are errors (YAML forbids them; PyYAML lets the
  last one win).

Timestamps stay the strings they were written as (Kubernetes reads YAML as
JSON, which has no dates), and any scalar that cannot be constructed becomes a
`yaml.MarkedYAMLError` with its line and column, never a bare ValueError.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.cyaml import CParser  # PyYAML's wheels bundle libyaml
from yaml.events import AliasEvent, MappingEndEvent, MappingStartEvent, ScalarEvent, SequenceEndEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import Resolver


@dataclass(frozen=True)
class Limits:
    """Bounds on one submitted YAML stream; the defaults fit any real manifest file many times over."""

    max_bytes: int = 1 << 20
    """Size of the whole stream in bytes (UTF-8)."""
    max_documents: int = 500
    """Documents in one stream."""
    max_depth: int = 64
    """Nesting of mappings and sequences (a Kubernetes Job is about 12 deep)."""
    max_nodes: int = 200_000
    """Scalars, mappings and sequences in the stream, an alias counting for everything it stands for."""
    max_scalar: int = 65_536
    """Characters of one scalar (a key or a value)."""
    max_chars: int = 4 << 20
    """Characters of all scalars in the stream, after alias expansion."""


DEFAULT_LIMITS = Limits()
"""The limits `cpn submit` and the HTTP intake apply."""


class LimitExceeded(yaml.MarkedYAMLError):
    """A document exceeds one of the `Limits`; `problem` says which and by how much."""


class Budget:
    """What the documents of one stream have used so far; shared by `load_one` calls on the same stream."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.nodes = 0
        self.chars = 0

    def charge(self, nodes: int, chars: int, mark: yaml.Mark | None) -> None:
        """Count `nodes` and `chars` more; LimitExceeded when either total passes its limit."""
        self.nodes += nodes
        self.chars += chars
        if self.nodes > self.limits.max_nodes:
            raise LimitExceeded(
                None,
                None,
                f"more than {self.limits.max_nodes:,} YAML nodes (aliases count for what they repeat); "
                "a manifest never needs that many",
                mark,
            )
        if self.chars > self.limits.max_chars:
            raise LimitExceeded(
                None,
                None,
                f"more than {self.limits.max_chars:,} characters of values (aliases count for what they "
                "repeat); a manifest never needs that many",
                mark,
            )


def clip(text: str, limit: int = 200) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit:,} more characters)"


_STR, _INT, _FLOAT, _BOOL, _NULL, _SEQ, _MAP, _TIMESTAMP, _MERGE = (
    f"tag:yaml.org,2002:{t}"
    for t in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp", "merge")
)


def _short(key: object) -> str:
    return repr(clip(key, 60)) if isinstance(key, str) else clip(repr(key), 60)


_CACHED_VALUE_CHARS = 64
"""Scalars up to this long have their implicit tag cached (keys and short values repeat in every manifest)."""


@functools.lru_cache(maxsize=8192)
def _scalar_tag(value: str, plain: bool, quoted: bool) -> str:
    return Resolver().resolve(ScalarNode, value, (plain, quoted))


class _FastResolver(Resolver):
    """PyYAML's resolver with the tags of short scalars cached; the same answers (cpn adds no resolvers)."""

    def resolve(self, kind: type, value: object, implicit: object) -> str:
        if kind is ScalarNode and len(value) <= _CACHED_VALUE_CHARS:
            return _scalar_tag(value, *implicit)
        return super().resolve(kind, value, implicit)


class _NeedNodes(Exception):
    """The document has an explicit tag or a merge key: build it through nodes and PyYAML's constructor."""


class _Composer:
    """PyYAML's Composer with the checks of the module docstring, composing from the parser's events.

    Two ways: `get_single_value` builds Python data straight from the events (the
    common case, no node tree), `get_single_node` builds nodes for PyYAML's own
    constructor (documents with explicit tags or merge keys). Both apply the same checks.
    """

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.anchors: dict[str, Node] = {}
        self._objects: dict[str, object] = {}
        self._sizes: dict[str, tuple[int, int]] = {}
        self._depth = 0

    def get_single_value(self) -> object:
        """The document's data, built from the events; _NeedNodes when it needs PyYAML's constructor."""
        self.get_event()  # stream start
        value = None
        if type(self.peek_event()) is not yaml.StreamEndEvent:
            self.get_event()  # document start
            value = self._value()
            self.get_event()  # document end
        if type(self.peek_event()) is not yaml.StreamEndEvent:
            event = self.get_event()
            raise yaml.composer.ComposerError(
                "expected a single document", None, "but found another document", event.start_mark
            )
        self.get_event()
        return value

    def _value(self) -> object:
        event = self.get_event()
        kind = type(event)
        if kind is AliasEvent:
            return self._alias(event, self._objects)
        if event.tag is not None and event.tag != "!":
            raise _NeedNodes
        anchor = event.anchor
        if anchor is not None and anchor in self._objects:
            raise yaml.composer.ComposerError(None, None, "found duplicate anchor", event.start_mark)
        budget = self.budget
        before = (budget.nodes, budget.chars)
        if kind is ScalarEvent:
            value = self._checked_scalar(event)
            tag = self.resolve(ScalarNode, value, event.implicit)
            if tag != _STR and tag != _TIMESTAMP:  # timestamps stay strings
                if tag == _MERGE:
                    raise _NeedNodes
                value = self.construct_object(ScalarNode(tag, value, event.start_mark, event.end_mark))
            if anchor is not None:
                self._objects[anchor] = value
        else:
            self._enter(event)
            if kind is MappingStartEvent:
                value = {}
                if anchor is not None:
                    self._objects[anchor] = value
                while type(self.peek_event()) is not MappingEndEvent:
                    mark = self.peek_event().start_mark
                    key = self._value()
                    try:
                        seen = key in value
                    except TypeError:
                        raise ConstructorError(
                            "while constructing a mapping", event.start_mark, "found unhashable key", mark
                        ) from None
                    if seen:
                        raise ConstructorError(
                            "in a mapping",
                            event.start_mark,
                            f"found the key {_short(key)} twice; keep one",
                            mark,
                        )
                    value[key] = self._value()
            else:
                value = []
                if anchor is not None:
                    self._objects[anchor] = value
                while type(self.peek_event()) is not SequenceEndEvent:
                    value.append(self._value())
            self.get_event()
            self._depth -= 1
        if anchor is not None:
            self._sizes[anchor] = (budget.nodes - before[0], budget.chars - before[1])
        return value

    def _checked_scalar(self, event: ScalarEvent) -> str:
        """The scalar's text, counted against the budget."""
        value = event.value
        budget, limits = self.budget, self.budget.limits
        if len(value) > limits.max_scalar:
            raise LimitExceeded(
                None,
                None,
                f"a value of {len(value):,} characters; at most {limits.max_scalar:,} are accepted",
                event.start_mark,
            )
        budget.nodes += 1
        budget.chars += len(value)
        if budget.nodes > limits.max_nodes or budget.chars > limits.max_chars:
            budget.charge(0, 0, event.start_mark)
        return value

    def _enter(self, start: yaml.Event) -> None:
        """One level deeper, within the depth limit; the collection counts as a node."""
        self._depth += 1
        if self._depth > self.budget.limits.max_depth:
            raise LimitExceeded(
                None,
                None,
                f"nested more than {self.budget.limits.max_depth} levels deep; a manifest never is",
                start.start_mark,
            )
        self.budget.charge(1, 0, start.start_mark)

    def get_single_node(self) -> Node | None:
        self.get_event()  # stream start
        node = None
        if not self.check_event(yaml.StreamEndEvent):
            self.get_event()  # document start
            node = self._compose()
            self.get_event()  # document end
        if not self.check_event(yaml.StreamEndEvent):
            event = self.get_event()
            raise yaml.composer.ComposerError(
                "expected a single document", None, "but found another document", event.start_mark
            )
        self.get_event()
        return node

    def _compose(self) -> Node:
        """The node of the next event (and of its children), checked as it is built.

        One `get_event` per event and no path resolvers (cpn adds none), because
        this loop runs for every value of every submitted manifest.
        """
        event = self.get_event()
        kind = type(event)
        if kind is AliasEvent:
            return self._alias(event, self.anchors)
        anchor = event.anchor
        if anchor is not None and anchor in self.anchors:
            raise yaml.composer.ComposerError(
                "found duplicate anchor",
                self.anchors[anchor].start_mark,
                "second occurrence",
                event.start_mark,
            )
        budget = self.budget
        before = (budget.nodes, budget.chars)
        tag = event.tag
        if kind is ScalarEvent:
            value = self._checked_scalar(event)
            if tag is None or tag == "!":
                tag = self.resolve(ScalarNode, value, event.implicit)
            node = ScalarNode(tag, value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
        else:
            node = self._collection(event, anchor, MappingNode if kind is MappingStartEvent else SequenceNode)
        if anchor is not None:
            self._sizes[anchor] = (budget.nodes - before[0], budget.chars - before[1])
        return node

    def _alias(self, event: AliasEvent, anchored: dict) -> Any:
        """What the alias stands for (a node or a value, from `anchored`), charged at its full size."""
        anchor = event.anchor
        if anchor not in anchored:
            raise yaml.composer.ComposerError(
                None, None, f"found undefined alias {clip(anchor, 60)!r}", event.start_mark
            )
        if anchor not in self._sizes:
            raise ConstructorError(
                None,
                None,
                f"alias {clip(anchor, 60)!r} is inside its own anchor (a recursive structure); "
                "Kubernetes objects cannot be recursive",
                event.start_mark,
            )
        self.budget.charge(*self._sizes[anchor], event.start_mark)
        return anchored[anchor]

    def _collection(self, start: yaml.Event, anchor: str | None, node_class: type) -> Node:
        self._enter(start)
        tag = start.tag
        if tag is None or tag == "!":
            tag = self.resolve(node_class, None, start.implicit)
        node = node_class(tag, [], start.start_mark, None, flow_style=start.flow_style)
        if anchor is not None:
            self.anchors[anchor] = node
        items = node.value
        if node_class is SequenceNode:
            while type(self.peek_event()) is not SequenceEndEvent:
                items.append(self._compose())
        else:
            keys: set[tuple[str, str]] = set()
            while type(self.peek_event()) is not MappingEndEvent:
                key = self._compose()
                if type(key) is ScalarNode:
                    if (key.tag, key.value) in keys:
                        raise ConstructorError(
                            "in a mapping",
                            node.start_mark,
                            f"found the key {clip(key.value, 60)!r} twice; keep one",
                            key.start_mark,
                        )
                    keys.add((key.tag, key.value))
                items.append((key, self._compose()))
        node.end_mark = self.get_event().end_mark
        self._depth -= 1
        return node


class _Constructor(SafeConstructor):
    """SafeConstructor whose failures are all MarkedYAMLErrors, and whose timestamps stay strings."""

    def construct_object(self, node: Node, deep: bool = False) -> object:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            raise ConstructorError(
                None,
                None,
                f"cannot read this {node.tag.rsplit(':', 1)[-1]}: {clip(str(exc))}",
                node.start_mark,
            ) from None


_Constructor.add_constructor("tag:yaml.org,2002:timestamp", SafeConstructor.construct_yaml_str)


class _Loader(_Composer, CParser, _Constructor, _FastResolver):
    """libyaml's event parser, the checked composer, the strict constructor and the YAML 1.1 resolver."""

    def __init__(self, text: str, budget: Budget) -> None:
        CParser.__init__(self, text)
        _Composer.__init__(self, budget)
        _Constructor.__init__(self)
        Resolver.__init__(self)


def load_one(text: str, budget: Budget) -> object:
    """The one YAML document of `text` as Python data (None when empty), within `budget`'s limits.

    Raises a `yaml.YAMLError` (a `LimitExceeded` for a limit) for anything wrong
    with the document, with the position where it was found.
    """
    used = (budget.nodes, budget.chars)
    loader = _Loader(text, budget)
    try:
        return loader.get_single_value()
    except _NeedNodes:
        budget.nodes, budget.chars = used  # start again through nodes: charge once
    finally:
        loader.dispose()
    return _load_through_nodes(text, budget)


def _load_through_nodes(text: str, budget: Budget) -> object:
    """`load_one` through a node tree and PyYAML's constructor (explicit tags, merge keys)."""
    loader = _Loader(text, budget)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


class _Unusual(Exception):
    """The data holds something `dump` leaves to PyYAML's representer (shared objects, bytes, sets)."""


def dump(data: object) -> str:
    """YAML of `data`, exactly as `yaml.dump(data, Dumper=CSafeDumper, sort_keys=False, allow_unicode=True)`.

    Plain JSON-like data (what a manifest is) is turned into nodes directly and
    handed to libyaml's emitter, about four times faster than PyYAML's generic
    representer; anything else (an object reached twice through an alias, bytes, a set)
    goes through the representer itself, so the text is the same either way.
    """
    try:
        node = _node(data, set())
    except _Unusual:
        return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)
    return yaml.serialize(node, Dumper=_Dumper, allow_unicode=True)


class _Dumper(yaml.CSafeDumper, _FastResolver):
    """libyaml's safe dumper with the cached resolver (the emitter asks it about every scalar)."""

    resolve = _FastResolver.resolve


def _node(value: object, seen: set[int]) -> Node:
    kind = type(value)
    if kind is str:
        return ScalarNode(_STR, value)
    if kind is dict or kind is list:
        if id(value) in seen:
            raise _Unusual
        seen.add(id(value))
        if kind is dict:
            return MappingNode(
                _MAP, [(_node(k, seen), _node(v, seen)) for k, v in value.items()], flow_style=False
            )
        return SequenceNode(_SEQ, [_node(v, seen) for v in value], flow_style=False)
    if kind is int:
        return ScalarNode(_INT, str(value))
    if kind is bool:
        return ScalarNode(_BOOL, "true" if value else "false")
    if value is None:
        return ScalarNode(_NULL, "null")
    if kind is float:
        return yaml.representer.SafeRepresenter().represent_float(value)
    raise _Unusual
