// What the browser tests (console.mjs, daily.mjs, settings.mjs) share: environment, steps and
// their report, polling, screenshots, page-error watching, launching Chromium, and the ending.
// A script prints `ok - <step>` / `not ok - <step>: <error>` per step and `N passed, M
// failed`, and exits 0 only if every step passed; the Rust test reads that.

import path from 'node:path';
import readline from 'node:readline';
import { chromium } from 'playwright-core';

/** Per wait: the machine may be a loaded 2-core box. */
export const WAIT = 20_000;

/** A required environment variable; a missing one fails the script at once. */
export function env(name) {
  if (!process.env[name]) {
    console.log(`not ok - environment: ${name} is not set`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
  return process.env[name];
}

const SHOTS = env('SB_SCREENSHOTS');
const CHROMIUM = env('CHROMIUM');

let passed = 0;
let failed = 0;
/** Thrown by a failed step: the script stops there (later steps depend on earlier ones). */
export class Stop extends Error {}

export async function step(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok - ${name}`);
  } catch (e) {
    failed++;
    const msg = String(e?.message ?? e);
    console.log(`not ok - ${name}: ${msg.split('\n').find((l) => l.trim()) ?? msg}`);
    console.error(`--- ${name}\n${e?.stack ?? msg}`);
    throw new Stop();
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function check(cond, message) {
  if (!cond) throw new Error(message);
}

/** Polls `fn` until it returns something truthy. */
export async function until(what, fn, timeout = WAIT) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await sleep(200);
  }
  throw new Error(`timed out after ${timeout / 1000} s waiting for ${what}${last ? ` (${last.message.split('\n')[0]})` : ''}`);
}

/** A full-page screenshot, taken from the top so that sticky bars sit where they belong. */
export async function shot(page, name) {
  await page.evaluate(() => scrollTo(0, 0));
  await page.screenshot({ path: path.join(SHOTS, name), fullPage: true });
}

const pageErrors = [];
/** Records the page's uncaught errors and CSP violations (see `noPageErrors`). */
export function watch(page) {
  page.on('pageerror', (e) => pageErrors.push(`uncaught: ${e.message}`));
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) pageErrors.push(`CSP: ${m.text()}`);
  });
  return page;
}

/** The last step of a script: no watched page had a script error or a CSP violation. */
export const noPageErrors = () => step('no script errors or CSP violations', async () => {
  check(pageErrors.length === 0, pageErrors.join('; '));
});

/** True when the page does not scroll sideways. */
export const noOverflow = (page) => page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);

export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    headless: true,
  });
}

/** In the script's `catch`: reports an error that was not a failed step, and screenshots `page`. */
export async function failedWith(e, page, shotName) {
  if (!(e instanceof Stop)) {
    failed++;
    console.log(`not ok - unexpected error: ${String(e?.message ?? e).split('\n')[0]}`);
    console.error(e?.stack ?? e);
  }
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join('\n')}`);
  await page?.screenshot({ path: path.join(SHOTS, shotName), fullPage: true }).catch(() => {});
}

/** In the script's `finally`: closes the browser, prints the tally, exits. */
export async function finish(browser) {
  await browser?.close().catch(() => {});
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed === 0 && passed > 0 ? 0 : 1);
}

// ---- the Rust side: `@@ {json}` on stdout, one JSON line answered on stdin ----
const answers = [];
const waiting = [];
let listening = false;
/** Asks the Rust test for what only it can do (kill the server, a chat user writing …). */
export function rust(cmd) {
  if (!listening) {
    listening = true;
    readline.createInterface({ input: process.stdin }).on('line', (line) => {
      const w = waiting.shift();
      if (w) w(JSON.parse(line));
      else answers.push(JSON.parse(line));
    });
  }
  process.stdout.write(`@@ ${JSON.stringify(cmd)}\n`);
  return new Promise((resolve) => {
    if (answers.length) resolve(answers.shift());
    else waiting.push(resolve);
  });
}
