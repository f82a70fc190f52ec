"""What git would run later, on the host, from what the agent writes in its workdir.

The workdir is the agent's to write, `.git/` included (it may commit). But git runs programs named
in files of the git dir: hooks, and config keys such as `core.fsmonitor`, `core.hooksPath`,
`core.sshCommand` or a filter's command, the next time the user runs `git commit` there, outside
any sandbox. So a run keeps git's control files as they were:

- inside the sandbox, `.git` is bound onto itself (a mount point cannot be renamed or replaced by
  a copy of the agent's), and `config` and `hooks/` (a submodule's too) are read-only;
- after the run, every control file git reads is compared with its state before, wherever git
  would find it (`commondir`, which redirects config and hooks to another folder, and
  `config.worktree` can be created in a writable `.git`): what changed is put back, what was added
  removed, and the run's warnings say so. A `.git` the run created is renamed out of git's way.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..terminal import quoted

__all__ = ["GitControl"]

# Files of a git dir that make git run something or read its config and hooks from elsewhere.
_CONTROL_FILES = ("config", "config.worktree", "commondir")
# Folders below a git dir that hold git dirs of their own (submodules, linked worktrees).
_NESTED = ("modules", "worktrees")


def _git_dirs(git_dir: Path) -> Iterator[Path]:
    """`git_dir` and the git dirs below it (submodules', linked worktrees')."""
    yield git_dir
    for nested in _NESTED:
        folder = git_dir / nested
        if folder.is_dir() and not folder.is_symlink():
            for name in sorted(os.listdir(folder)):
                if (folder / name).is_dir() and not (folder / name).is_symlink():
                    yield from _git_dirs(folder / name)


def _control_paths(git_dir: Path) -> Iterator[Path]:
    for folder in _git_dirs(git_dir):
        yield from (folder / name for name in _CONTROL_FILES)
        hooks = folder / "hooks"
        if hooks.is_dir() and not hooks.is_symlink():
            yield from (hooks / name for name in sorted(os.listdir(hooks)))


def _state(path: Path) -> tuple[bytes, int] | None:
    """A control file's content (a symlink's target) and mode; None when it is not there."""
    try:
        info = path.lstat()
    except OSError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return os.readlink(path).encode(), info.st_mode
    if not stat.S_ISREG(info.st_mode):
        return b"", info.st_mode
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        return file.read(), info.st_mode


@dataclass(frozen=True)
class GitControl:
    """The workdir's `.git` and its control files, as they were before a run."""

    workdir: Path
    kind: str  # "dir", "file" (a gitfile: `gitdir: <path>`), or "none"
    files: Mapping[str, tuple[bytes, int]]  # path relative to the workdir -> (content, mode)

    @classmethod
    def take(cls, workdir: Path) -> GitControl:
        git = workdir / ".git"
        if git.is_symlink() or not git.exists():
            return cls(workdir, "none" if not git.is_symlink() else "file", {})
        if not git.is_dir():
            state = _state(git)
            return cls(workdir, "file", {} if state is None else {".git": state})
        files = {
            path.relative_to(workdir).as_posix(): state
            for path in _control_paths(git)
            if (state := _state(path)) is not None
        }
        return cls(workdir, "dir", files)

    def sandbox_options(self) -> list[str]:
        """bwrap options, after the workdir's bind, that keep `.git` in place and its config and
        hooks (a submodule's too) read-only inside the sandbox."""
        git = self.workdir / ".git"
        if self.kind == "file":
            return ["--ro-bind", str(git), str(git)]
        if self.kind != "dir":
            return []
        options = ["--bind", str(git), str(git)]
        for folder in _git_dirs(git):
            for path in (folder / "config", folder / "hooks"):
                if path.exists() and not path.is_symlink():
                    options += ["--ro-bind", str(path), str(path)]
        return options

    def restore(self, run_id: str) -> list[str]:
        """Put every control file back as it was; what was done, as warnings."""
        git = self.workdir / ".git"
        now = GitControl.take(self.workdir)
        if self.kind == "none" and now.kind != "none":
            aside = self.workdir / f".git.created-by-{run_id}"
            git.rename(aside)
            return [
                f"the run created .git (a git repository whose hooks and config it chose): it was renamed to "
                f"{aside.name} so that git does not run them; check it before you rename it back"
            ]
        if self.kind != now.kind:  # only an unconfined run can (in the sandbox .git is a mount point)
            return [
                f"the run replaced .git (a {self.kind} before, a {now.kind} now): check its hooks and config "
                "before you run git here"
            ]
        changed = sorted(
            relative for relative in {*self.files, *now.files} if self.files.get(relative) != now.files.get(relative)
        )
        unsafe = [relative for relative in changed if not _reached_directly(self.workdir / relative)]
        for relative in changed:
            path = self.workdir / relative
            if relative in unsafe or (path.is_dir() and not path.is_symlink()):
                continue  # behind a symlink the run made (it may point anywhere), or a folder: not touched
            path.unlink(missing_ok=True)
            if relative in self.files:
                _put_back(path, *self.files[relative])
        warnings = (
            [
                f"the run changed files git runs or reads its settings from ({', '.join(map(quoted, changed))}): "
                "they were put back as they were before the run"
            ]
            if set(changed) - set(unsafe)
            else []
        )
        if unsafe:
            warnings.append(
                f"the run put a symlink where git's folders were ({', '.join(map(quoted, unsafe))} lie behind it): "
                "nothing was written through it; check .git before you run git here"
            )
        return warnings


def _reached_directly(path: Path) -> bool:
    """Whether no folder on the way to `path` is a symlink (the workdir's own path is resolved):
    restoring a file must never write through one the agent made, to a file outside the workdir."""
    return os.path.realpath(path.parent) == str(path.parent)


def _put_back(path: Path, content: bytes, mode: int) -> None:
    """A control file (or symlink) as it was, where the run removed or replaced it: never through
    a symlink, and only where nothing is now."""
    if stat.S_ISLNK(mode):
        os.symlink(content.decode(), path)
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, stat.S_IMODE(mode))
    with os.fdopen(descriptor, "wb") as out:
        out.write(content)
