"""bench/ and hack/ each go on sys.path where their scripts and the tests import them, so a
module name in both would import whichever folder came first: every name lives in one."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def modules(folder: Path) -> set[str]:
    """The names `import` finds in a folder: its .py files and its packages."""
    files = {p.stem for p in folder.glob("*.py")}
    packages = {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return files | packages


def test_no_module_name_is_in_both_bench_and_hack() -> None:
    both = modules(REPO / "bench") & modules(REPO / "hack")
    assert not both, f"in both bench/ and hack/: {sorted(both)}; rename one side"


def test_no_script_shadows_the_standard_library_or_tessera() -> None:
    names = modules(REPO / "bench") | modules(REPO / "hack")
    shadowing = names & (set(sys.stdlib_module_names) | {"tessera"})
    assert not shadowing, f"bench/ or hack/ modules named like {sorted(shadowing)}"


def test_the_check_sees_a_clash(tmp_path: Path) -> None:
    for side in ("bench", "hack"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "fleet.py").write_text("")
    (tmp_path / "hack" / "kit").mkdir()
    (tmp_path / "hack" / "kit" / "__init__.py").write_text("")
    assert modules(tmp_path / "bench") & modules(tmp_path / "hack") == {"fleet"}
    assert modules(tmp_path / "hack") == {"fleet", "kit"}


def test_no_test_module_name_is_in_two_test_folders() -> None:
    """The test folders are not packages: pytest imports each test file by its name, and a
    second file of that name elsewhere stops the whole run at collection."""
    folders = [REPO / "tests" / name for name in ("unit", "integration", "e2e")]
    seen: dict[str, Path] = {}
    clashes = []
    for folder in folders:
        for stem in sorted(p.stem for p in folder.glob("test_*.py")):
            if stem in seen:
                clashes.append(f"{stem} in {seen[stem].name}/ and {folder.name}/")
            seen.setdefault(stem, folder)
    assert not clashes, f"rename one side: {clashes}"
