// The console's service worker. It caches the console's own files — the page, scripts,
// styles, icon, manifest — and nothing else: API answers (/v1/…) and the sign-in link always
// go to the network, so no session data is ever kept here. With the server unreachable the
// cached page opens and says so. The cache's name is the hash of those files (the server
// fills it in), so a new build replaces them.

const CACHE = 'switchboard-console-__CACHE_VERSION__';
const SHELL = ['/', '/assets/app.js', '/assets/md.js', '/assets/settings.js', '/assets/team.js', '/assets/usage.js', '/assets/search.js', '/assets/ledger.js', '/assets/hl.js', '/assets/style.css', '/assets/hl.css',
  '/assets/icon.svg', '/assets/icon-192.png', '/assets/icon-512.png', '/assets/icon-maskable-512.png',
  '/assets/apple-touch-icon.png', '/manifest.webmanifest'];

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((c) => c.addAll(SHELL)).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(caches.keys()
    .then((keys) => Promise.all(keys.filter((k) => k.startsWith('switchboard-console-') && k !== CACHE).map((k) => caches.delete(k))))
    .then(() => self.clients.claim()));
});

self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  const url = new URL(req.url);
  if (url.origin !== self.location.origin) return;
  // The page itself (any navigation: `/`, `/#/s/…`, `/?login=expired`) and the shell's files.
  const key = req.mode === 'navigate' && url.pathname === '/' ? '/' : url.pathname;
  if (!SHELL.includes(key)) return;
  // Network first, so a running server always serves its current console; the cache when
  // the network fails.
  const cached = () => caches.open(CACHE).then((c) => c.match(key));
  event.respondWith(fetch(req).then(async (res) => {
    if (res.ok) {
      const copy = res.clone();
      caches.open(CACHE).then((c) => c.put(key, copy));
      return res;
    }
    // A proxy in front answering for a server that is down (502/503/504): the cached console,
    // which then says the server is unreachable.
    if (res.status >= 502 && res.status <= 504) return (await cached()) ?? res;
    return res;
  }).catch(async () => (await cached()) ?? Response.error()));
});

// A notification of a new approval: focus a console window (or open one) on the inbox.
self.addEventListener('notificationclick', (event) => {
  event.notification.close();
  const open = event.notification.data?.open ?? '#/inbox';
  event.waitUntil(self.clients.matchAll({ type: 'window', includeUncontrolled: true }).then((list) => {
    const client = list[0];
    if (!client) return self.clients.openWindow(`/${open}`);
    client.postMessage({ open });
    return client.focus();
  }));
});
