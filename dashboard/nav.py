"""The dashboard's pages, in the sidebar's order: the entry point registers them, the home page links them."""

from __future__ import annotations

from typing import NamedTuple


class PageEntry(NamedTuple):
    """One page: its script, its sidebar title, its URL path, its icon and what the home page says of it."""

    script: str
    title: str
    url_path: str
    icon: str
    blurb: str


PAGES = (
    PageEntry("app_pages/0_Home.py", "Home", "", ":material/home:", "what gaccum is for, the device, the latest runs"),
    PageEntry("app_pages/1_Train.py", "Train", "Train", ":material/play_arrow:", "configure and watch a run"),
    PageEntry("app_pages/2_Runs.py", "Runs", "Runs", ":material/table_chart:", "compare, export, tag, delete"),
    PageEntry("app_pages/3_Equivalence.py", "Equivalence", "Equivalence", ":material/balance:",
              "accumulated vs one big batch, on your model"),
    PageEntry("app_pages/4_Pitfalls.py", "Pitfalls", "Pitfalls", ":material/bug_report:",
              "the classic accumulation bugs, side by side"),
    PageEntry("app_pages/5_Plan.py", "Plan", "Plan", ":material/straighten:",
              "the largest micro-batch that fits a memory budget"),
    PageEntry("app_pages/6_Sweeps.py", "Sweeps", "Sweeps", ":material/grid_on:",
              "a grid of settings × repeats, with 95% intervals"),
)
