"""No module over 400 lines, the product's, its benchmarks', its tests' and its examples': a longer one holds more
than one concept (STYLE.md, habit 3)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOST_LINES = 400
FOLDERS = ("gaccum_core", "dashboard", "app_pages", "bench", "tests", "examples")


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_is_over_400_lines():
    modules = [ROOT / "app.py", *(p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py")))]
    over = {str(p.relative_to(ROOT)): _lines(p) for p in modules if _lines(p) > MOST_LINES}
    assert over == {}, f"modules over {MOST_LINES} lines: split each by concept"
