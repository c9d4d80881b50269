#!/usr/bin/env node
// Opens a page written by `bert-trace view DUMP --out PAGE.html` from file:// in Debian's headless
// Chromium (driven by playwright-core, which downloads no browser) and fails unless every view
// draws, with no console error or warning, no uncaught error and no request beyond the page itself.
//
//   node check_view.mjs PAGE.html OUTDIR [--timing] [--firefox[=PATH]]
//
// CHROMIUM=/path overrides /usr/bin/chromium. --firefox runs the same checks in Firefox
// (default /usr/bin/firefox-esr) over WebDriver BiDi instead (Node's WebSocket; on Node 20 the
// script re-runs itself with --experimental-websocket).
import { mkdtempSync, rmSync, mkdirSync, readFileSync, writeFileSync, statSync, existsSync } from 'node:fs';
import { spawn, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL, fileURLToPath } from 'node:url';
import { inflateSync } from 'node:zlib';

const args = process.argv.slice(2);
const timing = args.includes('--timing');
const ffArg = args.find((a) => a === '--firefox' || a.startsWith('--firefox='));
const positional = args.filter((a) => !a.startsWith('--'));
if (positional.length !== 2 || args.some((a) => a.startsWith('--') && a !== '--timing' && a !== ffArg)) {
  console.error('usage: node check_view.mjs PAGE.html OUTDIR [--timing] [--firefox[=PATH]]');
  process.exit(2);
}
const pagePath = resolve(positional[0]);
const outDir = resolve(positional[1]);
const pageUrl = pathToFileURL(pagePath).href;
const browserName = ffArg ? 'firefox' : 'chromium';
const executablePath = ffArg
  ? (ffArg.includes('=') ? ffArg.slice(ffArg.indexOf('=') + 1) : '/usr/bin/firefox-esr')
  : (process.env.CHROMIUM || '/usr/bin/chromium');

class CheckFailed extends Error {}
function fail(msg) { throw new CheckFailed(msg); }

if (!existsSync(pagePath)) { console.error(`check_view: FAIL: no such page: ${pagePath}`); process.exit(1); }
if (!existsSync(executablePath)) {
  console.error(`check_view: FAIL: no ${browserName} at ${executablePath} (apt-get install -y ${ffArg ? 'firefox-esr' : 'chromium'})`);
  process.exit(1);
}
if (ffArg && typeof WebSocket !== 'function') {
  if (process.env.CHECK_VIEW_REEXEC) { console.error('check_view: FAIL: this Node has no WebSocket (Node 20.10+ needed for --firefox)'); process.exit(1); }
  const r = spawnSync(process.execPath, ['--experimental-websocket', '--no-warnings', fileURLToPath(import.meta.url), ...args],
    { stdio: 'inherit', env: { ...process.env, CHECK_VIEW_REEXEC: '1' } });
  process.exit(r.status === null ? 1 : r.status);
}
mkdirSync(outDir, { recursive: true });

// ---------------------------------------------------------------- a minimal PNG reader (8-bit RGB/RGBA, not interlaced)
function readPng(buf) {
  const sig = [137, 80, 78, 71, 13, 10, 26, 10];
  if (!sig.every((b, i) => buf[i] === b)) throw new Error('not a PNG file');
  let pos = 8; let width = 0; let height = 0; let depth = 0; let ctype = 0; let interlace = 0;
  const idat = [];
  while (pos < buf.length) {
    const len = buf.readUInt32BE(pos);
    const type = buf.toString('latin1', pos + 4, pos + 8);
    const data = buf.subarray(pos + 8, pos + 8 + len);
    if (type === 'IHDR') {
      width = data.readUInt32BE(0); height = data.readUInt32BE(4); depth = data[8]; ctype = data[9]; interlace = data[12];
    } else if (type === 'IDAT') idat.push(data);
    else if (type === 'IEND') break;
    pos += 12 + len;
  }
  if (depth !== 8 || (ctype !== 2 && ctype !== 6) || interlace !== 0) throw new Error(`unsupported PNG (depth ${depth}, colour type ${ctype})`);
  const bpp = ctype === 6 ? 4 : 3;
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * bpp;
  const out = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)];
    const src = y * (stride + 1) + 1;
    const dst = y * stride;
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? out[dst + x - bpp] : 0;
      const b = y > 0 ? out[dst - stride + x] : 0;
      const c = x >= bpp && y > 0 ? out[dst - stride + x - bpp] : 0;
      let v = raw[src + x];
      if (f === 1) v += a;
      else if (f === 2) v += b;
      else if (f === 3) v += (a + b) >> 1;
      else if (f === 4) { const p = a + b - c; const pa = Math.abs(p - a); const pb = Math.abs(p - b); const pc = Math.abs(p - c); v += pa <= pb && pa <= pc ? a : pb <= pc ? b : c; }
      out[dst + x] = v & 255;
    }
  }
  return { width, height, bpp, pixels: out };
}
function distinctColours(png) {
  const seen = new Set();
  const { pixels, bpp } = png;
  for (let i = 0; i < pixels.length; i += bpp * 7) seen.add((pixels[i] << 16) | (pixels[i + 1] << 8) | pixels[i + 2]);
  return seen.size;
}

// ---------------------------------------------------------------- functions run inside the page
// (each takes one JSON argument; both drivers run them)
const IN_PAGE = {
  // Whether the model view's last head is inside the part of the grid the window shows, and
  // whether the page says that the grid scrolls.
  // Whether the heatmap's picture is whole inside its frame, and whether the page says that it
  // scrolls.
  heatmapFits: function () {
    const wrap = document.querySelector('#heatmap .hm-wrap');
    if (!wrap) return null;
    return {
      inside: wrap.scrollWidth <= wrap.clientWidth + 1 && wrap.scrollHeight <= wrap.clientHeight + 1,
      says: !document.querySelector('#hm-scrolls').hidden,
    };
  },
  modelViewFits: function () {
    const wrap = document.querySelector('#mv-wrap');
    const cells = document.querySelectorAll('#model-view canvas.mv-cell[data-layer="0"]');
    if (!wrap || !cells.length) return null;
    const last = cells[cells.length - 1].getBoundingClientRect();
    const shown = wrap.getBoundingClientRect();
    return {
      inside: last.right <= shown.right + 1 && last.right <= window.innerWidth,
      says: !document.querySelector('#mv-scrolls').hidden,
    };
  },
  // colours, non-white pixels and a hash of a canvas, optionally of a region in CSS pixels; reads a
  // copy so that the page's own canvas is never read back (Chromium warns about repeated readbacks)
  canvasStats: function ([sel, reg]) {
    const cv = document.querySelector(sel);
    if (!cv) return null;
    const sx = cv.width / (parseFloat(cv.style.width) || cv.width);
    const x = reg ? Math.floor(reg.x * sx) : 0;
    const y = reg ? Math.floor(reg.y * sx) : 0;
    const w = Math.max(1, Math.min(cv.width - x, reg ? Math.ceil(reg.w * sx) : cv.width));
    const h = Math.max(1, Math.min(cv.height - y, reg ? Math.ceil(reg.h * sx) : cv.height));
    const copy = document.createElement('canvas');
    copy.width = w; copy.height = h;
    const cctx = copy.getContext('2d', { willReadFrequently: true });
    cctx.drawImage(cv, x, y, w, h, 0, 0, w, h);
    const d = cctx.getImageData(0, 0, w, h).data;
    const seen = new Set();
    let ink = 0; let hash = 2166136261;
    for (let i = 0; i < d.length; i += 4) {
      const c = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
      if (d[i + 3] > 0 && c !== 0xffffff) ink++;
      seen.add(c);
      hash = Math.imul(hash ^ c, 16777619) >>> 0;
    }
    return { distinct: seen.size, ink, pixels: d.length / 4, hash };
  },
  // how many of a row's model-view pictures have any colour
  rowInk: function ([layer, nh]) {
    let ink = 0;
    for (let hd = 0; hd < nh; hd++) {
      const cv = document.querySelector(`#model-view canvas.mv-cell[data-layer="${layer}"][data-head="${hd}"]`);
      const copy = document.createElement('canvas');
      copy.width = cv.width; copy.height = cv.height;
      const cctx = copy.getContext('2d', { willReadFrequently: true });
      cctx.drawImage(cv, 0, 0);
      const d = cctx.getImageData(0, 0, cv.width, cv.height).data;
      for (let i = 0; i < d.length; i += 4) if (d[i] !== 255 || d[i + 1] !== 255 || d[i + 2] !== 255) { ink++; break; }
    }
    return ink;
  },
  // resolves with the event's detail when the page next emits `name` (with a frame after it)
  nextEvent: function (name) {
    return new Promise((res) => {
      window.bertTraceView.events.addEventListener(name, (ev) => {
        requestAnimationFrame(() => setTimeout(() => res(ev.detail), 0));
      }, { once: true });
    });
  },
  // arms a timer: from the next change of `sel` to the frame after the next `event`
  armTimer: function ([sel, event]) {
    window.__checkTimer = new Promise((res) => {
      document.querySelector(sel).addEventListener('change', () => {
        const t = performance.now();
        window.bertTraceView.events.addEventListener(event, (ev) => {
          requestAnimationFrame(() => setTimeout(() => res({ total: performance.now() - t, draw: ev.detail.ms, detail: ev.detail }), 0));
        }, { once: true });
      }, { once: true, capture: true });
    });
    return true;
  },
  awaitTimer: function () { return window.__checkTimer; },
  // waits until `sel` matches n elements, or (with a pattern) until its text matches; no eval
  // (the page's Content-Security-Policy forbids it)
  waitFor: function ([sel, n, pattern, timeoutMs]) {
    const re = pattern ? new RegExp(pattern) : null;
    return new Promise((res) => {
      const t0 = performance.now();
      const tick = () => {
        const hit = re ? re.test((document.querySelector(sel) || {}).textContent || '') : document.querySelectorAll(sel).length === n;
        if (hit) res(true);
        else if (performance.now() - t0 > timeoutMs) res(false);
        else setTimeout(tick, 25);
      };
      tick();
    });
  },
  // the page's own report: dims, stages, errors
  describe: function () {
    const D = JSON.parse(document.getElementById('bert-trace-data').textContent);
    return {
      dims: D.dims, attention: !!D.attention, title: document.title,
      // the first sequence's words when it has words of several tokens (the head view's "by words")
      words: D.attention && D.attention.words && D.attention.words.sequences[0] ? D.attention.words.sequences[0].words.map((w) => w.text) : null,
      heatmaps: (D.heatmaps || []).map((hm) => ({ stage: hm.stage, cells: hm.shape.slice(-2).reduce((a, b) => a * b, 1) })),
      errors: (window.__checkErrors || []).concat(window.bertTraceView.errors || []),
    };
  },
  stageOptions: function () { return Array.from(document.querySelectorAll('#hm-stage option')).map((o) => ({ value: o.value, text: o.textContent })); },
  text: function (sel) { const e = document.querySelector(sel); return e ? e.textContent : null; },
  attr: function ([sel, name]) { const e = document.querySelector(sel); return e ? e.getAttribute(name) : null; },
  count: function (sel) { return document.querySelectorAll(sel).length; },
  scrollTo: function (sel) { const e = document.querySelector(sel); if (e) e.scrollIntoView({ block: 'start' }); const s = document.querySelector('#hv-scroll'); if (s) s.scrollTop = 0; return true; },
  rect: function (sel) { const r = document.querySelector(sel).getBoundingClientRect(); return { x: r.left, y: r.top, w: r.width, h: r.height }; },
  // fallbacks for drivers without real input
  select: function ([sel, value]) { const e = document.querySelector(sel); e.value = value; e.dispatchEvent(new Event('input', { bubbles: true })); e.dispatchEvent(new Event('change', { bubbles: true })); return true; },
  click: function (sel) { document.querySelector(sel).click(); return true; },
  mouseMove: function ([sel, dx, dy]) {
    const e = document.querySelector(sel);
    const r = e.getBoundingClientRect();
    e.dispatchEvent(new MouseEvent('mousemove', { bubbles: true, clientX: r.left + dx, clientY: r.top + dy }));
    return true;
  },
  errorHooks: function () {
    if (window.__checkHooked) return true;
    window.__checkHooked = true;
    window.__checkErrors = window.__checkErrors || [];
    window.addEventListener('unhandledrejection', (ev) => {
      const r = ev.reason;
      window.__checkErrors.push('unhandled rejection: ' + (r && r.message ? r.message : String(r)));
    });
    window.addEventListener('error', (ev) => { window.__checkErrors.push('error: ' + ev.message); });
    return true;
  },
};

// ---------------------------------------------------------------- Chromium via playwright-core
async function chromiumDriver(userDataDir) {
  let chromium;
  try {
    ({ chromium } = await import('playwright-core'));
  } catch (err) {
    fail('playwright-core is not installed: run `npm ci` in ' + fileURLToPath(new URL('.', import.meta.url)));
  }
  const problems = [];
  const requests = [];
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    offline: true,
  });
  context.on('request', (req) => requests.push(`${req.method()} ${req.url()}`));
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (msg) => {
    const type = msg.type();
    if (type === 'error' || type === 'warning' || type === 'assert') problems.push(`console ${type}: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`uncaught error: ${err.message}`));
  page.on('crash', () => problems.push('the page crashed'));
  await page.addInitScript(IN_PAGE.errorHooks);
  return {
    problems, requests,
    goto: (url) => page.goto(url, { waitUntil: 'load', timeout: 120000 }),
    run: (name, arg) => page.evaluate(IN_PAGE[name], arg === undefined ? null : arg),
    evaluate: (expr) => page.evaluate(expr),
    select: (sel, value) => page.selectOption(sel, value),
    click: (sel) => page.click(sel),
    mouseMove: async (sel, dx, dy) => {
      const box = await page.locator(sel).boundingBox();
      await page.mouse.move(box.x + dx, box.y + dy);
    },
    mouseAway: () => page.mouse.move(0, 0),
    screenshot: (path) => page.screenshot({ path, fullPage: true }),
    close: () => context.close(),
  };
}

// ---------------------------------------------------------------- Firefox via WebDriver BiDi
async function firefoxDriver(profileDir) {
  writeFileSync(join(profileDir, 'user.js'), [
    'user_pref("remote.prefs.recommended", true);',
    'user_pref("browser.shell.checkDefaultBrowser", false);',
    'user_pref("datareporting.policy.dataSubmissionEnabled", false);',
    'user_pref("toolkit.telemetry.enabled", false);',
    'user_pref("app.normandy.enabled", false);',
    'user_pref("network.captive-portal-service.enabled", false);',
    'user_pref("network.connectivity-service.enabled", false);',
  ].join('\n') + '\n');
  const proc = spawn(executablePath, ['--headless', '--remote-debugging-port=0', '--profile', profileDir, '--width', '1280', '--height', '900', 'about:blank'],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  const wsUrl = await new Promise((res, rej) => {
    let buf = '';
    const onData = (d) => { buf += d; const m = buf.match(/WebDriver BiDi listening on (ws:\/\/\S+)/); if (m) res(m[1]); };
    proc.stderr.on('data', onData);
    proc.stdout.on('data', () => {});
    proc.on('exit', (code) => rej(new Error(`Firefox exited (${code}) before it listened: ${buf.slice(-500)}`)));
    setTimeout(() => rej(new Error('Firefox did not start WebDriver BiDi within 60 s')), 60000);
  });
  const ws = new WebSocket(wsUrl + '/session');
  await new Promise((res, rej) => { ws.addEventListener('open', res); ws.addEventListener('error', () => rej(new Error('no BiDi connection'))); });
  let id = 0;
  const pending = new Map();
  const problems = [];
  const requests = [];
  ws.addEventListener('message', (ev) => {
    const m = JSON.parse(ev.data);
    if (m.id && pending.has(m.id)) {
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (m.type === 'error') p.rej(new Error(`${m.error}: ${m.message}`)); else p.res(m.result);
    } else if (m.method === 'log.entryAdded') {
      const { level, text, type } = m.params;
      if (level === 'error' || level === 'warn') problems.push(`console ${type === 'javascript' ? 'error' : level}: ${text}`);
    } else if (m.method === 'network.beforeRequestSent') {
      const r = m.params.request;
      requests.push(`${r.method} ${r.url}`);
    }
  });
  const send = (method, params) => new Promise((res, rej) => {
    const i = ++id;
    pending.set(i, { res, rej });
    ws.send(JSON.stringify({ id: i, method, params }));
  });
  await send('session.new', { capabilities: {} });
  await send('session.subscribe', { events: ['log.entryAdded', 'network.beforeRequestSent'] });
  const tree = await send('browsingContext.getTree', {});
  const context = tree.contexts[0].context;
  await send('browsingContext.setViewport', { context, viewport: { width: 1280, height: 900 } });
  await send('script.addPreloadScript', { functionDeclaration: `() => (${IN_PAGE.errorHooks})()` });
  // every result comes back as a JSON string
  const evaluate = async (expression) => {
    const r = await send('script.evaluate', {
      expression: `Promise.resolve(${expression}).then((r) => JSON.stringify(r === undefined ? null : r))`,
      target: { context }, awaitPromise: true, resultOwnership: 'none',
    });
    if (r.type === 'exception') throw new Error(`in the page: ${r.exceptionDetails.text}`);
    return JSON.parse(r.result.value);
  };
  const run = (name, arg) => evaluate(`(${IN_PAGE[name]})(${JSON.stringify(arg === undefined ? null : arg)})`);
  return {
    problems, requests,
    goto: (url) => send('browsingContext.navigate', { context, url, wait: 'complete' }),
    run,
    evaluate,
    select: (sel, value) => run('select', [sel, value]),
    click: (sel) => run('click', sel),
    mouseMove: (sel, dx, dy) => run('mouseMove', [sel, dx, dy]),
    mouseAway: async () => {},
    screenshot: async (path) => {
      const shot = await send('browsingContext.captureScreenshot', { context, origin: 'document' });
      writeFileSync(path, Buffer.from(shot.data, 'base64'));
    },
    close: async () => {
      await send('browser.close', {}).catch(() => {});
      ws.close();
      await new Promise((res) => { if (proc.exitCode !== null) res(); else { proc.on('exit', res); setTimeout(() => { proc.kill(); res(); }, 5000); } });
    },
  };
}

// ---------------------------------------------------------------- the checks
async function check(drv, summary, times) {
  const t0 = Date.now();
  await drv.goto(pageUrl);
  const ready = await drv.evaluate('window.bertTraceView ? window.bertTraceView.ready : { error: "the page script did not run (no window.bertTraceView)" }');
  times.initial = Date.now() - t0;
  if (!ready || ready.error) fail(`the page did not render: ${ready && ready.error}`);
  times.initialInPage = (await drv.evaluate('window.bertTraceView.timings')).ready;
  const data = await drv.run('describe');
  if (data.errors.length) fail(`the page reported errors: ${data.errors.join('; ')}`);
  const { layers: L, heads: nh, tokens: T, batch: B } = data.dims;
  if (!data.title || !data.title.includes('bert-trace')) fail(`unexpected <title>: ${data.title}`);
  summary.push(`B=${B} T=${T} L=${L} heads=${nh}`);

  // ---- head view
  if (data.attention) {
    const lines = Number(await drv.run('attr', ['#hv-canvas', 'data-lines']));
    if (!(lines > 0)) fail(`the head view drew no lines (${lines})`);
    const linesArea = { x: 120, y: 0, w: 200, h: 100000 };
    const before = await drv.run('canvasStats', ['#hv-canvas', linesArea]);
    if (!before || before.ink === 0) fail('the head view canvas is blank between the token columns');
    summary.push(`head view: ${lines} lines`);
    if (L > 1) {
      await drv.run('armTimer', ['#hv-layer', 'headview-drawn']);
      await drv.select('#hv-layer', String(L - 1));
      const sw = await drv.run('awaitTimer');
      times.layerSwitch = sw.total;
      times.layerSwitchDraw = sw.draw;
      const after = await drv.run('canvasStats', ['#hv-canvas', linesArea]);
      const layerNow = await drv.run('attr', ['#hv-canvas', 'data-layer']);
      if (layerNow !== String(L - 1)) fail(`after choosing layer ${L - 1} the head view shows layer ${layerNow}`);
      if (after.hash === before.hash) fail(`choosing layer ${L - 1} did not change what the head view draws`);
      summary.push(`layer 0→${L - 1} changes the drawing`);
    }
    // by words: one row a word, other lines; and back
    const wordsBox = await drv.run('count', '#hv-words');
    if (data.words) {
      if (wordsBox !== 1) fail('the first sequence has words of several tokens, but the head view offers no "by words"');
      const tokensDrawn = await drv.run('canvasStats', ['#hv-canvas', linesArea]);
      const drawn = drv.run('nextEvent', 'headview-drawn');
      await drv.click('#hv-words');
      await drawn;
      const rows = Number(await drv.run('attr', ['#hv-canvas', 'data-rows']));
      const byWords = await drv.run('attr', ['#hv-canvas', 'data-by-words']);
      if (byWords !== '1' || rows !== data.words.length) fail(`by words, the head view shows ${rows} rows (by words: ${byWords}), expected the ${data.words.length} words ${data.words.join(' ')}`);
      const wordsDrawn = await drv.run('canvasStats', ['#hv-canvas', linesArea]);
      if (wordsDrawn.hash === tokensDrawn.hash || wordsDrawn.ink === 0) fail('reading by words did not change what the head view draws');
      const status = await drv.run('text', '#hv-status');
      if (!status.includes(`${data.words.length} words of`)) fail(`by words, the head view says "${status}"`);
      const back = drv.run('nextEvent', 'headview-drawn');
      await drv.click('#hv-words');
      await back;
      if (await drv.run('attr', ['#hv-canvas', 'data-by-words']) !== '0') fail('unticking "by words" left the head view by words');
      summary.push(`by words: ${data.words.length} rows`);
    } else if (wordsBox !== 0 && data.attention) {
      summary.push('by words offered for a later sequence');
    }
    // hover the first token: only its lines
    await drv.run('scrollTo', '#head-view');
    await drv.mouseMove('#hv-canvas', 60, 8 + 5);
    const isolated = await drv.run('waitFor', ['#hv-status', 0, ' from "', 5000]);
    if (!isolated) fail('hovering the first token did not isolate its lines');
    await drv.mouseAway();
  } else {
    const txt = await drv.run('text', '#head-view');
    if (!/No attention/i.test(txt)) fail('no attention in the data, but the head view does not say so');
    summary.push('no attention: head view says so');
  }

  // ---- model view
  if (data.attention) {
    const cells = await drv.run('count', '#model-view canvas.mv-cell');
    if (cells !== L * nh) fail(`the model view has ${cells} cells, expected ${L} x ${nh} = ${L * nh}`);
    await drv.run('scrollTo', '#model-view');
    const row0 = await drv.run('waitFor', ['#model-view canvas.mv-cell[data-layer="0"][data-drawn="1"]', nh, null, 20000]);
    if (!row0) fail('the first row of the model view was not drawn');
    const ink = await drv.run('rowInk', [0, nh]);
    if (ink !== nh) fail(`only ${ink} of ${nh} model-view pictures in layer 0 have any colour`);
    // let the idle-time filling finish, so that the screenshot shows every row
    const all = await drv.run('waitFor', ['#model-view canvas.mv-cell[data-drawn="1"]', L * nh, null, 30000]);
    if (!all) fail('the model view never finished drawing its rows');
    summary.push(`model view: ${L}x${nh} cells drawn`);
    // Every view fits the window or says it scrolls: a model of 12 heads or fewer fits.
    const fits = await drv.run('modelViewFits');
    if (!fits) fail('the model view has no grid to measure');
    if (!fits.inside && !fits.says) fail(`the model view's last head (${nh - 1}) is cut off and the page does not say the grid scrolls`);
    if (nh <= 12 && !fits.inside) fail(`the model view of ${nh} heads does not fit the window`);
    summary.push(fits.inside ? 'model view fits the window' : 'model view says it scrolls');
    // clicking a thumbnail opens it in the head view and the heatmap
    const opened = drv.run('nextEvent', 'heatmap-drawn');
    await drv.click(`#model-view canvas.mv-cell[data-layer="${L - 1}"][data-head="${nh - 1}"]`);
    const det = await opened;
    if (det.stage !== `layer${L - 1}.attention.probs`) fail(`clicking layer ${L - 1} head ${nh - 1} opened ${det.stage} in the heatmap`);
    const hmHead = await drv.run('attr', ['#hm-canvas', 'data-head']);
    if (hmHead !== String(nh - 1)) fail(`clicking head ${nh - 1} opened head ${hmHead} in the heatmap`);
    const hvText = await drv.run('text', '#hv-status');
    if (!hvText.startsWith(`layer ${L - 1} of ${L} · 1 of ${nh} head`)) fail(`clicking layer ${L - 1} head ${nh - 1} left the head view at "${hvText}"`);
    summary.push('thumbnail click opens head view + heatmap');
  } else {
    const txt = await drv.run('text', '#model-view');
    if (!/No attention/i.test(txt)) fail('no attention in the data, but the model view does not say so');
  }

  // ---- heatmap: the biggest stage, then the last and the first entries of the picker
  const options = await drv.run('stageOptions');
  // attention rollout through every layer, in the picker, when the page has the attention
  const rolled = options.filter((o) => o.text.startsWith('rollout through layer ')).length;
  if (data.attention && rolled !== L) fail(`the heatmap offers rollout through ${rolled} layers, expected ${L}`);
  if (rolled) summary.push(`rollout: ${rolled} layers`);
  if (options.length) {
    const picks = [options[options.length - 1], options[0]];
    if (data.heatmaps.length) {
      const big = data.heatmaps.reduce((a, b) => (b.cells > a.cells ? b : a));
      const opt = options.find((o) => o.text.startsWith(big.stage + ' '));
      if (opt) picks.unshift(opt);
    }
    let k = 0;
    for (const opt of picks) {
      const current = await drv.evaluate('document.getElementById("hm-stage").value');
      await drv.run('armTimer', [current === opt.value ? '#hm-zoom' : '#hm-stage', 'heatmap-drawn']);
      if (current === opt.value) await drv.select('#hm-zoom', k % 2 ? '1' : '2');
      else await drv.select('#hm-stage', opt.value);
      const tm = await drv.run('awaitTimer');
      if (k === 0) { times.heatmap = tm.total; times.heatmapDraw = tm.draw; times.heatmapStage = tm.detail.stage; }
      const st = await drv.run('canvasStats', ['#hm-canvas', { x: 110, y: 0, w: 100000, h: 100000 }]);
      if (!st || st.distinct < 3 || st.ink < 50) fail(`the heatmap of ${opt.text.trim()} is blank (${st && st.distinct} colours)`);
      const fits = await drv.run('heatmapFits');
      if (!fits.inside && !fits.says) fail(`the heatmap of ${opt.text.trim()} is larger than its frame and the page does not say it scrolls`);
      k++;
    }
    // hover a cell: the readout names the row, the column and the value
    await drv.run('scrollTo', '#heatmap');
    await drv.mouseMove('#hm-canvas', 110 + 1, 85);
    const readout = await drv.run('text', '#hm-readout');
    if (!/row \d+/.test(readout) || !/value/.test(readout)) fail(`hovering the heatmap shows no value: "${readout}"`);
    await drv.mouseAway();
    summary.push(`heatmap: ${picks.length} stages drawn, hover readout`);
  } else {
    const txt = await drv.run('text', '#heatmap');
    if (!/No heatmap/i.test(txt)) fail('no heatmap stages, but the heatmap section does not say so');
  }

  // ---- sequence selector
  if (B > 1) {
    const before = data.attention ? await drv.run('canvasStats', ['#hv-canvas']) : null;
    if (data.attention) await drv.run('armTimer', ['#seq-select', 'headview-drawn']);
    await drv.select('#seq-select', '1');
    if (data.attention) {
      await drv.run('awaitTimer');
      const after = await drv.run('canvasStats', ['#hv-canvas']);
      if (after.hash === before.hash) fail('choosing sequence 1 did not change the head view');
    }
    summary.push('sequence selector');
  }

  // ---- errors collected in the page
  const late = (await drv.run('describe')).errors;
  drv.problems.push(...late);

  // ---- a screenshot of the whole page
  await drv.evaluate('window.scrollTo(0, 0)');
  const shot = join(outDir, 'page.png');
  await drv.screenshot(shot);
  const png = readPng(readFileSync(shot));
  const colours = distinctColours(png);
  if (png.width < 400 || png.height < 400) fail(`the screenshot is only ${png.width}x${png.height}`);
  if (colours < 64) fail(`the screenshot has only ${colours} distinct colours: it looks blank`);
  summary.push(`screenshot ${png.width}x${png.height} with ${colours} colours`);
}

const tmpDir = mkdtempSync(join(tmpdir(), 'bert-trace-view-'));
const summary = [];
const times = {};
let drv;
let ok = false;
try {
  drv = browserName === 'firefox' ? await firefoxDriver(tmpDir) : await chromiumDriver(tmpDir);
  await check(drv, summary, times);
  const extra = drv.requests.filter((r) => {
    const url = r.slice(r.indexOf(' ') + 1);
    return !(url === pageUrl || url.startsWith('blob:') || url.startsWith('data:'));
  });
  const bad = drv.problems.concat(extra.map((r) => `request beyond the page's own file: ${r}`));
  if (bad.length) fail(bad.join('\n  '));
  summary.push('no console error, no request');
  ok = true;
} catch (err) {
  const msg = err instanceof CheckFailed ? err.message : (err && err.stack ? err.stack : String(err));
  console.error(`check_view: FAIL (${browserName}): ${msg}`);
  if (drv && drv.problems.length && !(err instanceof CheckFailed && msg.startsWith(drv.problems[0]))) console.error('  also: ' + drv.problems.join('\n  '));
  process.exitCode = 1;
} finally {
  if (drv) await drv.close().catch(() => {});
  rmSync(tmpDir, { recursive: true, force: true });
}
if (ok) {
  const size = (statSync(pagePath).size / 1e6).toFixed(2);
  console.log(`check_view: ok (${browserName}): ${pagePath} (${size} MB): ${summary.join('; ')}`);
  if (timing) {
    const f = (ms) => (ms === undefined ? 'n/a' : `${Math.round(ms)} ms`);
    console.log(`timing (${browserName}): page ${size} MB; initial render ${f(times.initialInPage)} from navigation to the end of the first render ` +
      `(${f(times.initial)} seen from node); layer switch ${f(times.layerSwitch)} to the next frame (decode + draw ${f(times.layerSwitchDraw)}); ` +
      `heatmap ${times.heatmapStage || ''} ${f(times.heatmap)} (decode + draw ${f(times.heatmapDraw)})`);
  }
  writeFileSync(join(outDir, 'check_view.json'), JSON.stringify({ page: pagePath, browser: browserName, summary, times }, null, 2) + '\n');
}
