"""The web UI end to end: a real headless chromium (the system's, driven by Selenium) against a real server.

Each test works through the page as a person would (tabs, buttons, forms) and checks what the page then shows;
every page must run without console errors. With MLX_SERVICE_UI_SCREENSHOTS=1 each view is saved under
bench/results/ as it looks on a laptop and on a phone, light and dark, for reviewing by eye.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from pathlib import Path

import httpx
import pytest

from .conftest import ROOT, VALID_FAMILY
from .server import Server

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
CHROMEDRIVER = shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("the web UI tests need chromium and chromedriver on PATH (`make test` installs Debian's chromium "
                "and chromium-driver where it can: root and apt-get)", allow_module_level=True)

from selenium import webdriver  # noqa: E402  (only once the browser is known to be there)
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

SHOTS = ROOT / "bench" / "results" if os.environ.get("MLX_SERVICE_UI_SCREENSHOTS") == "1" else None
WAIT = 60  # seconds: a model is built or loaded on a loaded 2-core machine within this


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not look for drivers online: ours are given
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser):
    """The browser, with its console checked after the test: no errors, except those a test says it expects."""
    browser.get_log("browser")  # what an earlier test left
    expected: list[str] = []
    yield browser, expected
    logs = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    unexpected = [e["message"] for e in logs if not any(x in e["message"] for x in expected)]
    assert not unexpected, unexpected


def wait_for(driver, condition, message: str, timeout: float = WAIT):
    """Until `condition` holds; the live views redraw every 2 s, so an element gone stale is looked up again."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
                         ).until(lambda d: condition(d), message)


def text(driver, selector: str) -> str:
    element = shown(driver, selector)
    return element.text if element is not None else ""


def names(srv, path: str) -> list[str]:
    """The models `path` (/api/tags: on disk, /api/ps: loaded) lists, as the API says."""
    return [m["name"] for m in httpx.get(srv.url + path).json()["models"]]


def click(driver, selector: str, message: str) -> None:
    """Click the (displayed) element `selector`, looked up afresh each try: a redraw may replace it mid-click."""
    wait_for(driver, lambda d: (element := shown(d, selector)) is not None and element.click() is None, message)


def shown(driver, selector: str):
    """The first element matching `selector` that is displayed, or None."""
    return next((e for e in driver.find_elements(By.CSS_SELECTOR, selector) if e.is_displayed()), None)


def erase(field) -> None:
    """Empty a field as a person does (Selenium's clear() fires no input event)."""
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE)


def tab(driver, name: str) -> None:
    driver.find_element(By.ID, f"tab-{name}").click()
    wait_for(driver, lambda d: d.find_element(By.ID, f"view-{name}").is_displayed(), f"the {name} view shows")


def screenshot(driver, name: str) -> None:
    if SHOTS is None:
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    for theme in ("light", "dark"):
        driver.execute_script("document.documentElement.dataset.theme = arguments[0]", theme)
        for width, label in ((1280, "laptop"), (390, "phone")):
            driver.set_window_size(width, 900)
            driver.save_screenshot(str(SHOTS / f"ui-{name}-{label}-{theme}.png"))
    driver.set_window_size(1280, 900)
    driver.execute_script("delete document.documentElement.dataset.theme")


@contextlib.contextmanager
def serving(driver, models: Path, **settings):
    """A server for one test; the page is left before the server stops, so its polling logs no refused calls."""
    with Server(models, **settings) as server:
        try:
            yield server
        finally:
            driver.get("about:blank")


@pytest.fixture
def srv(browser, tmp_path):
    with serving(browser, tmp_path / "models") as server:
        yield server


def test_a_browser_at_the_root_gets_the_ui_and_the_catalog_lists_the_demo_model(page, srv):
    driver, _ = page
    driver.get(srv.url + "/")
    assert driver.current_url == srv.url + "/ui/#catalog"  # the page names the view it shows
    row = wait_for(driver, lambda d: shown(d, 'tr[data-tag="demo:tiny-f32"]'), "the demo model is listed")
    assert "generated" in row.text and "Pull" in row.text
    summary = driver.find_element(By.ID, "catalog-summary").text
    total = len(srv.manager.catalog.entries())
    assert summary.startswith(f"{total} of {total} entries")
    # Ollama's clients still get their liveness answer at the root.
    assert httpx.get(srv.url + "/").text == "Ollama is running"

    driver.find_element(By.ID, "f-text").send_keys("tiny:s-f32b")
    wait_for(driver, lambda d: d.find_element(By.ID, "catalog-summary").text.startswith("1 of"), "the search filters")
    assert [r.get_attribute("data-tag") for r in driver.find_elements(By.CSS_SELECTOR, "#catalog-table tbody tr")] \
        == ["tiny:s-f32b"]
    erase(driver.find_element(By.ID, "f-text"))
    Select(driver.find_element(By.ID, "f-kind")).select_by_value("embedding")
    kinds = {r.find_elements(By.TAG_NAME, "td")[1].text.split("\n")[0]
             for r in driver.find_elements(By.CSS_SELECTOR, "#catalog-table tbody tr")}
    assert kinds == {"embedding"}
    screenshot(driver, "catalog")


def test_a_pull_shows_progress_ends_in_the_downloaded_list_and_can_be_deleted(page, srv):
    driver, _ = page
    driver.get(srv.url + "/ui/")
    pull = wait_for(driver, lambda d: shown(d, 'tr[data-tag="tiny:s-f32"] button'), "a Pull button")
    # Record every state the pull list passes through: a generated model builds in about a second.
    driver.execute_script("""
        window.seen = [];
        new MutationObserver(() => {
          for (const li of document.querySelectorAll('#pulls li')) seen.push(li.innerText);
        }).observe(document.getElementById('pulls'), {childList: true, subtree: true, characterData: true});""")
    pull.click()
    wait_for(driver, lambda d: shown(d, '#downloaded-table tr[data-model="tiny:s-f32"]'), "the model is listed")
    seen = driver.execute_script("return window.seen")
    assert any("tiny:s-f32" in s and "building generated model" in s for s in seen), seen
    assert driver.find_element(By.ID, "view-machine").is_displayed()
    assert "tiny:s-f32" in names(srv, "/api/tags")
    screenshot(driver, "machine")

    driver.execute_script("window.confirm = () => true")
    click(driver, '#downloaded-table tr[data-model="tiny:s-f32"] button.danger', "the Delete button")
    wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, '#downloaded-table tr[data-model="tiny:s-f32"]'),
             "the deleted model leaves the list")
    assert "tiny:s-f32" not in names(srv, "/api/tags")


def test_load_unload_and_a_settings_change_show_up_in_the_engine_view(page, srv):
    driver, expected = page
    expected.append("/api/engine/config - Failed to load resource: the server responded with a status of 400")
    driver.get(srv.url + "/ui/#engine")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#load-model option[value="tiny:s-f32"]'),
             "the model can be chosen")
    Select(driver.find_element(By.ID, "load-model")).select_by_value("tiny:s-f32")
    driver.find_element(By.ID, "load-button").click()
    wait_for(driver, lambda d: "ready" in text(d, '#loaded-table tr[data-model="tiny:s-f32"]'), "the model is loaded")
    wait_for(driver, lambda d: "load" in d.find_element(By.ID, "events").text, "the load is in the events")
    assert "MLX active" in driver.find_element(By.ID, "memory-now").text or srv.manager.models
    screenshot(driver, "engine")

    field = driver.find_element(By.CSS_SELECTOR, '#settings-fields input[name="max_tokens"]')
    erase(field)
    field.send_keys("-5")
    driver.find_element(By.CSS_SELECTOR, "#settings-form button[type=submit]").click()
    status = driver.find_element(By.ID, "settings-status")
    wait_for(driver, lambda d: "max_tokens" in status.text and "error" in status.get_attribute("class"),
             "the refused value is named")
    assert srv.manager.settings.max_tokens != -5
    erase(field)
    field.send_keys("77")
    driver.find_element(By.CSS_SELECTOR, "#settings-form button[type=submit]").click()
    wait_for(driver, lambda d: status.text.startswith("Applied: max_tokens"), "the change is applied")
    assert srv.manager.settings.max_tokens == 77
    assert httpx.get(srv.url + "/api/engine/config").json()["settings"]["max_tokens"] == 77

    click(driver, '#loaded-table tr[data-model="tiny:s-f32"] button', "the Unload button")
    wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, '#loaded-table tr[data-model="tiny:s-f32"]'),
             "the unloaded model leaves the table")
    assert "tiny:s-f32" not in names(srv, "/api/ps")


def test_a_chat_message_streams_a_reply_with_usage_and_the_same_request_as_code(page, srv):
    driver, _ = page
    driver.get(srv.url + "/ui/#playground")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#chat-model option[value="tiny:s-f32"]'),
             "the model can be chosen")
    Select(driver.find_element(By.ID, "chat-model")).select_by_value("tiny-vl:s-f32")
    assert driver.find_element(By.ID, "chat-image").is_displayed()  # a vision model takes an image
    Select(driver.find_element(By.ID, "chat-model")).select_by_value("tiny:s-f32")
    assert not driver.find_element(By.ID, "chat-image").is_displayed()
    erase(driver.find_element(By.ID, "chat-temperature"))
    driver.find_element(By.ID, "chat-temperature").send_keys("0")
    erase(driver.find_element(By.ID, "chat-max-tokens"))
    driver.find_element(By.ID, "chat-max-tokens").send_keys("6")
    driver.find_element(By.ID, "chat-system").send_keys("Be brief.")
    driver.find_element(By.ID, "chat-input").send_keys("hello there")
    driver.find_element(By.ID, "chat-send").click()
    usage = wait_for(driver, lambda d: "generated" in d.find_element(By.ID, "chat-usage").text
                     and d.find_element(By.ID, "chat-usage").text, "the reply ends with its usage")
    assert "6 generated" in usage and "tokens/s" in usage
    reply = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .text").get_attribute("textContent")
    assert reply  # random weights: some text, streamed into the page
    # The same request outside the page gives the same (greedy) reply: the page sent what it shows.
    python = driver.find_element(By.ID, "snippet-python").get_attribute("textContent")
    curl = driver.find_element(By.ID, "snippet-curl").get_attribute("textContent")
    assert "client.chat.completions.create(" in python and "/v1/chat/completions" in curl
    body = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    assert body["messages"][0] == {"role": "system", "content": "Be brief."} and body["max_tokens"] == 6
    again = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=WAIT).json()
    assert again["choices"][0]["message"]["content"].strip() == reply.strip()
    screenshot(driver, "playground")


def test_problems_of_the_users_catalog_layer_are_shown_with_where_they_are(page, tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    with serving(page[0], tmp_path / "models", catalog_path=str(layer)) as srv:
        (layer / "broken.yaml").write_text(VALID_FAMILY.replace("hidden_size: 2048", "hidden_size: lots"))
        driver, _ = page
        driver.get(srv.url + "/ui/")
        panel = wait_for(driver, lambda d: shown(d, "#problems"), "the problems panel shows")
        line = next(i for i, text in enumerate(VALID_FAMILY.splitlines(), 1) if "hidden_size" in text)
        assert f"broken.yaml:{line}:" in panel.text and "hidden_size" in panel.text


def test_with_api_keys_the_page_asks_for_a_key_once_and_refuses_a_wrong_one(page, tmp_path):
    driver, expected = page
    expected.append("401")  # the browser reports each refused call in the console
    with serving(driver, tmp_path / "models", api_keys="right-key") as srv:
        assert httpx.get(srv.url + "/ui/app.js").status_code == 200  # the page itself loads without a key
        assert httpx.get(srv.url + "/api/catalog").status_code == 401  # its data does not
        driver.get(srv.url + "/ui/")
        dialog = wait_for(driver, lambda d: shown(d, "#key-dialog"), "the key is asked for")
        dialog.find_element(By.ID, "key-input").send_keys("wrong-key")
        dialog.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(driver, lambda d: "not accepted" in d.find_element(By.ID, "key-error").text,
                 "a wrong key is refused")
        screenshot(driver, "key")
        dialog.find_element(By.ID, "key-input").send_keys("right-key")
        dialog.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait_for(driver, lambda d: shown(d, 'tr[data-tag="demo:tiny-f32"]'), "the catalog loads with the key")
        assert driver.execute_script("return sessionStorage.getItem('mlx-service-api-key')") == "right-key"
        tab(driver, "machine")  # further views use the kept key: no second question
        wait_for(driver, lambda d: d.find_element(By.ID, "no-pulls").is_displayed(), "the machine view loads")
        assert not shown(driver, "#key-dialog")


def test_a_pull_started_elsewhere_shows_its_progress_and_can_be_cancelled(page, tmp_path):
    from service.hub import store
    from service.hub.pull import Puller

    from .fakehub import FakeHub, Repo

    driver, _ = page
    config = json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}).encode()
    with FakeHub() as fake:
        fake.repos["org/slow"] = Repo({"config.json": config, "model.safetensors": os.urandom(4 << 20)})
        fake.faults.stall["model.safetensors"] = 5.0  # half the weights, then nothing for 5 s
        store.use_puller(Puller(cache_dir=tmp_path / "hf", endpoint=fake.url, offline=False))
        try:
            with serving(driver, tmp_path / "models") as srv:
                lines: list[dict] = []

                def other_client():
                    with httpx.stream("POST", srv.url + "/api/pull", json={"model": "org/slow"}, timeout=60) as r:
                        lines.extend(json.loads(line) for line in r.iter_lines() if line)

                pulling = threading.Thread(target=other_client)
                pulling.start()
                driver.get(srv.url + "/ui/#machine")
                item = '#pulls li[data-model="org/slow"]'
                wait_for(driver, lambda d: "MiB of 4.0 MiB" in text(d, item), "the pull's progress shows")
                assert float(shown(driver, item + " progress").get_attribute("value")) > 0
                screenshot(driver, "pull")
                click(driver, item + " button", "the Cancel button")
                pulling.join(timeout=30)
                assert not pulling.is_alive() and "cancelled" in lines[-1]["error"]
                wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, item), "the pull leaves the list")
                assert "org/slow" not in names(srv, "/api/tags")
        finally:
            store.use_puller(None)


def test_the_playground_shows_thinking_apart_and_tool_calls(page, srv):
    driver, _ = page
    driver.get(srv.url + "/ui/#playground")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, '#chat-model option[value="tiny-r1:s-f32"]'),
             "the models can be chosen")
    Select(driver.find_element(By.ID, "chat-model")).select_by_value("tiny-r1:s-f32")  # thinks from the start
    erase(driver.find_element(By.ID, "chat-temperature"))
    driver.find_element(By.ID, "chat-temperature").send_keys("0")  # greedy, so every run sees the same reply
    erase(driver.find_element(By.ID, "chat-max-tokens"))
    driver.find_element(By.ID, "chat-max-tokens").send_keys("12")
    driver.find_element(By.ID, "chat-input").send_keys("why?")
    driver.find_element(By.ID, "chat-send").click()
    wait_for(driver, lambda d: "12 generated" in d.find_element(By.ID, "chat-usage").text, "the reply ends")
    thinking = driver.find_element(By.CSS_SELECTOR, ".msg.assistant details pre").get_attribute("textContent")
    assert thinking and driver.find_element(By.CSS_SELECTOR, ".msg.assistant details summary").text == "Thinking"

    driver.find_element(By.ID, "chat-clear").click()
    driver.find_element(By.CSS_SELECTOR, "#chat-more summary").click()
    Select(driver.find_element(By.ID, "chat-model")).select_by_value("tiny-qwen3:s-f32")
    Select(driver.find_element(By.ID, "chat-reasoning")).select_by_value("none")
    tools = driver.find_element(By.ID, "chat-tools")
    tools.send_keys("[not json")
    driver.find_element(By.ID, "chat-input").send_keys("what time is it?")
    driver.find_element(By.ID, "chat-send").click()
    assert "Tools are not JSON" in driver.find_element(By.ID, "chat-usage").text  # said, and nothing sent
    assert not driver.find_elements(By.CSS_SELECTOR, ".msg")
    erase(tools)
    tools.send_keys(json.dumps([{"type": "function", "function": {
        "name": "get_time", "parameters": {"type": "object", "properties": {}}}}]))
    Select(driver.find_element(By.ID, "chat-tool-choice")).select_by_value("required")
    erase(driver.find_element(By.ID, "chat-max-tokens"))
    driver.find_element(By.ID, "chat-max-tokens").send_keys("100")
    driver.find_element(By.ID, "chat-send").click()
    call = wait_for(driver, lambda d: shown(d, ".msg.assistant pre.tool-call"), "the tool call shows")
    assert call.text == "tool call: get_time({})"
    python = driver.find_element(By.ID, "snippet-python").get_attribute("textContent")
    request = json.loads(python.split("json.loads(r\'\'\'", 1)[1].split("\'\'\')", 1)[0])
    assert request["tool_choice"] == "required" and request["reasoning_effort"] == "none"
    assert request["tools"][0]["function"]["name"] == "get_time"
    screenshot(driver, "playground-tools")
