"""Skills are checked before a run and copied where OpenCode loads them, in the run's private dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from opencode_gateway.errors import SettingsError
from opencode_gateway.opencode.skills import install_skills, load_skills, skills_dir


def skill(root: Path, folder: str, manifest: str | None) -> Path:
    path = root / folder
    path.mkdir()
    if manifest is not None:
        (path / "SKILL.md").write_text(manifest)
    return path


def test_a_skill_is_loaded_and_copied_whole_under_its_name(tmp_path: Path) -> None:
    source = skill(
        tmp_path, "notes-folder", "---\nname: release-notes\ndescription: Writes release notes.\n---\nBody\n"
    )
    (source / "scripts").mkdir()
    (source / "scripts" / "collect.sh").write_text("git log\n")
    [loaded] = load_skills([source])
    assert (loaded.name, loaded.description, loaded.source) == ("release-notes", "Writes release notes.", source)
    install_skills([loaded], tmp_path / "config")
    target = skills_dir(tmp_path / "config") / "release-notes"
    assert target == tmp_path / "config" / "opencode" / "skills" / "release-notes"
    assert (target / "SKILL.md").read_text().endswith("Body\n")
    assert (target / "scripts" / "collect.sh").read_text() == "git log\n"


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "has no SKILL.md"),
        ("# just markdown\n", "has no YAML frontmatter"),
        ("---\nname: [a\n---\n", "has no YAML frontmatter"),
        ("---\nname: Release Notes\ndescription: x\n---\n", "name 'Release Notes' is invalid"),
        ("---\nname: " + "a" * 65 + "\ndescription: x\n---\n", "at most 64 characters"),
        ("---\nname: notes\n---\n", "has no description"),
        ("---\nname: notes\ndescription: '  '\n---\n", "has no description"),
    ],
)
def test_a_broken_skill_is_refused_with_what_to_fix(tmp_path: Path, manifest: str | None, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_skills([skill(tmp_path, "s", manifest)])


def test_a_missing_folder_and_a_duplicate_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="does not exist or is not a folder"):
        load_skills([tmp_path / "absent"])
    manifest = "---\nname: notes\ndescription: x\n---\n"
    with pytest.raises(SettingsError, match="two skills are named 'notes'"):
        load_skills([skill(tmp_path, "a", manifest), skill(tmp_path, "b", manifest)])
