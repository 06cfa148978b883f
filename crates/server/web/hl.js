// A small syntax highlighter for the code blocks of model replies.
//
// One pass per block: one regex per language with an alternative per token kind, matched left
// to right; the text between matches is plain. Everything is HTML-escaped and the only tag
// produced is <span class="tok-…">, so code can never become HTML. Every pattern that can run
// long either always succeeds once started (an unterminated string or comment runs to the end:
// a reply still streaming) or is bounded, so no input makes a regex backtrack badly.

const ESC = { 38: '&amp;', 60: '&lt;', 62: '&gt;', 34: '&quot;', 39: '&#39;' }; // & < > " '
function esc(s) { // a loop: several times faster than replace() on the many short tokens
  let out = '', last = 0;
  for (let i = 0; i < s.length; i++) {
    const e = ESC[s.charCodeAt(i)];
    if (e) {
      out += s.slice(last, i) + e;
      last = i + 1;
    }
  }
  return last ? out + s.slice(last) : s;
}
const words = (s) => new Set(s.split(' '));

// Pieces of patterns (compiled with the flags gmu: `^`/`$` are line bounds, END is the end).
const END = String.raw`(?![\s\S])`;
const ID = String.raw`[\p{L}_][\p{L}\p{N}_]*`;
const NUM = String.raw`\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?[\p{L}\p{N}_]*`;
const SLASH2 = String.raw`//[^\n]*`;
const BLOCK = String.raw`/\*[\s\S]*?(?:\*/|${END})`;
const HASH = String.raw`#[^\n]*`;
const DQ = String.raw`"(?:[^"\\\n]|\\[\s\S])*"?`; // one line (an escaped newline continues it)
const SQ = String.raw`'(?:[^'\\\n]|\\[\s\S])*'?`;
const DQML = String.raw`"(?:[^"\\]|\\[\s\S])*"?`; // may span lines
const triple = (q) => `${q}[\\s\\S]*?(?:${q}|${END})`;
const CHAR = String.raw`'(?:[^'\\\n]|\\[^\n]){1,10}'`; // must close: a lone ' is plain

// Languages: rules are [kind, pattern] in priority order. Kinds: com str num kw type fn attr
// ins del (a span), id (a word, classified below), key (attr after leading blanks/dashes),
// plain (consumed without a span), tag (an HTML/XML tag), prompt (a shell prompt).
const C_LIKE = [['com', SLASH2], ['com', BLOCK], ['attr', String.raw`^[ \t]*#[ \t]*\p{L}+`],
  ['attr', String.raw`@[\p{L}_][\p{L}\p{N}_.]*`], ['str', triple('"""')], ['str', DQ],
  ['str', CHAR], ['num', NUM], ['id', ID]];
const C_KW = 'auto break case char const continue default do double else enum extern float for goto if ' +
  'inline int long register restrict return short signed sizeof static struct switch typedef union ' +
  'unsigned void volatile while bool true false NULL';
const c = (kw, types = '') => ({ rules: C_LIKE, kw: words(kw), types: words(types), caps: true });

const SH_KW = 'if then else elif fi for while until do done case esac in function return local export ' +
  'select break continue readonly declare unset';
const sh = {
  rules: [['prompt', String.raw`^\$(?= )`], ['com', String.raw`(?<!\S)#[^\n]*`],
    ['attr', String.raw`\$(?:\{[^}\n]*\}?|${ID}|[0-9@#?$!*-])`], ['str', DQML], ['str', "'[^']*'?"],
    ['num', String.raw`\d+(?![\p{L}_.\/-])`], ['id', String.raw`[\p{L}_.\/~][\p{L}\p{N}_.\/~+-]*`]],
  kw: words(SH_KW), sh: true,
};

const LANGS = {
  rust: {
    rules: [['com', SLASH2], ['com', BLOCK], ['str', String.raw`b?r"[^"]*"?`],
      ['str', `b?r#${triple('"')}`.replace('(?:"|', '(?:"#|')], ['str', `b?r##${triple('"')}`.replace('(?:"|', '(?:"##|')],
      ['str', `b?${DQML}`], ['str', String.raw`b?'(?:[^'\\\n]|\\(?:u\{[\da-fA-F]{1,6}\}|[^\n]))'`],
      ['plain', `'${ID}`], ['attr', String.raw`#!?\[[^\]\n]*\]?`], ['num', NUM], ['id', ID]],
    kw: words('as async await break const continue crate dyn else enum extern false fn for if impl in let ' +
      'loop match mod move mut pub ref return self Self static struct super trait true type unsafe use where while yield'),
    types: words('bool char str u8 u16 u32 u64 u128 usize i8 i16 i32 i64 i128 isize f32 f64'), caps: true, macro: true,
  },
  js: {
    rules: [['com', SLASH2], ['com', BLOCK], ['str', '`(?:[^`\\\\]|\\\\[\\s\\S])*`?'], ['str', DQ], ['str', SQ],
      ['attr', String.raw`@[\p{L}_][\p{L}\p{N}_.]*`], ['num', NUM], ['id', String.raw`[\p{L}_$][\p{L}\p{N}_$]*`]],
    kw: words('break case catch class const continue debugger default delete do else export extends finally for ' +
      'from function if import in instanceof let new of return static super switch this throw try typeof var void ' +
      'while with yield async await true false null undefined as interface type enum implements private public ' +
      'protected readonly declare namespace abstract keyof satisfies'),
    types: words('string number boolean any unknown never object bigint symbol'), caps: true,
  },
  python: {
    rules: [['com', HASH], ['str', `[rRbBuUfF]{0,2}(?:${triple('"""')}|${triple("'''")})`],
      ['str', `[rRbBuUfF]{0,2}(?:${DQ}|${SQ})`], ['attr', String.raw`@[\p{L}_][\p{L}\p{N}_.]*`],
      ['num', NUM], ['id', ID]],
    kw: words('False None True and as assert async await break class continue def del elif else except finally ' +
      'for from global if import in is lambda nonlocal not or pass raise return try while with yield match case self'),
    types: words('int str float bool list dict set tuple bytes object type'), caps: true,
  },
  sh,
  json: {
    rules: [['com', SLASH2], ['com', BLOCK], ['attr', String.raw`"(?:[^"\\\n]|\\[\s\S])*"(?=\s*:)`],
      ['str', DQ], ['num', NUM], ['id', ID]],
    kw: words('true false null'),
  },
  go: {
    rules: [['com', SLASH2], ['com', BLOCK], ['str', '`[^`]*`?'], ['str', DQ], ['str', CHAR],
      ['num', NUM], ['id', ID]],
    kw: words('break case chan const continue default defer else fallthrough for func go goto if import ' +
      'interface map package range return select struct switch type var true false nil iota'),
    types: words('bool byte complex64 complex128 error float32 float64 int int8 int16 int32 int64 rune ' +
      'string uint uint8 uint16 uint32 uint64 uintptr any'),
  },
  c: c(C_KW),
  cpp: c(`${C_KW} alignas alignof catch class constexpr const_cast decltype delete dynamic_cast explicit ` +
    'export friend mutable namespace new noexcept nullptr operator override private protected public ' +
    'reinterpret_cast static_assert static_cast template this throw try typeid typename using virtual final ' +
    'co_await co_return co_yield concept requires', 'std string size_t'),
  java: c('abstract assert boolean break byte case catch char class const continue default do double else ' +
    'enum extends final finally float for if implements import instanceof int interface long native new ' +
    'package private protected public return short static super switch synchronized this throw throws ' +
    'transient try var void volatile while record sealed permits yield null true false'),
  kotlin: c('as break class continue do else false for fun if in interface is null object package return ' +
    'super this throw true try typealias val var when while by catch constructor init companion data enum ' +
    'final finally import inner internal lateinit open override private protected public sealed suspend vararg abstract'),
  swift: c('associatedtype class deinit enum extension fileprivate func import init inout internal let open ' +
    'operator private protocol public rethrows static struct subscript typealias var break case continue ' +
    'default defer do else fallthrough for guard if in repeat return switch where while as catch false is ' +
    'nil self Self super throw throws true try async await some any mutating override final lazy weak'),
  toml: {
    rules: [['com', HASH], ['type', String.raw`^[ \t]*\[[^\]\n]*\]?\]?`],
      ['key', String.raw`^[ \t]*(?:[\p{L}\p{N}_][\p{L}\p{N}_.-]*|"[^"\n]*")(?=[ \t]*=)`],
      ['str', triple('"""')], ['str', triple("'''")], ['str', DQ], ['str', "'[^'\\n]*'?"],
      ['num', NUM], ['id', ID]],
    kw: words('true false inf nan'),
  },
  yaml: {
    rules: [['com', String.raw`(?<!\S)#[^\n]*`], ['com', String.raw`^(?:---|\.\.\.)(?=[ \t]|$)`],
      ['key', String.raw`^[ \t]*(?:-[ \t]+)?[\p{L}\p{N}_][\p{L}\p{N}_.\/-]*(?=[ \t]*:(?:[ \t]|$))`],
      ['str', DQML], ['str', "'[^']*'?"], ['type', String.raw`(?<!\S)[&*!][\p{L}\p{N}_!-]+`],
      ['num', NUM], ['id', ID]],
    kw: words('true false null yes no on off True False Null'),
  },
  html: {
    rules: [['com', `<!--[\\s\\S]*?(?:-->|${END})`], ['str', String.raw`<!\[CDATA\[[\s\S]*?(?:\]\]>|${END})`],
      ['tag', String.raw`<[\/!?]?[\p{L}_:][^>"']*(?:(?:"[^"]*"?|'[^']*'?)[^>"']*)*>?`]],
  },
  attrs: { // the inside of one tag, after its name
    rules: [['str', `"[^"]*"?|'[^']*'?`], ['attr', String.raw`[\p{L}_:@][\p{L}\p{N}_:.@-]*`]],
  },
  diff: {
    rules: [['kw', '^@@[^\\n]*'], ['com', String.raw`^(?:diff |index |\+\+\+ |--- )[^\n]*`],
      ['ins', String.raw`^\+[^\n]*`], ['del', '^-[^\\n]*']],
  },
  sql: {
    rules: [['com', '--[^\\n]*'], ['com', BLOCK], ['str', "'(?:[^']|'')*'?"], ['attr', '"[^"]*"?|`[^`]*`?'],
      ['num', NUM], ['id', ID]],
    kw: words('select from where and or not insert into values update set delete create table drop alter add ' +
      'column index primary key foreign references join left right inner outer full cross on as group by order ' +
      'having limit offset union all distinct case when then else end null is in like between exists default ' +
      'unique check constraint returning with begin commit rollback transaction if desc asc view trigger ' +
      'cascade true false integer int text varchar char boolean bigint serial timestamp date real float ' +
      'numeric blob count sum avg min max coalesce'),
    ci: true,
  },
};
const ALIAS = {
  rs: 'rust', javascript: 'js', jsx: 'js', mjs: 'js', cjs: 'js', ts: 'js', typescript: 'js', tsx: 'js',
  py: 'python', python3: 'python', bash: 'sh', shell: 'sh', zsh: 'sh', console: 'sh', shellsession: 'sh',
  jsonc: 'json', json5: 'json', golang: 'go', h: 'c', 'c++': 'cpp', cc: 'cpp', cxx: 'cpp', hpp: 'cpp',
  kt: 'kotlin', yml: 'yaml', xml: 'html', xhtml: 'html', svg: 'html', patch: 'diff',
};
for (const L of Object.values(LANGS)) {
  L.re = new RegExp(L.rules.map(([, p]) => `(${p})`).join('|'), 'gmu');
  L.kinds = L.rules.map(([k]) => k);
}

const DEFS = words('fn def function func fun');
const CMD_AFTER = words('if then else elif do while until');

/** The kind of word w (ending at code[end]): keyword, type, function (called or defined) or none. */
function classify(w, L, code, end, prev) {
  if (L.kw?.has(L.ci ? w.toLowerCase() : w)) return 'kw';
  if (L.types?.has(w) || (L.caps && /^\p{Lu}/u.test(w))) return 'type';
  if (DEFS.has(prev) || code[end] === '(' || (L.macro && code[end] === '!' && code[end + 1] !== '=')) return 'fn';
  return '';
}

function run(code, L) {
  const re = L.re;
  const out = []; // pieces joined once at the end (far less garbage than a growing string)
  let cur = '', mark = 0, at = 0, prev = '', cmd = true, assigned = false, m;
  const to = (kind, from) => { // code from `from` on is of this kind: adjacent pieces of a kind share a span
    if (kind === cur) return;
    if (from > mark) {
      const text = esc(code.slice(mark, from));
      if (cur) out.push(`<span class="tok-${cur}">`, text, '</span>');
      else out.push(text);
    }
    cur = kind;
    mark = from;
  };
  re.lastIndex = 0;
  while ((m = re.exec(code))) {
    if (!m[0]) { re.lastIndex++; continue; } // no rule matches empty; never loop if one did
    const text = m[0], start = m.index, end = re.lastIndex;
    if (start > at) {
      to('', at);
      if (L.sh) { // a shell command starts a line or follows | ; & ( `
        const gap = code.slice(at, start), t = gap.trimEnd();
        if (gap.slice(t.length).includes('\n')) cmd = true;
        else if (t) cmd = /[|;&(`{]/.test(t[t.length - 1]);
        if (assigned && /\s/.test(gap)) cmd = !(assigned = false); // FOO=1 cmd
      }
    }
    let i = 1;
    while (m[i] === undefined) i++;
    const kind = L.kinds[i - 1];
    if (kind === 'id') {
      let k;
      if (L.sh) {
        k = L.kw.has(text) ? 'kw' : code[end] === '=' ? 'attr' : cmd ? 'fn' : '';
        assigned = k === 'attr' && cmd;
        cmd = k === 'kw' && CMD_AFTER.has(text);
      } else k = classify(text, L, code, end, prev);
      to(k, start);
      prev = text;
    } else {
      if (kind === 'key') {
        to('', start);
        to('attr', start + text.match(/^[ \t-]*/)[0].length);
      } else if (kind === 'tag') {
        const [head, name] = text.match(/^<[\/!?]?([^\s>\/"']*)/u);
        to('', start);
        to('kw', start + head.length - name.length);
        to(null, start + head.length);
        out.push(run(text.slice(head.length), LANGS.attrs));
        mark = end;
      } else to(kind === 'plain' ? '' : kind === 'prompt' ? 'com' : kind, start);
      if (kind !== 'com') prev = '';
      if (L.sh) cmd = kind === 'prompt' || (kind === 'com' && cmd);
    }
    at = end;
  }
  if (at < code.length) to('', at);
  to(null, code.length);
  return out.join('');
}

/** Code → HTML: escaped, with <span class="tok-…"> around tokens (escaped only for an unknown
 *  language; a block starting with a `$ ` prompt and no known language is read as shell). */
export function highlight(code, lang) {
  const src = String(code ?? '');
  const name = String(lang ?? '').toLowerCase();
  const key = Object.hasOwn(ALIAS, name) ? ALIAS[name] : name;
  const L = key !== 'attrs' && Object.hasOwn(LANGS, key) ? LANGS[key] : /^\$ /.test(src) ? sh : null;
  if (!L) return esc(src);
  try {
    return run(src, L);
  } catch {
    return esc(src); // never let a highlighting bug lose the code
  }
}
