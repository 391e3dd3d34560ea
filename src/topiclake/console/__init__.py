"""The web console: every broker serves it at ``/ui`` (see docs/console.md).

Server-rendered pages (Jinja2) over the broker's own Python API, made livelier with htmx and uPlot, which
the broker serves itself from ``vendor/node_modules`` (installed by ``make install``; no CDN).
"""

from topiclake.console.mount import mount
from topiclake.console.render import register_decoder

__all__ = ["mount", "register_decoder"]
