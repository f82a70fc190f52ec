"""Skills for one run: folders with a SKILL.md, checked before the run and copied into the run's
private config dir, where OpenCode 1.18 loads global skills (`$XDG_CONFIG_HOME/opencode/skills/`).

They are copied rather than referenced so that OpenCode sees exactly what was checked, and the
user's own config (where OpenCode would otherwise look) is never touched. OpenCode drops a skill
without a description silently and wants its name to match its folder, so both are checked here,
where a mistake can still be named.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .._yaml import load_yaml
from ..errors import SettingsError

__all__ = ["Skill", "install_skills", "load_skills", "skills_dir"]

_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_FRONTMATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(\r?\n|\Z)", re.S)


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    source: Path


def _load(folder: Path) -> Skill:
    manifest = folder / "SKILL.md"
    if not manifest.is_file():
        raise SettingsError(f"skill folder {folder} has no SKILL.md: a skill is a folder with a SKILL.md in it")
    import yaml

    text = manifest.read_text(encoding="utf-8", errors="replace")
    match = _FRONTMATTER.match(text)
    try:
        meta = load_yaml(match.group(1)) if match else None
    except yaml.YAMLError:
        meta = None
    if not isinstance(meta, dict):
        raise SettingsError(f"{manifest} has no YAML frontmatter: start it with ---, name: ..., description: ..., ---")
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 64:
        raise SettingsError(
            f"{manifest}: name {name!r} is invalid: OpenCode wants lowercase words joined by "
            "hyphens, at most 64 characters (e.g. name: release-notes)"
        )
    if not isinstance(description, str) or not description.strip():
        raise SettingsError(f"{manifest} has no description: OpenCode never shows a skill without one to the model")
    return Skill(name, description.strip(), folder)


def load_skills(folders: Iterable[str | Path]) -> tuple[Skill, ...]:
    """Check every folder; SettingsError names the first problem."""
    skills: dict[str, Skill] = {}
    for folder in folders:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise SettingsError(f"skill folder {path} does not exist or is not a folder")
        skill = _load(path)
        if skill.name in skills:
            raise SettingsError(f"two skills are named {skill.name!r}: {skills[skill.name].source} and {path}")
        skills[skill.name] = skill
    return tuple(skills.values())


def skills_dir(config_home: Path) -> Path:
    """Where OpenCode looks for global skills, given its XDG_CONFIG_HOME."""
    return config_home / "opencode" / "skills"


def install_skills(skills: Iterable[Skill], config_home: Path) -> None:
    for skill in skills:
        shutil.copytree(skill.source, skills_dir(config_home) / skill.name, symlinks=True)
