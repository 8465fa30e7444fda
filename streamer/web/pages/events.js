// The events page: search the history (plate exact / prefix / fuzzy, camera, label, alert,
// reported or withheld passes, time), page through it newest first, see a pass in detail,
// export CSV; new events and corrections arrive live (EventSource). Without a history: the
// recent events only.
"use strict";

(() => {
  const { api, withToken, el, localTime, percent } = window.LPR;
  const $ = (id) => document.getElementById(id);

  // The search's parameters, in the page's URL and the API's query alike.
  const PARAMS = ["plate", "prefix", "fuzzy", "camera", "label", "alert", "withheld", "after",
    "before"];
  const MAX_SHOWN = 200;  // live additions beyond this many rows: page one is read again

  const state = {
    history: true,
    query: {},         // the search shown: API parameter -> value (empty ones left out)
    cursor: null,      // the shown page's cursor; null: the first page
    stack: [],         // the cursors of the newer pages
    nextCursor: null,
    events: [],        // the shown events, newest first
    request: 0,        // the latest search sent (older answers are dropped)
    detailId: null,
  };

  // ---- the query: form <-> URL <-> API --------------------------------------------------

  function toInputValue(iso) {  // ISO 8601 -> the local time a datetime-local input shows
    const moment = new Date(iso);
    if (Number.isNaN(moment.getTime())) return "";
    const pad = (n) => String(n).padStart(2, "0");
    return moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" +
      pad(moment.getDate()) + "T" + pad(moment.getHours()) + ":" + pad(moment.getMinutes()) +
      ":" + pad(moment.getSeconds());
  }

  function fromInputValue(value) {  // the local time typed -> ISO 8601 with its zone (UTC)
    if (!value) return "";
    const moment = new Date(value);
    return Number.isNaN(moment.getTime()) ? "" : moment.toISOString();
  }

  function queryFromForm() {
    const query = {};
    const plate = $("search").value.trim();
    if (plate) {
      query.plate = plate;
      const mode = $("mode").value;
      if (mode === "prefix") query.prefix = "true";
      if (mode === "fuzzy") query.fuzzy = "true";
    }
    for (const name of ["camera", "label", "alert", "withheld"]) {
      if ($(name).value) query[name] = $(name).value;
    }
    for (const name of ["after", "before"]) {
      const iso = fromInputValue($(name).value);
      if (iso) query[name] = iso;
    }
    return query;
  }

  function ensureOption(select, value) {
    if (value && ![...select.options].some((option) => option.value === value)) {
      select.append(el("option", { value }, value));
    }
  }

  function queryToForm(query) {
    $("search").value = query.plate || "";
    $("mode").value = query.fuzzy === "true" ? "fuzzy" : query.prefix === "true" ? "prefix" : "exact";
    for (const name of ["camera", "label", "alert", "withheld"]) {
      ensureOption($(name), query[name]);
      $(name).value = query[name] || "";
    }
    for (const name of ["after", "before"]) $(name).value = query[name] ? toInputValue(query[name]) : "";
  }

  function queryFromUrl() {
    const params = new URLSearchParams(location.search);
    const query = {};
    for (const name of PARAMS) {
      const value = params.get(name);
      if (value) query[name] = value;
    }
    return query;
  }

  function queryString(query, extra = {}) {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries({ ...query, ...extra })) {
      if (value != null && value !== "") params.set(name, value);
    }
    const text = params.toString();
    return text ? "?" + text : "";
  }

  function saveToUrl(query) {  // the search in the address bar (the token way's token kept)
    const extra = window.LPR.token ? { token: window.LPR.token } : {};
    history.replaceState(null, "", location.pathname + queryString(query, extra));
  }

  // ---- one event: a row, its matching, its detail ---------------------------------------

  function normalPlate(text) {
    return String(text || "").toUpperCase().replace(/[^0-9A-Z]/g, "");
  }

  function eventTime(event) {
    return event.first_seen && event.first_seen.utc;
  }

  function withheldWhy(event) {  // "low confidence", "few reads"; "" for a reported pass
    return event.withheld ? String(event.withheld).replace(/_/g, " ") : "";
  }

  function withheldText(event) {
    return "withheld: " + withheldWhy(event);
  }

  function eventRow(event) {
    const crop = el("img", {
      className: "crop", src: withToken(event.crop_url), alt: "plate " + event.text,
      loading: "lazy", decoding: "async",
    });
    const what = el("div", { className: "what" }, el("span", { className: "plate" }, event.text));
    if (event.match) {
      what.append(el("span", {
        className: "label",
        title: "known plate " + event.match.plate + " (" + event.match.distance + " edits)",
      }, event.match.label));
    }
    if (event.alert) what.append(el("span", { className: "badge alert-badge" }, "alert"));
    if (event.withheld) {
      what.append(el("span", { className: "badge withheld-badge", title: "not reported" },
        withheldText(event)));
    }
    if (event.previous_text) {
      what.append(el("div", { className: "note-line" }, "corrected from " + event.previous_text));
    }
    const time = el("time", { className: "time", dateTime: eventTime(event) || "" },
      localTime(eventTime(event)));
    const row = el("article", {
      className: "event" + (event.alert ? " alert" : "") + (event.withheld ? " withheld" : ""),
      tabIndex: 0,
      role: "button",
      "aria-label": event.text + ", " + event.camera + ", " + localTime(eventTime(event)),
      "data-event-id": event.event_id,
      "data-version": event.version,
    }, crop, what, el("span", { className: "camera-name" }, event.camera), time,
    el("span", { className: "confidence", title: "confidence" }, percent(event.confidence)));
    return row;
  }

  // Whether a live event belongs to the shown search: true, false, or "refetch" (fuzzy
  // matching is the server's).
  function matches(event, query) {
    if (query.camera && event.camera !== query.camera) return false;
    if (query.label && !(event.match && event.match.label === query.label)) return false;
    if (query.alert === "true" && !event.alert) return false;
    if (query.alert === "false" && event.alert) return false;
    if (query.withheld !== "any" && Boolean(event.withheld) !== (query.withheld === "true")) {
      return false;
    }
    const seen = Date.parse(eventTime(event));
    if (query.after && !(seen >= Date.parse(query.after))) return false;
    if (query.before && !(seen <= Date.parse(query.before))) return false;
    if (query.plate) {
      if (query.fuzzy === "true") return "refetch";
      const want = normalPlate(query.plate);
      const text = normalPlate(event.text);
      if (query.prefix === "true" ? !text.startsWith(want) : text !== want) return false;
    }
    return true;
  }

  function fact(list, term, value) {
    if (value == null || value === "") return;
    list.append(el("dt", {}, term), el("dd", {}, String(value)));
  }

  function seenText(sighting) {
    if (!sighting) return "";
    const stream = sighting.stream_time_s == null ? "" :
      " (stream time " + Number(sighting.stream_time_s).toFixed(1) + " s)";
    return localTime(sighting.utc) + stream;
  }

  function fillDetail(event) {
    $("detail-title").replaceChildren(...[el("span", { className: "plate" }, event.text),
      event.match ? el("span", { className: "label" }, event.match.label) : null,
      event.alert ? el("span", { className: "badge alert-badge" }, "alert") : null,
      event.withheld ?
        el("span", { className: "badge withheld-badge" }, withheldText(event)) : null,
    ].filter(Boolean));
    const frame = $("detail-frame");
    const frameUrl = withToken(event.frame_url || event.crop_url);
    if (frame.getAttribute("src") !== frameUrl) frame.src = frameUrl;
    frame.alt = event.frame_url ? "the vehicle" : "the plate (no picture of the vehicle was kept)";
    frame.classList.toggle("crop-big", !event.frame_url);
    const crop = $("detail-crop");
    const cropUrl = withToken(event.crop_url);
    if (crop.getAttribute("src") !== cropUrl) crop.src = cropUrl;
    crop.hidden = !event.frame_url;  // without a frame the crop is already shown big
    $("detail-picture-note").hidden = Boolean(event.frame_url);

    const list = $("detail-fields");
    list.replaceChildren();
    fact(list, "plate", event.text);
    if (event.voted_text && event.voted_text !== event.text) fact(list, "voted text", event.voted_text);
    if (event.previous_text) fact(list, "corrected from", event.previous_text);
    fact(list, "camera", event.camera);
    fact(list, "confidence", percent(event.confidence) + (event.char_confidence &&
      event.char_confidence.length ? " (per character: " +
      event.char_confidence.map(percent).join(" ") + ")" : ""));
    fact(list, "candidates", (event.candidates || []).length ?
      event.candidates.map((c) => c.text + " " + percent(c.score)).join(", ") : "none");
    fact(list, "known plate", event.match ? event.match.label + ": " + event.match.plate +
      " (" + event.match.distance + (event.match.distance === 1 ? " edit)" : " edits)") :
      "not on a list");
    fact(list, "alert", event.alert ? "yes" : "no");
    if (event.withheld) fact(list, "withheld", withheldWhy(event) + " (not reported)");
    fact(list, "first seen", seenText(event.first_seen));
    fact(list, "last seen", seenText(event.last_seen));
    fact(list, "reads", event.reads);
    fact(list, "evidence", event.evidence);
    fact(list, "decided", (event.reason || "") + (event.decided_after_s != null ?
      " after " + Number(event.decided_after_s).toFixed(1) + " s" : ""));
    fact(list, "track", event.track_id == null ? "" : "#" + event.track_id);
    if (Array.isArray(event.box)) fact(list, "box", event.box.map((v) => Math.round(v)).join(", "));
    fact(list, "event", event.event_id + ", version " + event.version + " (" + event.type + ")");
  }

  function fillVersions(versions) {
    const list = $("detail-versions");
    if (!versions) {
      list.replaceChildren(el("li", { className: "muted" }, "loading"));
      return;
    }
    list.replaceChildren(...versions.map((version) => el("li", {},
      "version " + version.version + ": ",
      el("span", { className: "plate" }, version.text),
      " " + percent(version.confidence) + ", " + version.reads + " reads, " +
      (version.reason || "") + ", last seen " + localTime(version.last_seen && version.last_seen.utc) +
      (version.previous_text ? " (was " + version.previous_text + ")" : ""))));
    if (!versions.length) list.append(el("li", { className: "muted" }, "none kept"));
  }

  let detailReturn = null;
  async function openDetail(eventId, returnTo) {
    const shown = state.events.find((event) => event.event_id === eventId);
    const dialog = $("detail");
    state.detailId = eventId;
    if (shown) fillDetail(shown);
    fillVersions(null);
    if (!dialog.open) {
      detailReturn = returnTo || null;
      dialog.showModal();
    }
    try {
      const detail = await api("/api/events/" + encodeURIComponent(eventId));
      if (state.detailId !== eventId) return;
      fillDetail(detail);
      fillVersions(detail.versions || []);
    } catch (error) {
      if (state.detailId !== eventId) return;
      $("detail-versions").replaceChildren(el("li", { className: "error" }, String(error.message)));
    }
  }

  function closeDetail() {
    const dialog = $("detail");
    if (dialog.open) dialog.close();
  }

  // ---- the results ------------------------------------------------------------------------

  function renderResults() {
    const results = $("results");
    if (!state.events.length) {
      const filtered = Object.keys(state.query).length > 0;
      results.replaceChildren(el("p", { className: "empty" },
        filtered ? "No events match." : "No events yet."));
    } else {
      results.replaceChildren(...state.events.map(eventRow));
    }
    renderPager();
  }

  function renderPager() {
    const first = state.cursor == null;
    $("newer").disabled = !state.history || first;
    $("older").disabled = !state.history || !state.nextCursor;
    $("newer").hidden = $("older").hidden = !state.history;
    const count = state.events.length;
    const what = count === 1 ? "1 event" : count + " events";
    if (!state.history) {
      $("summary").textContent = what + ", the most recent, newest first";
      $("page-info").textContent = "";
    } else {
      $("summary").textContent = what + " on this page, newest first";
      $("page-info").textContent = "page " + (state.stack.length + 1);
    }
  }

  function showError(error) {
    $("error").textContent = error ? String(error.message || error) : "";
  }

  async function load() {
    const request = ++state.request;
    const path = state.history ?
      "/api/events" + queryString(state.query, { cursor: state.cursor }) : "/api/events";
    $("results").setAttribute("aria-busy", "true");
    try {
      const page = await api(path);
      if (request !== state.request) return;
      state.events = page.events || [];
      state.nextCursor = state.history ? page.next_cursor || null : null;
      showError("");
      renderResults();
    } catch (error) {
      if (request !== state.request || error.status === 401) return;
      showError(error);
      state.events = [];
      state.nextCursor = null;
      $("results").replaceChildren();
      renderPager();
      // 503: the history is not open yet (the service is starting): ask again shortly.
      if (error.status === 503) {
        setTimeout(() => { if (request === state.request) load(); }, 2000);
      }
    } finally {
      if (request === state.request) $("results").removeAttribute("aria-busy");
    }
  }

  function search() {
    state.query = state.history ? queryFromForm() : {};
    state.cursor = null;
    state.stack = [];
    state.nextCursor = null;
    saveToUrl(state.query);
    $("csv").href = withToken("/api/events.csv" + queryString(state.query));
    return load();
  }

  let refetchTimer = null;
  function refetchFirstPage() {  // soon, once for a burst of live events
    if (refetchTimer) return;
    refetchTimer = setTimeout(() => {
      refetchTimer = null;
      if (state.cursor == null) load();
    }, 500);
  }

  // ---- live updates -----------------------------------------------------------------------

  function onLiveEvent(message) {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch (error) {
      return;
    }
    if (!event || !event.event_id) return;
    const index = state.events.findIndex((shown) => shown.event_id === event.event_id);
    if (index >= 0) {  // a correction of a shown pass: its row replaced
      if ((event.version || 0) <= (state.events[index].version || 0)) return;
      state.events[index] = event;
      const old = $("results").querySelector(
        '.event[data-event-id="' + CSS.escape(event.event_id) + '"]');
      if (old) {
        const row = eventRow(event);
        row.classList.add("fresh");
        old.replaceWith(row);
      }
      if (state.detailId === event.event_id && $("detail").open) openDetail(event.event_id);
      return;
    }
    if (state.cursor != null) return;  // only the first page grows
    const verdict = state.history ? matches(event, state.query) : true;
    if (!verdict) return;
    if (verdict === "refetch" || event.type === "plate.updated" ||
        state.events.length >= MAX_SHOWN) {
      refetchFirstPage();  // the server's matching, or an older pass: its right place
      return;
    }
    state.events.unshift(event);
    const results = $("results");
    const empty = results.querySelector(".empty");
    if (empty) empty.remove();
    const row = eventRow(event);
    row.classList.add("fresh");
    results.prepend(row);
    renderPager();
  }

  function setLive(stateName, text) {
    const live = $("live");
    live.dataset.state = stateName;
    live.textContent = text;
  }

  let source = null;
  let wasOpen = false;
  function listen() {
    if (!window.EventSource) {
      setLive("off", "no live updates in this browser");
      return;
    }
    source = new EventSource(withToken("/api/events/live"));
    source.addEventListener("plate", onLiveEvent);
    source.addEventListener("open", () => {
      setLive("open", "live");
      if (wasOpen && state.cursor == null) refetchFirstPage();  // what was missed meanwhile
      wasOpen = true;
    });
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (401, 503...): EventSource gives up; ask the API why, and try again.
        setLive("error", "live updates stopped, retrying");
        source.close();
        api("/api/info").catch(() => {});
        setTimeout(listen, 5000);
      } else {
        setLive("error", "reconnecting");
      }
    });
  }

  // ---- camera health ------------------------------------------------------------------------

  async function refreshHealth() {
    const strip = $("health");
    try {
      const cameras = await api("/api/cameras");
      strip.replaceChildren(...cameras.map((camera) => {
        const item = el("li", { "data-state": camera.state || "" },
          el("span", { className: "name" }, camera.name), camera.health || camera.state || "");
        item.title = camera.state + "; " + camera.answered_fps + " of " + camera.sample_fps +
          " frames/s answered; " + camera.frames_dropped + " frames dropped" +
          (camera.last_error ? "; last error: " + camera.last_error : "");
        return item;
      }));
    } catch (error) {
      if (error.status === 401) return;
      strip.replaceChildren(el("li", { className: "error" }, "cameras: " + error.message));
    }
  }

  // ---- wiring -------------------------------------------------------------------------------

  function wire() {
    $("search-form").addEventListener("submit", (event) => {
      event.preventDefault();
      search();
    });
    for (const id of ["mode", "camera", "label", "alert", "withheld"]) {
      $(id).addEventListener("change", () => {
        if (id === "mode" && !$("search").value.trim()) return;
        search();
      });
    }
    $("clear").addEventListener("click", () => {
      queryToForm({});
      search();
    });
    $("older").addEventListener("click", () => {
      if (!state.nextCursor) return;
      state.stack.push(state.cursor);
      state.cursor = state.nextCursor;
      load().then(() => $("results").scrollIntoView({ block: "start" }));
    });
    $("newer").addEventListener("click", () => {
      if (state.cursor == null) return;
      state.cursor = state.stack.length ? state.stack.pop() : null;
      load().then(() => $("results").scrollIntoView({ block: "start" }));
    });
    const results = $("results");
    const open = (target) => {
      const row = target.closest(".event");
      if (row) openDetail(row.dataset.eventId, row);
    };
    results.addEventListener("click", (event) => open(event.target));
    results.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        if (!event.target.closest(".event")) return;
        event.preventDefault();
        open(event.target);
      }
    });
    const dialog = $("detail");
    $("detail-close").addEventListener("click", closeDetail);
    dialog.addEventListener("click", (event) => {
      if (event.target === dialog) closeDetail();  // a click on the backdrop
    });
    dialog.addEventListener("close", () => {
      state.detailId = null;
      if (detailReturn && detailReturn.isConnected) detailReturn.focus();
      detailReturn = null;
    });
  }

  function fillSelect(select, values) {
    for (const value of values || []) ensureOption(select, value);
  }

  async function start() {
    wire();
    let info = null;
    try {
      info = await window.LPR.info();
    } catch (error) {
      if (error.status === 401) return;
      showError(error);
    }
    window.LPR.nav("/events", info);
    if (info) {
      state.history = info.history !== false;
      fillSelect($("camera"), info.cameras);
      fillSelect($("label"), info.labels);
    }
    if (!state.history) {
      $("no-history").hidden = false;
      $("filters").disabled = true;
      $("search-form").hidden = true;  // nothing to search: the recent events only
    } else {
      queryToForm(queryFromUrl());
    }
    refreshHealth();
    setInterval(refreshHealth, 2000);
    listen();
    await search();
  }

  window.addEventListener("pagehide", () => { if (source) source.close(); });
  start();
})();
