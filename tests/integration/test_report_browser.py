"""The certification page of a simulated 256-node fleet in a real browser (headless Chromium):
it loads without a script error, within its size budget, the filter and the sort work."""

from __future__ import annotations

from pathlib import Path

from provisioner.certify import report_html
from tests.browser import chromium, open_page, visible_rows
from tests.simulated_certification import simulated_document
from tests.unit.test_certify_report import BUDGET_256_BYTES


def test_the_256_node_page_loads_clean_and_its_filter_and_sort_work(tmp_path: Path):
    page = report_html.write_html(tmp_path / "certification.html", simulated_document(256))
    assert page.stat().st_size < BUDGET_256_BYTES
    with chromium() as driver:
        assert open_page(driver, page) == []
        assert driver.title == "Certification of sim: NOT CERTIFIED"
        # summary first: the verdict and the failing nodes fill the first screen
        first_screen = driver.execute_script("return document.elementFromPoint(300, 60).textContent")
        assert "NOT CERTIFIED" in first_screen
        top = driver.execute_script("return document.querySelector('.node-failure').getBoundingClientRect().top")
        assert top < 900
        # the certified nodes folded in the map; the failing ones and their blocks shown
        shown = visible_rows(driver)
        assert {"gpu042", "gpu118", "gpu205"} <= set(shown) and "gpu001" not in shown
        driver.find_element("id", "node-filter").send_keys("gpu007")
        assert set(visible_rows(driver)) == {"gpu007"} | {n for n in visible_rows(driver) if "gpu007" in n}
        assert "gpu007" in visible_rows(driver) and "gpu118" not in visible_rows(driver)
        driver.find_element("id", "node-filter").clear()
        driver.execute_script("document.getElementById('node-filter').dispatchEvent(new Event('input'))")
        driver.find_element("id", "show-all").click()
        assert sum(1 for node in visible_rows(driver) if node.startswith("gpu")) >= 256
        # sorting the map by its "failed" column puts the worst node first, without an error
        headings = driver.find_elements("css selector", "table.map th")
        headings[1].click()
        first = driver.execute_script("return document.querySelector('table.map tbody tr').getAttribute('data-nodes')")
        assert first == "gpu205"
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
