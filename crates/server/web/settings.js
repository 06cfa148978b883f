// The console's Settings page (#/settings): the model provider, its key and the default
// model, the default permission mode, and the chat channels, read from and saved to
// /v1/settings; the server applies a change without a restart. Keys and tokens are only ever
// sent, never shown: the server answers whether one is set. What an environment variable
// sets is shown, and its field is disabled.

const CHANNELS = {
  telegram: { label: 'Telegram', tokens: [['token', 'Bot token from @BotFather (123456:ABC…)']] },
  slack: { label: 'Slack', tokens: [['bot_token', 'Bot token (xoxb-…)'], ['app_token', 'App-level token with connections:write (xapp-…)']] },
  discord: { label: 'Discord', tokens: [['token', 'Bot token']] },
};
const MODES = ['read-only', 'workspace-write', 'full-access'];
/** channel → what its platform last said of the bot ({identity, link}). */
const BOTS = new Map();

/**
 * The page. `kit`: the console's helpers — h, fill, api, toast, guard, field — and
 * `changed()`, called after a save (the console reloads what it shows of the defaults).
 */
export function settingsPage(kit) {
  const { h } = kit;
  const root = h('section.settings', { tid: 'settings' }, h('div.empty', {}, 'Loading…'));
  load(kit, root).catch(kit.toast);
  return root;
}

async function load(kit, root) {
  const [s, { providers }] = await Promise.all([kit.api('GET', '/v1/settings'), kit.api('GET', '/v1/providers')]);
  draw(kit, root, s, providers);
}

function draw(kit, root, s, providers) {
  const { h, fill } = kit;
  const env = s.environment ?? {};
  const locked = (setting) => !s.writable || Boolean(env[setting]);
  const note = (setting) => env[setting] && h('p.muted.env-note', { tid: 'env-note', 'data-setting': setting },
    `Set by the environment variable ${env[setting]}: change it there.`);
  /** Saves `body`; `then` runs before the page is drawn again. */
  const save = async (body, what, then) => {
    const next = await kit.api('PUT', '/v1/settings', body);
    kit.toast(`${what} saved and applied.`, 'info');
    if (then) await then().catch(kit.toast);
    await kit.changed();
    const { providers: p } = await kit.api('GET', '/v1/providers');
    draw(kit, root, next, p);
    return next;
  };
  fill(root,
    h('div.panel', {}, h('h2', {}, 'Settings'),
      h('p.muted', {}, 'Changes are saved to ', h('code', {}, s.config_file ?? 'the configuration file'),
        ' (keys and tokens to ', h('code', {}, s.secrets_file), ', readable only by the server\'s user) and apply at once: new runs use them, a run under way keeps its own.'),
      !s.writable && h('p.warning', { tid: 'settings-read-only' }, `Read-only: ${s.read_only_reason}`)),
    providerPanel(kit, s, providers, locked, note, save),
    defaultsPanel(kit, s, locked, note, save),
    channelsPanel(kit, s, locked, note, save));
}

function providerPanel(kit, s, providers, locked, note, save) {
  const { h, field, guard } = kit;
  const p = s.provider;
  const OTHER = '__other__';
  const choice = h('select', { tid: 'settings-provider', 'aria-label': 'Provider', disabled: locked('provider.base_url') || locked('provider.kind') },
    providers.map((e) => h('option', { value: e.name }, `${e.label}${e.current ? ' (in use)' : ''}`)),
    h('option', { value: OTHER }, 'Another OpenAI-compatible server…'));
  choice.value = providers.find((e) => e.current)?.name ?? OTHER;
  const url = h('input', { tid: 'settings-base-url', placeholder: 'http://host:8000/v1', value: p.base_url });
  const urlField = field('Base URL', url);
  const key = h('input', { tid: 'settings-api-key', type: 'password', autocomplete: 'off', disabled: locked('provider.api_key'),
    placeholder: p.api_key_set ? 'A key is set (leave empty to keep it)' : 'None set' });
  const models = h('datalist', { id: 'settings-models' });
  const model = h('input', { tid: 'settings-model', list: 'settings-models', value: p.model ?? '', disabled: locked('provider.model'),
    placeholder: 'Pick or type a model' });
  const listed = h('p.muted', { tid: 'settings-models-note' });
  const current = () => providers.find((e) => e.name === choice.value);
  const showUrl = () => { urlField.hidden = choice.value !== OTHER; };
  const loadModels = async () => {
    const e = current();
    // Only the provider in force is asked with the key; another is asked once saved with its own.
    const name = e?.current ? 'current' : e?.name;
    if (!name) { models.replaceChildren(); listed.textContent = ''; return; }
    listed.textContent = 'Asking for its models…';
    try {
      const r = await kit.api('GET', `/v1/providers/${encodeURIComponent(name)}/models`);
      models.replaceChildren(...r.models.map((m) => h('option', { value: m })));
      listed.textContent = `${r.models.length} model(s) listed.`;
    } catch (err) {
      models.replaceChildren();
      listed.textContent = e?.current ? `Could not list its models: ${err.message}` : 'Its models are listed once it is saved with its key.';
    }
  };
  choice.addEventListener('change', () => { showUrl(); loadModels(); });
  showUrl();
  loadModels();
  const submit = guard(async (ev) => {
    ev.preventDefault();
    const body = {};
    const e = current();
    if (choice.value === OTHER) {
      if (url.value.trim() !== p.base_url) Object.assign(body, { kind: 'openai', base_url: url.value.trim() });
    } else if (e && !e.current) body.name = e.name;
    if (key.value.trim()) body.api_key = key.value.trim();
    const m = model.value.trim();
    if (m && m !== p.model) body.model = m;
    else if (m && (body.name || body.base_url)) body.model = m;
    if (!Object.keys(body).length) return kit.toast('Nothing changed.', 'info');
    await save({ provider: body }, 'Provider');
  });
  return h('form.panel.settings-provider', { tid: 'settings-provider-form', onsubmit: submit },
    h('h3', {}, 'Model provider'),
    h('p.muted', { tid: 'settings-provider-now' },
      `In use: ${p.model ?? 'no model'} · ${p.kind} at ${p.base_url}`,
      p.local_server ? ` (found on this machine: ${p.local_server})` : '',
      p.api_key_set ? ' · key set' : ' · no key'),
    field('Provider', choice), note('provider.base_url'), urlField,
    field('API key', key), note('provider.api_key'),
    field('Default model', model), models, listed, note('provider.model'),
    h('button.primary', { tid: 'settings-provider-save', type: 'submit', disabled: !s.writable }, 'Save provider'));
}

function defaultsPanel(kit, s, locked, note, save) {
  const { h, field, guard } = kit;
  const mode = h('select', { tid: 'settings-mode', 'aria-label': 'Default permission mode', disabled: locked('default_permission_mode') },
    MODES.map((m) => h('option', { value: m }, m)));
  mode.value = s.default_permission_mode;
  const submit = guard(async (ev) => {
    ev.preventDefault();
    await save({ default_permission_mode: mode.value }, 'Defaults');
  });
  return h('form.panel', { tid: 'settings-defaults-form', onsubmit: submit }, h('h3', {}, 'New sessions'),
    field('Permission mode', mode), note('default_permission_mode'),
    h('button', { tid: 'settings-defaults-save', type: 'submit', disabled: locked('default_permission_mode') }, 'Save'));
}

function channelsPanel(kit, s, locked, note, save) {
  const { h } = kit;
  return h('div.panel', { tid: 'settings-channels' }, h('h3', {}, 'Chat channels'),
    h('p.muted', {}, 'Connect a bot and talk to your agents from the chat app; people who write to it are let in on the ',
      h('a', { href: '#/channels' }, 'Channels'), ' page.'),
    h('ul.settings-channel-list', {}, s.channels.map((c) => channelRow(kit, c, locked(`channels.${c.name}`), note(`channels.${c.name}`), save))));
}

function channelRow(kit, c, isLocked, envNote, save) {
  const { h, guard } = kit;
  const spec = CHANNELS[c.name];
  const inputs = spec.tokens.map(([k, placeholder]) => [k, h('input', { tid: `settings-${c.name}-${k}`, type: 'password', autocomplete: 'off', placeholder, disabled: isLocked })]);
  const result = h('span.muted', { tid: `settings-${c.name}-result` });
  const showBot = (bot) => {
    BOTS.set(c.name, bot);
    result.replaceChildren(`${bot.identity}`, bot.link ? ' · ' : '',
      bot.link ? h('a', { href: bot.link, target: '_blank', rel: 'noopener', tid: `settings-${c.name}-link` }, c.name === 'discord' ? 'invite it' : 'open a chat with it') : '');
  };
  const check = async () => showBot(await kit.api('POST', `/v1/settings/channels/${c.name}/test`));
  if (c.configured && BOTS.has(c.name)) showBot(BOTS.get(c.name));
  if (!c.configured) BOTS.delete(c.name);
  const connect = guard(async (ev) => {
    ev.preventDefault();
    const body = Object.fromEntries(inputs.map(([k, el]) => [k, el.value.trim()]));
    if (Object.values(body).some((v) => !v)) return kit.toast(`${spec.label} needs ${inputs.length > 1 ? 'both tokens' : 'its token'}.`);
    ev.submitter && (ev.submitter.disabled = true);
    try {
      // Connected: who the bot is, and the link to talk to it.
      await save({ [c.name]: body }, spec.label, check);
    } finally {
      ev.submitter && (ev.submitter.disabled = false);
    }
  });
  const test = guard(async (ev) => {
    ev.target.disabled = true;
    try {
      await check();
    } finally {
      ev.target.disabled = false;
    }
  });
  const remove = guard(async () => {
    if (!confirm(`Disconnect ${spec.label}? Its token and its section of the configuration are removed.`)) return;
    await save({ remove_channels: [c.name] }, spec.label);
  });
  return h('li.settings-channel', { tid: 'settings-channel', 'data-channel': c.name, 'data-configured': String(c.configured) },
    h('form', { onsubmit: connect },
      h('strong', {}, spec.label), ' ',
      h('span.channel-state', { tid: `settings-${c.name}-state` }, c.configured ? 'connected' : 'not connected'), ' ', result,
      envNote,
      h('div.row', {}, inputs.map(([, el]) => el),
        h('button.primary', { tid: `settings-${c.name}-connect`, type: 'submit', disabled: isLocked }, c.configured ? 'Replace token' : 'Connect'),
        c.configured && h('button', { tid: `settings-${c.name}-test`, type: 'button', onclick: test }, 'Test'),
        c.configured && h('button.danger', { tid: `settings-${c.name}-remove`, type: 'button', onclick: remove, disabled: isLocked }, 'Disconnect'))));
}
