// Browser end-to-end test of the console's Usage page, run by crates/cli/tests/usage.rs
// against a server whose model has a price and that has run a few sessions, with a budget:
// the totals, a chart of the cost per day stacked by model (its bars and legend), the top
// sessions by title linking to them, the budgets with how much is spent, a session's running cost in
// its header, and the page on a phone.
// Prints `ok - <step>` / `not ok - <step>: <error>` and `N passed, M failed`.

import {
  WAIT, check, env, failedWith, finish, launch, noOverflow, noPageErrors, shot, sleep, step, watch,
} from './harness.mjs';

const BASE = env('SB_URL').replace(/\/$/, '');
const TOKEN = env('SB_TOKEN');
const COST = env('SB_COST');

let browser;
let page;
try {
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  ctx.setDefaultTimeout(WAIT);
  page = watch(await ctx.newPage());
  const T = (id) => page.getByTestId(id);

  await step('sign in; the Usage page shows what the period cost', async () => {
    await page.goto(BASE);
    await T('login-token').fill(TOKEN);
    await T('login-submit').click();
    await T('usage-tab').click();
    await T('usage-cost').filter({ hasText: COST }).waitFor();
  });

  await step('a chart of the cost per day, stacked by model, with its legend', async () => {
    await T('usage-svg').waitFor();
    const bars = await T('usage-bar').count();
    check(bars >= 1, `no bars: ${bars}`);
    const model = await T('usage-bar').first().getAttribute('data-model');
    check(model === 'openai/mock-model', `bar of ${model}`);
    const height = Number(await T('usage-bar').first().getAttribute('height'));
    check(height > 10, `the day's bar is ${height} high`);
    await T('usage-legend').filter({ hasText: 'openai/mock-model' }).waitFor();
  });

  await step('the top sessions link to them, and each session shows its cost so far', async () => {
    const rows = await T('usage-top-row').count();
    check(rows >= 2, `top rows: ${rows}`);
    const link = T('usage-top').locator('a[href^="#/s/"]').first();
    const name = (await link.textContent()).trim();
    check(/^Session (one|two)$/.test(name), `a top session is called ${JSON.stringify(name)}, not by its title`);
    await link.click();
    await page.waitForURL(/#\/s\/[0-9a-f-]{36}$/);
    await page.getByText(/\$0\.\d{4} so far/).first().waitFor();
    await T('usage-tab').click();
  });

  await step('the budgets with how much of each is spent, and when they reset', async () => {
    const row = page.locator('[data-testid="budget-row"][data-budget="team-daily"]');
    await row.waitFor();
    const pct = Number(await row.getByTestId('budget-meter').getAttribute('data-pct'));
    check(pct > 0 && pct <= 100, `meter at ${pct}`);
    check((await row.textContent()).includes('resets'), 'no reset time');
    await sleep(200);
    await shot(page, 'usage.png');
  });

  await step('the Usage page fits a phone', async () => {
    const phone = watch(await ctx.newPage());
    await phone.setViewportSize({ width: 390, height: 844 });
    await phone.goto(`${BASE}/#/usage`);
    await phone.getByTestId('usage-svg').waitFor();
    await sleep(300);
    const wide = await phone.evaluate(() => [...document.querySelectorAll('body *')]
      .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 1 && !el.closest('nav'))
      .slice(0, 12).map((el) => `${el.tagName}.${el.className?.baseVal ?? el.className}[${el.dataset?.testid ?? ''}] ${Math.round(el.getBoundingClientRect().right)}`));
    check(await noOverflow(phone), `#/usage overflows sideways on a phone: ${wide.join(', ')}`);
    await shot(phone, 'usage-phone.png');
    await phone.close();
  });

  await noPageErrors();
} catch (e) {
  await failedWith(e, page, 'usage-failure.png');
} finally {
  await finish(browser);
}
