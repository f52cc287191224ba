"""The web dashboard in a real browser (headless Chromium through Selenium)
against a real pool over TLS: sign in with a password, see the nodes,
submit a job from the form and watch its log arrive, cancel it; a job name
refused with its reason and output that is HTML render as text; the session cookie is HttpOnly and Secure and
no page script can read it; a change without the session's CSRF token, or
from another origin, is refused; a member cannot open another member's job;
signing out ends the session's token; the Money page shows a lab's balance,
budget alert, spending over time and usage as the API reports them.

With GPUPOOL_SCREENSHOT_DIR set, each page's screenshot is written there
(docs/img/ holds the ones the docs show)."""
import calendar
import os
import shutil

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from pool import wait_for

PASSWORD = "correct horse battery"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
XSS_NAME = "<img src=x onerror=alert(1)>"

# The dashboard's cookie over TLS (server/browser_session.h): the __Host-
# prefix keeps a page of another port on the host from shadowing it.
COOKIE = "__Host-gpupool_dashboard"


def screenshot(driver, name):
    out = os.environ.get("GPUPOOL_SCREENSHOT_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        driver.save_screenshot(os.path.join(out, f"dashboard-{name}.png"))


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                # The pool's own CA signed the server's certificate.
                "--ignore-certificate-errors", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(arg)
    # The page's console, for page_state() when a wait fails.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.download_dir = tmp_path / "downloads"
    driver.download_dir.mkdir()
    driver.execute_cdp_cmd("Browser.setDownloadBehavior",
                           {"behavior": "allow", "downloadPath": str(driver.download_dir)})
    yield driver
    driver.quit()


def add_user(pool, name):
    status, body = pool.api("POST", "/v1/users", {"name": name, "role": "member",
                                                  "password": PASSWORD})
    assert status == 201, body


def page_state(driver):
    """What the browser shows and loaded, said when a wait for the page fails:
    a page that never ran its script differs from one that waits for the
    server or one that said why."""
    try:
        state = driver.execute_script(
            "return {ready: document.readyState, url: location.href,"
            " body: document.body ? document.body.innerText.slice(0, 400) : '',"
            " loaded: performance.getEntriesByType('resource').map(e =>"
            "   e.name.replace(location.origin, '') + ' ' + (e.responseStatus || 0) +"
            "   ' ' + Math.round(e.duration) + 'ms')}")
        console = [e.get("message", "") for e in driver.get_log("browser")]
    except Exception as e:  # the browser itself is stuck: say so
        return f"(the browser did not answer: {e})"
    return f"{state}; console: {console}"


def find(driver, css, timeout=30):
    return wait_for(lambda: (driver.find_elements(By.CSS_SELECTOR, css) or [None])[0],
                    timeout=timeout, what=lambda: f"{css}; the page: {page_state(driver)}")


def text_of(driver, css):
    """The element's text; "" when there is none, or when the page replaced
    it between finding and reading it (pages re-render their tables on each
    refresh; the caller's wait reads again)."""
    try:
        els = driver.find_elements(By.CSS_SELECTOR, css)
        return els[0].text if els else ""
    except StaleElementReferenceException:
        return ""


def click(driver, css, timeout=60):
    """Clicks the element, finding it again if the page re-rendered it."""
    def attempt():
        try:
            find(driver, css, timeout).click()
            return True
        except StaleElementReferenceException:
            return False
    wait_for(attempt, timeout=timeout, what=f"a click on {css}")


def sign_in(driver, pool, user):
    driver.get(pool.url + "/ui")
    # Longer than the page's own deadline for a request (web/api.js): a
    # check of the session that gets no answer still ends in the form.
    find(driver, "#signin #user", timeout=90).send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "#password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "#signin-submit").click()
    wait_for(lambda: user in text_of(driver, "#whoami"), what=f"{user} signed in")


def alice_signed_in(pool, browser):
    """A server with one agent of one GPU, and the member alice signed in."""
    pool.start_server()
    pool.start_agent("lab-a", gpus="1xA100:80GiB")
    pool.wait_nodes_ready(1)
    add_user(pool, "alice")
    sign_in(browser, pool, "alice")


def cookie_request(pool, method, path, secret, csrf=None, origin=None, body=None):
    """A request as the browser would make it: the session cookie, no token."""
    headers = {"Cookie": f"{COOKIE}={secret}"}
    if csrf:
        headers["X-CSRF-Token"] = csrf
    if origin:
        headers["Origin"] = origin
    return pool.api(method, path, body, token=None, headers=headers)


def test_the_dashboard_in_chromium(pool, browser):
    pool.start_server()
    pool.start_agent("lab-a", gpus="2xA100:80GiB")
    pool.wait_nodes_ready(1)
    add_user(pool, "alice")
    add_user(pool, "bob")
    status, body = pool.api("POST", "/v1/login", {"user": "bob", "password": PASSWORD})
    assert status == 200, body
    status, bobs = pool.api("POST", "/v1/jobs", {"name": "bobs-job", "run": "sleep 600",
                                                 "resources": {"gpus": 0}}, token=body["token"])
    assert status == 201, bobs

    # Signed in, the overview shows the node.
    sign_in(browser, pool, "alice")
    find(browser, '#nodes-table tr[data-node="lab-a"]')
    # The counts come from the server's summary, the machines a page at a time.
    wait_for(lambda: text_of(browser, "#nodes-range") == "machines 1–1 of 1", what="the machines' range")
    wait_for(lambda: text_of(browser, "#pool-stats").split() == ["1", "/", "1", "Machines", "online", "2",
                                                                "GPUs", "0", "In", "use", "2", "Free"],
             what=lambda: f"the pool's counts, not {text_of(browser, '#pool-stats')!r}")
    row = find(browser, "#gpu-summary-table tbody tr")
    cells = [c.text for c in row.find_elements(By.CSS_SELECTOR, "td")]
    assert "SIMULATED" in cells[0] and cells[1:] == ["2", "0", "2", "0"], cells
    screenshot(browser, "overview")

    # The session cookie: HttpOnly, Secure over TLS, invisible to scripts.
    cookie = next(c for c in browser.get_cookies() if c["name"] == COOKIE)
    assert cookie["httpOnly"] and cookie["secure"], cookie
    assert cookie.get("sameSite") == "Strict", cookie
    assert "gpupool_dashboard" not in browser.execute_script("return document.cookie")
    secret = cookie["value"]

    # Submit from the form. A name that is HTML is refused with the CLI's
    # message, shown as text; the job's own output that is HTML shows as text
    # too, in its log, which follows live on the job's page.
    browser.get(pool.url + "/ui#/jobs")
    find(browser, "#submit-form")
    name = browser.find_element(By.CSS_SELECTOR, "#submit-name")
    name.send_keys(XSS_NAME)
    browser.find_element(By.CSS_SELECTOR, "#submit-run").send_keys(
        f"echo hello-from-the-dashboard; echo '{XSS_NAME}'; sleep 2; echo second-line; sleep 600")
    gpus = browser.find_element(By.CSS_SELECTOR, "#submit-gpus")
    gpus.clear()
    gpus.send_keys("1")
    browser.find_element(By.CSS_SELECTOR, "#submit-button").click()
    wait_for(lambda: "name: must be" in text_of(browser, "#submit-error"),
             what="the refusal of the name")
    assert XSS_NAME in text_of(browser, "#submit-error")
    name.clear()
    name.send_keys("from-the-dashboard")
    browser.find_element(By.CSS_SELECTOR, "#submit-button").click()
    wait_for(lambda: "second-line" in text_of(browser, "#job-log"), timeout=60,
             what=lambda: "the job's log lines in the page, which shows: " +
             text_of(browser, "#main")[-2000:])
    assert XSS_NAME in text_of(browser, "#job-log")
    assert "from-the-dashboard" in text_of(browser, "#job-title")
    assert not browser.find_elements(By.CSS_SELECTOR, "#main img")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    job_id = int(browser.current_url.rsplit("/", 1)[1])
    status, job = pool.api("GET", f"/v1/jobs/{job_id}")
    assert job["owner"] == "alice" and job["name"] == "from-the-dashboard", job
    # Its attempts name their machine (the API says it; no node list needed).
    assert [a["node"] for a in job["attempt_list"]] == ["lab-a"], job["attempt_list"]
    wait_for(lambda: "lab-a" in text_of(browser, "#attempts"), what="the attempt's machine")
    # Its GPU use and checkpoints beside the log; the log downloads as a file.
    find(browser, "#job-gpu-chart")
    wait_for(lambda: "No checkpoints" in text_of(browser, "#job-checkpoints"), what="checkpoints")
    browser.find_element(By.CSS_SELECTOR, "#log-download").click()
    saved = browser.download_dir / f"job-{job_id}.log"
    wait_for(lambda: saved.exists() and "second-line" in saved.read_text(), what=str(saved))
    assert saved.read_text().startswith("hello-from-the-dashboard\n"), saved.read_text()
    browser.execute_script("window.scrollTo(0, 0)")
    screenshot(browser, "job")

    # A change without the CSRF token, or from another origin, is refused;
    # reading needs none.
    status, me = cookie_request(pool, "GET", "/v1/whoami", secret)
    assert status == 200 and me["subject"] == "alice" and me["csrf"], me
    status, body = cookie_request(pool, "POST", f"/v1/jobs/{job_id}/cancel", secret)
    assert status == 403 and "X-CSRF-Token" in body["error"]["message"], body
    status, body = cookie_request(pool, "POST", f"/v1/jobs/{job_id}/cancel", secret,
                                  csrf="0" * 64)
    assert status == 403, body
    status, body = cookie_request(pool, "GET", "/v1/jobs", secret,
                                  origin="https://evil.example")
    assert status == 403, body
    assert pool.job(job_id)["state"] in ("scheduled", "running")

    # Cancel from the page.
    find(browser, "#job-cancel").click()
    pool.wait_state(job_id, "cancelled")

    # The jobs list and the other pages.
    browser.get(pool.url + "/ui#/jobs")
    find(browser, f'#jobs-table tr[data-job="{job_id}"]')
    assert not browser.find_elements(By.CSS_SELECTOR, f'#jobs-table tr[data-job="{bobs["id"]}"]')
    screenshot(browser, "jobs")
    for page, shown in (("machines", '#machines [data-node="lab-a"]'),
                        ("queue", "#queue-table"),
                        ("groups", "#groups-table")):
        browser.get(pool.url + f"/ui#/{page}")
        find(browser, shown)
        if page == "machines":
            wait_for(lambda: text_of(browser, "#machines-page-range") == "machines 1–1 of 1",
                     what="the machines' range")
        screenshot(browser, page)

    # Bob's job: not for alice, in the page or through the API behind it.
    browser.get(pool.url + f"/ui#/jobs/{bobs['id']}")
    wait_for(lambda: text_of(browser, "#job-error"), what="the job page's refusal")
    assert "bobs-job" not in browser.page_source
    status, body = cookie_request(pool, "GET", f"/v1/jobs/{bobs['id']}", secret)
    assert status == 404, body

    # Signing out ends the token behind the cookie.
    find(browser, "#signout").click()
    find(browser, "#signin")
    status, body = cookie_request(pool, "GET", "/v1/whoami", secret)
    assert status == 401, body
    screenshot(browser, "signin")


def test_an_owner_takes_a_machine_back_from_the_browser(pool, browser):
    """My machines: a provider sees the machine she enrolled (not another
    provider's), pauses it and lends it again, and reclaims a GPU, from the
    buttons; the agent does it and its events show on the page."""
    pool.start_server()
    status, body = pool.api("POST", "/v1/users", {"name": "carol", "role": "provider",
                                                  "password": PASSWORD})
    assert status == 201, body
    status, token = pool.api("POST", "/v1/tokens", {"user": "carol", "name": "enroll"})
    assert status == 201, token
    pool.start_agent("carols", gpus="2xA100:80GiB", enroll_as=token["token"])
    pool.start_agent("others", gpus="1xA100:80GiB")  # enrolled with the pool's join token
    pool.wait_nodes_ready(2)

    sign_in(browser, pool, "carol")
    find(browser, "#nav-mine").click()
    card = '#my-machines article[data-node="carols"]'
    find(browser, card)
    assert not browser.find_elements(By.CSS_SELECTOR, '#my-machines article[data-node="others"]')

    def status_of(name):
        return next(n for n in pool.nodes() if n["name"] == name)["status"]

    browser.find_element(By.CSS_SELECTOR, card + " button.pause").click()
    wait_for(lambda: "Pause sent to carols" in text_of(browser, "#mine-said"), what="pause sent")
    wait_for(lambda: status_of("carols") == "paused", what="carols paused")
    wait_for(lambda: "paused by carol through the server" in text_of(browser, "#my-events-table"),
             what="the pause among the machine's events")
    wait_for(lambda: "paused" in text_of(browser, card + " .node-head"), what="the card paused")

    browser.find_element(By.CSS_SELECTOR, card + " button.resume").click()
    wait_for(lambda: status_of("carols") == "available", what="carols lending again")

    # Reclaim one GPU, confirmed in the browser's dialog.
    browser.find_element(By.CSS_SELECTOR, card + " select.reclaim-gpu option[value='1']").click()
    browser.find_element(By.CSS_SELECTOR, card + " button.reclaim").click()
    def confirmation():
        try:
            return browser.switch_to.alert
        except NoAlertPresentException:
            return None
    alert = wait_for(confirmation, what="the confirmation")
    assert "Take back GPU 1 of carols" in alert.text, alert.text
    alert.accept()
    lent = lambda: (next(n for n in pool.nodes() if n["name"] == "carols")["lending"] or {})["gpus"]
    wait_for(lambda: len(lent()) == 1, what="one GPU of carols lent")
    wait_for(lambda: "reclaim of 1 GPUs asked by carol" in text_of(browser, "#my-events-table"),
             what="the reclaim among the events")
    screenshot(browser, "my-machines")
    assert status_of("others") == "available"


def test_a_jupyter_session_from_the_browser(pool, browser):
    """Sessions: start Jupyter from the page, Open it in a new tab through
    the one-time link (the tab lands on the notebook server, through the
    proxy), and Stop it."""
    alice_signed_in(pool, browser)
    browser.get(pool.url + "/ui#/sessions")
    find(browser, "#session-form")
    browser.find_element(By.CSS_SELECTOR, "#session-start").click()
    said = wait_for(lambda: (lambda t: t if "submitted" in t else None)(
        text_of(browser, "#sessions-said")), what="the session submitted")
    job_id = int(said.split("Session ", 1)[1].split()[0])
    assert pool.job(job_id)["spec"]["session"]["kind"] == "jupyter"
    pool.wait_state(job_id, "running", timeout=120)
    # The page makes the sign-in link with its cookie and CSRF token; the
    # cookie alone, or from another site, makes none, and the dashboard never
    # gets the notebook server's own token.
    cookie = next(c for c in browser.get_cookies() if c["name"] == COOKIE)["value"]
    csrf = cookie_request(pool, "GET", "/v1/whoami", cookie)[1]["csrf"]
    link = f"/v1/sessions/{job_id}/link"
    assert cookie_request(pool, "POST", link, cookie, body={})[0] == 403
    assert cookie_request(pool, "POST", link, cookie, csrf, "https://evil.example", {})[0] == 403
    status, made = cookie_request(pool, "POST", link, cookie, csrf, body={})
    # The link is on the sessions' own origin (another port of the host).
    assert status == 200 and made["url"].startswith(
        pool.sessions_url + link.replace("link", "login?code=")), made
    assert "jupyter_token" not in made, made
    find(browser, f'#sessions-table button.open-session[data-job="{job_id}"]', timeout=60)
    screenshot(browser, "sessions")
    page = browser.current_window_handle
    click(browser, f'#sessions-table button.open-session[data-job="{job_id}"]')
    wait_for(lambda: len(browser.window_handles) == 2,
             what=lambda: f"a new tab (the page says {text_of(browser, '#sessions-said')!r}, "
                          f"{browser.get_log('browser')})")
    browser.switch_to.window(next(w for w in browser.window_handles if w != page))
    # The link signs this browser in to the session and lands on Jupyter.
    wait_for(lambda: f"/v1/sessions/{job_id}/proxy/" in browser.current_url
             and "Jupyter" in browser.page_source, timeout=120,
             what="Jupyter in the new tab")
    assert "/login?code=" not in browser.current_url
    assert browser.current_url.startswith(pool.sessions_url), browser.current_url
    # A notebook page cannot act as the dashboard: the request a hostile one
    # would start with (the CSRF token from /v1/whoami) is refused from its
    # origin, though the browser holds the dashboard's cookie.
    got = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch(arguments[0] + "/v1/whoami", {credentials: "include"})
          .then((r) => r.text().then((t) => done("read " + r.status + " " + t)))
          .catch((e) => done("refused: " + e));""", pool.url)
    assert got.startswith("refused"), got
    browser.close()
    browser.switch_to.window(page)

    click(browser, f'#sessions-table button.stop-session[data-job="{job_id}"]')
    assert pool.wait_finished(job_id, timeout=60)["state"] == "cancelled"
    # Read in one script: the page re-renders the table on each refresh, so
    # an element found first may be gone by the time it is read.
    wait_for(lambda: f'data-job="{job_id}"' not in browser.execute_script(
        "const t = document.querySelector('#sessions-table'); return t ? t.outerHTML : '';"),
        what="the session gone")


def test_the_admin_page(pool, browser):
    """Admin: users, tokens (never their secrets), enrolled nodes and the
    audit log newest first; a member neither sees the link nor the data."""
    pool.start_server()
    pool.start_agent("lab-a", gpus="1xA100:80GiB")
    pool.wait_nodes_ready(1)
    status, body = pool.api("POST", "/v1/users", {"name": "root2", "role": "admin",
                                                  "password": PASSWORD})
    assert status == 201, body
    add_user(pool, "alice")
    status, made = pool.api("POST", "/v1/tokens", {"user": "alice", "name": "laptop"})
    assert status == 201, made

    sign_in(browser, pool, "alice")
    assert not find(browser, "#nav-admin").is_displayed()
    browser.get(pool.url + "/ui#/admin")
    wait_for(lambda: "Only the pool's admins" in text_of(browser, "#page-error"),
             what="the member turned away")
    assert not browser.find_elements(By.CSS_SELECTOR, "#users-table")
    browser.find_element(By.CSS_SELECTOR, "#signout").click()
    find(browser, "#signin")

    sign_in(browser, pool, "root2")
    find(browser, "#nav-admin").click()
    find(browser, '#users-table')
    wait_for(lambda: "alice" in text_of(browser, "#users-table"), what="alice among the users")
    wait_for(lambda: made["id"] in text_of(browser, "#tokens-table"), what="alice's token")
    assert made["token"] not in browser.page_source  # secrets are never listed
    wait_for(lambda: "lab-a" in text_of(browser, "#agents-table"), what="lab-a enrolled")
    # Each list is a page the server cut, with how many there are.
    users = pool.api("GET", "/v1/users")[1]["users"]
    assert text_of(browser, "#users-table-range") == f"users 1–{len(users)} of {len(users)}"
    # The newest audit entry first: root2's own sign-in.
    first = find(browser, "#audit-table tbody tr")
    assert "root2" in first.text and "login" in first.text, first.text

    # Group members, edited from the page as `gpupool admin group add` does.
    status, body = pool.api("POST", "/v1/groups", {"name": "vision"})
    assert status == 201, body
    find(browser, "#members-group").send_keys("vision")
    find(browser, "#members-user").send_keys("alice")
    click(browser, "#members-add")
    wait_for(lambda: text_of(browser, "#members-list") == "vision: alice", what="alice in vision")
    status, group = pool.api("GET", "/v1/groups/vision/members")
    assert status == 200 and group["members"] == ["alice"], group
    find(browser, "#members-user").clear()
    find(browser, "#members-user").send_keys("nobody")
    click(browser, "#members-add")
    wait_for(lambda: "nobody" in text_of(browser, "#members-said"), what="the refusal")
    assert "error" in find(browser, "#members-said").get_attribute("class")
    assert pool.api("GET", "/v1/groups/vision/members")[1]["members"] == ["alice"]
    find(browser, "#members-user").clear()
    find(browser, "#members-user").send_keys("alice")
    click(browser, "#members-remove")
    wait_for(lambda: text_of(browser, "#members-list") == "vision: no members", what="alice removed")
    assert pool.api("GET", "/v1/groups/vision/members")[1]["members"] == []
    screenshot(browser, "admin")


def test_a_pasted_yaml_spec(pool, browser):
    """A spec pasted into the form is read as the CLI reads job.yaml: a bad
    one is refused naming the field and its line, a good one runs."""
    alice_signed_in(pool, browser)
    browser.get(pool.url + "/ui#/jobs")
    spec = find(browser, "#submit-spec")
    spec.send_keys("name: pasted\nrun: echo from-yaml\nresources:\n  gpus: many\n")
    browser.find_element(By.CSS_SELECTOR, "#submit-button").click()
    wait_for(lambda: "resources.gpus (line 4)" in text_of(browser, "#submit-error"),
             what=lambda: "the refusal with its line, not " + repr(text_of(browser, "#submit-error")))
    # The CLI says the same of the same file.
    path = pool.dir / "bad.yaml"
    path.write_text("name: pasted\nrun: echo from-yaml\nresources:\n  gpus: many\n")
    cli = pool.cli("submit", str(path))
    assert cli.returncode != 0 and "resources.gpus (line 4)" in cli.stderr, cli.stderr
    spec.clear()
    spec.send_keys("name: pasted\nrun: echo from-yaml\nenv:\n  LEVEL: 007\nresources:\n  gpus: 1\n")
    browser.find_element(By.CSS_SELECTOR, "#submit-button").click()
    wait_for(lambda: "from-yaml" in text_of(browser, "#job-log"), timeout=60, what="its output")
    job_id = int(browser.current_url.rsplit("/", 1)[1])
    job = pool.job(job_id)
    assert job["name"] == "pasted" and job["owner"] == "alice", job
    assert job["spec"]["env"] == {"LEVEL": "007"}, job  # YAML's text, as the CLI keeps it


def test_the_queue_pages_on_the_server(pool, browser):
    pool.start_server()  # no agents: every job waits
    add_user(pool, "alice")
    ids = [pool.submit({"name": f"q{i}", "run": "true", "resources": {"gpus": 1}})
           for i in range(105)]
    status, page = pool.api("GET", "/v1/queue?limit=10&offset=100")
    assert status == 200 and page["total"] == 105 and page["offset"] == 100, page
    assert [j["id"] for j in page["jobs"]] == ids[100:], page
    status, whole = pool.api("GET", "/v1/queue")
    assert [j["id"] for j in whole["jobs"]] == ids and whole["total"] == 105
    assert pool.api("GET", "/v1/queue?limit=0")[0] == 400
    # A member sees her own jobs only, and the total of those.
    status, made = pool.api("POST", "/v1/login", {"user": "alice", "password": PASSWORD})
    status, mine = pool.api("GET", "/v1/queue?limit=5", token=made["token"])
    assert status == 200 and mine["total"] == 0 and mine["jobs"] == [], mine

    status, body = pool.api("POST", "/v1/users", {"name": "root2", "role": "admin",
                                                  "password": PASSWORD})
    assert status == 201, body
    sign_in(browser, pool, "root2")
    browser.get(pool.url + "/ui#/queue")
    wait_for(lambda: text_of(browser, "#queue-range") == "jobs 1–100 of 105", what="the first page")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queue-table tbody tr")) == 100
    click(browser, "#queue-next")
    wait_for(lambda: text_of(browser, "#queue-range") == "jobs 101–105 of 105", what="the last page")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queue-table tbody tr")) == 5
    assert not find(browser, "#queue-next").is_enabled()


def credits(micros):
    """An amount as the dashboard (and the CLI) prints it: at least two
    decimals, more when they are not zero."""
    whole, frac = divmod(abs(micros), 1_000_000)
    return ("-" if micros < 0 else "") + f"{whole}." + f"{frac:06d}".rstrip("0").ljust(2, "0")


def test_the_money_page(pool, browser):
    """Money: a member of a lab that paid for a job sees the lab's balance
    and her own as the API reports them, the lab's budget alert (also as a
    banner on the overview), a chart of what moved the balance each day with
    the window's totals, the lab's usage this month and the prices; then the
    warning, with the reason, once the lab is at its limit."""
    pool.start_server()
    pool.start_agent("lab-a", gpus="1xA100:80GiB")
    pool.wait_nodes_ready(1)
    status, body = pool.api("POST", "/v1/groups", {"name": "vision"})
    assert status == 201, body
    add_user(pool, "alice")
    status, body = pool.api("POST", "/v1/groups/vision/members", {"add": ["alice"]})
    assert status == 200, body
    pool.cli("admin", "price", "set", "default", "36", check=True)  # no A100 price: the default
    pool.cli("admin", "credit", "add", "vision", "100", "--note", "fall allocation", check=True)

    # Alice's short job for vision: its charges are posted when it ends.
    status, made = pool.api("POST", "/v1/login", {"user": "alice", "password": PASSWORD})
    assert status == 200, made
    status, job = pool.api("POST", "/v1/jobs", {"name": "paid", "run": "sleep 2", "group": "vision",
                                                "resources": {"gpus": 1}}, token=made["token"])
    assert status == 201, job
    pool.wait_state(job["id"], "succeeded", timeout=120)

    def vision():
        status, body = pool.api("GET", "/v1/accounts/group:vision")
        assert status == 200, body
        return body
    wait_for(lambda: vision()["accruing_micros"] == 0, what="vision's charges posted")
    status, ledger = pool.api("GET", "/v1/ledger?account=group:vision&kind=charge")
    assert status == 200, ledger
    spent = sum(e["amount_micros"] for e in ledger["entries"] if e["debit"] == "group:vision")
    assert spent > 0 and vision()["balance_micros"] == 100_000_000 - spent, (spent, vision())

    # A monthly budget the job spent about 80% of: the 75% alert.
    whole, frac = divmod(spent * 5 // 4, 1_000_000)
    pool.cli("admin", "budget", "set", "vision", f"{whole}.{frac:06d}", "--action", "hold",
             check=True)
    account = vision()
    budget = account["budget"]
    assert budget["alert"] == 75 and not budget["at_limit"], budget
    month = calendar.month_name[int(budget["month"][5:])]
    alert = f"vision has spent {budget['percent']}% of its {month} budget"

    # The overview says so in one line that leads to the Money page.
    sign_in(browser, pool, "alice")
    wait_for(lambda: alert in text_of(browser, "#money-banner"),
             what=lambda: f"the banner, not {text_of(browser, '#money-banner')!r}")
    click(browser, "#money-banner a")
    vision_card = '#money-accounts article[data-account="group:vision"]'
    alice_card = '#money-accounts article[data-account="user:alice"]'
    find(browser, vision_card)
    # The balances, as /v1/accounts reports them, and only her accounts.
    status, listed = pool.api("GET", "/v1/accounts", token=made["token"])
    assert status == 200, listed
    balances = {a["account"]: a["balance_micros"] for a in listed["accounts"]}
    assert set(balances) == {"group:vision", "user:alice"}, balances
    for css, name in ((vision_card, "group:vision"), (alice_card, "user:alice")):
        wait_for(lambda: text_of(browser, css + " .account-balance") == credits(balances[name]),
                 what=lambda: f"{name}'s balance {credits(balances[name])}, not "
                              f"{text_of(browser, css + ' .account-balance')!r}")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#money-accounts article")) == 2
    assert text_of(browser, vision_card + " .money-alert") == alert + "."
    assert not browser.find_elements(By.CSS_SELECTOR, alice_card + " .money-alert")
    assert f"of {credits(budget['monthly_micros'])} in {budget['month']}" in text_of(
        browser, vision_card + " .budget-line")

    # The lab's days: a chart, and the window's totals as the ledger has them.
    assert find(browser, "#money-account").get_attribute("value") == "group:vision"
    find(browser, "#money-chart canvas")
    wait_for(lambda: text_of(browser, "#money-totals td.spent") == credits(spent),
             what=lambda: f"spent {credits(spent)}, not {text_of(browser, '#money-totals td.spent')!r}")
    assert text_of(browser, "#money-totals td.granted") == "100.00"
    assert text_of(browser, "#money-totals td.net") == credits(100_000_000 - spent)
    # Her usage this month, and the price in force.
    def usage_row():
        cells = text_of(browser, "#money-usage tbody tr").split()
        return cells if cells[:1] == ["alice"] else None
    cells = wait_for(usage_row, what=lambda: f"alice's usage: {text_of(browser, '#money-usage')!r}")
    assert cells[2] == credits(spent), cells
    wait_for(lambda: "GPU default" in text_of(browser, "#money-prices")
             and "36.00" in text_of(browser, "#money-prices"), what="the price in force")
    screenshot(browser, "money")

    # Her own account over a longer window: nothing moved it, and it paid
    # for nothing (her lab paid for the job she ran for it).
    Select(find(browser, "#money-account")).select_by_value("user:alice")
    Select(find(browser, "#money-window")).select_by_value("90")
    wait_for(lambda: text_of(browser, "#money-totals td.spent") == "0.00",
             what=lambda: f"alice's own totals: {text_of(browser, '#money-totals')!r}")
    assert text_of(browser, "#money-totals td.granted") == "0.00"
    wait_for(lambda: text_of(browser, "#money-usage-title") == "Usage this month: user:alice",
             what="alice's own usage")
    wait_for(lambda: "No charges this month." in text_of(browser, "#money-usage-box"),
             what=lambda: f"alice's own usage: {text_of(browser, '#money-usage-box')!r}")

    # At its limit: the warning, with the server's reason.
    pool.cli("admin", "budget", "set", "vision", credits(spent // 2), check=True)
    reason = vision()["budget"]["reason"]
    assert vision()["budget"]["at_limit"] and "reached its budget" in reason, vision()
    browser.refresh()
    wait_for(lambda: reason in text_of(browser, vision_card + " .money-limit"),
             what=lambda: f"the limit's reason, not {text_of(browser, vision_card)!r}")
    assert "vision is at its budget limit" in text_of(browser, vision_card + " .money-limit")
