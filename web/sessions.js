// Sessions: start a Jupyter (or shell) session, open a Jupyter session in a
// new tab through a one-time sign-in link (POST /v1/sessions/{id}/link, as
// `gpupool session open` does), stop one. A session is a job with a
// `session` section; the list is the signed-in user's live jobs that have
// one (an admin's: everyone's).

import * as api from "./api.js";
import {
  h, fill, dataTable, firstArray, pill, jobLink, timeEl, fmtGpus, specGpus, errorLine, errorText, changed,
  noticeLine,
} from "./dom.js";
import { pageSection, card, guarded } from "./pages.js";

const LIVE = "pending,scheduled,running";

function kindOf(j) {
  const s = j && j.spec && j.spec.session;
  return s && typeof s === "object" ? (typeof s.kind === "string" ? s.kind : "shell") : "";
}

// Opens the tab at once, inside the click (a tab opened after an await is
// a popup that browsers block), and sends it to the link once it is known.
async function openJupyter(id, say) {
  const tab = window.open("about:blank", "_blank");
  try {
    const r = await api.post("/v1/sessions/" + encodeURIComponent(String(id)) + "/link", {});
    // The link is on the sessions' own origin (another port, or another
    // name), so a notebook page can never act as this dashboard.
    if (typeof r.url !== "string" || !/^https?:\/\/[^/]+\/v1\/sessions\//.test(r.url)) throw new Error("the server sent no link");
    if (tab) {
      tab.opener = null;
      tab.location.href = r.url;
    } else {
      say("Your browser blocked the new tab. Allow pop-ups for this page, or open the session from the CLI: gpupool session open " + id, true);
    }
  } catch (e) {
    if (tab) tab.close();
    throw e;
  }
}

function startForm(say, started) {
  const kind = h("select", { id: "session-kind" },
    h("option", { value: "jupyter" }, "Jupyter"), h("option", { value: "shell" }, "Shell"));
  const gpus = h("input", { id: "session-gpus", type: "text", value: "1", inputmode: "decimal", size: 4 });
  const idle = h("input", { id: "session-idle", type: "text", value: "30m", size: 6 });
  const image = h("input", { id: "session-image", type: "text", placeholder: "default: the provider's system", size: 28 });
  const submit = h("button", { id: "session-start", type: "submit", class: "primary" }, "Start");
  const err = errorLine("session-error");
  const form = h("form", { id: "session-form", class: "inline-form", novalidate: true },
    h("label", null, "Kind ", kind), h("label", null, "GPUs ", gpus),
    h("label", null, "Stop after idle ", idle), h("label", null, "Image ", image), submit, err);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const g = Number(gpus.value.trim());
    if (!Number.isFinite(g) || g < 0) {
      err.set("GPUs: a number, 0 or more (0.5 for half a GPU).");
      return;
    }
    const spec = { name: kind.value + "-session", session: { kind: kind.value }, resources: { gpus: g } };
    if (idle.value.trim()) spec.session.idle_timeout = idle.value.trim();
    if (image.value.trim()) spec.image = image.value.trim();
    submit.disabled = true;
    err.set("");
    try {
      const job = await api.post("/v1/jobs", spec);
      say("Session " + job.id + " submitted; it shows below, and Open works once it runs.");
      started();
    } catch (e) {
      if (!api.isAbort(e)) err.set(errorText(e));
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

export async function renderSessions(main, ctx) {
  const err = errorLine("page-error");
  const said = noticeLine("sessions-said");
  const say = said.say;
  const box = h("div");
  const seen = {};
  let refresh = null;
  main.appendChild(pageSection("Sessions",
    h("p", { class: "muted" },
      "A notebook or a shell on a pooled GPU. Open signs this browser in to one Jupyter " +
      "session through the server; a shell is reached with gpupool shell ID."),
    err, said,
    card("Start a session", startForm(say, () => refresh && refresh())),
    card("Your sessions", box)));

  const act = (label, cls, id, run) => h("button", {
    type: "button", class: cls + " small-button", "data-job": String(id),
    onclick: async (ev) => {
      const b = ev.currentTarget;
      b.disabled = true;
      say("");
      try {
        await run();
      } catch (e) {
        if (!api.isAbort(e)) say(label + " session " + id + ": " + errorText(e), true);
      } finally {
        b.disabled = false;
      }
    },
  }, label);
  const columns = [
    { label: "Session", class: "num", cell: (j) => jobLink(j.id) },
    { label: "Kind", cell: (j) => kindOf(j) },
    { label: "State", cell: (j) => pill(j.state) },
    { label: "Owner", cell: (j) => j.owner || "—" },
    { label: "GPUs", class: "num", cell: (j) => fmtGpus(specGpus(j)) },
    { label: "Started", cell: (j) => (j.started_ms ? timeEl(j.started_ms) : "—") },
    { label: "Reason", cell: (j) => j.reason || "—" },
    {
      label: "", cell: (j) => [
        kindOf(j) === "jupyter" && j.state === "running"
          ? act("Open", "open-session", j.id, () => openJupyter(j.id, say)) : null,
        " ",
        act("Stop", "stop-session danger", j.id, async () => {
          await api.post("/v1/jobs/" + encodeURIComponent(String(j.id)) + "/cancel", {});
          say("Session " + j.id + " stopped; its GPUs go back to the pool.");
          if (refresh) refresh();
        }),
      ],
    },
  ];
  refresh = ctx.every(5000, () => guarded(err, async () => {
    const r = await api.get("/v1/jobs?limit=1000&state=" + LIVE, { signal: ctx.signal });
    const sessions = firstArray(r.jobs ? r.jobs : r).filter((j) => kindOf(j) !== "");
    if (!changed(seen, "sessions", sessions)) return;
    fill(box, dataTable("sessions-table", columns, sessions, (j) => ({ "data-job": String(j.id) }),
      "No sessions. Start one above."));
  }));
}
