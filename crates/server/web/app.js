// Switchboard web console: sign-in, sessions with a live transcript and approvals, schedules,
// the relay.
// Plain DOM, no framework. Text from the server is only ever set as textContent, except
// assistant replies, which go through md.js (escapes everything, then adds its own markup).

import { render } from './md.js';

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
};

async function boot() {
  try {
    S.me = await api('GET', '/v1/console/me');
  } catch (e) {
    const expired = new URLSearchParams(location.search).get('login') === 'expired';
    if (e.status === 401) return showLogin(expired ? 'That login link was already used or has expired.' : undefined);
    toast(e);
    return setTimeout(boot, 3000);
  }
  if (location.search) history.replaceState(null, '', `/${location.hash}`);
  $('login').hidden = true;
  $('app').hidden = false;
  $('version').textContent = S.me.version ? `v${S.me.version}` : '';
  route();
  refreshSessions().catch(toast);
}

function showLogin(message) {
  $('app').hidden = true;
  $('login').hidden = false;
  $('login-error').hidden = !message;
  $('login-error').textContent = message ?? '';
  $('login-token').focus();
}

function signedOut(message) {
  S.me = null;
  leaveSession();
  closeLook();
  S.views.clear();
  S.listKey = '';
  showLogin(message);
}

$('login-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  try {
    await api('POST', '/v1/console/login', { token: $('login-token').value.trim() });
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

$('show-archived').addEventListener('change', (e) => {
  S.showArchived = e.target.checked;
  refreshSessions().catch(toast);
});

/** #/ · #/new · #/s/<id> · #/schedules · #/schedules/<id> · #/relay · #/relay/<bundle> */
function route() {
  if (!S.me) return;
  const [, kind = '', arg] = location.hash.split('/').map(decodeURIComponent);
  document.body.classList.remove('drawer');
  // The relay and the schedules use the whole width (no session sidebar).
  document.body.classList.toggle('wide', kind === 'relay' || kind === 'schedules');
  document.body.dataset.page = kind === 'relay' || kind === 'schedules' ? kind : 'sessions';
  $('sessions-tab').classList.toggle('active', kind !== 'relay' && kind !== 'schedules');
  $('schedules-tab').classList.toggle('active', kind === 'schedules');
  $('relay-tab').classList.toggle('active', kind === 'relay');
  if (kind !== 's') leaveSession();
  if (kind !== 'relay') closeLook();
  if (kind === 's' && arg) openSession(arg);
  else if (kind === 'relay') openRelay(arg);
  else if (kind === 'schedules') openSchedules(arg);
  else if (kind === 'new') $('main').replaceChildren(newSessionForm());
  else $('main').replaceChildren(h('div.empty', {}, 'Pick a session on the left, or create a new one.'));
  markActive();
}
window.addEventListener('hashchange', route);

setInterval(() => {
  if (!S.me) return;
  const page = document.body.dataset.page;
  if (page === 'relay') refreshRelay().catch(toast);
  else if (page === 'schedules') refreshSchedules().catch(toast);
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

function newSessionForm() {
  const { agents = [], default_cwd, default_model } = S.me;
  const model = h('input', { name: 'model', tid: 'new-model', value: default_model ?? '', placeholder: 'default' });
  const backend = h('select', { name: 'backend', tid: 'new-backend', onchange: () => { model.disabled = backend.value !== 'builtin'; } },
    h('option', { value: 'builtin' }, 'built-in agent'),
    agents.map((a) => h('option', { value: `acp:${a}` }, `ACP: ${a}`)));
  const form = h('form.new-session.panel', { tid: 'new-session-form' },
    h('h2', {}, 'New session'),
    field('Title', h('input', { name: 'title', tid: 'new-title', placeholder: 'New session' })),
    field('Workspace', h('input', { name: 'cwd', tid: 'new-cwd', value: default_cwd ?? '' })),
    field('Backend', backend),
    field('Model', model),
    field('Permission mode', h('select', { name: 'mode', tid: 'new-mode', value: 'workspace-write' },
      ['read-only', 'workspace-write', 'full-access'].map((m) => h('option', { value: m }, m)))),
    h('button.primary', { tid: 'new-create' }, 'Create'));
  form.addEventListener('submit', guard(async (e) => {
    e.preventDefault();
    const f = form.elements;
    const body = { permission_mode: f.mode.value };
    if (f.title.value.trim()) body.title = f.title.value.trim();
    if (f.cwd.value.trim()) body.cwd = f.cwd.value.trim();
    body.backend = f.backend.value === 'builtin' ? 'builtin' : { acp: f.backend.value.slice(4) };
    if (!model.disabled && model.value.trim()) body.model = model.value.trim();
    const s = await api('POST', '/v1/sessions', body);
    location.hash = `#/s/${s.id}`;
    refreshSoon();
  }));
  return form;
}

// ---------- session view ----------

const KINDS = ['run_started', 'file_attached', 'file_shared', 'follow_up_queued', 'text_delta', 'text_complete', 'tool_calls_proposed',
  'waiting_for_tool_approval', 'tool_execution_started', 'tool_execution_completed', 'tool_rejected',
  'steering_received', 'thought_delta', 'plan_updated', 'notice', 'workspace_changed', 'usage_report', 'run_completed', 'run_error'];

function openSession(id) {
  if (S.current?.id !== id) {
    leaveSession();
    if (!S.views.has(id)) S.views.set(id, sessionView(id));
    S.current = S.views.get(id);
    connect(S.current);
  }
  const v = S.current;
  $('main').replaceChildren(v.root);
  v.log.scrollTop = v.log.scrollHeight;
  api('GET', `/v1/sessions/${id}`).then(({ session, config }) => {
    v.title.textContent = session.title;
    setArchived(v, session.archived === true);
    v.meta.textContent = [session.cwd, config.permission_mode, backendLabel(config.backend), config.model]
      .filter(Boolean).join(' · ');
    v.download.download = `${session.title}.md`;
  }, (e) => {
    toast(e);
    if (e.status === 404) location.hash = '#/';
  });
}

function leaveSession() {
  S.current?.es?.close();
  if (S.current) S.current.es = null;
  S.current = null;
}

function sessionView(id) {
  const v = {
    id, lastSeq: 0, es: null, activeRun: null, ended: new Set(), calls: new Map(), plans: new Map(),
    tail: null, // the last transcript item, if a text or thought block that deltas extend
    deltaSeen: false, // a text_delta since the last text_complete
    dirty: new Set(), flushTimer: 0, pendingTimer: 0,
  };
  v.title = h('h2.session-name', { tid: 'session-title' });
  v.meta = h('span.session-info');
  v.download = h('a.button', { href: `/v1/sessions/${id}/transcript.md`, download: 'transcript.md', tid: 'download' }, 'Download');
  v.log = h('div.log', { tid: 'transcript' });
  v.input = h('textarea', { tid: 'composer', rows: 2, placeholder: 'Message (Enter sends, Shift+Enter for a new line; drop or paste files to attach)' });
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
      h('div.session-actions', {}, v.download, v.archive,
        h('button', { tid: 'delete', type: 'button', onclick: () => { confirm.hidden = false; } }, 'Delete'), confirm)),
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
  if (!v.flushTimer) v.stick = v.log.scrollHeight - v.log.scrollTop - v.log.clientHeight < 120;
  HANDLERS[kind]?.(v, ev);
  schedule(v);
}

const HANDLERS = {
  run_started(v, ev) {
    if (ev.content) add(v, h('div.msg.user', { tid: 'message-user' }, ev.content));
    if (!v.ended.has(ev.run_id)) setRun(v, ev.run_id);
  },
  file_attached: (v, ev) => add(v, fileCard(v, ev.file, null, 'file-attached')),
  file_shared: (v, ev) => add(v, fileCard(v, ev.file, ev.caption, 'file-card')),
  follow_up_queued: (v, ev) => add(v, h('div.notice', {}, `Follow-up queued: ${ev.content}`)),
  steering_received: (v, ev) => add(v, h('div.msg.user.steer', { tid: 'message-steer' }, ev.content)),
  text_delta(v, ev) {
    v.deltaSeen = true;
    extend(v, 'assistant', ev.run_id).src += ev.delta;
  },
  text_complete(v, ev) {
    // Deltas normally carry the text; the complete text only fills in when none came.
    if (!v.deltaSeen && ev.text) extend(v, 'assistant', ev.run_id).src = ev.text;
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
  waiting_for_tool_approval(v, ev) {
    for (const id of ev.tool_call_ids) v.calls.get(id)?.ask(ev.run_id);
    schedulePending(v);
  },
  tool_execution_started(v, ev) {
    const card = v.calls.get(ev.tool_call_id) ?? addCard(v, { id: ev.tool_call_id, name: ev.name, arguments: null });
    card.answered('Allowed', true);
    card.setStatus('running', 'running');
  },
  tool_execution_completed(v, ev) {
    const card = v.calls.get(ev.tool_call_id) ?? addCard(v, { id: ev.tool_call_id, name: 'tool', arguments: null });
    card.answered('Answered', true);
    card.finish(ev.result, ev.is_error);
  },
  tool_rejected(v, ev) {
    const card = v.calls.get(ev.tool_call_id) ?? addCard(v, { id: ev.tool_call_id, name: 'tool', arguments: null });
    card.answered('Denied', true);
    card.reject(ev.reason);
  },
  notice: (v, ev) => add(v, h('div.notice', { tid: 'notice' }, ev.message)),
  workspace_changed: (v, ev) => add(v, changesCard(v, ev)),
  run_completed(v, ev) {
    const tokens = ev.total_usage?.total_tokens;
    add(v, h('div.run-end', { 'data-stop': ev.stop_reason },
      [ev.stop_reason === 'cancelled' ? 'Run cancelled' : 'Done', `${ev.total_turns} turn(s)`, tokens && `${tokens} tokens`]
        .filter(Boolean).join(' · ')));
    endRun(v, ev.run_id);
  },
  run_error(v, ev) {
    add(v, h('div.run-error', { tid: 'run-error' },
      `Run failed: ${ev.error}${ev.retryable ? ' (sending again may work)' : ''}`));
    endRun(v, ev.run_id);
  },
};

function endRun(v, run) {
  v.ended.add(run);
  v.deltaSeen = false;
  if (v.activeRun === run) setRun(v, null);
}

function add(v, el) {
  v.log.append(el);
  v.tail = null;
  return el;
}

/** The text or thought block that a delta of `run` extends (a new one after anything else). */
function extend(v, kind, run) {
  if (v.tail?.kind === kind && v.tail.run === run) return (v.dirty.add(v.tail), v.tail);
  const el = kind === 'assistant'
    ? h('div.msg.assistant.md', { tid: 'message-assistant' })
    : h('details.thought', {}, h('summary', {}, 'Thinking'), h('div.thought-text'));
  const block = { kind, run, el, src: '' };
  add(v, el);
  v.tail = block;
  v.dirty.add(block);
  return block;
}

/** Renders changed text blocks (at most every 30 ms) and keeps the bottom in view. */
function schedule(v) {
  v.flushTimer ||= setTimeout(() => {
    v.flushTimer = 0;
    for (const b of v.dirty) {
      if (b.kind === 'assistant') b.el.innerHTML = render(b.src); // md.js escapes all model text
      else b.el.lastChild.textContent = b.src;
    }
    v.dirty.clear();
    if (v.stick) v.log.scrollTop = v.log.scrollHeight;
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
    Object.assign(this, { v, id: call.id, run: null, waiting: false, final: false, box: null });
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
    this.setStatus('waiting for approval', 'waiting');
  }

  approvalBox() {
    const reason = h('input', { tid: 'deny-reason-text', placeholder: 'Reason (the model is told)', 'aria-label': 'Reason' });
    const submit = h('button.danger', { tid: 'deny-reason-submit' }, 'Deny');
    this.form = h('form.reason-form', { hidden: true }, reason, submit);
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.decide('reject', reason.value.trim());
    });
    this.buttons = [
      h('button.allow', { tid: 'allow', type: 'button', onclick: () => this.decide('accept') }, 'Allow'),
      h('button.danger', { tid: 'deny', type: 'button', onclick: () => this.decide('reject') }, 'Deny'),
      h('button', { tid: 'deny-reason', type: 'button', onclick: () => { this.form.hidden = false; reason.focus(); } },
        'Deny with reason'),
      submit,
    ];
    this.label = h('span.answer', { tid: 'approval-status' });
    const box = h('div.approval', { tid: 'approval-card' }, h('div.approval-buttons', {}, this.buttons.slice(0, 3), this.label), this.form);
    this.el.append(box);
    return box;
  }

  async decide(action, content) {
    for (const b of this.buttons) b.disabled = true;
    try {
      await api('POST', `/v1/sessions/${this.v.id}/tools/decisions`, {
        run_id: this.run,
        decisions: { [this.id]: content ? { action, content } : { action } },
      });
      this.answered(action === 'accept' ? 'Allowed' : 'Denied', true);
    } catch (e) {
      if (e.status !== 409) { // 409: answered elsewhere already; pending tells us
        toast(e);
        for (const b of this.buttons) b.disabled = false;
      }
      schedulePending(this.v);
    }
    refreshSoon();
  }

  /** The call no longer waits; `certain` when we know the answer (not just "gone from pending"). */
  answered(label, certain) {
    if (this.final) return;
    this.final = certain;
    this.waiting = false;
    if (!this.box) return;
    for (const b of this.buttons) b.disabled = true;
    this.form.hidden = true;
    this.label.textContent = label;
    this.box.dataset.answer = label.toLowerCase();
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
  return h('section.relay', {}, h('aside.bundles', {}, h('h3', {}, 'Bundles'), R.list), R.detail);
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

async function refreshRelay() {
  const { bundles, invalid = [] } = await api('GET', '/v1/relay/bundles');
  fill(R.list,
    bundles.map((b) => h('li', {}, h(`a.bundle${b.name === R.name ? '.active' : ''}`,
      { href: `#/relay/${encodeURIComponent(b.name)}`, tid: 'bundle', 'data-bundle': b.name },
      h('span', {}, b.name), h(`span.pill.${b.state}`, {}, b.state),
      h('span.muted', {}, `${b.ready}/${b.members} ready${b.health === 'degraded' ? ` · ${b.reason_code ?? 'degraded'}` : ''}`)))),
    bundles.length ? null : h('li.muted', {}, 'No bundles configured.'),
    invalid.map((i) => h('li.invalid', { tid: 'bundle-invalid' }, h('strong', {}, `${i.file} is invalid`), h('pre', {}, i.error))));
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
