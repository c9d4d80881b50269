#!/usr/bin/env node
// Opens an HTML fragment that a notebook would show (the Python package's `_repr_html_` of a
// trace, a diff report or the inline page) from file:// in Debian's headless Chromium, and fails
// unless it loads with no console error or warning, no uncaught error and no request beyond the
// file itself. An inline page (an <iframe srcdoc>) must also draw: its document gets the page's
// data and at least one SVG from the page's script.
//
//   node check_html.mjs FILE.html
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [file] = process.argv.slice(2);
if (!file) { console.error('usage: node check_html.mjs FILE.html'); process.exit(2); }
const url = pathToFileURL(resolve(file)).href;
const { chromium } = await import('playwright-core');
const profile = mkdtempSync(join(tmpdir(), 'check-html-'));
const problems = [];
const requests = [];
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
  offline: true,
});
try {
  context.on('request', (req) => requests.push(req.url()));
  const page = context.pages()[0] || await context.newPage();
  page.on('console', (msg) => {
    if (['error', 'warning', 'assert'].includes(msg.type())) problems.push(`console ${msg.type()}: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`uncaught error: ${err.message}`));
  await page.goto(url, { waitUntil: 'load', timeout: 60000 });
  const frames = page.frames().filter((f) => f !== page.mainFrame());
  for (const frame of frames) {
    await frame.waitForLoadState('load');
    await frame.waitForFunction(() => document.querySelectorAll('svg').length > 0, null, { timeout: 30000 })
      .catch(() => problems.push('the inline page drew no SVG'));
    const data = await frame.evaluate(() => !!document.getElementById('bert-trace-data'));
    if (!data) problems.push("the inline page has no data (#bert-trace-data)");
  }
  const tables = await page.evaluate(() => document.querySelectorAll('table').length);
  if (frames.length === 0 && tables === 0) problems.push('no table and no inline page');
  const extra = requests.filter((r) => r !== url && !r.startsWith('about:') && !r.startsWith('data:'));
  if (extra.length) problems.push(`requests beyond the file: ${extra.join(', ')}`);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
if (problems.length) {
  console.error(`check_html: FAIL: ${file}\n  ${problems.join('\n  ')}`);
  process.exit(1);
}
console.log(`check_html: ok: ${file}`);
