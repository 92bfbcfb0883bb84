// leasegate dashboard: lists held locks (GET /locks, paged), the top lists (GET /admin/top),
// follows the events stream of the locks on the page (GET /locks/{name}/events) and force-releases
// a lock on request (DELETE /locks/{name}?force=true). No dependencies.
//
// Lock names and owners are user input: they reach the DOM only as text nodes and attribute
// values, never as HTML.
"use strict";

(() => {
  const REFRESH_MS = 2000; // re-list interval
  const SOON_MS = 150; // re-list delay after an event
  const PAGE_LIMIT = 200;
  const MAX_PAGES = 5; // follow next_cursor this far, then ask for a narrower prefix
  const EVENT_LOG = 30; // live events kept on the page
  const STREAM_RETRY_MS = 30000; // after a stream was refused
  const TOP_PATH = "/admin/top";
  const EVENTS = ["state", "granted", "handed-off", "released", "expired", "forced", "waiters"];

  const $ = (id) => document.getElementById(id);
  const body = document.body;
  const longHoldMs = Number(body.dataset.longHoldMs) || 600000;
  // ?live=0 turns the events streams off (polling only): for proxies that cut or buffer long
  // responses, and for headless snapshots, whose virtual clock stands still while a stream is open.
  const live = new URLSearchParams(location.search).get("live") !== "0";
  // Over HTTP/1.1 a browser opens at most 6 connections to a host and each stream keeps one, so
  // leave two for the listing; HTTP/2 carries every stream on one connection.
  const nav = performance.getEntriesByType("navigation")[0];
  const streamCap = !live ? 0 : nav && /^h[23]/.test(nav.nextHopProtocol) ? 20 : 4;

  const streams = new Map(); // lock name -> EventSource
  const refused = new Map(); // lock name -> time to try its stream again
  const flashUntil = new Map(); // lock name -> time its row stops flashing
  let shown = []; // the locks on the page, as last listed
  let timer = 0;
  let inflight = false;
  let again = false;

  // el builds an element; children that are not nodes become text nodes.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else e.setAttribute(k, String(v));
    }
    e.append(...children.map((c) => (c instanceof Node ? c : String(c))));
    return e;
  }

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

  // call sends one API request and returns its JSON body; a problem+json answer (or no answer)
  // becomes an Error whose message says what went wrong.
  async function call(method, path) {
    let res;
    try {
      res = await fetch(path, { method, headers: { Accept: "application/json" }, cache: "no-store" });
    } catch (err) {
      throw new Error(`${method} ${path}: the gateway did not answer (${err.message})`);
    }
    const text = await res.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!res.ok) {
      const p = data || {};
      let msg = `${method} ${path}: ${res.status} ${p.title || res.statusText}`;
      if (p.detail) msg += `: ${p.detail}`;
      for (const ip of p.invalid_params || []) msg += `; ${ip.name} ${ip.reason}`;
      if (p.request_id) msg += ` (request ${p.request_id})`;
      throw new Error(msg);
    }
    if (data === null) throw new Error(`${method} ${path}: the answer is not JSON`);
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

  async function listLocks(prefix) {
    const byName = new Map(); // SCAN may return a name twice
    let cursor = "";
    let pages = 0;
    do {
      const q = new URLSearchParams({ limit: String(PAGE_LIMIT) });
      if (prefix) q.set("prefix", prefix);
      if (cursor) q.set("cursor", cursor);
      const page = await call("GET", `/locks?${q}`);
      for (const l of page.locks || []) byName.set(l.lock, l);
      cursor = page.next_cursor || "";
      pages++;
    } while (cursor && pages < MAX_PAGES);
    const locks = [...byName.values()].sort((a, b) => (a.lock < b.lock ? -1 : a.lock > b.lock ? 1 : 0));
    return { prefix, locks, more: cursor !== "" };
  }

  function renderLocks({ prefix, locks, more }) {
    const now = Date.now();
    const rows = locks.map((l) => {
      const long = typeof l.age_ms === "number" && l.age_ms > longHoldMs;
      const cls = ["lock-row", long && "long-hold", l.waiters > 0 && "contended", (flashUntil.get(l.lock) || 0) > now && "flash"];
      const name = el("td", { class: "lock" }, el("span", { class: "name" }, l.lock));
      if (l.multilock) name.append(" ", el("span", { class: "badge multilock", title: `multi-lock ${l.multilock}` }, "multi-lock"));
      return el(
        "tr",
        {
          class: cls.filter(Boolean).join(" "),
          "data-lock": l.lock,
          "data-owner": l.owner ?? "",
          "data-mode": l.mode,
          "data-holders": l.holders ?? 1,
          "data-waiters": l.waiters ?? 0,
          "data-age-ms": l.age_ms,
          "data-long-hold": String(long),
        },
        name,
        el("td", { class: "owner", title: l.owner }, l.owner ?? ""),
        el("td", { class: "mode" }, el("span", { class: `badge ${l.mode}` }, l.mode)),
        el("td", { class: "holders num" }, l.holders ?? 1),
        el("td", { class: "fence num" }, l.fence ?? "–"),
        el("td", { class: "age num", title: `${l.age_ms} ms` }, duration(l.age_ms)),
        el("td", { class: "ttl num" }, duration(l.ttl_ms)),
        el("td", { class: `watchdog ${l.watchdog ? "on" : "off"}` }, l.watchdog ? "on" : "off"),
        el("td", { class: "waiters num" }, l.waiters ?? 0),
        el("td", { class: "actions" }, el("button", { type: "button", class: "force-release", "data-lock": l.lock, title: `Force-release ${l.lock}` }, "Force release")),
      );
    });
    $("lock-rows").replaceChildren(...rows);
    const empty = $("empty");
    empty.hidden = locks.length > 0;
    empty.textContent = prefix ? `No lock whose name starts with “${prefix}” is held.` : "No lock is held.";
    const longCount = locks.filter((l) => l.age_ms > longHoldMs).length;
    $("count").textContent =
      `${locks.length} held` + (longCount ? `, ${longCount} long` : "") + (more ? ` (first ${MAX_PAGES} pages: narrow the prefix)` : "");
  }

  function renderTop(top) {
    $("longest-held").replaceChildren(
      ...(top.longest_held || []).map((e) =>
        el(
          "li",
          { "data-lock": e.lock, class: e.age_ms > longHoldMs ? "long-hold" : undefined },
          el("span", { class: "name" }, e.lock, e.kind === "semaphore" ? el("span", { class: "badge" }, "semaphore") : ""),
          el("span", { class: "owner" }, e.owner ?? ""),
          el("span", { class: "age" }, duration(e.age_ms)),
        ),
      ),
    );
    $("most-contended").replaceChildren(
      ...(top.most_contended || []).map((e) =>
        el("li", { "data-lock": e.lock }, el("span", { class: "name" }, e.lock), el("span", { class: "count" }, e.count)),
      ),
    );
    $("window").textContent = top.window_s ? `last ${top.window_s} s` : "";
  }

  // refresh re-lists the locks and the top lists, then schedules the next re-list.
  async function refresh() {
    if (inflight) {
      again = true;
      return;
    }
    inflight = true;
    clearTimeout(timer);
    try {
      const prefix = $("prefix").value.trim();
      const [list, top] = await Promise.allSettled([listLocks(prefix), call("GET", TOP_PATH)]);
      const errors = [];
      if (list.status === "fulfilled") {
        shown = list.value.locks;
        renderLocks(list.value);
        syncStreams();
      } else {
        errors.push(list.reason.message);
      }
      if (top.status === "fulfilled") renderTop(top.value);
      else errors.push(top.reason.message);
      if (errors.length) setStatus("error", errors.join(" · "), "refresh");
      else clearStatus("refresh");
      body.dataset.state = list.status === "fulfilled" ? "ready" : "error";
      $("updated").textContent = new Date().toLocaleTimeString();
    } finally {
      inflight = false;
      if (again) {
        again = false;
        timer = setTimeout(refresh, 0);
      } else {
        timer = setTimeout(refresh, REFRESH_MS);
      }
    }
  }

  // soon re-lists shortly: an event said something changed.
  function soon() {
    if (inflight) {
      again = true;
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(refresh, SOON_MS);
  }

  // syncStreams keeps one events stream open per lock on the page, up to streamCap, preferring
  // locks someone waits for, then the oldest holds.
  function syncStreams() {
    const names = new Set(shown.map((l) => l.lock));
    for (const [name, es] of streams) {
      if (!names.has(name)) {
        es.close();
        streams.delete(name);
      }
    }
    const now = Date.now();
    const wanted = [...shown].sort((a, b) => (b.waiters || 0) - (a.waiters || 0) || (b.age_ms || 0) - (a.age_ms || 0));
    for (const l of wanted) {
      if (streams.size >= streamCap) break;
      if (!streams.has(l.lock) && (refused.get(l.lock) || 0) <= now) openStream(l.lock);
    }
    for (const row of $("lock-rows").rows) row.dataset.live = String(streams.has(row.dataset.lock));
    $("streams").textContent = live ? `live: ${streams.size} stream${streams.size === 1 ? "" : "s"}` : "live: off";
  }

  function openStream(name) {
    const es = new EventSource(`/locks/${encodeURIComponent(name)}/events`);
    for (const type of EVENTS) es.addEventListener(type, (ev) => onEvent(name, type, ev));
    es.onerror = () => {
      // EventSource reconnects by itself after a dropped stream; CLOSED means it was refused.
      if (es.readyState !== EventSource.CLOSED) return;
      es.close();
      if (streams.get(name) === es) streams.delete(name);
      refused.set(name, Date.now() + STREAM_RETRY_MS);
    };
    streams.set(name, es);
  }

  function rowOf(name) {
    for (const row of $("lock-rows").rows) if (row.dataset.lock === name) return row;
    return null;
  }

  function setCell(row, cls, value) {
    const cell = row.querySelector(`td.${cls}`);
    if (cell) cell.textContent = String(value);
  }

  function onEvent(name, type, ev) {
    if (type === "state") return; // the listing shows it already
    let d;
    try {
      d = JSON.parse(ev.data);
    } catch {
      return;
    }
    logEvent(type, name, d);
    const row = rowOf(name);
    if (row) {
      if ((type === "granted" || type === "handed-off") && d.owner !== undefined) {
        setCell(row, "owner", d.owner);
        row.dataset.owner = d.owner;
        if (d.fence !== undefined) setCell(row, "fence", d.fence);
      }
      if (typeof d.waiters === "number") {
        setCell(row, "waiters", d.waiters);
        row.dataset.waiters = String(d.waiters);
      }
      row.classList.add("flash");
    }
    flashUntil.set(name, Date.now() + 1500);
    soon();
  }

  function logEvent(type, name, d) {
    const parts = [];
    if (d.owner !== undefined) parts.push(d.owner);
    if (Array.isArray(d.owners)) parts.push(d.owners.join(", "));
    if (d.mode) parts.push(d.mode);
    if (d.fence !== undefined) parts.push(`fence ${d.fence}`);
    if (d.holds_removed !== undefined) parts.push(`${d.holds_removed} hold(s) removed`);
    if (typeof d.waiters === "number") parts.push(`${d.waiters} waiting`);
    const at = d.at ? new Date(d.at) : new Date();
    const item = el(
      "li",
      { class: `event ${type}`, "data-event": type, "data-lock": name },
      el("time", { datetime: at.toISOString() }, at.toLocaleTimeString()),
      " ",
      el("span", { class: "type" }, type),
      " ",
      el("span", { class: "name" }, name),
      " ",
      el("span", { class: "detail" }, parts.join(" · ")),
    );
    const list = $("events");
    list.prepend(item);
    while (list.children.length > EVENT_LOG) list.lastElementChild.remove();
  }

  async function forceRelease(btn) {
    const name = btn.dataset.lock;
    const ok = window.confirm(
      `Force-release lock “${name}”?\n\nEvery holder loses it at once (their tokens answer 410 from now on) and the first waiter gets it.`,
    );
    if (!ok) return;
    btn.disabled = true;
    try {
      const r = await call("DELETE", `/locks/${encodeURIComponent(name)}?force=true`);
      setStatus("ok", `${new Date().toLocaleTimeString()}: force-released ${name}: ${r.holds_removed} hold(s) removed.`, "action");
    } catch (err) {
      setStatus("error", err.message, "action");
    }
    soon();
  }

  $("lock-rows").addEventListener("click", (ev) => {
    const btn = ev.target.closest("button.force-release");
    if (btn) forceRelease(btn);
  });

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

  $("threshold").textContent = duration(longHoldMs);
  if (!live) $("events").dataset.off = "";
  refresh();
})();
