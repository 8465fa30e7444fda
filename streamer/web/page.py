"""The live view's one page: cameras with their status and video, recent events.

Static HTML with one inline script (allowed by a per-response CSP nonce). The
page carries no data and no secret: it reads everything from the API, and
when it was opened as ``/?token=...`` it passes that token on (as a Bearer
header to the API and WebRTC signalling, as ``?token=`` to images and
MJPEG). Data is put into the DOM with ``textContent`` only.
"""

from __future__ import annotations

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>lpr-streamer: live view</title>
<style nonce="__NONCE__">
  body { font-family: system-ui, sans-serif; margin: 1rem; background: #111; color: #eee; }
  h1 { font-size: 1.2rem; margin: 0 0 .8rem; }
  h2 { font-size: 1rem; margin: 1rem 0 .5rem; }
  table { border-collapse: collapse; font-size: .85rem; }
  td, th { padding: .2rem .6rem; border-bottom: 1px solid #333; text-align: left; }
  #videos { display: flex; flex-wrap: wrap; gap: 1rem; }
  figure { margin: 0; }
  video { width: 960px; max-width: 100%; background: #000; display: block; }
  figcaption { font-family: monospace; font-size: .9rem; min-height: 1.2em; }
  figcaption .name { font-weight: bold; margin-right: .8rem; }
  #events { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .6rem; }
  #events li { background: #222; padding: .4rem; font-size: .8rem; }
  #events img { display: block; height: 48px; }
  a { color: #8cf; }
  .error { color: #f88; }
</style>
</head>
<body>
<h1>lpr-streamer: live view</h1>
<table id="cameras">
  <thead><tr><th>camera</th><th>state</th><th>decode fps</th><th>sample fps</th>
  <th>size</th><th>viewers</th><th>last error</th><th>fallback</th></tr></thead>
  <tbody></tbody>
</table>
<div id="videos"></div>
<h2>Recent events</h2>
<ul id="events"></ul>
<p id="status" class="error"></p>
<script nonce="__NONCE__">
"use strict";
const token = new URLSearchParams(location.search).get("token");
const authHeaders = token ? { Authorization: "Bearer " + token } : {};
const withToken = (url) =>
  token ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : url;
const peers = {};      // camera -> RTCPeerConnection
window.lprPeers = peers;
const figures = {};    // camera -> {video, labels}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options, headers: { ...authHeaders, ...(options.headers || {}) }, cache: "no-store",
  });
  if (!response.ok) throw new Error(path.split("?")[0] + ": HTTP " + response.status);
  return response.json();
}

function cell(row, text) { row.insertCell().textContent = text == null ? "" : String(text); }

function link(row, href, text) {
  const a = document.createElement("a");
  a.href = withToken(href); a.textContent = text; a.target = "_blank"; a.rel = "noreferrer";
  row.lastChild.append(a, " ");
}

function iceGatheringComplete(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const check = () => {
      if (pc.iceGatheringState === "complete") {
        pc.removeEventListener("icegatheringstatechange", check);
        resolve();
      }
    };
    pc.addEventListener("icegatheringstatechange", check);
  });
}

async function connect(camera) {
  const figure = figures[camera];
  const pc = new RTCPeerConnection();
  peers[camera] = pc;
  pc.addTransceiver("video", { direction: "recvonly" });
  pc.addEventListener("track", (event) => {
    figure.video.srcObject = event.streams[0] || new MediaStream([event.track]);
  });
  pc.addEventListener("connectionstatechange", () => {
    if (["failed", "closed"].includes(pc.connectionState) && peers[camera] === pc) {
      pc.close();
      delete peers[camera];
      setTimeout(() => connect(camera).catch(report), 3000);
    }
  });
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await iceGatheringComplete(pc);
    const answer = await api("/api/cameras/" + encodeURIComponent(camera) + "/webrtc", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sdp: pc.localDescription.sdp, type: pc.localDescription.type }),
    });
    await pc.setRemoteDescription(answer);
  } catch (error) {
    pc.close();
    delete peers[camera];
    setTimeout(() => connect(camera).catch(report), 3000);
    throw error;
  }
}

function ensureFigure(camera) {
  if (figures[camera]) return;
  const figure = document.createElement("figure");
  const video = document.createElement("video");
  video.id = "video-" + camera;
  video.autoplay = true; video.muted = true; video.playsInline = true;
  video.setAttribute("playsinline", "");
  const caption = document.createElement("figcaption");
  const name = document.createElement("span");
  name.className = "name"; name.textContent = camera;
  const labels = document.createElement("span");
  labels.className = "labels"; labels.id = "labels-" + camera;
  caption.append(name, labels);
  figure.append(video, caption);
  document.getElementById("videos").append(figure);
  figures[camera] = { video, labels };
  if (window.RTCPeerConnection) {
    connect(camera).catch(report);
  } else {  // no WebRTC: the MJPEG stream instead
    const img = document.createElement("img");
    img.src = withToken("/api/cameras/" + encodeURIComponent(camera) + "/mjpeg");
    video.replaceWith(img);
  }
}

async function refreshCameras() {
  const cameras = await api("/api/cameras");
  const body = document.querySelector("#cameras tbody");
  body.replaceChildren();
  for (const camera of cameras) {
    const row = body.insertRow();
    cell(row, camera.name); cell(row, camera.state);
    cell(row, camera.decode_fps); cell(row, camera.sample_fps);
    cell(row, camera.width ? camera.width + "x" + camera.height : "");
    cell(row, camera.viewers); cell(row, camera.last_error);
    cell(row, "");
    link(row, camera.snapshot_url, "snapshot"); link(row, camera.mjpeg_url, "MJPEG");
    ensureFigure(camera.name);
    figures[camera.name].labels.textContent =
      camera.plates.map((p) => {
        const text = p.decided ? p.text : p.text + "?";
        const read = p.read && p.read !== p.text ? " (" + p.read + ")" : "";
        return (p.track_id == null ? text : text + " #" + p.track_id) + read;
      }).join("  ");
  }
}

let shownEvents = null;
async function refreshEvents() {
  const page = await api("/api/events?limit=24");
  const key = page.events.map((event) => event.event_id + "." + event.version).join(",");
  if (key === shownEvents) return;
  shownEvents = key;
  const list = document.getElementById("events");
  list.replaceChildren();
  for (const event of page.events) {
    const item = document.createElement("li");
    const img = document.createElement("img");
    img.src = withToken(event.crop_url); img.alt = event.text;
    const text = document.createElement("div");
    text.textContent = event.text + "  " + event.camera + "  " + event.first_seen.utc +
      "  " + (100 * event.confidence).toFixed(0) + "%" +
      (event.previous_text ? "  (corrected from " + event.previous_text + ")" : "");
    item.append(img, text);
    list.append(item);
  }
}

function report(error) { document.getElementById("status").textContent = String(error); }

async function tick() {
  try {
    await refreshCameras();
    await refreshEvents();
    report("");
  } catch (error) {
    report(error);
  }
}

window.addEventListener("pagehide", () => { for (const pc of Object.values(peers)) pc.close(); });
tick();
setInterval(tick, 1000);
</script>
</body>
</html>
"""


def page(nonce: str) -> str:
    """The page's HTML; ``nonce`` must also be in the response's CSP header."""
    return _PAGE.replace("__NONCE__", nonce)
