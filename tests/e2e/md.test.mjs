// Unit tests of the console's Markdown renderer (md.js) and code highlighter (hl.js):
//   node --test tests/e2e/md.test.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { render } from '../../crates/server/web/md.js';
import { highlight } from '../../crates/server/web/hl.js';

const ENT = { '&amp;': '&', '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'" };
/** The text a browser would show for the highlighter's output. */
const text = (html) => html.replace(/<[^>]*>/g, '').replace(/&(?:amp|lt|gt|quot|#39);/g, (e) => ENT[e]);
/** Highlighter output is only escaped text and <span class="tok-…"> … </span>, never nested. */
function assertSafe(html) {
  const tags = html.match(/<[^>]*>/g) ?? [];
  let open = 0;
  for (const t of tags) {
    if (t === '</span>') open--;
    else {
      assert.match(t, /^<span class="tok-[a-z]+">$/, `unexpected tag ${t}`);
      open++;
    }
    assert.ok(open === 0 || open === 1, 'spans are not nested');
  }
  assert.equal(open, 0);
  const bare = html.replace(/<span class="tok-[a-z]+">|<\/span>/g, '');
  assert.doesNotMatch(bare, /[<>"']/, 'every < > " \' is escaped');
  assert.doesNotMatch(bare.replace(/&(?:amp|lt|gt|quot|#39);/g, ''), /&/, 'every & is escaped');
}
/** The tokens of one kind in the output, as text. */
const toks = (html, kind) =>
  [...html.matchAll(new RegExp(`<span class="tok-${kind}">([^<]*)</span>`, 'g'))].map((m) => text(m[1]));
/** Only the tags md.js writes itself. */
const MD_TAGS = /^<\/?(p|br|strong|em|del|code|pre|a|ul|ol|li|h[1-6]|hr|blockquote|div|table|thead|tbody|tr|th|td|span)(\s[^<>]*)?>$/;
const assertMdTags = (html) => {
  for (const t of html.match(/<[^>]*>/g) ?? []) assert.match(t, MD_TAGS);
};

// ---- tables -------------------------------------------------------------------------------

test('table: header, alignments, body', () => {
  const html = render('| a | b | c | d |\n|---|:---|---:|:---:|\n| 1 | 2 | 3 | 4 |');
  assert.equal(html,
    '<div class="table-wrap"><table><thead><tr><th>a</th><th class="align-left">b</th>' +
    '<th class="align-right">c</th><th class="align-center">d</th></tr></thead><tbody><tr><td>1</td>' +
    '<td class="align-left">2</td><td class="align-right">3</td><td class="align-center">4</td></tr>' +
    '</tbody></table></div>');
});

test('table: outer pipes are optional', () => {
  const html = render('a | b\n--- | ---\n1 | 2');
  assert.equal(html, '<div class="table-wrap"><table><thead><tr><th>a</th><th>b</th></tr></thead>' +
    '<tbody><tr><td>1</td><td>2</td></tr></tbody></table></div>');
});

test('table: inline markup in cells', () => {
  const html = render('| **bold** | `code` |\n|---|---|\n| *em* | [x](https://example.com/a) |');
  assert.match(html, /<th><strong>bold<\/strong><\/th><th><code>code<\/code><\/th>/);
  assert.match(html, /<td><em>em<\/em><\/td><td><a href="https:\/\/example.com\/a" rel="noopener noreferrer" target="_blank">x<\/a><\/td>/);
});

test('table: HTML and quotes in cells stay text', () => {
  const html = render('| h | i |\n|---|---|\n| <script>alert(1)</script> | <img src=x onerror="alert(1)"> |\n| "dq" | \'sq\' |');
  assert.ok(!html.includes('<script'), html);
  assert.ok(!html.includes('<img'), html);
  assert.match(html, /<td>&lt;script&gt;alert\(1\)&lt;\/script&gt;<\/td>/);
  assert.match(html, /<td>&lt;img src=x onerror=&quot;alert\(1\)&quot;&gt;<\/td>/);
  assert.match(html, /<td>&quot;dq&quot;<\/td><td>&#39;sq&#39;<\/td>/);
  assertMdTags(html);
});

test('table: escaped pipes stay in the cell', () => {
  const html = render('| expr | note |\n|---|---|\n| `a \\| b` | x \\| y |');
  assert.match(html, /<td><code>a \| b<\/code><\/td><td>x \| y<\/td>/);
});

test('table: short rows are padded, extra cells dropped', () => {
  const html = render('| a | b | c |\n|---|---|---|\n| 1 |\n| 1 | 2 | 3 | 4 | 5 |');
  assert.match(html, /<tr><td>1<\/td><td><\/td><td><\/td><\/tr>/);
  assert.match(html, /<tr><td>1<\/td><td>2<\/td><td>3<\/td><\/tr>/);
  assert.ok(!html.includes('4') && !html.includes('5'));
});

test('table: ends at a blank line or a line without a pipe', () => {
  assert.match(render('| a |\n|---|\n| 1 |\n\nnext'), /<\/table><\/div><p>next<\/p>$/);
  assert.match(render('| a |\n|---|\n| 1 |\nplain text'), /<tr><td>1<\/td><\/tr><\/tbody><\/table><\/div><p>plain text<\/p>$/);
});

test('a pipe line without a delimiter row is a paragraph', () => {
  assert.equal(render('a | b | c'), '<p>a | b | c</p>');
  assert.equal(render('| a | b |\n| c | d |'), '<p>| a | b |<br>| c | d |</p>');
  assert.equal(render('| a | b |\n|---|'), '<p>| a | b |<br>|---|</p>'); // column counts differ
  assert.equal(render('| a | b |\n| x | --- |'), '<p>| a | b |<br>| x | --- |</p>');
});

test('a table right after a paragraph line starts a block', () => {
  const html = render('Here are the results:\n| k | v |\n|---|--:|\n| a | 1 |');
  assert.match(html, /^<p>Here are the results:<\/p><div class="table-wrap"><table>/);
  assert.match(html, /<td class="align-right">1<\/td>/);
});

test('streaming: header and delimiter only is a table without rows', () => {
  assert.equal(render('| a | b |\n|---|---|'),
    '<div class="table-wrap"><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody></tbody></table></div>');
  assert.equal(render('| a | b |\n|---|---|\n'),
    '<div class="table-wrap"><table><thead><tr><th>a</th><th>b</th></tr></thead><tbody></tbody></table></div>');
  assert.equal(render('| a | b |'), '<p>| a | b |</p>'); // the delimiter row has not arrived yet
});

test('tables inside list items and quotes', () => {
  assert.match(render('> | a |\n> |---|\n> | 1 |'), /^<blockquote><div class="table-wrap"><table>.*<td>1<\/td>.*<\/blockquote>$/);
});

// ---- regressions of what md.js did before ---------------------------------------------------

test('md: emphasis, code spans, links', () => {
  assert.equal(render('**b** *i* ~~d~~ `x <y>`'), '<p><strong>b</strong> <em>i</em> <del>d</del> <code>x &lt;y&gt;</code></p>');
  assert.equal(render('[site](https://example.com) and https://a.b/c.'),
    '<p><a href="https://example.com" rel="noopener noreferrer" target="_blank">site</a> and ' +
    '<a href="https://a.b/c" rel="noopener noreferrer" target="_blank">https://a.b/c</a>.</p>');
  assert.equal(render('[x](javascript:alert(1))'), '<p>[x](javascript:alert(1))</p>');
});

test('md: headings, lists, quotes, rules, line breaks', () => {
  assert.equal(render('# Title\n\n- a\n- b\n\n3. c\n4. d'), '<h1>Title</h1><ul><li>a</li><li>b</li></ul><ol start="3"><li>c</li><li>d</li></ol>');
  assert.equal(render('> q\n\n---\n\nline 1\nline 2'), '<blockquote><p>q</p></blockquote><hr><p>line 1<br>line 2</p>');
});

test('md: fences, with and without a language, unclosed while streaming', () => {
  assert.equal(render('```\na < b\n```'), '<pre><code>a &lt; b</code></pre>');
  assert.equal(render('```rust\nlet x = 1;\n```'),
    '<pre><code class="language-rust"><span class="tok-kw">let</span> x = <span class="tok-num">1</span>;</code></pre>');
  assert.equal(render('~~~python\n# still streaming'),
    '<pre><code class="language-python"><span class="tok-com"># still streaming</span></code></pre>');
  assert.equal(render('```c++\nint x;\n```'), '<pre><code class="language-c++"><span class="tok-kw">int</span> x;</code></pre>');
  assert.equal(render('```unknownlang\n"x" if 1\n```'), '<pre><code class="language-unknownlang">&quot;x&quot; if 1</code></pre>');
});

test('md: markup inside a fence stays text', () => {
  for (const lang of ['', 'html', 'js', 'rust', 'sh', 'nope']) {
    const html = render('```' + lang + '\n</code></pre><script>alert(1)</script><img src=x onerror=alert(1)>\n```');
    assert.ok(!/<script|<img|<\/pre><script/.test(html), html);
    assertMdTags(html);
    assert.equal(text(html.replace(/^<pre><code[^>]*>|<\/code><\/pre>$/g, '')),
      '</code></pre><script>alert(1)</script><img src=x onerror=alert(1)>');
  }
});

test('md: the NUL used to stash inline HTML cannot be smuggled in', () => {
  assert.equal(render('a \u00000\u0000 `c`'), '<p>a 0 <code>c</code></p>');
});

// ---- highlighter ----------------------------------------------------------------------------

// [languages, sample, expected tokens per kind]
const SAMPLES = [
  [['rust', 'rs'], 'fn main() {\n    let s = "hi \\" there"; // note\n    let n: u32 = 42;\n    println!("{s}");\n}\n#[derive(Debug)]\nstruct P<\'a> { c: char = \'x\', r: &\'a str }',
    { kw: ['fn', 'let', 'struct'], str: ['"hi \\" there"', "'x'"], com: ['// note'], num: ['42'], fn: ['main', 'println'], type: ['u32', 'P', 'str'], attr: ['#[derive(Debug)]'] }],
  [['javascript', 'js', 'ts', 'typescript', 'jsx', 'tsx'], "import { x } from './a.js';\n/* block */ const n = 0x1f + 1.5e3;\nfunction go(a) { return `t ${a}` + 'q'; } // end\nclass Foo {}",
    { kw: ['import', 'from', 'const', 'function', 'return', 'class'], str: ["'./a.js'", '`t ${a}`', "'q'"], com: ['/* block */', '// end'], num: ['0x1f', '1.5e3'], fn: ['go'], type: ['Foo'] }],
  [['python', 'py'], '@cache\ndef area(r: float) -> float:\n    """Doc."""\n    return 3.14 * r ** 2  # approx\nprint(f"{area(2)}", None)',
    { kw: ['def', 'return', 'None'], str: ['"""Doc."""', 'f"{area(2)}"'], com: ['# approx'], num: ['3.14', '2'], fn: ['area', 'print'], attr: ['@cache'] }],
  [['bash', 'sh', 'shell', 'zsh', 'console'], '$ cargo build --release 2>&1 | tee "out log" # build\nif [ -n "$X" ]; then echo \'ok\' $HOME; fi\nFOO=1 make -j 4',
    { kw: ['if', 'then', 'fi'], str: ['"out log"', '"$X"', "'ok'"], com: ['$', '# build'], num: ['2', '1', '4'], fn: ['cargo', 'tee', 'echo', 'make'], attr: ['$HOME', 'FOO'] }],
  [['json'], '{"name": "sb", "n": [1, -2.5e3], "ok": true, "v": null}',
    { kw: ['true', 'null'], str: ['"sb"'], num: ['1', '2.5e3'], attr: ['"name"', '"n"', '"ok"', '"v"'] }],
  [['go'], 'package main\n\nfunc main() {\n\tvar s string = `raw`\n\tfmt.Println("x", 7, \'r\') // c\n}',
    { kw: ['package', 'func', 'var'], str: ['`raw`', '"x"', "'r'"], com: ['// c'], num: ['7'], fn: ['main', 'Println'], type: ['string'] }],
  [['c', 'cpp', 'c++', 'java', 'kotlin', 'swift'], '#include <stdio.h>\n/* c */ int main() { return printf("%d\\n", 10) + \'a\'; } // x\n@Override class Foo {}',
    { str: ['"%d\\n"', "'a'"], com: ['/* c */', '// x'], num: ['10'], fn: ['printf'], attr: ['#include', '@Override'], type: ['Foo'] }],
  [['toml'], '[package]\nname = "switchboard" # the name\nversion = 3\ndebug = true\n[[bin]]',
    { kw: ['true'], str: ['"switchboard"'], com: ['# the name'], num: ['3'], attr: ['name', 'version', 'debug'], type: ['[package]', '[[bin]]'] }],
  [['yaml', 'yml'], '---\nname: ci # workflow\non:\n  - push: "main"\n    retries: 3\nenabled: true',
    { kw: ['true'], str: ['"main"'], com: ['---', '# workflow'], num: ['3'], attr: ['name', 'on', 'push', 'retries', 'enabled'] }],
  [['html', 'xml'], '<!-- note -->\n<a href="https://x.y" data-n=\'1\' hidden>Tom &amp; <b>Jerry</b></a>',
    { kw: ['a', 'b', 'b', 'a'], str: ['"https://x.y"', "'1'"], com: ['<!-- note -->'], attr: ['href', 'data-n', 'hidden'] }],
  [['diff'], 'diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-old line\n+new line\n same',
    { ins: ['+new line'], del: ['-old line'], kw: ['@@ -1,2 +1,2 @@'], com: ['diff --git a/f b/f', '--- a/f', '+++ b/f'] }],
  [['sql'], "SELECT name, count(*) FROM t WHERE note = 'it''s' AND n > 10 -- c\n/* b */ order by 1;",
    { kw: ['SELECT', 'count', 'FROM', 'WHERE', 'AND', 'order', 'by'], str: ["'it''s'"], com: ['-- c', '/* b */'], num: ['10', '1'] }],
];

for (const [langs, src, want] of SAMPLES) {
  test(`highlight ${langs.join('/')}: tokens, text kept, escaped`, () => {
    for (const lang of langs) {
      const html = highlight(src, lang);
      assertSafe(html);
      assert.equal(text(html), src, `${lang}: the text is unchanged`);
      for (const [kind, list] of Object.entries(want)) {
        const got = toks(html, kind);
        for (const w of list) assert.ok(got.includes(w), `${lang}: ${kind} ${JSON.stringify(w)} in ${JSON.stringify(got)}`);
      }
    }
  });
}

test('highlight: words inside identifiers, strings and comments are not keywords', () => {
  const html = highlight('let format = "if else"; // return\nlet iffy = 1;', 'rust');
  assert.deepEqual(toks(html, 'kw'), ['let', 'let']);
  assert.deepEqual(toks(html, 'num'), ['1']);
});

test('highlight: unknown or missing language is only escaped', () => {
  for (const lang of [undefined, null, '', 'brainfuck', 'attrs', 'toString', '__proto__', 'constructor']) {
    assert.equal(highlight('if "x" < 1 // y', lang), 'if &quot;x&quot; &lt; 1 // y');
  }
  assert.equal(highlight('', 'rust'), '');
  assert.match(highlight('$ ls -la\nout', ''), /^<span class="tok-com">\$<\/span> <span class="tok-fn">ls<\/span>/);
});

test('highlight: unterminated strings and comments run to the end (streaming)', () => {
  const cases = [ // [language, source, kind, the last token of that kind]
    ['rust', 'let s = "abc\ndef', 'str', '"abc\ndef'], ['rust', 'x /* open\nstill', 'com', '/* open\nstill'],
    ['js', 'a = `tmpl ${x}\nmore', 'str', '`tmpl ${x}\nmore'], ['python', 'x = """doc\nmore', 'str', '"""doc\nmore'],
    ['sh', "echo 'open\nline", 'str', "'open\nline"], ['html', '<div class="x', 'str', '"x'],
    ['html', '<!-- open\nmore', 'com', '<!-- open\nmore'], ['sql', "select 'open", 'str', "'open"],
    ['go', 'x := `raw\nraw', 'str', '`raw\nraw'], ['c', 'int x; /* open', 'com', '/* open'],
    ['yaml', 'a: "open\nmore', 'str', '"open\nmore'], ['toml', 'a = """open\nmore', 'str', '"""open\nmore'],
  ];
  for (const [lang, src, kind, last] of cases) {
    const html = highlight(src, lang);
    assertSafe(html);
    assert.equal(text(html), src);
    assert.equal(toks(html, kind).at(-1), last, `${lang} ${src}`);
  }
  // a one-line string (JS, C) stops at the end of its line
  assert.deepEqual(toks(highlight('x = "abc\ny = 1', 'js'), 'str'), ['"abc']);
});

test('highlight: HTML in code stays text in every language', () => {
  const evil = '</code></pre><script>alert("x")</script><img src=x onerror=\'alert(1)\'> & &amp;';
  for (const lang of ['rust', 'js', 'python', 'sh', 'json', 'go', 'c', 'toml', 'yaml', 'html', 'diff', 'sql', 'x']) {
    const html = highlight(evil, lang);
    assertSafe(html);
    assert.equal(text(html), evil, lang);
  }
});

test('highlight: random input never throws, keeps its text, stays safe', () => {
  const alphabet = ['"', "'", '`', '\\', '/', '*', '#', '<', '>', '&', '-', '+', '@', '$', '{', '}', '[', ']', '(', ')',
    ':', '=', '|', '!', ' ', '\n', '\t', 'a', 'fn', 'if', '0', '1.5', 'x_y', 'é', '😀', '\u0000', '"""', '<!--', '-->', '/*', '*/', '@@'];
  let seed = 12345;
  const rnd = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n);
  const langs = ['rust', 'js', 'python', 'sh', 'json', 'go', 'c', 'cpp', 'java', 'kotlin', 'swift', 'toml', 'yaml', 'html', 'diff', 'sql', ''];
  for (let round = 0; round < 300; round++) {
    let src = '';
    for (let k = rnd(80); k > 0; k--) src += alphabet[rnd(alphabet.length)];
    for (const lang of langs) {
      const html = highlight(src, lang);
      assertSafe(html);
      assert.equal(text(html), src, `${lang}: ${JSON.stringify(src)}`);
    }
  }
});

// Catastrophic backtracking takes seconds or more on every run; timing up to three runs and
// keeping the fastest keeps a busy machine (a build alongside) from failing the test.
function fastest(f, limit) {
  let best = Infinity;
  for (let k = 0; k < 3 && best >= limit; k++) {
    const t0 = performance.now();
    f();
    best = Math.min(best, performance.now() - t0);
  }
  return best;
}

test('highlight: pathological input stays fast (200 KB in < 200 ms)', () => {
  const inputs = [
    '"\\'.repeat(70000), "'\\".repeat(70000), '/*'.repeat(100000), '"/*\\\'`'.repeat(40000),
    '\\'.repeat(200000), '"'.repeat(200000), "'".repeat(200000), '#['.repeat(100000), '<a '.repeat(70000),
    '<a b="'.repeat(35000), 'a '.repeat(100000) + ':', ' '.repeat(200000) + 'x', 'x = ' + '1.'.repeat(100000),
    '\'a'.repeat(100000), 'a:\n'.repeat(70000), '$'.repeat(200000), '-- \n'.repeat(50000), "''".repeat(100000),
    '<'.repeat(200000), '<a'.repeat(100000), 'a=\n'.repeat(70000), '[['.repeat(100000), '- a:'.repeat(50000),
    '${'.repeat(100000), 'r#"'.repeat(70000), '@@\n+\n-\n'.repeat(25000), '"""'.repeat(70000),
    // an opening quote then only backslashes: what an ambiguous string pattern backtracks on forever
    ...['"', "'", '`', '"""', "'''", '<a b="', 'r#"', '/*', '<!--'].map((q) => q + '\\'.repeat(200000)),
  ];
  const langs = ['rust', 'js', 'python', 'sh', 'json', 'go', 'c', 'cpp', 'java', 'kotlin', 'swift', 'toml', 'yaml', 'html', 'diff', 'sql'];
  for (const src of inputs) {
    for (const lang of langs) {
      const ms = fastest(() => highlight(src, lang), 200);
      assert.ok(ms < 200, `${lang} on ${JSON.stringify(src.slice(0, 12))}…: ${ms.toFixed(1)} ms`);
    }
  }
  const reply = '```rust\n' + '"\\/*'.repeat(50000) + '\n```\n| a |\n|---|\n' + '| x |\n'.repeat(30000);
  assert.ok(fastest(() => render(reply), 400) < 400, 'render of a large reply');
});
