// The console's search (#/search/<query>), docs/search.md: the hits of GET /v1/search over
// every session the signed-in person sees, best first, each with its passage (the query's
// words marked) and a link that opens the session at that point of its transcript
// (#/s/<session>/<seq>). Pages come with "More" (the response's next_cursor).

/** The page. `kit`: the console's helpers — h, api, guard — and `jump(hit)`, called when a
 *  hit is opened (the session view then scrolls to it and marks it). */
export function searchPage(kit, query) {
  const { h } = kit;
  const input = h('input', { type: 'search', tid: 'search-page-input', value: query, 'aria-label': 'Search sessions',
    placeholder: 'words, "a phrase", prefix*' });
  const form = h('form.search-page-form', { role: 'search' }, input, h('button.primary', { tid: 'search-go' }, 'Search'));
  const status = h('p.muted', { tid: 'search-status' });
  const hits = h('ol.search-hits', { tid: 'search-hits' });
  const more = h('button', { tid: 'search-more', type: 'button', hidden: true }, 'More');
  let cursor = null;

  const load = kit.guard(async () => {
    const params = new URLSearchParams({ q: query, limit: '20' });
    if (cursor) params.set('cursor', cursor);
    more.disabled = true;
    try {
      const page = await kit.api('GET', `/v1/search?${params}`);
      hits.append(...page.hits.map((hit) => hitItem(kit, hit)));
      cursor = page.next_cursor ?? null;
      more.hidden = !cursor;
      status.textContent = hits.children.length
        ? `${hits.children.length}${cursor ? '+' : ''} hit(s) for ${query}`
        : `Nothing found for ${query}.`;
    } catch (e) {
      status.textContent = e.status === 400 || e.status === 422 ? e.message : '';
      throw e;
    } finally {
      more.disabled = false;
    }
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = input.value.trim();
    if (q) location.hash = `#/search/${encodeURIComponent(q)}`;
  });
  more.addEventListener('click', () => load());
  if (query) {
    status.textContent = 'Searching…';
    load();
  } else status.textContent = 'Type words to find in every session you can see.';
  return h('div.search-page.panel', { tid: 'search-page' }, h('h2', {}, 'Search'), form, status, hits, more);
}

/** One hit: the session's title, who said it and when, the passage with its matches marked. */
function hitItem(kit, hit) {
  const { h } = kit;
  const where = hit.seq != null ? `#/s/${hit.session_id}/${hit.seq}` : `#/s/${hit.session_id}`;
  const who = hit.kind === 'file' ? 'file' : hit.role;
  const passage = hit.snippet.map((p) => (p.matched ? h('mark', {}, p.text) : p.text));
  const link = h('a.search-hit', { href: where, tid: 'search-hit', 'data-session-id': hit.session_id },
    h('span.search-hit-title', {}, hit.session_title),
    h('span.session-meta', {}, who, ' · ', new Date(hit.created_at).toLocaleString()),
    h('span.search-snippet', { tid: 'search-snippet' }, passage));
  link.addEventListener('click', () => kit.jump(hit));
  return h('li', {}, link);
}
