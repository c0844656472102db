// The folder's tokenizer in the browser: tokenizer.json's text rules (normalizers, pre-tokenizers, the word-level
// model, the decoder) and spell mode's open vocabulary (tokenization_pointer_sentinel.py: a word the vocabulary lacks
// is its UTF-8 bytes, then `</w>`). Only the parts tokenizer.json's of these folders use are read; any other part is
// an error at load, never a silent difference.

// Oniguruma (the `tokenizers` regex engine) reads \w, \d, \s and \b by Unicode; JavaScript's are ASCII, so they are
// written out as Unicode properties. Onig's ^ and $ are line anchors (the "m" flag).
const WORD = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
const CLASSES = { w: `[${WORD}]`, W: `[^${WORD}]`, d: "\\p{Nd}", D: "\\P{Nd}", s: "\\p{White_Space}", S: "\\P{White_Space}" };
const IN_CLASS = { w: WORD, d: "\\p{Nd}", D: "\\P{Nd}", s: "\\p{White_Space}", S: "\\P{White_Space}" };
const BOUNDARY = `(?:(?<=[${WORD}])(?![${WORD}])|(?<![${WORD}])(?=[${WORD}]))`;
const SYNTAX = new Set("^$\\.*+?()[]{}|/");

/** An Onig pattern as a JavaScript RegExp ("gmu"); atomic groups (?>X) become (?=(?<aN>X))\k<aN>. */
export function onigRegExp(source) {
  let out = "", inClass = false, atomic = 0;
  const groups = []; // per open "(": the atomic group's name, or null
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (c === "\\") {
      const e = source[++i];
      if (inClass && e in IN_CLASS) out += IN_CLASS[e];
      else if (!inClass && e in CLASSES) out += CLASSES[e];
      else if (!inClass && e === "b") out += BOUNDARY;
      else if ("nrtfv0123456789".includes(e)) out += "\\" + e;
      else if (e === "x" && source[i + 1] === "{") { const j = source.indexOf("}", i); out += "\\u" + source.slice(i + 1, j + 1); i = j; }
      else if (e === "x" || e === "u" || e === "p" || e === "P") out += "\\" + e;
      else if (/[A-Za-z]/.test(e)) throw new Error(`unsupported escape \\${e} in ${source}`);
      else out += SYNTAX.has(e) || (inClass && e === "-") ? "\\" + e : e; // "u" mode refuses needless escapes (re.escape's)
    } else if (inClass) {
      if (c === "[") throw new Error(`nested class in ${source}`);
      if (c === "]") inClass = false;
      out += c;
    } else if (c === "[") {
      inClass = true;
      out += c;
      if (source[i + 1] === "^") out += source[++i];
      if (source[i + 1] === "]") out += "\\" + source[++i]; // a leading ] is a literal in Onig
    } else if (c === "(" && source.startsWith("(?>", i)) {
      const name = `a${atomic++}`;
      groups.push(name);
      out += `(?=(?<${name}>`;
      i += 2;
    } else if (c === "(") {
      groups.push(null);
      out += c;
    } else if (c === ")") {
      const name = groups.pop();
      out += name ? `))\\k<${name}>` : ")";
    } else out += c;
  }
  return new RegExp(out, "gmu");
}

function pattern(p) {
  if (p.Regex !== undefined) return onigRegExp(p.Regex);
  return new RegExp(p.String.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&"), "gu");
}

// ---- normalized text: each character with the span of the input it came from (code-unit offsets) ----

class Normalized {
  constructor(chars, spans) {
    this.chars = chars; // code points (strings)
    this.spans = spans; // [start, end) in the input, per code point
  }
  static of(text, offset) {
    const chars = Array.from(text), spans = [];
    let at = offset;
    for (const c of chars) { spans.push([at, at + c.length]); at += c.length; }
    return new Normalized(chars, spans);
  }
  get text() { return this.chars.join(""); }
  /** Every match of `re` replaced by `content`; the new characters keep the span of what they replaced. */
  replace(re, content) {
    const text = this.text, index = codeUnitToPoint(this.chars);
    const chars = [], spans = [];
    let done = 0;
    for (const m of text.matchAll(re)) {
      const a = index[m.index], b = index[m.index + m[0].length];
      chars.push(...this.chars.slice(done, a));
      spans.push(...this.spans.slice(done, a));
      const span = a < b ? [this.spans[a][0], this.spans[b - 1][1]] : a < this.spans.length ? [this.spans[a][0], this.spans[a][0]] : [0, 0];
      for (const c of Array.from(content)) { chars.push(c); spans.push(span); }
      done = b;
    }
    return new Normalized([...chars, ...this.chars.slice(done)], [...spans, ...this.spans.slice(done)]);
  }
  lowercase() {
    const chars = [], spans = [];
    this.chars.forEach((c, i) => { for (const l of Array.from(c.toLowerCase())) { chars.push(l); spans.push(this.spans[i]); } });
    return new Normalized(chars, spans);
  }
  slice(a, b) { return new Normalized(this.chars.slice(a, b), this.spans.slice(a, b)); }
  /** Pieces: the matches of `re` ("isolated": matches and the stretches between; "removed": the stretches). */
  split(re, behavior) {
    const text = this.text, index = codeUnitToPoint(this.chars), pieces = [];
    let done = 0;
    for (const m of text.matchAll(re)) {
      if (!m[0].length) continue;
      const a = index[m.index], b = index[m.index + m[0].length];
      if (a > done) pieces.push(this.slice(done, a));
      if (behavior === "Isolated") pieces.push(this.slice(a, b));
      done = b;
    }
    if (done < this.chars.length) pieces.push(this.slice(done, this.chars.length));
    return pieces;
  }
}

function codeUnitToPoint(chars) {
  const index = [];
  chars.forEach((c, i) => { for (let k = 0; k < c.length; k++) index.push(i); });
  index.push(chars.length);
  return index;
}

const WHITESPACE = /^\p{White_Space}$/u;

function normalizer(spec) {
  if (!spec) return (n) => n;
  switch (spec.type) {
    case "Sequence": { const steps = spec.normalizers.map(normalizer); return (n) => steps.reduce((x, f) => f(x), n); }
    case "Replace": { const re = pattern(spec.pattern); return (n) => n.replace(re, spec.content); }
    case "Lowercase": return (n) => n.lowercase();
    default: throw new Error(`unsupported normalizer ${spec.type}`);
  }
}

function preTokenizer(spec) {
  switch (spec.type) {
    case "Sequence": { const steps = spec.pretokenizers.map(preTokenizer); return (ps) => steps.reduce((x, f) => f(x), ps); }
    case "WhitespaceSplit":
      return (ps) => ps.flatMap((p) => {
        const out = [];
        let start = -1;
        p.chars.forEach((c, i) => {
          if (WHITESPACE.test(c)) { if (start >= 0) out.push(p.slice(start, i)); start = -1; }
          else if (start < 0) start = i;
        });
        if (start >= 0) out.push(p.slice(start, p.chars.length));
        return out;
      });
    case "Split": {
      if (spec.invert || !["Isolated", "Removed"].includes(spec.behavior)) throw new Error("unsupported Split");
      const re = pattern(spec.pattern);
      return (ps) => ps.flatMap((p) => p.split(re, spec.behavior));
    }
    default: throw new Error(`unsupported pre-tokenizer ${spec.type}`);
  }
}

// Decoders act on each token until Fuse joins them, then on the one string.
function decoder(spec) {
  switch (spec.type) {
    case "Sequence": { const steps = spec.decoders.map(decoder); return (ts) => steps.reduce((x, f) => f(x), ts); }
    case "Replace": { const re = pattern(spec.pattern); return (ts) => ts.map((t) => t.replace(re, () => spec.content)); }
    case "Fuse": return (ts) => [ts.join("")];
    case "ByteFallback": return (ts) => ts; // a no-op on decoded words (tokenization_pointer_sentinel.py)
    default: throw new Error(`unsupported decoder ${spec.type}`);
  }
}

export const MAX_SPELLED_BYTES = 64;
const QUOTE = '"', EOS = "<eos>", UNK = "<unk>";

export class Tokenizer {
  /** tokenizer.json and tokenizer_config.json of a spell-mode folder, as parsed JSON. */
  constructor(json, config) {
    if (!config.spell_unseen) throw new Error("the page reads spell-mode tokenizers (spell_unseen) only");
    if (json.model.type !== "WordLevel") throw new Error(`unsupported model ${json.model.type}`);
    this.vocab = new Map(Object.entries(json.model.vocab));
    this.V = this.vocab.size;
    this.tokens = [];
    for (const [w, i] of this.vocab) this.tokens[i] = w;
    for (const t of json.added_tokens) this.tokens[t.id] = t.content;
    this.added = new Map(json.added_tokens.map((t) => [t.content, t.id]));
    const names = [...this.added.keys()].sort((a, b) => b.length - a.length);
    this.addedRe = new RegExp(names.map((n) => n.replace(/[.*+?^${}()|[\]\\/-]/g, "\\$&")).join("|"), "gu");
    this.unk = this.vocab.get(json.model.unk_token ?? UNK);
    this.eos = this.vocab.get(EOS);
    this.END = this.V + 256; // `</w>`
    this.CONT = this.V + 257; // `<+w>`
    this.normalize = normalizer(json.normalizer);
    this.preTokenize = json.pre_tokenizer ? preTokenizer(json.pre_tokenizer) : (ps) => ps;
    this.decodeTokens = json.decoder ? decoder(json.decoder) : (ts) => [ts.join(" ")];
    this.wikitext = config.text_rules === "wikitext";
  }

  /** The ids of `text`, as the Python tokenizer's `tokenizer(text)["input_ids"]` gives them. */
  encode(text) {
    // the backend: added tokens cut out of the input first, each stretch between them normalized and split
    const tokens = []; // [id, start, end] (offsets in the input)
    let done = 0;
    const stretch = (a, b) => {
      if (a >= b) return;
      for (const p of this.preTokenize([this.normalize(Normalized.of(text.slice(a, b), a))])) {
        if (!p.chars.length) continue;
        tokens.push([this.vocab.get(p.text) ?? this.unk, p.spans[0][0], p.spans[p.spans.length - 1][1]]);
      }
    };
    for (const m of text.matchAll(this.addedRe)) {
      stretch(done, m.index);
      tokens.push([this.added.get(m[0]), m.index, m.index + m[0].length]);
      done = m.index + m[0].length;
    }
    stretch(done, text.length);
    // spell mode (`_spelled_row`): each unknown word spelled from the input as written; a spelling token's name in
    // the text is spelled with the whole stretch of tokens it touches (no space between them)
    const spelling = (t) => t[0] === this.unk || (t[0] >= this.V && t[0] < this.V + 258);
    const spans = []; // [first, last, whole]
    tokens.forEach((t, k) => {
      if (!spelling(t) || (spans.length && k <= spans[spans.length - 1][1])) return;
      if (t[0] === this.unk) { spans.push([k, k, false]); return; }
      let first = k, last = k;
      while (first > 0 && tokens[first - 1][2] === tokens[first][1]) first--;
      while (last + 1 < tokens.length && tokens[last][2] === tokens[last + 1][1]) last++;
      while (spans.length && spans[spans.length - 1][0] >= first) spans.pop();
      spans.push([first, last, true]);
    });
    const ids = [];
    let from = 0;
    for (const [first, last, whole] of spans) {
      for (let k = from; k < first; k++) ids.push(tokens[k][0]);
      const word = text.slice(tokens[first][1], tokens[last][2]);
      ids.push(...(whole || (word !== UNK && word !== "") ? this.spell(word) : [this.unk]));
      from = last + 1;
    }
    for (let k = from; k < tokens.length; k++) ids.push(tokens[k][0]);
    return ids;
  }

  /** A word's ids: its UTF-8 bytes in pieces of at most MAX_SPELLED_BYTES (cut between characters), `<+w>` after each
   * piece but the last, `</w>` after the last. */
  spell(word) {
    let data = new TextEncoder().encode(word);
    const ids = [];
    while (data.length > MAX_SPELLED_BYTES) {
      let cut = MAX_SPELLED_BYTES;
      while ((data[cut] & 0xc0) === 0x80) cut--;
      ids.push(...Array.from(data.slice(0, cut), (b) => this.V + b), this.CONT);
      data = data.slice(cut);
    }
    return [...ids, ...Array.from(data, (b) => this.V + b), this.END];
  }

  /** Text of `ids` (the Python tokenizer's `decode`): spelled words as their bytes spell them, the text rules'
   * joins, no leading space, WikiText's quotes paired. */
  decode(ids) {
    let tokens = [], run = [];
    const flush = (final) => {
      if (!run.length) return;
      const bytes = Uint8Array.from(run);
      let word = new TextDecoder("utf-8", { fatal: false }).decode(bytes, { stream: final });
      if (word) tokens.push(word);
      run = [];
    };
    for (const i of ids) {
      if (i >= this.V && i < this.V + 256) run.push(i - this.V);
      else if (i === this.CONT) continue;
      else {
        flush(false);
        if (i !== this.END && this.tokens[i] !== undefined) tokens.push(this.tokens[i]);
      }
    }
    flush(true); // a word the ids end inside: what its bytes spell so far, less a character still coming
    if (this.wikitext) tokens = pairQuotes(tokens);
    const text = this.decodeTokens(tokens).join("");
    return text.startsWith(" ") ? text.slice(1) : text;
  }
}

/** An opening `"` written onto the word after it, a closing one onto the word before it, within a line. */
function pairQuotes(tokens) {
  const out = [];
  let inside = false, pending = false;
  for (const tok of tokens) {
    if (tok === EOS) { if (pending) out.push(QUOTE); out.push(tok); inside = pending = false; }
    else if (tok === QUOTE && inside) {
      if (pending) out.push(QUOTE + QUOTE);
      else if (out.length && out[out.length - 1] !== EOS) out[out.length - 1] += QUOTE;
      else out.push(QUOTE);
      inside = pending = false;
    } else if (tok === QUOTE) inside = pending = true;
    else { out.push(pending ? QUOTE + tok : tok); pending = false; }
  }
  if (pending) out.push(QUOTE);
  return out;
}
