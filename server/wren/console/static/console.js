// The Wren web console (docs/server.md "Web console"): plain JS, no build step.
//
// - The server's view: GET /api/status, then the live feed GET /api/events (Server-Sent Events:
//   `status`, `devices`, `turn`, `pairing`).
// - Pairing (auth mode `pair`): the devices waiting with a code and the paired ones (status `pairing`, then
//   `pairing` events); Approve and Revoke are JSON POSTs to /api/devices/approve and /api/devices/revoke.
// - Talking: this page is a device. It speaks the xiaozhi protocol over the ordinary device WebSocket
//   (`?device-id=browser-…&client-id=…`): hello with PCM 16 kHz / 60 ms, `listen start` (manual) while the
//   button is held, 16-bit PCM frames of 60 ms resampled from the microphone, `listen stop` on release, and
//   `listen detect` for typed text. It plays the reply (PCM frames at the rate of the server's hello) and
//   shows the subtitles (`stt`, `tts sentence_start`).
// Counters for tests and the curious: <body data-played-samples data-received-samples data-sent-frames>.
"use strict";

const KEY = new URLSearchParams(location.search).get("key") || "";
const UPLINK_RATE = 16000;
const FRAME_SAMPLES = UPLINK_RATE * 60 / 1000; // 960 samples = 60 ms
const STAGES = [
  ["asr_finalise", "ASR"], ["engine_first_sentence", "agent"], ["tts_first_audio", "TTS"], ["send", "send"],
];
const $ = (id) => document.getElementById(id);

function api(path, query = {}) {
  const q = new URLSearchParams(query);
  if (KEY) q.set("key", KEY);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}

function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;
}

function fmtAgo(epochS) {
  const s = Math.max(0, Date.now() / 1000 - epochS);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${(s / 3600).toFixed(1)} h ago`;
}

function fmtUptime(s) {
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min` : `${Math.floor(s)} s`;
}

function publish(name, value) {
  document.body.dataset[name] = String(value);
}

function notice(text) {
  const n = $("notice");
  n.textContent = text || "";
  n.hidden = !text;
}

// ---- identity of this page as a device ---------------------------------------------------------------

function browserIdentity() {
  const make = (name, fresh) => {
    let v = null;
    try { v = localStorage.getItem(name); } catch (e) { /* private mode */ }
    if (!v) {
      v = fresh();
      try { localStorage.setItem(name, v); } catch (e) { /* private mode */ }
    }
    return v;
  };
  const hex = (n) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => b.toString(16).padStart(2, "0")).join("");
  return {
    deviceId: make("wren-console-device-id", () => `browser-${hex(4)}`),
    clientId: make("wren-console-client-id", () => `${hex(4)}-${hex(2)}-${hex(2)}-${hex(2)}-${hex(6)}`),
  };
}
const ME = browserIdentity();

// ---- the server's view: status + live feed ---------------------------------------------------------

const view = { status: null, devices: [], turns: [], pairing: null };

function renderServer() {
  const s = view.status;
  if (!s) return;
  const up = Date.now() / 1000 - s.started_at;
  $("server-info").textContent = `version ${s.version} · up ${fmtUptime(up)} · auth ${s.auth_mode}`;
}

function lastTurnText(turn) {
  if (!turn) return "–";
  const total = turnTotal(turn);
  return `${turn.heard ? `“${turn.heard}”` : `(${turn.source})`} · ${fmtMs(total)}`;
}

function renderDevices() {
  const body = $("devices").tBodies[0];
  body.replaceChildren(...view.devices.map((d) => el("tr", { "data-device": d.id, "data-state": d.state },
    el("td", {}, d.id, d.id === ME.deviceId ? el("span", { class: "you-tag" }, "this page") : ""),
    el("td", {}, el("span", { class: `state ${d.state}` }, d.state)),
    el("td", { title: d.uplink ? `up ${d.uplink}, down ${d.downlink}` : "" }, d.codec || "(no hello yet)"),
    el("td", { class: "since", "data-since": String(d.connected_since) }, fmtAgo(d.connected_since)),
    el("td", { class: "last-turn" }, lastTurnText(d.last_turn)),
  )));
  $("device-count").textContent = view.devices.length ? `(${view.devices.length})` : "";
  $("no-devices").hidden = view.devices.length > 0;
}

function sendMs(ms) {
  if (ms.encode === null && ms.send === null) return null;
  return (ms.encode || 0) + (ms.send || 0);
}

function turnTotal(turn) {
  const ms = turn.ms || {};
  if (ms.input_end_to_first_audio !== null && ms.input_end_to_first_audio !== undefined) return ms.input_end_to_first_audio;
  const parts = STAGES.map(([k]) => (k === "send" ? sendMs(ms) : ms[k])).filter((v) => v !== null && v !== undefined);
  return parts.length ? parts.reduce((a, b) => a + b, 0) : null;
}

function splitCell(turn) {
  const ms = turn.ms || {};
  const values = STAGES.map(([k]) => [k, k === "send" ? sendMs(ms) : ms[k]]);
  const sum = values.reduce((a, [, v]) => a + (v || 0), 0) || 1;
  const bar = el("div", { class: "split" }, ...values.filter(([, v]) => v).map(([k, v]) => {
    const part = el("span", { class: k, title: `${k}: ${fmtMs(v)}` });
    part.style.width = `${(100 * v / sum).toFixed(1)}%`; // CSSOM: allowed by the page's CSP, unlike style=""
    return part;
  }));
  const labels = el("div", { class: "split-ms" }, values.map(([k, v]) => `${STAGES.find((s) => s[0] === k)[1]} ${fmtMs(v)}`).join(" · "));
  const cell = el("td", { class: "split-cell" }, bar, labels);
  for (const [k, v] of values) cell.setAttribute(`data-${k.replaceAll("_", "-")}`, v === null || v === undefined ? "" : String(v));
  return cell;
}

function turnRow(turn, fresh) {
  const at = new Date((turn.at || Date.now() / 1000) * 1000);
  const badges = [turn.source !== "speech" ? el("span", { class: "badge" }, turn.source) : "",
    turn.cancelled ? el("span", { class: "badge" }, "cancelled") : ""];
  return el("tr", { class: fresh ? "fresh" : "", "data-device": turn.device, "data-turn": String(turn.turn), "data-source": turn.source },
    el("td", {}, at.toLocaleTimeString()),
    el("td", {}, turn.device),
    el("td", { class: "heard" }, turn.heard || "", ...badges),
    el("td", { class: "said" }, turn.said || ""),
    splitCell(turn),
    el("td", { class: "total" }, fmtMs(turnTotal(turn))));
}

function renderTurns() {
  const body = $("turns").tBodies[0];
  body.replaceChildren(...view.turns.slice().reverse().map((t) => turnRow(t, false)));
  $("no-turns").hidden = view.turns.length > 0;
}

function addTurn(turn) {
  view.turns.push(turn);
  if (view.turns.length > 50) view.turns.shift();
  const body = $("turns").tBodies[0];
  body.prepend(turnRow(turn, true));
  while (body.rows.length > 50) body.deleteRow(body.rows.length - 1);
  $("no-turns").hidden = true;
  const dev = view.devices.find((d) => d.id === turn.device);
  if (dev) { dev.last_turn = turn; renderDevices(); }
}

function applyStatus(status) {
  view.status = status;
  view.devices = status.devices;
  view.turns = status.turns.slice(-50);
  renderServer(); renderDevices(); renderTurns(); applyPairing(status.pairing);
}

// ---- pairing: approve the codes devices show, revoke paired devices ---------------------------------

function pairingNotice(text) {
  const n = $("pairing-notice");
  n.textContent = text || "";
  n.hidden = !text;
}

function applyPairing(pairing) {
  view.pairing = pairing;
  const off = pairing === null || pairing === undefined;
  $("pairing-lists").hidden = off;
  $("pairing-off").hidden = !off;
  if (off) {
    const mode = view.status ? view.status.auth_mode : "?";
    $("pairing-off").textContent = `Pairing is off: auth mode ${mode} (devices are approved by code in mode pair only).`;
    $("pairing-count").textContent = "";
    return;
  }
  if (pairing.error) pairingNotice(pairing.error);
  const waiting = pairing.waiting.map((r) => el("tr", { "data-code": r.code, "data-device": r.device_id },
    el("td", { class: "code" }, r.code),
    el("td", {}, r.device_id, r.replaces_client_id ? el("span", { class: "badge warn", title: `approving replaces the pairing of client ${r.replaces_client_id}` }, "already paired") : ""),
    el("td", {}, r.client_id),
    el("td", {}, r.remote),
    el("td", { class: "since", "data-since": String(r.requested_at) }, fmtAgo(r.requested_at)),
    el("td", {}, el("button", { type: "button", class: "approve", onclick: (e) => changePairing("/api/devices/approve", { code: r.code }, e.target) }, "Approve"))));
  $("waiting").tBodies[0].replaceChildren(...waiting);
  $("no-waiting").hidden = waiting.length > 0;
  const paired = pairing.paired.map((d) => el("tr", { "data-device": d.device_id },
    el("td", {}, d.device_id),
    el("td", {}, d.client_id),
    el("td", { class: "since", "data-since": String(d.approved_at) }, fmtAgo(d.approved_at)),
    el("td", { class: "connected" }, d.connected ? "yes" : "no"),
    el("td", {}, el("button", { type: "button", class: "revoke", onclick: (e) => {
      if (confirm(`Revoke ${d.device_id}? Its connection closes and it must pair again.`)) changePairing("/api/devices/revoke", { device_id: d.device_id }, e.target);
    } }, "Revoke"))));
  $("paired").tBodies[0].replaceChildren(...paired);
  $("no-paired").hidden = paired.length > 0;
  $("pairing-count").textContent = waiting.length ? `(${waiting.length} waiting)` : "";
}

async function changePairing(path, body, button) {
  button.disabled = true;
  try {
    const resp = await fetch(api(path), {
      method: "POST", cache: "no-store", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    const answer = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(answer.error || `${resp.status}`);
    pairingNotice("");
    applyPairing(answer.pairing);
  } catch (err) {
    button.disabled = false;
    pairingNotice(`Not done: ${err.message || err}`);
  }
}

async function loadStatus() {
  const resp = await fetch(api("/api/status"), { cache: "no-store" });
  if (!resp.ok) {
    const body = await resp.json().catch(() => ({}));
    throw new Error(body.error || `status ${resp.status}`);
  }
  applyStatus(await resp.json());
}

function openFeed() {
  const state = $("feed-state");
  const feed = new EventSource(api("/api/events"));
  feed.addEventListener("open", () => { state.dataset.state = "live"; state.textContent = "live"; });
  feed.addEventListener("error", () => { state.dataset.state = "error"; state.textContent = "live feed: reconnecting"; });
  feed.addEventListener("status", (e) => applyStatus(JSON.parse(e.data)));
  feed.addEventListener("devices", (e) => { view.devices = JSON.parse(e.data).devices; renderDevices(); });
  feed.addEventListener("turn", (e) => addTurn(JSON.parse(e.data)));
  feed.addEventListener("pairing", (e) => applyPairing(JSON.parse(e.data)));
  setInterval(() => {
    renderServer();
    document.querySelectorAll("td.since").forEach((td) => { td.textContent = fmtAgo(Number(td.dataset.since)); });
  }, 1000);
}

// ---- audio: playback of the reply, capture of the microphone ----------------------------------------

class Player {
  constructor() { this.ctx = null; this.head = 0; this.sources = new Set(); this.played = 0; this.received = 0; }

  context() {
    if (!this.ctx) this.ctx = new (window.AudioContext || window.webkitAudioContext)();
    if (this.ctx.state === "suspended") this.ctx.resume();
    return this.ctx;
  }

  get busy() { return this.sources.size > 0; }

  enqueue(pcm, rate) {
    if (!pcm.length) return;
    const ctx = this.context();
    const samples = new Float32Array(pcm.length);
    for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
    const buffer = ctx.createBuffer(1, samples.length, rate);
    buffer.copyToChannel(samples, 0);
    const source = ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(ctx.destination);
    const at = Math.max(this.head, ctx.currentTime + 0.08); // a little slack; re-anchored after a gap
    source.start(at);
    this.head = at + buffer.duration;
    this.sources.add(source);
    source.onended = () => {
      this.sources.delete(source);
      if (!source.cut) { this.played += samples.length; publish("playedSamples", this.played); }
    };
    this.received += samples.length;
    publish("receivedSamples", this.received);
  }

  stop() {
    for (const s of this.sources) { s.cut = true; try { s.stop(); } catch (e) { /* not started */ } }
    this.sources.clear();
    this.head = 0;
  }
}

// Windowed-sinc resampler (Blackman window, cut-off below the lower Nyquist), streaming: the microphone's
// rate (often 48 kHz) to 16 kHz without aliasing the upper band into speech.
class Resampler {
  constructor(from, to, halfTaps = 16) {
    this.step = from / to;
    this.half = halfTaps;
    this.cut = Math.min(1, to / from) * 0.92;
    this.hist = new Float32Array(halfTaps);
    this.pos = halfTaps;
  }

  kernel(t) {
    const x = this.cut * t;
    const sinc = x === 0 ? 1 : Math.sin(Math.PI * x) / (Math.PI * x);
    const w = 0.42 + 0.5 * Math.cos(Math.PI * t / this.half) + 0.08 * Math.cos(2 * Math.PI * t / this.half);
    return this.cut * sinc * w;
  }

  process(input) {
    if (this.step === 1) return Float32Array.from(input);
    const x = new Float32Array(this.hist.length + input.length);
    x.set(this.hist); x.set(input, this.hist.length);
    const out = [];
    let pos = this.pos;
    while (Math.floor(pos) + this.half < x.length) {
      const base = Math.floor(pos);
      let acc = 0;
      for (let k = base - this.half + 1; k <= base + this.half; k++) acc += x[k] * this.kernel(pos - k);
      out.push(acc);
      pos += this.step;
    }
    const keep = Math.max(0, Math.floor(pos) - this.half + 1);
    this.hist = x.slice(keep);
    this.pos = pos - keep;
    return Float32Array.from(out);
  }
}

class Mic {
  constructor(player) { this.player = player; this.running = false; }

  static available() { return !!(navigator.mediaDevices && navigator.mediaDevices.getUserMedia); }

  async start(onFrame) {
    this.onFrame = onFrame;
    this.stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true } });
    const ctx = this.player.context();
    this.resampler = new Resampler(ctx.sampleRate, UPLINK_RATE);
    this.frame = new Int16Array(FRAME_SAMPLES);
    this.fill = 0;
    this.source = ctx.createMediaStreamSource(this.stream);
    this.node = ctx.createScriptProcessor(2048, 1, 1); // deprecated but everywhere; needs no worklet module
    this.mute = ctx.createGain();
    this.mute.gain.value = 0; // the node must reach the destination to run; nothing is heard
    this.node.onaudioprocess = (e) => { if (this.running) this.push(this.resampler.process(e.inputBuffer.getChannelData(0))); };
    this.source.connect(this.node); this.node.connect(this.mute); this.mute.connect(ctx.destination);
    this.running = true;
  }

  push(samples) {
    for (let i = 0; i < samples.length; i++) {
      const v = Math.max(-1, Math.min(1, samples[i]));
      this.frame[this.fill++] = v < 0 ? v * 32768 : v * 32767;
      if (this.fill === FRAME_SAMPLES) { this.onFrame(this.frame); this.frame = new Int16Array(FRAME_SAMPLES); this.fill = 0; }
    }
  }

  stop() {
    if (!this.running) return;
    this.running = false;
    if (this.fill > 0) { this.onFrame(this.frame); this.fill = 0; } // the rest of the frame stays silent
    for (const n of [this.source, this.node, this.mute]) { try { n.disconnect(); } catch (e) { /* gone */ } }
    this.stream.getTracks().forEach((t) => t.stop());
  }
}

// ---- the device link: the xiaozhi protocol over the device WebSocket ------------------------------------

class Link {
  constructor(ui) { this.ui = ui; this.ws = null; this.sessionId = ""; this.downRate = UPLINK_RATE; this.opening = null; this.sent = 0; }

  get open() { return this.ws !== null && this.ws.readyState === WebSocket.OPEN && this.sessionId !== ""; }

  async connect() {
    if (this.open) return;
    if (!this.opening) this.opening = this.dial().finally(() => { this.opening = null; });
    return this.opening;
  }

  async dial() {
    const resp = await fetch(api("/api/talk", { "device-id": ME.deviceId, "client-id": ME.clientId }), { cache: "no-store" });
    const info = await resp.json();
    if (!resp.ok) throw new Error(info.error || `talk: ${resp.status}`);
    const q = new URLSearchParams({ "device-id": ME.deviceId, "client-id": ME.clientId, "protocol-version": "1" });
    if (info.authorization) q.set("authorization", info.authorization);
    const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${info.ws_path}?${q}`);
    ws.binaryType = "arraybuffer";
    const hello = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no hello from the server")), 10000);
      this.onHello = (msg) => { clearTimeout(timer); resolve(msg); };
      ws.onclose = (e) => { clearTimeout(timer); reject(new Error(`connection closed (${e.code} ${e.reason})`)); };
    });
    ws.onopen = () => ws.send(JSON.stringify({
      type: "hello", version: 1, transport: "websocket",
      audio_params: { format: "pcm", sample_rate: UPLINK_RATE, channels: 1, frame_duration: 60 },
    }));
    ws.onmessage = (e) => this.receive(e.data);
    this.ws = ws;
    const reply = await hello;
    this.sessionId = reply.session_id;
    this.downRate = (reply.audio_params && reply.audio_params.sample_rate) || UPLINK_RATE;
    ws.onclose = (e) => { this.sessionId = ""; this.ws = null; this.ui.closed(e); };
  }

  send(msg) { this.ws.send(JSON.stringify({ session_id: this.sessionId, ...msg })); }

  sendAudio(frame) {
    if (!this.open) return;
    this.ws.send(frame.buffer);
    publish("sentFrames", ++this.sent);
  }

  receive(data) {
    if (typeof data !== "string") { this.ui.audio(new Int16Array(data), this.downRate); return; }
    let msg;
    try { msg = JSON.parse(data); } catch (e) { return; }
    if (msg.type === "hello" && this.onHello) { this.onHello(msg); this.onHello = null; return; }
    this.ui.message(msg);
  }
}

// ---- the talk panel -------------------------------------------------------------------------------------

const player = new Player();
const mic = new Mic(player);
let holding = false;
let speaking = false;

function talkState(state, text) {
  const p = $("talk-state");
  p.dataset.state = state;
  p.textContent = text;
}

const ui = {
  audio(pcm, rate) { player.enqueue(pcm, rate); },
  message(msg) {
    if (msg.type === "stt") { $("stt").textContent = msg.text || ""; $("reply").textContent = ""; }
    else if (msg.type === "tts" && msg.state === "start") { speaking = true; $("reply").textContent = ""; talkState("speaking", "Wren is speaking…"); }
    else if (msg.type === "tts" && msg.state === "sentence_start") {
      const r = $("reply");
      r.textContent = r.textContent ? `${r.textContent} ${msg.text}` : msg.text;
    } else if (msg.type === "tts" && msg.state === "stop") {
      speaking = false;
      if (!holding) talkState("idle", "Hold the button (or the space bar) while you speak.");
    }
  },
  closed(e) {
    speaking = false;
    if (holding) { holding = false; mic.stop(); $("talk").classList.remove("holding"); }
    talkState("idle", e.code === 1000 ? "Disconnected (idle); the next question reconnects." : `Disconnected (${e.code} ${e.reason || ""}).`);
  },
};
const link = new Link(ui);

async function press() {
  if (holding) return;
  holding = true;
  $("talk").classList.add("holding");
  player.context(); // inside the gesture: browsers let audio start only then
  talkState("connecting", "Connecting…");
  try {
    await link.connect();
    if (speaking || player.busy) { link.send({ type: "abort" }); player.stop(); }
    if (!holding) { talkState("idle", "Hold the button while you speak."); return; }
    link.send({ type: "listen", state: "start", mode: "manual" });
    await mic.start((frame) => link.sendAudio(frame));
  } catch (err) {
    holding = false;
    $("talk").classList.remove("holding");
    if (link.open) link.send({ type: "listen", state: "stop" });
    talkState("error", `Cannot talk: ${err.message || err}`);
    return;
  }
  if (!holding) { finishTalking(); return; } // released while the microphone was starting
  talkState("listening", "Listening… release to send.");
}

function release() {
  if (!holding) return;
  holding = false;
  $("talk").classList.remove("holding");
  if (mic.running) finishTalking();
}

function finishTalking() {
  mic.stop();
  if (link.open) link.send({ type: "listen", state: "stop" });
  talkState("thinking", "Thinking…");
}

async function ask(text) {
  player.context();
  try {
    await link.connect();
  } catch (err) {
    talkState("error", `Cannot ask: ${err.message || err}`);
    return;
  }
  if (speaking || player.busy) { link.send({ type: "abort" }); player.stop(); }
  link.send({ type: "listen", state: "detect", text });
  talkState("thinking", "Thinking…");
}

function setUpTalk() {
  const button = $("talk");
  if (!Mic.available()) {
    button.disabled = true;
    talkState("no-mic", "This browser allows the microphone only on https or http://localhost: open the console there to talk (typing works here).");
  } else {
    button.addEventListener("pointerdown", (e) => { e.preventDefault(); button.setPointerCapture?.(e.pointerId); press(); });
    for (const ev of ["pointerup", "pointercancel", "lostpointercapture"]) button.addEventListener(ev, release);
    button.addEventListener("keydown", (e) => { if ((e.key === " " || e.key === "Enter") && !e.repeat) { e.preventDefault(); press(); } });
    button.addEventListener("keyup", (e) => { if (e.key === " " || e.key === "Enter") { e.preventDefault(); release(); } });
    button.addEventListener("contextmenu", (e) => e.preventDefault());
  }
  $("ask").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = $("ask-text");
    const text = input.value.trim();
    if (text) { ask(text); input.value = ""; }
  });
}

window.wrenConsole = { player, mic, link, view, me: ME };

document.addEventListener("DOMContentLoaded", async () => {
  setUpTalk();
  try {
    await loadStatus();
  } catch (err) {
    notice(`The console cannot read the server's status: ${err.message}`);
    $("feed-state").dataset.state = "error";
    $("feed-state").textContent = "no access";
    return;
  }
  openFeed();
});
