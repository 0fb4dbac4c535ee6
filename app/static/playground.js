// The speech playground: one page, no build step, nothing from outside this server.
// pcm and wav play through Web Audio as their bytes arrive; mp3 (and aac where the browser can) through Media Source;
// formats a browser cannot stream (Ogg Opus, FLAC) play once downloaded. Text can also go out word by word over the
// WebSocket (as an LLM writes, or as the user types), each sentence spoken as soon as it is complete. The numbers
// shown are this browser's own.
"use strict";

const $ = (id) => document.getElementById(id);
const MIME = { mp3: "audio/mpeg", opus: "audio/ogg", aac: "audio/aac", flac: "audio/flac", wav: "audio/wav", pcm: "audio/pcm" };
const WAV_HEADER_BYTES = 44;
let caps = null;
let current = null; // what is speaking now: {stop}
let typing = null; // the "as I type" session: {stream, seen: the text already offered to it, finished: after Finish}

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
  const { data: voices } = await (await api("/v1/audio/voices")).json();  // this server's own listing
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
    this.marks = []; // {label, at}: where on the audio clock a labelled part (a sentence) begins
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
    this.next = this.slot();
    source.start(this.next);
    if (this.startedAt === null && this.context.state === "running") {
      this.startedAt = performance.now() + (this.next - this.context.currentTime) * 1000; // when it is heard
    }
    this.next += buffer.duration;
  }

  end() {}

  stop() { this.context.close(); }

  // Where the next bytes pushed will start: right after what is scheduled, or just ahead of now after a gap.
  slot() { return Math.max(this.next, this.context.currentTime + 0.05); }

  mark(label) { this.marks.push({ label, at: this.slot() }); }

  // The label of the part being heard now (null before the first).
  heard() { return this.marks.filter((m) => m.at <= this.context.currentTime).map((m) => m.label).pop() ?? null; }

  get playedOut() { return this.context.currentTime >= this.next; }
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

function show(stats, early = stats.playback < stats.total ? "before the last byte" : "") {
  const ms = (value) => (Number.isFinite(value) ? `${Math.round(value)} ms` : "–");
  $("ttfa").textContent = ms(stats.ttfa);
  $("total").textContent = ms(stats.total);
  $("audio-s").textContent = Number.isFinite(stats.audio) ? `${stats.audio.toFixed(2)} s` : "–";
  $("rtf").textContent = Number.isFinite(stats.rtf) ? stats.rtf.toFixed(3) : "–";
  $("playback").textContent = Number.isFinite(stats.playback)
    ? `${Math.round(stats.playback)} ms${early ? ` (${early})` : ""}`
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
  const mine = current = { stop: () => { controller.abort(); player.stop(); } };
  begin("Speaking…");
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
    offerDownload(blob, `speech.${body.response_format === "pcm" ? "wav" : body.response_format}`);
    setStatus("status", `Done: ${received} bytes of ${body.response_format}.`);
  } catch (error) {
    if (current === mine) setStatus("status", error.message, true); // else stopped, and the page said so
  } finally {
    if (current === mine) finish(stats);
  }
}

// The page around one run, whichever way the text goes out.
function begin(status) {
  $("stop").disabled = false;
  $("download").hidden = true;
  $("sentences").replaceChildren();
  $("sentences").hidden = true;
  $("log-lines").replaceChildren();
  $("log").hidden = true;
  $("stats").dataset.done = "";
  show({});
  setStatus("status", status);
}

function finish(stats, early) {
  show(stats, early);
  $("stats").dataset.done = "1";
  $("stop").disabled = true; // `current` stays: its audio may still be playing, until the next run or mode stops it
}

function offerDownload(blob, name) {
  const link = $("download");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  link.textContent = `Download (${name})`;
  link.hidden = false;
}

async function waitForPlayback(player, timeoutMs = 3000) {
  const until = performance.now() + timeoutMs;
  while (player.startedAt === null && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
}

function stop() {
  if (!current) return;
  current.stop();
  current = null;
  if ($("stop").disabled) return; // it had finished already
  $("stop").disabled = true;
  $("stats").dataset.done = "1";
  setStatus("status", "Stopped.");
}

// -- text streamed in: WS /v1/audio/speech/stream --------------------------------------------------------------------

const nonSpace = (text) => text.replace(/\s+/g, ""); // the server reports sentences with their spaces normalized

function streamUrl() {
  const url = new URL("/v1/audio/speech/stream", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const key = $("key").value.trim();
  if (key) url.searchParams.set("api_key", key); // a browser cannot set a WebSocket's headers
  return url.href;
}

// The codes the server closes a session with after telling why in an `error` (docs/websocket.md).
const TOLD_BEFORE_CLOSE = new Set([1000, 1001, 1008, 1011, 1013]);

// One WebSocket session: text goes out piece by piece, each sentence's pcm plays as it arrives (back to back, in order,
// on one Web Audio clock), and every message sent or received is logged on the page in the order it happened.
class TextStream {
  constructor(config) {
    this.player = new PcmPlayer(caps.sample_rate); // made in the click: audio may start from a user's gesture
    this.started = performance.now();
    this.sentText = "";
    this.sentChars = 0; // non-space characters sent so far
    this.sentPieces = []; // {chars: sentChars after the piece, at: when it was sent}
    this.sentences = [];
    this.parts = [];
    this.received = 0;
    this.sentence = -1; // whose audio frames are arriving
    this.refusal = null; // the error told while that sentence is open (from its audio.start to its audio.done)
    this.stats = { ttfa: NaN, total: NaN, audio: NaN, rtf: NaN, playback: NaN };
    this.ttfaFrom = NaN; // when the piece that ended the first sentence was sent
    this.closed = false;
    this.errors = []; // the server's error messages, in order
    this.lastError = null; // the last error's message while nothing else has come after it: a close now may be its
    this.done = new Promise((resolve, reject) => { this.resolve = resolve; this.reject = reject; });
    this.done.catch(() => {}); // failures are read by whoever awaits it
    this.socket = new WebSocket(streamUrl());
    this.socket.binaryType = "arraybuffer";
    this.opened = new Promise((resolve) => { this.socket.onopen = resolve; });
    this.socket.onmessage = (event) => this.receive(event.data);
    this.socket.onclose = (event) => this.disconnected(event);
    this.config = { type: "session.config", ...config, response_format: "pcm" };
    this.ticker = setInterval(() => this.tick(), 40);
  }

  async open() {
    await Promise.race([this.opened, this.done]);
    this.post(this.config);
    this.log("session.config", JSON.stringify(this.config));
  }

  post(message) { this.socket.send(JSON.stringify(message)); }

  // Sends a piece of text; false once the session has ended.
  send(text) {
    if (this.closed) return false;
    this.post({ type: "input.text", text });
    this.sentText += text;
    this.sentChars += nonSpace(text).length;
    this.sentPieces.push({ chars: this.sentChars, at: performance.now() });
    this.log("sent", JSON.stringify(text));
    return true;
  }

  inputDone() {
    if (this.closed) return;
    this.post({ type: "input.done" });
    this.log("input.done", "");
  }

  receive(data) {
    this.lastError = null; // set again below if this is an error
    if (typeof data !== "string") return this.audio(new Uint8Array(data));
    const message = JSON.parse(data);
    if (message.type === "audio.start") {
      this.sentence = message.sentence_index;
      this.sentences[this.sentence] = message.sentence_text;
      this.player.sampleRate = message.sample_rate;
      this.refusal = null;
      const item = document.createElement("li");
      item.textContent = message.sentence_text;
      $("sentences").append(item);
      $("sentences").hidden = false;
      this.log("audio.start", `#${this.sentence} ${JSON.stringify(message.sentence_text)}`, this.sentence);
    } else if (message.type === "audio.done") {
      const index = message.sentence_index;
      this.log("audio.done", `#${index} ${message.total_bytes} bytes${message.error ? " error" : ""}`, index);
      if (message.error) this.notSpoken(index, message.total_bytes, this.refusal);
      this.refusal = null;
    } else if (message.type === "session.done") {
      this.log("session.done", `${message.total_sentences} sentences`);
      this.closed = true;
      this.post({ type: "session.close" });
      this.log("session.close", "");
      this.resolve(message);
    } else if (message.type === "error") {
      // Not the end by itself: after most errors (a sentence the voice cannot read, skipped) the session goes on, and
      // the server closes the connection after those that end it.
      this.errors.push(message.message);
      this.lastError = message.message;
      this.refusal = message.message; // the open sentence's, if its audio.done says it ended with an error
      this.log("error", message.code ? `${message.code}: ${message.message}` : message.message);
      if (current === this) setStatus("status", message.message, true);
    }
  }

  audio(bytes) {
    const now = performance.now();
    if (!this.received) this.firstAudio(now);
    if (this.player.marks.at(-1)?.label !== this.sentence) { // by label: a sentence skipped has no audio, no mark
      this.player.mark(this.sentence);
      this.log("audio", `#${this.sentence} first bytes`, this.sentence);
    }
    this.received += bytes.length;
    this.parts.push(bytes);
    this.stats.total = now - this.started;
    this.player.push(bytes);
  }

  // A sentence whose audio.done says its audio did not come to its end (refused: the voice cannot read it; or cut
  // short): listed as not spoken, with the error told while it was open, and never marked spoken or speaking.
  notSpoken(index, bytes, reason) {
    const item = $("sentences").children[index];
    if (!item) return;
    item.className = "refused";
    item.dataset.refused = "1";
    const note = document.createElement("span");
    note.className = "reason";
    note.textContent = ` (${bytes ? "cut short" : "not spoken"}${reason ? `: ${reason}` : ""})`;
    item.append(note);
    item.title = reason ?? "";
  }

  // TTFA counts from sending the piece that ended the first sentence (every sentence ends in a piece sent earlier).
  firstAudio(now) {
    const first = nonSpace(this.sentences[0] ?? "");
    const found = nonSpace(this.sentText).indexOf(first);
    const end = (found < 0 ? 0 : found) + first.length;
    const piece = this.sentPieces.find((p) => p.chars >= end) ?? this.sentPieces[this.sentPieces.length - 1];
    this.ttfaFrom = piece ? piece.at : this.started;
    this.stats.ttfa = now - this.ttfaFrom;
    show(this.stats);
  }

  // Follows the audio clock: marks the sentence being heard, and the end of playback.
  tick() {
    const heard = this.player.heard();
    const items = [...$("sentences").children];
    if (heard !== null && heard !== this.heard) {
      this.heard = heard;
      this.log("speaking", `#${heard}`, heard);
      items.forEach((item, i) => {
        if (!item.dataset.refused) item.className = i < heard ? "spoken" : i === heard ? "speaking" : "";
      });
    }
    if (this.closed && this.player.playedOut) {
      clearInterval(this.ticker);
      items.forEach((item) => { if (!item.dataset.refused) item.className = "spoken"; });
      if (this.received) this.log("played", "");
    }
  }

  fail(message) {
    if (this.closed) return;
    this.closed = true;
    this.log("error", message);
    this.socket.close();
    this.reject(new Error(message));
  }

  // The connection closed before the session was done. Where the server closed it with a code it sends an error
  // before (the session ended: a wrong key or voice, a full server, a drain, its own failure, idle) and that error
  // came right before, nothing after it, that error says why (already logged); else the close itself does: 1006 (no
  // close frame), 1009 (a message too big) and the like come with no error, and an earlier one (a sentence refused,
  // the session going on) had nothing to do with it.
  disconnected(event) {
    if (this.closed) return;
    const close = `code ${event.code}${event.reason ? `: ${event.reason}` : ""}`;
    const cause = TOLD_BEFORE_CLOSE.has(event.code) ? this.lastError : null;
    if (cause === null) return this.fail(`The connection closed (${close}).`);
    this.closed = true;
    this.log("closed", close);
    this.reject(new Error(cause));
  }

  stop() {
    this.fail("Stopped.");
    clearInterval(this.ticker);
    this.player.stop();
  }

  log(kind, text, sentence = "") {
    const at = performance.now() - this.started;
    const line = document.createElement("li");
    Object.assign(line.dataset, { kind, at: at.toFixed(1), sentence, detail: text });
    line.textContent = `+${(at / 1000).toFixed(3)} s  ${kind}  ${text}`;
    $("log-lines").append(line);
    $("log").hidden = false;
  }

  // What the run measured, once it has ended; playback is heard from the same moment TTFA counts from.
  result() {
    const lastSent = this.sentPieces.length ? this.sentPieces[this.sentPieces.length - 1].at : NaN;
    const heardAt = this.player.startedAt ?? NaN;
    this.stats.audio = this.received / 2 / this.player.sampleRate;
    this.stats.playback = heardAt - this.ttfaFrom;
    return [this.stats, heardAt < lastSent ? "before the last word was sent" : ""];
  }
}

function streamConfig() {
  const { input, response_format, ...config } = requestBody(); // the same fields as the HTTP request
  return config;
}

function startStream(status) {
  stop();
  const stream = new TextStream(streamConfig());
  current = stream;
  begin(status);
  return stream;
}

async function ended(stream, run) {
  try {
    await run();
    const message = await stream.done;
    const [stats, early] = stream.result();
    if (current !== stream) return;
    if (stream.received) offerDownload(wavFile(stream.parts, stream.player.sampleRate), "speech.wav");
    const sentences = `${message.total_sentences} sentence${message.total_sentences === 1 ? "" : "s"}`;
    const errors = stream.errors.length;
    const last = stream.errors[errors - 1];
    const told = errors ? ` ${errors === 1 ? "An error" : `${errors} errors, the last`}: ${last}` : "";
    setStatus("status", `Done: ${sentences}, ${stream.received} bytes of pcm.${told}`, errors > 0);
    finish(stats, early);
  } catch (error) {
    if (current !== stream) return; // stopped, and the page said so
    setStatus("status", error.message, true);
    finish(...stream.result());
  }
}

// The text in the box, word by word (each with the spaces after it) at the chosen rate, then input.done.
function streamWords() {
  const stream = startStream("Sending word by word…");
  const words = $("input").value.match(/\S+\s*/g) || [];
  const interval = 1000 / Math.max(1, Number($("rate").value) || 20);
  return ended(stream, async () => {
    await stream.open();
    const start = performance.now();
    for (const [i, word] of words.entries()) {
      await new Promise((resolve) => setTimeout(resolve, start + i * interval - performance.now()));
      if (!stream.send(word)) return;
    }
    stream.inputDone();
  });
}

// "As I type": a word goes out when it is finished (a space or a line break after it), so a typo can be fixed first;
// Finish sends the rest and input.done.
function startTyping() {
  const stream = startStream("Type: each word is sent when you finish it.");
  typing = { stream, seen: "", finished: false };
  $("speak").textContent = "Finish";
  const done = ended(stream, async () => {
    await stream.open();
    sendTyped();
    $("input").focus();
  });
  return done.finally(() => {
    if (typing && typing.stream === stream) typing = null;
    showMode();
  });
}

function sendTyped(final = false) {
  // after Finish the utterance is closed: text sent now would start another one that this page never plays
  if (!typing || typing.finished) return;
  const text = $("input").value;
  const ready = final ? text : text.slice(0, text.search(/\S*$/));
  const fresh = ready.slice(typing.seen.length);
  if (!ready.startsWith(typing.seen)) setStatus("status", "Text already sent stays as sent; additions go out.");
  else if (fresh) typing.stream.send(fresh);
  typing.seen = ready;
}

function finishTyping() {
  sendTyped(true);
  typing.finished = true;
  typing.stream.inputDone();
  $("speak").disabled = true;
}

const STATS_NOTES = {
  whole: "Measured by this browser: TTFA from sending the request to the first audio bytes; realtime factor = time " +
    "to receive everything ÷ audio duration (below 1 is faster than real time).",
  streamed: "Measured by this browser: TTFA from sending the word that ends the first sentence to its first audio " +
    "bytes. It includes the wait until the server can tell the sentence has ended: the next word, a line break, or a " +
    "pause in the text. Playback began counts from the same word; total from the first word sent to the last audio " +
    "byte.",
};
const MODE_NOTES = {
  whole: "",
  words: "The text goes over the WebSocket (/v1/audio/speech/stream) one word at a time, as an LLM writes it; each " +
    "sentence is spoken as soon as it is complete, while later words are still being sent. Played as pcm.",
  typing: "Press Start and type: each word is sent when you finish it, and each sentence is spoken once it is " +
    "complete. Finish sends the rest. Played as pcm.",
};

function showMode() {
  const mode = $("mode").value;
  $("rate-field").hidden = mode !== "words";
  $("format").disabled = mode !== "whole";
  $("mode-note").textContent = MODE_NOTES[mode];
  $("mode-note").hidden = mode === "whole";
  const note = STATS_NOTES[mode === "whole" ? "whole" : "streamed"];
  $("stats-note").textContent = note;
  $("ttfa-label").title = note;
  $("speak").textContent = mode === "typing" ? "Start" : "Speak";
  $("speak").disabled = $("voice").options.length === 0;
}

function onSpeak() {
  if (typing) return finishTyping();
  return { whole: speak, words: streamWords, typing: startTyping }[$("mode").value]();
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

$("speak").addEventListener("click", onSpeak);
$("mode").addEventListener("change", () => { stop(); showMode(); });
$("input").addEventListener("input", () => sendTyped());
$("stop").addEventListener("click", stop);
$("clone-upload").addEventListener("click", uploadVoice);
$("speed").addEventListener("input", () => { $("speed-value").textContent = Number($("speed").value).toFixed(2); });
$("key").value = localStorage.getItem("speech-api-key") || "";
$("key").addEventListener("change", () => { localStorage.setItem("speech-api-key", $("key").value.trim()); load(); });
showMode();
load();
