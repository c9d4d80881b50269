#!/usr/bin/env node
// Opens the page `bert-trace view DUMP --serve` serves, in Debian's headless Chromium (driven by
// playwright-core), does what a learner does, and prints what the page then shows, as one JSON
// object, for the caller to check against the commands' own output:
//
//   node check_serve.mjs URL OUTDIR PLAN.json
//
// PLAN.json: {"click": {"stage": S, "index": [b, h, q, k]}, "line": {"layer": L, "head": H,
// "query": Q, "key": K} (optional: the head view's line, in the clicked sequence), "steps": N,
// "goto": STAGE, "set": {"index": "[i,j,k]", "value": "V"}}. The page is asked only through its own controls:
// the heatmap's stage and head selectors, a mouse click on the cell's centre, the operand
// links, and the step section's buttons and inputs. It fails (exit 1, with the reason) on any
// console error or warning, any uncaught error, and any request to another origin than the
// server's. OUTDIR/served.png is a screenshot of the page with the panel open, OUTDIR/stepped.png
// one of the step section after the set.
import { mkdtempSync, rmSync, mkdirSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const [url, outArg, planArg] = process.argv.slice(2);
if (!url || !outArg || !planArg) {
  console.error('usage: node check_serve.mjs URL OUTDIR PLAN.json');
  process.exit(2);
}
const outDir = resolve(outArg);
const plan = JSON.parse(readFileSync(planArg, 'utf8'));
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(executablePath)) {
  console.error(`check_serve: FAIL: no chromium at ${executablePath} (apt-get install -y chromium)`);
  process.exit(1);
}
mkdirSync(outDir, { recursive: true });
const origin = new URL(url).origin;

class CheckFailed extends Error {}
function fail(msg) { throw new CheckFailed(msg); }

const { chromium } = await import('playwright-core');
const userDataDir = mkdtempSync(join(tmpdir(), 'check-serve-'));
const problems = [];
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath,
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
let result;
try {
  // The server's origin only: anything else is a request the page must not make.
  await context.route('**/*', (route) => {
    const to = route.request().url();
    if (to.startsWith(origin + '/') || to.startsWith('blob:') || to.startsWith('data:')) return route.continue();
    problems.push(`a request beyond the server: ${to}`);
    return route.abort();
  });
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (msg) => {
    if (['error', 'warning', 'assert'].includes(msg.type())) problems.push(`console ${msg.type()}: ${msg.text()}`);
  });
  page.on('response', (res) => { if (res.status() >= 400) problems.push(`${res.status()} for ${res.url()}`); });
  page.on('pageerror', (err) => problems.push(`uncaught error: ${err.message}`));
  await page.goto(url, { waitUntil: 'load', timeout: 120000 });
  await page.evaluate(() => window.bertTraceView.ready);
  await page.waitForFunction(() => document.querySelector('#step').dataset.state === 'ready', null, { timeout: 60000 });

  // ---------------------------------------------------------------- a click on one cell
  const { stage, index } = plan.click;
  const option = await page.evaluate((stage) => {
    const hv = window.bertTraceView.view.heatmapView;
    const i = hv.entries.findIndex((e) => e.stage === stage);
    return i;
  }, stage);
  if (option < 0) fail(`the page has no heatmap of ${stage}`);
  await page.selectOption('#hm-stage', String(option));
  if (index.length === 4) await page.selectOption('#hm-head', String(index[1]));
  if (index[0] !== 0) await page.selectOption('#seq-select', String(index[0]));
  await page.waitForFunction((s) => document.querySelector('#hm-canvas').dataset.stage === s, stage);
  const [r, c] = index.slice(-2);
  await page.evaluate(([r, c]) => {
    const hv = window.bertTraceView.view.heatmapView;
    const rect = hv.canvas.getBoundingClientRect();
    window.scrollBy(0, rect.top + hv.geo.top + r * hv.geo.ch - 200);
  }, [r, c]);
  const where = await page.evaluate(([r, c]) => window.bertTraceView.view.heatmapView.cellCentre(r, c), [r, c]);
  await page.mouse.click(where.x, where.y);
  await page.waitForFunction(() => ['explained', 'refused'].includes(document.querySelector('#explain-panel').dataset.state),
    null, { timeout: 30000 });
  const panel = await page.evaluate(() => ({
    state: document.querySelector('#explain-panel').dataset.state,
    target: document.querySelector('#explain-panel').dataset.target,
    title: document.querySelector('#explain-title').textContent,
    formula: (document.querySelector('#explain-formula') || {}).textContent,
    steps: (document.querySelector('#explain-steps') || {}).textContent,
    recomputed: (document.querySelector('#explain-recomputed') || {}).textContent,
    reads: [...document.querySelectorAll('#explain-reads li')].map((li) => li.textContent),
    terms: [...document.querySelectorAll('#explain-terms tr')].map((tr) => [...tr.children].map((td) => td.textContent).join('  ')),
    lit: JSON.parse(document.querySelector('#hm-canvas').dataset.lit || 'null'),
    litTarget: JSON.parse(document.querySelector('#hm-canvas').dataset.litTarget || 'null'),
  }));
  if (panel.state !== 'explained') fail(`the panel says: ${await page.textContent('#explain-body')}`);
  // The picture: the heatmap from its top, the panel beside it, no tooltip.
  await page.mouse.move(1, 1);
  await page.evaluate(() => document.querySelector('#heatmap').scrollIntoView({ block: 'start' }));
  await page.screenshot({ path: join(outDir, 'served.png') });

  // The first operand's link opens its stage, with the cells read lit.
  const operand = await page.evaluate(() => document.querySelector('#explain-reads a.operand').dataset.stage);
  await page.click('#explain-reads a.operand');
  await page.waitForFunction((s) => document.querySelector('#hm-canvas').dataset.stage === s, operand);
  const litOperand = await page.evaluate(() => ({
    stage: document.querySelector('#hm-canvas').dataset.stage,
    head: Number(document.querySelector('#hm-canvas').dataset.head),
    lit: JSON.parse(document.querySelector('#hm-canvas').dataset.lit || 'null'),
  }));

  // ---------------------------------------------------------------- a line of the head view
  // One head shown (a shift-click on its swatch), the query kept, then a click on the key: the
  // panel explains that probability.
  let line = null;
  if (plan.line) {
    const { layer, head, query, key } = plan.line;
    await page.evaluate(() => document.querySelector('#head-view').scrollIntoView({ block: 'start' }));
    await page.selectOption('#hv-layer', String(layer));
    const swatches = page.locator('#head-view .head-swatch');
    await swatches.nth(head).click({ modifiers: ['Shift'] });
    const at = (side, tok) => page.evaluate(([side, tok]) => window.bertTraceView.view.headView.tokenCentre(side, tok), [side, tok]);
    const q = await at('left', query);
    await page.mouse.click(q.x, q.y);
    const k = await at('right', key);
    await page.mouse.click(k.x, k.y);
    await page.waitForFunction((t) => document.querySelector('#explain-panel').dataset.target === t
      && document.querySelector('#explain-panel').dataset.state === 'explained',
    `layer${layer}.attention.probs[${plan.click.index[0]},${head},${query},${key}]`, { timeout: 30000 });
    line = await page.evaluate(() => ({
      target: document.querySelector('#explain-panel').dataset.target,
      title: document.querySelector('#explain-title').textContent,
    }));
  }

  // ---------------------------------------------------------------- step mode
  const answers = () => page.evaluate(() => Number(document.querySelector('#step').dataset.answers));
  const press = async (selector) => {
    const before = await answers();
    await page.click(selector);
    await page.waitForFunction((n) => Number(document.querySelector('#step').dataset.answers) > n, before, { timeout: 60000 });
    return page.evaluate(() => ({
      cursor: document.querySelector('#step').dataset.cursor,
      state: document.querySelector('#step').dataset.state,
      error: document.querySelector('#step-error').hidden ? null : document.querySelector('#step-error').textContent,
    }));
  };
  const walked = [];
  for (let i = 0; i < plan.steps; i++) walked.push((await press('#step-next')).cursor);
  const back = (await press('#step-back')).cursor;
  await page.selectOption('#step-goto', plan.goto);
  const went = await press('#step-go');
  await page.fill('#step-index', plan.set.index);
  await page.fill('#step-value', plan.set.value);
  const set = await press('#step-set');
  const effect = await page.evaluate(() => ({
    changed: [...document.querySelectorAll('#step-changed tr')].slice(1).map((tr) => tr.children[0].textContent),
    before: (document.querySelector('#step-before') || {}).textContent,
    after: (document.querySelector('#step-after') || {}).textContent,
    picture: !document.querySelector('#step-picture').hidden,
  }));
  await page.evaluate(() => document.querySelector('#step').scrollIntoView({ block: 'start' }));
  await page.screenshot({ path: join(outDir, 'stepped.png'), fullPage: false });
  const undone = await press('#step-back');
  const afterBack = await page.evaluate(() => ({
    changes: [...document.querySelectorAll('#step-changes li')].map((li) => li.textContent),
    effect: document.querySelector('#step-effect').children.length,
  }));
  result = { panel, litOperand, line, walked, back, went, set, effect, undone, afterBack, problems };
} catch (err) {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
  console.error(`check_serve: FAIL: ${err instanceof CheckFailed ? err.message : err.stack || err}`);
  process.exit(1);
}
await context.close();
rmSync(userDataDir, { recursive: true, force: true });
if (problems.length) {
  console.error(`check_serve: FAIL: ${problems.join('; ')}`);
  process.exit(1);
}
console.log(JSON.stringify(result));
