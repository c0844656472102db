// The exported decode step on ONNX Runtime Web: examples/onnx_generate.py's `SpelledSteps` and decoding loop in JS.
// A folder with a speller has two graphs: the word step (a vocabulary id, or `</w>` read as its spelled word's slot
// V + k) and the byte step inside a word; the row's word in progress and its slots are kept here, as the model's
// `SpelledRow` keeps them. The word step also gives the pointer's view (attention over the window's ring, gate g),
// from which `record` and `moment` split each word's probability as modeling_pointer_sentinel/inspection.py does.
// For speed (export_web.py's page graphs): the window's ring is kept and moved here, the word step reads it and gives
// none of it back (`advanceRing`); the word step reads only the ring slots that hold spelled words (`spelledSlots`),
// the byte step only those that hold a word to copy (`heldSlots`), and it
// gives the 258 symbols' log p; the int8 weights become float32 matrices when the sessions load.

import { Tokenizer } from "./tokenizer.js";

export const SPELL_END = 256, SPELL_CONT = 257, SPELL_SYMBOLS = 258;
export const NEW_WORD = "(a new word)";
const TOP_K = 10;

async function fetchBytes(url, what) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new Error(`${what} (${url}) could not be fetched: ${e.message}`);
  }
  if (!response.ok) throw new Error(`${what} (${url}) could not be fetched: HTTP ${response.status}`);
  if (!url.endsWith(".gz")) return new Uint8Array(await response.arrayBuffer());
  // export_web.py writes the large files gzipped: `python -m http.server` sends them as they are, the page inflates
  try {
    return new Uint8Array(await new Response(response.body.pipeThrough(new DecompressionStream("gzip"))).arrayBuffer());
  } catch (e) {
    throw new Error(`${what} (${url}) is not a gzip file: ${e.message}`);
  }
}

export async function fetchJson(url, what) {
  const bytes = await fetchBytes(url, what);
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (e) {
    throw new Error(`${what} (${url}) is not valid JSON: ${e.message}`);
  }
}

/** The session options of both steps: the wasm backend, every graph optimization, and int8 weights read as float32:
 * export_web.py's int8 graphs hold each matrix as int8 and a DequantizeLinear, which the runtime folds into a float32
 * matrix at load only with `disable_quant_qdq` (its float32 products are twice as fast as its int8 ones in wasm). */
export const SESSION_OPTIONS = { executionProviders: ["wasm"], graphOptimizationLevel: "all",
  extra: { session: { disable_quant_qdq: "1" } } };

/** A step's log p over the ids from `offset` on (the word step: all V + 258; the byte step: the 258 symbols, its
 * words being -inf). */
export class Scores {
  constructor(data, offset = 0) {
    this.data = data;
    this.offset = offset;
  }
  at(id) {
    const i = id - this.offset;
    return i >= 0 && i < this.data.length ? this.data[i] : -Infinity;
  }
}

/** The row's spelled words (the model's `SpelledRow`): each distinct word's slot, reused once its word is the least
 * recent, and the word in progress. */
class SpelledWords {
  constructor() {
    this.slots = new Map(); // spelling (symbols joined by ",") -> slot
    this.lastSeen = new Map(); // slot -> clock
    this.word = [];
    this.clock = 0;
  }
  slot(key, n) {
    let k = this.slots.get(key);
    if (k === undefined) {
      if (this.slots.size < n) k = this.slots.size;
      else {
        k = [...this.lastSeen].reduce((a, b) => (b[1] < a[1] ? b : a))[0];
        for (const [w, j] of this.slots) if (j === k) { this.slots.delete(w); break; }
      }
      this.slots.set(key, k);
    }
    this.lastSeen.set(k, this.clock++);
    return k;
  }
}

export class Model {
  /** A model of the site's models.json: its tokenizer, start state and the two sessions (`precision`: int8 or fp32). */
  static async load(ort, base, entry, precision) {
    const m = new Model();
    m.ort = ort;
    m.entry = entry;
    m.precision = precision;
    const dir = `${base}${entry.path}/`;
    const files = entry.files[precision];
    if (!files) throw new Error(`${entry.name} was exported without ${precision} graphs`);
    const [tokFile, tokConfigFile] = entry.tokenizer ?? ["tokenizer.json", "tokenizer_config.json"];
    // every file at once: the tokenizer, the start state, the word step, the byte step and the weights they share
    // (ONNX external data, named in each graph without .gz)
    const [tokJson, tokConfig, start, word, byte, weights] = await Promise.all([
      fetchJson(dir + tokFile, "the tokenizer"),
      fetchJson(dir + tokConfigFile, "the tokenizer's configuration"),
      fetchJson(dir + "start.json", "the start state"),
      ...files.map((f) => fetchBytes(dir + f, "the model file")),
    ]);
    const options = { ...SESSION_OPTIONS, externalData: [{ path: files[2].replace(/\.gz$/, ""), data: weights }] };
    try {
      m.word = await ort.InferenceSession.create(word, options);
      m.byte = await ort.InferenceSession.create(byte, options);
    } catch (e) {
      throw new Error(`the model file of ${entry.name} failed to load: ${String(e.message || e).split("\n")[0]}`);
    }
    m.tokenizer = new Tokenizer(tokJson, tokConfig);
    m.V = entry.vocab_size;
    m.N = entry.oov_slots;
    m.L = entry.pointer_window;
    m.K = entry.copied_symbols;
    m.pointer = entry.use_pointer;
    m.suppress = entry.suppress_tokens;
    m.suppressed = new Set(entry.suppress_tokens);
    m.start = start;
    m.ring = m.pointer && !m.word.outputNames.includes("window_keys.out"); // the word step leaves the ring to us
    m.lastHidden = m.word.inputNames.filter((n) => n.startsWith("hidden.")).sort().at(-1);
    return m;
  }

  tensor(spec) {
    const n = spec.dims.reduce((a, b) => a * b, 1);
    if (spec.type === "int64") {
      const data = new BigInt64Array(n);
      if (spec.data) spec.data.forEach((v, i) => (data[i] = BigInt(v)));
      else data.fill(BigInt(spec.fill));
      return new this.ort.Tensor("int64", data, spec.dims);
    }
    const data = spec.type === "bool" ? new Uint8Array(n) : new Float32Array(n);
    if (spec.data) data.set(spec.data.map((v) => (v === null ? -Infinity : Number(v))));
    else data.fill(spec.fill === null ? -Infinity : Number(spec.fill));
    return new this.ort.Tensor(spec.type, data, spec.dims);
  }

  /** The state before the first token: one row's tensors by input name, its spelled words and the byte step's
   * window. */
  empty() {
    const state = {};
    for (const [name, spec] of Object.entries(this.start)) state[name] = this.tensor(spec);
    const row = { tensors: state, words: new SpelledWords(), moment: null, steps: 0 };
    row.window = this.heldSlots(state.window_spellings.data, state.copy_log_mass.data);
    return row;
  }

  /** The window's ring one word on, in place, as the model's word step moves it (`decode_step`, `spelled_word_step`):
   * the word's key (the last layer's new hidden state), its context (the key before it), id, spelling and validity
   * at the ring's slot, and the slot one on. The word step reads the ring but does not give it back (export_web.py
   * drops those outputs): its inputs, kept here, are the only copy. */
  advanceRing(row, token, kept) {
    const t = row.tensors, L = this.L, s = Number(t.window_slot.data[0]);
    const keys = t.window_keys.data, D = keys.length / L, newest = (s + L - 1) % L;
    if (t.window_context) t.window_context.data.set(keys.subarray(newest * D, (newest + 1) * D), s * D);
    keys.set(t[this.lastHidden].data, s * D);
    t.window_ids.data[s] = BigInt(token);
    t.window_valid.data[s] = 1;
    t.window_spellings.data.set(kept, s * this.K);
    t.window_slot.data[0] = BigInt((s + 1) % L);
  }

  /** The word step's `held_slots`: the ring's slots whose ids are spelled words (V + k), the word's own slot (where
   * its key goes) read as the word, or slot 0 when none is. The first byte's mixture reads those alone: only they
   * can hold a word to copy (export_onnx.py's `held`). */
  spelledSlots(row, token) {
    const held = [];
    if (this.pointer) {
      const t = row.tensors, s = Number(t.window_slot.data[0]), ids = t.window_ids.data;
      for (let i = 0; i < this.L; i++) if ((i === s ? token : Number(ids[i])) >= this.V) held.push(i);
    }
    return this.ids(held.length ? held : [0]);
  }

  ids(values) {
    return new this.ort.Tensor("int64", BigInt64Array.from(values, (v) => BigInt(v)), [values.length]);
  }

  /** The byte step's window, computed once per word: the slots that hold a word to copy (copy mass above -inf),
   * their spellings (1, H, K) and copy masses (1, H), or one empty slot when none does. The byte step's mixture over
   * them is the one over all L slots (an empty slot adds nothing to it), as the model's own eager step reads them. */
  heldSlots(spellings, logCopy) {
    const K = this.K, held = [];
    for (let i = 0; i < logCopy.length; i++) if (logCopy[i] > -Infinity) held.push(i);
    const H = Math.max(held.length, 1), words = new BigInt64Array(H * K).fill(-1n), copy = new Float32Array(H).fill(-Infinity);
    held.forEach((i, j) => {
      words.set(spellings.subarray(i * K, (i + 1) * K), j * K);
      copy[j] = logCopy[i];
    });
    return { slots: held, feed: { window_spellings: new this.ort.Tensor("int64", words, [1, H, K]),
      copy_log_mass: new this.ort.Tensor("float32", copy, [1, H]) } };
  }

  /** The word step's feed for `token` (a vocabulary id, or a spelled word's slot V + k) whose spelling (its bytes
   * and `</w>`) is `spelling` (empty: a vocabulary word), the rest the row's tensors. */
  wordFeed(row, token, spelling = []) {
    const kept = new BigInt64Array(this.K).fill(-1n); // a word too long to copy is spelled, never copied
    if (spelling.length <= this.K) spelling.forEach((v, i) => (kept[i] = BigInt(v)));
    const feed = { input_ids: this.ids([token]), spelling: new this.ort.Tensor("int64", kept, [1, this.K]) };
    if (this.word.inputNames.includes("held_slots")) feed.held_slots = this.spelledSlots(row, token);
    for (const name of this.word.inputNames) if (!(name in feed)) feed[name] = row.tensors[name];
    return feed;
  }

  /** One token of the row: log p of the next (Scores: the word step's over all V + 258 ids, the byte step's over
   * the 258 symbols); `row` updated. A word step leaves the pointer's view in `row.moment`. */
  async step(token, row) {
    const s = token - this.V, words = row.words;
    let session, feed;
    if (s >= 0 && s < SPELL_SYMBOLS && s !== SPELL_END) {
      if (s === SPELL_CONT && (!words.word.length || words.word[words.word.length - 1] === SPELL_CONT))
        throw new Error("`<+w>` must follow a spelled byte.");
      words.word.push(s);
      session = this.byte;
      feed = { input_ids: this.ids([token]), ...row.window.feed };
    } else {
      let spelling = [];
      if (s === SPELL_END) {
        if (!words.word.length || words.word[words.word.length - 1] === SPELL_CONT)
          throw new Error("`</w>` must close a spelled word: it follows no byte here.");
        spelling = [...words.word, SPELL_END];
        words.word = [];
        token = this.V + words.slot(spelling.join(","), this.N);
      } else if (words.word.length) throw new Error("A spelled word must end with `</w>` before the next word.");
      session = this.word;
      feed = this.wordFeed(row, token, spelling);
    }
    for (const name of session.inputNames) if (!(name in feed)) feed[name] = row.tensors[name];
    const out = await session.run(feed);
    for (const name of session.outputNames.slice(1)) {
      const key = name.endsWith(".out") ? name.slice(0, -4) : name;
      row.tensors[key] = out[name];
    }
    const data = out[session.outputNames[0]].data;
    if (session === this.byte) return new Scores(data, this.V);
    const logP = new Scores(data);
    if (this.ring) this.advanceRing(row, token, feed.spelling.data);
    row.window = this.heldSlots(row.tensors.window_spellings.data, row.tensors.copy_log_mass.data);
    row.steps += 1;
    row.moment = this.snapshot(row, logP);
    return logP;
  }

  /** What a word step leaves for the word after it: log p, the pointer's view, the window's spelled words and the
   * speller's state (for the spelled candidates' p_spell). */
  snapshot(row, logP) {
    const t = row.tensors;
    return {
      logP: logP.data,
      step: row.steps - 1,
      attention: this.pointer ? t.attention.data : null,
      gate: this.pointer ? t.gate.data[0] : 1,
      windowIds: this.pointer ? t.window_ids.data.slice() : null, // the ring moves on at the next word
      windowValid: this.pointer ? t.window_valid.data.slice() : null,
      held: row.window, // the slots that hold a spelled word to copy, their spellings
      logCopy: t.copy_log_mass.data,
      logNew: t.new_log_mass.data[0],
      speller: Object.fromEntries(this.byte.inputNames.filter((n) => n !== "input_ids").map((n) => [n, row.window.feed[n] ?? t[n]])),
    };
  }

  /** The pointer's mass on word id `w` in a moment's window. */
  pointerMass(m, w) {
    if (!this.pointer) return 0;
    let mass = 0;
    for (let i = 0; i < this.L; i++) if (m.windowValid[i] && Number(m.windowIds[i]) === w) mass += m.attention[i];
    return mass;
  }

  /** A word written after moment `m` as the page shows it (app.py's `Reading.record`): its probability (its tokens'
   * log p summed), the vocabulary, pointer and speller parts, the pointer's share and the gate. `spelling`: the
   * symbols of a spelled word (bytes, `</w>`), `slot`: the slot its spelling held before it (undefined: new);
   * `logSpell`: log p_spell of its spelling. */
  record(m, token, logProb, spelling, slot, logSpell) {
    const p = Math.exp(logProb);
    let parts, kind;
    if (spelling) {
      let copied = 0, pointer = 0;
      if (slot !== undefined && this.pointer)
        for (let i = 0; i < this.L; i++)
          if (Number(m.windowIds[i]) === this.V + slot && m.logCopy[i] > -Infinity) {
            copied += Math.exp(m.logCopy[i]);
            pointer += m.attention[i];
          }
      kind = copied > 0 ? "copy" : "new";
      parts = { vocabulary: copied - pointer, pointer, speller: Math.exp(m.logNew + logSpell) };
    } else {
      const pointer = this.pointerMass(m, token);
      kind = "vocabulary";
      parts = { vocabulary: p - pointer, pointer, speller: 0 };
    }
    return { probability: p, kind, ...parts, pointer_share: p > 0 ? parts.pointer / p : 0, gate: m.gate };
  }

  /** log p_spell of `symbols` (bytes, then `</w>`) from a moment's speller state: the byte step over its bytes. */
  async logSpell(m, symbols) {
    let next = m.speller.next_log_probs.data, total = 0;
    const tensors = { ...m.speller };
    for (const s of symbols) {
      total += next[s];
      if (s === SPELL_END) break;
      const out = await this.byte.run({ ...tensors, input_ids: this.ids([this.V + s]) });
      for (const name of this.byte.outputNames.slice(1)) tensors[name.slice(0, -4)] = out[name];
      next = tensors.next_log_probs.data;
    }
    return total;
  }

  /** The moment view (app.py's `Reading.moment`): the gate and the top next words split into vocabulary, pointer
   * and speller parts, the spelled words the window holds and the speller's new word among them. */
  async top(m) {
    const rows = [], V = this.V;
    const best = [];
    for (let w = 0; w < V; w++) {
      const lp = m.logP[w];
      if (best.length < TOP_K || lp > best[best.length - 1][1]) {
        best.push([w, lp]);
        best.sort((a, b) => b[1] - a[1]);
        if (best.length > TOP_K) best.pop();
      }
    }
    for (const [w] of best) {
      const p = Math.exp(m.logP[w]), pointer = this.pointerMass(m, w);
      rows.push({ id: w, probability: p, vocabulary: p - pointer, pointer, speller: 0 });
    }
    if (this.pointer) {
      const seen = new Map(); // slot id -> spelling
      const words = m.held.feed.window_spellings.data, K = this.K;
      m.held.slots.forEach((i, j) => {
        const w = Number(m.windowIds[i]);
        if (w >= V && words[j * K] >= 0n && !seen.has(w)) {
          const s = [];
          for (let k = 0; k < K && words[j * K + k] >= 0n; k++) s.push(Number(words[j * K + k]));
          seen.set(w, s);
        }
      });
      let listed = 0;
      for (const [w, s] of seen) {
        const logSpell = await this.logSpell(m, s);
        listed += Math.exp(logSpell);
        let copied = 0, pointer = 0;
        for (let i = 0; i < this.L; i++)
          if (Number(m.windowIds[i]) === w && m.logCopy[i] > -Infinity) { copied += Math.exp(m.logCopy[i]); pointer += m.attention[i]; }
        const speller = Math.exp(m.logNew + logSpell);
        rows.push({ spelling: s, probability: copied + speller, vocabulary: copied - pointer, pointer, speller });
      }
      const fresh = Math.exp(m.logNew) * Math.max(1 - listed, 0);
      rows.push({ spelling: null, probability: fresh, vocabulary: 0, pointer: 0, speller: fresh });
    } else {
      const fresh = Math.exp(m.logNew);
      rows.push({ spelling: null, probability: fresh, vocabulary: 0, pointer: 0, speller: fresh });
    }
    return rows.sort((a, b) => b.probability - a.probability).slice(0, TOP_K);
  }

  /** The next token from log p (Scores): greedy (argmax, the first of ties, as numpy's), or sampled (temperature,
   * then top-k) with `random` (a seeded generator); generation_config's suppressed tokens never. */
  choose(logP, { sample = false, temperature = 1, topK = 0, random = Math.random } = {}) {
    const { data, offset } = logP;
    if (!sample) {
      let best = -1, top = -Infinity;
      for (let i = 0; i < data.length; i++)
        if ((data[i] > top || best < 0) && !this.suppressed.has(i + offset)) {
          best = i;
          top = data[i];
        }
      return best + offset;
    }
    const scores = Float64Array.from(data);
    for (const t of this.suppress) if (t >= offset && t - offset < scores.length) scores[t - offset] = -Infinity;
    for (let i = 0; i < scores.length; i++) scores[i] /= temperature;
    if (topK > 0 && topK < scores.length) {
      const kth = Float64Array.from(scores).sort()[scores.length - topK];
      for (let i = 0; i < scores.length; i++) if (scores[i] < kth) scores[i] = -Infinity;
    }
    let max = -Infinity, total = 0;
    for (const s of scores) max = Math.max(max, s);
    const p = scores.map((s) => Math.exp(s - max));
    for (const x of p) total += x;
    let u = random() * total;
    for (let i = 0; i < p.length; i++) if ((u -= p[i]) < 0 && p[i] > 0) return i + offset;
    return p.findLastIndex((x) => x > 0) + offset;
  }
}

/** A seeded uniform generator in [0, 1) (mulberry32): the same seed gives the same sample in any browser. */
export function seeded(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
