// Browser end-to-end test of the console as a daily tool, run by
// crates/cli/tests/console_daily.rs: the approvals inbox, notifications, the service worker
// and an offline start, the connection banner, the home composer, session settings, chat
// basics, the Channels page with Telegram pairing, the relay's empty state, the phone layout.
// What only the Rust side can do (kill and restart the server, a Telegram user writing) is
// asked for with `@@ {json}` lines on stdout, answered by one JSON line on stdin.
// Prints `ok - <step>` / `not ok - <step>: <error>` and `N passed, M failed`.

import {
  WAIT, check, env, failedWith, finish, launch, noOverflow, noPageErrors, rust, shot, sleep, step, until, watch,
} from './harness.mjs';

const BASE = env('SB_URL').replace(/\/$/, '');
const TOKEN = env('SB_TOKEN');
const WORKSPACE = env('SB_WORKSPACE');

/** The API with the token (what another client, a CLI or a chat, would do). */
async function call(method, p, body) {
  const r = await fetch(`${BASE}${p}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  if (!r.ok) throw Object.assign(new Error(`${method} ${p}: ${r.status} ${text}`), { status: r.status, data });
  return data;
}

const session = (title) => call('POST', '/v1/sessions', { title, cwd: WORKSPACE, permission_mode: 'workspace-write' });
const say = (id, content) => call('POST', `/v1/sessions/${id}/messages`, { message: { role: 'user', content }, type: 'message' });
/** Resolves once the session has no active run: a message sent before that is refused with 409. */
const ended = (id) => until(`session ${id}'s run to end`, async () => !(await call('GET', `/v1/sessions/${id}`)).active_run_id);
const waitingOn = async (id) => (await call('GET', `/v1/sessions/${id}/tools/pending`)).tool_calls.length > 0;
async function events(id) {
  const r = await fetch(`${BASE}/v1/sessions/${id}/events?after=0`, { headers: { authorization: `Bearer ${TOKEN}` }, signal: AbortSignal.timeout(1500) })
    .catch(() => null);
  if (!r) return '';
  let text = '';
  try {
    for await (const chunk of r.body) text += Buffer.from(chunk).toString();
  } catch { /* the timeout ends the read */ }
  return text;
}

let browser;
let page;
try {
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  await ctx.grantPermissions(['notifications', 'clipboard-read', 'clipboard-write'], { origin: BASE });
  ctx.setDefaultTimeout(WAIT);
  page = watch(await ctx.newPage());
  const T = (id) => page.getByTestId(id);
  const assistant = (text) => T('message-assistant').filter({ hasText: text });
  const idle = () => page.locator('.session-view[data-run-state="idle"]').waitFor();

  await step('sign in', async () => {
    await page.goto(BASE);
    await T('login-token').fill(TOKEN);
    await T('login-submit').click();
    await T('inbox-tab').waitFor();
  });

  let home;
  await step('the home screen starts a session by typing, with the defaults shown', async () => {
    await T('home-composer').waitFor();
    check((await T('home-cwd').inputValue()) === WORKSPACE, `workspace shown: ${await T('home-cwd').inputValue()}`);
    check((await T('home-mode').inputValue()) === 'workspace-write', 'the default mode is not shown');
    check((await T('home-backend').inputValue()) === 'builtin', 'the default backend is not shown');
    await T('home-composer').fill('please start here');
    await shot(page, '12-home.png');
    await T('home-composer').press('Enter');
    await page.waitForURL(/#\/s\/[0-9a-f-]{36}$/);
    home = page.url().split('/').pop();
    await T('session-title').filter({ hasText: 'please start here' }).waitFor();
    await T('message-user').filter({ hasText: 'please start here' }).waitFor();
    await assistant('Started from the home screen.').waitFor();
    await idle();
    const s = await call('GET', `/v1/sessions/${home}`);
    check(s.session.cwd === WORKSPACE && s.config.permission_mode === 'workspace-write', JSON.stringify(s));
  });

  await step('session settings: refused changes show their code, saved ones apply; toasts never cover the composer', async () => {
    await T('settings').click();
    await T('settings-panel').waitFor();
    await T('set-title').fill('   ');
    await T('set-save').click();
    await T('set-error').filter({ hasText: 'validation_failed' }).waitFor();
    await T('set-title').fill('Renamed in settings');
    await T('set-mode').selectOption('read-only');
    await T('set-auto').selectOption('these tools');
    await T('set-auto-tools').fill('view,  fetch');
    await T('set-network').selectOption('allowlist');
    await T('set-network-hosts').fill('pypi.org, *.github.com');
    await T('set-save').click();
    await T('settings-panel').waitFor({ state: 'hidden' });
    await T('session-title').filter({ hasText: 'Renamed in settings' }).waitFor();
    // The session says how its commands are confined (this machine has Landlock).
    await T('session-info').filter({ hasText: 'sandboxed, network: pypi.org, *.github.com' }).waitFor();
    const { config, sandbox } = await call('GET', `/v1/sessions/${home}`);
    check(config.permission_mode === 'read-only', `mode ${config.permission_mode}`);
    check(sandbox?.confined === true && sandbox.network === 'allowlist', `sandbox ${JSON.stringify(sandbox)}`);
    check(JSON.stringify(config.auto_approve) === '["view","fetch"]', `auto_approve ${JSON.stringify(config.auto_approve)}`);
    const toast = T('toast').filter({ hasText: 'Settings saved' });
    await toast.waitFor();
    const [t, c, send] = await Promise.all([toast.boundingBox(), T('composer').boundingBox(), T('send').boundingBox()]);
    const overlaps = (a, b) => a && b && a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
    check(!overlaps(t, c) && !overlaps(t, send), `the toast ${JSON.stringify(t)} covers the composer ${JSON.stringify(c)} or Send ${JSON.stringify(send)}`);
    // The API answers the same codes to any client.
    for (const [body, code] of [[{ permission_mode: 'yolo' }, 'validation_failed'], [{ auto_approve: [' view'] }, 'unprocessable_entity'], [{ title: 'x'.repeat(201) }, 'validation_failed']]) {
      const err = await call('PATCH', `/v1/sessions/${home}`, body).then(() => null, (e) => e);
      check(err && err.status === (code === 'unprocessable_entity' ? 422 : 400) && err.data.code === code, `PATCH ${JSON.stringify(body)}: ${err?.status} ${JSON.stringify(err?.data)}`);
    }
    const missing = await call('PATCH', '/v1/sessions/00000000-0000-7000-8000-000000000000', { title: 'x' }).then(() => null, (e) => e);
    check(missing?.status === 404 && missing.data.code === 'session_not_found', `missing session: ${JSON.stringify(missing?.data)}`);
    await call('PATCH', `/v1/sessions/${home}`, { permission_mode: 'workspace-write', auto_approve: 'none' });
  });

  let a;
  let b;
  await step('an approval raised in session A is answered from the inbox while session B is open', async () => {
    a = await session('Session A');
    b = await session('Session B');
    await page.goto(`${BASE}/#/s/${b.id}`);
    await T('session-title').filter({ hasText: 'Session B' }).waitFor();
    await say(a.id, 'approve-me-A please');
    await until('session A to wait', () => waitingOn(a.id));
    await T('inbox-badge').filter({ hasText: /^1$/ }).waitFor();
    const inbox = watch(await ctx.newPage());
    await inbox.goto(`${BASE}/#/inbox`);
    const item = inbox.locator(`[data-testid="inbox-item"][data-session-id="${a.id}"]`);
    await item.filter({ hasText: '$ echo inbox-A' }).waitFor();
    await item.getByTestId('inbox-session').filter({ hasText: 'Session A' }).waitFor();
    await item.getByTestId('inbox-left').filter({ hasText: /rejected unanswered in \d+ min/ }).waitFor();
    await item.getByTestId('inbox-age').filter({ hasText: /waiting \d+ s/ }).waitFor();
    await item.filter({ hasText: 'built-in' }).waitFor();
    await shot(inbox, '10-inbox.png');
    await item.getByTestId('allow').click();
    await item.waitFor({ state: 'detached' });
    await inbox.getByTestId('inbox-empty').waitFor();
    await T('inbox-badge').waitFor({ state: 'hidden' });
    check(page.url().endsWith(`#/s/${b.id}`), 'session B is no longer open');
    await until('A to run the tool', async () => (await events(a.id)).includes('inbox-A'));
    await ended(a.id);
    // Deny with a reason, from the inbox.
    await say(a.id, 'approve-me-A2 again');
    await item.filter({ hasText: '$ echo inbox-A2' }).waitFor();
    await item.getByTestId('deny-reason').click();
    await item.getByTestId('deny-reason-text').fill('not from the inbox');
    await item.getByTestId('deny-reason-submit').click();
    await item.waitFor({ state: 'detached' });
    await until('the reason in A\'s log', async () => (await events(a.id)).includes('not from the inbox'));
    await inbox.close();
  });

  await step('a notification fires when an approval arrives while the page is hidden', async () => {
    await T('inbox-tab').click();
    await T('inbox-list').waitFor();
    await T('notify-toggle').check();
    await until('the setting to be kept', () => page.evaluate(() => localStorage.getItem('switchboard.notify') === 'on'));
    await page.evaluate(() => {
      window.__notes = [];
      const Real = window.Notification;
      window.Notification = class extends Real {
        constructor(title, options) {
          super(title, options);
          window.__notes.push({ title, body: options?.body, via: 'page' });
        }
      };
      const show = ServiceWorkerRegistration.prototype.showNotification;
      ServiceWorkerRegistration.prototype.showNotification = function (title, options) {
        window.__notes.push({ title, body: options?.body, via: 'worker' });
        return show.call(this, title, options);
      };
      Object.defineProperty(document, 'hidden', { configurable: true, get: () => true });
    });
    await say(b.id, 'approve-me-B now');
    const notes = await until('a notification', async () => {
      const n = await page.evaluate(() => window.__notes);
      return n.length ? n : null;
    });
    check(notes.length === 1 && notes[0].title.includes('Session B') && notes[0].body.includes('run_command'), JSON.stringify(notes));
    await page.evaluate(() => { delete document.hidden; });
    // Visible again: no notification for the next one.
    const item = page.locator(`[data-testid="inbox-item"][data-session-id="${b.id}"]`);
    await item.getByTestId('allow').click();
    await item.waitFor({ state: 'detached' });
    await ended(b.id);
    await say(b.id, 'approve-me-B2 now');
    await item.waitFor();
    check((await page.evaluate(() => window.__notes.length)) === 1, 'notified while the page was visible');
    await item.getByTestId('deny').click();
    await item.waitFor({ state: 'detached' });
  });

  await step('the manifest and the service worker are served; only the console\'s own files are cached', async () => {
    const r = await page.evaluate(async () => {
      const res = await fetch(document.querySelector('link[rel=manifest]').href);
      return { status: res.status, type: res.headers.get('content-type'), body: await res.json() };
    });
    check(r.status === 200 && /manifest\+json/.test(r.type), `manifest ${r.status} ${r.type}`);
    check(r.body.name === 'Switchboard' && r.body.display === 'standalone' && r.body.icons.length > 0, JSON.stringify(r.body));
    const icon = await page.evaluate((u) => fetch(u).then((x) => x.status), r.body.icons[0].src);
    check(icon === 200, `icon ${icon}`);
    await page.evaluate(() => navigator.serviceWorker.ready);
    await page.reload();
    await T('inbox-tab').waitFor();
    await until('the page to be controlled by the worker', () => page.evaluate(() => !!navigator.serviceWorker.controller));
    const cached = await until('the cache to fill', async () => {
      const urls = await page.evaluate(async () => {
        const out = [];
        for (const k of await caches.keys()) for (const req of await (await caches.open(k)).keys()) out.push(new URL(req.url).pathname);
        return out;
      });
      return urls.includes('/assets/app.js') && urls.includes('/') ? urls : null;
    });
    check(!cached.some((u) => u.startsWith('/v1')), `API answers cached: ${cached}`);
  });

  await step('the banner shows while the server is down and clears when it is back', async () => {
    await T('sessions-tab').click();
    await page.locator(`[data-testid="session-item"][data-session-id="${home}"]`).click();
    await idle();
    await rust({ cmd: 'kill' });
    await page.locator('[data-testid="conn-banner"][data-state="down"]').filter({ hasText: 'reconnecting' }).waitFor();
    check(await page.evaluate(() => document.body.classList.contains('stale')), 'badges and run states are not marked stale');
    await rust({ cmd: 'restart' });
    await page.locator('[data-testid="conn-banner"][data-state="back"]').waitFor({ timeout: 30_000 });
    await T('conn-banner').waitFor({ state: 'hidden' });
    check(!(await page.evaluate(() => document.body.classList.contains('stale'))), 'still marked stale');
    // The session's stream came back too.
    await T('composer').fill('after the restart');
    await T('send').click();
    await assistant('Started from the home screen.').nth(1).waitFor();
    await idle();
  });

  await step('opened without the server, the console says it is unreachable (from the worker\'s cache)', async () => {
    await rust({ cmd: 'kill' });
    await page.reload();
    await T('unreachable').filter({ hasText: 'Server unreachable' }).waitFor();
    check(await T('inbox-tab').isHidden(), 'the app shows without a server');
    await rust({ cmd: 'restart' });
    await T('unreachable-retry').click();
    await T('inbox-tab').waitFor();
    await T('unreachable').waitFor({ state: 'hidden' });
  });

  await step('replies show tables and highlighted code that scrolls, with a working copy button; items have times', async () => {
    await page.goto(`${BASE}/#/s/${home}`);
    await idle();
    await T('composer').fill('show code');
    await T('send').click();
    const msg = assistant('Runs').last();
    await msg.locator('table th', { hasText: 'Tool' }).waitFor();
    await msg.locator('td strong', { hasText: '12' }).waitFor();
    check((await msg.locator('th.align-right').count()) === 1, 'the right-aligned column has no class');
    const pre = msg.locator('pre').first();
    await pre.locator('.tok-kw', { hasText: 'fn' }).first().waitFor();
    const style = await pre.evaluate((el) => ({ ws: getComputedStyle(el).whiteSpace, scrolls: el.scrollWidth > el.clientWidth }));
    check(style.ws === 'pre' && style.scrolls, `the code block wraps: ${JSON.stringify(style)}`);
    await msg.getByTestId('copy-code').click();
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    check(copied.startsWith('fn main() { let answer = 42;') && copied.endsWith('any screen"); }'), `copied ${JSON.stringify(copied)}`);
    await idle();
    const stamps = await T('stamp').count();
    check(stamps >= 4, `${stamps} timestamps`);
  });

  await step('a failed run offers Retry, which sends the message again', async () => {
    await T('composer').fill('fail once please');
    await T('send').click();
    const err = T('run-error').last();
    await err.waitFor();
    await idle();
    await err.getByTestId('retry').click();
    await assistant('Recovered on the retry.').waitFor();
    await idle();
  });

  await step('an answered approval card folds to one line; "always allow" lets the tool run unasked from then on', async () => {
    await T('composer').fill('approve-me-C card');
    await T('send').click();
    const c = T('tool-card').filter({ hasText: '$ echo inbox-C' });
    await c.getByTestId('approval-card').waitFor();
    await c.getByTestId('allow').click();
    await c.getByTestId('approval-status').filter({ hasText: /^Allowed by you · \d+ s$/ }).waitFor();
    await c.getByTestId('allow').waitFor({ state: 'hidden' });
    const h = await c.getByTestId('approval-card').boundingBox();
    check(h.height < 40, `the answered card is ${h.height} px high`);
    await idle();
    // Answered somewhere else, by someone who said who: the card names them.
    await T('composer').fill('approve-me-C2 card');
    await T('send').click();
    const c2 = T('tool-card').filter({ hasText: '$ echo inbox-C2' });
    await c2.getByTestId('approval-card').waitFor();
    const { run_id: c2run, tool_calls: c2calls } = await call('GET', `/v1/sessions/${home}/tools/pending`);
    await call('POST', `/v1/sessions/${home}/tools/decisions`, {
      run_id: c2run, decisions: { [c2calls[0].id]: { action: 'accept', by: 'Alice (telegram)' } },
    });
    await c2.getByTestId('approval-status').filter({ hasText: /^Allowed by Alice \(telegram\) · \d+ s$/ }).waitFor();
    await idle();
    await T('composer').fill('approve-me-D card');
    await T('send').click();
    const d = T('tool-card').filter({ hasText: '$ echo inbox-D' });
    await d.getByTestId('always-allow').click();
    await d.getByTestId('tool-output').filter({ hasText: 'inbox-D' }).waitFor();
    await idle();
    const { config } = await call('GET', `/v1/sessions/${home}`);
    check(JSON.stringify(config.auto_approve) === '["run_command"]', `auto_approve ${JSON.stringify(config.auto_approve)}`);
    await T('composer').fill('approve-me-E card');
    await T('send').click();
    const e = T('tool-card').filter({ hasText: '$ echo inbox-E' });
    await e.getByTestId('tool-output').filter({ hasText: 'inbox-E' }).waitFor();
    check((await e.getByTestId('approval-card').count()) === 0, 'asked again after "always allow"');
    await idle();
  });

  await step('Channels: a pairing request from a Telegram user is approved here, and the user can chat', async () => {
    await rust({ cmd: 'dm', user: 7, name: 'Stranger', text: 'hi bot' });
    await T('channels-tab').click();
    const tg = page.locator('[data-testid="channel"][data-channel="telegram"]');
    await tg.filter({ hasText: 'connected' }).waitFor();
    const req = T('pairing-request').filter({ hasText: 'Stranger' });
    await req.waitFor();
    await shot(page, '11-channels.png');
    await req.getByTestId('pairing-approve').click();
    await req.waitFor({ state: 'detached' });
    await rust({ cmd: 'dm', user: 7, name: 'Stranger', text: 'hello from telegram' });
    await until('the agent\'s reply in the chat', async () =>
      (await rust({ cmd: 'bot_messages', chat: 7 })).texts.some((t) => t.includes('Hi, Telegram user.')), 30_000);
    const conv = T('conversation').filter({ hasText: '7' }).first();
    await conv.waitFor();
    await conv.getByTestId('conversation-activity').filter({ hasText: /\d/ }).waitFor();
    await conv.getByTestId('send-test').click();
    await until('the test message in the chat', async () =>
      (await rust({ cmd: 'bot_messages', chat: 7 })).texts.some((t) => t.includes('Test message from the Switchboard console.')));
  });

  await step('Channels: the delivery ledger shows what became of each message, and a failed one is retried', async () => {
    await rust({ cmd: 'dm', user: 7, name: 'Stranger', text: 'break in chat please' });
    await until('the failure notice in the chat', async () =>
      (await rust({ cmd: 'bot_messages', chat: 7 })).texts.some((t) => t.startsWith('⚠️ The run failed')), 30_000);
    const conv = T('conversation').filter({ hasText: '7' }).first();
    await conv.getByTestId('conversation-messages').click();
    const ledger = T('ledger');
    await ledger.locator('h2', { hasText: 'Deliveries of telegram:' }).waitFor();
    // Before pairing: refused; after: answered with the reply's id; the broken one failed.
    await ledger.locator('[data-testid="ledger-entry"][data-status="ignored"]', { hasText: 'hi bot' })
      .getByTestId('ledger-why').filter({ hasText: 'not allowed' }).waitFor();
    await ledger.locator('[data-testid="ledger-entry"][data-status="answered"]', { hasText: 'hello from telegram' })
      .locator('[data-testid="ledger-posted"][data-kind="reply"]').filter({ hasText: /^reply #\d+/ }).waitFor();
    const failed = ledger.locator('[data-testid="ledger-entry"][data-status="failed"]', { hasText: 'break in chat please' });
    await failed.getByTestId('ledger-why').filter({ hasText: 'the run failed' }).waitFor();
    check((await ledger.getByTestId('ledger-entry').count()) >= 3, 'the conversation\'s entries');
    await shot(page, '13-ledger.png');
    const id = await failed.getAttribute('data-id');
    await failed.getByTestId('ledger-retry').click();
    await until('the retried reply in the chat', async () =>
      (await rust({ cmd: 'bot_messages', chat: 7 })).texts.some((t) => t.includes('Fixed on the retry.')), 30_000);
    const redone = ledger.locator(`[data-testid="ledger-entry"][data-id="${id}"][data-status="answered"]`);
    await redone.getByTestId('ledger-out').filter({ hasText: 'sent to the agent 2 times' }).waitFor();
    check((await redone.getByTestId('ledger-retry').count()) === 0, 'an answered message offers a retry');
    // Filtered by status across every chat.
    await ledger.getByTestId('ledger-every-chat').click();
    await ledger.locator('[data-testid="ledger-list"][data-chat="any"]').waitFor();
    await ledger.getByTestId('ledger-status').selectOption('ignored');
    await ledger.locator('[data-testid="ledger-list"][data-status="ignored"]').waitFor();
    await ledger.locator('[data-testid="ledger-entry"][data-status="ignored"]').first().waitFor();
    check((await ledger.locator('[data-testid="ledger-entry"]:not([data-status="ignored"])').count()) === 0, 'only ignored entries');
  });

  await step('Channels: a refused request is gone and that user is not let in', async () => {
    await rust({ cmd: 'dm', user: 8, name: 'Intruder', text: 'let me in' });
    const req = T('pairing-request').filter({ hasText: 'Intruder' });
    await req.waitFor();
    await req.getByTestId('pairing-refuse').click();
    await req.waitFor({ state: 'detached' });
    const pending = await call('GET', '/v1/gateway/pairing');
    check(!pending.requests.some((r) => JSON.stringify(r).includes('Intruder')), JSON.stringify(pending));
  });

  await step('Channels: a failing channel shows its state and reason, then connected again', async () => {
    await rust({ cmd: 'outage', n: 4 });
    const tg = page.locator('[data-testid="channel"][data-channel="telegram"]');
    await tg.locator('[data-testid="channel-state"]', { hasText: /reconnecting|failing/ }).waitFor({ timeout: 45_000 });
    await tg.getByTestId('channel-reason').filter({ hasText: /\S/ }).waitFor();
    check(!(await tg.textContent()).includes('TOKEN'), 'the reason shows a token');
    await tg.locator('[data-testid="channel-state"]', { hasText: 'connected' }).waitFor({ timeout: 60_000 });
  });

  await step('the relay page without bundles says how to add one, with a copyable example', async () => {
    await T('relay-tab').click();
    const help = T('relay-empty');
    await help.filter({ hasText: 'No bundles yet' }).waitFor();
    await help.getByTestId('bundle-example').filter({ hasText: 'format-version = 1' }).waitFor();
    await help.getByTestId('copy-code').click();
    const copied = await page.evaluate(() => navigator.clipboard.readText());
    check(copied.includes('[[members]]') && copied.includes('[members.tmux]'), `copied ${JSON.stringify(copied)}`);
  });

  await step('the phone layout has no horizontal overflow; the drawer closes on an outside tap', async () => {
    // An inbox with an item whose preview is long and unbreakable.
    const wide = await session('Wide');
    await say(wide.id, `approve-me-${'W'.repeat(300)} now`);
    await until('the wide approval', () => waitingOn(wide.id));
    const phone = watch(await ctx.newPage());
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(`${BASE}/#/inbox`);
    await phone.locator(`[data-testid="inbox-item"][data-session-id="${wide.id}"]`).waitFor();
    check(await noOverflow(phone), 'the inbox with a long preview overflows sideways on a phone');
    for (const hash of ['#/', '#/inbox', '#/channels', `#/s/${home}`, '#/relay', '#/schedules']) {
      await phone.goto(`${BASE}/${hash}`);
      await phone.getByTestId('inbox-tab').waitFor();
      await sleep(300);
      check(await noOverflow(phone), `${hash} overflows sideways on a phone`);
    }
    await phone.goto(`${BASE}/#/s/${home}`); // the drawer is the sessions' sidebar
    await phone.getByTestId('composer').waitFor();
    await phone.getByTestId('menu').click();
    await until('the drawer to open', () => phone.evaluate(() => document.body.classList.contains('drawer')));
    await phone.mouse.click(370, 500); // on the transcript, outside the drawer
    await until('the drawer to close', () => phone.evaluate(() => !document.body.classList.contains('drawer')));
    await phone.close();
  });

  await noPageErrors();
} catch (e) {
  await failedWith(e, page, 'daily-failure.png');
} finally {
  await finish(browser);
}
