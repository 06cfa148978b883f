// A small, safe Markdown renderer for model output.
//
// Everything is HTML-escaped before any markup is added, and the only tags produced are the
// ones written below, so text from a model can never become HTML of its own. Links are made
// only for http(s) URLs. Unclosed code fences (a reply still streaming) run to the end, and a
// table whose body has not arrived yet is a table without rows. Code blocks are highlighted by
// hl.js, which escapes the same way and adds only <span class="tok-…">.

import { highlight } from './hl.js';

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => ESC[c]);

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

const startsBlockLine = (line) =>
  FENCE.test(line) || HEADING.test(line) || ITEM.test(line) || QUOTE.test(line) || RULE.test(line);
const startsBlock = (lines, i) => startsBlockLine(lines[i]) || tableAt(lines, i) !== null;

/** The cells of a table row: outer pipes optional, `\|` is a pipe inside a cell. */
function cells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const out = [''];
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') out[out.length - 1] += s[++i];
    else if (s[i] === '|') out.push('');
    else out[out.length - 1] += s[i];
  }
  return out.map((c) => c.trim());
}
const isRow = (line) => /(^|[^\\])\|/.test(line) && !startsBlockLine(line);
const ALIGN = { '::': 'center', ':-': 'left', '-:': 'right' };

/** When lines[i] is a table header followed by its delimiter row: the column alignments. */
function tableAt(lines, i) {
  if (i + 1 >= lines.length || !isRow(lines[i]) || !lines[i + 1].includes('|')) return null;
  const delim = cells(lines[i + 1]);
  if (delim.length !== cells(lines[i]).length || !delim.every((c) => /^:?-+:?$/.test(c))) return null;
  return delim.map((c) => ALIGN[c[0] + c[c.length - 1]] ?? '');
}

/** A table starting at lines[i] (tableAt gave its alignments); returns [html, next index]. */
function table(lines, i, align) {
  const row = (line, tag) => {
    const cs = cells(line);
    return `<tr>${align.map((a, j) => `<${tag}${a ? ` class="align-${a}"` : ''}>${inline(cs[j] ?? '')}</${tag}>`).join('')}</tr>`;
  };
  const head = row(lines[i], 'th');
  const body = [];
  for (i += 2; i < lines.length && lines[i].trim() && isRow(lines[i]); i++) body.push(row(lines[i], 'td'));
  return [`<div class="table-wrap"><table><thead>${head}</thead><tbody>${body.join('')}</tbody></table></div>`, i];
}

const link = (url, label) =>
  `<a href="${escapeHtml(url)}" rel="noopener noreferrer" target="_blank">${escapeHtml(label)}</a>`;

/** Inline markup of one block of text: code spans and links are set aside (escaped), the
 *  rest is escaped, then emphasis is added. */
function inline(text) {
  const keep = [];
  const stash = (html) => `\u0000${keep.push(html) - 1}\u0000`;
  const restore = (html) => html.replace(/\u0000(\d+)\u0000/g, (_, i) => restore(keep[i])); // a label may hold code
  const s = text
    .replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (_, __, code) => stash(`<code>${escapeHtml(code)}</code>`))
    .replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s()<>"']+)\)/g, (_, label, url) => stash(link(url, label)))
    .replace(/\bhttps?:\/\/[^\s<>"'\u0000]*[^\s<>"'\u0000.,:;!?)]/g, (url) => stash(link(url, url)));
  return restore(escapeHtml(s)
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|\W)__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/\*(?=[^\s*])([^*]*?[^\s*])\*/g, '<em>$1</em>')
    .replace(/(^|\W)_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>')
    .replace(/\n/g, '<br>'));
}

/** A list starting at lines[i]; returns [html, next index]. */
function list(lines, i) {
  const [, lead, marker] = lines[i].match(ITEM);
  const ordered = /\d/.test(marker);
  const items = [];
  while (i < lines.length) {
    const m = lines[i].match(ITEM);
    if (m && m[1].length <= lead.length) {
      if (/\d/.test(m[2]) !== ordered) break;
      items.push([m[3]]);
    } else if (items.length && lines[i].trim() && /^\s/.test(lines[i])) {
      items[items.length - 1].push(lines[i].replace(/^\s{1,4}/, ''));
    } else break;
    i++;
  }
  const body = items.map(([first, ...rest]) => `<li>${inline(first)}${rest.length ? render(rest.join('\n')) : ''}</li>`);
  const start = parseInt(marker, 10);
  const tag = ordered ? 'ol' : 'ul';
  return [`<${tag}${ordered && start !== 1 ? ` start="${start}"` : ''}>${body.join('')}</${tag}>`, i];
}

/** Markdown source → HTML string (safe to assign to innerHTML). */
export function render(src) {
  const lines = src.replace(/\r\n?/g, '\n').replace(/\u0000/g, '').split('\n'); // NUL marks stashed inline HTML
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = line.match(FENCE))) {
      const close = new RegExp(`^ {0,3}${m[1][0]}{${m[1].length},}\\s*$`);
      const body = [];
      for (i++; i < lines.length && !close.test(lines[i]); i++) body.push(lines[i]);
      i++;
      const cls = m[2] ? ` class="language-${escapeHtml(m[2])}"` : '';
      out.push(`<pre><code${cls}>${highlight(body.join('\n'), m[2])}</code></pre>`);
    } else if (!line.trim()) {
      i++;
    } else if ((m = line.match(HEADING))) {
      const n = m[1].length;
      out.push(`<h${n}>${inline(m[2])}</h${n}>`);
      i++;
    } else if (RULE.test(line)) {
      out.push('<hr>');
      i++;
    } else if (ITEM.test(line)) {
      const [html, next] = list(lines, i);
      out.push(html);
      i = next;
    } else if ((m = tableAt(lines, i))) {
      const [html, next] = table(lines, i, m);
      out.push(html);
      i = next;
    } else if (QUOTE.test(line)) {
      const body = [];
      for (; i < lines.length && (m = lines[i].match(QUOTE)); i++) body.push(m[1]);
      out.push(`<blockquote>${render(body.join('\n'))}</blockquote>`);
    } else {
      const para = [line];
      for (i++; i < lines.length && lines[i].trim() && !startsBlock(lines, i); i++) para.push(lines[i]);
      out.push(`<p>${inline(para.join('\n'))}</p>`);
    }
  }
  return out.join('');
}
