#!/usr/bin/env node
// How long a `bert-trace view` page takes to open in Debian's headless Chromium, for
// BENCHMARKS.md (not a test): from the navigation's start to the page's own `ready` (every view
// drawn once), and the page's own parse and render times.
//
//   node time_page.mjs URL_OR_FILE [RUNS]
//
// A file is opened by its file:// URL; a served page by its http:// URL (with its token). Each
// run is a fresh browser context. Prints one JSON line: each run's milliseconds, and the median.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [where, runsArg] = process.argv.slice(2);
if (!where) { console.error('usage: node time_page.mjs URL_OR_FILE [RUNS]'); process.exit(2); }
const url = /^https?:\/\//.test(where) ? where : pathToFileURL(resolve(where)).href;
const runs = Number(runsArg || 3);
const { chromium } = await import('playwright-core');
const results = [];
for (let i = 0; i < runs; i++) {
  const dir = mkdtempSync(join(tmpdir(), 'time-page-'));
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium', headless: true, viewport: { width: 1400, height: 900 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  const page = context.pages()[0] || await context.newPage();
  const start = Date.now();
  await page.goto(url, { waitUntil: 'load', timeout: 120000 });
  const loaded = Date.now() - start;
  const outcome = await page.evaluate(() => window.bertTraceView.ready);
  const ready = Date.now() - start;
  const own = await page.evaluate(() => ({ parse: window.bertTraceView.timings.parse, render: window.bertTraceView.timings.render }));
  results.push({ loaded, ready, parse: Math.round(own.parse), render: Math.round(own.render), outcome });
  await context.close();
  rmSync(dir, { recursive: true, force: true });
}
const readies = results.map((r) => r.ready).sort((a, b) => a - b);
console.log(JSON.stringify({ url: url.replace(/token=[0-9a-f]+/, 'token=…'), runs: results, median_ready_ms: readies[Math.floor(readies.length / 2)] }));
