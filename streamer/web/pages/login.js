// The login page: the token exchanged for a session cookie (POST /api/session), then on to
// the page that sent us here (?next=, a path on this site only).
"use strict";

(() => {
  const { el } = window.LPR;
  const $ = (id) => document.getElementById(id);

  // Where to go once logged in: ?next= when it names a page of this origin, else the events
  // page. It is resolved as the browser would resolve it (URL drops tabs and newlines and
  // reads a backslash as "/"), so "//host", "/<backslash>host" or "/<tab>/host" are another
  // origin and refused; only a path starting with "/" is taken ("javascript:" is not).
  function nextPage() {
    const next = new URLSearchParams(location.search).get("next") || "";
    if (!next.startsWith("/")) return "/events";
    let url;
    try {
      url = new URL(next, location.origin);
    } catch (error) {
      return "/events";
    }
    if (url.origin !== location.origin || url.pathname.startsWith("//")) return "/events";
    return url.pathname + url.search + url.hash;
  }

  async function detailOf(response) {
    try {
      const problem = await response.json();
      if (problem && (problem.detail || problem.title)) return String(problem.detail || problem.title);
    } catch (error) {
      // not a problem document
    }
    return "HTTP " + response.status;
  }

  async function logIn(event) {
    event.preventDefault();
    const error = $("login-error");
    const button = $("login");
    error.textContent = "";
    button.disabled = true;
    try {
      const response = await fetch("/api/session", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: $("token").value }),
        credentials: "same-origin",
        cache: "no-store",
      });
      if (response.status === 204 || response.ok) {
        location.assign(nextPage());
        return;
      }
      error.textContent = await detailOf(response);
      $("token").select();
    } catch (failure) {
      error.textContent = "the service did not answer: " + failure.message;
    } finally {
      button.disabled = false;
    }
  }

  async function start() {
    $("login-form").addEventListener("submit", logIn);
    window.LPR.nav("/login", null);
    try {  // open to all: whether a login is needed, and whether this browser has one
      const response = await fetch("/api/session", { credentials: "same-origin", cache: "no-store" });
      if (response.ok) {
        const session = await response.json();
        if (session && session.login === false) {
          location.assign(nextPage());
          return;
        }
        if (session && session.authenticated) {  // already logged in: say so, offer the way on
          const on = el("a", { href: nextPage() }, "continue");
          const note = el("p", { className: "muted" }, "This browser is logged in already: ", on,
            ", or log in again.");
          $("login-form").after(note);
        }
      }
    } catch (error) {
      // the form still works
    }
  }

  start();
})();
