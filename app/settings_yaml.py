"""The YAML reader of settings: the --config file and ROCKSIDECAR_SUBSCRIPTIONS (app.config and
app.subscriptions.spec read with it). yaml.safe_load as settings need it: plain scalars as the text that
was written, a key given twice refused, nesting and alias expansion bounded."""

from __future__ import annotations

from typing import Any

import yaml

# Settings nest 4 deep; pyyaml's composer recurses, and dies of a RecursionError near 300 levels.
MAX_YAML_DEPTH = 32
MAX_YAML_NODES = 100_000  # with aliases expanded: a few "billion laughs" lines would otherwise fill memory
_AS_TEXT = {f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float", "timestamp")}


# The ignores below: pyyaml has no type stubs here, so to mypy its classes are Any.
class SettingsYamlError(yaml.MarkedYAMLError):  # type: ignore[misc]
    """A document pyyaml would take but a settings file must not hold (a key twice, nesting too deep)."""


class SettingsLoader(yaml.SafeLoader):  # type: ignore[misc]
    """``yaml.SafeLoader`` for settings. Plain scalars stay the text that was written, as an environment
    variable's value is, and each setting's parser reads them (``producer_group: 0123`` is "0123", not
    83; ``zone: no`` is "no", not False; ``tls: yes`` is still true); only null stays None, "not set".
    A key given twice in one mapping is refused (safe_load keeps the last, silently), and so is nesting
    or alias expansion past any sense, before it costs a RecursionError or the memory."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in _AS_TEXT]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise SettingsYamlError(
                    problem=f"nested more than {MAX_YAML_DEPTH} deep",
                    problem_mark=self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> yaml.Node | None:
        node = super().get_single_node()
        if node is not None:
            _check_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: pyyaml's own check names it
                continue
            if duplicate:
                raise SettingsYamlError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)  # type: ignore[no-any-return]


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand past MAX_YAML_NODES nodes or MAX_YAML_DEPTH levels, or refer
    to themselves: walked without recursion, each node once (its size and depth remembered)."""
    size: dict[int, tuple[int, int]] = {}  # id(node) -> (nodes, depth) once done
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        kids = _children(node)
        if children_done:
            open_.discard(id(node))
            nodes = 1 + sum(size[id(k)][0] for k in kids)
            depth = 1 + max((size[id(k)][1] for k in kids), default=0)
            if nodes > MAX_YAML_NODES or depth > MAX_YAML_DEPTH:
                why = f"more than {MAX_YAML_NODES} values" if nodes > MAX_YAML_NODES else "nested too deep"
                raise SettingsYamlError(
                    problem=f"{why} (with its aliases expanded)", problem_mark=node.start_mark
                )
            size[id(node)] = (nodes, depth)
            continue
        if id(node) in size:
            continue
        if id(node) in open_:
            raise SettingsYamlError(problem="an alias refers to itself", problem_mark=node.start_mark)
        open_.add(id(node))
        stack.append((node, True))
        stack.extend((k, False) for k in kids if id(k) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str) -> Any:
    """One YAML (or JSON) document read by SettingsLoader; yaml.YAMLError if it is not a good one."""
    loader = SettingsLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """What is wrong and where, on one line (pyyaml's own text spans several)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{exc.problem}{where}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
