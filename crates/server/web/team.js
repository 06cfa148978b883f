// The console's Team page (#/team), docs/teams.md: for everyone, a code to link a chat
// account (`/link CODE` to the bot); for admins, the users with their roles and linked chat
// accounts, and the audit log — filtered by user and action, exported as JSON lines.

/** The page. `kit`: the console's helpers — h, fill, api, toast, guard — and `me`. */
export function teamPage(kit) {
  const { h } = kit;
  const root = h('section.settings', { tid: 'team' });
  const admin = (kit.me.scopes ?? []).includes('admin');
  // The server token's built-in admin is nobody in a chat.
  if (kit.me.user !== 'admin') root.append(linkCard(kit));
  if (admin) {
    const users = h('div.panel', { tid: 'team-users' }, h('h2', {}, 'Users'), h('div.empty', {}, 'Loading…'));
    const audit = h('div.panel', { tid: 'team-audit' }, h('h2', {}, 'Audit log'));
    root.append(users, audit);
    loadUsers(kit, users).catch(kit.toast);
    auditLog(kit, audit);
  }
  return root;
}

function linkCard(kit) {
  const { h } = kit;
  const out = h('p.muted', { tid: 'link-code-out' });
  const button = h('button', { type: 'button', tid: 'link-code' }, 'Get a link code');
  button.addEventListener('click', kit.guard(async () => {
    const { code, expires_at: until } = await kit.api('POST', '/v1/me/link-code');
    out.replaceChildren('Send ', h('code', { tid: 'link-code-value' }, `/link ${code}`),
      ` to the bot, in a direct message or a group, before ${new Date(until).toLocaleTimeString()}.`);
  }));
  return h('div.panel', {}, h('h2', {}, 'Chat accounts'),
    h('p', {}, `Link your Telegram, Slack or Discord account to ${kit.me.user}: what you write and press there then acts as you.`),
    button, out);
}

async function loadUsers(kit, card) {
  const { h } = kit;
  const { users } = await kit.api('GET', '/v1/users');
  const rows = users.map((u) => h('tr', { tid: 'team-user' },
    h('td', {}, u.name), h('td', {}, u.role), h('td', {}, u.has_password ? 'password' : ''),
    h('td', {}, (u.links ?? []).map((l) => `${l.platform}:${l.user_id}`).join(' '))));
  card.replaceChildren(h('h2', {}, 'Users'),
    users.length === 0
      ? h('p.muted', {}, 'No users yet: switchboard users add NAME --role member')
      : h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Name'), h('th', {}, 'Role'),
        h('th', {}, 'Sign-in'), h('th', {}, 'Chat accounts'))), h('tbody', {}, rows)));
}

function auditLog(kit, card) {
  const { h } = kit;
  const user = h('input', { tid: 'audit-user', placeholder: 'user', 'aria-label': 'User' });
  const action = h('input', { tid: 'audit-action', placeholder: 'action (signin.failed, token.create …)', 'aria-label': 'Action' });
  const table = h('div', { tid: 'audit-entries' });
  const exportButton = h('button', { type: 'button', tid: 'audit-export' }, 'Export JSON lines');
  let shown = [];
  const query = () => {
    const q = new URLSearchParams({ limit: '1000' });
    if (user.value.trim()) q.set('user', user.value.trim());
    if (action.value.trim()) q.set('action', action.value.trim());
    return q;
  };
  const load = kit.guard(async () => {
    // Oldest first, page after page; the newest are shown first.
    const all = [];
    let after = null;
    for (let i = 0; i < 20; i++) {
      const q = query();
      if (after !== null) q.set('after', String(after));
      const page = await kit.api('GET', `/v1/audit?${q}`);
      all.push(...page.entries);
      if (page.next === null || page.next === undefined) break;
      after = page.next;
    }
    shown = all;
    table.replaceChildren(all.length === 0 ? h('p.muted', {}, 'Nothing recorded.')
      : h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'When'), h('th', {}, 'Who'),
        h('th', {}, 'Action'), h('th', {}, 'Target'), h('th', {}, 'Where'), h('th', {}, 'Detail'))),
      h('tbody', {}, [...all].reverse().map((e) => h('tr', { tid: 'audit-entry', 'data-action': e.action },
        h('td', {}, new Date(e.at).toLocaleString()), h('td', {}, e.actor), h('td', {}, e.action),
        h('td', {}, e.target ?? ''), h('td', {}, e.via), h('td', {}, h('code', {}, JSON.stringify(e.detail))))))));
  });
  exportButton.addEventListener('click', () => {
    const body = shown.map((e) => JSON.stringify(e)).join('\n') + (shown.length ? '\n' : '');
    const a = h('a', { href: URL.createObjectURL(new Blob([body], { type: 'application/x-ndjson' })), download: 'switchboard-audit.jsonl' });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  });
  const filter = h('form.row', {}, user, action, h('button', { tid: 'audit-filter' }, 'Show'), exportButton);
  filter.addEventListener('submit', (e) => { e.preventDefault(); load(); });
  card.append(filter, table);
  load();
}
