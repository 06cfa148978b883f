// The console's Usage page (#/usage), docs/usage.md: what model calls cost — a chart of the
// cost per day stacked by model, the top sessions, chats and schedules, and the budgets with
// how much of each is spent. Money comes as integer micro-dollars and is shown in dollars.

const SVG = 'http://www.w3.org/2000/svg';
/** Colours of the stacked models, in order (the last repeats). */
const COLOURS = ['#4f7cff', '#f0883e', '#3fb950', '#d2a8ff', '#e3b341', '#ff7b72', '#79c0ff', '#8b949e'];

const dollars = (micros) => `$${(micros / 1e6).toFixed(micros >= 1e6 ? 2 : 4)}`;

function svg(tag, attrs = {}, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'tid') el.dataset.testid = v;
    else el.setAttribute(k, String(v));
  }
  el.append(...kids);
  return el;
}

/** The page. `kit`: the console's helpers — h, api, toast, guard — and `me`. */
export function usagePage(kit) {
  const { h } = kit;
  const days = h('select', { tid: 'usage-days', 'aria-label': 'Period' },
    [7, 30, 90].map((d) => h('option', { value: String(d) }, `last ${d} days`)));
  days.value = '30';
  const totals = h('div.panel', { tid: 'usage-totals' }, h('h2', {}, 'Usage'), h('div.empty', {}, 'Loading…'));
  const chart = h('div.panel', { tid: 'usage-chart' }, h('h2', {}, 'Cost per day, by model'));
  const tops = h('div.panel', { tid: 'usage-top' }, h('h2', {}, 'Top spenders'));
  const budgets = h('div.panel', { tid: 'usage-budgets' }, h('h2', {}, 'Budgets'));
  const load = kit.guard(async () => {
    const from = new Date(Date.now() - Number(days.value) * 86_400_000).toISOString().slice(0, 10);
    const report = (by) => kit.api('GET', `/v1/usage?from=${from}&group_by=${by}`);
    const [daily, sessions, chats, schedules, models, b] = await Promise.all([
      report('day'), report('session'), report('chat'), report('schedule'), report('model'),
      kit.api('GET', '/v1/budgets'),
    ]);
    // Named before anything is shown: the page changes once, not twice.
    const named = await names(kit, sessions, schedules);
    showTotals(kit, totals, daily);
    showChart(kit, chart, daily, models.groups.map((g) => g.key));
    showTops(kit, tops, { sessions, chats, schedules }, named);
    showBudgets(kit, budgets, b.budgets);
  });
  days.addEventListener('change', load);
  load();
  return h('section.settings', { tid: 'usage' }, h('div.row', {}, days), totals, chart, tops, budgets);
}

function showTotals(kit, card, r) {
  const { h } = kit;
  const t = r.total;
  const flags = [];
  if (t.unpriced_calls) flags.push(`${t.unpriced_calls} call(s) of models without a price (${r.unpriced_models.join(', ')}): counted in tokens only — add [prices."provider/model"]`);
  if (t.unreported_calls) flags.push(`${t.unreported_calls} call(s) whose usage is not known`);
  card.replaceChildren(h('h2', {}, 'Usage'),
    h('p.big', { tid: 'usage-cost' }, dollars(t.cost_microdollars)),
    h('p.muted', {}, `${t.calls} model calls · ${t.input_tokens.toLocaleString()} tokens in · ${t.output_tokens.toLocaleString()} out · ${t.cache_read_tokens.toLocaleString()} from the cache`),
    flags.map((f) => h('p.warn', { tid: 'usage-flag' }, f)));
}

/** Bars of cost per day, each stacked by model; a legend names the models. */
function showChart(kit, card, daily, models) {
  const { h } = kit;
  const colour = (m) => COLOURS[Math.min(models.indexOf(m), COLOURS.length - 1)] ?? COLOURS[COLOURS.length - 1];
  const groups = daily.groups;
  if (groups.length === 0) {
    card.replaceChildren(h('h2', {}, 'Cost per day, by model'), h('p.muted', {}, 'No model calls in this period.'));
    return;
  }
  const W = 720; const H = 220; const pad = 36;
  const max = Math.max(1, ...groups.map((g) => g.cost_microdollars));
  // At most 48 wide: a few days are bars, not a wall.
  const bar = Math.min(48, (W - pad) / groups.length);
  const chart = svg('svg', { viewBox: `0 0 ${W} ${H + 24}`, preserveAspectRatio: 'xMinYMid meet', role: 'img', 'aria-label': 'Cost per day, stacked by model', tid: 'usage-svg', class: 'chart' });
  chart.append(svg('text', { x: 0, y: 12, class: 'axis' }, dollars(max)), svg('line', { x1: pad, y1: H, x2: W, y2: H, class: 'axis' }));
  groups.forEach((g, i) => {
    let y = H;
    for (const m of g.by_model ?? []) {
      const height = (m.cost_microdollars / max) * (H - 16);
      y -= height;
      const rect = svg('rect', { x: pad + i * bar + 2, y, width: Math.max(1, bar - 4), height, fill: colour(m.key), tid: 'usage-bar', 'data-day': g.key, 'data-model': m.key });
      rect.append(svg('title', {}, `${g.key} · ${m.key}: ${dollars(m.cost_microdollars)} (${m.calls} calls)`));
      chart.append(rect);
    }
    if (groups.length <= 31 && (i % Math.ceil(groups.length / 10) === 0)) chart.append(svg('text', { x: pad + i * bar + 2, y: H + 16, class: 'axis' }, g.key.slice(5)));
  });
  const legend = h('ul.legend', { tid: 'usage-legend' }, models.map((m) => h('li', {},
    (() => { const s = svg('svg', { width: 10, height: 10 }); s.append(svg('rect', { width: 10, height: 10, fill: colour(m) })); return s; })(), ` ${m}`)));
  card.replaceChildren(h('h2', {}, 'Cost per day, by model'), chart, legend);
}

/**
 * What to call the top sessions and schedules: their titles and names, by id. Each top
 * session is asked for (one that is gone, or not the reader's, keeps its id); schedules
 * come in one list.
 */
async function names(kit, sessions, schedules) {
  const named = new Map();
  const ids = sessions.groups.slice(0, 5).map((g) => g.key).filter(Boolean);
  const [shown, list] = await Promise.all([
    Promise.all(ids.map((id) => kit.api('GET', `/v1/sessions/${id}`).then((d) => [id, d.session.title], () => null))),
    schedules.groups.length ? kit.api('GET', '/v1/schedules').catch(() => ({ schedules: [] })) : { schedules: [] },
  ]);
  for (const pair of shown) if (pair) named.set(pair[0], pair[1]);
  for (const s of list.schedules ?? []) named.set(s.id, s.name);
  return named;
}

function showTops(kit, card, { sessions, chats, schedules }, named) {
  const { h } = kit;
  const label = (k) => named.get(k) ?? k;
  // A call of no chat (or schedule, or session) is a group of its own: said in words.
  const table = (title, r, none, link) => h('div', {}, h('h3', {}, title),
    r.groups.length === 0 ? h('p.muted', {}, 'None.')
      : h('table', {}, h('tbody', {}, r.groups.slice(0, 5).map((g) => h('tr', { tid: 'usage-top-row' },
        h('td', {}, g.key == null ? h('span.muted', {}, none) : link ? h('a', { href: link(g.key), title: g.key }, label(g.key)) : g.key),
        h('td.num', {}, dollars(g.cost_microdollars)), h('td.num', {}, `${g.calls} call${g.calls === 1 ? '' : 's'}`))))));
  card.replaceChildren(h('h2', {}, 'Top spenders'), h('div.columns', {},
    table('Sessions', sessions, 'no session', (k) => `#/s/${k}`), table('Chats', chats, 'not from a chat'),
    table('Schedules', schedules, 'not scheduled', (k) => `#/schedules/${k}`)));
}

function showBudgets(kit, card, budgets) {
  const { h } = kit;
  if (budgets.length === 0) {
    card.replaceChildren(h('h2', {}, 'Budgets'), h('p.muted', {}, 'No budgets: add [[budgets]] to switchboard.toml, or switchboard budgets set NAME --scope global --window day --usd 20.'));
    return;
  }
  const rows = budgets.map((b) => {
    const s = b.budget;
    const limit = b.limit_microdollars ?? s.limit_tokens;
    const spent = (w) => (b.limit_microdollars != null ? w.spent_microdollars + w.reserved_microdollars : w.spent_tokens + w.reserved_tokens);
    const extra = (w) => (b.limit_microdollars != null ? w.extra_microdollars : w.extra_tokens);
    const shown = (n) => (b.limit_microdollars != null ? dollars(n) : `${n.toLocaleString()} tokens`);
    const top = b.windows[0];
    const used = top ? spent(top) : 0;
    const of = limit + (top ? extra(top) : 0);
    // Rounded up: a budget that has spent anything is not shown as untouched.
    const pct = of > 0 ? Math.min(100, Math.ceil((used / of) * 100)) : 100;
    const meter = h('meter', { min: 0, max: 100, low: 80, high: 99, optimum: 0, tid: 'budget-meter', 'data-pct': String(pct), title: `${pct} % spent` });
    meter.value = pct;
    return h('tr', { tid: 'budget-row', 'data-budget': s.name },
      h('td', {}, s.name), h('td', {}, `${s.scope}${s.match ? ` ${s.match}` : ''}`), h('td', {}, s.window),
      h('td', {}, meter, ` ${shown(used)} of ${shown(of)}${top && top.subject ? ` (${top.subject})` : ''}`),
      h('td.muted', {}, b.resets_at ? `resets ${new Date(b.resets_at).toLocaleString()}` : 'each run'));
  });
  card.replaceChildren(h('h2', {}, 'Budgets'), h('div.scroll', {}, h('table.budgets', {}, h('thead', {}, h('tr', {},
    h('th', {}, 'Name'), h('th', {}, 'Scope'), h('th', {}, 'Window'), h('th', {}, 'Spent (most spent)'), h('th', {}, ''))),
  h('tbody', {}, rows))));
}
