// Browser end-to-end test of signing in per person, run by crates/cli/tests/teams.rs
// against a server with `[auth.oidc]` pointing at a real OpenID Connect provider
// (tests/e2e/oidc-provider.mjs, the `oidc-provider` package): a person signs in through the
// provider and the console acts as them with the role their group maps to; one the
// provider knows but no group maps is refused; a person signs in with a password; signing
// out ends the session for good.
// Prints `ok - <step>` / `not ok - <step>: <error>` and `N passed, M failed`.

import {
  WAIT, check, env, failedWith, finish, launch, noPageErrors, shot, step, until, watch,
} from './harness.mjs';

const BASE = env('SB_URL').replace(/\/$/, '');

let browser;
let page;
try {
  browser = await launch();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  ctx.setDefaultTimeout(WAIT);
  page = watch(await ctx.newPage());
  const T = (id) => page.getByTestId(id);

  /** The provider's development login and consent pages. */
  async function atTheProvider(login) {
    await page.locator('input[name="login"]').fill(login);
    await page.locator('input[name="password"]').fill('any password will do');
    await page.locator('button[type="submit"]').click();
    // Consent: the provider asks once per client and account.
    await page.locator('button[type="submit"]').click();
  }

  await step('the sign-in page offers the identity provider', async () => {
    await page.goto(BASE);
    await T('login-oidc').filter({ hasText: 'Sign in with Acme SSO' }).waitFor();
    await shot(page, 'teams-sign-in.png');
  });

  await step('a person signs in through the provider and the console acts as them, with their group\'s role', async () => {
    await T('login-oidc').click();
    await atTheProvider('ann');
    await page.waitForURL(`${BASE}/`);
    await T('whoami').filter({ hasText: 'ann · operator' }).waitFor();
    const me = await page.evaluate(async () => (await fetch('/v1/me')).json());
    check(me.user === 'ann' && me.credential === 'console', JSON.stringify(me));
    const users = await page.evaluate(async () => (await fetch('/v1/users')).status);
    check(users === 403, `an operator listed users: ${users}`);
  });

  await step('signing out ends the session: reloading shows the sign-in page again', async () => {
    await T('logout').click();
    await T('login-token').waitFor();
    await page.reload();
    await T('login-token').waitFor();
    const status = await page.evaluate(async () => (await fetch('/v1/sessions')).status);
    check(status === 401, `still signed in: ${status}`);
  });

  await step('someone the provider knows but no group maps to a role is refused, and told', async () => {
    // Another browser: the provider still remembers ann in this one (signing out of
    // Switchboard does not sign out of the provider).
    const other = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    other.setDefaultTimeout(WAIT);
    page = watch(await other.newPage());
    await page.goto(BASE);
    await T('login-oidc').click();
    await atTheProvider('zed');
    await T('login-error').filter({ hasText: 'identity provider failed' }).waitFor();
  });

  await step('a person signs in with a user name and password', async () => {
    await T('login-user').fill('dee');
    await T('login-token').fill('not her password');
    await T('login-submit').click();
    await T('login-error').filter({ hasText: 'unknown user or wrong password' }).waitFor();
    await T('login-token').fill('dee has a long password');
    await T('login-submit').click();
    await T('whoami').filter({ hasText: 'dee · member' }).waitFor();
    check(await T('settings-tab').isHidden(), 'a member is shown the Settings tab');
    await shot(page, 'teams-signed-in.png');
  });

  await step('the Team page gives a member a code to link a chat account', async () => {
    await T('team-tab').click();
    await T('link-code').click();
    const code = await T('link-code-value').textContent();
    check(/^\/link [A-Z2-9]{4}-[A-Z2-9]{4}$/.test(code), code);
    check(await T('team-audit').count() === 0, 'a member is shown the audit log');
  });

  let session;
  await step('a second person decides in the console: the requester is told no, another allows it', async () => {
    await T('sessions-tab').click();
    await T('home-composer').fill('deploy from the console');
    await T('home-composer').press('Enter');
    await page.waitForURL(/#\/s\/[0-9a-f-]{36}$/);
    session = page.url().split('/').pop();
    await T('allow').first().waitFor();
    const shared = await page.evaluate(async (id) => (await fetch(`/v1/sessions/${id}`, {
      method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ shared_with: ['eli'] }),
    })).status, session);
    check(shared === 200, `sharing answered ${shared}`);
    await T('allow').first().click();
    await T('toast').filter({ hasText: 'second person' }).waitFor();
    const other = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    other.setDefaultTimeout(WAIT);
    page = watch(await other.newPage());
    await page.goto(BASE);
    await T('login-user').fill('eli');
    await T('login-token').fill('eli has a long password');
    await T('login-submit').click();
    await T('whoami').filter({ hasText: 'eli · member' }).waitFor();
    await page.goto(`${BASE}/#/s/${session}`);
    await T('allow').first().click();
    await T('message-assistant').filter({ hasText: 'Deployed from the console.' }).waitFor();
    await shot(page, 'teams-second-person.png');
  });

  await step('an admin sees the users and the audit log on the Team page', async () => {
    const admin = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    admin.setDefaultTimeout(WAIT);
    page = watch(await admin.newPage());
    await page.goto(BASE);
    await T('login-token').fill(env('SB_TOKEN'));
    await T('login-submit').click();
    await T('team-tab').click();
    await T('team-user').filter({ hasText: 'eli' }).waitFor();
    await page.locator('[data-testid="audit-entry"][data-action="approval.decide"]').filter({ hasText: 'eli' }).waitFor();
    await T('audit-action').fill('signin.failed');
    await T('audit-filter').click();
    await until('only the failed sign-ins are listed', async () =>
      (await page.locator('[data-testid="audit-entry"][data-action="signin.failed"]').count()) > 0
      && (await page.locator('[data-testid="audit-entry"]:not([data-action="signin.failed"])').count()) === 0);
    await shot(page, 'teams-audit.png');
  });

  await noPageErrors();
} catch (e) {
  await failedWith(e, page, 'teams-failure.png');
} finally {
  await finish(browser);
}
