"""A model's YAML config read within bounds, and bounded excerpts of config values for messages.

YAML anchors and aliases let a few hundred bytes stand for billions of values ("billion laughs"): the
parsed document shares them, but anything that walks it (a message formatting a value, a copy) meets
the whole expansion. Nesting is recursion in the parser. `load_yaml` is `yaml.safe_load` that counts,
while composing, the nodes and scalar characters the document holds with every alias expanded and
its nesting depth, and stops at the first bound passed (`MAX_NODES`, `MAX_CHARS`, `MAX_DEPTH`);
an alias to a node that contains it is refused too. A model config has a few thousand nodes
(tens of thousands with a vocabulary listed) and nests a few levels.
"""
from __future__ import annotations

import yaml

MAX_DEPTH = 100
MAX_NODES = 1 << 18
MAX_CHARS = 1 << 24


class YAMLBoundError(ValueError):
    """A YAML document beyond a bound (or with a self-containing alias)."""


class _BoundedLoader(yaml.SafeLoader):
    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._chars = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, chars) with aliases expanded

    def _count(self, nodes: int, chars: int) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES:
            raise YAMLBoundError(f"holds more than {MAX_NODES} values (aliases expanded)")
        if self._chars > MAX_CHARS:
            raise YAMLBoundError(f"holds more than {MAX_CHARS} characters of text (aliases expanded)")

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            anchor = self.peek_event().anchor
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise YAMLBoundError(f"has an alias (*{str(anchor)[:40]}) inside the value it names")
            self._count(*size)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise YAMLBoundError(f"nests deeper than {MAX_DEPTH} levels")
        before = (self._nodes, self._chars)
        self._count(1, 0)
        node = super().compose_node(parent, index)
        if isinstance(node, yaml.ScalarNode):
            self._count(0, len(node.value))
        self._depth -= 1
        self._sizes[id(node)] = (self._nodes - before[0], self._chars - before[1])
        return node


def load_yaml(text: str):
    """`yaml.safe_load(text)` within the bounds above: a YAMLBoundError saying which was passed, a
    yaml.YAMLError for text that is not YAML."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def excerpt(value, limit: int = 200) -> str:
    """repr(value) cut to `limit` characters (ending in "..." when cut), made without formatting more
    of the value than that: a shared or huge value costs no more than a small one."""
    out: list[str] = []
    room = [limit + 1]

    def emit(s: str) -> None:
        out.append(s[:room[0]])
        room[0] -= len(out[-1])

    def walk(v, depth: int) -> None:
        if room[0] <= 0:
            return
        if depth > 20:
            emit("...")
        elif isinstance(v, dict):
            _items(v.items(), "{", "}", depth, pairs=True)
        elif isinstance(v, (list, tuple)):
            close = ",)" if isinstance(v, tuple) and len(v) == 1 else (")" if isinstance(v, tuple) else "]")
            _items(v, "(" if isinstance(v, tuple) else "[", close, depth, pairs=False)
        elif isinstance(v, (str, bytes)) and len(v) > limit:
            emit(repr(v[:limit]))
        else:
            emit(repr(v))

    def _items(items, open_: str, close: str, depth: int, pairs: bool) -> None:
        emit(open_)
        for i, item in enumerate(items):
            if room[0] <= 0:
                return
            if i:
                emit(", ")
            if pairs:
                walk(item[0], depth + 1)
                emit(": ")
                walk(item[1], depth + 1)
            else:
                walk(item, depth + 1)
        emit(close)

    walk(value, 0)
    text = "".join(out)
    return text if len(text) <= limit else text[:limit - 3] + "..."
