// Browser end-to-end test of a deaf channel on the console's Channels page, run by
// crates/cli/tests/gateway/api.rs while Telegram (the fake) holds an update it cannot deliver
// to the webhook: the channel shows `degraded` with Telegram's count and error as the reason,
// and when the update arrives it shows `connected` again (the Rust side delivers it when
// asked: `@@ {"cmd": "deliver"}`).
// Prints `ok - <step>` / `not ok - <step>: <error>` and `N passed, M failed`.

import {
  WAIT, check, env, failedWith, finish, launch, noPageErrors, rust, shot, step, watch,
} from './harness.mjs';

const BASE = env('SB_URL').replace(/\/$/, '');
const TOKEN = env('SB_TOKEN');

let browser;
let page;
try {
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  ctx.setDefaultTimeout(WAIT);
  page = watch(await ctx.newPage());
  const T = (id) => page.getByTestId(id);
  const tg = page.locator('[data-testid="channel"][data-channel="telegram"]');

  await step('the Channels page shows the deaf channel as degraded, with the platform\'s reason', async () => {
    await page.goto(BASE);
    await T('login-token').fill(TOKEN);
    await T('login-submit').click();
    await T('channels-tab').click();
    await tg.and(page.locator('[data-state="degraded"]')).waitFor();
    const state = await tg.getByTestId('channel-state').textContent();
    check(state === 'degraded', `the badge says ${state}`);
    const why = await tg.getByTestId('channel-reason').textContent();
    check(why.includes('holds 1 update(s)') && why.includes('Connection timed out'), `the reason is ${why}`);
    await shot(page, 'channel-degraded.png');
  });

  await step('once the update arrives the channel is connected again, with when it last received', async () => {
    await rust({ cmd: 'deliver' });
    // The page refreshes its status on its own.
    await tg.and(page.locator('[data-state="connected"]')).waitFor();
    await tg.getByTestId('channel-received').waitFor();
  });

  await noPageErrors();
} catch (e) {
  await failedWith(e, page, 'degraded-failure.png');
} finally {
  await finish(browser);
}
