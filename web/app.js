// The gpupool dashboard: sign-in, the top bar and hash routing.
//
//   #/            overview          #/jobs/<id>  one job and its live log
//   #/machines    nodes and GPUs    #/queue      pending jobs in order
//   #/jobs        jobs, submit      #/groups     fair share per group
//   #/sessions    start, open, stop  #/mine       my machines (providers, admins)
//   #/money       balances, budgets, spending over time, prices
//   #/admin       users, tokens, enrolled nodes, the audit log (admins)
//
// Each page renders into #main with a PageContext: its timers, its
// in-flight requests (an AbortSignal) and its charts all end when the
// page is left.

import * as api from "./api.js";
import { h, fill, errorLine, errorText } from "./dom.js";
import { renderOverview, renderMachines, renderQueue, renderGroups } from "./pages.js";
import { renderJobs, renderJob } from "./jobs.js";
import { renderMine } from "./mine.js";
import { renderSessions } from "./sessions.js";
import { renderMoney } from "./money.js";
import { renderAdmin } from "./admin.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const sessionBox = document.getElementById("session");
const whoamiEl = document.getElementById("whoami");
const signoutBtn = document.getElementById("signout");
const appError = document.getElementById("app-error");

// The signed-in user: {user, role} or null.
let session = null;
let page = null;

export class PageContext {
  constructor(session) {
    this.session = session;
    this.controller = new AbortController();
    this.timers = new Set();
    this.ticks = [];
    this.cleanups = [];
  }

  get signal() {
    return this.controller.signal;
  }

  get alive() {
    return !this.controller.signal.aborted;
  }

  // Calls fn now (unless now is false) and every `ms` while the page is
  // shown and the tab visible; a call still running is not overlapped.
  every(ms, fn, now = true) {
    let running = false;
    const tick = async () => {
      if (!this.alive || running || document.hidden) return;
      running = true;
      try {
        await fn();
      } catch (e) {
        if (!api.isAbort(e)) console.error(e);
      } finally {
        running = false;
      }
    };
    const id = setInterval(tick, ms);
    this.timers.add({ id, kind: "interval" });
    this.ticks.push(tick);
    if (now) tick();
    return tick;
  }

  // A promise that resolves after ms, or rejects with AbortError when the page goes away.
  sleep(ms) {
    return new Promise((resolve, reject) => {
      if (!this.alive) {
        reject(new DOMException("page left", "AbortError"));
        return;
      }
      const t = { kind: "timeout" };
      t.id = setTimeout(() => {
        this.timers.delete(t);
        resolve();
      }, ms);
      this.timers.add(t);
      this.signal.addEventListener("abort", () => reject(new DOMException("page left", "AbortError")), { once: true });
    });
  }

  // Runs every periodic refresh now (when the tab becomes visible again).
  refreshNow() {
    for (const tick of this.ticks) tick();
  }

  onDispose(fn) {
    this.cleanups.push(fn);
  }

  dispose() {
    this.controller.abort();
    for (const t of this.timers) {
      if (t.kind === "interval") clearInterval(t.id);
      else clearTimeout(t.id);
    }
    this.timers.clear();
    this.ticks = [];
    for (const fn of this.cleanups.splice(0)) {
      try {
        fn();
      } catch (e) {
        console.error(e);
      }
    }
  }
}

// --- Routing -------------------------------------------------------------

const ROUTES = [
  { re: /^\/?$/, page: "overview", title: "Overview", render: renderOverview },
  { re: /^\/machines\/?$/, page: "machines", title: "Machines", render: renderMachines },
  { re: /^\/jobs\/?$/, page: "jobs", title: "Jobs", render: renderJobs },
  { re: /^\/jobs\/([^/]+)\/?$/, page: "jobs", title: "Job", render: renderJob },
  { re: /^\/queue\/?$/, page: "queue", title: "Queue", render: renderQueue },
  { re: /^\/groups\/?$/, page: "groups", title: "Groups", render: renderGroups },
  { re: /^\/sessions\/?$/, page: "sessions", title: "Sessions", render: renderSessions },
  { re: /^\/money\/?$/, page: "money", title: "Money", render: renderMoney },
  { re: /^\/mine\/?$/, page: "mine", title: "My machines", render: renderMine },
  { re: /^\/admin\/?$/, page: "admin", title: "Admin", render: renderAdmin },
];

function currentPath() {
  const hash = location.hash || "";
  let path = hash.startsWith("#") ? hash.slice(1) : hash;
  const q = path.indexOf("?");
  if (q >= 0) path = path.slice(0, q);
  return path || "/";
}

function leavePage() {
  if (page) page.dispose();
  page = null;
}

function route() {
  if (!session) return;
  leavePage();
  showAppError("");
  const path = currentPath();
  let match = null;
  let params = [];
  for (const r of ROUTES) {
    const m = r.re.exec(path);
    if (m) {
      match = r;
      params = m.slice(1).map((p) => {
        try {
          return decodeURIComponent(p);
        } catch (_) {
          return p;
        }
      });
      break;
    }
  }
  for (const a of nav.querySelectorAll("a[data-page]")) {
    const active = match && a.dataset.page === match.page;
    a.classList.toggle("active", Boolean(active));
    if (active) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  page = new PageContext(session);
  clearMain();
  if (!match) {
    document.title = "Not found · gpupool";
    main.appendChild(h("section", { class: "page" },
      h("h1", null, "Page not found"),
      h("p", null, "There is no page at ", h("code", null, "#" + path), ". ", h("a", { href: "#/" }, "Go to the overview"), ".")));
    return;
  }
  document.title = match.title + " · gpupool";
  try {
    const r = match.render(main, page, ...params);
    if (r && typeof r.catch === "function") {
      r.catch((e) => {
        if (!api.isAbort(e)) showAppError(errorText(e));
      });
    }
  } catch (e) {
    showAppError(errorText(e));
  }
}

function clearMain() {
  fill(main);
  window.scrollTo(0, 0);
}

function showAppError(text) {
  appError.textContent = text || "";
  appError.hidden = !text;
}

// --- Session -------------------------------------------------------------

function showSignedIn(s) {
  session = s;
  fill(whoamiEl, h("span", { class: "who-name" }, s.user), " ", h("span", { class: "who-role" }, s.role));
  whoamiEl.title = s.user + " (" + s.role + ")";
  nav.hidden = false;
  // Members lend no machines; the page would only say so.
  document.getElementById("nav-mine").hidden = s.role !== "provider" && s.role !== "admin";
  document.getElementById("nav-admin").hidden = s.role !== "admin";
  sessionBox.hidden = false;
  document.body.classList.add("signed-in");
  route();
}

function showSignIn(message) {
  leavePage();
  session = null;
  api.setCsrf("");
  nav.hidden = true;
  sessionBox.hidden = true;
  fill(whoamiEl);
  document.body.classList.remove("signed-in");
  showAppError("");
  document.title = "Sign in · gpupool";
  clearMain();

  const user = h("input", { id: "user", name: "user", type: "text", autocomplete: "username", required: true, autocapitalize: "none", spellcheck: "false" });
  const password = h("input", { id: "password", name: "password", type: "password", autocomplete: "current-password", required: true });
  const submit = h("button", { id: "signin-submit", type: "submit", class: "primary" }, "Sign in");
  const error = errorLine("signin-error");
  const form = h("form", { id: "signin", class: "card signin", novalidate: true },
    h("h1", null, "Sign in to gpupool"),
    h("label", { for: "user" }, "User"), user,
    h("label", { for: "password" }, "Password"), password,
    submit, error);
  error.set(message || "");

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const u = user.value.trim();
    if (!u || !password.value) {
      error.set("Enter your user name and password.");
      (u ? password : user).focus();
      return;
    }
    submit.disabled = true;
    error.set("");
    try {
      const s = await api.login(u, password.value);
      password.value = "";
      showSignedIn({ user: s.user, role: s.role });
    } catch (e) {
      error.set(errorText(e));
      password.select();
    } finally {
      submit.disabled = false;
    }
  });

  main.appendChild(h("section", { class: "page page-signin" }, form));
  user.focus();
}

signoutBtn.addEventListener("click", async () => {
  signoutBtn.disabled = true;
  try {
    await api.logout();
    showSignIn("");
  } catch (e) {
    showAppError("Could not sign out: " + errorText(e));
  } finally {
    signoutBtn.disabled = false;
  }
});

api.setUnauthorizedHandler(() => {
  if (session) showSignIn("Your session has ended. Sign in again.");
});

window.addEventListener("hashchange", route);

// Refresh at once when the tab comes back (timers skip hidden tabs).
document.addEventListener("visibilitychange", () => {
  if (!document.hidden && page) page.refreshNow();
});

async function start() {
  try {
    const s = await api.whoami();
    if (s) showSignedIn(s);
    else showSignIn("");
  } catch (e) {
    showSignIn("Cannot check the session: " + errorText(e));
  }
}

start();
