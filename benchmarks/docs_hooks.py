"""mkdocs hooks (``hooks:`` in mkdocs.yml): the benchmark plots on the performance page.

``docs/performance.md`` links the plots where ``make bench`` writes them,
``../benchmarks/results/*.png``, so they show when the page is read in the repository. The site
cannot serve files outside ``docs/``: :func:`on_files` adds every plot of ``benchmarks/results/``
to the site as ``bench/<name>.png`` and :func:`on_page_markdown` points the page's links there.
No plot is copied into ``docs/``. Cost: one directory listing and a string replace per build.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

RESULTS = Path(__file__).resolve().parent / "results"
LINK, SITE = "](../benchmarks/results/", "](bench/"


def on_files(files, config):
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"bench/{png.name}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, config, files):
    return markdown.replace(LINK, SITE) if page.file.src_uri == "performance.md" else markdown
