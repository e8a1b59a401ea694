"""A page opened in a real browser: Debian's Chromium, headless, driven by its ChromeDriver."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextmanager
def chromium(width: int = 1200, height: int = 900) -> Iterator[webdriver.Chrome]:
    """Headless Chromium with its console log kept; no network is needed for a file:// page."""
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--hide-scrollbars"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver: webdriver.Chrome, page: Path) -> list[dict]:
    """Load the page; the console's errors and warnings (script errors among them)."""
    driver.get(page.resolve().as_uri())
    driver.execute_script("return document.readyState")
    return [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def visible_rows(driver: webdriver.Chrome) -> list[str]:
    """The node of each row of the page's filterable parts that is shown."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-nodes]'))"
        ".filter(function (e) { return !e.classList.contains('hidden'); })"
        ".map(function (e) { return e.getAttribute('data-nodes'); });")
