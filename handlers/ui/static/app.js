// leasegate dashboard: lists the held locks and semaphores (GET /locks, GET /semaphores, paged),
// with every holder, who waits and since when, and the multi-locks among them; the elections led
// or with candidates (GET /elections), each leader with its value; the top lists
// (GET /admin/top); a live events panel; force release (DELETE …?force=true). No dependencies.
//
// Live events come from two sources. The page follows the events streams of a few names at most
// (streamCap: the ones someone waits for first, where hand-offs come faster than a re-list), and
// finds every other change by comparing each listing with the one before (new fences are grants,
// vanished ones are ends, changed counts of waiters). One stream per listed name would not scale:
// a replica serves LEASEGATE_MAX_STREAMS streams in all and each principal
// LEASEGATE_QUOTA_STREAMS, and over HTTP/1.1 a browser opens six connections to a host. A change
// both sources see is shown once.
//
// With authentication on, the page asks for an API key, keeps it in sessionStorage (this tab only)
// and sends it as Authorization: Bearer on every call; streams are read with fetch, since
// EventSource cannot send that header.
//
// Names, owners and leaders' values are user input: they reach the DOM only as text nodes and
// attribute values, never as HTML.
"use strict";

(() => {
  const REFRESH_MS = 2000; // re-list interval
  const SOON_MS = 150; // re-list delay after an event
  const PAGE_LIMIT = 200;
  const MAX_PAGES = 5; // follow next_cursor this far, then ask for a narrower prefix
  const EVENT_LOG = 50; // live events kept on the page
  const STREAM_RETRY_MS = 30000; // after a stream was refused
  const STREAM_AGAIN_MS = 5000; // after a stream ended
  const WAITERS_SHOWN = 5; // per name (a listing names up to 20)
  const SEEN_MS = 60000; // how long a change is remembered, so that two sources show it once
  const KEY_ITEM = "leasegate.api-key";
  const TOP_PATH = "/admin/top";
  const KINDS = {
    lock: { list: "/locks", field: "locks", name: "lock", path: "/locks/", table: "locks", empty: "locks-empty" },
    semaphore: { list: "/semaphores", field: "semaphores", name: "name", path: "/semaphores/", table: "semaphores", empty: "semaphores-empty" },
    election: { list: "/elections", field: "elections", name: "election", path: "/elections/", table: "elections", empty: "elections-empty" },
  };
  const GROUP_COLOURS = 6;

  const $ = (id) => document.getElementById(id);
  const body = document.body;
  // ?live=0 follows no stream: the panel then shows what the listings tell.
  const live = new URLSearchParams(location.search).get("live") !== "0";
  // Over HTTP/1.1 a browser opens at most 6 connections to a host and each stream keeps one, so
  // leave two for the listings; HTTP/2 carries every stream on one connection.
  const nav = performance.getEntriesByType("navigation")[0];
  const streamCap = !live ? 0 : nav && /^h[23]/.test(nav.nextHopProtocol) ? 20 : 4;

  const streams = new Map(); // "kind:name" -> {ctrl, live}
  const refused = new Map(); // "kind:name" -> time to try its stream again
  const flashUntil = new Map(); // "kind:name" -> time its rows stop flashing
  const seen = new Map(); // "kind:name|grant|fence" or "…|end|fence" -> {at, source} it was shown
  const last = { lock: null, semaphore: null, election: null }; // the previous listing of each kind
  let longHoldMs = null; // from GET /admin/top
  let shown = []; // [{kind, name, waiters, age_ms}] on the page
  let groups = new Map(); // multi-lock id -> {index, owner, mode, holds: [], waitsFor: []}
  let timer = 0;
  let inflight = false;
  let again = false;
  let needKey = false;
  let keyGen = 0; // counts the keys given or forgotten: an answer to an older key is dropped

  const keyOf = (kind, name) => `${kind}:${name}`;

  // el builds an element; children that are not nodes become text nodes.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, String(v));
    }
    e.append(...children.filter((c) => c !== "" && c !== null && c !== undefined).map((c) => (c instanceof Node ? c : String(c))));
    return e;
  }

  const classes = (...names) => names.filter(Boolean).join(" ");

  function duration(ms) {
    if (typeof ms !== "number" || ms < 0) return "–";
    if (ms < 1000) return `${ms} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    const m = Math.floor(s / 60);
    const h = Math.floor(m / 60);
    const pad = (n) => String(n).padStart(2, "0");
    if (h < 1) return Math.floor(s % 60) ? `${m}m ${pad(Math.floor(s % 60))}s` : `${m}m`;
    if (h < 48) return `${h}h ${pad(m % 60)}m`;
    return `${Math.floor(h / 24)}d ${h % 24}h`;
  }

  function apiKey() {
    try {
      return sessionStorage.getItem(KEY_ITEM) || "";
    } catch {
      return "";
    }
  }

  function headers(accept) {
    const h = { Accept: accept };
    const key = apiKey();
    if (key) h.Authorization = `Bearer ${key}`;
    return h;
  }

  // ApiError is a refused or failed call; status is 0 when the gateway did not answer. what is
  // the call ("GET /locks?…"), problem what went wrong, the same for every call refused alike.
  class ApiError extends Error {
    constructor(what, problem, status, requestId) {
      super(`${what}: ${problem}` + (requestId ? ` (request ${requestId})` : ""));
      this.what = what;
      this.problem = problem;
      this.status = status;
    }
  }

  function problemText(res, p) {
    let msg = `${res.status} ${p.title || res.statusText}`;
    if (p.detail) msg += `: ${p.detail}`;
    for (const ip of p.invalid_params || []) msg += `; ${ip.name} ${ip.reason}`;
    return msg;
  }

  function problemMessage(method, path, res, p) {
    return new ApiError(`${method} ${path}`, problemText(res, p), res.status, p.request_id).message;
  }

  // errorsText says what went wrong with several calls, once per kind of problem: a key without a
  // permission gets the same 403 from every listing, said once, with the calls it answered.
  function errorsText(errors) {
    const byProblem = new Map();
    for (const e of errors) {
      if (!(e instanceof ApiError)) {
        byProblem.set(String(e), []);
        continue;
      }
      if (!byProblem.has(e.problem)) byProblem.set(e.problem, []);
      byProblem.get(e.problem).push(e.what.replace(/\?.*$/, ""));
    }
    return [...byProblem].map(([problem, calls]) => (calls.length ? `${calls.join(", ")}: ${problem}` : problem)).join(" · ");
  }

  // call sends one API request and returns its JSON body; a problem+json answer (or no answer)
  // becomes an ApiError whose message says what went wrong.
  async function call(method, path) {
    let res;
    try {
      res = await fetch(path, { method, headers: headers("application/json"), cache: "no-store" });
    } catch (err) {
      throw new ApiError(`${method} ${path}`, `the gateway did not answer (${err.message})`, 0);
    }
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!res.ok) throw new ApiError(`${method} ${path}`, problemText(res, data || {}), res.status, data?.request_id);
    if (data === null) throw new ApiError(`${method} ${path}`, "the answer is not JSON", res.status);
    return data;
  }

  // setStatus shows a message in the status line; source says which part of the page owns it, so
  // a successful re-list clears its own error but not the answer to a force release.
  function setStatus(kind, text, source) {
    const s = $("status");
    s.className = kind;
    s.dataset.source = source;
    s.textContent = text;
  }

  function clearStatus(source) {
    const s = $("status");
    if (s.dataset.source !== source) return;
    s.className = "";
    delete s.dataset.source;
    s.textContent = "";
  }

  // --- API key ---------------------------------------------------------------------------------

  // askForKey stops the page (no re-list, no stream) until a key is given: re-listing with a key
  // the gateway refuses would only add failed authentications.
  function askForKey(message) {
    needKey = true;
    clearTimeout(timer);
    closeStreams();
    body.dataset.state = "auth";
    clearData();
    $("auth").hidden = false;
    $("auth-error").textContent = message;
    clearStatus("refresh");
    showKeyState();
    if (document.activeElement !== $("api-key")) $("api-key").focus();
  }

  // clearData takes what the last key showed off the page.
  function clearData() {
    for (const kind of Object.keys(KINDS)) {
      for (const tb of [...$(KINDS[kind].table).tBodies]) tb.remove();
      $(KINDS[kind].empty).hidden = true;
    }
    for (const id of ["longest-held", "most-contended", "groups"]) $(id).replaceChildren();
    $("count").textContent = "…";
    shown = [];
  }

  function showKeyState() {
    $("key-state").hidden = !apiKey();
  }

  function restart() {
    keyGen++;
    needKey = false;
    last.lock = last.semaphore = last.election = null; // a new key may see other names: no diff across it
    body.dataset.state = "loading";
    refresh();
  }

  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) return;
    try {
      sessionStorage.setItem(KEY_ITEM, key);
    } catch (err) {
      $("auth-error").textContent = `This browser keeps no key for the tab: ${err.message}`;
      return;
    }
    $("api-key").value = "";
    $("auth-error").textContent = "Checking the key…";
    showKeyState();
    restart();
  });

  $("forget-key").addEventListener("click", () => {
    try {
      sessionStorage.removeItem(KEY_ITEM);
    } catch {
      // nothing kept
    }
    closeStreams();
    showKeyState();
    restart();
  });

  // --- listings ----------------------------------------------------------------------------------

  async function listAll(kind, prefix) {
    const k = KINDS[kind];
    const byName = new Map(); // SCAN may return a name twice
    let cursor = "";
    let pages = 0;
    do {
      const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
      if (prefix) q.set("prefix", prefix);
      if (cursor) q.set("cursor", cursor);
      const page = await call("GET", `${k.list}?${q}`);
      for (const e of page[k.field] || []) byName.set(e[k.name], e);
      cursor = page.next_cursor || "";
      pages++;
    } while (cursor && pages < MAX_PAGES);
    const entries = [...byName.values()].sort((a, b) => (a[k.name] < b[k.name] ? -1 : a[k.name] > b[k.name] ? 1 : 0));
    return { kind, prefix, entries, more: cursor !== "", at: Date.now() };
  }

  // holdersOf returns an entry's holders: its held_by, or for a gateway that predates it what the
  // entry says of its first holder.
  function holdersOf(kind, e) {
    if (Array.isArray(e.held_by)) return e.held_by;
    if (kind === "semaphore") return [];
    return [{ owner: e.owner, mode: e.mode, fence: e.fence, age_ms: e.age_ms, ttl_ms: e.ttl_ms, watchdog: e.watchdog, multilock: e.multilock }];
  }

  // --- multi-locks ---------------------------------------------------------------------------------

  // findGroups collects the multi-locks the listings show: a group's lease holds each of its
  // members, so the holds with the same multilock id on several names are one group. Redis records
  // the group nowhere else (its token carries the member list), so members outside the listing
  // (another prefix, past MAX_PAGES) do not show.
  function findGroups(lists) {
    const out = new Map();
    const group = (id, owner, mode) => {
      if (!out.has(id)) out.set(id, { id, index: out.size, owner, mode, holds: [], waitsFor: [] });
      return out.get(id);
    };
    for (const list of lists) {
      for (const e of list.entries) {
        const name = e[KINDS[list.kind].name];
        for (const h of holdersOf(list.kind, e)) if (h.multilock) group(h.multilock, h.owner, h.mode).holds.push(name);
        for (const w of e.waiting || []) if (w.multilock) group(w.multilock, w.owner, w.mode).waitsFor.push(name);
      }
    }
    return out;
  }

  function groupBadge(id) {
    const g = groups.get(id);
    const short = id.slice(2, 10);
    const members = g ? g.holds.join(", ") : "";
    return el(
      "span",
      { class: `badge group g${g ? g.index % GROUP_COLOURS : 0}`, "data-group": id, title: `multi-lock ${id}${members ? `: holds ${members}` : ""}` },
      `group ${short}`,
    );
  }

  function renderGroups() {
    $("groups").replaceChildren(
      ...[...groups.values()].map((g) =>
        el(
          "li",
          { "data-group": g.id, "data-holds": g.holds.join(" "), "data-waits-for": g.waitsFor.join(" ") },
          groupBadge(g.id),
          el("span", { class: "owner", title: g.owner }, g.owner ?? ""),
          el(
            "span",
            { class: "members" },
            g.holds.length ? `holds ${g.holds.join(", ")}` : "",
            g.holds.length && g.waitsFor.length ? "; " : "",
            g.waitsFor.length ? `waits for ${g.waitsFor.join(", ")}` : "",
          ),
        ),
      ),
    );
  }

  // --- tables ------------------------------------------------------------------------------------

  // fenceDigits writes a fence in groups of three digits, each a span (a copy is still the bare
  // number); with above, the fence in the row above, the leading groups they share are dimmed:
  // fences next to each other differ in their last digits, and the eye should go there.
  function fenceDigits(fence, above) {
    if (fence === undefined || fence === null) return "–";
    const s = String(fence);
    const a = above === undefined || above === null ? "" : String(above);
    const out = el("span", { class: "digits" });
    let same = a.length === s.length;
    for (let start = ((s.length - 1) % 3) + 1 - 3; start < s.length; start += 3) {
      const group = s.slice(Math.max(0, start), start + 3);
      same = same && group === a.slice(Math.max(0, start), start + 3);
      out.append(el("span", { class: same ? "g same" : "g" }, group));
    }
    return out;
  }

  // holderCells are a holder's cells; above is the fence of the row above in its table.
  function holderCells(kind, h, long, above) {
    const cells = [
      el("td", { class: "owner", title: h.owner }, el("span", { class: "who" }, h.owner ?? ""), h.multilock ? groupBadge(h.multilock) : "",
        h.redisson ? el("span", { class: "badge redisson", title: "a Redisson client's hold (its field in Redisson's hash)" }, "Redisson") : ""),
    ];
    if (kind === "lock") cells.push(el("td", { class: "mode" }, h.mode ? el("span", { class: `badge ${h.mode}` }, h.mode) : ""));
    cells.push(
      el("td", { class: "fence num", title: h.fence }, h.redisson ? "–" : fenceDigits(h.fence, above)),
      el("td", { class: classes("age num", long && "long"), title: `${h.age_ms} ms` }, h.redisson ? "–" : duration(h.age_ms)),
      el("td", { class: "ttl num" }, duration(h.ttl_ms)),
      el("td", { class: `watchdog ${h.watchdog ? "on" : "off"}` }, h.watchdog ? "on" : "off"),
    );
    return cells;
  }

  // waitingCell lists who waits in line: a lock's or semaphore's waiters, or an election's
  // candidates (noun "candidate"), the first WAITERS_SHOWN by name with their arrival.
  function waitingCell(count, waiting, attrs, noun) {
    const td = el("td", attrs);
    if (!count) {
      td.append(el("span", { class: "none" }, "–"));
      return td;
    }
    const listed = (waiting || []).slice(0, WAITERS_SHOWN);
    const list = el(
      "ol",
      { class: "waiters" },
      ...listed.map((w) => {
        const since = new Date(w.since);
        return el(
          "li",
          { "data-owner": w.owner, "data-mode": w.mode, "data-since": w.since, "data-waited-ms": w.waited_ms, "data-multilock": w.multilock },
          el("span", { class: "who", title: w.owner }, w.owner),
          w.mode ? el("span", { class: `badge ${w.mode}` }, w.mode) : "",
          w.multilock ? groupBadge(w.multilock) : "",
          el("span", { class: "since" }, "since ", el("time", { datetime: w.since, title: w.since }, since.toLocaleTimeString()), ` (${duration(w.waited_ms)})`),
        );
      }),
    );
    // Past the names the listing gives (or none: a vacant election's line), the rest is a count.
    if (count > listed.length && listed.length) list.append(el("li", { class: "more" }, `+${count - listed.length} more`));
    const label = noun ? `${count} ${noun}${count === 1 ? "" : "s"}` : `${count} waiting`;
    td.append(el("span", { class: "count" }, label), listed.length ? list : "");
    return td;
  }

  // entryBody is one lock's or semaphore's rows; above.fence is the fence of the table's row
  // before them, which it moves on to its own last.
  function entryBody(kind, e, now, above) {
    const k = KINDS[kind];
    const name = e[k.name];
    const key = keyOf(kind, name);
    const held = holdersOf(kind, e);
    const isLong = (ms) => longHoldMs !== null && typeof ms === "number" && ms > longHoldMs;
    const long = isLong(e.age_ms);
    const count = kind === "lock" ? (e.holders ?? held.length) : e.used;
    const rows = Math.max(held.length, 1);
    const tb = el("tbody", {
      class: classes("entry", long && "long-hold", e.waiters > 0 && "contended", (flashUntil.get(key) || 0) > now && "flash"),
      "data-kind": kind,
      "data-name": name,
      "data-holders": count,
      "data-waiters": e.waiters ?? 0,
      "data-age-ms": e.age_ms,
      "data-long-hold": String(long),
      "data-live": String(!!streams.get(key)?.live),
    });
    const nameCell = el("td", { class: "name-cell", rowspan: rows }, el("span", { class: "name" }, name));
    if (count > held.length && held.length) nameCell.append(el("small", { class: "more" }, `${held.length} of ${count} holders shown`));
    const first = [nameCell];
    if (kind === "semaphore") {
      // Fewer in use than permits is the good side (optimum 0); all of them in use is past high,
      // which the browser draws in its warning colour, not green.
      const permits = e.permits || 1;
      const full = e.used >= permits;
      const meter = el("meter", { min: 0, max: permits, value: e.used, optimum: 0, low: permits - 0.5, high: permits - 0.5, title: full ? "every permit in use" : `${permits - e.used} free` });
      first.push(el("td", { class: classes("permits num", full && "full"), rowspan: rows, "data-full": String(full) }, `${e.used} / ${e.permits}`, meter));
    }
    const tail = [
      waitingCell(e.waiters || 0, e.waiting, { class: "waiting", rowspan: rows }),
      el(
        "td",
        { class: "actions", rowspan: rows },
        el("button", { type: "button", class: "force-release", "data-kind": kind, "data-name": name, title: `Force-release ${kind} ${name}` }, "Force release"),
      ),
    ];
    if (!held.length) {
      const span = kind === "lock" ? 6 : 5;
      tb.append(el("tr", { class: "holder" }, ...first, el("td", { colspan: span, class: "none" }, "–"), ...tail));
      return tb;
    }
    held.forEach((h, i) => {
      const hl = isLong(h.age_ms);
      const tr = el(
        "tr",
        {
          class: classes("holder", hl && "long-hold"),
          "data-owner": h.owner ?? "",
          "data-fence": h.fence,
          "data-mode": h.mode,
          "data-multilock": h.multilock,
          "data-long-hold": String(hl),
        },
        ...(i === 0 ? first : []),
        ...holderCells(kind, h, hl, above.fence),
        ...(i === 0 ? tail : []),
      );
      if (!h.redisson) above.fence = h.fence;
      tb.append(tr);
    });
    return tb;
  }

  function renderEntries(list) {
    const k = KINDS[list.kind];
    const now = Date.now();
    const table = $(k.table);
    for (const tb of [...table.tBodies]) tb.remove();
    const above = { fence: null };
    table.append(...list.entries.map((e) => (list.kind === "election" ? electionBody(e, now, above) : entryBody(list.kind, e, now, above))));
    const empty = $(k.empty);
    empty.hidden = list.entries.length > 0;
    if (list.kind === "election") {
      const which = list.prefix ? `whose name starts with “${list.prefix}” ` : "";
      empty.textContent = `No election ${which}is led or has candidates.`;
      return;
    }
    const what = list.kind === "lock" ? "lock" : "semaphore permit";
    empty.textContent = list.prefix ? `No ${what} whose name starts with “${list.prefix}” is held.` : `No ${what} is held.`;
  }

  function renderCount(lists) {
    const parts = [];
    let longCount = 0;
    for (const list of lists) {
      if (list.kind === "election") continue;
      const n = list.entries.length;
      parts.push(`${n} ${list.kind}${n === 1 ? "" : "s"}` + (list.more ? ` (first ${MAX_PAGES} pages: narrow the prefix)` : ""));
      if (longHoldMs !== null) longCount += list.entries.filter((e) => e.age_ms > longHoldMs).length;
    }
    let text = `${parts.join(", ")} held` + (longCount ? `, ${longCount} long` : "");
    const elections = lists.find((l) => l.kind === "election");
    if (elections) {
      const n = elections.entries.length;
      text += ` · ${n} election${n === 1 ? "" : "s"}` + (elections.more ? ` (first ${MAX_PAGES} pages)` : "");
    }
    $("count").textContent = text;
  }

  function kindBadge(kind) {
    return kind === "semaphore" || kind === "election" ? el("span", { class: `badge ${kind}` }, kind) : "";
  }

  // electionBody is one election's row: its leader (owner, value, fence, since, TTL left) or, for
  // a vacant election whose candidates wait, "vacant"; its candidates in line, named as a lock's
  // waiters are. above.fence is as for entryBody.
  function electionBody(e, now, above) {
    const name = e.election;
    const key = keyOf("election", name);
    const l = e.leader;
    const tb = el("tbody", {
      class: classes("entry", e.candidates > 0 && "contended", (flashUntil.get(key) || 0) > now && "flash"),
      "data-kind": "election",
      "data-name": name,
      "data-led": String(!!l),
      "data-candidates": e.candidates ?? 0,
      "data-live": String(!!streams.get(key)?.live),
    });
    const nameCell = el("td", { class: "name-cell" }, el("span", { class: "name" }, name));
    const candidates = waitingCell(e.candidates || 0, e.waiting, { class: "candidates" }, "candidate");
    const actions = el(
      "td",
      { class: "actions" },
      el("button", { type: "button", class: "force-release", "data-kind": "election", "data-name": name, title: `Take the lead of election ${name} away` }, "Force release"),
    );
    if (!l) {
      tb.append(el("tr", { class: "holder vacant" }, nameCell, el("td", { class: "owner" }, "vacant"), el("td", { colspan: 4, class: "none" }, "–"), candidates, actions));
      return tb;
    }
    const since = new Date(l.since);
    tb.append(
      el(
        "tr",
        { class: "holder leader", "data-owner": l.owner ?? "", "data-fence": l.fence, "data-since": l.since },
        nameCell,
        el("td", { class: "owner", title: l.owner }, el("span", { class: "who" }, l.owner ?? "")),
        el("td", { class: "value", title: l.value }, el("code", {}, l.value ?? "")),
        el("td", { class: "fence num", title: l.fence }, fenceDigits(l.fence, above.fence)),
        el(
          "td",
          { class: "since" },
          el("time", { datetime: l.since, title: l.since }, since.toLocaleTimeString()),
          el("span", { class: "ago" }, `(${duration(now - since.getTime())})`),
        ),
        el("td", { class: "ttl num" }, duration(l.ttl_ms)),
        candidates,
        actions,
      ),
    );
    above.fence = l.fence;
    return tb;
  }

  function renderTop(top) {
    $("longest-held").replaceChildren(
      ...(top.longest_held || []).map((e) =>
        el(
          "li",
          { "data-lock": e.lock, "data-kind": e.kind, class: longHoldMs !== null && e.age_ms > longHoldMs ? "long-hold" : undefined },
          el("span", { class: "name" }, e.lock),
          kindBadge(e.kind),
          el("span", { class: "owner", title: e.owner }, e.owner ?? ""),
          el("span", { class: "age" }, duration(e.age_ms)),
        ),
      ),
    );
    $("most-contended").replaceChildren(
      ...(top.most_contended || []).map((e) =>
        el("li", { "data-lock": e.lock, "data-kind": e.kind }, el("span", { class: "name" }, e.lock), kindBadge(e.kind), el("span", { class: "count" }, e.count)),
      ),
    );
    // The gateway counts 409s and waits per replica, in memory: this list is the answering
    // replica's only, which the heading says.
    $("window").textContent = top.window_s ? `this replica, last ${top.window_s} s` : "this replica";
  }

  // --- changes seen by comparing listings ----------------------------------------------------------

  // snapshot keeps what a listing says of each name: its holds by fence, and its count of waiters.
  function snapshot(list) {
    const entries = new Map();
    for (const e of list.entries) {
      const name = e[KINDS[list.kind].name];
      const held = holdersOf(list.kind, e);
      const count = list.kind === "lock" ? (e.holders ?? held.length) : e.used;
      entries.set(name, { holds: new Map(held.map((h) => [h.fence, h])), complete: held.length >= count, waiters: e.waiters ?? 0 });
    }
    return { prefix: list.prefix, more: list.more, at: list.at, entries };
  }

  // compare logs what changed between two listings of a kind, but what a stream showed already.
  function compare(kind, prev, cur) {
    if (!prev || prev.prefix !== cur.prefix) return;
    const at = new Date(cur.at);
    for (const [name, c] of cur.entries) {
      const p = prev.entries.get(name);
      for (const [fence, h] of c.holds) {
        if (!p || (p.complete && !p.holds.has(fence))) change(kind, name, "granted", h, at);
      }
      if (p && c.complete) {
        for (const [fence, h] of p.holds) if (!c.holds.has(fence)) change(kind, name, "ended", h, at);
      }
      const was = p ? p.waiters : 0;
      if (c.waiters !== was && !streams.get(keyOf(kind, name))?.live) {
        logEvent(kind, name, "waiters", { waiters: c.waiters, at: at.toISOString() }, "listing");
      }
    }
    if (cur.more) return; // a name missing from an incomplete listing may be on a later page
    for (const [name, p] of prev.entries) {
      if (cur.entries.has(name)) continue;
      for (const h of p.holds.values()) change(kind, name, "ended", h, at);
    }
  }

  // electionSnapshot keeps what an elections listing says of each: its leader and candidates.
  function electionSnapshot(list) {
    const entries = new Map(list.entries.map((e) => [e.election, { leader: e.leader || null, candidates: e.candidates ?? 0 }]));
    return { prefix: list.prefix, more: list.more, at: list.at, entries };
  }

  // compareElections logs the leaders that changed between two listings (an end may be a
  // resignation, a lapse or a force release), but what a stream showed already.
  function compareElections(prev, cur) {
    if (!prev || prev.prefix !== cur.prefix) return;
    const at = new Date(cur.at);
    for (const [name, c] of cur.entries) {
      const p = prev.entries.get(name);
      const was = p ? p.leader : null;
      const is = c.leader;
      if (was && (!is || is.fence !== was.fence)) electionChange(name, "ended", was, at);
      if (is && (!was || is.fence !== was.fence)) electionChange(name, "elected", is, at);
      else if (is && was.value !== is.value) electionChange(name, "proclaimed", is, at);
      if (c.candidates !== (p ? p.candidates : 0) && !streams.get(keyOf("election", name))?.live) {
        logEvent("election", name, "candidates", { waiters: c.candidates, at: at.toISOString() }, "listing");
      }
    }
    if (cur.more) return;
    for (const [name, p] of prev.entries) {
      if (!cur.entries.has(name) && p.leader) electionChange(name, "ended", p.leader, at);
    }
  }

  // electionChangeID names a leader's change for the seen map: its election, its fence, and for a
  // new value that value.
  function electionChangeID(name, type, fence, value) {
    const key = keyOf("election", name);
    if (type === "elected") return `${key}|grant|${fence}`;
    if (type === "proclaimed") return `${key}|value|${fence}|${value}`;
    return `${key}|end|${fence}`;
  }

  function electionChange(name, type, l, at) {
    const id = electionChangeID(name, type, l.fence, l.value);
    if (seen.has(id)) return;
    seen.set(id, { at: Date.now(), source: "listing" });
    const d = { owner: l.owner, fence: l.fence, at: at.toISOString() };
    if (type !== "ended") d.value = l.value;
    logEvent("election", name, type, d, "listing");
    flashUntil.set(keyOf("election", name), Date.now() + 1500);
  }

  // change logs a grant or the end of a hold, unless it was shown already.
  function change(kind, name, type, h, at) {
    const id = `${keyOf(kind, name)}|${type === "granted" ? "grant" : "end"}|${h.fence}`;
    if (seen.has(id)) return;
    seen.set(id, { at: Date.now(), source: "listing" });
    logEvent(kind, name, type, { owner: h.owner, mode: h.mode, fence: h.fence, at: at.toISOString() }, "listing");
    flashUntil.set(keyOf(kind, name), Date.now() + 1500);
  }

  function forget() {
    const now = Date.now();
    for (const [id, s] of seen) if (s.at < now - SEEN_MS) seen.delete(id);
    for (const [key, until] of flashUntil) if (until < now) flashUntil.delete(key);
  }

  // --- refresh -----------------------------------------------------------------------------------

  // refresh re-lists the locks, the semaphores and the top lists, then schedules the next re-list.
  async function refresh() {
    if (needKey) return;
    if (inflight) {
      again = true;
      return;
    }
    inflight = true;
    clearTimeout(timer);
    const gen = keyGen;
    try {
      const prefix = $("prefix").value.trim();
      const [locks, sems, top, elected] = await Promise.allSettled([
        listAll("lock", prefix),
        listAll("semaphore", prefix),
        call("GET", TOP_PATH),
        listAll("election", prefix),
      ]);
      if (gen !== keyGen) {
        again = true; // asked with a key given up meanwhile
        return;
      }
      // A gateway without elections (RedLock: 501; an older build: 404) has no Elections section.
      const noElections = elected.status === "rejected" && (elected.reason.status === 501 || elected.reason.status === 404);
      $("elections-held").hidden = noElections;
      const results = noElections ? [locks, sems, top] : [locks, sems, top, elected];
      const unauthenticated = results.find((r) => r.status === "rejected" && r.reason.status === 401);
      if (unauthenticated) {
        askForKey(unauthenticated.reason.message);
        return;
      }
      const errors = results.filter((r) => r.status === "rejected").map((r) => r.reason);
      // The key form stays until a call succeeds: a key without admin gets 403s, said there (once)
      // rather than in the status line too.
      if (errors.length < results.length) $("auth").hidden = true;
      const inForm = !$("auth").hidden;
      if (inForm) $("auth-error").textContent = errorsText(errors);
      if (top.status === "fulfilled") {
        longHoldMs = typeof top.value.long_hold_ms === "number" ? top.value.long_hold_ms : null;
        $("threshold").textContent = longHoldMs === null ? "?" : duration(longHoldMs);
      }
      const lists = [locks, sems].filter((r) => r.status === "fulfilled").map((r) => r.value);
      const elections = elected.status === "fulfilled" ? elected.value : null;
      groups = findGroups(lists);
      forget();
      for (const list of lists) {
        const snap = snapshot(list);
        compare(list.kind, last[list.kind], snap);
        last[list.kind] = snap;
      }
      if (elections) {
        const snap = electionSnapshot(elections);
        compareElections(last.election, snap);
        last.election = snap;
      }
      const all = elections ? [...lists, elections] : lists;
      for (const list of all) renderEntries(list);
      if (lists.length) renderCount(all);
      renderGroups();
      if (top.status === "fulfilled") renderTop(top.value);
      const nowMs = Date.now();
      shown = all.flatMap((list) =>
        list.entries.map((e) =>
          list.kind === "election"
            ? { kind: "election", name: e.election, waiters: e.candidates || 0, age: e.leader ? nowMs - new Date(e.leader.since).getTime() : 0 }
            : { kind: list.kind, name: e[KINDS[list.kind].name], waiters: e.waiters || 0, age: e.age_ms || 0 },
        ),
      );
      syncStreams();
      if (errors.length && !inForm) setStatus("error", errorsText(errors), "refresh");
      else clearStatus("refresh");
      body.dataset.state = locks.status === "fulfilled" && sems.status === "fulfilled" ? "ready" : "error";
      $("updated").textContent = new Date().toLocaleTimeString();
    } finally {
      inflight = false;
      if (!needKey) {
        if (again) {
          again = false;
          timer = setTimeout(refresh, 0);
        } else {
          timer = setTimeout(refresh, REFRESH_MS);
        }
      }
    }
  }

  // soon re-lists shortly: an event said something changed.
  function soon() {
    if (needKey) return;
    if (inflight) {
      again = true;
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(refresh, SOON_MS);
  }

  // --- streams -----------------------------------------------------------------------------------

  // syncStreams keeps one events stream open per name on the page, up to streamCap, preferring
  // names someone waits for, then the oldest holds.
  function syncStreams() {
    const wanted = [...shown].sort((a, b) => b.waiters - a.waiters || b.age - a.age).slice(0, streamCap);
    const keep = new Set(wanted.map((s) => keyOf(s.kind, s.name)));
    for (const [key, s] of streams) {
      if (!keep.has(key)) {
        s.ctrl.abort();
        streams.delete(key);
      }
    }
    const now = Date.now();
    for (const s of wanted) {
      const key = keyOf(s.kind, s.name);
      if (!streams.has(key) && (refused.get(key) || 0) <= now) openStream(s.kind, s.name);
    }
    markLive();
  }

  function markLive() {
    for (const tb of document.querySelectorAll("tbody.entry")) {
      tb.dataset.live = String(!!streams.get(keyOf(tb.dataset.kind, tb.dataset.name))?.live);
    }
    const n = [...streams.values()].filter((s) => s.live).length;
    $("streams").textContent = live ? `live: ${n} stream${n === 1 ? "" : "s"}` : "live: off";
    $("events-source").textContent = live ? `streams of ${n} name${n === 1 ? "" : "s"}, listings for the rest` : "from the listings (?live=0)";
  }

  function closeStreams() {
    for (const s of streams.values()) s.ctrl.abort();
    streams.clear();
    markLive();
  }

  async function openStream(kind, name) {
    const key = keyOf(kind, name);
    const gen = keyGen;
    const s = { ctrl: new AbortController(), live: false };
    streams.set(key, s);
    const path = `${KINDS[kind].path}${encodeURIComponent(name)}/events`;
    try {
      const res = await fetch(path, { headers: headers("text/event-stream"), cache: "no-store", signal: s.ctrl.signal });
      if (!res.ok) {
        const p = await res.json().catch(() => ({}));
        const msg = problemMessage("GET", path, res, p);
        if (res.status === 401 && gen === keyGen) askForKey(msg);
        refused.set(key, Date.now() + STREAM_RETRY_MS);
        $("streams").title = msg; // e.g. 429: the principal's streams are used up
        return;
      }
      await readEvents(res.body, (type, data) => onStreamEvent(kind, name, s, type, data));
      refused.set(key, Date.now() + STREAM_AGAIN_MS);
    } catch {
      if (!s.ctrl.signal.aborted) refused.set(key, Date.now() + STREAM_AGAIN_MS);
    } finally {
      if (streams.get(key) === s) {
        streams.delete(key);
        markLive();
      }
    }
  }

  // readEvents reads a Server-Sent Events body and hands each event's type and data to on.
  async function readEvents(stream, on) {
    const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        let type = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (!line || line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let v = colon < 0 ? "" : line.slice(colon + 1);
          if (v.startsWith(" ")) v = v.slice(1);
          if (field === "event") type = v;
          else if (field === "data") data.push(v);
        }
        if (data.length) on(type, data.join("\n"));
      }
    }
  }

  function onStreamEvent(kind, name, s, type, raw) {
    let d;
    try {
      d = JSON.parse(raw);
    } catch {
      return;
    }
    if (type === "state") {
      s.live = true;
      markLive();
      return;
    }
    if (type === "closed") {
      if (d.reason === "unauthenticated") askForKey(`The gateway ended a stream: ${d.detail || d.reason}`);
      return;
    }
    const key = keyOf(kind, name);
    const ids = [];
    if (kind === "election" && d.fence !== undefined) ids.push(electionChangeID(name, type, d.fence, d.value));
    if ((type === "granted" || type === "handed-off") && d.fence !== undefined) ids.push(`${key}|grant|${d.fence}`);
    if ((type === "released" || type === "expired") && d.fence !== undefined) ids.push(`${key}|end|${d.fence}`);
    if (type === "forced") for (const h of d.holds || []) ids.push(`${key}|end|${h.fence}`);
    // A change a listing showed already is not shown twice (a stream opens after the listing that
    // chose it); handed-off and its granted carry the same fence, and both are shown.
    if (ids.length && ids.every((id) => seen.get(id)?.source === "listing")) return;
    for (const id of ids) seen.set(id, { at: Date.now(), source: "stream" });
    logEvent(kind, name, type, d, "stream");
    flashUntil.set(key, Date.now() + 1500);
    for (const tb of document.querySelectorAll("tbody.entry")) {
      if (tb.dataset.kind === kind && tb.dataset.name === name) tb.classList.add("flash");
    }
    soon();
  }

  function logEvent(kind, name, type, d, source) {
    const parts = [];
    if (d.owner !== undefined) parts.push(d.owner);
    if (Array.isArray(d.owners)) parts.push(d.owners.join(", "));
    if (d.mode) parts.push(d.mode);
    if (typeof d.value === "string") parts.push(`value ${d.value}`);
    if (d.fence !== undefined) parts.push(el("span", { class: "fence" }, "fence ", fenceDigits(d.fence)));
    if (d.holds_removed !== undefined) parts.push(`${d.holds_removed} hold(s) removed`);
    if (typeof d.waiters === "number") parts.push(`${d.waiters} waiting`);
    const at = d.at ? new Date(d.at) : new Date();
    const item = el(
      "li",
      {
        class: `event ${type}`,
        "data-event": type,
        "data-kind": kind,
        "data-name": name,
        "data-source": source,
        "data-owner": d.owner,
        "data-fence": d.fence,
        "data-value": d.value,
        title: source === "listing" ? "seen by comparing two listings (an end may be a release, an expiry or a force release)" : "from the events stream",
      },
      el("time", { datetime: at.toISOString() }, at.toLocaleTimeString()),
      " ",
      el("span", { class: "type" }, type),
      " ",
      el("span", { class: "name" }, name),
      kind !== "lock" ? " " : "",
      kindBadge(kind),
      " ",
      el("span", { class: "detail" }, ...parts.flatMap((p, i) => (i ? [" · ", p] : [p]))),
      source === "listing" ? el("span", { class: "via" }, " · listing") : "",
    );
    const list = $("events");
    list.prepend(item);
    while (list.children.length > EVENT_LOG) list.lastElementChild.remove();
  }

  // --- force release -------------------------------------------------------------------------------

  async function forceRelease(btn) {
    const { kind, name } = btn.dataset;
    const ok = window.confirm(
      kind === "election"
        ? `Take the lead of election “${name}” away?\n\nThe leader loses it at once (its token answers 410 from now on) and the first candidate is elected.`
        : `Force-release ${kind} “${name}”?\n\nEvery holder loses it at once (their tokens answer 410 from now on) and the first waiter gets it.`,
    );
    if (!ok) return;
    btn.disabled = true;
    try {
      const r = await call("DELETE", `${KINDS[kind].path}${encodeURIComponent(name)}?force=true`);
      setStatus("ok", `${new Date().toLocaleTimeString()}: force-released ${kind} ${name}: ${r.holds_removed} hold(s) removed.`, "action");
    } catch (err) {
      if (err.status === 401) askForKey(err.message);
      else setStatus("error", err.message, "action");
    }
    soon();
  }

  for (const id of ["locks", "semaphores", "elections"]) {
    $(id).addEventListener("click", (ev) => {
      const btn = ev.target.closest("button.force-release");
      if (btn) forceRelease(btn);
    });
  }

  let typing = 0;
  const prefixBox = $("prefix");
  prefixBox.value = new URLSearchParams(location.search).get("prefix") || "";
  prefixBox.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      const url = new URL(location.href);
      if (prefixBox.value.trim()) url.searchParams.set("prefix", prefixBox.value.trim());
      else url.searchParams.delete("prefix");
      history.replaceState(null, "", url);
      refresh();
    }, 300);
  });
  $("filter").addEventListener("submit", (ev) => {
    ev.preventDefault();
    refresh();
  });

  showKeyState();
  markLive();
  refresh();
})();
