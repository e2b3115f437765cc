// berth's dashboard: plain JavaScript, no framework, no build step.
//
// It reads the JSON API with the admin token and follows the change log:
//
// - GET /v1/status: the whole model (the same document `berth status`
//   prints), fetched again after changes, a burst of changes coalesced into
//   one fetch;
// - GET /v1/events: the change log as Server-Sent Events. EventSource
//   cannot send an Authorization header, so the stream is read with fetch()
//   and a stream reader;
// - GET /v1/zones, GET /v1/applications/{app}/constraints: what the status
//   does not carry;
// - POST /v1/machines/retry and /v1/zones/{zone}/enable|disable: the
//   page's actions, the same requests `berth retry-provisioning` and
//   `berth enable-zone|disable-zone` send.
//
// Machine tiles are kept by machine id and only those whose status changed
// are rebuilt, a frame's worth at a time (requestAnimationFrame), so that
// a model of 10,000 machines stays responsive. Every piece of the status
// goes into the page as text (textContent), never as HTML.

"use strict";

(() => {
  /** Where the token is kept: this tab only, gone when it closes. */
  const TOKEN_KEY = "berth.admin-token";
  /** The shortest wait before fetching the status again after a change,
   * so a burst of changes makes one fetch. */
  const REFRESH_MIN_MS = 100;
  /** The longest: with one fetch at a time, the page is never more than
   * about this plus two fetches behind. */
  const REFRESH_MAX_MS = 250;
  /** The wait before fetching again after a fetch failed. */
  const REFRESH_RETRY_MS = 2000;
  /** How long tile work may take in one frame before yielding. */
  const FRAME_BUDGET_MS = 12;
  /** The same while thousands of tiles wait: each frame also lays out the
   * whole grid, however little changed in it, so fewer and fuller frames
   * finish sooner. */
  const BULK_FRAME_BUDGET_MS = 50;
  const BULK_TILES = 2000;
  /** Waits between reconnections of the event stream. */
  const RECONNECT_FIRST_MS = 500;
  const RECONNECT_MAX_MS = 10000;
  /** Waits before reading an application's constraints again after a read
   * failed (a 503 while the controller sheds load, say), doubling from the
   * first to the longest. */
  const CONSTRAINTS_RETRY_FIRST_MS = 2000;
  const CONSTRAINTS_RETRY_MAX_MS = 30000;
  /** The most machines in error listed one by one; Retry all covers the rest. */
  const ERRORS_SHOWN = 200;
  /** The most units listed under one application. */
  const UNITS_SHOWN = 500;
  /** The column for machines not in a zone yet (pending, or in error). */
  const NO_ZONE = "";
  /** How a failed status read is announced. */
  const STATUS_UNREADABLE = "Cannot read the status";
  /** How a refused event stream is announced. */
  const STREAM_REFUSED = "Cannot follow changes live";
  /** What the sign-in form says when the controller refuses the token. */
  const REFUSED =
    "The controller refused that token (401): it is not this controller's admin token, " +
    "or the token was rotated since.";

  const $ = (id) => document.getElementById(id);

  /** Makes an element with a class and text. */
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  // -------------------------------------------------------------------------
  // The session: the token and everything started with it. Signing out
  // bumps `session.generation`, which ends every loop of the old session.

  const session = {
    token: null,
    generation: 0,
    events: null, // the AbortController of the open event stream
  };

  class Unauthorized extends Error {}

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** Calls the API with the token; answers the parsed JSON (null for 204).
   * A 401 signs out; any other failure throws an ApiError with the
   * controller's own message. */
  async function api(method, path, body) {
    const generation = session.generation;
    const headers = { Authorization: `Bearer ${session.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
      });
    } catch (e) {
      throw new ApiError(0, `cannot reach the controller (${e.message})`);
    }
    if (response.status === 401) {
      if (generation === session.generation) signOut(REFUSED);
      throw new Unauthorized("unauthorized");
    }
    if (!response.ok) throw new ApiError(response.status, await errorOf(response));
    return response.status === 204 ? null : response.json();
  }

  /** What the controller says in a failed response: its JSON error's
   * message, or else the status line. */
  async function errorOf(response) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const error = await response.json();
      if (error && error.error && error.error.message) message = error.error.message;
    } catch (_) {
      // Not the API's JSON error: keep the status line.
    }
    return message;
  }

  /** How long a message that is not an error stays up. */
  const ANNOUNCE_MS = 8000;
  let announceTimer = null;

  /** Says something in the live region (read out by screen readers).
   * Errors stay until the next message; the rest go after a while. */
  function announce(text, kind) {
    const region = $("announce");
    region.dataset.kind = kind || "info";
    region.textContent = text;
    clearTimeout(announceTimer);
    if (kind !== "error") {
      announceTimer = setTimeout(() => {
        region.textContent = "";
      }, ANNOUNCE_MS);
    }
  }

  /** The connection indicator; `why`, when given, is what the controller
   * said when it refused the stream. */
  function setLive(on, why) {
    const live = $("live");
    live.dataset.live = on ? "on" : "off";
    live.textContent = on ? "live" : "reconnecting";
    live.title = why || "";
  }

  // -------------------------------------------------------------------------
  // Signing in and out

  /** The token in the address's fragment (`/#token=...`), which browsers
   * never send to the server; it is removed from the address bar (and
   * history) at once. */
  function tokenFromFragment() {
    const fragment = window.location.hash.replace(/^#/, "");
    if (!fragment) return null;
    const token = new URLSearchParams(fragment).get("token");
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
    return token && token.trim() ? token.trim() : null;
  }

  function show(view) {
    document.body.dataset.view = view;
    $("sign-in").hidden = view !== "sign-in";
    $("dashboard").hidden = view !== "dashboard";
    $("sign-out").hidden = view !== "dashboard";
    $("model").hidden = view !== "dashboard";
    $("live").hidden = view !== "dashboard";
    if (view !== "dashboard") $("cost").hidden = true;
  }

  /** The sign-in form, saying `error` if given, with `token` (if given)
   * already in its field. */
  function showSignIn(error, token) {
    show("sign-in");
    const message = $("sign-in-error");
    message.textContent = error || "";
    message.hidden = !error;
    const input = $("token");
    input.value = token || "";
    input.focus();
  }

  /** Tries `token` on the status; keeps it only if the controller takes it. */
  async function signIn(token) {
    signOutQuietly();
    session.token = token;
    const generation = session.generation;
    let status;
    try {
      status = await api("GET", "/v1/status");
    } catch (e) {
      // A refused token has already signed out, saying why. Any other
      // failure leaves the token in the form, to sign in with again.
      if (e instanceof Unauthorized || generation !== session.generation) return;
      session.token = null;
      showSignIn(`Cannot sign in: ${e.message}. Try signing in again.`, token);
      return;
    }
    if (generation !== session.generation) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("sign-in-error").hidden = true;
    show("dashboard");
    announce("Signed in.");
    apply(status);
    refreshZones();
    follow(generation, status.model.revision);
  }

  /** Ends the session's loops and forgets its state, without a word. */
  function signOutQuietly() {
    session.generation += 1;
    session.token = null;
    if (session.events) session.events.abort();
    session.events = null;
    clearTimeout(refresh.timer);
    Object.assign(refresh, { timer: null, inFlight: false, again: false, zones: false });
    resetView();
    setLive(false);
    $("live").textContent = "offline";
    // The old session's errors go with it.
    if ($("announce").dataset.kind === "error") announce("");
  }

  function signOut(error) {
    signOutQuietly();
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn(error);
    if (!error) announce("Signed out.");
  }

  // -------------------------------------------------------------------------
  // Following the change log

  /** Reads the event stream after `since`, for as long as the session
   * lasts, reconnecting from the last revision seen when it drops. While
   * the controller refuses the stream, the status is read again at each
   * try instead, so that the view does not stand still. */
  async function follow(generation, since) {
    let wait = RECONNECT_FIRST_MS;
    let reconnecting = false;
    while (generation === session.generation) {
      const abort = new AbortController();
      session.events = abort;
      let refused = null;
      try {
        const response = await fetch(`/v1/events?since=${since}`, {
          headers: { Authorization: `Bearer ${session.token}`, Accept: "text/event-stream" },
          cache: "no-store",
          credentials: "omit",
          signal: abort.signal,
        });
        if (response.status === 401) {
          if (generation === session.generation) signOut(REFUSED);
          return;
        }
        if (response.status === 400) {
          // The change log has not reached what this page saw: the
          // controller's store was restored or replaced. Start again from
          // its status, its zones and its applications' constraints.
          const status = await api("GET", "/v1/status");
          if (generation !== session.generation) return;
          constraints.known.clear();
          apply(status);
          since = status.model.revision;
          await refreshZones();
          continue;
        }
        if (!response.ok || !response.body) {
          refused = await errorOf(response);
        } else {
          setLive(true);
          const region = $("announce");
          if (region.textContent.startsWith(STREAM_REFUSED)) announce("");
          wait = RECONNECT_FIRST_MS;
          // The stream resumes after the last revision seen, so nothing is
          // missed; read the status, the zones and the constraints again
          // too, in case the controller restarted on other state.
          if (reconnecting) {
            refresh.zones = true;
            constraints.known.clear();
            requestRefresh();
          }
          reconnecting = true;
          since = await readEvents(response.body, since, generation);
        }
      } catch (_) {
        // Dropped, or the controller cannot be reached: try again below.
      }
      if (generation !== session.generation) return;
      setLive(false, refused);
      if (refused !== null) {
        // Refused (a 503 while the controller has as many streams open as
        // it allows): say why, and read the status meanwhile.
        const text = `${STREAM_REFUSED}: ${refused}`;
        if ($("announce").textContent !== text) announce(text, "error");
        refresh.zones = true;
        requestRefresh();
      }
      await new Promise((resolve) => setTimeout(resolve, wait));
      wait = Math.min(wait * 2, RECONNECT_MAX_MS);
    }
  }

  /** Reads `text/event-stream` frames from `body` until it ends; answers
   * the last revision seen. Frames end with a blank line; a line starting
   * with `:` is a comment (the opening line, keep-alives). */
  async function readEvents(body, since, generation) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || generation !== session.generation) return since;
      // Every complete frame in what has arrived; the rest waits for more.
      const frames = (buffer + value.replace(/\r\n?/g, "\n")).split("\n\n");
      buffer = frames.pop();
      for (const frame of frames) {
        const data = frame
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trimStart())
          .join("\n");
        if (!data) continue;
        let change;
        try {
          change = JSON.parse(data);
        } catch (_) {
          continue;
        }
        if (typeof change.revision === "number") since = change.revision;
        onChange(change);
      }
    }
  }

  /** One change: mark what it touches and fetch the status again soon. */
  function onChange(change) {
    if (change.entity === "zone") refresh.zones = true;
    if (change.entity === "application") constraints.stale.add(change.id);
    requestRefresh();
  }

  // The status is fetched again after changes, never more than one fetch at
  // a time: changes that arrive while one is in flight ask for one more
  // after it. The wait before a fetch grows with how long the last one
  // took (a large model's status is megabytes), within
  // REFRESH_MIN_MS..REFRESH_MAX_MS.
  const refresh = { timer: null, inFlight: false, again: false, zones: false, lastMs: 0 };

  function requestRefresh() {
    if (refresh.inFlight) {
      refresh.again = true;
      return;
    }
    if (refresh.timer !== null) return;
    const wait = Math.min(REFRESH_MAX_MS, Math.max(REFRESH_MIN_MS, refresh.lastMs));
    refresh.timer = setTimeout(runRefresh, wait);
  }

  async function runRefresh() {
    const generation = session.generation;
    refresh.timer = null;
    refresh.inFlight = true;
    refresh.again = false;
    const started = performance.now();
    try {
      const status = await api("GET", "/v1/status");
      if (generation !== session.generation) return;
      performance.measure("berth:status-fetched", { start: started });
      const applying = performance.now();
      apply(status);
      performance.measure("berth:status-applied", { start: applying });
      // The status reads again: take back the message saying it did not.
      const region = $("announce");
      if (region.textContent.startsWith(STATUS_UNREADABLE)) announce("");
      if (refresh.zones) {
        refresh.zones = false;
        await refreshZones();
      }
    } catch (e) {
      if (!(e instanceof Unauthorized) && generation === session.generation) {
        // Try again a little later (the next change or reconnection may
        // come sooner).
        announce(`${STATUS_UNREADABLE}: ${e.message}`, "error");
        setTimeout(() => {
          if (generation === session.generation) requestRefresh();
        }, REFRESH_RETRY_MS);
      }
    } finally {
      if (generation === session.generation) {
        refresh.lastMs = performance.now() - started;
        refresh.inFlight = false;
        if (refresh.again) requestRefresh();
      }
    }
  }

  // -------------------------------------------------------------------------
  // What the page shows, derived from the status

  /** The last status applied. */
  let current = null;

  /** A machine's state for its tile: the status's two words (Juju's agent
   * status and instance status) folded into one. */
  function stateOf(machine) {
    const agent = machine["juju-status"] ? machine["juju-status"].current : "";
    const instance = machine["machine-status"] ? machine["machine-status"].current : "";
    switch (agent) {
      case "error":
        return "error";
      case "started":
        return "started";
      case "down":
        return "down";
      case "stopped":
        return instance === "stopped" ? "stopped" : "stopping";
      case "pending":
        if (instance === "allocating") return "starting";
        if (instance === "running") return "awaiting-agent";
        return "pending";
      default:
        // A word this page does not know yet: shown as it is, uncoloured.
        return agent || "unknown";
    }
  }

  /** The zone in a machine's hardware (`... availability-zone=sim-a`);
   * machines without one (not started yet, or in error) have none. */
  function zoneOf(machine) {
    const hardware = machine.hardware || "";
    const word = hardware.split(/\s+/).find((w) => w.startsWith("availability-zone="));
    return word ? word.slice("availability-zone=".length) : NO_ZONE;
  }

  /** Orders machine ids as berth does: `2` before `10`, a host before its
   * containers (`3` before `3/lxd/0`). */
  function compareIds(a, b) {
    const x = a.split("/");
    const y = b.split("/");
    for (let i = 0; i < Math.min(x.length, y.length); i += 1) {
      if (x[i] === y[i]) continue;
      const n = Number(x[i]);
      const m = Number(y[i]);
      if (Number.isInteger(n) && Number.isInteger(m)) return n - m;
      return x[i] < y[i] ? -1 : 1;
    }
    return x.length - y.length;
  }

  /** Applies a status: header, machines in error, tiles, applications. */
  function apply(status) {
    current = status;
    document.body.dataset.revision = String(status.model.revision);
    renderModel(status.model);
    const unitsOn = unitsByMachine(status.applications || {});
    const machines = status.machines || {};
    const errors = [];
    const perZone = new Map();
    let count = 0;
    for (const [id, machine] of Object.entries(machines)) {
      const zone = zoneOf(machine);
      perZone.set(zone, (perZone.get(zone) || 0) + 1);
      count += 1;
      if (stateOf(machine) === "error") errors.push([id, machine]);
      const containers = machine.containers || {};
      for (const [cid, container] of Object.entries(containers)) {
        count += 1;
        if (stateOf(container) === "error") errors.push([cid, container]);
      }
      queueTile(id, machine, zone, unitsOn);
    }
    // Tiles of machines that are gone.
    for (const id of tiles.keys()) {
      if (!Object.hasOwn(machines, id)) queued.set(id, null);
    }
    for (const id of queued.keys()) {
      if (!Object.hasOwn(machines, id)) queued.set(id, null);
    }
    $("machine-count").textContent = String(count);
    errors.sort((a, b) => compareIds(a[0], b[0]));
    renderErrors(errors);
    renderColumns(perZone);
    renderApplications(status.applications || {});
    scheduleFrame();
  }

  function renderModel(model) {
    $("model-name").textContent = model.name;
    $("model-cloud").textContent = model.cloud;
    $("model-revision").textContent = String(model.revision);
    // What the machines cost an hour, in US dollars: an exact decimal
    // string (`"0.0047"`), shown as it is, as `berth status` shows it.
    const cost = model["hourly-cost"];
    const costLine = $("cost");
    if ((typeof cost === "string" && cost !== "") || typeof cost === "number") {
      costLine.textContent = `$${cost} an hour`;
      costLine.hidden = false;
    } else {
      costLine.textContent = "";
      costLine.hidden = true;
    }
  }

  /** Unit names by the machine they are on; a subordinate is on its
   * principal's machine. */
  function unitsByMachine(applications) {
    const on = new Map();
    const add = (machine, name) => {
      if (!machine) return;
      if (!on.has(machine)) on.set(machine, []);
      on.get(machine).push(name);
    };
    for (const application of Object.values(applications)) {
      for (const [name, unit] of Object.entries(application.units || {})) {
        add(unit.machine, name);
        for (const sub of Object.keys(unit.subordinates || {})) add(unit.machine, sub);
      }
    }
    return on;
  }

  // -------------------------------------------------------------------------
  // Machine tiles, kept by machine id

  /** id -> { element, signature, zone } for each top-level machine shown. */
  const tiles = new Map();
  /** id -> what its tile must become (null: removed), applied frame by frame. */
  const queued = new Map();
  /** zone -> its column: { section, tiles, head parts }. */
  const columns = new Map();
  /** The zones the controller lists, in its order: name -> zone. */
  let zones = new Map();
  let frameRequested = false;

  function queueTile(id, machine, zone, unitsOn) {
    const units = [unitsOn.get(id) || []];
    for (const cid of Object.keys(machine.containers || {})) units.push(unitsOn.get(cid) || []);
    // Whatever the tile shows, as one string: unchanged means untouched.
    const signature = `${zone}\u0000${JSON.stringify(machine)}\u0000${JSON.stringify(units)}`;
    const shown = tiles.get(id);
    if (shown && shown.signature === signature) {
      queued.delete(id);
      return;
    }
    queued.set(id, { machine, zone, unitsOn: units, signature });
  }

  function scheduleFrame() {
    if (frameRequested || queued.size === 0) return;
    frameRequested = true;
    requestAnimationFrame(drainQueue);
  }

  /** Applies queued tile changes until the frame's budget is spent. */
  function drainQueue() {
    frameRequested = false;
    const started = performance.now();
    const budget = queued.size > BULK_TILES ? BULK_FRAME_BUDGET_MS : FRAME_BUDGET_MS;
    for (const [id, next] of queued) {
      queued.delete(id);
      if (next === null) removeTile(id);
      else placeTile(id, next);
      if (performance.now() - started > budget) break;
    }
    updateEmptyColumns();
    performance.measure("berth:tiles-drawn", { start: started });
    if (queued.size > 0) scheduleFrame();
    else document.body.dataset.tiles = "settled";
  }

  function removeTile(id) {
    const shown = tiles.get(id);
    if (!shown) return;
    shown.element.remove();
    tiles.delete(id);
  }

  function placeTile(id, next) {
    let shown = tiles.get(id);
    if (!shown) {
      shown = { element: el("div", "tile"), signature: "", zone: null };
      shown.element.dataset.machine = id;
      tiles.set(id, shown);
    }
    fillTile(shown.element, id, next.machine, next.unitsOn[0]);
    const containers = shown.element.querySelector(".containers");
    let index = 1;
    for (const [cid, container] of Object.entries(next.machine.containers || {})) {
      const inner = el("div", "tile container");
      inner.dataset.machine = cid;
      fillTile(inner, cid, container, next.unitsOn[index] || []);
      containers.append(inner);
      index += 1;
    }
    containers.hidden = index === 1;
    shown.signature = next.signature;
    shown.element.dataset.zone = next.zone;
    if (shown.zone !== next.zone || !shown.element.isConnected) {
      insertInOrder(column(next.zone).tiles, shown.element, id);
      shown.zone = next.zone;
    }
    document.body.dataset.tiles = "drawing";
  }

  /** Rebuilds a tile's content: id, state, instance type, units. */
  function fillTile(tile, id, machine, units) {
    const state = stateOf(machine);
    tile.dataset.state = state;
    const head = el("div", "tile-head");
    head.append(el("span", "tile-id", id), el("span", "tile-state", state));
    const type = el("div", "tile-type", machine["instance-type"] || "no instance yet");
    const unitLine = el("div", "tile-units", units.length ? units.join(" ") : "no units");
    const parts = [head, type, unitLine];
    if (!tile.classList.contains("container")) parts.push(el("div", "containers"));
    tile.replaceChildren(...parts);
    // The details, on hover and for assistive technology.
    const details = [`machine ${id}: ${state}`];
    if (machine["instance-id"] && machine["instance-id"] !== "pending") details.push(machine["instance-id"]);
    if (machine.hardware) details.push(machine.hardware);
    if (machine.constraints) details.push(`constraints ${machine.constraints}`);
    const message = machine["machine-status"] && machine["machine-status"].message;
    if (message) details.push(message);
    tile.title = details.join("\n");
  }

  /** Puts a tile among its column's tiles in machine id order (the usual
   * case, a new highest id, is an append). */
  function insertInOrder(parent, tile, id) {
    tile.remove();
    const kids = parent.children;
    const last = kids.length - 1;
    if (last < 0 || compareIds(kids[last].dataset.machine, id) < 0) {
      parent.append(tile);
      return;
    }
    let low = 0;
    let high = kids.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (compareIds(kids[middle].dataset.machine, id) < 0) low = middle + 1;
      else high = middle;
    }
    parent.insertBefore(tile, kids[low] || null);
  }

  // -------------------------------------------------------------------------
  // Zone columns

  /** The column for `zone`, made when first needed. */
  function column(zone) {
    let found = columns.get(zone);
    if (found) return found;
    const section = el("section", "zone");
    section.dataset.zone = zone;
    const head = el("div", "zone-head");
    const title = el("h3", "", zone === NO_ZONE ? "Not in a zone yet" : zone);
    const count = el("span", "count", "0");
    const badge = el("span", "zone-badge");
    badge.hidden = true;
    const toggle = el("button", "secondary");
    toggle.type = "button";
    toggle.hidden = true;
    toggle.addEventListener("click", () => toggleZone(zone, toggle));
    head.append(title, count, badge, toggle);
    const list = el("div", "tiles");
    section.setAttribute("aria-label", zone === NO_ZONE ? "Machines not in a zone yet" : `Zone ${zone}`);
    section.append(head, list);
    found = { section, tiles: list, count, badge, toggle, machines: 0 };
    columns.set(zone, found);
    describeZone(zone);
    arrangeColumns();
    return found;
  }

  /** Columns in order: the controller's zones as it lists them, other
   * zones machines are in by name, then the machines not in a zone. */
  function arrangeColumns() {
    const known = [...zones.keys()];
    const names = [...columns.keys()].sort((a, b) => {
      if (a === NO_ZONE || b === NO_ZONE) return a === NO_ZONE ? 1 : -1;
      const i = known.indexOf(a);
      const j = known.indexOf(b);
      if (i >= 0 && j >= 0) return i - j;
      if (i >= 0 || j >= 0) return i >= 0 ? -1 : 1;
      return a < b ? -1 : 1;
    });
    const grid = $("zone-grid");
    names.forEach((name, index) => {
      const section = columns.get(name).section;
      if (grid.children[index] !== section) grid.insertBefore(section, grid.children[index] || null);
    });
  }

  /** The column's head: availability and the enable/disable button. */
  function describeZone(name) {
    const col = columns.get(name);
    if (!col || name === NO_ZONE) return;
    const zone = zones.get(name);
    if (!zone) {
      col.badge.textContent = "";
      col.badge.hidden = true;
      col.toggle.hidden = true;
      return;
    }
    col.section.dataset.available = String(zone.available);
    col.section.dataset.disabled = String(zone.disabled);
    col.badge.hidden = false;
    col.badge.textContent = zone.available ? "available" : zone.reason || "unavailable";
    col.toggle.hidden = false;
    col.toggle.disabled = false;
    col.toggle.textContent = zone.disabled ? "Enable" : "Disable";
    col.toggle.setAttribute("aria-label", `${zone.disabled ? "Enable" : "Disable"} zone ${name}`);
  }

  /** Machine counts per column, from the status (not from tiles drawn). */
  function renderColumns(perZone) {
    for (const zone of perZone.keys()) column(zone);
    for (const [zone, col] of columns) {
      const machines = perZone.get(zone) || 0;
      if (machines === col.machines && col.count.textContent === String(machines)) continue;
      col.machines = machines;
      col.count.textContent = String(machines);
      col.count.setAttribute("aria-label", `${machines} machines`);
    }
    updateEmptyColumns();
  }

  /** Hides the no-zone column while nothing is in it; zones always show. */
  function updateEmptyColumns() {
    const col = columns.get(NO_ZONE);
    if (col) col.section.hidden = col.machines === 0 && col.tiles.children.length === 0;
  }

  async function refreshZones() {
    const generation = session.generation;
    let list;
    try {
      list = await api("GET", "/v1/zones");
    } catch (e) {
      if (!(e instanceof Unauthorized)) announce(`Cannot read the zones: ${e.message}`, "error");
      return;
    }
    if (generation !== session.generation) return;
    zones = new Map(list.map((zone) => [zone.name, zone]));
    for (const name of zones.keys()) column(name);
    for (const name of columns.keys()) describeZone(name);
    arrangeColumns();
  }

  async function toggleZone(name, button) {
    const zone = zones.get(name);
    if (!zone) return;
    const action = zone.disabled ? "enable" : "disable";
    button.disabled = true;
    try {
      const updated = await api("POST", `/v1/zones/${encodeURIComponent(name)}/${action}`);
      zones.set(name, updated);
      announce(`Zone ${name} ${action}d.`);
    } catch (e) {
      if (!(e instanceof Unauthorized)) announce(`Cannot ${action} zone ${name}: ${e.message}`, "error");
    } finally {
      describeZone(name);
    }
  }

  // -------------------------------------------------------------------------
  // Machines in error, kept by machine id so that what is typed in a retry
  // form survives updates.

  /** id -> { item, message } */
  const errorItems = new Map();

  function renderErrors(errors) {
    $("error-count").textContent = String(errors.length);
    $("no-errors").hidden = errors.length > 0;
    $("error-actions").hidden = errors.length === 0;
    const hidden = errors.length - ERRORS_SHOWN;
    $("errors-more").textContent =
      hidden > 0 ? `${hidden} more not listed here; Retry all retries them too.` : "";
    const shown = errors.slice(0, ERRORS_SHOWN);
    const keep = new Set(shown.map(([id]) => id));
    for (const [id, entry] of errorItems) {
      if (!keep.has(id)) {
        entry.item.remove();
        errorItems.delete(id);
      }
    }
    const list = $("error-list");
    let previous = null;
    for (const [id, machine] of shown) {
      let entry = errorItems.get(id);
      if (!entry) {
        entry = errorItem(id);
        errorItems.set(id, entry);
      }
      const message = (machine["machine-status"] && machine["machine-status"].message) ||
        (machine["juju-status"] && machine["juju-status"].message) || "no message";
      entry.message.textContent = message;
      entry.constraints.textContent = machine.constraints ? ` (constraints: ${machine.constraints})` : "";
      const expected = previous ? previous.nextSibling : list.firstChild;
      if (expected !== entry.item) list.insertBefore(entry.item, expected);
      previous = entry.item;
    }
  }

  function errorItem(id) {
    const item = el("li", "error-item");
    item.dataset.errorMachine = id;
    const line = el("p");
    const message = el("span", "error-message");
    const constraints = el("span", "quiet");
    line.append(el("strong", "", `Machine ${id}: `), message, constraints);
    const form = el("form", "retry-form");
    const inputId = `retry-constraints-${id.replace(/[^A-Za-z0-9]/g, "-")}`;
    const label = el("label", "", "New constraints (optional)");
    label.htmlFor = inputId;
    const input = el("input");
    input.id = inputId;
    input.name = "constraints";
    input.placeholder = "mem=4G cores=2";
    input.autocomplete = "off";
    input.spellcheck = false;
    const button = el("button", "", "Retry");
    button.type = "submit";
    button.setAttribute("aria-label", `Retry machine ${id}`);
    const outcome = el("span", "retry-outcome");
    form.append(label, input, button, outcome);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      retry([id], input.value.trim(), button, outcome);
    });
    item.append(line, form);
    return { item, message, constraints };
  }

  /** `berth retry-provisioning ID... [--constraints C]` (or `--all`). */
  async function retry(machines, constraints, button, outcome) {
    const body = machines === "all" ? { all: true } : { machines };
    if (constraints) body.constraints = constraints;
    button.disabled = true;
    if (outcome) outcome.textContent = "";
    try {
      const answer = await api("POST", "/v1/machines/retry", body);
      const warnings = answer.warnings && answer.warnings.length
        ? ` (ignored by this cloud: ${answer.warnings.join(", ")})`
        : "";
      announce(`Retrying machine${answer.machines.length === 1 ? "" : "s"} ${answer.machines.join(", ")}${warnings}.`);
    } catch (e) {
      if (e instanceof Unauthorized) return;
      const what = machines === "all" ? "all machines" : `machine ${machines.join(", ")}`;
      if (outcome) outcome.textContent = e.message;
      announce(`Cannot retry ${what}: ${e.message}`, "error");
    } finally {
      button.disabled = false;
    }
  }

  // -------------------------------------------------------------------------
  // Applications

  /** Application constraints, which the status does not carry: fetched
   * once per application and again after it changes. A read that failed
   * is tried again only after a wait, which doubles with each failure in a
   * row: `failed` holds name -> { wait, waiting }. */
  const constraints = { known: new Map(), stale: new Set(), fetching: new Set(), failed: new Map() };
  let applicationsSignature = "";
  /** name -> { row, signature } for each application shown. */
  const applicationRows = new Map();
  /** Applications whose unit list is open. */
  const openUnits = new Set();

  function renderApplications(applications) {
    const names = Object.keys(applications);
    for (const name of constraints.failed.keys()) {
      if (!Object.hasOwn(applications, name)) {
        constraints.failed.delete(name);
        constraints.stale.delete(name);
      }
    }
    for (const name of names) {
      if ((!constraints.known.has(name) || constraints.stale.has(name)) &&
        !constraints.fetching.has(name) && !waitingForConstraints(name)) {
        fetchConstraints(name);
      }
    }
    const signature = JSON.stringify(applications) + JSON.stringify(names.map(constraintText));
    if (signature === applicationsSignature) return;
    applicationsSignature = signature;

    $("application-count").textContent = String(names.length);
    $("no-applications").hidden = names.length > 0;
    $("application-table").hidden = names.length === 0;

    // Subordinate units, counted by application, wherever they are shown;
    // and which subordinates each principal has.
    const subordinateUnits = new Map();
    const subordinatesOf = new Map();
    for (const [name, application] of Object.entries(applications)) {
      for (const unit of Object.values(application.units || {})) {
        for (const sub of Object.keys(unit.subordinates || {})) {
          const app = sub.split("/")[0];
          subordinateUnits.set(app, (subordinateUnits.get(app) || 0) + 1);
        }
      }
      for (const principal of application["subordinate-to"] || []) {
        if (!subordinatesOf.has(principal)) subordinatesOf.set(principal, []);
        subordinatesOf.get(principal).push(name);
      }
    }

    // Rows are kept by application and rebuilt only when what they show
    // changed, so an open unit list or a focused control stays put.
    const body = $("application-rows");
    for (const [name, shown] of applicationRows) {
      if (!Object.hasOwn(applications, name)) {
        shown.row.remove();
        applicationRows.delete(name);
      }
    }
    let previous = null;
    for (const name of names) {
      const application = applications[name];
      const rowSignature = JSON.stringify([
        application,
        constraintText(name),
        subordinateUnits.get(name) || 0,
        subordinatesOf.get(name) || [],
      ]);
      let shown = applicationRows.get(name);
      if (!shown || shown.signature !== rowSignature) {
        const row = applicationRow(name, application, subordinateUnits, subordinatesOf);
        if (shown) shown.row.replaceWith(row);
        shown = { row, signature: rowSignature };
        applicationRows.set(name, shown);
      }
      const expected = previous ? previous.nextSibling : body.firstChild;
      if (expected !== shown.row) body.insertBefore(shown.row, expected);
      previous = shown.row;
    }
  }

  /** One application's row. */
  function applicationRow(name, application, subordinateUnits, subordinatesOf) {
    const isSubordinate = (application["subordinate-to"] || []).length > 0;
    const own = Object.keys(application.units || {}).length;
    const scale = own + (subordinateUnits.get(name) || 0);
    const row = el("tr");
    row.dataset.application = name;
    const title = el("th", "", name);
    title.scope = "row";
    const status = application["application-status"] || {};
    const life = application.life ? ` (${application.life})` : "";
    const subordinates = isSubordinate
      ? `subordinate to ${application["subordinate-to"].join(", ")}`
      : (subordinatesOf.get(name) || []).join(", ") || "none";
    const scaleCell = el("td", "scale", String(scale));
    scaleCell.dataset.scale = String(scale);
    row.append(
      title,
      el("td", "", `${application.charm} (${application["charm-origin"]}, rev ${application["charm-rev"]})`),
      el("td", "", `${status.current || "unknown"}${status.message ? `: ${status.message}` : ""}${life}`),
      scaleCell,
      el("td", "constraints", constraintText(name)),
      el("td", "", subordinates),
      unitsCell(name, application),
    );
    return row;
  }

  /** The units, folded: listed only while open, as there may be thousands. */
  function unitsCell(name, application) {
    const cell = el("td");
    const units = Object.entries(application.units || {});
    if (units.length === 0) {
      cell.textContent = "none";
      return cell;
    }
    const details = el("details");
    details.append(el("summary", "", `${units.length} unit${units.length === 1 ? "" : "s"}`));
    const fill = () => {
      if (details.querySelector("ul")) return;
      const list = el("ul", "units");
      for (const [unitName, unit] of units.slice(0, UNITS_SHOWN)) list.append(unitItem(unitName, unit));
      if (units.length > UNITS_SHOWN) list.append(el("li", "quiet", `and ${units.length - UNITS_SHOWN} more`));
      details.append(list);
    };
    details.addEventListener("toggle", () => {
      if (details.open) {
        openUnits.add(name);
        fill();
      } else {
        openUnits.delete(name);
      }
    });
    if (openUnits.has(name)) {
      details.open = true;
      fill();
    }
    cell.append(details);
    return cell;
  }

  function unitItem(name, unit) {
    const where = unit.machine ? ` on machine ${unit.machine}` : "";
    const agent = unit["juju-status"] ? unit["juju-status"].current : "";
    const workload = unit["workload-status"] ? unit["workload-status"].current : "";
    const item = el("li", "", `${name}${where}: ${agent} / ${workload}`);
    const subordinates = Object.entries(unit.subordinates || {});
    if (subordinates.length) {
      const list = el("ul", "units");
      for (const [subName, sub] of subordinates) list.append(unitItem(subName, sub));
      item.append(list);
    }
    return item;
  }

  /** What the constraints cell says: the last constraints read, "…"
   * before the first read, or "unavailable" while it fails. */
  function constraintText(name) {
    if (constraints.known.has(name)) return constraints.known.get(name) || "none";
    return constraints.failed.has(name) ? "unavailable" : "…";
  }

  /** Whether a failed read of `name`'s constraints is waiting to be tried
   * again. */
  function waitingForConstraints(name) {
    const failure = constraints.failed.get(name);
    return failure !== undefined && failure.waiting;
  }

  async function fetchConstraints(name) {
    const generation = session.generation;
    constraints.fetching.add(name);
    constraints.stale.delete(name);
    try {
      const answer = await api("GET", `/v1/applications/${encodeURIComponent(name)}/constraints`);
      if (generation !== session.generation) return;
      constraints.known.set(name, answer.constraints);
      constraints.failed.delete(name);
    } catch (e) {
      if (generation !== session.generation) return;
      // Refused (a 503 while the controller sheds load), or removed
      // meanwhile (a 404, and the next status drops it): keep what was
      // read before, and try again after a wait, not at once.
      const before = constraints.failed.get(name);
      const wait = before ? Math.min(before.wait * 2, CONSTRAINTS_RETRY_MAX_MS) : CONSTRAINTS_RETRY_FIRST_MS;
      const failure = { wait, waiting: true };
      constraints.failed.set(name, failure);
      constraints.stale.add(name);
      setTimeout(() => {
        if (generation !== session.generation || constraints.failed.get(name) !== failure) return;
        failure.waiting = false;
        if (current) renderApplications(current.applications || {});
      }, wait);
    } finally {
      if (generation === session.generation) constraints.fetching.delete(name);
    }
    if (generation !== session.generation) return;
    if (constraints.stale.has(name) && !waitingForConstraints(name)) {
      fetchConstraints(name);
    } else if (current) {
      renderApplications(current.applications || {});
    }
  }

  /** Forgets everything shown, for the next sign-in. */
  function resetView() {
    current = null;
    tiles.clear();
    queued.clear();
    columns.clear();
    zones = new Map();
    errorItems.clear();
    constraints.known.clear();
    constraints.stale.clear();
    constraints.fetching.clear();
    constraints.failed.clear();
    applicationsSignature = "";
    applicationRows.clear();
    $("zone-grid").replaceChildren();
    $("error-list").replaceChildren();
    $("application-rows").replaceChildren();
    $("cost").textContent = "";
    $("cost").hidden = true;
    delete document.body.dataset.revision;
  }

  // -------------------------------------------------------------------------
  // Start

  function start() {
    $("sign-in-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("token").value.trim();
      if (token) signIn(token);
    });
    $("sign-out").addEventListener("click", () => signOut());
    $("retry-all").addEventListener("click", (event) => retry("all", "", event.currentTarget, null));
    // A token pasted into the address of an open page.
    window.addEventListener("hashchange", () => {
      const token = tokenFromFragment();
      if (token) signIn(token);
    });
    const token = tokenFromFragment() || sessionStorage.getItem(TOKEN_KEY);
    if (token) signIn(token);
    else showSignIn();
  }

  start();
})();
