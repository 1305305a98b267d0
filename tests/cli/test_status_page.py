"""The status page of ``journaled serve --http``: opened in headless Chromium (Debian's chromium
and chromium-driver, driven by selenium), its numbers compared with ``q.stats()``; the token
required; dead letters' reasons and payloads escaped; what a person reads there checked (plots
with axes and time labels, a section per served queue, the open reads table, a search result);
the screenshot kept as docs/img/status-page.png (the docs show it)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from journaled import JournaledQueue, ReaderConfig
from journaled.cli.statuspage import StatusServer
from support.paths import ROOT

TIMEOUT = 30.0
HOSTILE = '<img src=x onerror="window.__pwned=1">'
SCREENSHOT = os.path.join(ROOT, "docs", "img", "status-page.png")


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=TIMEOUT) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def served(tmp_path):
    dead = JournaledQueue(str(tmp_path / "dead"))
    q = JournaledQueue(str(tmp_path / "jobs"))
    workers = q.reader("workers", ReaderConfig(max_errors=2, dead_letter=dead))
    q.reader("audit")
    q.put_many([b"job %d" % i for i in range(300)] + [HOSTILE.encode()])
    q.put(b"invoice 7 for acme", key=b"acme", headers={"kind": b"invoice"})
    q.put(b"invoice 8 for zenith", key=b"zenith", headers={"kind": b"invoice"})
    for _ in range(40):
        workers.commit(workers.get(block=False))
    workers.reject(workers.get(block=False), HOSTILE)
    held = workers.get(block=False)
    assert q.reader_settings("workers")["dead_letter"] == {"queue": "../dead"}
    deadline = time.monotonic() + TIMEOUT
    while dead.stats().next_id < 2 and time.monotonic() < deadline:  # the sink thread hands it over
        time.sleep(0.02)
    dead.sync()  # the page reads dead letters from the files: what the sync policy has written
    server = StatusServer([q], token="s3cret-token", peek=True)
    yield server, q
    server.close()
    workers.release(held)
    q.close()
    dead.close()


def test_every_request_needs_the_token(served) -> None:
    server, _q = served
    base = f"http://127.0.0.1:{server.port}"
    assert _get(base + "/")[0] == 401
    assert _get(base + "/api/status")[0] == 401
    assert _get(base + "/api/status?token=wrong")[0] == 403
    assert _get(base + "/api/status", {"Authorization": "Bearer wrong"})[0] == 403
    code, body = _get(base + "/api/status", {"Authorization": "Bearer s3cret-token"})
    assert code == 200 and json.loads(body)["queues"][0]["stats"]["name"] == "jobs"
    assert _get(base + "/nothing-here?token=s3cret-token")[0] == 404


def test_the_api_reports_the_stats_and_the_newest_dead_letters(served) -> None:
    server, q = served
    code, body = _get(f"http://127.0.0.1:{server.port}/api/status?token=s3cret-token")
    assert code == 200
    queue, dead = json.loads(body)["queues"]  # the dead-letter queue this process owns too
    assert (queue["stats"]["name"], dead["stats"]["name"]) == ("jobs", "dead")
    got = {r["name"]: r for r in queue["stats"]["readers"]}
    want = {r.name: r for r in q.stats().readers}
    assert got["workers"]["backlog_items"] == want["workers"].backlog_items == 262
    assert got["workers"]["open_reads"] == 1 and got["audit"]["backlog_items"] == 303
    (letter,) = queue["dead_letters"]["workers"]
    assert letter["reason"] == HOSTILE and letter["kind"] == "rejected" and letter["original_id"] == 41


def test_payloads_are_left_out_unless_peek(tmp_path) -> None:
    dead = JournaledQueue(str(tmp_path / "dead"))
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        r = q.reader("r", ReaderConfig(dead_letter=dead))
        q.put(b"secret payload")
        r.reject(r.get(block=False), "no")
        deadline = time.monotonic() + TIMEOUT
        while dead.stats().next_id < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        dead.sync()
        server = StatusServer([q], token=None)
        try:
            code, body = _get(f"http://127.0.0.1:{server.port}/api/status")
        finally:
            server.close()
    dead.close()
    assert code == 200 and b"secret payload" not in body and b'"reason": "no"' in body


def test_the_page_loads_nothing_from_elsewhere_so_it_works_offline(served) -> None:
    from html.parser import HTMLParser

    server, _q = served
    code, body = _get(f"http://127.0.0.1:{server.port}/?token=s3cret-token")
    assert code == 200
    fetched: list[str] = []

    class Refs(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            fetched.extend(f"{tag} {k}={v}" for k, v in attrs if k in ("src", "href", "srcset", "data"))
            if tag in ("link", "iframe", "object", "embed", "img"):
                fetched.append(tag)

    Refs().feed(body.decode())
    assert fetched == []
    assert b"<script>" in body  # its own inline script draws the plots (SVG) from /api/status
    assert not [u for u in (b"http://", b"https://", b"//cdn", b"@import", b"url(") if u in body]


@pytest.fixture
def browser(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver_bin is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run installs them)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        options.add_argument(arg)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(driver_bin), options=options)
    yield driver
    driver.quit()


def _cell(driver, reader: str, field: str) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return str(
            driver.find_element("css selector", f"tr[data-reader='{reader}'] td[data-field='{field}']").text
        )
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def _until(check, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"the page never showed {what}")


def _texts(driver, css: str) -> list[str]:
    from selenium.common.exceptions import StaleElementReferenceException

    # the page redraws its plots on every refresh: an element found before a redraw is stale
    # after it, so the whole list is read again from one drawing
    for _ in range(50):
        try:
            return [str(e.text) for e in driver.find_elements("css selector", css)]
        except StaleElementReferenceException:
            time.sleep(0.05)
    return [str(e.text) for e in driver.find_elements("css selector", css)]


def test_the_page_in_a_browser_shows_what_stats_says(served, browser, tmp_path) -> None:
    server, q = served
    audit = q.reader("audit")
    for i in range(6):  # a few samples with puts and commits between: the plots have lines and rates
        q.put_many([b"more %d" % i] * 3 * i)
        for _ in range(7):
            audit.commit(audit.get(block=False))
        server.history.take()
        time.sleep(0.8)
    browser.get(f"http://127.0.0.1:{server.port}/")  # no token yet
    assert "a token is needed" in browser.page_source
    browser.get(server.url())  # the printed address: the token, then a cookie
    st = {r.name: r for r in q.stats().readers}
    _until(
        lambda: _cell(browser, "workers", "backlog_items") == f"{st['workers'].backlog_items:,}",
        "the backlog",
    )
    assert _cell(browser, "audit", "backlog_items") == f"{st['audit'].backlog_items:,}"
    assert _cell(browser, "workers", "open_reads") == "1"
    assert (_cell(browser, "workers", "dead_lettered"), _cell(browser, "workers", "rejected")) == ("0", "1")
    health = browser.find_element("css selector", "span[data-field='health']").text
    assert health == "ok"
    # a section for every queue the process serves: the dead-letter queue too
    assert [s.get_attribute("data-queue") for s in browser.find_elements("css selector", "section")] == [
        "jobs",
        "dead",
    ]
    # the held read: its item's age where the oldest uncommitted one is promised, and its row
    assert re.fullmatch(r"\d+\.\d s", _cell(browser, "workers", "oldest_uncommitted_age"))
    lines = _texts(browser, "section[data-queue='jobs'] table[data-open-reads] tr")
    assert len(lines) == 2 and lines[0].split() == ["reader", "id", "age", "client"]
    reader, item_id, age, unit, *client = lines[1].split()
    assert (reader, item_id, unit, " ".join(client)) == ("workers", "42", "s", "this process")
    assert float(age) >= 0
    # plots: a title, values on the y axis, times of day on the x axis, a line
    for plot, title in [
        ("svg[data-plot='backlog'][data-reader='audit']", "backlog of audit"),
        ("svg[data-plot='commits'][data-reader='audit']", "commits per second of audit"),
        ("section[data-queue='jobs'] svg[data-plot='puts']", "puts per second"),
    ]:
        assert _texts(browser, plot + " text.title") == [title]
        ticks = _texts(browser, plot + " text.tick-x")
        assert len(set(ticks)) == 4 and all(re.fullmatch(r"\d\d:\d\d:\d\d(\.\d)?", t) for t in ticks), ticks
        values = _texts(browser, plot + " text.tick-y")
        assert values[0] == "0" and len(values) == 3, values
        assert browser.find_elements("css selector", plot + " polyline")
    # the audit reader committed 7 items between samples: its rate is a number, not "-"
    assert float(_cell(browser, "audit", "commit_per_s")) >= 0
    assert _texts(browser, "svg[data-plot='backlog'][data-reader='audit'] text.tick-y")[-1] != "0"
    # the dead letter's reason and payload are text, never markup the page runs
    table = browser.find_element("css selector", "table[data-dead='workers']").text
    assert HOSTILE in table
    assert browser.execute_script("return window.__pwned === undefined") is True
    # live: more commits show up without a reload
    w = q.reader("workers")
    for _ in range(10):
        w.commit(w.get(block=False))
    _until(
        lambda: _cell(browser, "workers", "backlog_items") == f"{st['workers'].backlog_items - 10:,}",
        "a change",
    )
    # the search: by key, the payload shown (--peek); then the hostile payload, as text
    q.sync()
    form = browser.find_element("css selector", "form#find")
    form.find_element("name", "key").send_keys("acme")
    form.find_element("css selector", "button").click()
    _until(lambda: len(_texts(browser, "table[data-found] tr")) == 2, "a search result")
    (found,) = _texts(browser, "table[data-found] tr")[1:]
    assert found.startswith("302 ") and "acme" in found and "kind=invoice" in found
    assert "invoice 7 for acme" in found and "zenith" not in found
    assert "1 item found in jobs" in browser.find_element("css selector", "p[data-found-summary]").text
    browser.execute_script("window.scrollTo(0, 0)")
    os.makedirs(os.path.dirname(SCREENSHOT), exist_ok=True)
    assert browser.save_screenshot(SCREENSHOT)
    with open(SCREENSHOT, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(SCREENSHOT) > 10_000
    form.find_element("name", "key").clear()
    form.find_element("name", "start").send_keys("301")
    form.find_element("name", "end").send_keys("301")
    form.find_element("css selector", "button").click()
    # a new row, not merely the old one gone (the table is empty while the answer is on its way)
    _until(lambda: _texts(browser, "table[data-found] tr")[1:2] not in ([], [found]), "the second search")
    assert HOSTILE in _texts(browser, "table[data-found] tr")[1]
    assert browser.execute_script("return window.__pwned === undefined") is True


def _serve(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "journaled", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_serve_http_prints_the_address_with_its_token_and_serves_the_owned_queue(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        q.reader("r")
        q.put_many([b"a"] * 7)
    server = _serve("--http", "0", path)
    try:
        assert server.stdout is not None
        first = server.stdout.readline().strip()
        assert first.startswith("status page at http://127.0.0.1:") and "?token=" in first
        assert server.stdout.readline().startswith("serving ")
        url = first.removeprefix("status page at ")
        base = url.split("?")[0].rstrip("/")
        assert _get(base + "/api/status")[0] == 401
        code, body = _get(base + "/api/status?" + url.split("?")[1])
        assert code == 200
        (reader,) = json.loads(body)["queues"][0]["stats"]["readers"]
        assert (reader["name"], reader["backlog_items"]) == ("r", 7)
        if importlib.util.find_spec("prometheus_client") is not None:
            token = url.split("token=")[1]
            code, text = _get(base + "/metrics", {"Authorization": f"Bearer {token}"})
            assert code == 200 and b'journaled_reader_backlog_items{queue="jobs",reader="r"} 7.0' in text
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=TIMEOUT) == 0


def test_serve_http_on_an_address_in_use_is_one_line_and_exit_2_with_nothing_owned(tmp_path) -> None:
    path = str(tmp_path / "jobs")
    with JournaledQueue(path) as q:
        q.put(b"a")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = _serve("--http", f"127.0.0.1:{taken.getsockname()[1]}", path)
        out, err = server.communicate(timeout=TIMEOUT)
    assert server.returncode == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "cannot listen there" in err
    with JournaledQueue(path) as q:  # nothing held it
        assert q.is_owner
