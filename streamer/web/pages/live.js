// The live view: every camera's video (WebRTC; MJPEG where it cannot connect), the
// plates of its latest recognised frame, its health in words; the legend of the boxes' colours;
// the recent events.
"use strict";

(() => {
  const { api, withToken, el, localTime, percent } = window.LPR;

  const peers = {};      // camera -> RTCPeerConnection
  window.lprPeers = peers;
  const figures = {};    // camera -> {card, video, labels, health, facts, error, links, ...}

  function report(error) {
    document.getElementById("status").textContent = error ? String(error.message || error) : "";
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

  // STUN/TURN servers and the fallback delay (GET /api/webrtc), asked once per page.
  let webrtcSettings = null;
  function settings() {
    if (!webrtcSettings) {
      webrtcSettings = api("/api/webrtc").catch(() => ({ ice_servers: [], fallback_s: 8 }));
    }
    return webrtcSettings;
  }

  function retry(camera) {
    setTimeout(() => {
      const figure = figures[camera];
      if (figure && !figure.img && !peers[camera]) connect(camera).catch(report);
    }, 3000);
  }

  // The camera's MJPEG stream in place of its video, for good (until the page reloads):
  // WebRTC could not connect (no UDP between browser and server, no TURN server, ...).
  function fallBack(camera, why) {
    const figure = figures[camera];
    const pc = peers[camera];
    delete peers[camera];
    if (pc) pc.close();
    if (!figure || figure.img) return;
    const img = el("img", { className: "mjpeg", id: "mjpeg-" + camera, alt: camera,
      title: "MJPEG: " + why, src: withToken(figure.mjpegUrl) });
    figure.video.replaceWith(img);
    figure.img = img;
    figure.card.dataset.video = "mjpeg";
  }

  // One peer connection for the camera: the offer is posted to its webrtc_url once ICE
  // gathering is complete. If it does not play within fallback_s, or fails before it ever
  // played, the camera shows its MJPEG stream; a connection that played and then failed
  // (the service restarted) is tried again after 3 s.
  async function connect(camera) {
    const { ice_servers: iceServers, fallback_s: fallbackS } = await settings();
    const figure = figures[camera];
    if (!figure || figure.img || peers[camera]) return;
    const pc = new RTCPeerConnection({ iceServers: iceServers.map((server) => (
      server.credential == null ? { urls: server.urls }
        : { urls: server.urls, username: server.username, credential: server.credential })) });
    peers[camera] = pc;
    let played = false;
    const timer = setTimeout(() => {
      if (peers[camera] === pc && !played) {
        fallBack(camera, "WebRTC did not connect within " + fallbackS + " s");
      }
    }, fallbackS * 1000);
    pc.addTransceiver("video", { direction: "recvonly" });
    pc.addEventListener("track", (event) => {
      figure.video.srcObject = event.streams[0] || new MediaStream([event.track]);
    });
    pc.addEventListener("connectionstatechange", () => {
      if (pc.connectionState === "connected") {
        played = true;
        clearTimeout(timer);
        figure.card.dataset.video = "webrtc";
      } else if (["failed", "closed"].includes(pc.connectionState) && peers[camera] === pc) {
        clearTimeout(timer);
        if (played) {
          pc.close();
          delete peers[camera];
          retry(camera);
        } else {
          fallBack(camera, "WebRTC failed");
        }
      }
    });
    try {
      await pc.setLocalDescription(await pc.createOffer());
      await iceGatheringComplete(pc);
      const answer = await api(figure.webrtcUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ sdp: pc.localDescription.sdp, type: pc.localDescription.type }),
      });
      await pc.setRemoteDescription(answer);
    } catch (error) {
      clearTimeout(timer);
      pc.close();
      if (peers[camera] === pc) delete peers[camera];
      if (error.status === 401) return;
      retry(camera);  // the server did not answer the offer: it is not WebRTC's fault
      throw error;
    }
  }

  function streamLink(text) {
    return el("a", { target: "_blank", rel: "noreferrer" }, text);
  }

  function ensureFigure(camera) {
    if (figures[camera.name]) return figures[camera.name];
    const name = camera.name;
    const video = el("video", { id: "video-" + name, autoplay: true, muted: true,
      playsInline: true });
    video.setAttribute("playsinline", "");
    const labels = el("span", { className: "labels", id: "labels-" + name });
    const caption = el("figcaption", {}, el("span", { className: "name" }, name), labels);
    const figure = el("figure", { className: "video" }, video, caption);
    const health = el("p", { className: "health", id: "health-" + name });
    const facts = el("dl", { className: "facts" });
    const error = el("p", { className: "last-error" });
    const snapshot = streamLink("snapshot");
    const mjpeg = streamLink("MJPEG");
    const links = el("p", { className: "stream-links" }, snapshot, " ", mjpeg);
    const card = el("article", { className: "camera", id: "camera-" + name },
      figure, health, facts, error, links);
    document.getElementById("videos").append(card);
    const base = "/api/cameras/" + encodeURIComponent(name);
    const entry = figures[name] = {
      card, video, labels, health, facts, error, snapshot, mjpeg, img: null,
      webrtcUrl: camera.webrtc_url || base + "/webrtc",
      mjpegUrl: camera.mjpeg_url || base + "/mjpeg",
    };
    if (window.RTCPeerConnection) {
      connect(name).catch(report);
    } else {
      fallBack(name, "this browser has no WebRTC");
    }
    return entry;
  }

  function dropFigure(name) {
    const figure = figures[name];
    delete figures[name];
    const pc = peers[name];
    delete peers[name];
    if (pc) pc.close();
    figure.card.remove();
  }

  function fps(value) {
    return value == null ? "?" : Number(value).toFixed(1).replace(/\.0$/, "");
  }

  function fact(term, value) {
    return [el("dt", {}, term), el("dd", {}, value == null ? "" : String(value))];
  }

  // The caption: the plates of the latest recognised frame, `TEXT #track (read)`, a `?`
  // after a text not decided yet.
  function captionOf(plates) {
    return (plates || []).map((p) => {
      const text = p.decided ? p.text : p.text + "?";
      const read = p.read && p.read !== p.text ? " (" + p.read + ")" : "";
      return (p.track_id == null ? text : text + " #" + p.track_id) + read;
    }).join("  ");
  }

  async function refreshCameras() {
    const cameras = await api("/api/cameras");
    const seen = new Set();
    for (const camera of cameras) {
      seen.add(camera.name);
      const figure = ensureFigure(camera);
      if (camera.webrtc_url) figure.webrtcUrl = camera.webrtc_url;
      if (camera.mjpeg_url) figure.mjpegUrl = camera.mjpeg_url;
      figure.card.dataset.state = camera.state || "";
      figure.health.textContent = camera.health || camera.state || "";
      figure.facts.replaceChildren(
        ...fact("state", camera.state),
        ...fact("answered", fps(camera.answered_fps) + " of " + fps(camera.sample_fps) +
          " frames/s configured"),
        ...fact("dropped", camera.frames_dropped == null ? "" : camera.frames_dropped +
          " frames"),
        ...fact("decoded", fps(camera.decode_fps) + " frames/s" +
          (camera.width ? ", " + camera.width + "x" + camera.height : "")),
        ...fact("viewers", camera.viewers),
      );
      figure.error.textContent = camera.last_error ? "last error: " + camera.last_error : "";
      const snapshotUrl = withToken(camera.snapshot_url);
      const mjpegUrl = withToken(camera.mjpeg_url);
      if (figure.snapshot.getAttribute("href") !== snapshotUrl) figure.snapshot.href = snapshotUrl;
      if (figure.mjpeg.getAttribute("href") !== mjpegUrl) figure.mjpeg.href = mjpegUrl;
      figure.labels.textContent = captionOf(camera.plates);
    }
    for (const name of Object.keys(figures)) {
      if (!seen.has(name)) dropFigure(name);  // taken out of the config by a reload
    }
  }

  let shownEvents = null;
  async function refreshEvents() {
    const page = await api("/api/events?limit=24");
    const events = (page.events || []).slice(0, 24);
    const key = events.map((event) => event.event_id + "." + event.version).join(",");
    if (key === shownEvents) return;
    shownEvents = key;
    const list = document.getElementById("events");
    list.replaceChildren(...events.map((event) => {
      const img = el("img", { src: withToken(event.crop_url), alt: event.text, loading: "lazy" });
      const plate = el("span", { className: "plate" }, event.text);
      const lines = [
        el("div", {}, plate, event.match ?
          el("span", { className: "label" }, event.match.label) : null),
        el("div", { className: "muted" }, event.camera + " · " + percent(event.confidence)),
        el("div", { className: "muted" }, localTime(event.first_seen && event.first_seen.utc)),
      ];
      if (event.previous_text) {
        lines.push(el("div", { className: "muted" }, "corrected from " + event.previous_text));
      }
      const link = el("a", {
        href: withToken("/events?plate=" + encodeURIComponent(event.text)),
        title: "search the events for " + event.text,
      }, img, ...lines);
      return el("li", { className: event.alert ? "alert" : "" }, link);
    }));
  }

  // The legend of the boxes' colours, as the server draws them (/api/info box_colors).
  function showLegend(info) {
    const items = (info.box_colors || []).map((box) => {
      const swatch = el("span", { className: "swatch", "aria-hidden": "true" });
      swatch.style.backgroundColor = box.color;
      return el("li", { dataset: { kind: box.kind } }, swatch, box.meaning);
    });
    document.getElementById("legend-items").replaceChildren(...items);
    document.getElementById("legend").hidden = items.length === 0;
  }

  async function tick() {
    try {
      await refreshCameras();
      await refreshEvents();
      report("");
    } catch (error) {
      if (error.status !== 401) report(error);
    }
  }

  window.addEventListener("pagehide", () => { for (const pc of Object.values(peers)) pc.close(); });
  window.LPR.info().then((info) => {
    window.LPR.nav("/", info);
    showLegend(info);
  }).catch(() => window.LPR.nav("/"));
  tick();
  setInterval(tick, 1000);
})();
