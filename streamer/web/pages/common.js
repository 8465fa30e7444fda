// Shared by every page (loaded first, deferred): the API client, the token passed on,
// the 401 handling, the nav bar and small DOM helpers. Data goes into the DOM with
// textContent only.
"use strict";

(() => {
  // The old way in: a page opened as /?token=T passes T on, as a Bearer header to the API
  // and as ?token=T to pictures, streams, EventSource and links. Otherwise the browser's
  // session cookie (HttpOnly, set by the login page) is sent by itself.
  const token = new URLSearchParams(location.search).get("token");
  const authHeaders = token ? { Authorization: "Bearer " + token } : {};

  function withToken(url) {
    if (!token || url == null) return url;
    return url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token);
  }

  let leaving = false;
  function toLogin() {
    if (leaving) return;
    leaving = true;
    location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
  }

  class ApiError extends Error {
    constructor(message, status, problem) {
      super(message);
      this.name = "ApiError";
      this.status = status;
      this.problem = problem;
    }
  }

  // The problem's detail (RFC 9457) if the answer is one, else "path: HTTP status".
  async function problemOf(response, path) {
    let problem = null;
    try {
      problem = await response.json();
    } catch (error) {
      problem = null;
    }
    const detail = problem && (problem.detail || problem.title);
    const where = path.split("?")[0];
    return new ApiError(
      detail ? String(detail) : where + ": HTTP " + response.status, response.status, problem
    );
  }

  // fetch() the API: JSON in and out; 401 goes to the login page; another refusal throws
  // an ApiError carrying the problem's detail. 204 gives null.
  async function api(path, options = {}) {
    const response = await fetch(path, {
      ...options,
      headers: { ...authHeaders, ...(options.headers || {}) },
      credentials: "same-origin",
      cache: "no-store",
    });
    if (response.status === 401) {
      toLogin();
      throw new ApiError("login needed", 401, null);
    }
    if (!response.ok) throw await problemOf(response, path);
    if (response.status === 204) return null;
    return response.json();
  }

  let infoPromise = null;
  function info() {
    if (!infoPromise) {
      infoPromise = api("/api/info").catch((error) => {
        infoPromise = null;
        throw error;
      });
    }
    return infoPromise;
  }

  // el("a", {href: "/", className: "x"}, "text", child...): properties set as properties,
  // "aria-*"/"data-*"/role as attributes (never innerHTML); strings appended as text.
  function el(tag, props = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props)) {
      if (value == null) continue;
      if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.includes("-") || key === "role") node.setAttribute(key, String(value));
      else node[key] = value;
    }
    for (const child of children) {
      if (child == null || child === false) continue;
      node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
    }
    return node;
  }

  function localTime(utc) {
    if (!utc) return "";
    const moment = new Date(utc);
    return Number.isNaN(moment.getTime()) ? String(utc) : moment.toLocaleString();
  }

  function percent(value) {
    return value == null ? "" : (100 * value).toFixed(0) + "%";
  }

  async function logOut() {
    try {
      await fetch("/api/session", {
        method: "DELETE", headers: authHeaders, credentials: "same-origin", cache: "no-store",
      });
    } finally {
      location.assign("/login");
    }
  }

  // The nav bar, into <nav id="nav">: Live, Events, and Log out only when a token is
  // configured (info.login). `current` is the page's own path.
  function nav(current, siteInfo) {
    const bar = document.getElementById("nav");
    if (!bar) return;
    const links = el("ul", { className: "nav-links" });
    for (const [path, text] of [["/", "Live"], ["/events", "Events"]]) {
      const link = el("a", { href: withToken(path) }, text);
      if (path === current) link.setAttribute("aria-current", "page");
      links.append(el("li", {}, link));
    }
    if (siteInfo && siteInfo.login) {
      const out = el("button", { type: "button", className: "link-button", id: "logout" },
        "Log out");
      out.addEventListener("click", () => { logOut(); });
      links.append(el("li", { className: "nav-logout" }, out));
    }
    const brand = el("span", { className: "brand" }, "lpr-streamer");
    if (siteInfo && siteInfo.version) {
      brand.title = "version " + siteInfo.version;
    }
    bar.replaceChildren(brand, links);
  }

  window.LPR = {
    token, authHeaders, withToken, api, ApiError, info, el, localTime, percent, nav, logOut,
    toLogin,
  };
})();
