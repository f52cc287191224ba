// Money: the accounts the signed-in user sees (her own, her labs'; an
// admin: every one) with their balances and budgets, what moved one
// account's balance each day (spent, earned by lending, granted), what it
// spent this month and the prices in force. Amounts are shown exactly, from
// the answers' _micros fields, as the CLI prints them.

import * as api from "./api.js";
import {
  h, fill, dataTable, firstArray, timeEl, errorLine, changed, fmtCredits, accountName, budgetAlertText,
} from "./dom.js";
import { pageSection, card, guarded } from "./pages.js";
import { valueChart, seriesColor } from "./charts.js";

const micros = (v) => (typeof v === "number" && Number.isFinite(v) ? v : 0);

function accountKind(account, me) {
  if (account === "pool") return "the pool's own account";
  if (account.startsWith("group:")) return "lab account";
  return account === "user:" + me ? "your account" : "user account";
}

// --- An account's card ---------------------------------------------------

const ACTION_TEXT = {
  hold: "then hold: its pending jobs wait",
  stop: "then stop: its running jobs are stopped and wait",
};

// This month's spending against the monthly amount, as a bar coloured by
// the alert reached (the same colours as the pills).
function budgetBar(b) {
  const spent = h("div", { class: "budget-fill" });
  // A width in percent through the CSSOM: the page's CSP forbids style attributes.
  spent.style.width = Math.min(100, Math.max(0, micros(b.percent))) + "%";
  return h("div", {
    class: ["budget-bar", "budget-" + (b.at_limit ? 100 : micros(b.alert))],
    role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(micros(b.percent)),
  }, spent);
}

function budgetPart(a) {
  const b = a.budget;
  if (a.account === "pool") return h("p", { class: "meta" }, "Receives every charge, pays every grant and lending credit.");
  if (!b) return h("p", { class: "meta" }, "No budget: its jobs run whatever its balance.");
  const action = ACTION_TEXT[b.action] || "then " + b.action;
  const out = [];
  if (micros(b.monthly_micros) > 0) {
    out.push(h("p", { class: "meta budget-line" },
      "Spent ", h("strong", null, fmtCredits(b.spent_micros)), " of ", fmtCredits(b.monthly_micros),
      " in " + b.month + " (" + micros(b.percent) + "%), " + action + "."));
    out.push(budgetBar(b));
  } else {
    out.push(h("p", { class: "meta budget-line" }, "Budget: up to its balance, " + action + "."));
  }
  const alert = budgetAlertText(a);
  if (b.at_limit || b.alert >= 100) {
    out.push(h("div", { class: "money-limit", role: "alert" },
      h("strong", null, alert + "."), b.reason ? h("div", { class: "small" }, b.reason) : null));
  } else if (alert) {
    out.push(h("p", { class: ["money-alert", "money-alert-" + b.alert] }, alert + "."));
  }
  return out;
}

function accountCard(a, me) {
  const balance = micros(a.balance_micros);
  return h("article", { class: "card account-card", "data-account": a.account },
    h("div", { class: "node-head" },
      h("h2", null, accountName(a.account)), h("span", { class: "muted small" }, accountKind(a.account, me))),
    h("div", null,
      // The pool's balance is always negative: all balances sum to zero.
      h("span", { class: ["account-balance", balance < 0 && a.account !== "pool" ? "negative" : ""] }, fmtCredits(balance)),
      h("span", { class: "muted" }, " credits")),
    h("p", { class: "meta" },
      "posted " + fmtCredits(a.posted_micros) + " · accruing now " + fmtCredits(a.accruing_micros)),
    budgetPart(a));
}

// --- One account over time -----------------------------------------------

const WINDOWS = [30, 90, 365];
const dayOf = (u, v) => (v == null ? "—" : new Date(v * 1000).toISOString().slice(0, 10));
// An axis' tick without floating-point noise (0.30000000000000004).
const tick = (v) => String(+v.toPrecision(6));

// The window's totals, exact: what the account spent (its charges, as a
// positive amount), earned by lending, was granted, and the net of them.
function windowTotals(days) {
  const sum = (k) => days.reduce((t, d) => t + micros(d[k + "_micros"]), 0);
  const charges = sum("charges");
  const lending = sum("lending");
  const grants = sum("grants");
  return { spent: -charges, earned: lending, granted: grants, net: charges + lending + grants };
}

const TOTAL_COLUMNS = ["spent", "earned", "granted", "net"].map((k) => ({
  label: k[0].toUpperCase() + k.slice(1), class: "num " + k, cell: (t) => fmtCredits(t[k]),
}));

// The chart, remade when its series change (grants appear or go).
function historyChart(box, ctx) {
  let chart = null;
  let key = "";
  return (days) => {
    const series = [
      { label: "Spent", color: seriesColor(4), ys: days.map((d) => -micros(d.charges_micros) / 1e6) },
      { label: "Earned", color: seriesColor(1), ys: days.map((d) => micros(d.lending_micros) / 1e6) },
      { label: "Granted", color: seriesColor(0), ys: days.map((d) => micros(d.grants_micros) / 1e6) },
    ].filter((s) => s.label !== "Granted" || s.ys.some((v) => v !== 0));
    const k = series.map((s) => s.label).join("|") + "/" + (days.length <= 90);
    if (!chart || k !== key) {
      if (chart) chart.destroy();
      key = k;
      chart = valueChart(box, ctx, {
        title: "Credits per day (UTC)", series, height: 220, utc: true, points: days.length <= 90,
        x: { label: "Day", value: dayOf }, format: (v) => fmtCredits(Math.round(v * 1e6)), tick,
      });
    }
    chart.setData(days.map((d) => d.from_ms / 1000), series.map((s) => s.ys));
  };
}

// --- This month's usage --------------------------------------------------

function monthStart() {
  return new Date().toISOString().slice(0, 7) + "-01";
}

// The report that fits the account -> {query, label (of the key column)}:
// a lab's by member, a user's by GPU class (what her own account paid),
// the pool's by account.
function usageReport(account) {
  const since = monthStart();
  const name = accountName(account);
  if (account.startsWith("group:")) return { query: { by: "user", group: name, since }, label: "User" };
  if (account.startsWith("user:")) return { query: { by: "model", account, since }, label: "GPU class" };
  return { query: { by: "account", since }, label: "Account" };
}

function hours(v) {
  if (typeof v !== "number" || !Number.isFinite(v)) return "—";
  return v === 0 || v >= 0.01 ? v.toFixed(2) : v.toPrecision(2);
}

function usageColumns(keyLabel) {
  return [
    { label: keyLabel, cell: (r) => (r.total ? h("strong", null, "total") : r.key === "" ? "(unpriced)" : r.key) },
    { label: "GPU-hours", class: "num", cell: (r) => hours(r.gpu_hours) },
    { label: "Cost", class: "num", cell: (r) => fmtCredits(r.cost_micros) },
  ];
}

// --- Prices --------------------------------------------------------------

const PER = { gpu: "GPU-hour", cpu: "CPU-hour", memory: "GiB-hour", storage: "GiB-month" };
const RESOURCE = { cpu: "CPUs", memory: "Memory", storage: "Storage (not charged yet)" };
const PRICE_COLUMNS = [
  { label: "Resource", cell: (p) => (p.resource === "gpu" ? "GPU " + (p.class || "") : RESOURCE[p.resource] || p.resource) },
  { label: "Price", class: "num", cell: (p) => fmtCredits(p.price_micros) },
  { label: "Per", cell: (p) => PER[p.resource] || "—" },
  { label: "Since", cell: (p) => timeEl(p.from_ms) },
];

// --- The page ------------------------------------------------------------

// The account shown at first: the first lab's, else the user's own.
function defaultAccount(accounts, me) {
  const names = accounts.map((a) => a.account);
  return names.find((n) => n.startsWith("group:")) || names.find((n) => n === "user:" + me) || names[0] || "";
}

export async function renderMoney(main, ctx) {
  const me = ctx.session.user;
  const err = errorLine("page-error");
  const cards = h("div", { id: "money-accounts", class: "accounts" });
  const accountSel = h("select", { id: "money-account", "aria-label": "account" });
  const windowSel = h("select", { id: "money-window", "aria-label": "window" },
    WINDOWS.map((d) => h("option", { value: String(d) }, "last " + d + " days")));
  const chartBox = h("div", { id: "money-chart", class: "chart" });
  const totalsBox = h("div", { id: "money-totals-box" });
  const usageTitle = h("h2", { id: "money-usage-title" }, "Usage this month");
  const usageBox = h("div", { id: "money-usage-box" });
  const pricesBox = h("div", { id: "money-prices-box" });
  main.appendChild(pageSection("Money",
    h("p", { class: "muted" },
      "Balances in credits: posted entries less what running jobs are accruing now. " +
      "Budgets are per UTC month."),
    err, cards,
    h("section", { class: "card" },
      h("div", { class: "toolbar" }, h("h2", null, "Over time"),
        h("div", { class: "money-choice" }, accountSel, windowSel)),
      chartBox, totalsBox),
    h("div", { class: "grid-2" },
      h("section", { class: "card" }, usageTitle, usageBox),
      card("Prices in force", pricesBox))));

  const seen = {};
  const chart = historyChart(chartBox, ctx);
  const choice = () => ({ account: accountSel.value, days: Number(windowSel.value) });

  // Each loader asks again when the choice changed while it waited, so that
  // a late answer never shows under another account's name.
  async function latest(load, show) {
    for (;;) {
      const want = choice();
      if (!want.account) return;
      const r = await load(want);
      const now = choice();
      if (now.account === want.account && now.days === want.days) return show(r, want);
    }
  }

  const refreshHistory = ctx.every(60000, () => guarded(err, () => latest(
    (c) => api.get(api.withQuery("/v1/accounts/" + encodeURIComponent(c.account) + "/history",
      { since: c.days - 1 + "d" }), { signal: ctx.signal }),
    (r, c) => {
      const days = firstArray(r.days);
      if (!changed(seen, "history", [c, days])) return;
      chart(days);
      fill(totalsBox, dataTable("money-totals", TOTAL_COLUMNS, [windowTotals(days)]),
        c.account === "pool" ? h("p", { class: "muted small" },
          "The pool's own account: what it spent is minus what jobs paid it; what it earned and granted, " +
          "minus what it paid out.") : null);
    })), false);

  const refreshUsage = ctx.every(60000, () => guarded(err, () => latest(
    (c) => api.get(api.withQuery("/v1/usage", usageReport(c.account).query), { signal: ctx.signal }),
    (r, c) => {
      const rows = firstArray(r.rows);
      if (!changed(seen, "usage", [c.account, r])) return;
      const report = usageReport(c.account);
      usageTitle.textContent = "Usage this month: " + c.account;
      const shown = rows.length && r.total ? [...rows, { ...r.total, total: true }] : rows;
      fill(usageBox,
        dataTable("money-usage", usageColumns(report.label), shown, (row) => (row.total ? { class: "total" } : null),
          "No charges this month."));
    })), false);

  ctx.every(60000, () => guarded(err, async () => {
    const r = await api.get("/v1/prices", { signal: ctx.signal });
    const prices = firstArray(r.prices);
    if (!changed(seen, "prices", prices)) return;
    fill(pricesBox, dataTable("money-prices", PRICE_COLUMNS, prices, null, "No prices are set: everything is free."));
  }));

  function refreshSelected() {
    refreshHistory();
    refreshUsage();
  }
  accountSel.addEventListener("change", refreshSelected);
  windowSel.addEventListener("change", refreshHistory);

  // The accounts last: their first answer chooses the account the loaders
  // above show.
  ctx.every(15000, () => guarded(err, async () => {
    const r = await api.get("/v1/accounts", { signal: ctx.signal });
    const accounts = firstArray(r.accounts);
    if (!changed(seen, "accounts", accounts)) return;
    fill(cards, accounts.length
      ? accounts.map((a) => accountCard(a, me))
      : h("p", { class: "muted" }, "You have no accounts yet."));
    // The choices, keeping the chosen one while it is still there.
    const names = accounts.map((a) => a.account);
    if (changed(seen, "names", names)) {
      const was = accountSel.value;
      fill(accountSel, names.map((n) => h("option", { value: n }, n)));
      accountSel.value = names.includes(was) ? was : defaultAccount(accounts, me);
      if (accountSel.value !== was) refreshSelected();
    }
  }));
}
