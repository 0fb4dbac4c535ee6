// The speech playground: one page, no build step, nothing from outside this server.
// pcm and wav play through Web Audio as their bytes arrive; mp3 (and aac where the browser can) through Media Source;
// formats a browser cannot stream (Ogg Opus, FLAC) play once downloaded. The numbers shown are this browser's own.
"use strict";

const $ = (id) => document.getElementById(id);
const MIME = { mp3: "audio/mpeg", opus: "audio/ogg", aac: "audio/aac", flac: "audio/flac", wav: "audio/wav", pcm: "audio/pcm" };
const WAV_HEADER_BYTES = 44;
let caps = null;
let current = null; // the request in flight: {controller, player}

function authHeaders(extra = {}) {
  const key = $("key").value.trim();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function api(path, init = {}) {
  const response = await fetch(path, { ...init, headers: authHeaders(init.headers || {}) });
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(`${response.status}: ${message}`);
  }
  return response;
}

function setStatus(id, text, isError = false) {
  $(id).textContent = text;
  $(id).classList.toggle("error", isError);
}

function option(select, value, label) {
  const item = document.createElement("option");
  item.value = value;
  item.textContent = label;
  select.append(item);
}

// -- what the server offers ------------------------------------------------------------------------------------------

async function loadCapabilities() {
  caps = await (await api("/v1/audio/capabilities")).json();
  $("engine").textContent = `${caps.model} on the ${caps.engine} engine`;
  $("format").replaceChildren();
  for (const format of caps.response_formats) option($("format"), format, format);
  $("format").value = "pcm";
  const speed = $("speed");
  speed.min = caps.speed.min;
  speed.max = caps.speed.max;
  speed.value = 1;
  speed.disabled = caps.speed.min === caps.speed.max;
  $("speed-field").title = speed.disabled ? "This model speaks at one speed." : "";
  $("speed-value").textContent = Number(speed.value).toFixed(2);
  $("instructions-field").hidden = !caps.instructions;
  const languages = caps.languages.filter((name) => name !== "Auto");
  $("language-field").hidden = languages.length < 2;
  $("language").replaceChildren();
  option($("language"), "", "(auto)");
  for (const name of languages) option($("language"), name, name);
  $("input").maxLength = caps.max_input_chars;
  $("clone").hidden = !caps.voice_cloning;
}

async function loadVoices(select) {
  const { voices } = await (await api("/v1/audio/voices")).json();
  const list = $("voice");
  list.replaceChildren();
  for (const voice of voices) {
    const aliases = voice.aliases && voice.aliases.length ? ` – ${voice.aliases.join(", ")}` : "";
    // a registered voice is spoken by its name; an engine's own by its id
    const value = voice.type === "uploaded" ? voice.name : voice.id;
    option(list, value, `${voice.name || voice.id} (${voice.type})${aliases}`);
  }
  if (!voices.length && caps.task_types.includes("VoiceDesign")) option(list, "", "(described by the instructions)");
  if (select) list.value = select;
  $("speak").disabled = list.options.length === 0;
  if (!list.options.length) setStatus("status", "No voices yet: upload a reference clip below.");
}

async function load() {
  try {
    await loadCapabilities();
    await loadVoices();
  } catch (error) {
    setStatus("status", `Could not reach the API: ${error.message}`, true);
  }
  document.body.dataset.ready = "1";
}

// -- playback ---------------------------------------------------------------------------------------------------------

// 16-bit little-endian mono pcm, scheduled back to back on a Web Audio clock as it arrives.
class PcmPlayer {
  constructor(sampleRate, skipBytes = 0) {
    this.context = new AudioContext();
    this.sampleRate = sampleRate;
    this.skip = skipBytes; // a WAV stream's header
    this.pending = new Uint8Array(0);
    this.next = 0;
    this.startedAt = null;
  }

  push(bytes) {
    if (this.skip) {
      const cut = Math.min(this.skip, bytes.length);
      this.skip -= cut;
      bytes = bytes.subarray(cut);
    }
    const joined = new Uint8Array(this.pending.length + bytes.length);
    joined.set(this.pending);
    joined.set(bytes, this.pending.length);
    const usable = joined.length - (joined.length % 2);
    this.pending = joined.slice(usable);
    if (!usable) return;
    const view = new DataView(joined.buffer, 0, usable);
    const samples = new Float32Array(usable / 2);
    for (let i = 0; i < samples.length; i++) samples[i] = view.getInt16(2 * i, true) / 32768;
    const buffer = this.context.createBuffer(1, samples.length, this.sampleRate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    this.next = Math.max(this.next, this.context.currentTime + 0.05);
    source.start(this.next);
    if (this.startedAt === null && this.context.state === "running") {
      this.startedAt = performance.now() + (this.next - this.context.currentTime) * 1000; // when it is heard
    }
    this.next += buffer.duration;
  }

  end() {}

  stop() { this.context.close(); }
}

// Compressed formats the browser's Media Source can append as they arrive (mp3, and aac where supported).
class MediaSourcePlayer {
  constructor(mime) {
    this.audio = $("player");
    this.source = new MediaSource();
    this.queue = [];
    this.done = false;
    this.startedAt = null;
    this.audio.src = URL.createObjectURL(this.source);
    this.audio.hidden = false;
    this.audio.onplaying = () => { if (this.startedAt === null) this.startedAt = performance.now(); };
    this.ready = new Promise((resolve) => this.source.addEventListener("sourceopen", () => {
      this.buffer = this.source.addSourceBuffer(mime);
      this.buffer.addEventListener("updateend", () => this.drain());
      resolve();
    }, { once: true }));
  }

  static supports(mime) { return window.MediaSource && MediaSource.isTypeSupported(mime); }

  async push(bytes) {
    await this.ready;
    this.queue.push(bytes);
    this.drain();
    this.audio.play().catch(() => {}); // starts once enough is buffered
  }

  drain() {
    if (!this.buffer || this.buffer.updating) return;
    if (this.queue.length) this.buffer.appendBuffer(this.queue.shift());
    else if (this.done && this.source.readyState === "open") this.source.endOfStream();
  }

  async end() { await this.ready; this.done = true; this.drain(); }

  stop() { this.audio.pause(); }
}

// Formats this browser cannot stream: played from the finished download.
class DownloadedPlayer {
  constructor(mime) { this.mime = mime; this.parts = []; this.startedAt = null; }
  push(bytes) { this.parts.push(bytes); }
  end() {
    const audio = $("player");
    audio.src = URL.createObjectURL(new Blob(this.parts, { type: this.mime }));
    audio.hidden = false;
    audio.onplaying = () => { if (this.startedAt === null) this.startedAt = performance.now(); };
    audio.play().catch(() => {});
  }
  stop() { $("player").pause(); }
}

function playerFor(format, sampleRate) {
  $("player").hidden = true;
  if (format === "pcm") return new PcmPlayer(sampleRate);
  if (format === "wav") return new PcmPlayer(sampleRate, WAV_HEADER_BYTES);
  if (MediaSourcePlayer.supports(MIME[format])) return new MediaSourcePlayer(MIME[format]);
  return new DownloadedPlayer(MIME[format]);
}

function wavFile(pcmParts, sampleRate) {
  const length = pcmParts.reduce((total, part) => total + part.length, 0);
  const header = new DataView(new ArrayBuffer(WAV_HEADER_BYTES));
  const text = (offset, value) => [...value].forEach((c, i) => header.setUint8(offset + i, c.charCodeAt(0)));
  text(0, "RIFF"); header.setUint32(4, 36 + length, true); text(8, "WAVE"); text(12, "fmt ");
  header.setUint32(16, 16, true); header.setUint16(20, 1, true); header.setUint16(22, 1, true);
  header.setUint32(24, sampleRate, true); header.setUint32(28, sampleRate * 2, true);
  header.setUint16(32, 2, true); header.setUint16(34, 16, true); text(36, "data"); header.setUint32(40, length, true);
  return new Blob([header, ...pcmParts], { type: "audio/wav" });
}

async function audioSeconds(format, blob, bytes, sampleRate) {
  if (format === "pcm") return bytes / 2 / sampleRate;
  if (format === "wav") return (bytes - WAV_HEADER_BYTES) / 2 / sampleRate;
  try {
    const context = new OfflineAudioContext(1, 1, sampleRate);
    return (await context.decodeAudioData(await blob.arrayBuffer())).duration;
  } catch (_) {
    return NaN; // this browser cannot decode the format
  }
}

// -- one request ------------------------------------------------------------------------------------------------------

function requestBody() {
  const format = $("format").value;
  const body = { input: $("input").value, response_format: format };
  const voice = $("voice").value;
  if (voice) body.voice = voice;
  else body.task_type = "VoiceDesign";
  if (!$("speed").disabled) body.speed = Number($("speed").value);
  if (caps.instructions && $("instructions").value.trim()) body.instructions = $("instructions").value.trim();
  if (!$("language-field").hidden && $("language").value) body.language = $("language").value;
  return body;
}

function show(stats) {
  const ms = (value) => (Number.isFinite(value) ? `${Math.round(value)} ms` : "–");
  $("ttfa").textContent = ms(stats.ttfa);
  $("total").textContent = ms(stats.total);
  $("audio-s").textContent = Number.isFinite(stats.audio) ? `${stats.audio.toFixed(2)} s` : "–";
  $("rtf").textContent = Number.isFinite(stats.rtf) ? stats.rtf.toFixed(3) : "–";
  $("playback").textContent = Number.isFinite(stats.playback)
    ? `${Math.round(stats.playback)} ms${stats.playback < stats.total ? " (before the last byte)" : ""}`
    : "–";
  const data = $("stats").dataset;
  for (const [name, value] of Object.entries(stats)) data[name] = Number.isFinite(value) ? String(value) : "";
}

async function speak() {
  stop();
  const body = requestBody();
  const sampleRate = caps.sample_rate;
  const player = playerFor(body.response_format, sampleRate);
  const controller = new AbortController();
  current = { controller, player };
  $("stop").disabled = false;
  $("download").hidden = true;
  $("stats").dataset.done = "";
  show({});
  setStatus("status", "Speaking…");
  const parts = [];
  let received = 0;
  const started = performance.now();
  const stats = { ttfa: NaN, total: NaN, audio: NaN, rtf: NaN, playback: NaN, format: NaN };
  try {
    const response = await api("/v1/audio/speech", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!value.length) continue;
      if (!received) { stats.ttfa = performance.now() - started; show(stats); }
      received += value.length;
      parts.push(value);
      await player.push(value);
    }
    stats.total = performance.now() - started;
    await player.end();
    const blob = body.response_format === "pcm"
      ? wavFile(parts, sampleRate)
      : new Blob(parts, { type: MIME[body.response_format] });
    stats.audio = await audioSeconds(body.response_format, blob, received, sampleRate);
    stats.rtf = stats.total / 1000 / stats.audio;
    await waitForPlayback(player);
    stats.playback = player.startedAt === null ? NaN : player.startedAt - started;
    const link = $("download");
    link.href = URL.createObjectURL(blob);
    link.download = `speech.${body.response_format === "pcm" ? "wav" : body.response_format}`;
    link.textContent = `Download (${link.download})`;
    link.hidden = false;
    setStatus("status", `Done: ${received} bytes of ${body.response_format}.`);
  } catch (error) {
    setStatus("status", error.name === "AbortError" ? "Stopped." : error.message, error.name !== "AbortError");
  } finally {
    show(stats);
    $("stats").dataset.done = "1";
    $("stop").disabled = true;
  }
}

async function waitForPlayback(player, timeoutMs = 3000) {
  const until = performance.now() + timeoutMs;
  while (player.startedAt === null && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
}

function stop() {
  if (!current) return;
  current.controller.abort();
  current.player.stop();
  current = null;
}

// -- cloning ----------------------------------------------------------------------------------------------------------

async function uploadVoice() {
  const name = $("clone-name").value.trim();
  const file = $("clone-file").files[0];
  if (!file) return setStatus("clone-status", "Choose a reference clip first.", true);
  const form = new FormData();
  form.append("name", name);
  form.append("audio_sample", file);
  form.append("consent", $("clone-consent").checked ? "true" : "false");
  if ($("clone-text").value.trim()) form.append("ref_text", $("clone-text").value.trim());
  setStatus("clone-status", "Uploading…");
  try {
    const voice = await (await api("/v1/audio/voices", { method: "POST", body: form })).json();
    await loadVoices(voice.name || name);
    setStatus("clone-status", `Registered '${voice.name || name}': selected above.`);
  } catch (error) {
    setStatus("clone-status", error.message, true);
  }
}

// -- wiring -----------------------------------------------------------------------------------------------------------

$("speak").addEventListener("click", speak);
$("stop").addEventListener("click", stop);
$("clone-upload").addEventListener("click", uploadVoice);
$("speed").addEventListener("input", () => { $("speed-value").textContent = Number($("speed").value).toFixed(2); });
$("key").value = localStorage.getItem("speech-api-key") || "";
$("key").addEventListener("change", () => { localStorage.setItem("speech-api-key", $("key").value.trim()); load(); });
load();
