// bert-trace view: draws one dump ("bert-trace-view/1" JSON embedded in the page).
// Plain JavaScript, no library, no module, no network: every byte it needs is in this file.
// Colours and layout constants are documented in COLORS.md (the Rust SVG renderer uses the same).
'use strict';
(function () {
  // ---------------------------------------------------------------- constants (see COLORS.md)
  // Sequential scale (probabilities, non-negative data): ColorBrewer Blues, 9 stops.
  const SEQ_STOPS = [
    [0.0, '#f7fbff'], [0.125, '#deebf7'], [0.25, '#c6dbef'], [0.375, '#9ecae1'], [0.5, '#6baed6'],
    [0.625, '#4292c6'], [0.75, '#2171b5'], [0.875, '#08519c'], [1.0, '#08306b'],
  ];
  // Diverging scale (signed data), centred at 0: ColorBrewer RdBu reversed, 11 stops (blue < 0 < red).
  const DIV_STOPS = [
    [0.0, '#053061'], [0.1, '#2166ac'], [0.2, '#4393c3'], [0.3, '#92c5de'], [0.4, '#d1e5f0'],
    [0.5, '#f7f7f7'], [0.6, '#fddbc7'], [0.7, '#f4a582'], [0.8, '#d6604d'], [0.9, '#b2182b'],
    [1.0, '#67001f'],
  ];
  const MASKED_COLOR = '#9e9e9e';
  // A score at or below this is masked: the library's rule, sent with the data (masked_at).
  let MASKED_AT;
  const NAN_COLOR = '#ff00ff';
  // One colour per head (cycled past 16): Tableau 10, then six darker hues.
  const HEAD_COLORS = [
    '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
    '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173', '#e7ba52',
  ];
  const SEG_COLORS = ['#1f77b4', '#ff7f0e']; // sentence A, sentence B
  const MARK_COLOR = '#d62728'; // masked positions
  // In a served page: the cells an explanation reads, and the element it explains.
  const LIT_COLOR = '#ff7f0e';
  const TARGET_COLOR = '#000000';
  const TEXT_COLOR = '#222222';
  const PAD_TEXT_COLOR = '#9e9e9e';
  const HOVER_BG = '#e6e6e6';
  const LABEL_CHARS = 14; // longer token labels are cut to 13 characters + "…"

  // Head view (canvas).
  const HV = {
    labelW: 120, gap: 200, top: 8, segBarW: 3, textPad: 6, maxView: 720, minView: 320,
    bigMax: 64, rowBig: 22, rowSmall: 16, fontBig: 13, fontSmall: 11, lineBig: 2, lineSmall: 1.5,
  };
  // Heatmap (canvas).
  const HM = {
    fit: 1024, maxCell: 24, labelW: 110, colLabelH: 80, featLabelH: 22, font: 11,
    barGap: 16, barW: 14, barMinH: 120, rightW: 90, pad: 8, legendH: 16, labelEvery: 12, tickMinPx: 40,
  };
  // Model view thumbnails: S x S pixels scaled by max(1, round(64 / S)).
  const THUMB_TARGET = 64;
  // The smallest a model view picture is drawn to fit every head in the window.
  const MV_MIN_PX = 24;
  // Layer plots (SVG).
  const LP = { w: 360, h: 230, ml: 50, mr: 12, mt: 12, mb: 36, font: 11 };

  const SANS = 'system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Helvetica Neue", Arial, ' +
    '"Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei", sans-serif';
  const MONO = 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace';
  const MAX_CANVAS_PX = 16000; // keep every canvas side below browser limits (Firefox/Chromium ~32767)

  // ---------------------------------------------------------------- the test/automation hook
  const events = new EventTarget();
  const timings = {};
  let resolveReady;
  const api = {
    format: 'bert-trace-view/1',
    ready: new Promise((res) => { resolveReady = res; }),
    timings,
    events,
    errors: [],
  };
  window.bertTraceView = api;
  function emit(name, detail) { events.dispatchEvent(new CustomEvent(name, { detail })); }

  // ---------------------------------------------------------------- small helpers
  function h(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'style') e.style.cssText = v;
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else if (k in e && typeof v !== 'string') e[k] = v;
        else e.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const SVGNS = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const e = document.createElementNS(SVGNS, tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) e.setAttribute(k, v);
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function body(id) { return document.querySelector('#' + id + ' .section-body'); }
  function empty(el, text) { el.replaceChildren(h('p', { class: 'empty', text })); }
  function showError(el, what, err) {
    const msg = (err && err.message) ? err.message : String(err);
    api.errors.push(what + ': ' + msg);
    if (el) el.replaceChildren(h('p', { class: 'error', text: what + ' could not be drawn: ' + msg }));
  }
  function fmt(v) {
    if (v === null || v === undefined) return '–';
    if (Number.isNaN(v)) return 'NaN';
    if (!Number.isFinite(v)) return v > 0 ? '+inf' : '-inf';
    const a = Math.abs(v);
    if (a === 0) return '0';
    if (a < 1e-3 || a >= 1e5) return v.toExponential(3).replace('e+', 'e');
    let t = v.toPrecision(4);
    if (t.includes('.')) t = t.replace(/0+$/, '').replace(/\.$/, '');
    return t;
  }
  function fmtP(p) { return (p === null || p === undefined) ? '–' : (p * 100).toFixed(p >= 0.001 ? 1 : 3) + '%'; }
  function fmtInt(n) { return n.toLocaleString('en-US'); }
  function cut(tok) {
    const cps = Array.from(String(tok));
    return cps.length > LABEL_CHARS ? cps.slice(0, LABEL_CHARS - 1).join('') + '…' : cps.join('');
  }
  function clamp(v, lo, hi) { return Math.max(lo, Math.min(hi, v)); }
  function nextFrame() { return new Promise((res) => requestAnimationFrame(() => res())); }
  function idle(fn) {
    if (typeof requestIdleCallback === 'function') requestIdleCallback(fn, { timeout: 200 });
    else setTimeout(fn, 16);
  }

  // ---------------------------------------------------------------- colour scales
  function hexRgb(hex) {
    const n = parseInt(hex.slice(1), 16);
    return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  }
  function scaleRgb(stops, t) {
    if (!(t >= 0)) t = 0; // also NaN
    if (t > 1) t = 1;
    let k = 1;
    while (k < stops.length - 1 && t > stops[k][0]) k++;
    const [p0, c0] = stops[k - 1];
    const [p1, c1] = stops[k];
    const f = p1 > p0 ? (t - p0) / (p1 - p0) : 0;
    const a = hexRgb(c0);
    const b = hexRgb(c1);
    return [0, 1, 2].map((i) => Math.round(a[i] + (b[i] - a[i]) * f));
  }
  function rgbCss(c) { return 'rgb(' + c[0] + ',' + c[1] + ',' + c[2] + ')'; }
  // n-entry lookup table (RGBA) for t = i / (n - 1).
  function makeLut(stops, n) {
    const lut = new Uint8ClampedArray(n * 4);
    for (let i = 0; i < n; i++) {
      const c = scaleRgb(stops, i / (n - 1));
      lut[i * 4] = c[0]; lut[i * 4 + 1] = c[1]; lut[i * 4 + 2] = c[2]; lut[i * 4 + 3] = 255;
    }
    return lut;
  }
  const SEQ_LUT_256 = makeLut(SEQ_STOPS, 256);
  const MASKED_RGB = hexRgb(MASKED_COLOR);
  const NAN_RGB = hexRgb(NAN_COLOR);
  function headColor(h) { return HEAD_COLORS[h % HEAD_COLORS.length]; }

  // ---------------------------------------------------------------- binary data
  function b64decode(str) {
    if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(str);
    const bin = atob(str);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  async function inflate(bytes) {
    if (typeof DecompressionStream !== 'function') {
      throw new Error('this browser has no DecompressionStream (needs Chromium 80+, Firefox 113+ or Safari 16.4+)');
    }
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  const blobCache = new Map();
  // Decoded once, on first use. kind: 'u8' or 'f32'; n: expected element count.
  function decode(key, b64, kind, n) {
    if (!blobCache.has(key)) {
      const p = (async () => {
        if (typeof b64 !== 'string') throw new Error(key + ': no data');
        let bytes;
        try { bytes = b64decode(b64); } catch (err) { throw new Error(key + ': not valid base64'); }
        let raw;
        try { raw = await inflate(bytes); } catch (err) {
          if (typeof DecompressionStream !== 'function') throw err;
          throw new Error(key + ': not a valid zlib (deflate) stream (' + (err && err.message || err) + ')');
        }
        if (kind === 'f32') {
          if (raw.byteLength !== n * 4) throw new Error(key + ': ' + raw.byteLength + ' bytes, expected ' + n * 4);
          return new Float32Array(raw.buffer, raw.byteOffset, n);
        }
        if (raw.length !== n) throw new Error(key + ': ' + raw.length + ' values, expected ' + n);
        return raw;
      })();
      blobCache.set(key, p);
      p.catch(() => blobCache.delete(key)); // let a later attempt retry (and report) instead of caching the failure
    }
    return blobCache.get(key);
  }

  // ---------------------------------------------------------------- canvas helper
  // A canvas of CSS size w x h, drawn at the device pixel ratio (capped for very tall canvases).
  function sizeCanvas(cv, w, hgt) {
    const dpr = Math.min(window.devicePixelRatio || 1, MAX_CANVAS_PX / Math.max(w, hgt, 1));
    cv.width = Math.max(1, Math.round(w * dpr));
    cv.height = Math.max(1, Math.round(hgt * dpr));
    cv.style.width = w + 'px';
    cv.style.height = hgt + 'px';
    const ctx = cv.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return ctx;
  }

  // ================================================================ the page
  function start() {
    const t0 = performance.now();
    const el = document.getElementById('bert-trace-data');
    let D;
    try {
      if (!el) throw new Error('this page has no embedded dump (the data placeholder was not filled in)');
      D = JSON.parse(el.textContent);
      if (!D || typeof D !== 'object') throw new Error('the embedded data is not a JSON object');
      if (D.format !== 'bert-trace-view/1') {
        throw new Error('unknown data format ' + JSON.stringify(D.format) + ' (this page reads bert-trace-view/1)');
      }
      if (typeof D.masked_at !== 'number') throw new Error('the embedded data has no masked_at');
      MASKED_AT = D.masked_at;
    } catch (err) {
      const main = document.querySelector('main');
      main.replaceChildren(h('p', { class: 'error', text: 'Nothing to show: ' + err.message }));
      api.errors.push(err.message);
      resolveReady({ error: err.message });
      return;
    }
    timings.parse = performance.now() - t0;
    const view = new View(D);
    api.view = view;
    view.start().then(() => {
      timings.ready = performance.now();
      timings.render = performance.now() - t0;
      resolveReady({ ok: true });
    }, (err) => {
      api.errors.push(String(err && err.message || err));
      resolveReady({ error: String(err && err.message || err) });
    });
  }

  class View {
    constructor(D) {
      this.D = D;
      const dims = D.dims || {};
      const seqs = Array.isArray(D.sequences) ? D.sequences : [];
      this.B = dims.batch || seqs.length || 1;
      this.T = dims.tokens || (seqs[0] && seqs[0].tokens.length) || 0;
      this.L = dims.layers || 0;
      this.nh = dims.heads || 0;
      this.H = dims.hidden || 0;
      this.seqs = seqs;
      this.seq = 0;
      this.listeners = [];
    }

    onSeq(fn) { this.listeners.push(fn); }
    setSeq(b) {
      this.seq = b;
      for (const fn of this.listeners) fn(b);
    }
    sequence() { return this.seqs[this.seq] || { tokens: [], token_type: [], attention_mask: [], masked: [], real: 0 }; }
    tokens() {
      const sq = this.sequence();
      const toks = sq.tokens || [];
      const out = [];
      for (let i = 0; i < this.T; i++) out.push(toks[i] === undefined ? '?' : String(toks[i]));
      return out;
    }
    isPad(i) {
      const sq = this.sequence();
      return sq.attention_mask ? sq.attention_mask[i] === 0 : false;
    }
    segment(i) {
      const sq = this.sequence();
      return sq.token_type ? (sq.token_type[i] || 0) : 0;
    }
    maskedMap() {
      const m = new Map();
      for (const mk of (this.sequence().masked || [])) m.set(mk.pos, mk);
      return m;
    }

    async start() {
      const D = this.D;
      const title = D.title ? String(D.title) : 'bert-trace dump';
      document.title = (title.length > 90 ? title.slice(0, 89) + '…' : title) + ' · bert-trace view';
      document.getElementById('title').textContent = title;
      const prov = [];
      if (D.model) prov.push('model ' + D.model);
      prov.push(`B = ${this.B}, T = ${this.T}, L = ${this.L}, heads = ${this.nh}, H = ${this.H}`);
      if (D.producer) prov.push(D.producer);
      document.getElementById('provenance').textContent = prov.join(' · ');
      if (D.producer) document.getElementById('producer').textContent = D.producer;

      if (this.B > 1 && this.seqs.length > 1) {
        const sel = document.getElementById('seq-select');
        this.seqs.forEach((sq, b) => {
          const words = (sq.tokens || []).filter((t, i) => !(sq.attention_mask && sq.attention_mask[i] === 0));
          let preview = words.slice(0, 12).join(' ');
          if (preview.length > 60) preview = preview.slice(0, 59) + '…';
          sel.append(h('option', { value: String(b), text: `${b}: ${preview}` }));
        });
        sel.addEventListener('change', () => this.setSeq(Number(sel.value)));
        document.getElementById('seq-picker').hidden = false;
      }

      const guard = (id, what, fn) => {
        try { return fn(); } catch (err) { showError(body(id), what, err); return null; }
      };
      this.tokensView = guard('tokens', 'the tokens', () => new TokensView(this, body('tokens')));
      this.heatmapView = guard('heatmap', 'the heatmap', () => new HeatmapView(this, body('heatmap')));
      this.headView = guard('head-view', 'the head view', () => new HeadView(this, body('head-view')));
      this.modelView = guard('model-view', 'the model view', () => new ModelView(this, body('model-view')));
      this.plots = guard('layer-plots', 'the layer plots', () => new LayerPlots(this, body('layer-plots')));
      guard('predictions', 'the predictions', () => new Predictions(this, body('predictions')));
      const config = servedConfig();
      if (config) this.served = guard('step', 'the served page', () => new Served(this, config));

      const waits = [];
      if (this.headView) waits.push(this.headView.firstDraw);
      if (this.modelView) waits.push(this.modelView.firstRow);
      if (this.heatmapView) waits.push(this.heatmapView.firstDraw);
      await Promise.all(waits.map((p) => p.catch(() => null)));
      await nextFrame();
    }

    // From the model view: open one layer/head everywhere.
    openHead(layer, head) {
      if (this.headView) this.headView.select(layer, head);
      if (this.heatmapView) this.heatmapView.showAttention(layer, head);
      if (this.modelView) this.modelView.markSelected(layer, head);
      // bring the head view into sight unless it already is (it sits beside the model view on wide screens)
      const target = document.getElementById('head-view');
      if (target && target.scrollIntoView) {
        const r = target.getBoundingClientRect();
        if (r.top > window.innerHeight - 120 || r.bottom < 120) target.scrollIntoView({ block: 'start' });
      }
    }

    hasAttention() {
      const a = this.D.attention;
      return !!(a && Array.isArray(a.layers) && a.layers.length > 0 && this.nh > 0 && this.T > 0);
    }
    attention(layer) {
      const n = this.B * this.nh * this.T * this.T;
      return decode('attention/' + layer, this.D.attention.layers[layer], 'u8', n);
    }
    // The current sequence's words (several tokens read as one, by the library's segmentation),
    // or null when it reads by tokens only.
    words() {
      const w = this.D.attention && this.D.attention.words;
      const sq = w && Array.isArray(w.sequences) ? w.sequences[this.seq] : null;
      return sq && Array.isArray(sq.words) && sq.words.length > 0 ? sq.words : null;
    }
    wordsBy() {
      const w = this.D.attention && this.D.attention.words;
      return w && w.by ? String(w.by) : '';
    }
    hasWords() {
      const w = this.D.attention && this.D.attention.words;
      return !!(w && Array.isArray(w.sequences) && w.sequences.some((sq) => sq && Array.isArray(sq.words)));
    }
    // One layer's heads read by the current sequence's words: [nh, W, W] codes.
    attentionWords(layer) {
      const words = this.words();
      const sq = this.D.attention.words.sequences[this.seq];
      return decode('attention-words/' + this.seq + '/' + layer, sq.layers[layer], 'u8', this.nh * words.length * words.length);
    }
    thumbSize() {
      const th = this.D.attention && this.D.attention.thumb;
      return th && th.size ? th.size : 0;
    }
    thumb(layer) {
      const S = this.thumbSize();
      return decode('thumb/' + layer, this.D.attention.thumb.layers[layer], 'u8', this.B * this.nh * S * S);
    }
  }

  // ================================================================ tokens
  class TokensView {
    constructor(view, el) {
      this.view = view;
      this.el = el;
      view.onSeq(() => this.render());
      this.render();
    }
    render() {
      const v = this.view;
      const sq = v.sequence();
      const toks = v.tokens();
      if (!toks.length) { empty(this.el, 'No tokens in this dump.'); return; }
      const masked = v.maskedMap();
      let nA = 0; let nB = 0; let nPad = 0;
      const chips = toks.map((tok, i) => {
        const pad = v.isPad(i);
        const seg = v.segment(i);
        if (pad) nPad++; else if (seg) nB++; else nA++;
        const mk = masked.get(i);
        let cls = 'tok' + (seg ? ' seg-b' : '') + (pad ? ' pad' : '') + (mk ? ' masked' : '');
        let title = `position ${i}: ${tok}` + (pad ? ' (padding)' : seg ? ' (sentence B)' : ' (sentence A)');
        const kids = [h('span', { class: 'pos', text: String(i) }), tok];
        if (mk) {
          const orig = mk.original === null || mk.original === undefined ? '?' : String(mk.original);
          kids.push(h('span', { class: 'orig', text: `← ${orig} (${mk.kind || '?'})` }));
          title += `; masked for MLM: original "${orig}", shown "${mk.shown !== undefined ? mk.shown : tok}" (${mk.kind || '?'})`;
        }
        return h('span', { class: cls, title }, kids);
      });
      const real = sq.real !== undefined ? sq.real : toks.length - nPad;
      const stats = `${toks.length} tokens: ${real} real` + (nPad ? `, ${nPad} padding` : '') +
        ` · sentence A ${nA}` + (nB ? `, sentence B ${nB}` : '') +
        ` · ${masked.size} masked position${masked.size === 1 ? '' : 's'}`;
      const legend = h('div', { class: 'legend' },
        h('span', { class: 'tok' }, 'sentence A'), h('span', { class: 'tok seg-b' }, 'sentence B'),
        h('span', { class: 'tok pad' }, '[PAD] padding'),
        h('span', { class: 'tok masked' }, 'masked for MLM: shown token, ← original (mask / random / keep)'));
      this.el.replaceChildren(h('p', { class: 'token-stats', text: stats }), h('div', { class: 'tokens' }, chips), legend);
    }
  }

  // ================================================================ head view
  const THRESHOLDS = [
    { code: 1, label: 'all (p ≥ 1/255)' }, { code: Math.ceil(0.01 * 255), label: 'p ≥ 0.01' },
    { code: Math.ceil(0.02 * 255), label: 'p ≥ 0.02' }, { code: Math.ceil(0.05 * 255), label: 'p ≥ 0.05' },
    { code: Math.ceil(0.1 * 255), label: 'p ≥ 0.1' }, { code: Math.ceil(0.2 * 255), label: 'p ≥ 0.2' },
    { code: Math.ceil(0.5 * 255), label: 'p ≥ 0.5' }, { code: 256, label: 'none (hover a token)' },
  ];
  function defaultThreshold(n) {
    if (n <= 64) return 1;
    if (n <= 128) return Math.ceil(0.02 * 255);
    if (n <= 256) return Math.ceil(0.05 * 255);
    return Math.ceil(0.1 * 255);
  }

  class HeadView {
    constructor(view, el) {
      this.view = view;
      this.el = el;
      this.layer = 0;
      this.heads = new Array(view.nh).fill(true);
      this.hover = null; // {side: 'left'|'right', tok}
      this.pinned = null;
      this.gen = 0;
      this.drawCount = 0;
      this.lineCache = new Map();
      if (!view.hasAttention()) {
        empty(el, 'No attention probabilities in this dump (the head view needs layer{i}.attention.probs for every layer).');
        this.firstDraw = Promise.resolve();
        return;
      }
      this.hasPad = view.seqs.some((sq) => (sq.attention_mask || []).some((m) => m === 0));
      this.hidePad = this.hasPad;
      this.byWords = false;
      this.build();
      view.onSeq(() => { this.hover = null; this.pinned = null; this.resetThreshold(); this.update(); });
      this.resetThreshold();
      this.firstDraw = this.update();
    }

    build() {
      const v = this.view;
      this.layerSel = h('select', { id: 'hv-layer', 'aria-label': 'layer' });
      for (let l = 0; l < v.L; l++) this.layerSel.append(h('option', { value: String(l), text: 'layer ' + l }));
      this.layerSel.addEventListener('change', () => { this.layer = Number(this.layerSel.value); this.update(); });
      this.swatches = [];
      const sw = h('div', { class: 'head-swatches', id: 'hv-heads' });
      for (let i = 0; i < v.nh; i++) {
        const b = h('button', {
          class: 'head-swatch', type: 'button', text: String(i),
          title: `head ${i}: click to show or hide; double-click or shift-click to show only this head`,
          style: `background:${headColor(i)};border-color:${headColor(i)}`,
        });
        b.addEventListener('click', (ev) => {
          if (ev.shiftKey || ev.altKey) this.solo(i); else { this.heads[i] = !this.heads[i]; this.headsChanged(); }
        });
        b.addEventListener('dblclick', () => this.solo(i));
        this.swatches.push(b);
        sw.append(b);
      }
      sw.append(h('button', { type: 'button', text: 'all', title: 'show every head', onclick: () => { this.heads.fill(true); this.headsChanged(); } }));
      this.thrSel = h('select', { id: 'hv-threshold', 'aria-label': 'line threshold' });
      for (const t of THRESHOLDS) this.thrSel.append(h('option', { value: String(t.code), text: t.label }));
      this.thrSel.addEventListener('change', () => { this.thr = Number(this.thrSel.value); this.update(); });
      const controls = h('div', { class: 'controls' },
        h('label', null, 'Layer ', this.layerSel),
        h('span', null, 'Heads ', sw),
        h('label', null, 'Lines ', this.thrSel));
      if (this.hasPad) {
        this.padBox = h('input', { type: 'checkbox', id: 'hv-hidepad', checked: this.hidePad });
        this.padBox.addEventListener('change', () => { this.hidePad = this.padBox.checked; this.hover = null; this.pinned = null; this.update(); });
        controls.append(h('label', null, this.padBox, ' hide padding'));
      }
      if (v.hasWords()) {
        this.wordsBox = h('input', { type: 'checkbox', id: 'hv-words' });
        this.wordsBox.addEventListener('change', () => { this.byWords = this.wordsBox.checked; this.hover = null; this.pinned = null; this.resetThreshold(); this.update(); });
        controls.append(h('label', { title: 'a word reads the mean of its pieces\' rows and is read by the sum of their columns (Clark et al. 2019); padding left out; words: ' + v.wordsBy() }, this.wordsBox, ' by words'));
      }
      this.status = h('div', { class: 'hv-status', id: 'hv-status' });
      this.canvas = h('canvas', { id: 'hv-canvas', 'aria-label': 'attention lines from each token (left) to the tokens it attends to (right)' });
      // The canvas is only as tall as the visible window and stays put (sticky) while the spacer
      // under it gives the scroll height: each frame rasterises one window, not 512 rows of lines.
      this.spacer = h('div', { class: 'hv-spacer' });
      this.scroll = h('div', { class: 'hv-scroll', id: 'hv-scroll' }, this.canvas, this.spacer);
      this.scroll.addEventListener('scroll', () => {
        // the token under a still mouse changes as the window scrolls
        if (this.lastMouse && !this.pinned) this.hover = this.hitTest(this.lastMouse);
        this.redraw();
      }, { passive: true });
      window.addEventListener('resize', () => { if (this.geo) { this.layoutWindow(); this.redraw(); } });
      const help = h('p', { class: 'note', text: 'Each line goes from a token on the left (the query) to a token on the right (the key it attends to); its opacity is the attention probability. Hover a token to see only its lines (and, on the other side, how much each head gives each token); click to keep it.' +
        (servedConfig() ? ' With one head shown, keep a token on one side and click one on the other: the panel explains the line between them.' : '') });
      this.el.replaceChildren(controls, help, this.status, this.scroll);
      this.canvas.addEventListener('mousemove', (ev) => this.onMove(ev));
      this.canvas.addEventListener('mouseleave', () => { this.lastMouse = null; if (!this.pinned) this.setHover(null); });
      this.canvas.addEventListener('click', (ev) => {
        const hit = this.hitTest(ev);
        const before = this.pinned;
        if (!hit || (this.pinned && this.pinned.side === hit.side && this.pinned.tok === hit.tok)) this.pinned = null;
        else this.pinned = hit;
        this.setHover(hit);
        this.explainLine(before, hit);
      });
    }

    // In a served page, a token kept on one side and a click on a token of the other side, with
    // one head shown, ask why the line between them is as strong as it is: the probability of
    // that query and key, explained as a click on the heatmap's cell explains it.
    explainLine(kept, hit) {
      const served = this.view.served;
      if (!served || !kept || !hit || kept.side === hit.side || this.byWords) return;
      const shown = this.heads.map((on, i) => (on ? i : -1)).filter((i) => i >= 0);
      if (shown.length !== 1) return;
      const [query, key] = kept.side === 'left' ? [kept.tok, hit.tok] : [hit.tok, kept.tok];
      served.explain(this.view.D.attention.stages[this.layer], [this.view.seq, shown[0], query, key]);
    }

    resetThreshold() {
      const n = this.visible().length;
      this.thr = defaultThreshold(n);
      if (this.thrSel) {
        this.thrSel.value = String(this.thr);
        this.thrSel.options[0].textContent = THRESHOLDS[0].label + (n > 128 ? ': slow for long inputs' : '');
      }
    }

    // What the rows are: the sequence's tokens, or its words when read by words (a sequence
    // with no word of several tokens reads by tokens). A word row is coloured as its first token,
    // marked when any of its tokens is.
    rows() {
      const v = this.view;
      const words = this.byWords ? v.words() : null;
      const masked = v.maskedMap();
      if (words) {
        const W = words.length;
        return {
          byWords: true, n: W, key: 'w',
          labels: words.map((w) => String(w.text)),
          pad: () => false,
          segment: (r) => v.segment(words[r].positions[0]),
          marked: (r) => words[r].positions.some((p) => masked.has(p)),
          base: (head) => head * W * W,
        };
      }
      const T = v.T;
      return {
        byWords: false, n: T, key: 't',
        labels: v.tokens(),
        pad: (i) => v.isPad(i),
        segment: (i) => v.segment(i),
        marked: (i) => masked.has(i),
        base: (head) => (v.seq * v.nh + head) * T * T,
      };
    }

    visible() {
      const rows = this.rows();
      const vis = [];
      for (let i = 0; i < rows.n; i++) if (!(this.hidePad && rows.pad(i))) vis.push(i);
      return vis;
    }

    solo(i) {
      const onlyThis = this.heads[i] && this.heads.filter(Boolean).length === 1;
      if (onlyThis) this.heads.fill(true); else { this.heads.fill(false); this.heads[i] = true; }
      this.headsChanged();
    }
    select(layer, head) {
      this.layer = layer;
      this.layerSel.value = String(layer);
      this.heads.fill(false);
      this.heads[head] = true;
      return this.headsChanged();
    }
    headsChanged() {
      this.swatches.forEach((b, i) => b.classList.toggle('off', !this.heads[i]));
      return this.update();
    }

    geometry(n) {
      const big = n <= HV.bigMax;
      const rowH = big ? HV.rowBig : HV.rowSmall;
      return {
        rowH, font: big ? HV.fontBig : HV.fontSmall, lineW: big ? HV.lineBig : HV.lineSmall,
        width: 2 * HV.labelW + HV.gap, height: 2 * HV.top + n * rowH,
      };
    }

    // Lines of one head at or above the threshold, counting-sorted by code (weakest first).
    lines(A, head, vis, thr) {
      const v = this.view;
      const rows = this.src;
      const key = [v.seq, this.layer, head, thr, this.hidePad, rows.key].join('/');
      let c = this.lineCache.get(key);
      if (c) return c;
      const T = rows.n;
      const base = rows.base(head);
      const counts = new Uint32Array(257);
      let below = 0;
      const n = vis.length;
      const all = n === T;
      for (let a = 0; a < n; a++) {
        const row = base + vis[a] * T;
        if (all) {
          for (let j = 0; j < T; j++) { const code = A[row + j]; if (code >= thr) counts[code]++; else if (code > 0) below++; }
        } else {
          for (let b = 0; b < n; b++) { const code = A[row + vis[b]]; if (code >= thr) counts[code]++; else if (code > 0) below++; }
        }
      }
      const starts = new Uint32Array(257);
      for (let k = 0; k < 256; k++) starts[k + 1] = starts[k] + counts[k];
      const total = starts[256];
      const pairs = new Uint32Array(total); // a * n + b (indices into vis)
      const fill = starts.slice(0, 256);
      if (total > 0) {
        for (let a = 0; a < n; a++) {
          const row = base + vis[a] * T;
          for (let b = 0; b < n; b++) { const code = A[row + vis[b]]; if (code >= thr) pairs[fill[code]++] = a * n + b; }
        }
      }
      c = { starts, pairs, total, below };
      if (this.lineCache.size > 48) this.lineCache.clear();
      this.lineCache.set(key, c);
      return c;
    }

    async update() {
      const gen = ++this.gen;
      const t0 = performance.now();
      const v = this.view;
      let A;
      try {
        A = this.byWords && v.words() ? await v.attentionWords(this.layer) : await v.attention(this.layer);
      } catch (err) {
        showError(this.el, 'the head view', err);
        throw err;
      }
      if (gen !== this.gen) return;
      this.A = A;
      this.src = this.rows();
      this.vis = this.visible();
      this.geo = this.geometry(this.vis.length);
      this.layoutWindow();
      this.draw();
      const ms = performance.now() - t0;
      this.drawCount++;
      this.canvas.dataset.drawCount = String(this.drawCount);
      this.canvas.dataset.layer = String(this.layer);
      this.canvas.dataset.rows = String(this.vis.length);
      this.canvas.dataset.byWords = this.src.byWords ? '1' : '0';
      emit('headview-drawn', { layer: this.layer, ms });
    }

    // Size the visible window: the whole drawing if it fits, else a window that scrolls over it.
    layoutWindow() {
      const { width, height } = this.geo;
      const viewH = Math.min(height, Math.max(HV.minView, Math.min(HV.maxView, window.innerHeight - 120)));
      this.viewH = viewH;
      this.scroll.style.height = (viewH + 2) + 'px'; // + the 1px borders
      this.spacer.style.height = (height - viewH) + 'px';
      this.ctx = sizeCanvas(this.canvas, width, viewH);
    }
    redraw() {
      if (this.frame) return;
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        if (this.A && this.ctx) this.draw();
      });
    }

    alpha(code, k) { return Math.min(1, code / 255 / Math.sqrt(Math.max(1, k))); }

    draw() {
      const v = this.view;
      const { rowH, font, lineW, width, height } = this.geo;
      const ctx = this.ctx;
      const vis = this.vis;
      const n = vis.length;
      const rows = this.src;
      const toks = rows.labels;
      const active = [];
      this.heads.forEach((on, i) => { if (on) active.push(i); });
      const k = active.length;
      const x1 = HV.labelW;
      const x2 = HV.labelW + HV.gap;
      const y = (r) => HV.top + r * rowH + rowH / 2;
      const hov = this.hover;
      // only the window [y0, y1) of the drawing is on the canvas
      const y0 = Math.min(this.scroll.scrollTop, height - this.viewH);
      const y1 = y0 + this.viewH;
      const r0 = Math.max(0, Math.floor((y0 - HV.top) / rowH));
      const r1 = Math.min(n, Math.ceil((y1 - HV.top) / rowH));
      const dpr = this.canvas.width / width;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.fillStyle = '#ffffff';
      ctx.fillRect(0, 0, width, this.viewH);
      ctx.translate(0, -y0);
      void height;

      // hover background behind the hovered token
      if (hov) {
        ctx.fillStyle = HOVER_BG;
        const x = hov.side === 'left' ? 0 : x2;
        ctx.fillRect(x, HV.top + hov.row * rowH, HV.labelW, rowH);
      }

      // per-head boxes on the other side: how much each active head gives each token
      const T = rows.n;
      const A = this.A;
      if (hov && k > 0) {
        const slot = (HV.labelW - HV.segBarW) / k;
        const bx = hov.side === 'left' ? x2 + HV.segBarW : HV.segBarW;
        active.forEach((hd, s) => {
          ctx.fillStyle = headColor(hd);
          const base = rows.base(hd);
          for (let r = r0; r < r1; r++) {
            const code = hov.side === 'left' ? A[base + hov.tok * T + vis[r]] : A[base + vis[r] * T + hov.tok];
            if (!code) continue;
            ctx.globalAlpha = code / 255;
            ctx.fillRect(bx + s * slot, HV.top + r * rowH, slot, rowH);
          }
        });
        ctx.globalAlpha = 1;
      }

      // token labels and the sentence A/B bars on the outer edges
      ctx.font = `${font}px ${SANS}`;
      ctx.textBaseline = 'middle';
      for (let r = r0; r < r1; r++) {
        const i = vis[r];
        const yy = y(r);
        const pad = rows.pad(i);
        ctx.fillStyle = pad ? PAD_TEXT_COLOR : SEG_COLORS[rows.segment(i) ? 1 : 0];
        ctx.fillRect(0, HV.top + r * rowH + 1, HV.segBarW, rowH - 2);
        ctx.fillRect(width - HV.segBarW, HV.top + r * rowH + 1, HV.segBarW, rowH - 2);
        ctx.fillStyle = rows.marked(i) ? MARK_COLOR : pad ? PAD_TEXT_COLOR : TEXT_COLOR;
        const label = cut(toks[i]);
        ctx.textAlign = 'right';
        ctx.fillText(label, HV.labelW - HV.textPad, yy);
        ctx.textAlign = 'left';
        ctx.fillText(label, x2 + HV.textPad, yy);
      }

      // lines
      ctx.lineWidth = lineW;
      ctx.lineCap = 'butt';
      let drawn = 0;
      let hidden = 0;
      if (hov) {
        for (const hd of active) {
          ctx.strokeStyle = headColor(hd);
          const base = rows.base(hd);
          const yh = y(hov.row);
          for (let r = 0; r < n; r++) {
            const code = hov.side === 'left' ? A[base + hov.tok * T + vis[r]] : A[base + vis[r] * T + hov.tok];
            if (!code) continue;
            drawn++;
            const yr = y(r);
            if ((yr < y0 && yh < y0) || (yr > y1 && yh > y1)) continue; // not in the window
            ctx.globalAlpha = this.alpha(code, k);
            ctx.beginPath();
            if (hov.side === 'left') { ctx.moveTo(x1, yh); ctx.lineTo(x2, yr); } else { ctx.moveTo(x1, yr); ctx.lineTo(x2, yh); }
            ctx.stroke();
          }
        }
      } else {
        for (const hd of active) {
          const c = this.lines(A, hd, vis, this.thr);
          hidden += c.below;
          ctx.strokeStyle = headColor(hd);
          for (let code = Math.min(this.thr, 256); code < 256; code++) {
            const s0 = c.starts[code];
            const s1 = c.starts[code + 1];
            if (s0 === s1) continue;
            ctx.globalAlpha = this.alpha(code, k);
            ctx.beginPath();
            for (let q = s0; q < s1; q++) {
              const p = c.pairs[q];
              const a = Math.floor(p / n);
              const b = p - a * n;
              const ya = y(a);
              const yb = y(b);
              if ((ya < y0 && yb < y0) || (ya > y1 && yb > y1)) continue; // not in the window
              ctx.moveTo(x1, ya);
              ctx.lineTo(x2, yb);
            }
            ctx.stroke();
            drawn += s1 - s0;
          }
        }
      }
      ctx.globalAlpha = 1;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      this.drawn = drawn;
      this.canvas.dataset.lines = String(drawn);

      // status line: what is drawn, and what is not
      const parts = [`layer ${this.layer} of ${v.L}`, `${k} of ${v.nh} head${v.nh === 1 ? '' : 's'}`];
      if (k === 0) parts.push('no head selected: click a coloured square');
      else if (hov) {
        const where = rows.byWords ? `word ${hov.tok}` : `position ${hov.tok}`;
        parts.push(`${fmtInt(drawn)} line${drawn === 1 ? '' : 's'} ${hov.side === 'left' ? 'from' : 'into'} "${toks[hov.tok]}" (${where})` +
          (this.pinned ? ', kept: click it again to release' : ''));
      } else if (this.thr >= 256) {
        parts.push('no lines drawn until you hover a token (choose a threshold under Lines)');
      } else {
        const thrText = THRESHOLDS.find((t) => t.code === this.thr);
        parts.push(`${fmtInt(drawn)} lines drawn (${thrText ? thrText.label : 'p ≥ ' + fmt(this.thr / 255)})`);
        if (hidden > 0) parts.push(`${fmtInt(hidden)} weaker lines hidden: hover a token to see all of its lines`);
      }
      if (rows.byWords) {
        parts.push(`${n} words of ${v.sequence().real || n} real tokens (${v.wordsBy()})`);
      } else {
        if (this.byWords) parts.push('every word of this sequence is one token');
        const nPad = v.T - n;
        if (nPad > 0) parts.push(`${nPad} padding token${nPad === 1 ? '' : 's'} hidden`);
      }
      this.status.textContent = parts.join(' · ');
    }

    hitTest(ev) {
      if (!this.geo) return null;
      const rect = this.canvas.getBoundingClientRect();
      const x = ev.clientX - rect.left;
      const yy = ev.clientY - rect.top + Math.min(this.scroll.scrollTop, this.geo.height - this.viewH);
      const r = Math.floor((yy - HV.top) / this.geo.rowH);
      if (r < 0 || r >= this.vis.length) return null;
      if (x < HV.labelW) return { side: 'left', row: r, tok: this.vis[r] };
      if (x > HV.labelW + HV.gap) return { side: 'right', row: r, tok: this.vis[r] };
      return null;
    }
    // The centre of token `tok`'s label on `side` ('left', 'right') in the page's coordinates,
    // where a click lands on it: hitTest's inverse, for whoever checks the page.
    tokenCentre(side, tok) {
      const rect = this.canvas.getBoundingClientRect();
      const r = this.vis.indexOf(tok);
      const top = Math.min(this.scroll.scrollTop, this.geo.height - this.viewH);
      const x = side === 'left' ? HV.labelW / 2 : HV.labelW + HV.gap + HV.labelW / 2;
      return { x: rect.left + x, y: rect.top + HV.top + (r + 0.5) * this.geo.rowH - top };
    }

    onMove(ev) {
      this.lastMouse = { clientX: ev.clientX, clientY: ev.clientY };
      if (this.pinned) return;
      this.setHover(this.hitTest(ev));
    }
    setHover(hit) {
      const same = (a, b) => (a === b) || (a && b && a.side === b.side && a.tok === b.tok);
      if (same(hit, this.hover)) return;
      this.hover = hit;
      this.redraw();
    }
  }

  // ================================================================ model view
  class ModelView {
    constructor(view, el) {
      this.view = view;
      this.el = el;
      this.drawn = new Map(); // layer -> sequence it was drawn for
      this.pending = new Map(); // layer -> promise of its drawing
      if (!view.hasAttention()) {
        empty(el, 'No attention probabilities in this dump, so no model view.');
        this.firstRow = Promise.resolve();
        return;
      }
      const S = view.thumbSize();
      const th = view.D.attention.thumb;
      if (!S || !th || !Array.isArray(th.layers) || th.layers.length !== view.L) {
        empty(el, 'This dump has no attention thumbnails, so no model view.');
        this.firstRow = Promise.resolve();
        return;
      }
      this.S = S;
      this.build();
      let first;
      this.firstRow = new Promise((res) => { first = res; });
      this.resolveFirst = first;
      view.onSeq(() => { this.drawn.clear(); this.kick(); });
      this.kick();
    }

    build() {
      const v = this.view;
      const S = this.S;
      const scale = Math.max(1, Math.round(THUMB_TARGET / S));
      const px = S * scale;
      this.maxPx = px;
      const grid = h('div', { class: 'mv-grid', id: 'mv-grid', style: `grid-template-columns: auto repeat(${v.nh}, ${px + 2}px)` });
      this.grid = grid;
      grid.append(h('span'));
      this.headEls = [];
      for (let hd = 0; hd < v.nh; hd++) {
        const label = h('span', { class: 'mv-head', text: 'head ' + hd, title: 'head ' + hd, style: `color:${headColor(hd)}` });
        this.headEls.push(label);
        grid.append(label);
      }
      this.cells = [];
      this.rowEls = [];
      for (let l = 0; l < v.L; l++) {
        const label = h('span', { class: 'mv-layer', text: 'layer ' + l });
        label.dataset.layer = String(l);
        grid.append(label);
        const row = [];
        for (let hd = 0; hd < v.nh; hd++) {
          const cv = h('canvas', {
            class: 'mv-cell', width: S, height: S, title: `layer ${l}, head ${hd}: click to open`,
            style: `width:${px}px;height:${px}px`,
          });
          cv.dataset.layer = String(l);
          cv.dataset.head = String(hd);
          cv.addEventListener('click', () => v.openHead(l, hd));
          row.push(cv);
          grid.append(cv);
        }
        this.cells.push(row);
        this.rowEls.push(label);
      }
      const T = v.T;
      const note = h('p', { class: 'note', text: `One picture per layer (rows) and head (columns): the ${T} × ${T} attention matrix of the sequence (rows: query tokens, columns: key tokens)` +
        (S < T ? `, averaged over blocks down to ${S} × ${S}` : '') +
        '. Each picture is coloured from white (0) to dark blue (its own largest value). Click one to open it in the head view and the heatmap.' });
      this.status = h('div', { class: 'hv-status', id: 'mv-status' });
      this.scrollNote = h('p', { class: 'note', id: 'mv-scrolls', hidden: true, text: 'The grid is wider than the window: scroll it sideways for the other heads.' });
      this.wrap = h('div', { class: 'mv-wrap', id: 'mv-wrap' }, grid);
      this.el.replaceChildren(note, this.status, this.scrollNote, this.wrap);
      this.fit();
      window.addEventListener('resize', () => this.fit());
      if (typeof IntersectionObserver === 'function') {
        this.io = new IntersectionObserver((entries) => {
          for (const e of entries) if (e.isIntersecting) this.request(Number(e.target.dataset.layer));
        }, { rootMargin: '300px 0px' });
        for (const lab of this.rowEls) this.io.observe(lab);
      }
    }

    // Every head beside the layer labels in the width the section has: the pictures as large as
    // that allows, down to MV_MIN_PX; narrower than that, the grid scrolls sideways and the note
    // above it says so.
    fit() {
      const v = this.view;
      const avail = this.wrap.clientWidth;
      const labels = this.rowEls.length ? this.rowEls[0].offsetWidth : 0;
      let px = this.maxPx;
      // The grid's gaps are 6 px, and each picture has a 1 px border on either side.
      if (avail > 0) px = clamp(Math.floor((avail - labels - 6) / v.nh) - 8, Math.min(MV_MIN_PX, this.maxPx), this.maxPx);
      this.grid.style.gridTemplateColumns = `auto repeat(${v.nh}, ${px + 2}px)`;
      for (const row of this.cells) for (const cv of row) { cv.style.width = px + 'px'; cv.style.height = px + 'px'; }
      this.headEls.forEach((label, hd) => { label.textContent = px >= 44 ? 'head ' + hd : String(hd); });
      const scrolls = this.wrap.scrollWidth > this.wrap.clientWidth + 1;
      this.scrollNote.hidden = !scrolls;
      this.wrap.dataset.scrolls = String(scrolls);
    }

    // Draw the rows in view now, then the rest one row at a time while the page is idle.
    kick() {
      this.request(0);
      const fillNext = () => {
        const v = this.view;
        for (let l = 0; l < v.L; l++) {
          if (this.drawn.get(l) !== v.seq && !this.pending.has(l)) {
            this.request(l).then(() => idle(fillNext), () => {});
            return;
          }
        }
        this.status.textContent = `all ${v.L * v.nh} pictures drawn`;
      };
      idle(fillNext);
    }

    request(l) {
      const v = this.view;
      if (this.drawn.get(l) === v.seq) return Promise.resolve();
      if (this.pending.has(l)) return this.pending.get(l);
      const seq = v.seq;
      const p = v.thumb(l).then((data) => {
        this.pending.delete(l);
        if (seq !== v.seq) return;
        this.drawRow(l, data);
        this.drawn.set(l, seq);
        if (l === 0 && this.resolveFirst) { this.resolveFirst(); this.resolveFirst = null; }
        const done = this.drawn.size;
        if (done < v.L) this.status.textContent = `${done} of ${v.L} layers drawn (the rest draw as you scroll, or when the page is idle)`;
      }, (err) => {
        this.pending.delete(l);
        showError(this.status, 'layer ' + l + ' of the model view', err);
        if (this.resolveFirst) { this.resolveFirst(); this.resolveFirst = null; }
        throw err;
      });
      this.pending.set(l, p);
      p.catch(() => {});
      return p;
    }

    drawRow(l, data) {
      const v = this.view;
      const S = this.S;
      for (let hd = 0; hd < v.nh; hd++) {
        const cv = this.cells[l][hd];
        const ctx = cv.getContext('2d');
        const img = ctx.createImageData(S, S);
        const base = (v.seq * v.nh + hd) * S * S;
        let max = 0;
        for (let q = 0; q < S * S; q++) if (data[base + q] > max) max = data[base + q];
        const px = img.data;
        for (let q = 0; q < S * S; q++) {
          const t = max > 0 ? data[base + q] / max : 0;
          const idx = Math.round(t * 255) * 4;
          px[q * 4] = SEQ_LUT_256[idx]; px[q * 4 + 1] = SEQ_LUT_256[idx + 1]; px[q * 4 + 2] = SEQ_LUT_256[idx + 2]; px[q * 4 + 3] = 255;
        }
        ctx.putImageData(img, 0, 0);
        cv.dataset.drawn = '1';
        cv.title = `layer ${l}, head ${hd} (largest block mean ${fmt(max / 255)}): click to open`;
      }
    }

    markSelected(l, hd) {
      for (const row of this.cells || []) for (const cv of row) cv.classList.remove('selected');
      if (this.cells && this.cells[l] && this.cells[l][hd]) this.cells[l][hd].classList.add('selected');
    }
  }

  // ================================================================ heatmap
  class HeatmapView {
    constructor(view, el) {
      this.view = view;
      this.el = el;
      this.gen = 0;
      this.zoom = 1;
      this.entries = this.collect();
      if (!this.entries.length) {
        empty(el, 'No heatmap stages in this dump.');
        this.firstDraw = Promise.resolve();
        return;
      }
      this.build();
      view.onSeq(() => this.update());
      this.firstDraw = this.update();
    }

    collect() {
      const v = this.view;
      const D = v.D;
      const out = [];
      this.skipped = [];
      const have = new Set();
      (Array.isArray(D.heatmaps) ? D.heatmaps : []).forEach((hm, idx) => {
        const shp = hm.shape || [];
        let heads = 0; let rows; let cols;
        if (shp.length === 4) { heads = shp[1]; rows = shp[2]; cols = shp[3]; } else if (shp.length === 3) { rows = shp[1]; cols = shp[2]; } else { this.skipped.push(hm.stage); return; }
        const n = shp.reduce((a, b) => a * b, 1);
        have.add(hm.stage);
        out.push({
          stage: hm.stage, label: `${hm.stage}  [${shp.join(', ')}]${hm.encoding === 'u8' ? '  8-bit' : ''}`, group: hm.group || 'stages',
          heads, rows, cols, tokenCols: hm.cols === 'tokens' || shp.length === 4,
          encoding: hm.encoding, min: Number(hm.min), max: Number(hm.max), diverging: !!hm.diverging,
          maskedCode: hm.masked_code === undefined ? 255 : hm.masked_code, note: hm.note || '',
          get: () => decode('heatmap/' + idx, hm.data, hm.encoding === 'f32' ? 'f32' : 'u8', n),
        });
      });
      if (v.hasAttention()) {
        for (let l = 0; l < v.L; l++) {
          const stage = v.D.attention.stages[l];
          if (have.has(stage)) continue;
          out.push({
            stage, label: `${stage}  [${v.B}, ${v.nh}, ${v.T}, ${v.T}]  8-bit (head view data)`, virtual: true, layer: l,
            heads: v.nh, rows: v.T, cols: v.T, tokenCols: true, encoding: 'att', min: 0, max: 1, diverging: false,
            maskedCode: -1, note: v.D.attention.note || 'probabilities quantised to 8 bits: value = code / 255',
            get: () => v.attention(l),
          });
        }
      }
      return out;
    }

    build() {
      this.sel = h('select', { id: 'hm-stage', 'aria-label': 'stage' });
      const groups = [
        ['stages', this.entries.filter((e) => !e.virtual && e.group === 'stages')],
        ['attention probabilities (as in the head view)', this.entries.filter((e) => e.virtual)],
        ['attention rollout through the layers', this.entries.filter((e) => e.group === 'rollout')],
      ].filter(([, list]) => list.length);
      const addTo = (parent, list) => list.forEach((e) => parent.append(h('option', { value: String(this.entries.indexOf(e)), text: e.label })));
      if (groups.length > 1) {
        for (const [label, list] of groups) { const g = h('optgroup', { label }); addTo(g, list); this.sel.append(g); }
      } else addTo(this.sel, this.entries);
      this.idx = 0;
      this.sel.value = '0';
      this.sel.addEventListener('change', () => { this.idx = Number(this.sel.value); this.syncHeadSel(); this.update(); });
      this.headSel = h('select', { id: 'hm-head', 'aria-label': 'head' });
      this.headLabel = h('label', null, 'Head ', this.headSel);
      this.headSel.addEventListener('change', () => { this.head = Number(this.headSel.value); this.update(); });
      this.head = 0;
      this.zoomSel = h('select', { id: 'hm-zoom', 'aria-label': 'zoom' });
      for (const z of [1, 2, 4, 8]) this.zoomSel.append(h('option', { value: String(z), text: z + '×' }));
      this.zoomSel.addEventListener('change', () => { this.zoom = Number(this.zoomSel.value); this.update(); });
      this.canvas = h('canvas', { id: 'hm-canvas' });
      this.tip = h('div', { class: 'tooltip', hidden: true });
      this.wrap = h('div', { class: 'hm-wrap' }, this.canvas, this.tip);
      this.readout = h('div', { class: 'hm-readout', id: 'hm-readout', text: ' ' });
      this.scrollNote = h('p', { class: 'note', id: 'hm-scrolls', hidden: true, text: 'The picture is larger than its frame: scroll it for the rest.' });
      this.noteEl = h('p', { class: 'note', id: 'hm-note' });
      const controls = h('div', { class: 'controls' }, h('label', null, 'Stage ', this.sel), this.headLabel, h('label', null, 'Zoom ', this.zoomSel));
      const kids = [controls, this.noteEl, this.scrollNote, this.wrap, this.readout];
      if (this.skipped.length) kids.push(h('p', { class: 'note', text: 'Not shown (not token-by-token): ' + this.skipped.join(', ') }));
      if (this.view.D.rollout_note) kids.push(h('p', { class: 'note', id: 'hm-rollout-note', text: String(this.view.D.rollout_note) }));
      this.el.replaceChildren(...kids);
      this.canvas.addEventListener('mousemove', (ev) => this.onMove(ev));
      this.canvas.addEventListener('mouseleave', () => { this.tip.hidden = true; });
      this.canvas.addEventListener('click', (ev) => this.onClick(ev));
      this.syncHeadSel();
    }

    syncHeadSel() {
      const e = this.entries[this.idx];
      this.headSel.replaceChildren();
      for (let i = 0; i < e.heads; i++) this.headSel.append(h('option', { value: String(i), text: 'head ' + i }));
      this.headLabel.hidden = !e.heads;
      if (this.head >= e.heads) this.head = 0;
      if (e.heads) this.headSel.value = String(this.head);
    }

    showAttention(layer, head) {
      const stage = this.view.D.attention.stages[layer];
      let i = this.entries.findIndex((e) => e.stage === stage);
      if (i < 0) return null;
      this.idx = i;
      this.sel.value = String(i);
      this.head = head;
      this.syncHeadSel();
      return this.update();
    }

    layout(e) {
      const rows = e.rows;
      const cols = e.cols;
      // token x token: square cells; token x feature: each axis on its own
      let cw = clamp(Math.floor(HM.fit / cols), 1, HM.maxCell);
      let ch = clamp(Math.floor(HM.fit / rows), 1, HM.maxCell);
      if (e.tokenCols) { cw = ch = Math.min(cw, ch); }
      // zoom, within canvas limits
      let z = this.zoom;
      while (z > 1 && (cols * cw * z > MAX_CANVAS_PX - 400 || rows * ch * z > MAX_CANVAS_PX - 200)) z /= 2;
      cw *= z; ch *= z;
      const top = e.tokenCols ? HM.colLabelH : HM.featLabelH;
      const left = HM.labelW;
      const w = cols * cw;
      const hh = rows * ch;
      const barH = Math.max(hh, HM.barMinH);
      return {
        cw, ch, top, left, w, h: hh, z,
        width: left + w + HM.barGap + HM.barW + HM.rightW, height: top + barH + HM.legendH + HM.pad,
        barX: left + w + HM.barGap, barH,
      };
    }

    // value -> t in [0,1] for the colour scale, and the domain for the colour bar
    domain(e) {
      if (e.diverging) {
        const m = Math.max(Math.abs(e.min), Math.abs(e.max)) || 1;
        return { lo: -m, hi: m, t: (x) => 0.5 + 0.5 * x / m };
      }
      const lo = e.min;
      const hi = e.max > e.min ? e.max : e.min + 1;
      return { lo, hi, t: (x) => (x - lo) / (hi - lo) };
    }
    value(e, arr, k) {
      // returns {v, masked, code}
      const c = arr[k];
      if (e.encoding === 'f32') {
        if (c <= MASKED_AT) return { v: c, masked: true };
        return { v: c, masked: false };
      }
      if (e.encoding === 'att') return { v: c / 255, masked: false, code: c };
      if (c === e.maskedCode) return { v: NaN, masked: true, code: c };
      return { v: e.min + c / 254 * (e.max - e.min), masked: false, code: c };
    }

    async update() {
      const gen = ++this.gen;
      const t0 = performance.now();
      const e = this.entries[this.idx];
      const v = this.view;
      let arr;
      try {
        arr = await e.get();
      } catch (err) {
        if (gen === this.gen) showError(this.wrap, e.stage, err);
        throw err;
      }
      if (gen !== this.gen) return;
      if (!this.wrap.contains(this.canvas)) this.wrap.replaceChildren(this.canvas, this.tip);
      this.arr = arr;
      this.entry = e;
      const L = this.layout(e);
      this.geo = L;
      const head = e.heads ? this.head : 0;
      const B = v.B;
      const perSeq = (e.heads || 1) * e.rows * e.cols;
      const seq = Math.min(v.seq, B - 1);
      this.offset = seq * perSeq + head * e.rows * e.cols;
      const ctx = sizeCanvas(this.canvas, L.width, L.height);
      ctx.fillStyle = '#ffffff';
      ctx.fillRect(0, 0, L.width, L.height);

      // the cells: one pixel per cell, scaled up without smoothing
      const dom = this.domain(e);
      const off = document.createElement('canvas');
      off.width = e.cols;
      off.height = e.rows;
      const octx = off.getContext('2d');
      const img = octx.createImageData(e.cols, e.rows);
      const px = img.data;
      const n = e.rows * e.cols;
      const lut = makeLut(e.diverging ? DIV_STOPS : SEQ_STOPS, 1024);
      if (e.encoding === 'f32') {
        for (let q = 0; q < n; q++) {
          const x = arr[this.offset + q];
          const o = q * 4;
          if (x <= MASKED_AT) { px[o] = MASKED_RGB[0]; px[o + 1] = MASKED_RGB[1]; px[o + 2] = MASKED_RGB[2]; } else if (x !== x) { px[o] = NAN_RGB[0]; px[o + 1] = NAN_RGB[1]; px[o + 2] = NAN_RGB[2]; } else {
            let t = dom.t(x);
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            const li = Math.round(t * 1023) * 4;
            px[o] = lut[li]; px[o + 1] = lut[li + 1]; px[o + 2] = lut[li + 2];
          }
          px[o + 3] = 255;
        }
      } else {
        // 256 codes -> colours, computed exactly once
        const table = new Uint8ClampedArray(256 * 4);
        for (let c = 0; c < 256; c++) {
          const r = this.value(e, [c], 0);
          const col = r.masked ? MASKED_RGB : scaleRgb(e.diverging ? DIV_STOPS : SEQ_STOPS, dom.t(r.v));
          table[c * 4] = col[0]; table[c * 4 + 1] = col[1]; table[c * 4 + 2] = col[2]; table[c * 4 + 3] = 255;
        }
        const src = arr.subarray(this.offset, this.offset + n);
        const px32 = new Uint32Array(px.buffer);
        const t32 = new Uint32Array(table.buffer);
        for (let q = 0; q < n; q++) px32[q] = t32[src[q]];
      }
      octx.putImageData(img, 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(off, L.left, L.top, L.w, L.h);

      // labels
      const toks = v.tokens();
      const masked = v.maskedMap();
      ctx.font = `${HM.font}px ${SANS}`;
      ctx.textBaseline = 'middle';
      ctx.textAlign = 'right';
      const rowEvery = L.ch >= 10 ? 1 : Math.ceil(HM.labelEvery / L.ch);
      for (let r = 0; r < e.rows; r += rowEvery) {
        ctx.fillStyle = masked.has(r) ? MARK_COLOR : v.isPad(r) ? PAD_TEXT_COLOR : TEXT_COLOR;
        ctx.fillText(cut(toks[r]), L.left - 4, L.top + r * L.ch + L.ch / 2);
      }
      if (e.tokenCols) {
        const colEvery = L.cw >= 10 ? 1 : Math.ceil(HM.labelEvery / L.cw);
        ctx.save();
        ctx.textAlign = 'left';
        for (let c = 0; c < e.cols; c += colEvery) {
          ctx.save();
          ctx.translate(L.left + c * L.cw + L.cw / 2, L.top - 4);
          ctx.rotate(-Math.PI / 2);
          ctx.fillStyle = masked.has(c) ? MARK_COLOR : v.isPad(c) ? PAD_TEXT_COLOR : TEXT_COLOR;
          ctx.fillText(cut(toks[c]), 0, 0);
          ctx.restore();
        }
        ctx.restore();
      } else {
        const steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
        const step = steps.find((st) => st * L.cw >= HM.tickMinPx) || steps[steps.length - 1];
        ctx.textAlign = 'center';
        ctx.textBaseline = 'bottom';
        ctx.fillStyle = TEXT_COLOR;
        ctx.strokeStyle = '#888888';
        ctx.lineWidth = 1;
        for (let c = 0; c < e.cols; c += step) {
          const x = L.left + c * L.cw + L.cw / 2;
          ctx.fillText(String(c), x, L.top - 5);
          ctx.beginPath(); ctx.moveTo(x, L.top - 4); ctx.lineTo(x, L.top); ctx.stroke();
        }
      }
      // frame
      ctx.strokeStyle = '#bbbbbb';
      ctx.lineWidth = 1;
      ctx.strokeRect(L.left - 0.5, L.top - 0.5, L.w + 1, L.h + 1);

      // colour bar: top = high end
      const stops = e.diverging ? DIV_STOPS : SEQ_STOPS;
      for (let yb = 0; yb < L.barH; yb++) {
        ctx.fillStyle = rgbCss(scaleRgb(stops, 1 - (yb + 0.5) / L.barH));
        ctx.fillRect(L.barX, L.top + yb, HM.barW, 1);
      }
      ctx.strokeRect(L.barX - 0.5, L.top - 0.5, HM.barW + 1, L.barH + 1);
      ctx.fillStyle = TEXT_COLOR;
      ctx.textAlign = 'left';
      ctx.textBaseline = 'middle';
      const ticks = [[dom.hi, 0], [dom.lo, L.barH]];
      if (e.diverging) ticks.push([0, L.barH / 2]);
      for (const [val, yy] of ticks) {
        ctx.fillText(fmt(val), L.barX + HM.barW + 4, L.top + yy);
        ctx.beginPath(); ctx.moveTo(L.barX + HM.barW, L.top + yy + 0.5); ctx.lineTo(L.barX + HM.barW + 3, L.top + yy + 0.5); ctx.stroke();
      }
      let hasMasked = false;
      if (e.encoding === 'f32') { for (let q = 0; q < n; q++) if (arr[this.offset + q] <= MASKED_AT) { hasMasked = true; break; } } else if (e.encoding === 'u8') { for (let q = 0; q < n; q++) if (arr[this.offset + q] === e.maskedCode) { hasMasked = true; break; } }
      if (hasMasked) {
        const my = L.top + L.barH + 4;
        ctx.fillStyle = MASKED_COLOR; ctx.fillRect(L.barX, my, HM.barW, 10);
        ctx.fillStyle = TEXT_COLOR; ctx.fillText('masked', L.barX + HM.barW + 4, my + 5);
      }

      const scaleText = e.diverging ? `diverging colour scale centred at 0 (blue < 0 < red), ±${fmt(dom.hi)}` : `sequential colour scale from ${fmt(dom.lo)} (white) to ${fmt(dom.hi)} (dark blue)`;
      this.noteEl.textContent = `${e.stage}${e.heads ? ', head ' + head : ''}: ${e.rows} token rows × ${e.cols} ${e.tokenCols ? 'token' : 'feature'} columns; ` +
        `min ${fmt(e.min)}, max ${fmt(e.max)}${hasMasked ? ' (unmasked values); masked cells in grey' : ''}. ${scaleText}. Values: ${e.note}` +
        (L.z !== this.zoom ? ` (zoom limited to ${L.z}×)` : '');
      this.drawLit(ctx, e, L, seq, head);
      this.scrollNote.hidden = !(this.wrap.scrollWidth > this.wrap.clientWidth + 1 || this.wrap.scrollHeight > this.wrap.clientHeight + 1);
      this.canvas.dataset.stage = e.stage;
      this.canvas.dataset.head = String(head);
      this.canvas.dataset.drawn = String((Number(this.canvas.dataset.drawn) || 0) + 1);
      const ms = performance.now() - t0;
      emit('heatmap-drawn', { stage: e.stage, ms });
    }

    // The cells an explanation reads, outlined, and the one it explains, outlined twice; their
    // [row, column]s in data-lit and data-lit-target, for whoever checks the page.
    drawLit(ctx, e, L, seq, head) {
      const served = this.view.served;
      const lit = served && e.group !== 'rollout' ? served.litCells(e.stage, seq, e.heads ? head : null) : null;
      if (!lit) { delete this.canvas.dataset.lit; delete this.canvas.dataset.litTarget; return; }
      ctx.save();
      ctx.lineWidth = 2;
      ctx.strokeStyle = LIT_COLOR;
      for (const [r, c] of lit.reads) ctx.strokeRect(L.left + c * L.cw + 1, L.top + r * L.ch + 1, Math.max(L.cw - 2, 1), Math.max(L.ch - 2, 1));
      if (lit.target) {
        const [r, c] = lit.target;
        ctx.strokeStyle = TARGET_COLOR;
        ctx.lineWidth = 3;
        ctx.strokeRect(L.left + c * L.cw - 1, L.top + r * L.ch - 1, L.cw + 2, L.ch + 2);
      }
      ctx.restore();
      this.canvas.dataset.lit = JSON.stringify(lit.reads);
      this.canvas.dataset.litTarget = lit.target ? JSON.stringify(lit.target) : '';
    }

    // The cell under the pointer: [row, column], or null outside the cells.
    cellAt(ev) {
      const L = this.geo;
      const e = this.entry;
      if (!L || !e) return null;
      const rect = this.canvas.getBoundingClientRect();
      const c = Math.floor((ev.clientX - rect.left - L.left) / L.cw);
      const r = Math.floor((ev.clientY - rect.top - L.top) / L.ch);
      if (c < 0 || r < 0 || c >= e.cols || r >= e.rows) return null;
      return [r, c];
    }

    // The centre of cell [row, column] in the page's coordinates: where a click lands on it.
    cellCentre(r, c) {
      const rect = this.canvas.getBoundingClientRect();
      return { x: rect.left + this.geo.left + (c + 0.5) * this.geo.cw, y: rect.top + this.geo.top + (r + 0.5) * this.geo.ch };
    }

    onClick(ev) {
      const served = this.view.served;
      const at = this.cellAt(ev);
      if (!served || !at) return;
      const e = this.entry;
      if (e.group === 'rollout') {
        served.panel.hidden = false;
        served.panelTitle.textContent = e.stage;
        served.panelBody.replaceChildren(h('p', { class: 'note', text: 'Attention rollout is computed from the probabilities by the page\'s data, not a stage of the pass: there is no formula of the model to explain. Click a cell of a layer\'s attention.probs instead.' }));
        return;
      }
      const seq = Math.min(this.view.seq, this.view.B - 1);
      const index = e.heads ? [seq, this.head, at[0], at[1]] : [seq, at[0], at[1]];
      served.explain(e.stage, index);
    }

    onMove(ev) {
      const L = this.geo;
      const e = this.entry;
      if (!L || !e) return;
      const rect = this.canvas.getBoundingClientRect();
      const x = ev.clientX - rect.left;
      const y = ev.clientY - rect.top;
      const c = Math.floor((x - L.left) / L.cw);
      const r = Math.floor((y - L.top) / L.ch);
      if (c < 0 || r < 0 || c >= e.cols || r >= e.rows) { this.tip.hidden = true; return; }
      const v = this.view;
      const toks = v.tokens();
      const val = this.value(e, this.arr, this.offset + r * e.cols + c);
      let valText;
      if (val.masked) valText = 'masked (padding key)';
      else if (e.encoding === 'f32') valText = Number.isNaN(val.v) ? 'NaN' : fmt(val.v);
      else valText = '≈ ' + fmt(val.v) + `  (8-bit code ${val.code})`;
      const rowText = `row ${r} "${toks[r]}"${v.isPad(r) ? ' (padding)' : ''}`;
      const colText = e.tokenCols ? `column ${c} "${toks[c]}"${v.isPad(c) ? ' (padding)' : ''}` : `feature ${c}`;
      const text = `${rowText}\n${colText}\nvalue ${valText}`;
      this.readout.textContent = `${rowText} · ${colText} · value ${valText}`;
      this.tip.textContent = text;
      this.tip.hidden = false;
      const wrapRect = this.wrap.getBoundingClientRect();
      const tx = ev.clientX - wrapRect.left + this.wrap.scrollLeft + 14;
      const ty = ev.clientY - wrapRect.top + this.wrap.scrollTop + 14;
      this.tip.style.left = Math.min(tx, this.wrap.scrollLeft + this.wrap.clientWidth - 260) + 'px';
      this.tip.style.top = ty + 'px';
    }
  }

  // ================================================================ layer plots
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) { hi = lo + 1; }
    const span = hi - lo;
    const raw = span / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((st) => st >= raw) || raw;
    const out = [];
    for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    return { ticks: out, lo: Math.min(lo, out[0]), hi: Math.max(hi, out[out.length - 1]) };
  }

  class LayerPlots {
    constructor(view, el) {
      this.view = view;
      this.el = el;
      const lp = view.D.layer_plots;
      if (!lp || !Array.isArray(lp.labels) || !lp.labels.length) {
        empty(el, 'No layer plots in this dump (they need embeddings.layernorm and every layer{i}.ffn.layernorm).');
        return;
      }
      this.lp = lp;
      view.onSeq(() => this.render());
      this.render();
    }

    render() {
      const v = this.view;
      const lp = this.lp;
      const b = v.seq;
      const toks = v.tokens();
      const masked = v.maskedMap();
      const real = [];
      for (let i = 0; i < v.T; i++) if (!v.isPad(i)) real.push(i);
      const style = (i) => {
        if (masked.has(i)) return { color: MARK_COLOR, opacity: 0.95, width: 2 };
        return { color: SEG_COLORS[v.segment(i) ? 1 : 0], opacity: lineOpacity(real.length), width: 1.25 };
      };
      this.charts = [];
      this.readout = h('div', { class: 'lp-readout', text: ' ' });
      this.picker = h('select', { id: 'lp-token', 'aria-label': 'highlight a token' });
      this.picker.append(h('option', { value: '-1', text: '(none)' }));
      for (const i of real) this.picker.append(h('option', { value: String(i), text: `${i}: ${toks[i]}` }));
      this.picker.addEventListener('change', () => this.highlight(Number(this.picker.value), true));

      const charts = [];
      const get = (arr, k) => (arr && arr[k] && arr[k][b]) || [];
      if (Array.isArray(lp.token_norms) && lp.token_norms.length) {
        charts.push(this.tokenChart('Norm of each token’s hidden state', lp.labels, real, (i, k) => get(lp.token_norms, k)[i], style, 'norm'));
      }
      if (Array.isArray(lp.mean) && Array.isArray(lp.std)) {
        charts.push(this.statChart(lp, b));
      }
      if (Array.isArray(lp.cosine) && lp.cosine.length) {
        const labels = [];
        for (let k = 0; k + 1 < lp.labels.length && k < lp.cosine.length; k++) labels.push(`${short(lp.labels[k])}→${short(lp.labels[k + 1])}`);
        charts.push(this.tokenChart('Cosine between a token’s state and its state one layer up', labels, real, (i, k) => get(lp.cosine, k)[i], style, 'cosine'));
      }
      const lines = 'Lines: one per real token (blue: sentence A, orange: sentence B, red: masked positions). Hover a line or pick a token to follow it.';
      this.el.replaceChildren(
        h('div', { class: 'controls' }, h('label', null, 'Highlight token ', this.picker)),
        h('div', { class: 'plots' }, charts), this.readout, h('p', { class: 'note', text: lines }));
      this.highlight(-1, false);
    }

    frame(title, xLabels, lo, hi) {
      const W = LP.w; const Hh = LP.h;
      const pw = W - LP.ml - LP.mr;
      const ph = Hh - LP.mt - LP.mb;
      const nt = niceTicks(lo, hi, 4);
      const nx = xLabels.length;
      const xs = (k) => LP.ml + (nx <= 1 ? pw / 2 : k * pw / (nx - 1));
      const ys = (val) => LP.mt + ph - (val - nt.lo) / (nt.hi - nt.lo) * ph;
      const svg = s('svg', { width: W, height: Hh, viewBox: `0 0 ${W} ${Hh}`, role: 'img', 'aria-label': title });
      const axis = s('g', { fill: '#555', 'font-size': LP.font });
      for (const t of nt.ticks) {
        const y = ys(t);
        axis.append(s('line', { x1: LP.ml, x2: LP.ml + pw, y1: y, y2: y, stroke: '#eeeeee' }));
        axis.append(s('text', { x: LP.ml - 5, y: y + 4, 'text-anchor': 'end' }, fmt(t)));
      }
      // label every k-th tick so that labels (about 6.5 px a character) never overlap
      const widest = Math.max(...xLabels.map((lab) => short(lab).length)) * 6.5 + 8;
      const every = nx <= 1 ? 1 : Math.max(1, Math.ceil(widest / (pw / (nx - 1))));
      xLabels.forEach((lab, k) => {
        axis.append(s('line', { x1: xs(k), x2: xs(k), y1: LP.mt + ph, y2: LP.mt + ph + 4, stroke: '#999' }));
        if (k % every === 0) axis.append(s('text', { x: xs(k), y: LP.mt + ph + 16, 'text-anchor': 'middle' }, short(lab)));
      });
      axis.append(s('rect', { x: LP.ml, y: LP.mt, width: pw, height: ph, fill: 'none', stroke: '#cccccc' }));
      svg.append(axis);
      return { svg, xs, ys, nx, pw, ph, title };
    }

    tokenChart(title, xLabels, real, valueOf, style, what) {
      let lo = Infinity; let hi = -Infinity;
      for (const i of real) for (let k = 0; k < xLabels.length; k++) {
        const val = valueOf(i, k);
        if (Number.isFinite(val)) { lo = Math.min(lo, val); hi = Math.max(hi, val); }
      }
      if (!Number.isFinite(lo)) { lo = 0; hi = 1; }
      const f = this.frame(title, xLabels, lo, hi);
      const g = s('g', { fill: 'none', 'stroke-linejoin': 'round' });
      const paths = new Map();
      for (const i of real) {
        let d = '';
        for (let k = 0; k < xLabels.length; k++) {
          const val = valueOf(i, k);
          if (!Number.isFinite(val)) continue;
          d += (d ? 'L' : 'M') + f.xs(k).toFixed(1) + ' ' + f.ys(val).toFixed(1);
        }
        const st = style(i);
        const p = s('path', { d, stroke: st.color, 'stroke-opacity': st.opacity, 'stroke-width': st.width });
        p.dataset.token = String(i);
        paths.set(i, { el: p, st });
        g.append(p);
      }
      f.svg.append(g);
      const chart = { f, paths, real, valueOf, xLabels, what, g };
      this.charts.push(chart);
      f.svg.addEventListener('mousemove', (ev) => this.onMove(chart, ev));
      f.svg.addEventListener('mouseleave', () => this.highlight(Number(this.picker.value), false));
      return h('div', { class: 'plot' }, h('div', { class: 'plot-title', text: title }), f.svg);
    }

    statChart(lp, b) {
      const mean = lp.labels.map((_, k) => (lp.mean[k] || [])[b]);
      const std = lp.labels.map((_, k) => (lp.std[k] || [])[b]);
      const all = mean.concat(std).filter(Number.isFinite);
      const lo = all.length ? Math.min(0, ...all) : 0;
      const hi = all.length ? Math.max(...all) : 1;
      const title = 'Mean and standard deviation of the hidden state';
      const f = this.frame(title, lp.labels, lo, hi);
      const series = [[mean, SEG_COLORS[0], 'mean'], [std, SEG_COLORS[1], 'std']];
      for (const [vals, color, name] of series) {
        let d = '';
        const dots = s('g', { fill: color });
        vals.forEach((val, k) => {
          if (!Number.isFinite(val)) return;
          d += (d ? 'L' : 'M') + f.xs(k).toFixed(1) + ' ' + f.ys(val).toFixed(1);
          dots.append(s('circle', { cx: f.xs(k), cy: f.ys(val), r: 2.5 }, s('title', null, `${name} at ${lp.labels[k]}: ${fmt(val)}`)));
        });
        f.svg.append(s('path', { d, fill: 'none', stroke: color, 'stroke-width': 2 }), dots);
      }
      const key = (color, name) => h('span', { class: 'key' }, h('span', { class: 'swatch', style: `background:${color}` }), name);
      return h('div', { class: 'plot' }, h('div', { class: 'plot-title' }, 'Mean ', key(series[0][1], ''), ' and standard deviation ', key(series[1][1], ''), ' of the hidden state (real tokens)'), f.svg);
    }

    onMove(chart, ev) {
      const rect = chart.f.svg.getBoundingClientRect();
      const x = ev.clientX - rect.left;
      const y = ev.clientY - rect.top;
      const nx = chart.xLabels.length;
      const k = clamp(Math.round(nx <= 1 ? 0 : (x - LP.ml) / chart.f.pw * (nx - 1)), 0, nx - 1);
      let best = -1; let bestD = 10; // pixels
      for (const i of chart.real) {
        const val = chart.valueOf(i, k);
        if (!Number.isFinite(val)) continue;
        const d = Math.abs(chart.f.ys(val) - y);
        if (d < bestD) { bestD = d; best = i; }
      }
      if (best >= 0) this.highlight(best, false, chart, k);
      else this.highlight(Number(this.picker.value), false);
    }

    highlight(tok, fromPicker, chart, k) {
      if (this.hl === tok && !chart) return;
      if (this.hl !== undefined && this.hl >= 0) {
        for (const c of this.charts) {
          const p = c.paths.get(this.hl);
          if (p) { p.el.setAttribute('stroke-width', p.st.width); p.el.setAttribute('stroke-opacity', p.st.opacity); p.el.setAttribute('stroke', p.st.color); }
        }
      }
      this.hl = tok;
      if (tok < 0) { this.readout.textContent = ' '; return; }
      for (const c of this.charts) {
        const p = c.paths.get(tok);
        if (p) { p.el.setAttribute('stroke-width', 3); p.el.setAttribute('stroke-opacity', 1); p.el.setAttribute('stroke', '#000000'); c.g.append(p.el); }
      }
      const toks = this.view.tokens();
      let text = `token ${tok} "${toks[tok]}"`;
      if (chart && k !== undefined) text += ` · ${chart.what} at ${chart.xLabels[k]}: ${fmt(chart.valueOf(tok, k))}`;
      this.readout.textContent = text;
      void fromPicker;
    }
  }
  // Opacity of one token's line in the layer plots: fainter as there are more tokens.
  function lineOpacity(n) { return clamp(3 / Math.sqrt(Math.max(1, n)), 0.1, 0.7); }
  function short(label) { return String(label).replace(/^layer /, 'L').replace(/^embeddings$/, 'emb'); }

  // ================================================================ predictions
  class Predictions {
    constructor(view, el) {
      this.view = view;
      this.el = el;
      view.onSeq(() => this.render());
      this.render();
    }
    render() {
      const v = this.view;
      const P = v.D.predictions || {};
      const b = v.seq;
      const out = [];
      const bar = (p) => h('span', { class: 'bar', style: `width:${Math.round(clamp(p || 0, 0, 1) * 120)}px` });
      const mlm = (P.mlm || []).filter((m) => (m.seq || 0) === b);
      if (P.mlm) {
        out.push(h('h3', { text: 'Masked-token predictions (MLM)' }));
        const grid = h('div', { class: 'pred-grid' });
        out.push(grid);
        if (!mlm.length) out.push(h('p', { class: 'empty', text: 'No masked position in this sequence.' }));
        const toks = v.tokens();
        for (const m of mlm) {
          const top = m.top || [];
          const hasTarget = m.target !== null && m.target !== undefined;
          let rank = -1;
          if (hasTarget) rank = top.findIndex((t) => t.token === m.target);
          let head = `position ${m.pos} ("${toks[m.pos] !== undefined ? toks[m.pos] : '?'}")`;
          if (hasTarget) {
            if (m.target_rank !== undefined && m.target_rank !== null) head += `: target "${m.target}" is rank ${m.target_rank}` + (m.target_prob !== undefined ? ` (p = ${fmtP(m.target_prob)})` : '');
            else if (rank >= 0) head += `: target "${m.target}" is rank ${rank + 1} (p = ${fmtP(top[rank].prob)})`;
            else head += `: target "${m.target}" is not in the top ${top.length}`;
          }
          const rows = top.map((t, k) => h('tr', { class: hasTarget && t.token === m.target ? 'target' : '' },
            h('td', { class: 'num', text: String(k + 1) }), h('td', { text: t.token }), h('td', { class: 'num', text: t.id !== undefined ? String(t.id) : '' }),
            h('td', { class: 'num', text: fmtP(t.prob) }), h('td', null, bar(t.prob))));
          grid.append(h('div', { class: 'pred-block' }, h('div', { class: 'pred-head', text: head }),
            h('table', { class: 'preds' }, h('tr', null, ['rank', 'token', 'id', 'probability', ''].map((x) => h('th', { text: x }))), rows)));
        }
      }
      const nsp = (P.nsp || []).filter((m) => (m.seq || 0) === b);
      if (nsp.length) {
        out.push(h('h3', { text: 'Next sentence prediction (NSP)' }));
        for (const m of nsp) {
          const label = m.label === 0 ? ' · label: is next (0)' : m.label === 1 ? ' · label: random (1)' : '';
          out.push(h('table', { class: 'preds' },
            h('tr', null, h('th', { text: 'class' }), h('th', { text: 'probability' }), h('th')),
            h('tr', { class: m.label === 0 ? 'target' : '' }, h('td', { text: 'is next' }), h('td', { class: 'num', text: fmtP(m.is_next) }), h('td', null, bar(m.is_next))),
            h('tr', { class: m.label === 1 ? 'target' : '' }, h('td', { text: 'random' }), h('td', { class: 'num', text: fmtP(m.random) }), h('td', null, bar(m.random)))));
          if (label) out.push(h('p', { class: 'note', text: label.slice(3) }));
        }
      }
      const cls = (P.classifier || []).filter((m) => (m.seq || 0) === b);
      if (cls.length) {
        out.push(h('h3', { text: 'Classifier' }));
        for (const m of cls) {
          const labels = (m.labels || []).slice().sort((x, y) => y.prob - x.prob);
          out.push(h('table', { class: 'preds' }, h('tr', null, h('th', { text: 'label' }), h('th', { text: 'probability' }), h('th')),
            labels.map((lb) => h('tr', null, h('td', { text: lb.label }), h('td', { class: 'num', text: fmtP(lb.prob) }), h('td', null, bar(lb.prob))))));
        }
      }
      if (P.losses && Object.keys(P.losses).length) {
        out.push(h('h3', { text: 'Losses (whole batch)' }));
        out.push(h('table', { class: 'preds' }, h('tr', null, h('th', { text: 'loss' }), h('th', { text: 'value' })),
          Object.entries(P.losses).map(([k, val]) => h('tr', null, h('td', { text: k }), h('td', { class: 'num', text: fmt(val) })))));
      }
      if (!out.length) { empty(this.el, 'No predictions in this dump (no MLM, NSP or classifier head, or no labels).'); return; }
      this.el.replaceChildren(...out);
    }
  }


  // ================================================================ served: explain and step
  // With `bert-trace view --serve` the page has its server behind it (the element
  // bert-trace-serve holds the session's token and what the server can do). A click on a
  // heatmap's cell asks the server why the element is what it is, and the step section walks
  // the pass as `bert-trace step` does. What is shown is the server's answer: the page
  // computes no value of its own.
  function servedConfig() {
    const el = document.getElementById('bert-trace-serve');
    if (!el) return null;
    try { return JSON.parse(el.textContent); } catch (err) { return null; }
  }

  class Served {
    constructor(view, config) {
      this.view = view;
      this.token = String(config.token || '');
      this.can = config.abilities || {};
      // The element explained and the elements its explanation reads, by stage.
      this.lit = null;
      const footer = document.querySelector('footer');
      if (footer) footer.textContent = 'Served from this machine by bert-trace: the page asks its own server, and nothing else.';
      this.panel = document.getElementById('explain-panel');
      this.buildPanel();
      this.buildStep();
    }

    async ask(path, options) {
      const opts = Object.assign({ cache: 'no-store' }, options || {});
      opts.headers = Object.assign({ 'X-Bert-Trace-Token': this.token }, opts.headers || {});
      const r = await fetch(path, opts);
      if (!r.ok) throw new Error((await r.text()).trim() || `the server answered ${r.status}`);
      return r;
    }

    // ---------------------------------------------------------------- explain
    buildPanel() {
      this.panelTitle = h('h2', { id: 'explain-title' });
      this.panelBody = h('div', { id: 'explain-body' });
      const close = h('button', { id: 'explain-close', text: 'close', onclick: () => this.closePanel() });
      this.panel.replaceChildren(h('div', { class: 'panel-head' }, this.panelTitle, close), this.panelBody);
      const how = h('p', { class: 'note', id: 'explain-how' });
      how.textContent = this.can.explain
        ? 'Click any cell of the heatmap to see why it is what it is: its formula, its operands and its value recomputed by the stage\'s own function. The cells it reads light up.'
        : 'This page cannot explain: ' + (this.can.why_not_explain || 'the server has no model');
      const hm = document.querySelector('#heatmap h2');
      if (hm) hm.after(how);
    }

    closePanel() {
      this.panel.hidden = true;
      this.panel.dataset.target = '';
      this.lit = null;
      if (this.view.heatmapView && this.view.heatmapView.entries.length) this.view.heatmapView.update();
    }

    async explain(stage, index) {
      const target = `${stage}[${index.join(',')}]`;
      this.panel.hidden = false;
      this.panel.dataset.target = target;
      this.panel.dataset.state = 'asking';
      this.panelTitle.textContent = target;
      this.panelBody.replaceChildren(h('p', { class: 'note', text: 'asking the server…' }));
      if (!this.can.explain) {
        this.panelBody.replaceChildren(h('p', { class: 'error', text: 'This page cannot explain: ' + (this.can.why_not_explain || '') }));
        this.panel.dataset.state = 'refused';
        return;
      }
      try {
        const r = await this.ask('/api/explain?target=' + encodeURIComponent(target));
        const answer = await r.json();
        if (this.panel.dataset.target !== target) return;
        this.show(answer);
        this.panel.dataset.state = 'explained';
      } catch (err) {
        if (this.panel.dataset.target !== target) return;
        this.panelBody.replaceChildren(h('p', { class: 'error', text: String(err.message || err) }));
        this.panel.dataset.state = 'refused';
      }
      emit('explained', { target, state: this.panel.dataset.state });
    }

    // A link to an operand's stage: it opens the stage in the heatmap, its cells lit.
    link(stage, index) {
      const where = `${stage}[${index.join(',')}]`;
      const a = h('a', { href: '#heatmap', class: 'operand', text: where });
      a.dataset.stage = stage;
      a.addEventListener('click', (ev) => {
        ev.preventDefault();
        if (!this.goTo(stage, index)) a.title = `${stage} is not among this page's heatmaps (they are chosen when the page is made)`;
      });
      return a;
    }

    show(answer) {
      const e = answer.explanation;
      const own = Array.isArray(answer.own_error) ? answer.own_error[0] : null;
      const kids = [];
      this.panelTitle.textContent = `${e.stage}[${e.index.join(',')}] = ${e.value} (${e.dtype})`;
      kids.push(h('div', { class: 'formula', id: 'explain-formula', text: e.formula }));
      if (e.steps && e.steps.length) {
        kids.push(h('p', { id: 'explain-steps' }, h('b', { text: 'steps ' }), e.steps.map((st) => `${st.name} ${st.value}`).join(', ')));
      }
      if (e.terms && e.terms.length) {
        const rows = e.terms.map((t) => {
          const a = e.inputs[t.inputs[0]];
          const b = e.inputs[t.inputs[1]];
          return h('tr', null, h('td', null, this.link(a.stage, a.index), ' · ', this.link(b.stage, b.index)),
            h('td', { class: 'num', text: `${a.value} · ${b.value} = ${t.value}` }));
        });
        kids.push(h('h3', { text: 'largest terms' }), h('table', { class: 'terms', id: 'explain-terms' }, rows));
      }
      kids.push(h('p', { id: 'explain-recomputed' }, h('b', { text: 'recomputed ' }),
        `${e.recomputed} by the stage's own function from the dump's operands (own error ${own === null ? 'not a number' : own})`));
      const groups = new Map();
      for (const input of e.inputs) {
        if (!groups.has(input.stage)) groups.set(input.stage, []);
        groups.get(input.stage).push(input);
      }
      const reads = [...groups.entries()].map(([stage, list]) => h('li', null, this.link(stage, list[0].index),
        list.length > 1 ? ` and ${list.length - 1} more, to [${list[list.length - 1].index.join(',')}]` : ` = ${list[0].value}`));
      kids.push(h('h3', { text: 'reads' }), h('ul', { id: 'explain-reads' }, reads));
      this.panelBody.replaceChildren(...kids);
      const byStage = new Map();
      for (const [stage, list] of groups) byStage.set(stage, list.map((x) => x.index));
      this.lit = { target: { stage: e.stage, index: e.index }, reads: byStage };
      const hv = this.view.heatmapView;
      if (hv && hv.entries.length) hv.update();
    }

    // The cells of `stage` to light in the picture of sequence `seq` (and head `head` of a
    // [B,nh,...] stage): the elements read, as [row, column], and the one explained.
    litCells(stage, seq, head) {
      if (!this.lit) return null;
      const cell = (index) => {
        if (index.length === 4) return index[0] === seq && index[1] === head ? [index[2], index[3]] : null;
        if (index.length === 3) return index[0] === seq ? [index[1], index[2]] : null;
        return null;
      };
      const reads = (this.lit.reads.get(stage) || []).map(cell).filter((c) => c);
      const target = this.lit.target.stage === stage ? cell(this.lit.target.index) : null;
      if (!reads.length && !target) return null;
      return { reads, target };
    }

    // Opens `stage` in the heatmap at `index`'s sequence and head; false when the page has no
    // heatmap of it.
    goTo(stage, index) {
      const hv = this.view.heatmapView;
      if (!hv || !hv.entries || !hv.entries.length) return false;
      let i = hv.entries.findIndex((en) => en.stage === stage && !en.virtual && en.group !== 'rollout');
      if (i < 0) i = hv.entries.findIndex((en) => en.stage === stage && en.group !== 'rollout');
      if (i < 0) return false;
      const en = hv.entries[i];
      hv.idx = i;
      hv.sel.value = String(i);
      if (en.heads && index.length === 4) hv.head = index[1];
      hv.syncHeadSel();
      if (index.length >= 3 && index[0] !== this.view.seq && index[0] < this.view.B) {
        const sel = document.getElementById('seq-select');
        if (sel) sel.value = String(index[0]);
        this.view.setSeq(index[0]);
      } else hv.update();
      const section = document.getElementById('heatmap');
      if (section && section.scrollIntoView) section.scrollIntoView({ block: 'start' });
      return true;
    }

    // ---------------------------------------------------------------- step
    buildStep() {
      const section = document.getElementById('step');
      const tocLink = document.getElementById('toc-step');
      if (!section) return;
      section.hidden = false;
      if (tocLink) tocLink.hidden = false;
      const el = section.querySelector('.section-body');
      this.stepEl = section;
      if (!this.can.step) {
        empty(el, 'Stepping is not available: ' + (this.can.why_not_step || 'the server cannot run this dump\'s pass'));
        section.dataset.state = 'unavailable';
        return;
      }
      const button = (id, text, fn) => h('button', { id, text, onclick: fn });
      this.gotoSel = h('select', { id: 'step-goto', 'aria-label': 'stage' });
      this.indexIn = h('input', { id: 'step-index', size: 14, placeholder: '[0,3,5]', 'aria-label': 'index' });
      this.valueIn = h('input', { id: 'step-value', size: 10, placeholder: 'value', 'aria-label': 'value' });
      this.commandIn = h('input', { id: 'step-command', size: 32, placeholder: 'any step command: help, show [0,1,:], head 2…', 'aria-label': 'command' });
      this.commandIn.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') this.command(this.commandIn.value); });
      const controls = h('div', { class: 'controls' },
        button('step-back', '◀ back', () => this.command('back')),
        button('step-next', 'next ▶', () => this.command('next')),
        h('label', null, 'go to ', this.gotoSel), button('step-go', 'go', () => this.command('goto ' + this.gotoSel.value)),
        button('step-continue', 'continue to the end', () => this.command('continue')));
      const setting = h('div', { class: 'controls' },
        h('label', null, 'set ', this.indexIn), h('label', null, 'to ', this.valueIn),
        button('step-set', 'set', () => this.command(`set ${this.indexIn.value.trim()} ${this.valueIn.value.trim()}`)),
        h('span', { class: 'note', text: 'changes one element of the stage under the cursor; every stage after it is recomputed. back drops it.' }));
      const typed = h('div', { class: 'controls' }, h('label', null, 'command ', this.commandIn), button('step-run', 'run', () => this.command(this.commandIn.value)));
      this.stateEl = h('p', { id: 'step-state', class: 'mono' });
      this.formulaEl = h('p', { id: 'step-formula', class: 'formula' });
      this.errorEl = h('p', { id: 'step-error', class: 'error', hidden: true });
      this.picture = h('img', { id: 'step-picture', alt: 'the stage under the cursor', hidden: true });
      this.pictureNote = h('p', { id: 'step-picture-note', class: 'note' });
      this.replyEl = h('pre', { id: 'step-reply', class: 'step-text' });
      this.changesEl = h('ul', { id: 'step-changes' });
      this.effectEl = h('div', { id: 'step-effect' });
      el.replaceChildren(
        h('p', { class: 'note', text: 'The pass of this dump, stage by stage, as bert-trace step walks it, run by the server with the dump\'s model.' }),
        controls, setting, typed, this.errorEl, this.stateEl, this.formulaEl, this.picture, this.pictureNote, this.replyEl,
        h('h3', { text: 'Changes' }), this.changesEl, this.effectEl);
      section.dataset.state = 'ready';
      section.dataset.answers = '0';
      this.queue = Promise.resolve();
      this.command('');
    }

    // Runs one step command on the server, in turn with the others.
    command(line) {
      this.queue = this.queue.then(() => this.run(line));
      return this.queue;
    }

    async run(line) {
      const section = this.stepEl;
      section.dataset.state = 'asking';
      try {
        const r = line === ''
          ? await this.ask('/api/state')
          : await this.ask('/api/step', { method: 'POST', headers: { 'Content-Type': 'text/plain; charset=utf-8' }, body: line });
        const answer = await r.json();
        this.errorEl.hidden = true;
        await this.render(answer);
        section.dataset.state = 'ready';
      } catch (err) {
        this.errorEl.textContent = String(err.message || err);
        this.errorEl.hidden = false;
        section.dataset.state = 'refused';
      }
      section.dataset.answers = String(Number(section.dataset.answers) + 1);
      emit('stepped', { line, state: section.dataset.state });
    }

    async render(answer) {
      const st = answer.state;
      if (this.gotoSel.options.length !== st.stages.length) {
        this.gotoSel.replaceChildren(...st.stages.map((name) => h('option', { value: name, text: name })));
      }
      if (answer.reply) this.replyEl.textContent = answer.reply;
      this.replyEl.hidden = !this.replyEl.textContent;
      const cur = st.current;
      this.stepEl.dataset.cursor = cur ? cur.name : '';
      if (cur) {
        this.gotoSel.value = cur.name;
        this.stateEl.textContent = `[${st.cursor + 1}/${st.stages.length}] ${cur.name} [${cur.shape.join(', ')}]  min ${fmt(cur.min)}  mean ${fmt(cur.mean)}  std ${fmt(cur.std)}  max ${fmt(cur.max)}`;
        this.formulaEl.textContent = 'formula: ' + cur.formula;
      } else {
        this.stateEl.textContent = `before the first of ${st.stages.length} stages: next runs to it`;
        this.formulaEl.textContent = '';
      }
      this.formulaEl.hidden = !this.formulaEl.textContent;
      this.changesEl.replaceChildren(...(st.changes.length ? st.changes.map((c) => h('li', { text: c })) : [h('li', { class: 'empty', text: 'none' })]));
      const ef = answer.effect;
      if (ef) {
        const shown = ef.stages.slice(0, 16);
        const table = h('table', { class: 'preds', id: 'step-changed' },
          h('tr', null, h('th', { text: 'stage changed' }), h('th', { text: 'largest |change|' })),
          shown.map((c) => h('tr', null, h('td', { text: c.stage }), h('td', { class: 'num', text: c.max_abs === null ? 'not a number' : fmt(c.max_abs) }))));
        const more = ef.stages.length > shown.length ? h('p', { class: 'note', text: `and ${ef.stages.length - shown.length} stages more` }) : null;
        this.effectEl.replaceChildren(
          h('h3', { text: `What the changes do: ${ef.stages.length} stage(s) changed` }), table, more,
          h('div', { class: 'step-compare' },
            h('div', null, h('h3', { text: 'without the changes' }), h('pre', { id: 'step-before', class: 'step-text', text: ef.before })),
            h('div', null, h('h3', { text: 'with them' }), h('pre', { id: 'step-after', class: 'step-text', text: ef.after }))));
      } else this.effectEl.replaceChildren();
      await this.drawPicture(cur, st.head);
    }

    async drawPicture(cur, head) {
      if (this.pictureUrl) { URL.revokeObjectURL(this.pictureUrl); this.pictureUrl = null; }
      this.picture.hidden = true;
      this.pictureNote.textContent = '';
      if (!cur) return;
      const query = `?seq=${this.view.seq}` + (cur.shape.length === 4 ? `&head=${head}` : '');
      try {
        const r = await this.ask('/api/picture' + query);
        const answer = await r.json();
        if (answer.svg === null) {
          this.pictureNote.textContent = 'No picture of this stage (' + answer.why + '); its values are below.';
          return;
        }
        this.pictureUrl = URL.createObjectURL(new Blob([answer.svg], { type: 'image/svg+xml' }));
        this.picture.src = this.pictureUrl;
        this.picture.hidden = false;
      } catch (err) {
        this.pictureNote.textContent = 'No picture of this stage (' + String(err.message || err) + '); its values are below.';
      }
    }
  }

  // ---------------------------------------------------------------- go
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start, { once: true });
  else start();
})();
