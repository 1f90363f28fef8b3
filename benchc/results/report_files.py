"""Where `benchc report` writes: the PNGs (results/report.py, matplotlib) and/or the interactive
page (results/html_report.py, no matplotlib). Every path is checked before any is written."""

from __future__ import annotations

import os

from benchc.errors import UsageError
from benchc.results.document import check_folder, check_target, write_bytes_atomic
from benchc.results.html_report import page
from benchc.results.report import _plt, _png, figures


def write_report(docs: list[dict], png_dir: str | None, html_path: str | None,
                 overwrite: bool = False, sources: list[str] | None = None,
                 gpu_hour: float | None = None) -> list[str]:
    """Write the PNGs into `png_dir` and/or the page to `html_path`; returns the paths written.
    Every path is checked before any is written: an existing file needs `overwrite`, and only
    regular files are ever replaced (results.document.check_target)."""
    if not png_dir and not html_path:
        raise UsageError("say where: --png DIR and/or --html FILE")
    hint = "choose another place or pass --force"
    if html_path:
        check_target(html_path, overwrite, hint)
        check_folder(html_path)
    if png_dir and os.path.exists(png_dir) and not os.path.isdir(png_dir):
        raise UsageError(f"--png {png_dir} is a file, not a folder")
    written = _write_pngs(docs, png_dir, overwrite, hint) if png_dir else []
    if html_path:
        # the interactive page: drawn in the browser, no matplotlib
        write_bytes_atomic(html_path, page(docs, sources, gpu_hour).encode("utf-8"), overwrite)
        written.append(html_path)
    return written


def _write_pngs(docs: list[dict], png_dir: str, overwrite: bool, hint: str) -> list[str]:
    plt = _plt()
    figs = figures(docs)
    images = {name: _png(fig) for name, fig in figs.items()}
    for fig in figs.values():
        plt.close(fig)
    pngs = {os.path.join(png_dir, f"{name}.png"): data for name, data in images.items()}
    taken = [p for p in pngs if os.path.lexists(p)]
    for path in taken:
        check_target(path, overwrite, hint)  # a special file is refused even with overwrite
    written = []
    for path, data in pngs.items():
        write_bytes_atomic(path, data, overwrite)
        written.append(path)
    return written
