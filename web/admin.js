// Admin (admins only): users, groups and their members (editable), API tokens (never
// their secrets: the API does not list them), enrolled nodes, and the audit
// log, newest first, a page at a time.

import * as api from "./api.js";
import { h, fill, dataTable, firstArray, timeEl, badge, errorLine, errorText, changed, noticeLine } from "./dom.js";
import { pageSection, card, guarded, offsetPager } from "./pages.js";

const when = (ms) => (ms > 0 ? timeEl(ms) : "—");
const yes = (v, text, kind) => (v ? badge(text, kind) : "—");

const USER_COLUMNS = [
  { label: "User", cell: (u) => u.name },
  { label: "Role", cell: (u) => u.role },
  { label: "Password sign-in", cell: (u) => (u.password_login ? "yes" : "tokens only") },
  { label: "Disabled", cell: (u) => yes(u.disabled, "disabled", "bad") },
  { label: "Created", cell: (u) => when(u.created_ms) },
];

const TOKEN_COLUMNS = [
  { label: "Id", cell: (t) => h("code", null, t.id) },
  { label: "User", cell: (t) => t.user },
  { label: "Name", cell: (t) => t.name || "—" },
  { label: "Scopes", cell: (t) => t.scopes },
  { label: "Created", cell: (t) => when(t.created_ms) },
  { label: "Expires", cell: (t) => (t.expires_ms > 0 ? timeEl(t.expires_ms) : "never") },
  { label: "State", cell: (t) => (t.revoked ? badge("revoked", "bad") : t.expired ? badge("expired", "off") : "active") },
];

const AGENT_COLUMNS = [
  { label: "Node", cell: (a) => a.node },
  { label: "Enrolled by", cell: (a) => a.owner || "the join token" },
  { label: "Credential", cell: (a) => (a.cert_fingerprint ? h("code", { title: a.cert_fingerprint }, "certificate " + a.cert_serial) : "node token") },
  { label: "Enrolled", cell: (a) => when(a.enrolled_ms) },
  { label: "Revoked", cell: (a) => (a.revoked ? [badge("revoked", "bad"), " ", when(a.revoked_ms)] : "—") },
];

const AUDIT_COLUMNS = [
  { label: "Id", class: "num", cell: (e) => String(e.id) },
  { label: "Time", cell: (e) => when(e.ts_ms) },
  { label: "Who", cell: (e) => e.actor },
  { label: "Action", cell: (e) => h("code", null, e.action) },
  { label: "Target", cell: (e) => e.target || "—" },
  { label: "Detail", class: "wide", cell: (e) => e.detail || "—" },
  { label: "From", cell: (e) => e.peer || "—" },
  { label: "", cell: (e) => (e.ok ? "" : badge("refused", "bad")) },
];

// A list the server pages (?offset=&limit=), 50 rows at a time.
const ADMIN_PAGE = 50;

function listCard(ctx, err, seen, { title, id, path, key, what, columns, empty }) {
  const box = h("div");
  const pager = offsetPager(err, {
    id, what, size: ADMIN_PAGE,
    load: async (offset, limit) => {
      const r = await api.get(path + (path.includes("?") ? "&" : "?") + "limit=" + limit + "&offset=" + offset, { signal: ctx.signal });
      const items = firstArray(r[key] ? r[key] : r);
      return { items, total: typeof r.total === "number" ? r.total : items.length };
    },
    show: (items) => {
      if (!changed(seen, id, items)) return;
      fill(box, dataTable(id, columns, items, null, empty));
    },
  });
  ctx.every(15000, pager.refresh);
  return card(title, box, pager.element);
}

function auditCard(ctx, err) {
  const box = h("div");
  const older = h("button", { id: "audit-older", type: "button", disabled: true }, "Older");
  const newest = h("button", { id: "audit-newest", type: "button", disabled: true }, "Newest");
  let before = 0; // 0: the newest page, followed live
  let next = 0;
  const load = () => guarded(err, async () => {
    const q = before > 0 ? "before=" + before : "newest=1";
    const r = await api.get("/v1/audit?" + q + "&limit=50", { signal: ctx.signal });
    const entries = firstArray(r.entries ? r.entries : r);
    next = typeof r.next_before === "number" ? r.next_before : 0;
    older.disabled = next === 0;
    newest.disabled = before === 0;
    fill(box, dataTable("audit-table", AUDIT_COLUMNS, entries, (e) => ({ "data-id": String(e.id) }), "No entries."));
  });
  older.addEventListener("click", () => {
    before = next;
    load();
  });
  newest.addEventListener("click", () => {
    before = 0;
    load();
  });
  ctx.every(15000, () => (before === 0 ? load() : undefined));
  return card("Audit log", h("div", { class: "pager" }, newest, " ", older), box);
}

// A group's members: show them, add or remove a user
// (POST /v1/groups/{name}/members, as `gpupool admin group add|remove`).
function membersCard(ctx) {
  const group = h("input", { id: "members-group", type: "text", placeholder: "group", "aria-label": "group", autocomplete: "off" });
  const user = h("input", { id: "members-user", type: "text", placeholder: "user", "aria-label": "user", autocomplete: "off" });
  const said = noticeLine("members-said");
  const box = h("div", { id: "members-list" });
  const path = () => "/v1/groups/" + encodeURIComponent(group.value.trim()) + "/members";
  const show = async () => {
    const r = await api.get(path(), { signal: ctx.signal });
    const members = firstArray(r.members);
    fill(box, h("p", null, r.name + ": " + (members.length ? members.join(", ") : "no members")));
  };
  const act = (verb) => async () => {
    if (!group.value.trim()) return said.say("Name a group.", true);
    try {
      if (verb) {
        if (!user.value.trim()) return said.say("Name a user.", true);
        await api.post(path(), { [verb]: [user.value.trim()] });
        said.say((verb === "add" ? "Added " : "Removed ") + user.value.trim() + (verb === "add" ? " to " : " from ") + group.value.trim() + ".");
      } else {
        said.say("");
      }
      await show();
    } catch (e) {
      if (!api.isAbort(e)) said.say(errorText(e), true);
    }
  };
  const button = (id, text, verb) => {
    const b = h("button", { id, type: "button" }, text);
    b.addEventListener("click", act(verb));
    return b;
  };
  return card("Group members",
    h("div", { class: "pager" }, group, " ", user, " ", button("members-add", "Add", "add"), " ",
      button("members-remove", "Remove", "remove"), " ", button("members-show", "Show", null)),
    said, box);
}

export async function renderAdmin(main, ctx) {
  const err = errorLine("page-error");
  main.appendChild(pageSection("Admin", err));
  if (ctx.session.role !== "admin") {
    err.set("Only the pool's admins see this page.");
    return;
  }
  const seen = {};
  const section = main.lastChild;
  section.appendChild(h("div", { class: "grid-2" },
    listCard(ctx, err, seen, { title: "Users", id: "users-table", path: "/v1/users", key: "users", what: "users", columns: USER_COLUMNS, empty: "No users." }),
    listCard(ctx, err, seen, { title: "Enrolled nodes", id: "agents-table", path: "/v1/agents", key: "agents", what: "nodes", columns: AGENT_COLUMNS, empty: "No node has enrolled." })));
  section.appendChild(membersCard(ctx));
  section.appendChild(listCard(ctx, err, seen, { title: "API tokens", id: "tokens-table", path: "/v1/tokens?all=1", key: "tokens", what: "tokens", columns: TOKEN_COLUMNS, empty: "No tokens." }));
  section.appendChild(auditCard(ctx, err));
}
