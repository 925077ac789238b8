"""A real headless browser for the tests: Debian's Chromium driven through its
WebDriver (Selenium), never a browser downloaded by a tool.

`browser_launch()` starts Chromium with a fresh profile and no network
chatter; `Browser` wraps the driver with what page tests need: open a path on
the live server, wait for a condition (never a sleep), read text, set the
window width and the Accept-Language, read console errors (CSP violations
show up there), take screenshots. The fixtures in tests/conftest.py start one
browser per test session and hand each test a clean one bound to the live
server: `browser`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)
DEFAULT_WIDTH, DEFAULT_HEIGHT = 1280, 900
PHONE_WIDTH, PHONE_HEIGHT = 360, 780
# An upper bound for a condition to come true, not a pause: waits end as soon as it holds.
WAIT_SECONDS = float(os.environ.get("BROWSER_WAIT_SECONDS", "20"))


def _which(env_name: str, *names: str) -> str:
    explicit = os.environ.get(env_name)
    if explicit:
        return explicit
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    raise RuntimeError(
        f"{' or '.join(names)} is not installed: run tests/ensure-browser.sh as root "
        f"(Debian packages chromium and chromium-driver), or set {env_name}"
    )


def chromium_path() -> str:
    return _which("CHROMIUM", "chromium", "chromium-browser")


def chromedriver_path() -> str:
    return _which("CHROMEDRIVER", "chromedriver")


class Browser:
    """One Chromium, one tab, bound to a base URL (the live server's)."""

    def __init__(self, driver: webdriver.Chrome, profile: Path) -> None:
        self.driver = driver
        self.profile = profile
        self.base_url = ""

    # --- Session state ------------------------------------------------------

    def reset(self, *, base_url: str = "") -> None:
        """Back to a blank tab: no cookies, desktop width, English."""
        self.base_url = base_url.rstrip("/")
        self.driver.get("about:blank")
        self.driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
        self.driver.execute_cdp_cmd("Browser.resetPermissions", {})
        self.size(DEFAULT_WIDTH, DEFAULT_HEIGHT)
        self.accept_language("en-US,en;q=0.9")
        self.driver.get_log("browser")  # drop what earlier tests logged

    def quit(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    def size(self, width: int, height: int = DEFAULT_HEIGHT) -> None:
        """The viewport size, in CSS pixels."""
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        )

    def accept_language(self, value: str) -> None:
        """The Accept-Language header the browser sends from now on."""
        user_agent = self.driver.execute_script("return navigator.userAgent")
        self.driver.execute_cdp_cmd("Network.setUserAgentOverride", {"userAgent": user_agent, "acceptLanguage": value})

    # --- Pages --------------------------------------------------------------

    def url(self, path: str) -> str:
        return path if "://" in path else f"{self.base_url}{path}"

    def open(self, path: str) -> None:
        self.driver.get(self.url(path))

    @property
    def current_path(self) -> str:
        url = self.driver.current_url
        return url[len(self.base_url) :] if url.startswith(self.base_url) else url

    def find(self, css: str) -> WebElement:
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        return self.find(css).text

    def visible(self, css: str) -> bool:
        return any(el.is_displayed() for el in self.find_all(css))

    def wait(self, condition: Callable[[], Any], *, message: str = "", timeout: float = WAIT_SECONDS) -> Any:
        """Wait until `condition()` returns something truthy, and return it."""

        def check(_driver):
            try:
                return condition()
            except StaleElementReferenceException:
                return False

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.1).until(check)
        except TimeoutException:
            raise AssertionError(
                f"waited {timeout:g}s in vain: {message or condition}\n"
                f"at {self.driver.current_url}\n{self.page_text()[:2000]}"
            ) from None

    def wait_visible(self, css: str, **kw) -> WebElement:
        return self.wait(
            lambda: next((el for el in self.find_all(css) if el.is_displayed()), None),
            message=f"{css} visible",
            **kw,
        )

    def wait_text(self, css: str, text: str, **kw) -> WebElement:
        return self.wait(
            lambda: next((el for el in self.find_all(css) if el.is_displayed() and text in el.text), None),
            message=f"{css} showing {text!r}",
            **kw,
        )

    def page_text(self) -> str:
        try:
            return self.driver.find_element(By.TAG_NAME, "body").text
        except Exception:
            return ""

    def console_errors(self) -> list[str]:
        """Console messages at level SEVERE since the last call (CSP violations, script errors)."""
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def screenshot(self, path: str | Path, *, full_page: bool = True) -> Path:
        """A PNG of the page (the whole page by default, not only the viewport)."""
        import base64

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page, "fromSurface": True}
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


def browser_launch() -> Browser:
    """Start Debian's Chromium, headless, with a fresh profile directory."""
    profile = Path(tempfile.mkdtemp(prefix="chromium-profile-"))
    options = webdriver.ChromeOptions()
    options.binary_location = chromium_path()
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={DEFAULT_WIDTH},{DEFAULT_HEIGHT}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=chromedriver_path(), log_output=os.devnull)
    try:
        driver = webdriver.Chrome(service=service, options=options)
    except Exception:
        shutil.rmtree(profile, ignore_errors=True)
        raise
    driver.set_page_load_timeout(WAIT_SECONDS)
    return Browser(driver, profile)
