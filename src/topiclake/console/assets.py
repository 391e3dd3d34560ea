"""The browser libraries the console loads, served by the broker itself (no CDN).

They are not in the repository: ``make install`` runs ``npm ci`` in ``vendor/`` (``package.json`` and
``package-lock.json`` pin them), which fills ``vendor/node_modules/``. A broker whose libraries are missing
still serves every page (they are rendered on the server and their forms work without scripts); it says
so on each page, and charts and live updates are off.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"


def vendor_dir() -> Path:
    """Where the npm packages are: ``TOPICLAKE_CONSOLE_VENDOR`` or ``vendor/node_modules`` here."""
    return Path(os.environ.get("TOPICLAKE_CONSOLE_VENDOR") or HERE / "vendor" / "node_modules")


# URL name under /ui/vendor/ -> file inside node_modules
VENDOR_FILES: dict[str, str] = {
    "htmx.min.js": "htmx.org/dist/htmx.min.js",
    "uPlot.iife.min.js": "uplot/dist/uPlot.iife.min.js",
    "uPlot.min.css": "uplot/dist/uPlot.min.css",
}


def missing() -> list[str]:
    """The vendored files that are not installed."""
    root = vendor_dir()
    return [name for name, rel in VENDOR_FILES.items() if not (root / rel).is_file()]


router = APIRouter()


@router.get("/ui/vendor/{name}", include_in_schema=False)
def vendor(name: str) -> FileResponse:
    """One vendored library file (only the ones listed in VENDOR_FILES)."""
    rel = VENDOR_FILES.get(name)
    path = vendor_dir() / rel if rel else None
    if path is None or not path.is_file():
        raise HTTPException(404, f"{name} is not installed: run `make install`")
    return FileResponse(path, headers={"cache-control": "public, max-age=3600"})
