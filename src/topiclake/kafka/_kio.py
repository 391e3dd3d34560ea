"""kio, imported before any module of the package uses it (see :func:`_import_kio_without_hypothesis`)."""

import sys


def _import_kio_without_hypothesis() -> None:
    """Import kio's phantom types with hypothesis hidden, unless either is loaded already.

    kio registers a strategy with hypothesis (a property-testing library) for each of its types whenever
    hypothesis can be imported. In an install with the development extras that import brings pytest and
    trio along: ~0.3 CPU-s of every broker's and CLI's start, for strategies that only tests draw. A
    process that has imported hypothesis before (a test) keeps kio's strategies.
    """
    if "hypothesis" in sys.modules or "kio.static._phantom" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # "import hypothesis" raises ImportError
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
