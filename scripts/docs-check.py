#!/usr/bin/python3
"""docs-check.py - what `make docs` checks after `mkdocs build --strict`,
since mkdocs 1.4 (Debian 12) leaves it to INFO or does not look at all:

- every page of docs/ is in the nav of mkdocs.yml, and every nav entry is a page;
- every link of the built site to an anchor (page.html#id, #id) finds that id;
- every link of README.md and deploy/kubernetes/README.md (outside the site)
  names a file that exists and, into docs/, an anchor its built page has;
- a fenced block after <!-- excerpt: FILE --> is text of FILE as it is.

Usage: python3 scripts/docs-check.py (from the top of the checkout, after
mkdocs build). Prints one line per problem and exits 1, or exits 0 silently.
"""
import glob, os, re, sys
import yaml

problems = []
conf = yaml.safe_load(open("mkdocs.yml"))
docs, site = conf["docs_dir"], conf["site_dir"]


def nav_pages(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for n in node:
            yield from nav_pages(n)
    elif isinstance(node, dict):
        for v in node.values():
            yield from nav_pages(v)


nav = set(nav_pages(conf["nav"]))
pages = {os.path.relpath(p, docs) for p in glob.glob(os.path.join(docs, "**/*.md"), recursive=True)}
for p in sorted(pages - nav):
    problems.append(f"{docs}/{p}: not in the nav of mkdocs.yml")
for p in sorted(nav - pages):
    problems.append(f"mkdocs.yml: the nav names {p}, which is not in {docs}/")

ids = {}


def ids_of(html):
    if html not in ids:
        path = os.path.join(site, html)
        ids[html] = set(re.findall(r'\bid="([^"]+)"', open(path).read())) if os.path.exists(path) else None
    return ids[html]


for p in sorted(pages):
    html = p[:-3] + ".html"
    text = open(os.path.join(site, html)).read()
    for href in set(re.findall(r'\bhref="([^"]*#[^"]*)"', text)):
        if re.match(r"[a-z]+:", href):
            continue
        target, anchor = href.split("#", 1)
        target = os.path.normpath(os.path.join(os.path.dirname(html), target)) if target else html
        have = ids_of(target)
        if have is not None and anchor and anchor not in have:
            problems.append(f"{docs}/{p}: the link {href} finds no such anchor")

for readme in ["README.md", "deploy/kubernetes/README.md"]:
    for href in re.findall(r"\]\(([^)\s]+)\)", open(readme).read()):
        if re.match(r"[a-z]+:", href):
            continue
        target, _, anchor = href.partition("#")
        target = os.path.normpath(os.path.join(os.path.dirname(readme), target)) if target else target
        if target and not os.path.exists(target):
            problems.append(f"{readme}: the link {href} names no file")
        elif anchor:
            page = os.path.relpath(target, docs)[:-3] + ".html" if target.endswith(".md") else None
            if not page or anchor not in (ids_of(page) or ()):
                problems.append(f"{readme}: the link {href} finds no such anchor")

for md in ["README.md"] + sorted(os.path.join(docs, p) for p in pages):
    text = open(md).read()
    for src, block in re.findall(r"<!-- excerpt: (\S+) -->\n```[^\n]*\n(.*?)\n```", text, re.S):
        if not os.path.exists(src) or block not in open(src).read():
            problems.append(f"{md}: the excerpt of {src} is not that file's text")

for p in problems:
    print("docs-check: " + p)
sys.exit(1 if problems else 0)
