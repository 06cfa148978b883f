// Switchboard web console: sign-in, sessions with a live transcript and approvals, the
// approvals inbox, the chat gateway's channels, schedules, the relay.
// Plain DOM, no framework. Text from the server is only ever set as textContent, except
// assistant replies, which go through md.js (escapes everything, then adds its own markup).

import { ledgerPanel } from './ledger.js';
import { render } from './md.js';
import { searchPage } from './search.js';
import { settingsPage } from './settings.js';
import { teamPage } from './team.js';
import { usagePage } from './usage.js';

const $ = (id) => document.getElementById(id);

/** h('div.a.b', {attr: v, tid: 'x', onclick: fn}, ...children) → element. */
function h(tag, attrs = {}, ...kids) {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name);
  if (classes.length) el.className = classes.join(' ');
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false || k === 'value' || k === 'checked') continue;
    if (k === 'tid') el.dataset.testid = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : v);
  }
  el.append(...children(kids));
  if (attrs.value != null) el.value = attrs.value;
  if (attrs.checked) el.checked = true;
  return el;
}

/** Nested arrays of nodes and strings, without the null/false placeholders of conditionals. */
const children = (kids) => kids.flat(Infinity).filter((k) => k != null && k !== false);
const fill = (el, ...kids) => el.replaceChildren(...children(kids));
const time = (ts) => new Date(ts).toLocaleTimeString();
const backendLabel = (b) => (!b ? '?' : b === 'builtin' ? 'built-in' : `acp: ${b.acp}`);

// ---------- errors, API ----------

const describe = (err) => (err.code ? `${err.message} (${err.code})` : err.message);

function toast(err, kind = 'error') {
  if (err?.silent) return;
  const text = typeof err === 'string' ? err : describe(err);
  const box = $('toasts');
  if ([...box.children].some((t) => t.textContent === text)) return;
  const el = h(`div.toast.${kind}`, { tid: 'toast', role: 'alert', title: 'dismiss' }, text);
  el.addEventListener('click', () => el.remove());
  setTimeout(() => el.remove(), kind === 'error' ? 10000 : 5000);
  box.append(el);
}

/** Wraps an async handler so that its errors reach the user. */
const guard = (fn) => (...args) => fn(...args).catch(toast);

async function api(method, path, body) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new Error(`cannot reach the server: ${e.message}`);
  }
  if (res.ok) return res.status === 204 ? null : res.json();
  const data = await res.json().catch(() => ({}));
  const err = new Error(data.error || data.message || `${res.status} ${res.statusText}`);
  Object.assign(err, { status: res.status, code: data.code });
  if (res.status === 401 && S.me) {
    err.silent = true;
    signedOut(`Signed out: ${err.message}`);
  }
  throw err;
}

// ---------- app state, sign-in, routing ----------

const S = {
  me: null, // GET /v1/console/me while signed in
  listKey: '', // what the sidebar shows, to redraw it only when it changes
  views: new Map(), // session id → view (kept, so coming back resumes after its lastSeq)
  current: null, // the session view on screen
  showArchived: false, // the sidebar lists archived sessions instead
  drafts: new Map(), // session id → text for its composer (a first message that could not be sent)
};

let bootTimer = 0;
async function boot() {
  clearTimeout(bootTimer);
  try {
    S.me = await api('GET', '/v1/console/me');
  } catch (e) {
    const login = new URLSearchParams(location.search).get('login');
    const why = login === 'expired' ? 'That login link was already used or has expired.'
      : login === 'failed' ? 'Signing in through the identity provider failed: ask your admin to check the server log.'
        : undefined;
    if (e.status === 401) return showLogin(why);
    // No answer at all (offline, the server down), or a proxy in front answering for it.
    if (!e.status || e.status === 502 || e.status === 503 || e.status === 504) return showUnreachable(e.message);
    toast(e);
    bootTimer = setTimeout(boot, 3000);
    return;
  }
  if (location.search) history.replaceState(null, '', `/${location.hash}`);
  $('login').hidden = true;
  $('unreachable').hidden = true;
  $('app').hidden = false;
  $('version').textContent = S.me.version ? `v${S.me.version}` : '';
  $('whoami').textContent = S.me.user ? `${S.me.user} · ${S.me.role}` : '';
  // The pages the person's scopes reach (the server refuses the rest anyway).
  const scopes = new Set(S.me.scopes ?? []);
  for (const [tab, scope] of [['settings', 'settings:read'], ['channels', 'gateway:read'], ['schedules', 'schedules:read'], ['relay', 'relay:read']]) {
    $(`${tab}-tab`).hidden = !scopes.has(scope);
  }
  route();
  refreshSessions().catch(toast);
  openApprovals();
}

/** The console opened (from the service worker's cache, say) but the server does not answer. */
function showUnreachable(detail) {
  $('app').hidden = true;
  $('login').hidden = true;
  $('unreachable').hidden = false;
  $('unreachable-detail').textContent = `${detail}. Trying again every 5 seconds.`;
  bootTimer = setTimeout(boot, 5000);
}
$('unreachable-retry').addEventListener('click', () => boot());

// The service worker caches the console's own files (never API answers), so that an installed
// console opens offline to the "unreachable" screen instead of the browser's error page.
if ('serviceWorker' in navigator) {
  navigator.serviceWorker.register('/sw.js').catch((e) => console.warn('service worker not registered', e));
}

function showLogin(message) {
  $('app').hidden = true;
  $('unreachable').hidden = true;
  $('login').hidden = false;
  $('login-error').hidden = !message;
  $('login-error').textContent = message ?? '';
  $('login-token').focus();
  api('GET', '/v1/console/sign-in').then((o) => {
    $('login-oidc').hidden = !o.oidc;
    $('login-oidc').textContent = o.oidc ?? '';
  }).catch(() => {});
}

function signedOut(message) {
  S.me = null;
  closeApprovals();
  leaveSession();
  closeLook();
  S.views.clear();
  S.listKey = '';
  showLogin(message);
}

$('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  try {
    const user = $('login-user').value.trim();
    const secret = $('login-token').value;
    await api('POST', '/v1/console/login', user ? { user, password: secret } : { token: secret.trim() });
    $('login-token').value = '';
    boot();
  } catch (err) {
    showLogin(describe(err));
  }
});

$('logout').addEventListener('click', guard(async () => {
  await api('POST', '/v1/console/logout');
  signedOut();
}));

$('menu').addEventListener('click', () => document.body.classList.toggle('drawer'));
// On a phone the sidebar is a drawer: a tap outside it closes it.
document.addEventListener('click', (e) => {
  if (document.body.classList.contains('drawer') && !$('sidebar').contains(e.target) && !$('menu').contains(e.target)) {
    document.body.classList.remove('drawer');
  }
});

$('search-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const q = $('search-input').value.trim();
  if (q) location.hash = `#/search/${encodeURIComponent(q)}`;
});

$('show-archived').addEventListener('change', (e) => {
  S.showArchived = e.target.checked;
  refreshSessions().catch(toast);
});

/** Pages that use the whole width (no session sidebar). */
const WIDE = ['relay', 'schedules', 'inbox', 'channels', 'usage', 'settings', 'team'];

/** #/ · #/new · #/s/<id>[/<seq>] · #/search/<query> · #/inbox · #/channels · #/schedules · #/schedules/<id> · #/relay · #/relay/<bundle> · #/usage · #/settings · #/team */
function route() {
  if (!S.me) return;
  const [, kind = '', arg, at] = location.hash.split('/').map(decodeURIComponent);
  document.body.classList.remove('drawer');
  document.body.classList.toggle('wide', WIDE.includes(kind));
  document.body.dataset.page = WIDE.includes(kind) ? kind : 'sessions';
  $('sessions-tab').classList.toggle('active', !WIDE.includes(kind));
  for (const page of WIDE) $(`${page}-tab`).classList.toggle('active', kind === page);
  if (kind !== 's') leaveSession();
  if (kind !== 'relay') closeLook();
  if (kind !== 'inbox') I.list = null;
  if (kind === 's' && arg) openSession(arg, at);
  else if (kind === 'search') {
    $('main').replaceChildren(searchPage({ h, api, guard, jump: (hit) => { S.jumpHit = { words: hit.snippet.filter((p) => p.matched).map((p) => p.text), role: hit.role }; } }, arg ?? ''));
    $('search-input').value = arg ?? '';
  }
  else if (kind === 'relay') openRelay(arg);
  else if (kind === 'schedules') openSchedules(arg);
  else if (kind === 'inbox') openInbox();
  else if (kind === 'channels') openChannels();
  else if (kind === 'settings') $('main').replaceChildren(settingsPage(settingsKit));
  else if (kind === 'team') $('main').replaceChildren(teamPage({ ...settingsKit, me: S.me }));
  else if (kind === 'usage') $('main').replaceChildren(usagePage({ ...settingsKit, me: S.me }));
  else if (kind === 'new') $('main').replaceChildren(newSessionForm());
  else $('main').replaceChildren(homeView());
  markActive();
}
window.addEventListener('hashchange', route);

setInterval(() => {
  if (!S.me) return;
  const page = document.body.dataset.page;
  if (page === 'relay') refreshRelay().catch(toast);
  else if (page === 'schedules') refreshSchedules().catch(toast);
  else if (page === 'channels') refreshChannels().catch(toast);
  else if (page === 'inbox') tickInbox();
  else refreshSessions().catch(toast);
}, 3000);

// ---------- sessions sidebar, new session ----------

async function refreshSessions() {
  const { sessions } = await api('GET', `/v1/sessions?limit=100&archived=${S.showArchived === true}`);
  const v = S.current;
  const mine = v && sessions.find((s) => s.id === v.id);
  if (mine) {
    v.title.textContent = mine.title;
    const waiting = [...v.calls.values()].filter((c) => c.waiting).length;
    if (waiting !== mine.pending_approvals) schedulePending(v);
  }
  const key = JSON.stringify([S.showArchived === true,
    sessions.map((s) => [s.id, s.title, s.run_status, s.pending_approvals, s.backend])]);
  if (key === S.listKey) return;
  S.listKey = key;
  $('session-list').replaceChildren(...sessions.map((s) =>
    h('li', {}, h('a.session', { href: `#/s/${s.id}`, tid: 'session-item', 'data-session-id': s.id },
      h('span.session-title', {}, s.title),
      s.pending_approvals > 0 &&
        h('span.badge', { tid: 'pending-badge', title: 'tool calls waiting for approval' }, String(s.pending_approvals)),
      h('span.session-meta', {}, backendLabel(s.backend), ' · ',
        h(`span.run.${s.run_status}`, { tid: 'run-status' }, s.run_status))))));
  markActive();
}

let listTimer = 0;
/** The sidebar after an action or a run state change (coalesced: a replay changes it often). */
function refreshSoon() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => S.me && refreshSessions().catch(toast), 300);
}

function markActive() {
  for (const a of $('session-list').querySelectorAll('a.session')) {
    a.classList.toggle('active', a.dataset.sessionId === S.current?.id);
  }
}

const field = (label, input) => h('label.field', {}, h('span', {}, label), input);

/** What the Settings page (settings.js) uses of the console. */
const settingsKit = {
  h, fill, api, toast, guard, field,
  // The defaults a new session is offered changed with the settings.
  changed: async () => { S.me = await api('GET', '/v1/console/me'); },
};
const MODES = ['read-only', 'workspace-write', 'full-access'];
const modeSelect = (tid, value, name = 'mode') => h('select', { name, tid, value, 'aria-label': 'Permission mode' },
  MODES.map((m) => h('option', { value: m }, m)));
function backendSelect(tid, onchange) {
  return h('select', { name: 'backend', tid, onchange, 'aria-label': 'Backend' },
    h('option', { value: 'builtin' }, 'built-in agent'),
    (S.me.agents ?? []).map((a) => h('option', { value: `acp:${a}` }, `ACP: ${a}`)));
}
const backendValue = (v) => (v === 'builtin' ? 'builtin' : { acp: v.slice(4) });

function newSessionForm() {
  const { default_cwd, default_model, default_permission_mode } = S.me;
  const model = h('input', { name: 'model', tid: 'new-model', value: default_model ?? '', placeholder: 'default' });
  const backend = backendSelect('new-backend', () => { model.disabled = backend.value !== 'builtin'; });
  const form = h('form.new-session.panel', { tid: 'new-session-form' },
    h('h2', {}, 'New session'),
    field('Title', h('input', { name: 'title', tid: 'new-title', placeholder: 'New session' })),
    field('Workspace', h('input', { name: 'cwd', tid: 'new-cwd', value: default_cwd ?? '' })),
    field('Backend', backend),
    field('Model', model),
    field('Permission mode', modeSelect('new-mode', default_permission_mode ?? 'workspace-write')),
    h('button.primary', { tid: 'new-create' }, 'Create'));
  form.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    const f = form.elements;
    const body = { permission_mode: f.mode.value, backend: backendValue(f.backend.value) };
    if (f.title.value.trim()) body.title = f.title.value.trim();
    if (f.cwd.value.trim()) body.cwd = f.cwd.value.trim();
    if (!model.disabled && model.value.trim()) body.model = model.value.trim();
    const s = await api('POST', '/v1/sessions', body);
    location.hash = `#/s/${s.id}`;
    refreshSoon();
  }));
  return form;
}

/** The home screen: type and send; a session is made with the defaults shown beside the box. */
function homeView() {
  const { default_cwd, default_permission_mode } = S.me;
  const text = h('textarea', { tid: 'home-composer', rows: 4, 'aria-label': 'First message',
    placeholder: 'What should the agent do? Enter starts a session (Shift+Enter for a new line).' });
  const cwd = h('input', { tid: 'home-cwd', value: default_cwd ?? '', 'aria-label': 'Workspace' });
  const backend = backendSelect('home-backend');
  const mode = modeSelect('home-mode', default_permission_mode ?? 'workspace-write');
  const go = h('button.primary', { tid: 'home-send' }, 'Start');
  const form = h('form.home.panel', { tid: 'home-form' }, h('h2', {}, 'Start a session'), text,
    h('div.home-settings', {},
      h('label.inline', {}, h('span', {}, 'Workspace'), cwd),
      h('label.inline', {}, h('span', {}, 'Backend'), backend),
      h('label.inline', {}, h('span', {}, 'Mode'), mode), go),
    h('p.muted', {}, 'Or pick a session on the left, or ', h('a', { href: '#/new' }, 'set every option'), '.'),
    !S.me.default_model && h('p.warning', { tid: 'no-model' }, 'No model is configured yet: choose a provider and a model in ',
      h('a', { href: '#/settings' }, 'Settings'), ' (or run ', h('code', {}, 'switchboard setup'), ' on the server).'));
  text.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    const content = text.value;
    if (!content.trim()) return;
    go.disabled = true;
    try {
      const body = { title: clip(content.trim().split('\n')[0], 60), permission_mode: mode.value, backend: backendValue(backend.value) };
      if (cwd.value.trim()) body.cwd = cwd.value.trim();
      const session = await api('POST', '/v1/sessions', body);
      try {
        await api('POST', `/v1/sessions/${session.id}/messages`, { message: { role: 'user', content }, type: 'message' });
      } catch (err) {
        S.drafts.set(session.id, content); // kept in the new session's composer
        toast(err);
      }
      text.value = '';
      location.hash = `#/s/${session.id}`;
      refreshSoon();
    } finally {
      go.disabled = false;
    }
  }));
  // Focus the composer once it is on the page, unless the person has already put the cursor
  // somewhere (the search box, say): a late focus would take their typing — and their Enter.
  setTimeout(() => {
    const at = document.activeElement;
    const typing = at && at !== text && $('app').contains(at) && at.matches('input, textarea, select');
    if (text.isConnected && !typing) text.focus();
  });
  return form;
}

// ---------- session view ----------

const KINDS = ['run_started', 'file_attached', 'file_shared', 'follow_up_queued', 'text_delta', 'text_complete', 'tool_calls_proposed',
  'waiting_for_tool_approval', 'tool_execution_started', 'tool_execution_completed', 'tool_rejected',
  'steering_received', 'thought_delta', 'plan_updated', 'notice', 'workspace_changed', 'usage_report', 'run_completed', 'run_error'];

/** Opens session `id`; with `at` (a search hit's seq), scrolls to that point of the
 *  transcript once the log has been read that far, and marks it. */
function openSession(id, at) {
  const jump = at != null && at !== '' && Number.isFinite(Number(at));
  if (S.current?.id !== id) {
    leaveSession();
    if (!S.views.has(id)) S.views.set(id, sessionView(id));
    S.current = S.views.get(id);
    connect(S.current);
  }
  const v = S.current;
  $('main').replaceChildren(v.root);
  v.log.scrollTop = v.log.scrollHeight;
  clearTimeout(v.jumpTimer);
  v.jump = null;
  v.pinned = null;
  if (jump) {
    v.jump = { seq: Number(at), ...(S.jumpHit ?? { words: [], role: null }) };
    // The log is read from the start: the jump waits for the events after the hit (or, for
    // a hit at the log's end, for the replay to settle).
    if (v.lastSeq > v.jump.seq) jumpTo(v);
    else v.jumpTimer = setTimeout(() => v.jump && S.current === v && jumpTo(v), 2000);
  }
  S.jumpHit = null;
  api('GET', `/v1/sessions/${id}`).then(({ session, config, sandbox, usage }) => showSession(v, session, config, sandbox, usage), (e) => {
    toast(e);
    if (e.status === 404) location.hash = '#/';
  });
}

/** How the session's processes are confined, in a few words (the title says more). */
function sandboxLabel(sb) {
  if (!sb) return null;
  if (!sb.confined) return 'not sandboxed';
  const net = sb.network === 'allowlist' ? `network: ${sb.allow_hosts.join(', ')}` : `network ${sb.network}`;
  return `sandboxed, ${net}`;
}

/** What a session's model calls cost so far, in a few words (docs/usage.md). */
function costLabel(u) {
  if (!u || !u.calls) return null;
  const unknown = u.unpriced_calls + u.unreported_calls;
  return `$${(u.cost_microdollars / 1e6).toFixed(4)} so far${unknown ? ` (+${unknown} call(s) of unknown cost)` : ''}`;
}

function showSession(v, session, config, sandbox, usage) {
  v.config = config;
  if (sandbox !== undefined) v.sandbox = sandbox;
  if (usage !== undefined) v.usage = usage;
  v.title.textContent = session.title;
  setArchived(v, session.archived === true);
  v.meta.textContent = [session.cwd, config.permission_mode, backendLabel(config.backend), config.model,
    sandboxLabel(v.sandbox), costLabel(v.usage)].filter(Boolean).join(' · ');
  v.meta.title = v.sandbox ? `Sandbox: ${v.sandbox.detail}` : '';
  v.download.download = `${session.title}.md`;
  v.root.classList.toggle('no-fork', (config.backend ?? 'builtin') !== 'builtin');
}

const autoLabel = (a) => (Array.isArray(a) ? (a.length ? 'these tools' : 'none') : a);

/** Title, permission mode, model and auto_approve, changed with PATCH /v1/sessions/{id}. */
function settingsPanel(v) {
  const title = h('input', { tid: 'set-title', 'aria-label': 'Title' });
  const mode = modeSelect('set-mode', 'workspace-write');
  const model = h('input', { tid: 'set-model', 'aria-label': 'Model', placeholder: 'unchanged' });
  const auto = h('select', { tid: 'set-auto', 'aria-label': 'Run without asking' },
    h('option', { value: 'none' }, 'nothing (ask for every call the mode does not allow)'),
    h('option', { value: 'these tools' }, 'these tools:'),
    h('option', { value: 'all' }, 'every tool'));
  const tools = h('input', { tid: 'set-auto-tools', 'aria-label': 'Tools run without asking', placeholder: 'run_command, fetch' });
  const net = h('select', { tid: 'set-network', 'aria-label': 'Sandbox network' },
    h('option', { value: '' }, "the server's"),
    h('option', { value: 'none' }, 'none'),
    h('option', { value: 'allowlist' }, 'only these hosts:'),
    h('option', { value: 'full' }, 'full'));
  const hosts = h('input', { tid: 'set-network-hosts', 'aria-label': 'Hosts the sandbox reaches', placeholder: 'pypi.org, *.github.com' });
  const error = h('p.form-error', { tid: 'set-error', role: 'alert', hidden: true });
  const panel = h('form.settings.panel', { tid: 'settings-panel', hidden: true },
    field('Title', title), field('Permission mode', mode), field('Model', model),
    field('Run without asking', h('div.inline-pair', {}, auto, tools)),
    field('Sandbox network', h('div.inline-pair', {}, net, hosts)),
    h('div.form-actions', {}, h('button.primary', { tid: 'set-save' }, 'Save'),
      h('button', { type: 'button', tid: 'set-cancel', onclick: () => { panel.hidden = true; } }, 'Cancel')),
    error);
  const syncTools = () => { tools.hidden = auto.value !== 'these tools'; hosts.hidden = net.value !== 'allowlist'; };
  auto.addEventListener('change', syncTools);
  net.addEventListener('change', syncTools);
  panel.load = () => {
    const c = v.config ?? {};
    title.value = v.title.textContent;
    mode.value = c.permission_mode ?? 'workspace-write';
    model.value = c.model ?? '';
    model.disabled = c.backend && c.backend !== 'builtin';
    auto.value = autoLabel(c.auto_approve ?? 'none');
    tools.value = Array.isArray(c.auto_approve) ? c.auto_approve.join(', ') : '';
    net.value = c.sandbox?.network ?? '';
    hosts.value = (c.sandbox?.allow_hosts ?? []).join(', ');
    error.hidden = true;
    syncTools();
  };
  panel.addEventListener('submit', async (e) => {
    e.preventDefault();
    const c = v.config ?? {};
    const body = {};
    if (title.value !== v.title.textContent) body.title = title.value;
    if (mode.value !== c.permission_mode) body.permission_mode = mode.value;
    // Empty means "leave it": a session's model can be changed, not unset.
    if (!model.disabled && model.value.trim() && model.value.trim() !== (c.model ?? '')) body.model = model.value.trim();
    const wanted = auto.value === 'these tools'
      ? tools.value.split(',').map((t) => t.trim()).filter(Boolean) : auto.value;
    if (JSON.stringify(wanted) !== JSON.stringify(c.auto_approve)) body.auto_approve = wanted;
    // The server's network cannot be asked back for by PATCH: once a session has its own,
    // "the server's" leaves it as it is.
    if (net.value) {
      const sandbox = { network: net.value };
      if (net.value === 'allowlist') sandbox.allow_hosts = hosts.value.split(',').map((t) => t.trim()).filter(Boolean);
      if (JSON.stringify(sandbox) !== JSON.stringify(c.sandbox ?? {})) body.sandbox = sandbox;
    }
    try {
      if (Object.keys(body).length) await api('PATCH', `/v1/sessions/${v.id}`, body);
      const { session, config, sandbox, usage } = await api('GET', `/v1/sessions/${v.id}`);
      showSession(v, session, config, sandbox ?? null, usage);
      panel.hidden = true;
      toast('Settings saved: the next run uses them.', 'info');
      refreshSoon();
    } catch (err) {
      error.hidden = false;
      error.textContent = describe(err);
    }
  });
  return panel;
}

/** Adds `tool` to the session's auto_approve list (unless every tool runs unasked already).
 *  One at a time per session, so two quick clicks on different tools keep both. */
function allowAlways(v, tool) {
  v.allowing = (v.allowing ?? Promise.resolve()).catch(() => {}).then(() => addAutoApprove(v, tool));
  return v.allowing;
}

async function addAutoApprove(v, tool) {
  const { session, config } = await api('GET', `/v1/sessions/${v.id}`);
  const cur = config.auto_approve;
  if (cur !== 'all' && !(Array.isArray(cur) && cur.includes(tool))) {
    await api('PATCH', `/v1/sessions/${v.id}`, { auto_approve: [...(Array.isArray(cur) ? cur : []), tool] });
    config.auto_approve = [...(Array.isArray(cur) ? cur : []), tool];
  }
  showSession(v, session, config);
}

function leaveSession() {
  S.current?.es?.close();
  if (S.current) S.current.es = null;
  S.current = null;
}

function sessionView(id) {
  const v = {
    id, lastSeq: 0, es: null, activeRun: null, ended: new Set(), calls: new Map(), plans: new Map(),
    runs: new Map(), // run id → what started it ({content, files}), for Retry
    waitingSince: new Map(), // tool call id → when it started waiting for approval
    tail: null, // the last transcript item, if a text or thought block that deltas extend
    deltaSeen: false, // a text_delta since the last text_complete
    dirty: new Set(), flushTimer: 0, pendingTimer: 0,
  };
  v.title = h('h2.session-name', { tid: 'session-title' });
  v.meta = h('span.session-info', { tid: 'session-info' });
  v.download = h('a.button', { href: `/v1/sessions/${id}/transcript.md`, download: 'transcript.md', tid: 'download' }, 'Download');
  v.log = h('div.log', { tid: 'transcript' });
  // A search hit stays in view while the log replays past it, until the person moves.
  for (const what of ['wheel', 'touchstart', 'keydown', 'mousedown']) {
    v.log.addEventListener(what, () => { v.pinned = null; }, { passive: true });
  }
  v.input = h('textarea', { tid: 'composer', rows: 2, placeholder: 'Message (Enter sends, Shift+Enter for a new line; drop or paste files to attach)' });
  if (S.drafts.has(id)) { v.input.value = S.drafts.get(id); S.drafts.delete(id); }
  v.settings = settingsPanel(v);
  // Files to send with the next message: uploaded at once, attached on send.
  v.pending = [];
  v.tray = h('div.attachments', { tid: 'attachments' });
  v.picker = h('input', { type: 'file', multiple: true, hidden: true, tid: 'attach-input',
    onchange: () => { attachFiles(v, [...v.picker.files]); v.picker.value = ''; } });
  v.input.addEventListener('paste', (e) => {
    const files = [...(e.clipboardData?.files ?? [])];
    if (files.length) { e.preventDefault(); attachFiles(v, files); }
  });
  const confirm = h('span.confirm', { hidden: true }, 'Delete this session?',
    h('button.danger', { tid: 'delete-confirm', type: 'button', onclick: guard(() => deleteSession(v)) }, 'Delete'),
    h('button', { tid: 'delete-cancel', type: 'button', onclick: () => { confirm.hidden = true; } }, 'Cancel'));
  const btn = (tid, label, onclick, cls = '') => h(`button${cls}`, { tid, type: 'button', onclick: guard(onclick) }, label);
  v.archive = btn('archive', 'Archive', () => archiveSession(v, !v.archived));
  v.buttons = [
    btn('send', 'Send', () => sendMessage(v, 'message'), '.primary.when-idle'),
    btn('steer', 'Steer', () => sendMessage(v, 'steering'), '.primary.when-running'),
    btn('queue', 'Queue', () => sendMessage(v, 'follow_up'), '.when-running'),
  ];
  v.input.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || e.shiftKey || e.isComposing) return;
    e.preventDefault();
    sendMessage(v, v.activeRun ? 'follow_up' : 'message').catch(toast);
  });
  v.root = h('section.session-view', { 'data-run-state': 'idle' },
    h('div.session-head', {}, h('div.session-heading', {}, v.title, v.meta),
      h('div.session-actions', {},
        h('button', { tid: 'settings', type: 'button', onclick: () => {
          v.settings.hidden = !v.settings.hidden;
          if (!v.settings.hidden) v.settings.load();
        } }, 'Settings'),
        v.download, v.archive,
        h('button', { tid: 'delete', type: 'button', onclick: () => { confirm.hidden = false; } }, 'Delete'), confirm)),
    v.settings,
    v.log,
    v.tray,
    h('div.composer', {}, v.input, h('div.composer-actions', {}, v.picker,
      h('button', { tid: 'attach', type: 'button', title: 'Attach files', onclick: () => v.picker.click() }, 'Attach'),
      v.buttons,
      btn('stop', 'Stop', () => api('POST', `/v1/sessions/${id}/cancel`, { run_id: v.activeRun }), '.danger.when-running'))));
  v.root.addEventListener('dragover', (e) => { if (e.dataTransfer?.types?.includes('Files')) e.preventDefault(); });
  v.root.addEventListener('drop', (e) => {
    const files = [...(e.dataTransfer?.files ?? [])];
    if (files.length) { e.preventDefault(); attachFiles(v, files); }
  });
  return v;
}

const size = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${Math.round(n / 1024)} KB` : `${n} B`);

/** Uploads each file to the session; each shows as a chip until the message is sent. */
async function attachFiles(v, files) {
  for (const file of files) {
    const chip = h('span.chip', { tid: 'attachment-chip', 'data-state': 'uploading' }, `${file.name} …`);
    v.tray.append(chip);
    try {
      const form = new FormData();
      form.append('file', file, file.name);
      const res = await fetch(`/v1/sessions/${v.id}/files`, { method: 'POST', body: form });
      const data = await res.json().catch(() => ({}));
      if (!res.ok) throw Object.assign(new Error(data.error || `${res.status} ${res.statusText}`), { code: data.code });
      const entry = { file_id: data.file_id, chip };
      v.pending.push(entry);
      chip.dataset.state = 'ready';
      fill(chip, `${data.name} (${size(data.size)})`,
        h('button.chip-remove', { type: 'button', title: 'Remove', onclick: () => {
          v.pending = v.pending.filter((p) => p !== entry);
          chip.remove();
        } }, '×'));
    } catch (e) {
      chip.remove();
      toast(new Error(`${file.name}: ${describe(e)}`));
    }
  }
}

/** A file of the session in the transcript: images previewed, every file downloadable. */
function fileCard(v, file, caption, tid) {
  const url = `/v1/sessions/${v.id}/files/${file.file_id}`;
  const image = /^image\/(png|jpeg|gif|webp)$/.test(file.mime);
  return h(`div.file-card`, { tid, 'data-file-id': file.file_id },
    image && h('img.file-preview', { tid: 'file-preview', src: url, alt: file.name, loading: 'lazy' }),
    h('a', { href: url, download: file.name, tid: 'file-download' }, file.name),
    h('span.file-meta', {}, ` ${file.mime}, ${size(file.size)}`),
    caption && h('div.file-caption', {}, caption));
}

function setArchived(v, archived) {
  v.archived = archived;
  v.archive.textContent = archived ? 'Unarchive' : 'Archive';
}

/** Archived sessions keep their transcript but leave the default list. */
async function archiveSession(v, archived) {
  const s = await api('PATCH', `/v1/sessions/${v.id}`, { archived });
  setArchived(v, s.archived === true);
  toast(archived ? 'Session archived.' : 'Session back in the list.', 'info');
  await refreshSessions();
}

async function deleteSession(v) {
  await api('DELETE', `/v1/sessions/${v.id}`);
  S.views.delete(v.id);
  location.hash = '#/';
  toast('Session deleted.', 'info');
  await refreshSessions();
}

async function sendMessage(v, type) {
  let content = v.input.value;
  const files = type === 'steering' ? [] : v.pending.slice();
  if (!content.trim() && !files.length) return;
  v.pinned = null; // what the person sends is followed, not the search hit
  if (!content.trim()) content = '(see the attached files)';
  const body = { message: { role: 'user', content }, type };
  if (files.length) body.message.attachments = files.map((f) => ({ file_id: f.file_id }));
  if (type === 'steering') body.run_id = v.activeRun;
  for (const b of v.buttons) b.disabled = true;
  try {
    const { run_id } = await api('POST', `/v1/sessions/${v.id}/messages`, body);
    if (v.input.value === content) v.input.value = ''; // unless more was typed meanwhile
    for (const f of files) f.chip.remove();
    v.pending = v.pending.filter((p) => !files.includes(p));
    if (type === 'message' && !v.ended.has(run_id)) setRun(v, run_id);
  } finally {
    for (const b of v.buttons) b.disabled = false;
  }
}

function setRun(v, run) {
  if (v.activeRun !== run) refreshSoon(); // the sidebar shows the run state too
  v.activeRun = run;
  v.root.dataset.runState = run ? 'running' : 'idle';
}

/** Streams the log after v.lastSeq; the browser itself resumes with Last-Event-ID. */
function connect(v) {
  const es = new EventSource(`/v1/sessions/${v.id}/events?after=${v.lastSeq}`);
  for (const kind of KINDS) es.addEventListener(kind, (e) => onEvent(v, kind, JSON.parse(e.data)));
  es.addEventListener('gap_detected', (e) => {
    const gap = JSON.parse(e.data);
    add(v, h('div.notice', {}, `Events up to ${gap.oldest_available_id - 1} were removed by retention.`));
  });
  es.addEventListener('error', () => {
    if (es.readyState !== EventSource.CLOSED || v.es !== es) return;
    v.es = null;
    setTimeout(() => reconnect(v), 2000);
  });
  v.es = es;
}

/** After the stream was closed for good (an HTTP error): check the session, then resume. */
async function reconnect(v) {
  if (S.current !== v || v.es) return;
  try {
    await api('GET', `/v1/sessions/${v.id}`);
    if (S.current === v && !v.es) connect(v);
  } catch (e) {
    toast(e);
    if (e.status === 404) location.hash = '#/';
    else if (e.status !== 401) setTimeout(() => reconnect(v), 5000);
  }
}

function onEvent(v, kind, env) {
  if (env.id <= v.lastSeq) return; // already rendered: never show text twice
  v.lastSeq = env.id;
  const ev = Object.values(env.event)[0]; // externally tagged: {"TextDelta": {...}}
  if (!v.flushTimer) v.stick = !v.pinned && v.log.scrollHeight - v.log.scrollTop - v.log.clientHeight < 120;
  HANDLERS[kind]?.(v, ev, env.timestamp);
  schedule(v);
}

const HANDLERS = {
  run_started(v, ev, ts) {
    v.runs.set(ev.run_id, { content: ev.content, files: [] });
    if (ev.content) {
      stamp(v, ts, 'user');
      add(v, h('div.msg.user', { tid: 'message-user' }, ev.content));
    }
    if (!v.ended.has(ev.run_id)) setRun(v, ev.run_id);
  },
  file_attached(v, ev) {
    v.runs.get(ev.run_id)?.files.push(ev.file.file_id);
    add(v, fileCard(v, ev.file, null, 'file-attached'));
  },
  file_shared: (v, ev) => add(v, fileCard(v, ev.file, ev.caption, 'file-card')),
  follow_up_queued: (v, ev) => add(v, h('div.notice', {}, `Follow-up queued: ${ev.content}`)),
  steering_received: (v, ev) => add(v, h('div.msg.user.steer', { tid: 'message-steer' }, ev.content)),
  text_delta(v, ev, ts) {
    v.deltaSeen = true;
    extend(v, 'assistant', ev.run_id, ts).src += ev.delta;
  },
  text_complete(v, ev, ts) {
    // Deltas normally carry the text; the complete text only fills in when none came.
    if (!v.deltaSeen && ev.text) extend(v, 'assistant', ev.run_id, ts).src = ev.text;
    v.deltaSeen = false;
    v.tail = null;
  },
  thought_delta: (v, ev) => { extend(v, 'thought', ev.run_id).src += ev.delta; },
  plan_updated(v, ev) {
    let plan = v.plans.get(ev.run_id);
    if (!plan) v.plans.set(ev.run_id, (plan = add(v, h('div.plan', { tid: 'plan' }))));
    plan.replaceChildren(h('strong', {}, 'Plan'), h('ul', {},
      ev.entries.map((e) => h('li', { 'data-status': e.status }, e.content))));
  },
  tool_calls_proposed(v, ev) {
    for (const call of ev.tool_calls) if (!v.calls.has(call.id)) addCard(v, call);
  },
  waiting_for_tool_approval(v, ev, ts) {
    for (const id of ev.tool_call_ids) {
      v.waitingSince.set(id, ts);
      v.calls.get(id)?.ask(ev.run_id);
    }
    schedulePending(v);
  },
  tool_execution_started(v, ev, ts) {
    const card = v.calls.get(ev.tool_call_id) ?? addCard(v, { id: ev.tool_call_id, name: ev.name, arguments: null });
    card.answered('Allowed', true, ts, ev.decided_by);
    card.setStatus('running', 'running');
  },
  tool_execution_completed(v, ev, ts) {
    const card = v.calls.get(ev.tool_call_id) ?? addCard(v, { id: ev.tool_call_id, name: 'tool', arguments: null });
    card.answered('Answered', true, ts);
    card.finish(ev.result, ev.is_error);
  },
  tool_rejected(v, ev, ts) {
    const card = v.calls.get(ev.tool_call_id) ?? addCard(v, { id: ev.tool_call_id, name: 'tool', arguments: null });
    card.answered(/timed out/.test(ev.reason) ? 'Timed out' : 'Denied', true, ts, ev.decided_by);
    card.reject(ev.reason);
  },
  notice: (v, ev) => add(v, h('div.notice', { tid: 'notice' }, ev.message)),
  workspace_changed: (v, ev) => add(v, changesCard(v, ev)),
  run_completed(v, ev, ts) {
    const tokens = ev.total_usage?.total_tokens;
    const cancelled = ev.stop_reason === 'cancelled';
    add(v, h('div.run-end', { 'data-stop': ev.stop_reason },
      [cancelled ? 'Run cancelled' : 'Done', `${ev.total_turns} turn(s)`, tokens && `${tokens} tokens`, time(ts)]
        .filter(Boolean).join(' · '), cancelled && retryButton(v, ev.run_id), forkButton(v, v.lastSeq)));
    endRun(v, ev.run_id);
  },
  run_error(v, ev, ts) {
    add(v, h('div.run-error', { tid: 'run-error' },
      `Run failed: ${ev.error}${ev.retryable ? ' (sending again may work)' : ''} · ${time(ts)}`,
      ev.code === 'not_configured' && h('a', { href: '#/settings', tid: 'run-error-settings' }, ' Open Settings'),
      retryButton(v, ev.run_id), forkButton(v, v.lastSeq)));
    endRun(v, ev.run_id);
  },
};

/** The time an item of the transcript happened, above it. */
function stamp(v, ts, who) {
  if (ts) add(v, h(`time.stamp.${who}`, { tid: 'stamp', datetime: ts, title: new Date(ts).toLocaleString() }, time(ts)));
}

/** "Fork here": a new session with this one's history up to the end of this run (`at`, the
 *  run's last event), opened at once (POST /v1/sessions/{id}/fork; built-in agent only:
 *  `.no-fork` hides it for an agent over ACP, which keeps its own history). */
function forkButton(v, at) {
  return h('button.fork', { tid: 'fork', type: 'button', title: 'A new session with the history up to here, to try another direction',
    onclick: guard(async (e) => {
      e.target.disabled = true;
      try {
        const fork = await api('POST', `/v1/sessions/${v.id}/fork?at=${at}`);
        toast(`Forked: ${fork.title}`, 'info');
        location.hash = `#/s/${fork.id}`;
        refreshSoon();
      } finally {
        e.target.disabled = false;
      }
    }) }, 'Fork here');
}

/** Sends the message that started a failed or interrupted run again (its files too). */
function retryButton(v, run) {
  const what = v.runs.get(run);
  if (!what?.content) return null;
  return h('button.retry', { tid: 'retry', type: 'button', onclick: guard(async (e) => {
    e.target.disabled = true;
    const message = { role: 'user', content: what.content };
    if (what.files.length) message.attachments = what.files.map((file_id) => ({ file_id }));
    try {
      const { run_id } = await api('POST', `/v1/sessions/${v.id}/messages`, { message, type: v.activeRun ? 'follow_up' : 'message' });
      if (!v.activeRun && !v.ended.has(run_id)) setRun(v, run_id);
    } catch (err) {
      e.target.disabled = false;
      throw err;
    }
  }) }, 'Retry');
}

function endRun(v, run) {
  v.ended.add(run);
  v.deltaSeen = false;
  if (v.activeRun === run) setRun(v, null);
}

function add(v, el) {
  el.dataset.seq = String(v.lastSeq); // where in the log this item began (a search hit's jump)
  v.log.append(el);
  v.tail = null;
  return el;
}

/** The text or thought block that a delta of `run` extends (a new one after anything else). */
function extend(v, kind, run, ts) {
  if (v.tail?.kind === kind && v.tail.run === run) return (v.dirty.add(v.tail), v.tail);
  if (kind === 'assistant') stamp(v, ts, 'assistant');
  const el = kind === 'assistant'
    ? h('div.msg.assistant.md', { tid: 'message-assistant' })
    : h('details.thought', {}, h('summary', {}, 'Thinking'), h('div.thought-text'));
  const block = { kind, run, el, src: '' };
  add(v, el);
  v.tail = block;
  v.dirty.add(block);
  return block;
}

/** Scrolls to the item of the transcript a search hit points at, and marks it. A message is
 *  recorded after the events that show it (a reply after its deltas, a question with its
 *  run's start, a tool result after its card), so its item began at or before the hit's
 *  seq: of the nearest such items, the first of the hit's kind holding one of its matched
 *  words, else of its kind, else holding a word, else the nearest. */
function jumpTo(v) {
  const { seq, words, role } = v.jump;
  v.jump = null;
  const upTo = (n) => [...v.log.children]
    .filter((el) => !el.matches('time.stamp') && Number(el.dataset.seq) <= n).slice(-8).reverse();
  const near = upTo(seq).length ? upTo(seq) : upTo(seq + 1);
  const kind = { user: '.msg.user', assistant: '.msg.assistant', tool: '.tool' }[role];
  const lower = words.map((w) => w.toLowerCase());
  const says = (el) => lower.some((w) => el.textContent.toLowerCase().includes(w));
  const ofKind = (el) => kind && el.matches(kind);
  const el = near.find((c) => ofKind(c) && says(c)) ?? near.find(ofKind) ?? near.find(says) ?? near[0];
  if (!el) return;
  for (const old of v.log.querySelectorAll('[data-hit]')) old.removeAttribute('data-hit');
  el.dataset.hit = '';
  el.scrollIntoView({ block: 'center' });
  v.stick = false;
  v.pinned = el; // kept in view as the replay goes on (schedule), until the person scrolls
}

/** Renders changed text blocks (at most every 30 ms) and keeps the bottom in view. */
function schedule(v) {
  v.flushTimer ||= setTimeout(() => {
    v.flushTimer = 0;
    for (const b of v.dirty) {
      if (b.kind === 'assistant') {
        b.el.innerHTML = render(b.src); // md.js escapes all model text
        addCopyButtons(b.el);
      } else b.el.lastChild.textContent = b.src;
    }
    v.dirty.clear();
    if (v.jump && v.lastSeq > v.jump.seq) jumpTo(v);
    else if (v.pinned?.isConnected) v.pinned.scrollIntoView({ block: 'center' });
    else if (v.stick) v.log.scrollTop = v.log.scrollHeight;
  }, 30);
}

// ---------- workspace changes: diff and undo ----------

const changeSummary = (files, ins, del) => `${files} file${files === 1 ? '' : 's'} changed, +${ins} −${del}`;

/** What a run changed: the summary, its diff on demand, and Undo (after a confirmation). */
function changesCard(v, ev) {
  const view = h('div.diff-view', { tid: 'diff-view', hidden: true });
  let mode = 'unified';
  let diffText = null;
  const draw = () => view.replaceChildren(...[diffFiles(diffText, mode)].flat());
  const modeBtn = h('button', { tid: 'diff-mode', type: 'button', hidden: true, onclick: () => {
    mode = mode === 'unified' ? 'split' : 'unified';
    modeBtn.textContent = mode === 'unified' ? 'Side by side' : 'Unified';
    draw();
  } }, 'Side by side');
  const toggle = h('button', { tid: 'diff-toggle', type: 'button', onclick: guard(async () => {
    if (diffText === null) diffText = await apiText(`/v1/sessions/${v.id}/diff?run=${ev.run_id}`);
    view.hidden = !view.hidden;
    modeBtn.hidden = view.hidden;
    toggle.textContent = view.hidden ? 'Show diff' : 'Hide diff';
    if (!view.hidden) draw();
  }) }, 'Show diff');
  const confirm = h('span.confirm', { hidden: true }, "Put the workspace back to before this run?",
    h('button.danger', { tid: 'undo-confirm', type: 'button', onclick: guard(() => undoRun(v, ev, card, confirm)) }, 'Undo'),
    h('button', { tid: 'undo-cancel', type: 'button', onclick: () => { confirm.hidden = true; } }, 'Cancel'));
  const card = h('div.changes', { tid: 'workspace-changed', 'data-checkpoint': ev.checkpoint },
    h('div.changes-head', {}, h('strong', {}, changeSummary(ev.files, ev.insertions, ev.deletions)),
      toggle, modeBtn,
      h('button', { tid: 'undo', type: 'button', onclick: () => { confirm.hidden = false; } }, 'Undo'), confirm),
    view);
  return card;
}

async function apiText(path) {
  const res = await fetch(path);
  if (res.ok) return res.text();
  const data = await res.json().catch(() => ({}));
  throw Object.assign(new Error(data.error || `${res.status} ${res.statusText}`), { code: data.code, status: res.status });
}

/** Restores the checkpoint the run started from (its checkpoint's parent). */
async function undoRun(v, ev, card, confirm) {
  const { checkpoints } = await api('GET', `/v1/sessions/${v.id}/checkpoints`);
  const cp = checkpoints.find((c) => c.id === ev.checkpoint);
  if (!cp?.parent) throw new Error('this run has no checkpoint before it');
  const r = await api('POST', `/v1/sessions/${v.id}/checkpoints/${cp.parent}/restore`);
  confirm.hidden = true;
  card.dataset.undone = 'true';
  add(v, h('div.notice', { tid: 'undone' },
    `Workspace put back to before this run: ${changeSummary(r.files, r.insertions, r.deletions)}. `,
    h('button', { tid: 'redo', type: 'button', onclick: guard(async (e) => {
      const again = await api('POST', `/v1/sessions/${v.id}/checkpoints/${r.backup}/restore`);
      e.target.disabled = true;
      toast(`Redone: ${changeSummary(again.files, again.insertions, again.deletions)}.`, 'info');
    }) }, 'Redo')));
  toast('Undone.', 'info');
}

/** A unified diff as one collapsible block per file, unified or side by side. */
function diffFiles(text, mode) {
  if (!text) return h('div.notice', {}, 'No changes.');
  const files = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('diff --git ')) {
      const m = / b\/(.*)$/.exec(line);
      files.push({ path: m ? m[1] : line, lines: [], add: 0, del: 0 });
    } else if (files.length) {
      const f = files[files.length - 1];
      f.lines.push(line);
      if (line.startsWith('+') && !line.startsWith('+++')) f.add++;
      if (line.startsWith('-') && !line.startsWith('---')) f.del++;
    }
  }
  return files.map((f) => h('details.diff-file', { tid: 'diff-file', open: true },
    h('summary', {}, h('span.diff-path', {}, f.path), h('span.diff-count', {}, ` +${f.add} −${f.del}`)),
    mode === 'unified' ? unified(f.lines) : sideBySide(f.lines)));
}

function lineKind(l) {
  if (l.startsWith('@@')) return 'hunk';
  if (l.startsWith('+++') || l.startsWith('---') || /^(index|new file|deleted file|old mode|new mode|similarity|rename|Binary files)/.test(l)) return 'meta';
  if (l.startsWith('+')) return 'add';
  if (l.startsWith('-')) return 'del';
  return 'ctx';
}

function unified(lines) {
  return h('pre.diff', {}, lines.filter((l) => l !== '').map((l) => {
    const kind = lineKind(l);
    return h(`span.diff-line.${kind}`, { tid: `diff-line-${kind}` }, `${l}\n`);
  }));
}

/** Context on both sides; a run of removals paired row by row with the additions after it. */
function sideBySide(lines) {
  const rows = [];
  let dels = [];
  let adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i] ?? null, adds[i] ?? null]);
    dels = [];
    adds = [];
  };
  for (const l of lines) {
    const kind = lineKind(l);
    if (kind === 'del') dels.push(l.slice(1));
    else if (kind === 'add') adds.push(l.slice(1));
    else {
      flush();
      if (kind === 'ctx' && l !== '') rows.push([l.slice(1), l.slice(1), true]);
      else if (kind === 'hunk' || (kind === 'meta' && l.startsWith('Binary'))) rows.push([l, null, 'hunk']);
    }
  }
  flush();
  const cell = (text, kind) => h(`td.${text === null ? 'empty' : kind}`, {}, text ?? '');
  return h('table.diff-split', { tid: 'diff-split' }, h('tbody', {}, rows.map(([a, b, same]) => (same === 'hunk'
    ? h('tr', {}, h('td.hunk', { colspan: 2 }, a))
    : h('tr', {}, cell(a, same ? 'ctx' : 'del'), cell(b, same ? 'ctx' : 'add'))))));
}

// ---------- tool cards and approvals ----------

/** Monospace text; a long one collapses into a <details> unless it must be seen in full. */
function pre(text, cls = '', collapse = true) {
  const body = h(`pre${cls}`, {}, text);
  const lines = text.split('\n').length;
  return collapse && (lines > 16 || text.length > 1500) ? h('details', {}, h('summary', {}, `${lines} lines`), body) : body;
}

function preview({ name, arguments: a }) {
  const args = a && typeof a === 'object' ? a : {};
  const path = typeof args.path === 'string' && h('div.path', {}, args.path);
  if (name === 'run_command' && typeof args.command === 'string') return pre(`$ ${args.command}`, '.cmd', false);
  if (name === 'create' && path) return [path, pre(String(args.file_text ?? ''))];
  if (name === 'str_replace' && path) {
    const lines = (s, sign, cls) => String(s ?? '').split('\n').map((l) => h(`span.${cls}`, {}, `${sign} ${l}\n`));
    return [path, h('pre.diff', {}, lines(args.old_str, '-', 'del'), lines(args.new_str, '+', 'ins'))];
  }
  if ((name === 'view' || name === 'remove') && path) return path;
  return a == null ? null : pre(JSON.stringify(a, null, 2));
}

class ToolCard {
  constructor(v, call) {
    Object.assign(this, { v, id: call.id, name: call.name, run: null, waiting: false, final: false, box: null });
    this.status = h('span.status', { tid: 'tool-status' }, 'proposed');
    this.el = h('div.tool', { tid: 'tool-card', 'data-call-id': call.id },
      h('div.tool-head', {}, h('span.tool-name', {}, call.name), this.status), preview(call));
  }

  setStatus(text, state) {
    this.status.textContent = text;
    this.el.dataset.state = state;
  }

  /** The call waits for a decision in `run`. */
  ask(run) {
    if (this.final) return;
    Object.assign(this, { run, waiting: true });
    this.box ??= this.approvalBox();
    for (const b of this.buttons) b.disabled = false;
    this.label.textContent = '';
    this.box.classList.remove('answered');
    this.setStatus('waiting for approval', 'waiting');
  }

  approvalBox() {
    const always = h('button', { tid: 'always-allow', type: 'button', title: 'Adds the tool to this session\'s auto_approve list',
      onclick: () => this.decide('always') }, `Always allow ${this.name} here`);
    Object.assign(this, approvalControls((action, reason) => this.decide(action, reason), [always]));
    const box = h('div.approval', { tid: 'approval-card' }, this.row, this.form);
    this.el.append(box);
    return box;
  }

  async decide(action, content) {
    for (const b of this.buttons) b.disabled = true;
    // The run's events may say the call was answered before this request returns.
    this.mine = true;
    try {
      if (action === 'always') await allowAlways(this.v, this.name);
      await decideCalls(this.v.id, this.run, { [this.id]: action === 'always' ? 'accept' : action }, content);
      this.answered(action === 'reject' ? 'Denied' : 'Allowed', true);
    } catch (e) {
      this.mine = false;
      if (e.status !== 409) { // 409: answered elsewhere already; pending tells us
        toast(e);
        for (const b of this.buttons) b.disabled = false;
      }
      schedulePending(this.v);
    }
    refreshSoon();
  }

  /** The call no longer waits; `certain` when we know the answer (not just "gone from
   *  pending"). The approval box folds to one line: the answer, by whom, after how long. */
  answered(label, certain, ts, by) {
    if (this.final) return;
    this.final = certain;
    this.waiting = false;
    if (!this.box) return;
    for (const b of this.buttons) b.disabled = true;
    this.form.hidden = true;
    const since = this.v.waitingSince.get(this.id);
    const took = since && Date.parse(ts ?? new Date().toISOString()) - Date.parse(since);
    const who = this.mine ? `${label} by you` : by ? `${label} by ${by}` : label;
    this.label.textContent = [who, took >= 0 && ago(took)].filter(Boolean).join(' · ');
    this.box.dataset.answer = label.toLowerCase();
    this.box.classList.add('answered');
  }

  finish(result, isError) {
    this.setStatus(isError ? 'failed' : 'done', isError ? 'error' : 'done');
    this.el.append(h('div.output', { tid: 'tool-output' }, pre(result)));
  }

  reject(reason) {
    this.setStatus('rejected', 'rejected');
    this.el.append(h('div.reason', { tid: 'tool-reason' }, reason));
  }
}

function addCard(v, call) {
  const card = new ToolCard(v, call);
  v.calls.set(call.id, card);
  add(v, card.el);
  return card;
}

/** Allow, Deny and Deny with reason (which opens a reason box), calling `decide(action,
 *  reason)`; `extra` buttons go after them. The session view's cards and the inbox use it. */
function approvalControls(decide, extra = []) {
  const reason = h('input', { tid: 'deny-reason-text', placeholder: 'Reason (the model is told)', 'aria-label': 'Reason' });
  const submit = h('button.danger', { tid: 'deny-reason-submit' }, 'Deny');
  const form = h('form.reason-form', { hidden: true }, reason, submit);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    decide('reject', reason.value.trim());
  });
  const shown = [
    h('button.allow', { tid: 'allow', type: 'button', onclick: () => decide('accept') }, 'Allow'),
    h('button.danger', { tid: 'deny', type: 'button', onclick: () => decide('reject') }, 'Deny'),
    h('button', { tid: 'deny-reason', type: 'button', onclick: () => { form.hidden = false; reason.focus(); } }, 'Deny with reason'),
    ...extra,
  ];
  const label = h('span.answer', { tid: 'approval-status' });
  return { buttons: [...shown, submit], label, form, row: h('div.approval-buttons', {}, shown, label) };
}

/** Decides calls of a waiting run: `{call id: action}`, with one reason for rejections. */
function decideCalls(session, run, actions, reason) {
  const decisions = {};
  for (const [id, action] of Object.entries(actions)) {
    decisions[id] = action === 'reject' && reason ? { action, content: reason } : { action };
    decisions[id].by = 'the web console'; // who decided, as the other surfaces show it
  }
  return api('POST', `/v1/sessions/${session}/tools/decisions`, { run_id: run, decisions });
}

/** "12 s", "3 min", "2 h 5 min". */
function ago(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** Code blocks of a rendered reply get a Copy button (the block scrolls sideways, never wraps). */
function addCopyButtons(root) {
  for (const pre of root.querySelectorAll('pre')) {
    const code = pre.querySelector('code') ?? pre;
    const btn = h('button.copy', { tid: 'copy-code', type: 'button', title: 'Copy to the clipboard' }, 'Copy');
    btn.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(code.textContent);
        btn.textContent = 'Copied';
      } catch (e) {
        btn.textContent = 'Copy failed';
        toast(new Error(`cannot copy: ${e.message}`));
      }
      setTimeout(() => { btn.textContent = 'Copy'; }, 1500);
    });
    const block = h('div.code-block');
    pre.replaceWith(block);
    block.append(btn, pre);
  }
}

/** The pending list is the source of truth for what still waits (coalesced, 200 ms). */
function schedulePending(v) {
  clearTimeout(v.pendingTimer);
  v.pendingTimer = setTimeout(() => syncPending(v).catch(toast), 200);
}

async function syncPending(v) {
  const p = await api('GET', `/v1/sessions/${v.id}/tools/pending`);
  const waiting = new Set(p.tool_calls.map((c) => c.id));
  for (const call of p.tool_calls) (v.calls.get(call.id) ?? addCard(v, call)).ask(p.run_id);
  for (const card of v.calls.values()) if (card.waiting && !waiting.has(card.id)) card.answered('Answered', false);
}

// ---------- approvals: one stream for the header badge, the inbox and notifications ----------

const A = {
  waiting: new Map(), // "session/run" → WaitingApproval
  es: null,
  down: false, // the stream is down: the banner shows, badges are stale
  backTimer: 0,
};
const akey = (a) => `${a.session_id}/${a.run_id}`;

/** `GET /v1/approvals/events`: a snapshot, then changes. It is also how the console knows
 *  whether it can reach the server (the banner). A tab in the background holds no stream
 *  unless it notifies (browsers allow a handful of connections per server over HTTP/1.1,
 *  shared by every tab). */
function openApprovals() {
  A.es?.close();
  A.es = null;
  if (document.hidden && !notifyOn()) return;
  const es = new EventSource('/v1/approvals/events');
  const on = (kind, fn) => es.addEventListener(kind, (e) => { fn(JSON.parse(e.data)); approvalsChanged(); });
  on('snapshot', ({ approvals }) => { A.waiting = new Map(approvals.map((a) => [akey(a), a])); });
  on('approval_requested', (a) => { A.waiting.set(akey(a), a); notifyApproval(a); });
  on('approval_updated', (a) => { A.waiting.set(akey(a), a); });
  on('approval_resolved', (a) => { A.waiting.delete(akey(a)); });
  es.addEventListener('open', () => connection(true));
  es.addEventListener('error', () => {
    if (A.es !== es) return;
    // Still connecting: the server went away and the browser retries by itself.
    if (es.readyState !== EventSource.CLOSED) return connection(false);
    // Closed: the server answered with an error. Signed out (api() then shows the sign-in),
    // refusing for a moment (503), or gone: ask, then open again.
    A.es = null;
    setTimeout(() => {
      if (!S.me || A.es) return;
      api('GET', '/v1/console/me').then(() => {
        connection(true);
        if (S.me && !A.es) openApprovals();
      }, (e) => {
        if (e.status === 401) return;
        connection(false);
        setTimeout(() => { if (S.me && !A.es) openApprovals(); }, 3000);
      });
    }, 1000);
  });
  A.es = es;
}

document.addEventListener('visibilitychange', () => {
  if (!S.me) return;
  const v = S.current;
  if (document.hidden) {
    if (!notifyOn()) { A.es?.close(); A.es = null; }
    if (v?.es) { v.es.close(); v.es = null; }
  } else {
    if (!A.es) openApprovals();
    if (v && !v.es) connect(v); // resumes after the last event it showed
  }
});

function closeApprovals() {
  A.es?.close();
  A.es = null;
  A.waiting.clear();
  approvalsChanged();
}

function approvalsChanged() {
  const n = [...A.waiting.values()].reduce((sum, a) => sum + a.tool_calls.length, 0);
  const badge = $('inbox-badge');
  badge.hidden = n === 0;
  badge.textContent = String(n);
  badge.title = `${n} tool call${n === 1 ? '' : 's'} waiting for approval`;
  drawInbox();
}

/** The banner: "reconnecting…" while the stream is down, "back" for a moment after. */
function connection(up) {
  const el = $('conn');
  if (!up) {
    if (A.down) return;
    A.down = true;
    clearTimeout(A.backTimer);
    document.body.classList.add('stale');
    el.hidden = false;
    el.dataset.state = 'down';
    el.textContent = 'Connection to the server lost — reconnecting… Badges and run states may be out of date.';
    return;
  }
  if (!A.down) return;
  A.down = false;
  document.body.classList.remove('stale');
  el.dataset.state = 'back';
  el.textContent = 'Connected again.';
  A.backTimer = setTimeout(() => { el.hidden = true; }, 2500);
  refreshSessions().catch(toast);
  const v = S.current;
  if (v && !v.es) connect(v);
}

const NOTIFY_KEY = 'switchboard.notify';
const notifyOn = () => localStorage.getItem(NOTIFY_KEY) === 'on';

/** A system notification for a new approval, only while the tab is in the background:
 *  through the service worker where there is one (phones only allow that), else the page's
 *  own. Never throws. */
async function notifyApproval(a) {
  if (!notifyOn() || !document.hidden || !('Notification' in window) || Notification.permission !== 'granted') return;
  const title = `Approval needed: ${a.session_title}`;
  const options = { body: a.tool_calls.map((c) => c.name).join(', '), tag: akey(a), data: { open: '#/inbox' } };
  try {
    const reg = await navigator.serviceWorker?.getRegistration();
    if (reg?.active) return await reg.showNotification(title, options);
  } catch (e) {
    console.warn('notification through the service worker failed', e);
  }
  try {
    const n = new Notification(title, options);
    n.addEventListener('click', () => {
      window.focus();
      location.hash = '#/inbox';
      n.close();
    });
  } catch (e) {
    console.warn('notification failed', e);
  }
}

// A click on a notification (shown by the service worker) opens the inbox here.
navigator.serviceWorker?.addEventListener('message', (e) => {
  if (typeof e.data?.open === 'string' && e.data.open.startsWith('#/')) location.hash = e.data.open;
});

function notifyToggle() {
  const box = h('input', { type: 'checkbox', tid: 'notify-toggle', checked: notifyOn() && Notification.permission === 'granted' });
  box.addEventListener('change', guard(async () => {
    if (!box.checked) return localStorage.setItem(NOTIFY_KEY, 'off');
    if (!('Notification' in window)) throw new Error('this browser has no notifications');
    const permission = Notification.permission === 'default' ? await Notification.requestPermission() : Notification.permission;
    if (permission !== 'granted') {
      box.checked = false;
      throw new Error('notifications are blocked for this site: allow them in the browser\'s site settings');
    }
    localStorage.setItem(NOTIFY_KEY, 'on');
    toast('You will be notified of new approvals while this tab is in the background.', 'info');
  }));
  return h('label.notify', {}, box, ' Notify me when an approval arrives in the background');
}

// ---------- the inbox ----------

const I = { list: null, items: new Map(), empty: null }; // items: key → { el, calls: Map(call id → el), title }

function openInbox() {
  I.list = h('div.inbox-list', { tid: 'inbox-list' });
  I.items.clear();
  I.empty = h('div.empty', { tid: 'inbox-empty' }, 'Nothing is waiting for you.');
  $('main').replaceChildren(h('section.inbox', {},
    h('div.inbox-head', {}, h('h2', {}, 'Approvals waiting'), notifyToggle()),
    h('p.muted', {}, 'Every tool call waiting for a decision, in every session, newest first. Unanswered calls are rejected when their time runs out.'),
    I.list));
  drawInbox();
}

/** Brings the inbox to A.waiting. Items and their calls are kept and updated in place, and
 *  the list's elements move only when the order changes: a reason being typed keeps its
 *  focus whatever else arrives or goes. */
function drawInbox() {
  if (!I.list) return;
  const all = [...A.waiting.values()].sort((x, y) => y.created_at.localeCompare(x.created_at));
  const next = new Map();
  for (const a of all) {
    const item = I.items.get(akey(a)) ?? inboxItem(a);
    updateItem(item, a);
    next.set(akey(a), item);
  }
  I.items = next;
  const want = all.length ? [...next.values()].map((x) => x.el) : [I.empty];
  for (const el of [...I.list.children]) if (!want.includes(el)) el.remove();
  want.forEach((el, i) => {
    if (I.list.children[i] !== el) I.list.insertBefore(el, I.list.children[i] ?? null);
  });
  tickInbox();
}

function inboxItem(a) {
  const item = { calls: new Map(), title: h('a.inbox-session', { href: `#/s/${a.session_id}`, tid: 'inbox-session' }) };
  item.body = h('div.inbox-calls');
  item.el = h('article.inbox-item.panel', { tid: 'inbox-item', 'data-session-id': a.session_id, 'data-run-id': a.run_id },
    h('div.inbox-item-head', {}, item.title,
      h('span.muted', {}, backendLabel(a.backend)),
      h('span.muted', { tid: 'inbox-age', 'data-since': a.created_at }),
      h('span.left', { tid: 'inbox-left', 'data-until': a.expires_at })),
    item.body);
  return item;
}

function updateItem(item, a) {
  item.title.textContent = a.session_title;
  const ids = new Set(a.tool_calls.map((c) => c.id));
  for (const [id, el] of item.calls) if (!ids.has(id)) { el.remove(); item.calls.delete(id); }
  for (const call of a.tool_calls) {
    if (!item.calls.has(call.id)) {
      const el = inboxCall(a, call);
      item.calls.set(call.id, el);
      item.body.append(el);
    }
  }
}

function inboxCall(a, call) {
  const controls = approvalControls(guard(async (action, reason) => {
    for (const b of controls.buttons) b.disabled = true;
    try {
      await decideCalls(a.session_id, a.run_id, { [call.id]: action }, reason);
      controls.label.textContent = action === 'accept' ? 'Allowed by you' : 'Denied by you';
      controls.form.hidden = true;
    } catch (e) {
      for (const b of controls.buttons) b.disabled = false;
      throw e;
    }
  }));
  return h('div.inbox-call', { tid: 'inbox-call', 'data-call-id': call.id },
    h('div.tool-head', {}, h('span.tool-name', {}, call.name)), preview(call), controls.row, controls.form);
}

/** Ages and time left, every second while the inbox is open. */
function tickInbox() {
  if (!I.list) return;
  const now = Date.now();
  for (const el of I.list.querySelectorAll('[data-since]')) el.textContent = `waiting ${ago(now - Date.parse(el.dataset.since))}`;
  for (const el of I.list.querySelectorAll('[data-until]')) {
    const left = Date.parse(el.dataset.until) - now;
    el.textContent = left > 0 ? `rejected unanswered in ${ago(left)}` : 'timing out…';
    el.classList.toggle('soon', left < 60_000);
  }
}
setInterval(tickInbox, 1000);

// ---------- channels: the chat gateway ----------

const G = { root: null, ledger: null };

function openChannels() {
  G.root = h('section.channels', { tid: 'channels' }, h('div.empty', {}, 'Loading…'));
  G.ledger = ledgerPanel({ h, api, guard, toast });
  $('main').replaceChildren(G.root);
  refreshChannels().catch(toast);
}

async function refreshChannels() {
  if (!G.root || document.body.dataset.page !== 'channels') return;
  let status;
  try {
    status = await api('GET', '/v1/gateway/status');
  } catch (e) {
    if (e.status !== 404) throw e;
    return fill(G.root, h('div.panel.empty', { tid: 'gateway-off' }, 'No chat channel is connected. Connect Telegram, Slack or Discord in ',
      h('a', { href: '#/settings' }, 'Settings'), ' (a webhook channel, or a gateway turned off with ', h('code', {}, '[gateway] enabled = false'),
      ', is set in switchboard.toml).'));
  }
  const [{ sessions }, pairing, { parked }] = await Promise.all([
    api('GET', '/v1/gateway/sessions'),
    api('GET', '/v1/gateway/pairing').catch((e) => (e.status === 404 ? { requests: [] } : Promise.reject(e))),
    api('GET', '/v1/gateway/parked').catch((e) => (e.status === 404 ? { parked: [] } : Promise.reject(e))),
  ]);
  if (document.body.dataset.page !== 'channels') return;
  await G.ledger.refresh();
  // Redrawn only when something changed: a reply being typed is not lost every 3 s.
  const key = JSON.stringify([status, sessions, pairing, parked]);
  if (G.root.dataset.key === key) return;
  G.root.dataset.key = key;
  fill(G.root,
    h('div.panel', {}, h('h2', {}, 'Channels'),
      h('p.muted', {}, `This instance is ${status.role || 'active'}. ${status.active_runs} run(s) under way, ${status.queued_messages} message(s) queued, ${status.pending_approvals} approval(s) waiting in chats.`),
      status.channels.length ? h('ul.channel-list', {}, status.channels.map(channelRow))
        : h('p.muted', {}, 'No channel is configured.')),
    h('div.panel', {}, h('h2', {}, 'Pairing requests'),
      pairing.requests.length ? h('ul.pairing-list', {}, pairing.requests.map(pairingRow))
        : h('p.muted', { tid: 'pairing-empty' }, 'No one is waiting to be let in. When someone new writes to the bot in a direct message, their request shows here.')),
    parked.length > 0 && h('div.panel', { tid: 'parked' }, h('h2', {}, 'Set aside'),
      h('p.muted', {}, 'Messages the agent refused for good (too many files, too long …). The chat was told; its later messages went through.'),
      h('ul.parked-list', {}, parked.map((p) => h('li.parked', { tid: 'parked-batch', 'data-id': p.id },
        h('strong', {}, `${p.channel} ${p.chat?.id ?? ''}`), ' — ',
        p.senders.map(peerName).join(', '), ` · ${new Date(p.parked_at).toLocaleString()} · `,
        h('code', {}, p.code), ` ${p.error}`,
        p.files ? ` · ${p.files} file(s)` : '',
        h('pre.parked-text', {}, p.text.length > 600 ? `${p.text.slice(0, 600)}…` : p.text))))),
    h('div.panel', {}, h('h2', {}, 'Conversations'),
      sessions.length ? h('table.conversations', {}, h('thead', {}, h('tr', {}, ['Chat', 'Session', 'Last activity', ''].map((t) => h('th', {}, t)))),
        h('tbody', {}, sessions.map(conversationRow)))
        : h('p.muted', {}, 'No chat has talked to an agent yet.')),
    G.ledger.panel);
}

function channelRow(c) {
  const state = c.state ?? c.status;
  const since = c.since ? ` since ${new Date(c.since).toLocaleTimeString()}` : '';
  return h('li.channel', { tid: 'channel', 'data-channel': c.name, 'data-state': state },
    h('strong', {}, c.name), ' ', h(`span.channel-state.${state}`, { tid: 'channel-state' }, state),
    c.reason && h('span.channel-reason', { tid: 'channel-reason' }, ` — ${c.reason}${since}`),
    !c.reason && c.last_error && h('span.channel-reason', {}, ` (last error ${new Date(c.last_error_at).toLocaleString()}: ${c.last_error})`),
    c.last_received_at && h('span.channel-reason', { tid: 'channel-received' }, ` · last received ${new Date(c.last_received_at).toLocaleString()}`));
}

const peerName = (p) => [p?.name, p?.username && `@${p.username}`, p?.id && `(${p.id})`].filter(Boolean).join(' ');

function pairingRow(p) {
  const act = (verb) => guard(async (e) => {
    e.target.disabled = true;
    try {
      await api('POST', `/v1/gateway/pairing/${verb}`, { channel: p.channel, code: p.code });
      toast(verb === 'approve' ? `${peerName(p.peer)} may chat now.` : 'Request refused.', 'info');
      delete G.root.dataset.key;
      await refreshChannels();
    } finally {
      e.target.disabled = false;
    }
  });
  return h('li.pairing', { tid: 'pairing-request', 'data-code': p.code, 'data-channel': p.channel },
    h('span', {}, `${p.channel}: `, h('strong', {}, peerName(p.peer) || 'someone'), ` — code ${p.code}`),
    h('span.muted', {}, p.expires_at ? ` · expires ${new Date(p.expires_at).toLocaleTimeString()}` : ''),
    h('button.primary', { tid: 'pairing-approve', type: 'button', onclick: act('approve') }, 'Let in'),
    h('button.danger', { tid: 'pairing-refuse', type: 'button', onclick: act('refuse') }, 'Refuse'));
}

function conversationRow(s) {
  const chat = s.chat ?? {};
  const test = guard(async (e) => {
    e.target.disabled = true;
    try {
      // Where this conversation's replies go: its chat, thread and kind.
      const body = { channel: s.channel, target: String(chat.id), text: 'Test message from the Switchboard console.' };
      if (chat.thread) body.thread = String(chat.thread);
      if (chat.kind) body.kind = chat.kind;
      await api('POST', '/v1/gateway/send', body);
      toast(`Test message sent to ${s.routing_key}.`, 'info');
    } finally {
      e.target.disabled = false;
    }
  });
  return h('tr', { tid: 'conversation', 'data-routing-key': s.routing_key },
    h('td', {}, h('code', {}, s.routing_key), s.peer ? ` ${peerName(s.peer)}` : ''),
    h('td', {}, h('a', { href: `#/s/${s.session_id}` }, s.bound === false ? 'unbound' : 'open')),
    h('td', { tid: 'conversation-activity' }, s.last_activity ? new Date(s.last_activity).toLocaleString() : '—'),
    h('td', {}, h('button', { tid: 'conversation-messages', type: 'button',
      onclick: guard(() => G.ledger.show({ channel: s.channel, chat: String(chat.id), label: s.routing_key })) }, 'Messages'),
    ' ', h('button', { tid: 'send-test', type: 'button', onclick: test }, 'Send test message')));
}

// ---------- schedules ----------

const C = { id: null }; // the rest is set by schedulesView()

const when = (ts) => (ts ? new Date(ts).toLocaleString() : '');
const clip = (t, n) => (t.length > n ? `${t.slice(0, n - 1)}…` : t);

function schedulesView() {
  const kind = h('select', { tid: 'schedule-kind', 'aria-label': 'When' },
    ['cron', 'every', 'at', 'in'].map((k) => h('option', { value: k }, k)));
  const value = h('input', { tid: 'schedule-when', placeholder: '0 9 * * 1-5', required: true });
  const tz = h('input', { tid: 'schedule-tz', placeholder: 'Europe/Berlin (cron only; default UTC)' });
  const name = h('input', { tid: 'schedule-name', placeholder: 'optional' });
  const deliver = h('input', { tid: 'schedule-deliver', placeholder: 'telegram:123, slack:C123/1712.5 (optional)' });
  const approvals = h('select', { tid: 'schedule-approvals', 'aria-label': 'Approvals' },
    h('option', { value: 'deny' }, 'deny (fail closed)'), h('option', { value: 'ask' }, 'ask in the first chat'));
  const prompt = h('textarea', { tid: 'schedule-prompt', rows: 3, placeholder: 'check CI and summarise failures', required: true });
  const add = h('button.primary', { tid: 'schedule-add' }, 'Add schedule');
  const hints = { cron: '0 9 * * 1-5', every: '30m', at: '2026-12-24T09:00:00Z', in: '2h' };
  kind.addEventListener('change', () => {
    value.placeholder = hints[kind.value];
    tz.disabled = kind.value !== 'cron';
  });
  const form = h('form.panel.schedule-add', { tid: 'schedule-form' },
    h('h3', {}, 'New schedule'),
    h('div.row', {}, field('When', kind), field('Expression', value), field('Time zone', tz)),
    field('Prompt', prompt),
    h('div.row', {}, field('Name', name), field('Deliver to', deliver), field('Approvals', approvals)),
    h('div.row', {}, add));
  form.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    const body = { prompt: prompt.value.trim(), approvals: approvals.value };
    body[kind.value] = value.value.trim();
    if (kind.value === 'cron' && tz.value.trim()) body.tz = tz.value.trim();
    if (name.value.trim()) body.name = name.value.trim();
    const targets = deliver.value.split(',').map((t) => t.trim()).filter(Boolean);
    if (targets.length) body.deliver = targets;
    add.disabled = true;
    try {
      const s = await api('POST', '/v1/schedules', body);
      toast(`Scheduled: ${s.name} (${s.trigger})`, 'info');
      prompt.value = '';
      value.value = '';
      name.value = '';
      location.hash = `#/schedules/${s.id}`;
    } finally {
      add.disabled = false;
    }
    await refreshSchedules();
  }));
  Object.assign(C, {
    list: h('tbody', { tid: 'schedules' }),
    heading: h('h3'),
    firings: h('tbody', { tid: 'firings' }),
  });
  C.detail = h('div.panel', { tid: 'schedule-detail', hidden: true },
    C.heading,
    h('div.table-wrap', {}, h('table.firings', {},
      h('thead', {}, h('tr', {}, ['Due', 'Status', 'Started', 'Outcome', 'Delivery', ''].map((c) => h('th', {}, c)))),
      C.firings)));
  return h('section.schedules', {},
    h('div.table-wrap', {}, h('table', {},
      h('thead', {}, h('tr', {}, ['Name', 'When', 'Next firing', 'Delivers to', ''].map((c) => h('th', {}, c)))),
      C.list)),
    C.detail, form);
}

function openSchedules(id) {
  C.root ??= schedulesView();
  $('main').replaceChildren(C.root);
  if (id !== C.id) {
    C.id = id ?? null;
    C.firings.replaceChildren();
    C.key = '';
  }
  refreshSchedules().catch(toast);
}

async function refreshSchedules() {
  const { schedules } = await api('GET', '/v1/schedules');
  const act = (label, tid, fn) => h('button', { tid, type: 'button', onclick: guard(async (e) => {
    e.currentTarget.disabled = true;
    try { await fn(); } finally { await refreshSchedules(); }
  }) }, label);
  fill(C.list, schedules.map((s) => h(`tr.schedule-row${s.id === C.id ? '.active' : ''}`,
    { tid: 'schedule-row', 'data-schedule-id': s.id, 'data-paused': String(s.paused) },
    h('td', {}, h('a', { href: `#/schedules/${s.id}`, tid: 'schedule-name-link' }, s.name)),
    h('td', {}, s.trigger),
    h('td', { tid: 'schedule-next' }, s.paused ? 'paused' : s.next_due ? when(s.next_due) : 'done'),
    h('td', {}, (s.spec.deliver ?? []).join(', ') || h('span.muted', {}, 'stored only')),
    h('td.actions', {},
      act('Run now', 'schedule-run', () => api('POST', `/v1/schedules/${s.id}/run`)
        .then(() => { location.hash = `#/schedules/${s.id}`; })),
      act(s.paused ? 'Resume' : 'Pause', 'schedule-pause', () => api('PATCH', `/v1/schedules/${s.id}`, { paused: !s.paused })),
      act('Delete', 'schedule-delete', async () => {
        if (!confirm(`Delete the schedule “${s.name}” and its history?`)) return;
        await api('DELETE', `/v1/schedules/${s.id}`);
        if (C.id === s.id) location.hash = '#/schedules';
      })))),
  schedules.length ? null : h('tr', {}, h('td.muted', { colspan: 5 },
    'No schedules yet. Add one below, with `switchboard schedule add`, or /schedule in a chat.')));
  const mine = schedules.find((s) => s.id === C.id);
  C.detail.hidden = !mine;
  if (!mine) return;
  C.heading.textContent = `History of ${mine.name}`;
  const { firings } = await api('GET', `/v1/schedules/${mine.id}/firings`);
  const key = JSON.stringify(firings);
  if (key === C.key) return;
  C.key = key;
  fill(C.firings, firings.map((f) => h('tr', { tid: 'firing', 'data-status': f.status },
    h('td', {}, when(f.due_at), f.manual ? h('span.muted', {}, ' (by hand)') : null),
    h('td', {}, h(`span.status.${f.status}`, {}, f.status),
      f.skip_reason ? h('span.muted', {}, ` (${f.skip_reason}${f.more_skipped ? `, ${f.more_skipped} more` : ''})`) : null),
    h('td', {}, f.started_at ? when(f.started_at) : ''),
    h('td', { tid: 'firing-outcome' },
      f.session_id ? h('a', { href: `#/s/${f.session_id}` }, clip(f.reply ?? f.outcome ?? 'session', 160)) : (f.outcome ?? ''),
      f.rejected_tools?.length ? h('div.muted', {}, `not run: ${f.rejected_tools.join(', ')}`) : null),
    h('td', {}, (f.deliveries ?? []).map((d) => h(`div.delivery.${d.status}`, { tid: 'delivery', 'data-status': d.status },
      `${d.target}: ${d.status}${d.attempts > 1 ? ` after ${d.attempts} tries` : ''}${d.error && d.status !== 'delivered' ? ` — ${d.error}` : ''}`))),
    h('td', {}, (f.deliveries ?? []).some((d) => d.status === 'failed')
      ? act('Retry delivery', 'firing-redeliver', () => api('POST', `/v1/schedules/${mine.id}/firings/${f.id}/deliver`))
      : null))),
  firings.length ? null : h('tr', {}, h('td.muted', { colspan: 6 }, 'No firings yet.')));
}

// ---------- relay ----------

const R = { name: null, look: null, lookTimer: 0 }; // the rest is set by relayView()

function relayView() {
  const from = h('input', { tid: 'relay-from', value: 'alice', list: 'relay-principals', 'aria-label': 'From' });
  const to = h('select', { tid: 'relay-to', 'aria-label': 'To' });
  const message = h('textarea', { tid: 'relay-message', rows: 3, placeholder: 'Message' });
  const sync = h('input', { tid: 'relay-sync', type: 'checkbox', checked: true });
  const send = h('button.primary', { tid: 'relay-send' }, 'Send');
  const outcome = h('div.outcome', { tid: 'relay-outcome' });
  const form = h('form.panel.relay-send', {},
    h('h3', {}, 'Send a message'),
    h('div.row', {}, field('From', from), field('To', to)),
    message,
    h('div.row', {}, h('label.check', {}, sync, ' wait for delivery (sync)'), send),
    outcome);
  form.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    const body = { sender: from.value.trim(), message: message.value, delivery: sync.checked ? 'sync' : 'async' };
    if (to.value === '*') body.broadcast = true;
    else body.targets = [to.value];
    send.disabled = true;
    outcome.replaceChildren(h('span.muted', {}, 'sending…'));
    try {
      const r = await api('POST', `/v1/relay/bundles/${encodeURIComponent(R.name)}/send`, body);
      fill(outcome, h('div', {}, `status: ${r.status}`), r.results.map((t) =>
        h(`div.result.${t.outcome}`, { tid: 'relay-outcome-row' },
          `${t.target}: ${t.outcome}${t.reason_code ? ` (${t.reason_code}${t.reason ? `: ${t.reason}` : ''})` : ''}`)));
      message.value = '';
    } catch (err) {
      outcome.replaceChildren();
      throw err;
    } finally {
      send.disabled = false;
    }
    await refreshRelay();
  }));

  const hosting = (verb) => guard(async (e) => {
    const button = e.currentTarget;
    button.disabled = true;
    try {
      const r = await api('POST', `/v1/relay/bundles/${encodeURIComponent(R.name)}/${verb}`);
      toast(`${verb}: ${r.result}${r.reason_code ? ` (${r.reason_code})` : ''}`, 'info');
      for (const m of r.members.filter((m) => m.result === 'failed')) toast(`${m.id}: ${m.reason ?? m.code}`);
    } finally {
      button.disabled = false;
    }
    await refreshRelay();
  });

  Object.assign(R, {
    from, to, outcome,
    list: h('ul.bundle-list', { tid: 'bundles' }),
    heading: h('h2'),
    state: h('span.pill', { tid: 'bundle-state' }),
    failures: h('div.muted'),
    members: h('tbody'),
    principals: h('datalist', { id: 'relay-principals' }),
    lookTitle: h('strong'),
    lookInfo: h('span.muted'),
    lookOut: h('pre.look-output', { tid: 'look-output' }),
    audit: h('tbody'),
  });
  R.lookPanel = h('div.panel.look', { tid: 'look', hidden: true },
    h('div.row', {}, R.lookTitle, R.lookInfo, h('button', { tid: 'look-close', type: 'button', onclick: closeLook }, 'Close')),
    R.lookOut);
  R.detail = h('div.bundle-detail', { hidden: true },
    h('div.bundle-head', {}, R.heading, R.state,
      h('button', { tid: 'relay-up', type: 'button', onclick: hosting('up') }, 'Up'),
      h('button', { tid: 'relay-down', type: 'button', onclick: hosting('down') }, 'Down')),
    R.failures,
    h('div.table-wrap', {}, h('table', { tid: 'members' },
      h('thead', {}, h('tr', {}, ['Member', 'Transport', 'Ready', 'Queued', 'Policy', ''].map((c) => h('th', {}, c)))),
      R.members)),
    R.lookPanel, form, R.principals,
    h('h3', {}, 'Audit log'),
    h('div.table-wrap', {}, h('table.audit', { tid: 'audit' },
      h('thead', {}, h('tr', {}, ['Time', 'Event', 'Requester', 'Targets', 'Outcome'].map((c) => h('th', {}, c)))),
      R.audit)));
  R.empty = relayHelp();
  return h('section.relay', {}, h('aside.bundles', {}, h('h3', {}, 'Bundles'), R.list), R.empty, R.detail);
}

function openRelay(name) {
  R.root ??= relayView();
  $('main').replaceChildren(R.root);
  if (name !== R.name) {
    closeLook();
    R.name = name ?? null;
    R.outcome.replaceChildren();
    R.members.replaceChildren();
    R.audit.replaceChildren();
  }
  refreshRelay().catch(toast);
}

const BUNDLE_EXAMPLE = `format-version = 1

[[members]]
id = "builder"
name = "Builder"
directory = "/src/app"
[members.tmux]
command = "claude"

[[members]]
id = "reviewer"
name = "Reviewer"
directory = "/src/app"
[members.tmux]
command = "claude"
`;

/** What the relay page says when there is no bundle: how to add one. */
function relayHelp() {
  const example = h('div', {}, h('pre.bundle-example', { tid: 'bundle-example' }, h('code', {}, BUNDLE_EXAMPLE)));
  addCopyButtons(example);
  return h('div.panel.relay-help', { tid: 'relay-empty', hidden: true },
    h('h2', {}, 'No bundles yet'),
    h('p', {}, 'A bundle is a group of agents that can message each other (tmux panes, ACP agents or Switchboard sessions). Add one as a TOML file in the bundles directory — ',
      h('code', {}, 'SWITCHBOARD_BUNDLES_DIR'), ', by default ', h('code', {}, 'bundles/'), ' beside ', h('code', {}, 'switchboard.toml'),
      ' — named after the bundle, e.g. ', h('code', {}, 'bundles/dev.toml'), ':'),
    example,
    h('p.muted', {}, 'Check it with ', h('code', {}, 'switchboard relay check'), '; it shows here within a few seconds. More in docs/relay.md.'));
}

async function refreshRelay() {
  const { bundles, invalid = [] } = await api('GET', '/v1/relay/bundles');
  fill(R.list,
    bundles.map((b) => h('li', {}, h(`a.bundle${b.name === R.name ? '.active' : ''}`,
      { href: `#/relay/${encodeURIComponent(b.name)}`, tid: 'bundle', 'data-bundle': b.name },
      h('span', {}, b.name), h(`span.pill.${b.state}`, {}, b.state),
      h('span.muted', {}, `${b.ready}/${b.members} ready${b.health === 'degraded' ? ` · ${b.reason_code ?? 'degraded'}` : ''}`)))),
    bundles.length ? null : h('li.muted', {}, 'No bundles configured.'),
    invalid.map((i) => h('li.invalid', { tid: 'bundle-invalid' }, h('strong', {}, `${i.file} is invalid`), h('pre', {}, i.error))));
  R.empty.hidden = bundles.length > 0 || invalid.length > 0;
  R.detail.hidden = !R.name;
  if (!R.name) return;
  const name = encodeURIComponent(R.name);
  const [list, audit] = await Promise.all([
    api('GET', `/v1/relay/bundles/${name}`),
    api('GET', `/v1/relay/bundles/${name}/audit?limit=100`),
  ]);
  R.heading.textContent = list.bundle;
  R.state.textContent = `${list.state} · ${list.health}`;
  R.state.className = `pill ${list.state}`;
  const latest = list.startup_failures.latest;
  R.failures.textContent = latest
    ? `${list.startup_failures.count} startup failure(s); latest: ${latest.member} ${latest.code}: ${latest.reason}` : '';
  R.members.replaceChildren(...list.members.map((m) =>
    h('tr', { tid: 'member', 'data-member': m.id, 'data-ready': String(m.ready) },
      h('td', {}, m.name === m.id ? m.id : `${m.name} (${m.id})`),
      h('td', {}, m.transport),
      h('td', {}, h(`span.pill.${m.ready ? 'up' : 'down'}`, {}, m.ready ? 'ready' : m.reason_code ?? 'not ready')),
      h('td', {}, String(m.queued)),
      h('td', {}, m.policy),
      h('td', {}, h('button', { tid: 'look-open', type: 'button', onclick: () => openLook(m.id) }, 'Look')))));
  const ids = list.members.map((m) => m.id);
  if (ids.join() !== R.memberIds) {
    R.memberIds = ids.join();
    const keep = R.to.value;
    R.to.replaceChildren(...ids.map((id) => h('option', { value: id }, id)), h('option', { value: '*' }, 'broadcast'));
    if (keep) R.to.value = keep;
    R.principals.replaceChildren(...['alice', ...ids].map((id) => h('option', { value: id })));
  }
  R.audit.replaceChildren(...audit.entries.slice().reverse().map((e) =>
    h('tr', { tid: 'audit-row', 'data-event': e.event },
      h('td', {}, e.ts ? new Date(e.ts).toLocaleString() : ''),
      h('td', {}, e.event),
      h('td', {}, e.requester ?? ''),
      h('td', {}, (e.targets ?? (e.target ? [e.target] : [])).join(', ')),
      h('td', {}, e.outcome ?? e.result ?? ''))));
}

function openLook(member) {
  closeLook();
  R.look = member;
  R.lookPanel.hidden = false;
  R.lookTitle.textContent = `Look: ${member}`;
  R.lookOut.textContent = '';
  refreshLook();
  R.lookTimer = setInterval(refreshLook, 2000);
}

function closeLook() {
  clearInterval(R.lookTimer);
  R.look = null;
  if (R.lookPanel) R.lookPanel.hidden = true;
}

async function refreshLook() {
  const target = R.look;
  const q = new URLSearchParams({ requester: R.from.value.trim() || 'alice', target, lines: '120' });
  try {
    const r = await api('GET', `/v1/relay/bundles/${encodeURIComponent(R.name)}/look?${q}`);
    if (R.look !== target) return;
    const out = R.lookOut;
    const stick = !out.textContent || out.scrollHeight - out.scrollTop - out.clientHeight < 40;
    out.textContent = r.lines?.length ? r.lines.join('\n')
      : (r.entries ?? []).map((e) => `[${time(e.at)}] ${e.role}: ${e.content}`).join('\n\n');
    if (stick) out.scrollTop = out.scrollHeight;
    R.lookInfo.textContent = `${r.transport} · captured ${time(r.captured_at)}${r.fresh ? '' : ` · stale (${r.age_ms} ms)`}`;
  } catch (e) {
    if (R.look === target) R.lookInfo.textContent = e.message;
    toast(e);
  }
}

boot();
