// The delivery ledger on the console's Channels page (docs/chat.md, "Delivery ledger"): what
// became of each inbound chat message — GET /v1/gateway/messages — newest first, for every
// chat or for one conversation (its row's "Messages"), with a Retry on a failed one
// (POST /v1/gateway/messages/{id}/retry).

const STATUSES = ['received', 'ignored', 'queued', 'in_run', 'answered', 'failed'];

/** Why an ignored message was not acted on, in words. */
const WHY = {
  not_allowed: 'not allowed: a chat nobody let in',
  duplicate: 'a repeat of a message already taken',
  edited: 'an edit of a message already taken',
  empty: 'nothing in it',
  stopped: 'dropped from the queue by /stop',
};

/** The panel, kept across the page's redraws. `kit`: the console's h, api, guard, toast.
 *  Returns { panel, refresh(), show(conversation | null) }. */
export function ledgerPanel(kit) {
  const { h } = kit;
  let scope = null; // { channel, chat, label } of one conversation, or every chat
  let status = '';
  let shown = '';
  const title = h('h2', {}, 'Deliveries');
  const hint = h('p.muted', {}, 'What became of each message the bot received: ignored and why, queued, answered (with the reply’s message ids) or failed.');
  const select = h('select', { tid: 'ledger-status', 'aria-label': 'Only this status' },
    h('option', { value: '' }, 'every status'), STATUSES.map((s) => h('option', { value: s }, s.replace('_', ' '))));
  const every = h('button', { tid: 'ledger-every-chat', type: 'button', hidden: true }, 'Every chat');
  const list = h('ul.ledger', { tid: 'ledger-list' });
  const panel = h('div.panel', { tid: 'ledger' }, title, hint, h('div.row.ledger-filters', {}, select, every), list);

  let asked = 0; // the newest request: an older answer arriving late is dropped

  async function refresh() {
    const mine = ++asked;
    const wanted = { scope, status };
    const params = new URLSearchParams({ limit: '50' });
    if (scope) {
      params.set('channel', scope.channel);
      params.set('chat', scope.chat);
    }
    if (status) params.set('status', status);
    let page;
    try {
      page = await kit.api('GET', `/v1/gateway/messages?${params}`);
    } catch (e) {
      if (mine !== asked) return;
      // Said once in the panel, not in a toast every 3 s; the rest of the page goes on.
      const key = JSON.stringify(['error', e.message]);
      if (key !== shown) {
        shown = key;
        list.replaceChildren(h('li.muted', { tid: 'ledger-error' }, `The delivery ledger could not be read: ${e.message}`));
      }
      return;
    }
    if (mine !== asked) return;
    // What the list shows, for whoever waits for a filter to apply.
    list.dataset.status = wanted.status || 'any';
    list.dataset.chat = wanted.scope ? wanted.scope.chat : 'any';
    // Redrawn only when something changed (a Retry being pressed is not swapped under the
    // pointer every 3 s).
    const key = JSON.stringify([wanted.scope, wanted.status, page.messages]);
    if (key === shown) return;
    shown = key;
    list.replaceChildren(...(page.messages.length ? page.messages.map(entry)
      : [h('li.muted', { tid: 'ledger-empty' }, scope ? 'No message from this conversation is on record.' : 'No message is on record yet.')]));
  }

  function entry(e) {
    const retry = kit.guard(async (ev) => {
      ev.target.disabled = true;
      try {
        await kit.api('POST', `/v1/gateway/messages/${e.id}/retry`);
        kit.toast('Queued again: the agent gets it as it came.', 'info');
        await refresh();
      } finally {
        ev.target.disabled = false;
      }
    });
    const why = e.status === 'ignored' ? WHY[e.reason] ?? e.reason : e.reason;
    const text = e.text.length > 300 ? `${e.text.slice(0, 300)}…` : e.text;
    return h('li.ledger-entry', { tid: 'ledger-entry', 'data-id': String(e.id), 'data-status': e.status, 'data-message-id': e.message_id },
      h('div.ledger-head', {},
        h(`span.delivery-status.${e.status}`, { tid: 'ledger-status-badge' }, e.status.replace('_', ' ')),
        ' ', h('strong', {}, e.peer?.name || e.peer?.id || 'someone'),
        h('span.muted', {}, ` · ${e.channel} ${e.chat?.id ?? ''} · ${new Date(e.received_at).toLocaleString()}`),
        e.kind !== 'message' && h('span.muted', {}, ` · ${e.kind}`)),
      text && h('div.ledger-text', {}, text),
      e.files > 0 && h('div.muted', {}, `${e.files} file(s)`),
      why && h('div.ledger-why', { tid: 'ledger-why' }, why),
      e.duplicate_of && h('div.muted', {}, `repeats entry ${e.duplicate_of}`),
      (e.run_id || e.outbound.length > 0 || e.attempts > 1) && h('div.ledger-out', { tid: 'ledger-out' },
        e.session_id && h('a', { href: `#/s/${e.session_id}` }, 'session'),
        e.attempts > 1 && ` · sent to the agent ${e.attempts} times`,
        e.outbound.map((o) => [' · ', h('span', { tid: 'ledger-posted', 'data-kind': o.kind },
          o.id ? `${o.kind} #${o.id}` : `${o.kind} refused: ${o.error ?? ''}`,
          o.attempts > 1 ? ` (${o.attempts} calls)` : '')])),
      e.status === 'failed' && e.kind === 'message'
        && h('button.primary', { tid: 'ledger-retry', type: 'button', onclick: retry }, 'Retry'));
  }

  select.addEventListener('change', kit.guard(async () => {
    status = select.value;
    await refresh();
  }));
  every.addEventListener('click', kit.guard(async () => show(null)));

  async function show(conversation) {
    scope = conversation;
    title.textContent = scope ? `Deliveries of ${scope.label}` : 'Deliveries';
    every.hidden = !scope;
    await refresh();
    if (scope) panel.scrollIntoView({ block: 'start' });
  }

  return { panel, refresh, show };
}
