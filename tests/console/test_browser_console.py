"""The web console in a real browser: headless Chromium (Debian's, driven by Selenium; nothing is downloaded).

Chromium's fake microphone plays a piper-spoken question from a WAV file (it loops the file; the talk button
is held for its length, and each press opens the microphone afresh, so it starts at the file's beginning).
The page must do everything a person would see: list the devices and the server's status, capture and
resample the microphone, talk to the server over the device protocol, show the subtitles, play the reply,
and show the turn with its latency split in the live turn view; then the same for a typed question.

Screenshots and the browser's console log go to test-artifacts/console/ (ignored by git);
WREN_UPDATE_SCREENSHOTS=1 also refreshes docs/images/console.png.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.clients import heard
from tests.server.helpers import words
from tests.support.spoken import spoken_pcm, write_wav

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "console"
DOCS_SCREENSHOT = ROOT / "docs" / "images" / "console.png"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
QUESTION = "what time is it"
WAV_RATE = 48000  # a microphone's usual rate: the page resamples it to 16 kHz itself


@pytest.fixture(scope="module")
def question_wav(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    # The tail outlasts the time the page needs to open the microphone after the press.
    pcm = spoken_pcm(QUESTION, WAV_RATE, lead_ms=300, tail_ms=1500)
    path = write_wav(tmp_path_factory.mktemp("console") / "question.wav", pcm, WAV_RATE)
    return path, len(pcm) / 2 / WAV_RATE


@pytest.fixture(scope="module")
def browser(question_wav: tuple[Path, float]) -> Iterator[Any]:
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("chromium or chromedriver is not installed (`make test` installs them: "
                    "apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed ([dev] extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,860",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={question_wav[0]}",
                 "--autoplay-policy=no-user-gesture-required", "--lang=en-GB"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        try:
            log = driver.get_log("browser")
            (ARTIFACTS / "browser-console.log").write_text("\n".join(json.dumps(e) for e in log) + "\n")
        finally:
            driver.quit()


@contextlib.contextmanager
def _idle_device(server: Any) -> Iterator[str]:
    """A second device (Opus, hello only) so the device list has something besides the page itself."""
    from websockets.sync.client import connect

    device_id = "02:00:00:" + ":".join(f"{b:02x}" for b in uuid.uuid4().bytes[:3])
    headers = {"Device-Id": device_id, "Client-Id": str(uuid.uuid4())}
    with connect(server.ws_url, open_timeout=10, additional_headers=headers) as ws:
        ws.send(json.dumps({"type": "hello", "version": 1, "transport": "websocket",
                            "audio_params": {"format": "opus", "sample_rate": 16000, "channels": 1,
                                             "frame_duration": 60}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "hello"
        yield device_id


def _screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def test_the_console_lists_devices_talks_from_the_browser_and_shows_the_turns(server, browser, question_wav):
    with _idle_device(server) as other_id:
        _drive(browser, server, question_wav[1], other_id)


def _ota(server: Any, device_id: str, client_id: str) -> dict:
    headers = {"Content-Type": "application/json", "Device-Id": device_id, "Client-Id": client_id,
               "Activation-Version": "1"}
    request = urllib.request.Request(server.http_url + server.config.server.ota_path, data=b"{}",
                                     method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def test_a_device_waiting_to_pair_appears_and_the_approve_button_pairs_it(start_server, browser):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    paired = start_server(auth={"mode": "pair"})
    device_id, client_id = "02:00:00:00:0d:01", "browser-test-client"

    def text(css: str) -> str:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else ""

    def wait(condition: Any, what: str, timeout: float = 15) -> Any:
        # The page re-renders its tables on every feed event: an element found a moment ago may be gone.
        waiting = WebDriverWait(browser, timeout, poll_frequency=0.1,
                                ignored_exceptions=(StaleElementReferenceException,))
        return waiting.until(lambda d: condition(), what)

    try:
        browser.get(paired.http_url + "/")
        wait(lambda: browser.find_element(By.ID, "feed-state").get_attribute("data-state") == "live",
             "the live feed connects")
        assert "No device is waiting" in text("#no-waiting")
        code = _ota(paired, device_id, client_id)["activation"]["code"]  # while the page is open
        row = f'#waiting tr[data-code="{code}"]'
        wait(lambda: device_id in text(row), "the waiting device appears")
        assert client_id in text(row) and "127.0.0.1" in text(row)
        _screenshot(browser, "console-pairing.png")
        browser.find_element(By.CSS_SELECTOR, row + " button.approve").click()
        wait(lambda: client_id in text(f'#paired tr[data-device="{device_id}"]'), "listed as paired")
        assert not browser.find_elements(By.CSS_SELECTOR, row)
        assert _ota(paired, device_id, client_id)["websocket"]["token"]  # approved: OTA hands out its token
    except Exception:
        _screenshot(browser, "failure-pairing.png")
        raise


def _drive(driver: Any, server: Any, seconds: float, other_id: str) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(condition: Any, timeout: float = 30, what: str = "") -> Any:
        # The page re-renders its tables on every feed event: an element found a moment ago may be gone.
        waiting = WebDriverWait(driver, timeout, poll_frequency=0.1,
                                ignored_exceptions=(StaleElementReferenceException,))
        return waiting.until(lambda d: condition(), what)

    def text(css: str) -> str:
        found = driver.find_elements(By.CSS_SELECTOR, css)
        return found[0].text if found else ""

    def body(name: str) -> int:
        return int(driver.find_element(By.TAG_NAME, "body").get_attribute(f"data-{name}") or 0)

    try:
        driver.get(server.http_url + "/")
        wait(lambda: driver.find_element(By.ID, "feed-state").get_attribute("data-state") == "live", 15,
             "the live feed connects")
        assert "version " in text("#server-info") and " up " in text("#server-info")
        row = f'#devices tr[data-device="{other_id}"]'
        wait(lambda: text(row), 10, "the other device is listed")
        assert "idle" in text(row) and "opus" in text(row)

        # Hold to talk for the length of the question; Chromium's fake microphone speaks it.
        talk = driver.find_element(By.ID, "talk")
        ActionChains(driver).click_and_hold(talk).pause(seconds).release().perform()
        wait(lambda: {"what", "time"} <= heard(text("#stt")), 30, "the question's words as stt")
        wait(lambda: "it's" in words(text("#reply")), 30, "the reply's sentence")
        wait(lambda: body("played-samples") > 16000 // 2, 30, "reply audio played")
        assert body("sent-frames") >= int(seconds * 1000 / 60) // 2, "the microphone was streamed"
        me = driver.execute_script("return window.wrenConsole.me.deviceId")
        assert me.startswith("browser-")
        spoken = f'#turns tr[data-device="{me}"][data-source="speech"]'
        wait(lambda: text(spoken), 10, "the spoken turn in the live turn view")
        assert {"what", "time"} <= heard(text(spoken + " td.heard"))
        assert "it's" in words(text(spoken + " td.said"))
        split = driver.find_element(By.CSS_SELECTOR, spoken + " td.split-cell")
        for stage in ("asr-finalise", "engine-first-sentence", "tts-first-audio", "send"):
            assert float(split.get_attribute(f"data-{stage}") or -1) >= 0, stage
        assert text(spoken + " td.total").endswith(("ms", " s"))
        mine = f'#devices tr[data-device="{me}"]'
        wait(lambda: "pcm" in text(mine), 10, "the page itself is a pcm device")
        _screenshot(driver, "console-spoken.png")

        # The text box: a typed question goes as `listen detect`.
        played = body("played-samples")
        box = driver.find_element(By.ID, "ask-text")
        box.send_keys("thank you")
        box.send_keys(Keys.ENTER)
        wait(lambda: "welcome" in text("#reply").lower(), 30, "the typed question's reply")
        assert text("#stt") == "thank you"
        typed = f'#turns tr[data-device="{me}"][data-source="text"]'
        wait(lambda: "welcome" in text(typed + " td.said").lower(), 10, "the typed turn in the turn view")
        wait(lambda: body("played-samples") > played, 30, "the typed reply played")
        wait(lambda: "thank you" in text(mine), 10, "the device's last turn")
        shot = _screenshot(driver, "console.png")
        if os.environ.get("WREN_UPDATE_SCREENSHOTS"):  # the README's picture: no focus ring, no highlight
            driver.execute_script("document.activeElement.blur()")
            time.sleep(2.2)
            DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_screenshot(driver, "console-docs.png"), DOCS_SCREENSHOT)
        assert shot.stat().st_size > 0
    except Exception:
        _screenshot(driver, "failure.png")
        raise
