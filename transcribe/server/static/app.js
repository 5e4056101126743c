// The page of `transcribe serve`: a file through /v1/audio/transcriptions, the microphone through the
// WebSocket /v1/audio/stream. No framework, no build step; everything it loads comes from this server.
// Its URLs are relative to the page's, so it works behind a proxy that serves it under a prefix.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY = "transcribe.apiKey";
const WORKLET = document.currentScript.dataset.worklet;
const FORMATS = {txt: ["text", "text/plain"], srt: ["srt", "text/plain"], vtt: ["vtt", "text/vtt"]};
let key = sessionStorage.getItem(KEY) || "";
let ready = false; // the models are listed: the controls may be used

function show(id, text) {
  const box = $(id);
  box.textContent = text || "";
  box.hidden = !text;
}

function authHeaders() {
  return key ? {Authorization: "Bearer " + key} : {};
}

// The server's own words for a failed answer (OpenAI's error body), else its status.
function errorText(status, text) {
  try {
    const body = JSON.parse(text);
    if (body && body.error && body.error.message) return body.error.message;
  } catch (e) { /* not JSON */ }
  const plain = (text || "").trim();
  return plain && plain.length < 300 ? `${plain} (HTTP ${status})` : `the server answered HTTP ${status}`;
}

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function getJSON(path) {
  let res;
  try {
    res = await fetch(path, {headers: authHeaders(), cache: "no-store"});
  } catch (e) {
    throw new HttpError(0, "could not reach the server: is it running?");
  }
  const text = await res.text();
  if (!res.ok) throw new HttpError(res.status, errorText(res.status, text));
  return JSON.parse(text);
}

function setReady(on) {
  ready = on;
  $("go").disabled = !on || !$("file-input").files.length;
  $("mic").disabled = !on && live.state === "idle";
}

// ---- the server, its models, the key ----

async function connect() {
  try {
    const health = await getJSON("health");
    $("diarize-box").hidden = $("live-diarize-box").hidden = !health.diarizer;
    const models = (await getJSON("v1/models")).data.map((m) => m.id);
    for (const id of ["model", "live-model"]) {
      const sel = $(id), was = sel.value;
      sel.replaceChildren(...models.map((m) => new Option(m, m)));
      if (models.includes(was)) sel.value = was;
    }
    $("server").textContent = `Models: ${models.join(", ")}` + (health.diarizer ? ` · who spoke: ${health.diarizer}` : "");
    $("key-form").hidden = true;
    setReady(true);
  } catch (e) {
    setReady(false);
    if (e.status === 401) askKey(key ? e.message : "");
    else $("server").textContent = e.message;
    if (e.status === 0) setTimeout(connect, 3000); // not reachable: try again until it is
  }
}

function askKey(message) {
  $("key-form").hidden = false;
  $("server").textContent = "The server needs an API key.";
  show("key-msg", message);
  $("key").focus();
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  key = $("key").value.trim();
  sessionStorage.setItem(KEY, key);
  connect();
});

// ---- a file ----

const file = {body: null, fields: null, blob: null, words: [], spans: [], now: -1, downloads: {}};

function chosen(f) {
  $("drop-text").textContent = f ? `${f.name} (${(f.size / 1048576).toFixed(1)} MB)` : "Drop an audio or video file here, or choose one";
  $("go").disabled = !ready || !f;
}

$("file-input").addEventListener("change", () => chosen($("file-input").files[0]));
const drop = $("drop");
drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (ev) => {
  ev.preventDefault();
  drop.classList.remove("over");
  if (ev.dataTransfer.files.length) {
    $("file-input").files = ev.dataTransfer.files;
    chosen(ev.dataTransfer.files[0]);
  }
});

function formFields() {
  const fields = [["model", $("model").value]];
  const language = $("language").value.trim();
  if (language) fields.push(["language", language]);
  const beam = $("beam").value.trim();
  if (beam) fields.push(["beam_size", beam]);
  if (!$("diarize-box").hidden && $("diarize").checked) fields.push(["diarize", "true"]);
  return fields;
}

// POST the file with `fields` (+ response_format); resolves to the answer's text. XMLHttpRequest: it
// reports the upload's progress, which fetch does not.
function post(blob, fields, format, progress) {
  const task = fields.task === "translate" ? "translations" : "transcriptions";
  const form = new FormData();
  form.append("file", blob, blob.name || "audio");
  for (const [k, v] of fields.list) form.append(k, v);
  form.append("response_format", format);
  if (format === "verbose_json") {
    form.append("timestamp_granularities[]", "segment");
    if (fields.words) form.append("timestamp_granularities[]", "word");
  }
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `v1/audio/${task}`);
    for (const [k, v] of Object.entries(authHeaders())) xhr.setRequestHeader(k, v);
    if (progress) {
      xhr.upload.onprogress = (ev) => ev.lengthComputable && progress(ev.loaded / ev.total);
      xhr.upload.onload = () => progress(1);
    }
    xhr.onload = () => xhr.status === 200 ? resolve(xhr.responseText)
      : reject(new HttpError(xhr.status, errorText(xhr.status, xhr.responseText)));
    xhr.onerror = () => reject(new HttpError(0, "could not reach the server: is it running?"));
    xhr.send(form);
  });
}

function failed(where, e) {
  show(where, e.message);
  if (e.status === 401) askKey(e.message);
}

$("file-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = $("file-input").files[0];
  if (!f || !ready) return;
  show("file-msg", "");
  const fields = {list: formFields(), task: $("task").value, words: $("words").checked};
  const bar = $("progress"), status = $("file-status");
  $("go").disabled = true;
  bar.hidden = false;
  bar.value = 0;
  status.textContent = "Uploading…";
  try {
    const text = await post(f, fields, "verbose_json", (p) => {
      bar.value = p;
      status.textContent = p < 1 ? `Uploading ${Math.round(p * 100)} %` : "Transcribing…";
    });
    file.body = JSON.parse(text);
    file.blob = f; // what the downloads ask for: the file and options shown
    file.fields = fields;
    file.downloads = {};
    showResult(f, file.body);
    status.textContent = `Done: ${file.body.duration.toFixed(1)} s of audio`;
  } catch (e) {
    status.textContent = "";
    failed("file-msg", e);
  } finally {
    bar.hidden = true;
    $("go").disabled = !ready;
  }
});

function clock(t) {
  const m = Math.floor(t / 60), s = t - 60 * m;
  return `${m}:${s.toFixed(1).padStart(4, "0")}`;
}

function speakerClass(label) {
  const n = parseInt(String(label).replace(/\D+/g, ""), 10);
  return "spk" + (isNaN(n) ? 0 : n % 6);
}

// The transcript: a paragraph a segment, its text as the server gave it, each word of it a span that
// plays the audio from the word's start; the segment's time is a button (one keyboard stop a segment).
function showResult(f, body) {
  const player = $("player");
  if (player.src) URL.revokeObjectURL(player.src);
  player.src = URL.createObjectURL(f);
  const segments = body.segments || [{start: 0, end: body.duration, text: body.text}];
  const words = body.words || [];
  const box = $("transcript");
  box.replaceChildren();
  file.words = [];
  file.spans = [];
  file.now = -1;
  let w = 0;
  for (const seg of segments) {
    const p = document.createElement("p");
    p.className = "seg";
    const at = document.createElement("button");
    at.type = "button";
    at.className = "time";
    at.textContent = clock(seg.start);
    at.dataset.start = seg.start;
    at.setAttribute("aria-label", `Play from ${clock(seg.start)}`);
    at.addEventListener("click", () => play(seg.start));
    p.append(at);
    if (seg.speaker) {
      const who = document.createElement("span");
      who.className = "who " + speakerClass(seg.speaker);
      who.textContent = seg.speaker;
      p.append(who);
    }
    const text = document.createElement("span");
    text.className = "text";
    const said = seg.text.trim();
    let pos = 0;
    // the words whose middle lies in this segment, found in its text in order
    while (w < words.length && (words[w].start + words[w].end) / 2 <= seg.end + 1e-3) {
      const word = words[w++], token = word.word.trim();
      const found = token ? said.indexOf(token, pos) : -1;
      if (found < 0) continue;
      if (found > pos) text.append(said.slice(pos, found));
      const span = document.createElement("span");
      span.className = "w";
      span.textContent = token;
      span.dataset.start = word.start;
      if (word.speaker) span.classList.add(speakerClass(word.speaker));
      const i = file.words.length;
      span.addEventListener("click", () => play(file.words[i].start));
      file.words.push(word);
      file.spans.push(span);
      text.append(span);
      pos = found + token.length;
    }
    if (pos < said.length) text.append(said.slice(pos));
    p.append(text);
    box.append(p);
  }
  $("result").hidden = false;
}

function play(t) {
  const player = $("player");
  player.currentTime = t;
  player.play().catch((e) => show("file-msg", `cannot play this file here: ${e.message}`));
}

// The word being said at the player's time, highlighted while it plays.
function follow() {
  const t = $("player").currentTime, words = file.words;
  let lo = 0, hi = words.length - 1, at = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (words[mid].start <= t + 1e-3) { at = mid; lo = mid + 1; } else hi = mid - 1;
  }
  if (at >= 0 && t > words[at].end + 0.5) at = -1;
  if (at !== file.now) {
    if (file.now >= 0) file.spans[file.now].classList.remove("now");
    if (at >= 0) file.spans[at].classList.add("now");
    file.now = at;
  }
}

function tick() {
  follow();
  if (!$("player").paused) requestAnimationFrame(tick);
}

$("player").addEventListener("play", () => requestAnimationFrame(tick));
$("player").addEventListener("seeked", follow);

document.querySelectorAll("[data-fmt]").forEach((b) => b.addEventListener("click", () => download(b, b.dataset.fmt)));

// A download in the server's own format: json is the answer shown; txt, srt and vtt are asked of the
// server for the same file and options (once each).
async function download(button, fmt) {
  if (!file.body) return;
  show("file-msg", "");
  let text = file.downloads[fmt], type = "application/json";
  if (fmt === "json") text = JSON.stringify(file.body, null, 2);
  else type = FORMATS[fmt][1];
  if (text === undefined) {
    button.disabled = true;
    try {
      text = file.downloads[fmt] = await post(file.blob, file.fields, FORMATS[fmt][0]);
    } catch (e) {
      failed("file-msg", e);
      return;
    } finally {
      button.disabled = false;
    }
  }
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type: type + ";charset=utf-8"}));
  a.download = (file.blob.name || "audio").replace(/\.[^.]*$/, "") + "." + fmt;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

// ---- the microphone ----

const live = {state: "idle", ws: null, ctx: null, stream: null, pending: [], held: 0, sent: 0, rate: 16000,
  line: null, words: [], partial: "", done: false};

function liveState(state) {
  live.state = state;
  $("live").dataset.state = state;
  const mic = $("mic");
  mic.textContent = state === "idle" ? "Start" : state === "finishing" ? "Finishing…" : "Stop";
  mic.setAttribute("aria-pressed", String(state === "live" || state === "starting"));
  mic.disabled = state === "finishing" || (state === "idle" && !ready);
  $("live-model").disabled = state !== "idle";
}

$("mic").addEventListener("click", () => (live.state === "idle" ? startLive() : stopLive()));

async function startLive() {
  show("live-msg", "");
  if (!navigator.mediaDevices || !window.AudioWorkletNode) {
    show("live-msg", "the microphone needs a secure page: open it from localhost, or over HTTPS");
    return;
  }
  liveState("starting");
  try {
    live.stream = await navigator.mediaDevices.getUserMedia(
      {audio: {channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false}});
    try {
      live.ctx = new AudioContext({sampleRate: 16000});
    } catch (e) {
      live.ctx = new AudioContext(); // the server resamples whatever rate this gives
    }
    await live.ctx.audioWorklet.addModule(WORKLET);
    await live.ctx.resume();
  } catch (e) {
    cleanup();
    show("live-msg", `the microphone is not available: ${e.message}`);
    liveState("idle");
    return;
  }
  if (live.state !== "starting") { stopMic(); return; } // stopped meanwhile
  live.rate = live.ctx.sampleRate;
  live.sent = 0;
  live.done = false;
  live.words = [];
  live.partial = "";
  $("live-text").replaceChildren();
  $("live-status").textContent = $("live-lag").textContent = "";
  newLine();
  const url = new URL("v1/audio/stream", location.href); // relative: the page may sit under a proxy's prefix
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = live.ws = new WebSocket(url, key ? ["openai-insecure-api-key." + key] : []);
  ws.binaryType = "arraybuffer";
  ws.onopen = () => {
    const start = {type: "start", model: $("live-model").value, sample_rate: live.rate, encoding: "pcm_s16le"};
    if (!$("live-diarize-box").hidden && $("live-diarize").checked) start.diarize = true;
    ws.send(JSON.stringify(start));
    capture();
    liveState("live");
  };
  ws.onmessage = (ev) => onMessage(JSON.parse(ev.data));
  ws.onclose = (ev) => {
    if (live.ws !== ws) return;
    const expected = live.done && ev.code === 1000;
    if (!expected && $("live-msg").hidden) {
      show("live-msg", ev.code === 1006 || ev.code === 1012 || ev.code === 1001
        ? `the connection to the server was lost (code ${ev.code}): start again once it is back`
        : `the server closed the session (code ${ev.code})${ev.reason ? ": " + ev.reason : ""}`);
    }
    if (ev.code === 1008 && /API key/i.test(ev.reason)) askKey(ev.reason);
    cleanup();
    liveState("idle");
  };
}

// The microphone into the socket: 100 ms frames of 16-bit PCM, and the level meter.
function capture() {
  const source = live.ctx.createMediaStreamSource(live.stream);
  const node = new AudioWorkletNode(live.ctx, "tap");
  const frame = Math.round(live.rate / 10);
  node.port.onmessage = (ev) => {
    if (live.state !== "live") return;
    live.pending.push(ev.data);
    live.held += ev.data.length;
    if (live.held >= frame) send();
  };
  source.connect(node);
  live.node = node;
}

function send() {
  if (!live.held) return;
  const pcm = new Int16Array(live.held);
  let i = 0, sum = 0;
  for (const block of live.pending) {
    for (const x of block) {
      const v = Math.max(-1, Math.min(1, x));
      pcm[i++] = v < 0 ? v * 32768 : v * 32767;
      sum += v * v;
    }
  }
  live.pending = [];
  live.held = 0;
  if (live.ws && live.ws.readyState === WebSocket.OPEN) live.ws.send(pcm.buffer);
  live.sent += pcm.length;
  $("live").dataset.sent = (live.sent / live.rate).toFixed(2);
  const db = 10 * Math.log10(sum / pcm.length + 1e-10);
  $("level").value = Math.max(0, Math.min(1, (db + 60) / 60));
}

function stopLive() {
  if (live.state !== "live") { cleanup(); liveState("idle"); return; }
  send(); // the last samples, less than a frame
  liveState("finishing");
  stopMic();
  if (live.ws && live.ws.readyState === WebSocket.OPEN) live.ws.send(JSON.stringify({type: "end"}));
}

function stopMic() {
  if (live.node) live.node.port.onmessage = null;
  if (live.stream) live.stream.getTracks().forEach((t) => t.stop());
  if (live.ctx) live.ctx.close();
  live.node = live.stream = live.ctx = null;
  live.pending = [];
  live.held = 0;
  $("level").value = 0;
}

function cleanup() {
  stopMic();
  const ws = live.ws;
  live.ws = null;
  if (ws && ws.readyState <= WebSocket.OPEN) ws.close();
  if (live.line) finishLine(false);
}

// One utterance a line: its committed words in the text colour, the rest (which may still change) in
// grey. The committed part only ever grows: a word is committed once the server sends it.
function newLine() {
  const p = document.createElement("p");
  p.className = "line";
  p.dataset.n = live.lines = (live.lines || 0) + 1;
  const who = document.createElement("span");
  who.className = "who";
  who.hidden = true;
  const c = document.createElement("span");
  c.className = "c";
  const t = document.createElement("span");
  t.className = "t";
  p.append(who, c, t);
  $("live-text").append(p);
  live.line = {p, who, c, t, partial: "", heard: false, committed: "", first: live.words.length};
}

function render() {
  const l = live.line;
  if (l.c.textContent !== l.committed) l.c.textContent = l.committed;
  const rest = l.partial.startsWith(l.committed) ? l.partial.slice(l.committed.length) : "";
  if (l.t.textContent !== rest) l.t.textContent = rest;
}

function finishLine(ended) {
  const l = live.line;
  live.line = null;
  if (ended && l.partial.startsWith(l.committed)) l.committed = l.partial;
  l.t.textContent = "";
  l.c.textContent = l.committed;
  if (!l.committed.trim()) l.p.remove();
}

// A line's speaker: its first word's, once the server knows it (live diarization).
function labelLine(l) {
  const w = live.words[l.first];
  if (!w || !w.speaker || !l.who.hidden) return;
  l.who.hidden = false;
  l.who.textContent = w.speaker;
  l.who.className = "who " + speakerClass(w.speaker);
}

function onMessage(m) {
  const l = live.line;
  if (m.type === "session") {
    $("live-status").textContent = `${m.model}: chunk ${m.chunk_ms} ms, look-ahead ${m.lookahead_ms} ms` +
      (m.diarizer ? ` · who spoke: ${m.diarizer}` : "");
  } else if (m.type === "partial") {
    l.partial = live.partial = m.text;
    l.heard = true;
    render();
  } else if (m.type === "word") {
    // A partial comes only when the text changes: a new utterance whose words come before any partial
    // has the text of the last one sent (the same words as the utterance before it).
    if (!l.heard) { l.partial = live.partial; l.heard = true; }
    const token = m.word.trim(), at = token ? l.partial.indexOf(token, l.committed.length) : -1;
    if (at >= 0) l.committed = l.partial.slice(0, at + token.length);
    live.words.push({speaker: m.speaker || null, line: l});
    if (live.words.length === l.first + 1) labelLine(l);
    $("live-lag").textContent = `· heard ${(live.sent / live.rate).toFixed(1)} s, decoded to ${m.end.toFixed(1)} s`;
    render();
  } else if (m.type === "word_speakers") {
    m.speakers.forEach((s, k) => {
      const w = live.words[m.first + k];
      if (!w) return;
      w.speaker = s;
      if (m.first + k === w.line.first) labelLine(w.line);
    });
  } else if (m.type === "eou") { // (an "eob", a backchannel's end, does not end the utterance's text)
    finishLine(true);
    newLine();
  } else if (m.type === "final") {
    live.done = true;
    if (live.line) finishLine(true);
    $("live").dataset.final = m.text;
    $("live-status").textContent = `Done: ${m.duration.toFixed(1)} s of audio`;
  } else if (m.type === "error") {
    show("live-msg", m.message);
  }
}

connect();
