"""Assemble the static site as bytes, write it to a folder, or zip it.

The site is a flat folder that works from file:// with no network: ``index.html``, one page per run,
and ``assets/`` holding plotly.js (copied once from the installed plotly package, never a CDN), the
stylesheet and the small script that draws the figures. Every page links to them relatively.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from servebench.errors import ConfigError
from servebench.output.site.html import PLOTLY_JS, SITE_CSS, SITE_CSS_TEXT, SITE_JS, SITE_JS_TEXT
from servebench.output.site.inputs import RunInput, unique_names
from servebench.output.site.pages import SiteOptions, build_pages

ZIP_DATE = (2000, 1, 1, 0, 0, 0)


def plotly_js() -> bytes:
    """Return the plotly.js bundled with the installed plotly package."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().encode("utf-8")


def build_site(runs: Sequence[RunInput], options: SiteOptions | None = None) -> dict[str, bytes]:
    """Return every file of the site, keyed by its path relative to the site folder."""
    if not runs:
        raise ConfigError("nothing to report: give at least one record file, run folder or sweep folder")
    runs = list(runs)
    unique_names(runs)
    files = {path: text.encode("utf-8") for path, text in build_pages(runs, options or SiteOptions()).items()}
    files[PLOTLY_JS] = plotly_js()
    files[SITE_JS] = SITE_JS_TEXT.encode("utf-8")
    files[SITE_CSS] = SITE_CSS_TEXT.encode("utf-8")
    return files


def write_site(files: Mapping[str, bytes], out_dir: str | Path) -> list[Path]:
    """Write the site's files under ``out_dir`` (created if needed); return the paths written."""
    root = Path(out_dir)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"{root}: exists and is not a folder; choose another -o SITE_DIR")
    written = []
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)
    return written


def site_zip_bytes(files: Mapping[str, bytes], folder: str = "servebench-report") -> bytes:
    """Return the site as a zip archive (files under ``folder/``), byte-for-byte reproducible."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel in sorted(files):
            info = zipfile.ZipInfo(f"{folder}/{rel}" if folder else rel, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, files[rel])
    return buf.getvalue()


def report_zip_bytes(runs: Sequence[RunInput], options: SiteOptions | None = None,
                     folder: str = "servebench-report") -> bytes:
    """Return the whole site for ``runs`` as zip bytes (for a download button): build, then zip."""
    return site_zip_bytes(build_site(runs, options), folder)
