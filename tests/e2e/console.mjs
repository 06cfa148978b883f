// Browser end-to-end test of the web console, run by crates/cli/tests/console.rs against a real
// server whose mock LLM answers the steps below in order. Prints `ok - <step>` or
// `not ok - <step>: <error>` per step and `N passed, M failed`; exits 0 only if all passed.

import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import {
  WAIT, check, env, failedWith, finish, launch, noPageErrors, shot, step, until, watch,
} from './harness.mjs';

const BASE = env('SB_URL').replace(/\/$/, '');
const TOKEN = env('SB_TOKEN');
const LOGIN_URL = env('SB_LOGIN_URL');
const BIN = env('SB_BIN');
const WORKSPACE = env('SB_WORKSPACE');
const BUNDLE = process.env.SB_BUNDLE || 'dev';

function hostRequest() {
  const u = new URL(BASE);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: '/', headers: { Host: 'evil.example' } }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode, body }));
    });
    req.on('error', reject);
    req.setTimeout(WAIT, () => req.destroy(new Error('no answer')));
    req.end();
  });
}

function cli(...args) {
  return new Promise((resolve, reject) => {
    execFile(BIN, args, {
      timeout: WAIT,
      env: { ...process.env, SWITCHBOARD_URL: BASE, SWITCHBOARD_TOKEN: TOKEN },
    }, (err, stdout, stderr) => (err ? reject(new Error(`${BIN} ${args.join(' ')}: ${err.message} ${stderr}`)) : resolve(stdout)));
  });
}

let browser;
let page; // the main tab, for the failure screenshot
try {
  await step('a foreign Origin is refused (403 origin_not_allowed)', async () => {
    const r = await fetch(`${BASE}/v1/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, origin: 'http://evil.example', 'content-type': 'application/json' },
      body: '{}',
    });
    const body = await r.json();
    check(r.status === 403 && body.code === 'origin_not_allowed', `got ${r.status} ${JSON.stringify(body)}`);
  });

  await step('a foreign Host is refused (403 host_not_allowed)', async () => {
    const r = await hostRequest();
    check(r.status === 403 && JSON.parse(r.body).code === 'host_not_allowed', `got ${r.status} ${r.body}`);
  });

  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  ctx.setDefaultTimeout(WAIT);
  page = watch(await ctx.newPage());
  const T = (id) => page.getByTestId(id);

  await step('the sign-in screen is shown', async () => {
    await page.goto(BASE);
    await T('login-token').waitFor();
    check(await T('new-session').isHidden(), 'the app is visible before signing in');
    await shot(page, '01-sign-in.png');
  });

  await step('a wrong token is refused with an error', async () => {
    await T('login-token').fill('not-the-token');
    await T('login-submit').click();
    await T('login-error').filter({ hasText: /invalid/i }).waitFor();
    check(await T('new-session').isHidden(), 'signed in with a wrong token');
  });

  await step('sign in with the token', async () => {
    await T('login-token').fill(TOKEN);
    await T('login-submit').click();
    await T('new-session').waitFor();
  });

  await step('sign out', async () => {
    await T('logout').click();
    await T('login-token').waitFor();
    const status = await page.evaluate(() => fetch('/v1/console/me').then((r) => r.status));
    check(status === 401, `/v1/console/me answers ${status} after signing out`);
  });

  await step('sign in with the one-time link', async () => {
    await page.goto(LOGIN_URL);
    await T('new-session').waitFor();
  });

  await step('the one-time link does not work twice', async () => {
    const other = await browser.newContext();
    try {
      const p = watch(await other.newPage());
      await p.goto(LOGIN_URL, { timeout: WAIT });
      await p.getByTestId('login-token').waitFor({ timeout: WAIT });
      await p.getByTestId('login-error').filter({ hasText: /already used|expired/ }).waitFor({ timeout: WAIT });
      const status = await p.evaluate(() => fetch('/v1/console/me').then((r) => r.status));
      check(status === 401, `/v1/console/me answers ${status} in the second browser`);
    } finally {
      await other.close();
    }
  });

  let sid;
  const composer = () => T('composer');
  const assistant = (text) => T('message-assistant').filter({ hasText: text });
  const card = (text) => T('tool-card').filter({ hasText: text });
  const idle = () => page.locator('.session-view[data-run-state="idle"]').waitFor();
  async function send(text, how = 'click') {
    await idle();
    await composer().fill(text);
    if (how === 'enter') await composer().press('Enter');
    else await T('send').click();
    await T('message-user').filter({ hasText: new RegExp(`^${text}$`) }).last().waitFor();
  }

  await step('create a session with the New-session form', async () => {
    await T('new-session').click();
    await T('new-title').fill('E2E');
    await T('new-cwd').fill(WORKSPACE);
    await T('new-backend').selectOption('builtin');
    await T('new-mode').selectOption('workspace-write');
    await T('new-create').click();
    await page.waitForURL(/#\/s\/[0-9a-f-]{36}$/);
    sid = page.url().split('/').pop();
    await T('session-title').filter({ hasText: 'E2E' }).waitFor();
    await page.locator(`[data-testid="session-item"][data-session-id="${sid}"]`).filter({ hasText: 'E2E' }).waitFor();
  });

  await step('a reply streams in as Markdown', async () => {
    await send('hello', 'enter');
    const msg = assistant('world').first();
    await msg.locator('strong', { hasText: 'world' }).waitFor();
    await msg.locator('pre code', { hasText: 'fn main() {}' }).waitFor();
    const html = await msg.innerHTML();
    check(html.includes('<strong>world</strong>'), `no <strong>world</strong> in ${html}`);
    await idle();
    await shot(page, '02-session-streamed.png');
  });

  await step('allow a command from its approval card', async () => {
    await send('run it');
    const c = card('$ echo tool-output-42');
    await c.getByTestId('approval-card').waitFor();
    await shot(page, '03-approval-card.png');
    await c.getByTestId('allow').click();
    await c.getByTestId('approval-status').filter({ hasText: 'Allowed' }).waitFor();
    await c.getByTestId('tool-output').filter({ hasText: 'tool-output-42' }).waitFor();
    await assistant('The command printed tool-output-42.').waitFor();
    await idle();
  });

  await step('a reload mid-stream neither repeats nor loses text', async () => {
    await send('long');
    await assistant('part-3').waitFor();
    await page.reload();
    await assistant('part-29').waitFor();
    await idle();
    const texts = await assistant('part-0').allTextContents();
    const want = Array.from({ length: 30 }, (_, i) => `part-${i}`).join(' ');
    check(texts.length === 1, `${texts.length} messages contain part-0`);
    check(texts[0].trim().split(/\s+/).join(' ') === want, `the message reads ${JSON.stringify(texts[0])}`);
    const users = await T('message-user').allTextContents();
    check(users.join('|') === 'hello|run it|long', `user messages: ${JSON.stringify(users)}`);
  });

  await step('approve from the CLI; the card follows without a reload', async () => {
    await send('cli approve');
    const c = card('$ echo from-cli');
    await c.getByTestId('approval-card').waitFor();
    const badge = page.locator(`[data-testid="session-item"][data-session-id="${sid}"] [data-testid="pending-badge"]`);
    await badge.waitFor();

    const phone = watch(await ctx.newPage());
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(`${BASE}/#/s/${sid}`);
    const pc = phone.getByTestId('tool-card').filter({ hasText: '$ echo from-cli' });
    const allow = pc.getByTestId('allow');
    await allow.waitFor();
    await until('the phone page to settle', async () => !(await allow.isDisabled()));
    const box = await allow.boundingBox();
    check(box && box.height >= 40 && box.width >= 60, `Allow is ${box?.width}x${box?.height} px on a phone`);
    const sidebar = await phone.locator('#sidebar').boundingBox();
    check(!sidebar || sidebar.x + sidebar.width <= 1, 'the sidebar is not collapsed on a phone');
    await shot(phone, '06-phone-approval.png');
    await phone.close();

    const out = await cli('approve', sid);
    check(/accepted/.test(out), `switchboard approve printed ${JSON.stringify(out)}`);
    await until('the Allow button to be disabled', () => c.getByTestId('allow').isDisabled());
    await c.getByTestId('approval-status').filter({ hasText: 'Allowed' }).waitFor();
    await c.getByTestId('tool-output').filter({ hasText: 'from-cli' }).waitFor();
    await assistant('Approved from the CLI.').waitFor();
    await idle();
    await badge.waitFor({ state: 'detached' });
  });

  await step('deny a command with a reason', async () => {
    await send('deny me');
    const c = card('$ rm -rf /tmp/nothing-here');
    await c.getByTestId('approval-card').waitFor();
    await c.getByTestId('deny-reason').click();
    await c.getByTestId('deny-reason-text').fill('not now');
    await c.getByTestId('deny-reason-submit').click();
    await c.getByTestId('approval-status').filter({ hasText: 'Denied' }).waitFor();
    await c.getByTestId('tool-reason').filter({ hasText: 'not now' }).waitFor();
    check(await c.getByTestId('allow').isDisabled(), 'Allow is still enabled after denying');
    await assistant('Understood, not running it.').waitFor();
    await idle();
  });

  await step('model output is shown as text, never run as HTML', async () => {
    await send('xss');
    const msg = assistant('<script>window.__pwned = 1</script>');
    await msg.filter({ hasText: 'done' }).waitFor();
    await idle();
    await page.getByText('<script>window.__pwned = 1</script>').first().waitFor();
    check((await msg.textContent()).includes('<img src=x onerror="window.__pwned = 2"> done'), 'the <img> text is not shown');
    const r = await page.evaluate(() => ({
      pwned: typeof window.__pwned,
      elements: document.querySelectorAll('[data-testid="transcript"] script, [data-testid="transcript"] img').length,
    }));
    check(r.pwned === 'undefined', `window.__pwned is ${r.pwned}`);
    check(r.elements === 0, `${r.elements} script/img elements in the transcript`);
    await shot(page, '04-transcript.png');
  });

  await step('the transcript downloads as Markdown', async () => {
    const href = await T('download').getAttribute('href');
    const r = await page.evaluate((u) => fetch(u).then(async (x) => ({ status: x.status, text: await x.text() })), href);
    check(r.status === 200 && r.text.includes('tool-output-42'), `GET ${href}: ${r.status} ${r.text.slice(0, 200)}`);
  });

  await step('attach an image: a chip, then a preview in the transcript; a shared file is a card', async () => {
    // a 1x1 red PNG
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC', 'base64');
    await idle();
    await T('attach-input').setInputFiles({ name: 'red-ci.png', mimeType: 'image/png', buffer: png });
    await T('attachment-chip').filter({ hasText: 'red-ci.png' }).and(page.locator('[data-state="ready"]')).waitFor();
    await composer().fill('see attached');
    await T('send').click();
    await T('message-user').filter({ hasText: 'see attached' }).last().waitFor();
    const preview = T('file-attached').filter({ hasText: 'red-ci.png' }).getByTestId('file-preview');
    await preview.waitFor();
    await until('the preview to load', () => preview.evaluate((i) => i.complete && i.naturalWidth === 1));
    check((await T('attachment-chip').count()) === 0, 'the chip is still there after sending');
    const shared = T('file-card').filter({ hasText: 'shared.txt' });
    await shared.filter({ hasText: 'the notes' }).waitFor();
    const href = await shared.getByTestId('file-download').getAttribute('href');
    const r = await page.evaluate((u) => fetch(u).then(async (x) => ({ status: x.status, text: await x.text() })), href);
    check(r.status === 200 && r.text === 'notes from the agent\n', `GET ${href}: ${r.status} ${JSON.stringify(r.text)}`);
    await assistant('I see a red pixel.').waitFor();
    await idle();
    await shot(page, '07-attachments.png');
  });

  await step('a run that changed files shows its diff, unified and side by side; undo after confirming', async () => {
    await send('write the notes');
    await assistant('Wrote the notes.').waitFor();
    const changed = T('workspace-changed').filter({ hasText: '1 file changed, +2 −0' });
    await changed.waitFor();
    await changed.getByTestId('diff-toggle').click();
    const file = changed.getByTestId('diff-file').filter({ hasText: 'notes.md' });
    await file.waitFor();
    const added = await file.getByTestId('diff-line-add').allTextContents();
    check(added.join('') === '+# Notes\n+first line\n', `added lines: ${JSON.stringify(added)}`);
    await changed.getByTestId('diff-mode').click();
    await file.getByTestId('diff-split').filter({ hasText: 'first line' }).waitFor();
    await idle();
    await shot(page, '08-diff.png');
    check(fs.existsSync(path.join(WORKSPACE, 'notes.md')), 'notes.md was not written');
    await changed.getByTestId('undo').click();
    await changed.getByTestId('undo-confirm').click();
    await T('undone').filter({ hasText: '1 file changed' }).waitFor();
    check(!fs.existsSync(path.join(WORKSPACE, 'notes.md')), 'notes.md is still there after the undo');
    check(fs.readFileSync(path.join(WORKSPACE, 'shared.txt'), 'utf8') === 'notes from the agent\n', 'undo touched another file');
    await T('redo').click();
    await until('notes.md back after redo', () => fs.existsSync(path.join(WORKSPACE, 'notes.md')));
  });

  await step('relay: bring the bundle up', async () => {
    await T('relay-tab').click();
    await page.locator(`[data-testid="bundle"][data-bundle="${BUNDLE}"]`).click();
    await T('relay-up').click();
    await until('both members ready', async () =>
      (await page.locator('[data-testid="member"][data-ready="true"]').count()) === 2);
    await T('bundle-state').filter({ hasText: 'up' }).waitFor();
  });

  await step('relay: send from alice to builder, synchronously', async () => {
    check((await T('relay-from').inputValue()) === 'alice', 'the sender is not prefilled with alice');
    await T('relay-to').selectOption('builder');
    await T('relay-message').fill('hello builder');
    await T('relay-sync').check();
    await T('relay-send').click();
    await T('relay-outcome-row').filter({ hasText: 'builder: delivered' }).waitFor({ timeout: 45_000 });
  });

  await step('relay: look at builder shows the message', async () => {
    await page.locator('[data-testid="member"][data-member="builder"]').getByTestId('look-open').click();
    await T('look').waitFor();
    await T('look-output').filter({ hasText: 'hello builder' }).waitFor({ timeout: 10_000 });
  });

  await step('relay: the audit log shows the send', async () => {
    await page.locator('[data-testid="audit-row"][data-event="relay.send.request"]').first().waitFor();
    await shot(page, '05-relay.png');
  });

  await step('relay: bring the bundle down', async () => {
    await T('look-close').click();
    await T('relay-down').click();
    await T('bundle-state').filter({ hasText: 'down' }).waitFor();
  });

  await step('schedules: a bad expression is refused with its field', async () => {
    await T('schedules-tab').click();
    await T('schedule-form').waitFor();
    await T('schedule-kind').selectOption('every');
    await T('schedule-when').fill('soon');
    await T('schedule-prompt').fill('never');
    await T('schedule-add').click();
    const refused = T('toast').filter({ hasText: 'every' }).filter({ hasText: 'invalid_trigger' });
    await refused.waitFor();
    await refused.click(); // dismissed, so that it covers nothing
    await refused.waitFor({ state: 'detached' });
  });

  await step('schedules: add one, run it by hand; its history shows the run; pause; delete', async () => {
    await T('schedule-when').fill('1h');
    await T('schedule-name').fill('hourly hello');
    await T('schedule-prompt').fill('say hello on schedule');
    await T('schedule-add').click();
    const row = T('schedule-row').filter({ hasText: 'hourly hello' });
    await row.waitFor();
    await row.getByTestId('schedule-next').filter({ hasText: /\d/ }).waitFor();
    await T('schedule-detail').filter({ hasText: 'History of hourly hello' }).waitFor();
    await row.getByTestId('schedule-run').click();
    await T('firing').filter({ hasText: 'Scheduled hello.' }).waitFor({ timeout: 45_000 });
    const ok = await page.locator('[data-testid="firing"][data-status="succeeded"]').count();
    check(ok === 1, `${ok} succeeded firings shown`);
    await shot(page, '06-schedules.png');
    await row.getByTestId('schedule-pause').click();
    await page.locator('[data-testid="schedule-row"][data-paused="true"]').filter({ hasText: 'hourly hello' }).waitFor();
    await row.getByTestId('schedule-next').filter({ hasText: 'paused' }).waitFor();
    page.once('dialog', (d) => d.accept());
    await row.getByTestId('schedule-delete').click();
    await row.waitFor({ state: 'detached' });
    const { schedules } = await page.evaluate(() => fetch('/v1/schedules').then((r) => r.json()));
    check(schedules.length === 0, `${schedules.length} schedules left`);
  });

  await step('archive hides the session from the list; unarchive brings it back', async () => {
    await T('sessions-tab').click();
    const item = page.locator(`[data-testid="session-item"][data-session-id="${sid}"]`);
    await item.click();
    await T('session-title').filter({ hasText: 'E2E' }).waitFor();
    await T('archive').filter({ hasText: 'Archive' }).click();
    await item.waitFor({ state: 'detached' });
    await T('show-archived').check();
    await item.waitFor();
    await T('archive').filter({ hasText: 'Unarchive' }).click();
    await item.waitFor({ state: 'detached' });
    await T('show-archived').uncheck();
    await item.waitFor();
  });

  await step('delete the session after confirming', async () => {
    await T('sessions-tab').click();
    const item = page.locator(`[data-testid="session-item"][data-session-id="${sid}"]`);
    await item.click();
    await T('session-title').filter({ hasText: 'E2E' }).waitFor();
    await T('delete').click();
    await T('delete-confirm').click();
    await item.waitFor({ state: 'detached' });
    const status = await page.evaluate((id) => fetch(`/v1/sessions/${id}`).then((r) => r.status), sid);
    check(status === 404, `the deleted session answers ${status}`);
  });

  await noPageErrors();
} catch (e) {
  await failedWith(e, page, 'failure.png');
} finally {
  await finish(browser);
}
