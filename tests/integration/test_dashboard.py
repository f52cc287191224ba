"""The web dashboard in a real browser (headless Chromium through Selenium)
against a real pool over TLS: sign in with a password, see the nodes,
submit a job from the form and watch its log arrive, cancel it; a job name
refused with its reason and output that is HTML render as text; the session cookie is HttpOnly and Secure and
no page script can read it; a change without the session's CSRF token, or
from another origin, is refused; a member cannot open another member's job;
signing out ends the session's token.

With GPUPOOL_SCREENSHOT_DIR set, each page's screenshot is written there
(docs/img/ holds the ones the docs show)."""
import os
import shutil

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

from pool import wait_for

PASSWORD = "correct horse battery"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
XSS_NAME = "<img src=x onerror=alert(1)>"


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
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def add_user(pool, name):
    status, body = pool.api("POST", "/v1/users", {"name": name, "role": "member",
                                                  "password": PASSWORD})
    assert status == 201, body


def find(driver, css, timeout=30):
    return wait_for(lambda: (driver.find_elements(By.CSS_SELECTOR, css) or [None])[0],
                    timeout=timeout, what=css)


def text_of(driver, css):
    els = driver.find_elements(By.CSS_SELECTOR, css)
    return els[0].text if els else ""


def sign_in(driver, pool, user):
    driver.get(pool.url + "/ui")
    find(driver, "#signin #user").send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "#password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "#signin-submit").click()
    wait_for(lambda: user in text_of(driver, "#whoami"), what=f"{user} signed in")


def cookie_request(pool, method, path, secret, csrf=None, origin=None, body=None):
    """A request as the browser would make it: the session cookie, no token."""
    headers = {"Cookie": f"gpupool_dashboard={secret}"}
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
    screenshot(browser, "overview")

    # The session cookie: HttpOnly, Secure over TLS, invisible to scripts.
    cookie = next(c for c in browser.get_cookies() if c["name"] == "gpupool_dashboard")
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
