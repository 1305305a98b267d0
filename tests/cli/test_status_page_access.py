"""Who may read the status page (issue 35, points 3 and 4): the cookie holds a random session,
never the token, under a name that carries the port (``HttpOnly``, ``SameSite=Strict``), and no
cookie of any other value lets a request in; a request whose ``Host`` is not the page's address
or a loopback name is refused, with or without a token (DNS rebinding), unless named."""

from __future__ import annotations

import http.cookiejar
import time
import urllib.error
import urllib.request
from http import cookies

import pytest

from journaled import JournaledQueue
from journaled.cli.statuspage import StatusServer

TOKEN = "s3cret-token"


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=30) as r:
            r.read()
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


@pytest.fixture
def pages(tmp_path):
    q = JournaledQueue(str(tmp_path / "jobs"))
    one, two = StatusServer([q], token=TOKEN), StatusServer([q], token=TOKEN)
    yield one, two
    one.close()
    two.close()
    q.close()


def _login(server: StatusServer) -> cookies.Morsel[str]:
    code, headers = _get(f"http://127.0.0.1:{server.port}/api/status?token={TOKEN}")
    assert code == 200
    jar: cookies.SimpleCookie = cookies.SimpleCookie()
    jar.load(headers["Set-Cookie"])
    (morsel,) = jar.values()
    return morsel


def test_the_cookie_holds_a_session_not_the_token_under_a_name_with_the_port(pages) -> None:
    one, _two = pages
    morsel = _login(one)
    assert str(one.port) in morsel.key
    assert TOKEN not in morsel.value and len(morsel.value) >= 32
    assert morsel["httponly"] is True and morsel["samesite"] == "Strict"
    code, _ = _get(f"http://127.0.0.1:{one.port}/api/status", {"Cookie": f"{morsel.key}={morsel.value}"})
    assert code == 200


def test_no_cookie_of_any_other_value_gets_in(pages) -> None:
    one, two = pages
    mine, theirs = _login(one), _login(two)
    others = [
        f"{mine.key}={TOKEN}",  # the token is not a session
        f"{mine.key}=",
        f"{mine.key}={mine.value[:-1]}",
        f"{mine.key}={mine.value}x",
        f"{mine.key}={theirs.value}",  # another page's session
        f"{theirs.key}={theirs.value}",  # another page's cookie
        f"journaled_token={TOKEN}",  # the name main used, with the token
        f"{mine.key}={mine.value.upper() if mine.value.upper() != mine.value else mine.value.lower()}",
    ]
    let_in = []
    for cookie in others:
        code, _ = _get(f"http://127.0.0.1:{one.port}/api/status", {"Cookie": cookie})
        if code == 200:
            let_in.append(cookie)
    assert not let_in, f"let in with: {let_in}"


def test_two_pages_on_one_host_keep_their_own_sessions(tmp_path) -> None:
    # a browser keeps cookies per host, not per port: http.cookiejar does the same
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        one, two = StatusServer([q], token="token-one"), StatusServer([q], token="token-two")
        try:
            browser.open(f"http://127.0.0.1:{one.port}/?token=token-one", timeout=30).read()
            browser.open(f"http://127.0.0.1:{two.port}/?token=token-two", timeout=30).read()
            got = []
            for page in (one, two):
                try:
                    got.append(browser.open(f"http://127.0.0.1:{page.port}/api/status", timeout=30).status)
                except urllib.error.HTTPError as exc:
                    got.append(exc.code)
        finally:
            one.close()
            two.close()
    assert got == [200, 200], f"the pages answered {got} (cookies: {[c.name for c in jar]})"


@pytest.mark.parametrize("token", [TOKEN, None], ids=["token", "no-token"])
def test_a_request_naming_another_host_is_refused(tmp_path, token) -> None:
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        page = StatusServer([q], token=token)
        try:
            url = f"http://127.0.0.1:{page.port}/api/status" + (f"?token={token}" if token else "")
            got = {
                host: _get(url, {"Host": host})[0]
                for host in (
                    f"attacker.example:{page.port}",
                    "attacker.example",
                    f"localhost.attacker.example:{page.port}",
                    f"127.0.0.1:{page.port}",
                    f"localhost:{page.port}",
                    "localhost",
                )
            }
        finally:
            page.close()
    assert got == {
        f"attacker.example:{page.port}": 403,
        "attacker.example": 403,
        f"localhost.attacker.example:{page.port}": 403,
        f"127.0.0.1:{page.port}": 200,
        f"localhost:{page.port}": 200,
        "localhost": 200,
    }


def test_allowed_hosts_names_more_hosts(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "jobs")) as q:
        page = StatusServer([q], token=None, allowed_hosts=["Status.Example"])
        try:
            url = f"http://127.0.0.1:{page.port}/api/status"
            assert _get(url, {"Host": f"status.example:{page.port}"})[0] == 200
            assert _get(url, {"Host": f"other.example:{page.port}"})[0] == 403
        finally:
            page.close()


def test_a_client_gone_mid_answer_prints_no_traceback(tmpfs_qdir, capfd) -> None:
    import socket

    # On tmpfs: the 2,000 readers are only there to make a long answer, and making each one writes
    # and syncs its files (on ext4 about 50 s of a disk shared with other work, 3 s on tmpfs).
    with JournaledQueue(tmpfs_qdir) as q:
        for i in range(2000):  # an answer of about a megabyte: it is still being sent
            q.reader(f"reader{i}")
        page = StatusServer([q], token=None)
        try:
            for _ in range(3):
                s = socket.create_connection(("127.0.0.1", page.port), timeout=30)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.sendall(b"GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                s.recv(10)
                s.close()  # linger 0: a reset mid-answer
            time.sleep(1.0)
            assert _get(f"http://127.0.0.1:{page.port}/api/status")[0] == 200  # and it goes on
        finally:
            page.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err, err[-3000:]
