// The page: a model picker, a prompt, a continuation streamed word by word and coloured by the pointer's share, and
// the moment each word was written (the window coloured by attention, the gate, the top next words split into
// vocabulary, pointer and speller parts), as examples/app.py shows them. `window.pointerPage` is the same as an API
// (the tests and benchmarks/web.py drive it).

import * as ort from "./ort.wasm.min.mjs";
import { Model, NEW_WORD, SPELL_END, fetchJson, seeded } from "./runner.js";
import { Tokenizer } from "./tokenizer.js";

ort.env.wasm.numThreads = 1; // multi-threaded wasm needs cross-origin isolation, which a static host may not give
ort.env.wasm.wasmPaths = new URL("./", import.meta.url).href; // the runtime's files beside the page, never a CDN
// The runtime fetches and compiles its wasm (14 MB) when the first session is made: make one now (a one-node graph,
// dropped at once), so that this overlaps the page's own fetches of the model files rather than following them.
const WARM = "CAoSADo6ChAKAXgSAXkiCElkZW50aXR5EgR3YXJtWg8KAXgSCgoICAESBAoCCAFiDwoBeRIKCggIARIECgIIAUIECgAQFA==";
ort.InferenceSession.create(Uint8Array.from(atob(WARM), (c) => c.charCodeAt(0)), { executionProviders: ["wasm"] })
  .then((session) => session.release(), () => {}); // a failure shows when the model's own session is made

export const MAX_PROMPT_WORDS = 1000, MAX_WORDS = 200, CONTEXT = 100, COPIED = 0.5;
const $ = (id) => document.getElementById(id);

class InputError extends Error {}

/** A row's ids read word by word: where each word ends and each word as the running text writes it (its leading
 * space or none: what decoding the line so far adds to the text before it), as app.py's `Reading`. */
class Reading {
  constructor(model) {
    this.model = model;
    this.ids = [];
    this.ends = [];
    this.pieces = [];
    this.context = { word: 0, token: 0, text: "" };
  }
  /** Read one token; returns the piece of the word it completes, or null inside a spelled word. */
  add(token) {
    this.ids.push(token);
    const V = this.model.V;
    if (token >= V && token !== V + SPELL_END) return null;
    const k = this.ends.length, tok = this.model.tokenizer;
    const lineStart = k === 0 || this.ids[this.ends[k - 1]] === tok.eos;
    let c = this.context;
    if (lineStart || k - c.word >= CONTEXT) c = { word: k, token: k ? this.ends[k - 1] + 1 : 0, text: "" };
    this.ends.push(this.ids.length - 1);
    const whole = tok.decode(this.ids.slice(c.token));
    let piece = whole.startsWith(c.text) ? whole.slice(c.text.length) : " " + tok.decode(this.span(k)).trim();
    if (k === c.word && !lineStart) piece = " " + piece; // decoding drops a text's leading space
    this.context = { ...c, text: whole };
    this.pieces.push(piece);
    return piece;
  }
  span(k) {
    return this.ids.slice(k ? this.ends[k - 1] + 1 : 0, this.ends[k] + 1);
  }
  /** The word being spelled (bytes so far, no `</w>` yet), or "". */
  pending() {
    const rest = this.ids.slice(this.ends.length ? this.ends[this.ends.length - 1] + 1 : 0);
    return rest.length ? " " + this.model.tokenizer.decode(rest).trim() : "";
  }
}

function checkPrompt(prompt) {
  if (typeof prompt !== "string" || !prompt.trim()) throw new InputError("The prompt is empty: type a few words for the model to continue.");
  const n = prompt.split(/\s+/).filter(Boolean).length;
  if (n > MAX_PROMPT_WORDS)
    throw new InputError(`The prompt has ${n.toLocaleString("en")} words; the page takes at most ${MAX_PROMPT_WORDS.toLocaleString("en")} (the pointer sees the last 100 words).`);
}

function checkNumber(name, value, lo, hi, integer) {
  const v = Number(value);
  if (value === "" || value === null || !Number.isFinite(v) || v < lo || v > hi || (integer && !Number.isInteger(v)))
    throw new InputError(`${name} must be ${integer ? "a whole number" : "a number"} in [${lo}, ${hi}], got ${JSON.stringify(value)}.`);
  return v;
}

const loaded = new Map(); // "name/precision" -> Promise<Model>
let site = null;

async function models() {
  if (!site) {
    const response = await fetch("models.json");
    if (!response.ok) throw new Error(`models.json could not be fetched: HTTP ${response.status}`);
    site = await response.json();
  }
  return site.models;
}

async function getModel(name, precision = "int8") {
  const entry = (await models()).find((m) => m.name === name);
  if (!entry) throw new InputError(`${name} is not a model of this site: pick one of ${site.models.map((m) => m.name).join(", ")}.`);
  const key = `${name}/${precision}`;
  if (!loaded.has(key)) {
    const p = Model.load(ort, "", entry, precision);
    loaded.set(key, p);
    p.catch(() => loaded.delete(key)); // a failed load may be tried again
  }
  return loaded.get(key);
}

/** Generate after `prompt`: the new tokens, each word's record (its text, ids, kind, probability and parts, pointer
 * share, gate, and the moment it was written) and timings. `onWord(record, reading)` as each word completes;
 * `onToken(reading)` after every token. */
async function generate({ model: name, precision = "int8", prompt, maxWords = 50, sample = false, temperature = 1, topK = 40,
  seed = 0, onWord = () => {}, onToken = () => {}, stop = () => false }) {
  checkPrompt(prompt);
  maxWords = checkNumber("max words", maxWords, 1, MAX_WORDS, true);
  const opts = { sample, temperature: checkNumber("temperature", temperature, 0.05, 10, false),
    topK: checkNumber("top-k", topK, 0, 100000, true), random: seeded(checkNumber("seed", seed, 0, 2 ** 32 - 1, true)) };
  const t0 = performance.now();
  const model = await getModel(name, precision);
  const tLoaded = performance.now();
  const ids = model.tokenizer.encode(prompt);
  if (!ids.length) throw new InputError("The prompt has no words to continue: type a few words.");
  const row = model.empty(), reading = new Reading(model);
  let logP;
  for (const id of ids) {
    logP = await model.step(id, row);
    reading.add(id);
  }
  const promptWords = reading.pieces.length, tPrefilled = performance.now();
  const tokens = [], words = [], V = model.V, seenWords = new Set();
  let moment = row.moment, wordLog = 0, symbols = [], tFirst = null;
  while (words.length < maxWords && tokens.length < maxWords * 70 && !stop()) {
    const t = model.choose(logP, opts), s = t - V;
    wordLog += logP.at(t);
    tokens.push(t);
    if (s >= 0 && s !== SPELL_END) symbols.push(s);
    let record = null;
    if (t < V || s === SPELL_END) {
      const spelling = s === SPELL_END ? [...symbols, SPELL_END] : null;
      const slot = spelling ? row.words.slots.get(spelling.join(",")) : undefined;
      const logSpell = spelling ? row.tensors.prefix_log_prob.data[0] + row.tensors.next_log_probs.data[SPELL_END] : null;
      record = model.record(moment, t, wordLog, spelling, slot, logSpell);
      const piece = reading.add(t), k = reading.pieces.length - 1;
      const text = piece === "\n" ? "\n" : piece.trim();
      const inVocab = model.tokenizer.vocab.has(text) && model.tokenizer.vocab.get(text) !== model.tokenizer.unk;
      Object.assign(record, { word: text, text: piece, ids: reading.span(k), index: k, unseen: !!spelling,
        coined: !!spelling && slot === undefined && !seenWords.has(text) && !inVocab, copied: record.pointer_share >= COPIED, moment });
      if (spelling) seenWords.add(text);
      words.push(record);
      tFirst ??= performance.now();
      onWord(record, reading);
    } else reading.add(t);
    onToken(reading);
    if (words.length === maxWords) break;
    logP = await model.step(t, row);
    if (record) {
      moment = row.moment;
      wordLog = 0;
      symbols = [];
    }
  }
  const tEnd = performance.now();
  return { tokens, words, promptIds: ids, promptWords, reading, model,
    text: model.tokenizer.decode([...ids, ...tokens]).slice(model.tokenizer.decode(ids).length),
    timings: { load_ms: tLoaded - t0, prefill_ms: tPrefilled - tLoaded, first_word_ms: tFirst === null ? null : tFirst - tPrefilled,
      decode_ms: tEnd - tPrefilled, words_per_s: words.length / ((tEnd - tPrefilled) / 1000), since_navigation_first_word_ms: tFirst } };
}

/** The moment a word was written, as the page shows it: the gate, the window with its attention (oldest first) and
 * the top next words with their parts. */
async function explainWord(result, record) {
  const { model, reading } = result, m = record.moment, L = model.L, step = m.step;
  const window = [];
  if (model.pointer)
    for (let j = Math.max(0, step - L + 1); j <= step; j++) window.push({ word: reading.pieces[j], attention: m.attention[j % L] });
  const top = (await model.top(m)).map((r) => {
    let word;
    if (r.spelling === undefined) word = r.id === model.tokenizer.unk ? "<unk>" : r.id === model.tokenizer.eos ? "\n" : model.tokenizer.decode([r.id]);
    else word = r.spelling ? new TextDecoder().decode(Uint8Array.from(r.spelling.filter((b) => b < 256))) : NEW_WORD;
    return { word, probability: r.probability, vocabulary: r.vocabulary, pointer: r.pointer, speller: r.speller };
  });
  return { gate: m.gate, has_pointer: model.pointer, window, top };
}

// ---- the page ----

const shade = (share) => `hsl(${210 - 190 * share} 85% ${92 - 30 * share}%)`; // vocabulary blue -> pointer orange
const fmt = (p) => (p >= 0.001 ? p.toFixed(3) : p.toExponential(1));
const show = (text) => (text === "\n" ? "¶" : text);
let current = null, running = false, stopping = false;

function message(text, kind = "error") {
  const box = $("message");
  box.textContent = text;
  box.className = text ? kind : "";
}

async function showMoment(record) {
  const view = await explainWord(current, record);
  const panel = $("moment");
  panel.hidden = false;
  $("moment-word").textContent = show(record.word);
  $("moment-kind").textContent = `${record.kind}${record.coined ? ", coined" : ""} · p = ${fmt(record.probability)} · pointer share ${(100 * record.pointer_share).toFixed(1)}%`;
  $("gate").textContent = view.gate.toFixed(3);
  $("gate-bar").style.width = `${100 * view.gate}%`;
  const win = $("window");
  win.replaceChildren();
  const most = Math.max(1e-9, ...view.window.map((w) => w.attention));
  for (const w of view.window) {
    const span = document.createElement("span");
    span.textContent = show(w.word);
    span.title = `a = ${fmt(w.attention)}`;
    span.style.background = `rgba(230, 120, 20, ${w.attention / most})`;
    win.append(span);
  }
  if (!view.has_pointer) win.textContent = "(this model has no pointer: g = 1)";
  const body = $("top").querySelector("tbody");
  body.replaceChildren();
  for (const r of view.top) {
    const tr = document.createElement("tr");
    for (const v of [show(r.word), fmt(r.probability), fmt(r.vocabulary), fmt(r.pointer), fmt(r.speller)]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    body.append(tr);
  }
}

function addWord(record) {
  window.pointerPage.firstWordAt ??= performance.now(); // ms since navigation: benchmarks/web.py's first word
  const span = document.createElement("span");
  span.className = `word ${record.kind}${record.copied ? " copied" : ""}${record.coined ? " coined" : ""}`;
  span.textContent = record.text;
  span.style.background = shade(record.pointer_share);
  span.title = `pointer share ${(100 * record.pointer_share).toFixed(1)}%, g = ${record.gate.toFixed(3)}`;
  span.dataset.index = record.index;
  span.addEventListener("click", () => showMoment(record).catch((e) => message(String(e.message || e))));
  $("output").insertBefore(span, $("pending"));
}

async function run() {
  if (running) return;
  message("");
  const settings = { model: $("model").value.split("|")[0], precision: $("model").value.split("|")[1],
    prompt: $("prompt").value, maxWords: $("max-words").value, sample: $("mode").value === "sample",
    temperature: $("temperature").value, topK: $("top-k").value, seed: $("seed").value };
  running = true;
  stopping = false;
  $("generate").disabled = true;
  $("stop").disabled = false;
  $("output").replaceChildren(Object.assign(document.createElement("span"), { id: "prompt-text" }),
    Object.assign(document.createElement("span"), { id: "pending" }));
  $("moment").hidden = true;
  $("speed").textContent = "loading the model…";
  try {
    $("prompt-text").textContent = settings.prompt;
    const result = await generate({ ...settings, onWord: addWord, stop: () => stopping,
      onToken: (reading) => ($("pending").textContent = reading.pending()) });
    current = result;
    const t = result.timings;
    $("speed").textContent = `${result.words.length} words in ${(t.decode_ms / 1000).toFixed(2)} s: ${t.words_per_s.toFixed(1)} words/s (model load ${(t.load_ms / 1000).toFixed(2)} s, prompt ${(t.prefill_ms / 1000).toFixed(2)} s)`;
    document.body.dataset.state = "done";
  } catch (e) {
    message(e instanceof InputError ? e.message : `Error: ${String(e.message || e)}`);
    $("speed").textContent = "";
    document.body.dataset.state = "error";
  } finally {
    running = false;
    $("generate").disabled = false;
    $("stop").disabled = true;
  }
}

async function init() {
  if ("serviceWorker" in navigator) navigator.serviceWorker.register("sw.js").catch(() => {}); // offline after a load
  try {
    const list = await models();
    const select = $("model");
    for (const m of list)
      for (const precision of Object.keys(m.files)) {
        const card = m.card || {};
        const option = new Option(`${m.name} (${precision})`, `${m.name}|${precision}`);
        option.title = [card.dataset, card.test_perplexity && `test perplexity ${card.test_perplexity}`].filter(Boolean).join(", ");
        select.append(option);
      }
    const describe = () => {
      const m = list.find((x) => x.name === select.value.split("|")[0]), card = m.card || {};
      $("card").textContent = [card.dataset, card.test_perplexity && `test perplexity ${card.test_perplexity}`,
        card.validation_perplexity && `validation ${card.validation_perplexity}`, `${(m.parameters / 1e6).toFixed(2)}M parameters`,
        m.use_pointer ? `pointer over the last ${m.pointer_window} words` : "no pointer"].filter(Boolean).join(" · ");
    };
    select.addEventListener("change", describe);
    describe();
    const wanted = new URLSearchParams(location.search).get("model");
    if (wanted) select.value = [...select.options].find((o) => o.value.startsWith(`${wanted}|`))?.value ?? select.value;
    $("generate").addEventListener("click", run);
    $("stop").addEventListener("click", () => (stopping = true));
    document.body.dataset.state = "ready";
    if (new URLSearchParams(location.search).has("autorun")) run();
    else getModel(...select.value.split("|")).catch((e) => message(`Error: ${String(e.message || e)}`)); // load ahead
  } catch (e) {
    message(`Error: ${String(e.message || e)}`);
    document.body.dataset.state = "error";
  }
}

/** The tokenizer of a folder of the site (`files`: its tokenizer.json, gzipped or not, and tokenizer_config.json in
 * `dir`; a model's are its models.json entry's `tokenizer`). */
async function loadTokenizer(dir, files = ["tokenizer.json", "tokenizer_config.json"]) {
  const [json, config] = await Promise.all([fetchJson(`${dir}/${files[0]}`, "the tokenizer"),
    fetchJson(`${dir}/${files[1]}`, "the tokenizer's configuration")]);
  return new Tokenizer(json, config);
}

window.pointerPage = { generate, explainWord, getModel, loadTokenizer, models, InputError };
init();
