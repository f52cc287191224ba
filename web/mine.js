// My machines: the nodes the signed-in provider enrolled (an admin: every
// enrolled node), what each lends and who runs there, and the owner's
// buttons. Pause, resume and reclaim go through the server to the node's
// agent (POST /v1/nodes/{name}/pause|resume|reclaim), which enforces them
// as it enforces `gpupool agent pause|resume|reclaim` and reports what it
// did as the node's events, shown below.

import * as api from "./api.js";
import { h, fill, firstArray, genericTable, errorLine, errorText, changed, noticeLine } from "./dom.js";
import { pageSection, card, guarded, nodeInfo } from "./pages.js";

function sendCommand(name, verb, body) {
  return api.post("/v1/nodes/" + encodeURIComponent(name) + "/" + verb, body || {});
}

// The owner's controls of one machine; kept across refreshes so that a
// chosen GPU stays chosen. `sentNow()` is called once a command is on its way.
function controls(name, say, sentNow) {
  const gpuSelect = h("select", { class: "reclaim-gpu", "aria-label": "GPU to reclaim on " + name },
    h("option", { value: "" }, "every GPU"));
  const atOnce = h("input", { type: "checkbox", class: "reclaim-now" });
  const buttons = [];
  const button = (label, cls, run) => {
    const b = h("button", { type: "button", class: cls, "data-node": name }, label);
    b.addEventListener("click", async () => {
      for (const x of buttons) x.disabled = true;
      say("");
      try {
        await run();
      } catch (e) {
        if (!api.isAbort(e)) say(label + " on " + name + " failed: " + errorText(e), true);
      } finally {
        for (const x of buttons) x.disabled = false;
      }
    });
    buttons.push(b);
    return b;
  };
  const sent = (what) => {
    say(what + " sent to " + name + "'s agent; its events below show what it did.");
    sentNow();
  };
  const pause = button("Pause", "pause", async () => {
    await sendCommand(name, "pause");
    sent("Pause");
  });
  const resume = button("Resume", "resume", async () => {
    await sendCommand(name, "resume");
    sent("Resume");
  });
  const reclaim = button("Reclaim", "reclaim danger", async () => {
    const gpu = gpuSelect.value;
    const what = gpu === "" ? "every GPU of " + name : "GPU " + gpu + " of " + name;
    const how = atOnce.checked ? ", stopping its jobs at once" : ", its jobs checkpointed and requeued";
    if (!window.confirm("Take back " + what + how + "?")) return;
    await sendCommand(name, "reclaim", { gpus: gpu === "" ? undefined : [gpu], now: atOnce.checked });
    sent("Reclaim");
  });
  const root = h("div", { class: "owner-controls" },
    pause, resume, h("span", { class: "sep" }), gpuSelect,
    h("label", { class: "inline" }, atOnce, " at once"), reclaim);
  root.setGpus = (gpus) => {
    const want = ["", ...gpus.map((g) => String(g.index))];
    const have = [...gpuSelect.options].map((o) => o.value);
    if (JSON.stringify(want) === JSON.stringify(have)) return;
    const chosen = gpuSelect.value;
    fill(gpuSelect, h("option", { value: "" }, "every GPU"),
      gpus.map((g) => h("option", { value: String(g.index) }, "GPU " + g.index)));
    if (want.includes(chosen)) gpuSelect.value = chosen;
  };
  return root;
}

// A provider's few machines one by one (GET /v1/nodes/{name}; one never
// connected is not there yet); many (an admin's view of every machine) in
// one list.
const ONE_BY_ONE = 20;
async function myNodes(names, ctx) {
  if (names.length > ONE_BY_ONE) {
    const r = await api.get("/v1/nodes", { signal: ctx.signal });
    return firstArray(r.nodes);
  }
  const found = await Promise.all(names.map((name) =>
    api.get("/v1/nodes/" + encodeURIComponent(name), { signal: ctx.signal })
      .catch((e) => { if (e instanceof api.ApiError && e.status === 404) return null; throw e; })));
  return found.filter(Boolean);
}

export async function renderMine(main, ctx) {
  const err = errorLine("page-error");
  const said = noticeLine("mine-said");
  const say = said.say;
  const list = h("div", { id: "my-machines", class: "machines" });
  const empty = h("p", { class: "muted", hidden: true },
    "You have not enrolled a machine. Start an agent with your own token as its join token " +
    "(see the provider guide), and it shows here.");
  const eventsBox = h("div");
  main.appendChild(pageSection("My machines",
    h("p", { class: "muted" },
      "The machines you lend. Pause stops new work; Resume lends again; Reclaim takes GPUs " +
      "back (their jobs are checkpointed and requeued elsewhere). The agent on the machine " +
      "carries these out; a pause made on the machine itself is only lifted there."),
    err, said, empty, list, card("Events of my machines", eventsBox)));

  const cards = new Map(); // name -> {root, info, controls, json}
  const seen = {};
  let mine = [];
  const refreshEvents = ctx.every(10000, () => guarded(err, async () => {
    const pages = await Promise.all(mine.map((name) =>
      api.get("/v1/nodes/" + encodeURIComponent(name) + "/events?newest=1&limit=20", { signal: ctx.signal })
        .then((r) => firstArray(r.events ? r.events : r))));
    const events = pages.flat().sort((a, b) => (b.id || 0) - (a.id || 0)).slice(0, 50);
    if (!changed(seen, "events", events)) return;
    fill(eventsBox, genericTable("my-events-table", events, "No events on your machines yet."));
  }), false);
  // The agent reports back within a heartbeat or so: look again soon.
  const sentNow = () => ctx.sleep(1500).then(() => {
    refreshNodes();
    refreshEvents();
  }, () => {});
  const refreshNodes = ctx.every(5000, () => guarded(err, async () => {
    const agents = await api.get("/v1/agents", { signal: ctx.signal });
    const who = ctx.session;
    mine = firstArray(agents.agents ? agents.agents : agents)
      .filter((a) => !a.revoked && (who.role === "admin" || a.owner === who.user))
      .map((a) => a.node);
    const byName = new Map((await myNodes(mine, ctx)).map((n) => [n.name, n]));
    empty.hidden = mine.length > 0;
    for (const name of mine) {
      const n = byName.get(name) || { name, status: "never connected", gpus: [] };
      let c = cards.get(name);
      if (!c) {
        const info = h("div", { class: "node-info" });
        const ctl = controls(name, say, sentNow);
        c = { root: h("article", { class: "card node-card", "data-node": name }, ctl, info), info, ctl, json: "" };
        cards.set(name, c);
      }
      const json = JSON.stringify(n);
      if (json !== c.json) {
        c.json = json;
        fill(c.info, nodeInfo(n));
        c.ctl.setGpus(n.gpus || []);
      }
      list.appendChild(c.root);
    }
    for (const [name, c] of cards) {
      if (mine.includes(name)) continue;
      c.root.remove();
      cards.delete(name);
    }
    if (changed(seen, "mine", mine)) refreshEvents();
  }));
}
