"""The README's picture of a certification's summary: the page of the simulated 256-node fleet
(tests/simulated_certification.py) in headless Chromium, its first screen.

Run: .venv/bin/python scripts/report_screenshot.py [docs/images/certification-summary.png]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provisioner.certify import report_html  # noqa: E402
from tests.browser import chromium, open_page  # noqa: E402
from tests.simulated_certification import simulated_document  # noqa: E402


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images" / "certification-summary.png"
    with tempfile.TemporaryDirectory() as scratch:
        page = report_html.write_html(Path(scratch) / "certification.html", simulated_document(256))
        with chromium(1100, 760) as driver:
            errors = open_page(driver, page)
            if errors:
                raise SystemExit(f"the page logged errors: {errors}")
            driver.save_screenshot(str(target))
    print(target)


if __name__ == "__main__":
    main()
