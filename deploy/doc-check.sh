#!/usr/bin/env bash
# The manual's drift check: fails, naming FILE:LINE, for every repository path and every intra-doc link of
# README.md and docs/*.md that does not exist — so the manual cannot name a file that moved or a section that was
# renamed (issue 45 found five such paths in the README, and nothing checked them).
#
# What is checked, and the rule that decides what "a repository path" is:
#
# (a) Repository paths. A path is resolved from the repository's root and exists when git knows the file or the
#     directory (tracked, or new and not ignored: `git ls-files --cached --others --exclude-standard`).
#   1. Anywhere in the text (prose, `code spans`, code blocks, tables, link texts): a word that starts with one of
#      the repository's top-level directories followed by a slash — crates/, deploy/, tests/, migrations/, docs/,
#      .ci/ (also after `./`). `crates/hookline-core/src/events.rs` must exist. shared/… is the shared folder that
#      sits beside the checkout (the signature tests read their vectors there): resolved from the repository's
#      parent directory when that folder is there, skipped when it is not.
#   2. Inside `code spans` only, a word that ends in a known file extension (.rs .sh .md .toml .sql .json .yaml
#      .yml .py .txt .png .svg .service .lock .cfg) and that rule 1 did not take:
#      - `SHORT/src/…`, `SHORT/tests/…`, `SHORT/benches/…`: SHORT is a crate's directory under crates/, with or
#        without its `hookline-` prefix; resolved there (`core/src/config.rs` is crates/hookline-core/src/config.rs);
#      - any other (`gateway/stripe.rs`, `markers.rs`): the manual's shorthand for a file named beside a full
#        path; it must be the end of the path of some file of the repository (`…/gateway/stripe.rs`).
#   A word is cut at whitespace, `|`, `=`, and trimmed of surrounding punctuation; `::item` and `:LINE` after a
#   file name are dropped (`mercadopago.rs::payment_resource`). `*` is a glob and `{a,b}` a brace list: each
#   alternative, and the glob, must match at least one file.
#   Not repository paths, skipped on purpose: URLs (`scheme://`), absolute paths (`/etc/hookline/…`, HTTP routes
#   such as `/v1/payment_intents`), `~`, `$VAR` and `%d` (systemd) forms, what builds and runs write (target/,
#   .run/, bench-out/, mutants.out/, and the file names listed in OUTPUTS below), the system's own files named
#   bare (SYSTEM below), and placeholders (a word with `…`, `<`, `>`, or a `{name}` without a comma).
# (b) Links. Every Markdown link or image `[text](target)` whose target is not a URL: its file, resolved from the
#     directory of the file that links (as a forge renders it), must exist; a `#anchor` (alone: this file) must be
#     a heading of the target file (GitHub's slugs: lower case, punctuation but `-` and `_` dropped, spaces to `-`,
#     `-1`, `-2` for repeats) or an explicit `<a id=…>`/`<a name=…>`.
# (c) The index: every docs/*.md is linked from docs/README.md, so no page of the manual is unreachable (and
#     deploy/newcomer.sh, which runs the marked blocks in the index's order, meets every page).
#
# Usage: deploy/doc-check.sh [ROOT]   (default: this repository; another root checks a copy — a git checkout, or
#        any directory, whose files are then all but .git/, target/, .run/, bench-out/, mutants.out/)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
exec python3 - "$root" <<'PY'
import glob, os, re, subprocess, sys, unicodedata

root = sys.argv[1]
os.chdir(root)
TOP = ('crates/', 'deploy/', 'tests/', 'migrations/', 'docs/', '.ci/')
EXT = ('rs', 'sh', 'md', 'toml', 'sql', 'json', 'yaml', 'yml', 'py', 'txt', 'png', 'svg', 'service', 'lock', 'cfg')
NOT_REPO_PREFIX = ('target/', '.run/', 'bench-out/', 'mutants.out/')
# Files the benchmark, the tests and deploy/up.sh write (named bare in the manual beside their directory).
OUTPUTS = {'report.json', 'scale.json', 'scale.txt', 'latency.svg', 'console-report.json',
           'login-flood-report.json'}
# Named bare, not ours: Debian's PostgreSQL unit.
SYSTEM = {'postgresql@15-main.service'}
shared = os.path.join(os.path.dirname(os.path.abspath(root)), 'shared')

try:
    files = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard', '-z'],
                           capture_output=True, check=True).stdout.decode().split('\0')
except (OSError, subprocess.CalledProcessError):
    # Not a git checkout (an exported copy): every file but what builds and runs write.
    files = []
    for d, sub, names in os.walk('.'):
        sub[:] = [x for x in sub if not (d == '.' and x in ('.git', 'target', '.run', 'bench-out', 'mutants.out'))]
        files += [os.path.relpath(os.path.join(d, f)) for f in names]
files = [f for f in files if f and os.path.exists(f)]
fileset = set(files)
dirs = set()
for f in files:
    parts = f.split('/')
    for i in range(1, len(parts)):
        dirs.add('/'.join(parts[:i]))
crates = {d.split('/')[1] for d in dirs if d.startswith('crates/') and d.count('/') == 1}

def exists(p):
    p = p.rstrip('/')
    return p in fileset or p in dirs

def expand(p):
    m = re.search(r'\{([^{}]*,[^{}]*)\}', p)
    if not m:
        return [p]
    return [q for alt in m.group(1).split(',') for q in expand(p[:m.start()] + alt + p[m.end():])]

def glob_exists(p):
    if '*' in p or '?' in p:
        rx = re.compile('^' + re.escape(p.rstrip('/')).replace(r'\*', '[^/]*').replace(r'\?', '[^/]') + '$')
        return any(rx.match(x) for x in fileset | dirs)
    return exists(p)

def suffix_exists(p):
    if '*' in p:
        rx = re.compile('(^|/)' + re.escape(p).replace(r'\*', '[^/]*') + '$')
        return any(rx.search(x) for x in fileset)
    return any(x == p or x.endswith('/' + p) for x in fileset)

def slug(text):
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)      # a link in a heading: its text
    text = re.sub(r'<[^>]+>', '', text).replace('`', '').replace('*', '')
    out = []
    for ch in text.strip().lower():
        if ch == ' ':
            out.append('-')
        elif ch in '-_' or unicodedata.category(ch)[0] in 'LN':
            out.append(ch)
    return ''.join(out)

def lines_of(path):
    """(line number, text, in a fenced block) for each line."""
    fence = None
    for n, line in enumerate(open(path, encoding='utf-8').read().split('\n'), 1):
        m = re.match(r'^\s*(```+|~~~+)', line)
        if m:
            if fence is None:
                fence = m.group(1)
                yield n, line, True
                continue
            if line.strip().startswith(fence):
                fence = None
                yield n, line, True
                continue
        yield n, line, fence is not None

anchor_cache = {}
def anchors(path):
    if path not in anchor_cache:
        seen, found = {}, set()
        for n, line, fenced in lines_of(path):
            if fenced:
                continue
            m = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                s = slug(m.group(1))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else f'{s}-{k}')
            for a in re.findall(r'<a\s+(?:id|name)="([^"]+)"', line):
                found.add(a)
        anchor_cache[path] = found
    return anchor_cache[path]

errors = []
def bad(path, n, msg):
    errors.append(f'{path}:{n}: {msg}')

def words(text):
    for w in re.split(r'[\s|=]+', text):
        w = w.lstrip('([<"\'*')
        while w and w[-1] in ')]>,;:.!?"\'*}':
            if w[-1] == '}' and w.count('{') >= w.count('}'):
                break                                   # the end of a brace list: `{a,b}`
            w = w[:-1]
        if w.endswith(("'s", '’s')):
            w = w[:-2]                                  # `deploy/up.sh's stack`
        if w:
            yield w

def skipped(w):
    return ('://' in w or w.startswith(('/', '~', '$', '%')) or '$' in w or '…' in w or '<' in w or '>' in w
            or re.search(r'\{[^{},]*\}', w) is not None
            or w.startswith(NOT_REPO_PREFIX))

def check_word(path, n, w, in_code):
    w = re.sub(r'::.*$', '', w)
    w = re.sub(r':\d+(-\d+)?$', '', w)
    if w.startswith('./'):
        w = w[2:]
    if skipped(w) or w in OUTPUTS or w in SYSTEM:
        return
    if w.startswith('shared/'):
        if os.path.isdir(shared):
            for alt in expand(w):
                if not glob.glob(os.path.join(shared, '..', alt)):
                    bad(path, n, f'`{alt}` does not exist in the shared folder beside the repository ({shared})')
        return
    if w.startswith(TOP):
        for alt in expand(w):
            if not glob_exists(alt):
                bad(path, n, f'repository path `{alt}` does not exist')
        return
    if not in_code:
        return
    if not re.search(r'\.(' + '|'.join(EXT) + r')$', w.rstrip('/')) and not re.search(r'\.\{[^{}]*\}$', w):
        return
    for alt in expand(w):
        first = alt.split('/')[0]
        parts = alt.split('/')
        if len(parts) > 2 and parts[1] in ('src', 'tests', 'benches') and (first in crates or 'hookline-' + first in crates):
            crate = first if first in crates else 'hookline-' + first
            full = 'crates/' + crate + '/' + '/'.join(parts[1:])
            if not glob_exists(full):
                bad(path, n, f'repository path `{alt}` (that is `{full}`) does not exist')
        elif not suffix_exists(alt):
            bad(path, n, f'file `{alt}` is no file of the repository (no path ends with it)')

docs = sorted(glob.glob('docs/*.md'))
for path in ['README.md'] + docs:
    for n, line, fenced in lines_of(path):
        if fenced:
            for w in words(line):
                check_word(path, n, w, False)
            continue
        # code spans: every word in them, with rule 2
        for span in re.findall(r'(`+)(.+?)\1', line):
            for w in words(span[1]):
                check_word(path, n, w, True)
        prose = re.sub(r'(`+)(.+?)\1', ' ', line)
        # links and images
        for target in re.findall(r'\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)', prose):
            if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target):
                continue
            file, _, anchor = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if file and not exists(dest):
                bad(path, n, f'link target `{target}`: {dest} does not exist')
                continue
            if anchor:
                if not dest.endswith('.md') or os.path.isdir(dest):
                    bad(path, n, f'link target `{target}`: an anchor into a file that is not Markdown')
                elif anchor not in anchors(dest):
                    bad(path, n, f'link target `{target}`: {dest} has no heading with the anchor #{anchor}')
        # prose outside links' targets: rule 1
        for w in words(re.sub(r'\]\([^)]*\)', '] ', prose)):
            check_word(path, n, w, False)

if os.path.exists('docs/README.md'):
    index = open('docs/README.md', encoding='utf-8').read()
    linked = {os.path.normpath(os.path.join('docs', t.split('#')[0]))
              for t in re.findall(r'\]\(([^)#\s]+)', index)}
    for d in docs:
        if d != 'docs/README.md' and d not in linked:
            bad('docs/README.md', 1, f'{d} is not linked from the index')

for e in errors:
    print('doc-check: ' + e, file=sys.stderr)
if errors:
    print(f'doc-check: {len(errors)} problem(s) in README.md and docs/*.md', file=sys.stderr)
    sys.exit(1)
print(f'doc-check: README.md and {len(docs)} files of docs/: every repository path and intra-doc link exists')
PY
