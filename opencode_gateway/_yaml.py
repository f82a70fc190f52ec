"""YAML as this package reads it (the settings file, a skill's front matter): safe, and without
aliases."""

from __future__ import annotations

from typing import Any

__all__ = ["load_yaml"]


def load_yaml(text: str) -> Any:
    """Safe YAML without aliases: an alias can make a few hundred bytes expand to gigabytes (a
    "billion laughs"), and no setting needs one."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", mark)
            return super().compose_node(parent, index)

    return yaml.load(text, Loader=NoAliases)  # noqa: S506 (a SafeLoader)
