// Browser end-to-end test of the console's Settings page, run by
// crates/cli/tests/console_settings.rs against a server started from a configuration file
// with one model and no chat channel: the model changed and used by the next session, a
// Telegram bot connected (a wrong token refused first) and answering a DM — all without a
// restart —, what an environment variable sets shown and locked, the home screen's hint
// when no model is configured gone once one is.
// What only the Rust side can do is asked for with `@@ {json}` lines on stdout, answered by
// one JSON line on stdin: `dm` (a Telegram user writes), `last_model` (the
// model the mock LLM was last asked for), `secrets` (the secrets file's mode and whether it
// holds the Telegram token).
// Prints `ok - <step>` / `not ok - <step>: <error>` and `N passed, M failed`.

import {
  WAIT, check, env, failedWith, finish, launch, noOverflow, noPageErrors, rust, shot, sleep, step, until, watch,
} from './harness.mjs';

const BASE = env('SB_URL').replace(/\/$/, '');
const TOKEN = env('SB_TOKEN');
const TG_TOKEN = env('SB_TELEGRAM_TOKEN');
const BOT = env('SB_TELEGRAM_BOT');

let browser;
let page;
try {
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  ctx.setDefaultTimeout(WAIT);
  page = watch(await ctx.newPage());
  const T = (id) => page.getByTestId(id);

  await step('sign in; the Settings page shows the provider and model in use, and no key', async () => {
    await page.goto(BASE);
    await T('login-token').fill(TOKEN);
    await T('login-submit').click();
    await T('settings-tab').click();
    await T('settings-provider-now').filter({ hasText: 'first-model' }).waitFor();
    check((await T('settings-provider-now').textContent()).includes('no key'), 'a key is said to be set');
    check((await T('settings-model').inputValue()) === 'first-model', 'the model field');
    await T('settings-models-note').filter({ hasText: '1 model(s) listed.' }).waitFor();
  });

  await step('what an environment variable sets is shown and cannot be changed here', async () => {
    check(await T('settings-mode').isDisabled(), 'the permission mode can be changed');
    await page.locator('[data-testid="env-note"][data-setting="default_permission_mode"]')
      .filter({ hasText: 'SWITCHBOARD_PERMISSION_MODE' }).waitFor();
  });

  await step('the model changed here is the one the next session uses, without a restart', async () => {
    await T('settings-model').fill('second-model');
    await T('settings-provider-save').click();
    await T('settings-provider-now').filter({ hasText: 'second-model' }).waitFor();
    await T('sessions-tab').click();
    await T('home-composer').fill('which model are you?');
    await T('home-composer').press('Enter');
    await page.waitForURL(/#\/s\/[0-9a-f-]{36}$/);
    await T('message-assistant').filter({ hasText: 'hi from the mock' }).waitFor();
    check((await rust({ cmd: 'last_model' })).model === 'second-model', 'the run did not use the new model');
  });

  await step('a Telegram token the platform refuses is an error, and nothing is connected', async () => {
    await T('settings-tab').click();
    const tg = page.locator('[data-testid="settings-channel"][data-channel="telegram"]');
    await tg.waitFor();
    await T('settings-telegram-token').fill('42:WRONG-TOKEN');
    await T('settings-telegram-connect').click();
    await T('toast').filter({ hasText: 'check_failed' }).waitFor();
    check((await tg.getAttribute('data-configured')) === 'false', 'connected with a wrong token');
    check(!(await page.content()).includes('WRONG-TOKEN') || (await T('settings-telegram-token').inputValue()) === '42:WRONG-TOKEN',
      'the token shows in the page outside its field');
  });

  await step('Telegram connected here: the bot and its link are shown, the token is stored 0600', async () => {
    await T('settings-telegram-token').fill(TG_TOKEN);
    await T('settings-telegram-connect').click();
    const tg = page.locator('[data-testid="settings-channel"][data-channel="telegram"][data-configured="true"]');
    await tg.waitFor();
    await T('settings-telegram-result').filter({ hasText: BOT }).waitFor();
    check((await T('settings-telegram-link').getAttribute('href')) === `https://t.me/${BOT}`, 'the DM link');
    check(!(await page.content()).includes(TG_TOKEN), 'the token is in the page');
    const s = await rust({ cmd: 'secrets' });
    check(s.mode === 0o600 && s.has_token, `secrets file: ${JSON.stringify(s)}`);
    for (const t of await T('toast').all()) await t.click().catch(() => {});
    await shot(page, '13-settings.png');
  });

  await step('the new channel runs without a restart: a DM asks to pair, shown on the Channels page', async () => {
    await rust({ cmd: 'dm', user: 7, name: 'Newcomer', text: 'hello bot' });
    await T('channels-tab').click();
    await page.locator('[data-testid="channel"][data-channel="telegram"]').filter({ hasText: 'connected' }).waitFor();
    await T('pairing-request').filter({ hasText: 'Newcomer' }).waitFor();
  });

  await step('Test asks the platform again; Disconnect stops the channel', async () => {
    await T('settings-tab').click();
    await T('settings-telegram-test').click();
    await T('settings-telegram-result').filter({ hasText: BOT }).waitFor();
    page.once('dialog', (d) => d.accept());
    await T('settings-telegram-remove').click();
    await page.locator('[data-testid="settings-channel"][data-channel="telegram"][data-configured="false"]').waitFor();
    await T('channels-tab').click();
    await T('gateway-off').waitFor();
  });

  await step('the Settings page fits a phone', async () => {
    const phone = watch(await ctx.newPage());
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(`${BASE}/#/settings`);
    await phone.getByTestId('settings-provider-now').waitFor();
    await sleep(300);
    check(await noOverflow(phone), '#/settings overflows sideways on a phone');
    await phone.close();
  });

  await noPageErrors();
} catch (e) {
  await failedWith(e, page, 'settings-failure.png');
} finally {
  await finish(browser);
}
