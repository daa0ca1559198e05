#!/usr/bin/python3
"""docs-samples.py - runs the samples of the guide (README.md, docs/*.md)
marked runnable, against the PostgreSQL server of $DATABASE_URL and the
built binaries ($CAIRN_BIN_DIR, else bin/), from the top of the checkout.

A fenced block is runnable when the line before it is a marker, invisible
on the site:

  <!-- test -->              a fresh migrated database and a cairn-worker
                             (the built-ins, CAIRN_HTTP_TOKEN set) serving it;
                             127.0.0.1:8080 in the block is that worker's address
  <!-- test: no worker -->   a fresh empty database; the block starts what it needs
  <!-- test: transcript -->  `$ command` lines, each followed by the exact
                             output (stdout and stderr) it must print

A ```sh block runs under `sh -eu` (its background jobs are killed after it),
a ```sql block under `psql -v ON_ERROR_STOP=1`. The marked blocks of one page
and kind share one database, in the order they appear; an identical block in
two files runs once. Each block has 120 s. Every process gets DATABASE_URL,
CAIRN_HTTP_ADDR=127.0.0.1:0 (a sample's own worker takes a free port) and
the binaries first in PATH.

Usage: docs-samples.py [--list]. Prints a line per block, the output of a
block that fails, and "docs-samples: N blocks ran, M failed"; exits 1 on a
failure.
"""
import glob, os, re, secrets, signal, subprocess, sys, time, urllib.request
import psycopg
from psycopg.conninfo import make_conninfo

MARKER = re.compile(r"^<!-- test(?:: (no worker|transcript))? -->\n```(\w*)\n(.*?)^```$", re.M | re.S)
TIMEOUT = 120


def samples():
    seen, out = set(), []
    for md in ["README.md"] + sorted(glob.glob("docs/*.md")):
        text = open(md).read()
        for m in MARKER.finditer(text):
            kind, lang, body = m.group(1) or "worker", m.group(2), m.group(3)
            if body in seen:
                continue
            seen.add(body)
            line = text.count("\n", 0, m.start()) + 2
            out.append({"where": f"{md}:{line}", "page": md, "kind": kind, "lang": lang, "body": body})
    return out


def run_block(s, env):
    if s["kind"] == "transcript":
        return transcript(s["body"], env)
    if s["lang"] == "sql":
        argv = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", env["DATABASE_URL"]]
        script = s["body"]
    elif s["lang"] in ("sh", "bash"):
        argv = ["sh", "-eu"]
        script = s["body"] + "\nkill $(jobs -p) 2>/dev/null || true\n"
    else:
        return 1, f"no way to run a ```{s['lang']} block"
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(script, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        out, p.returncode = f"(did not finish within {TIMEOUT} s)", -1
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # what it left running
        except ProcessLookupError:
            pass
    return p.returncode, out


def transcript(body, env):
    steps = []
    for line in body.split("\n"):
        if line.startswith("$ "):
            steps.append([line[2:], []])
        elif steps and line:
            steps[-1][1].append(line)
    problems = []
    for cmd, want in steps:
        p = subprocess.run(["sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           text=True, timeout=TIMEOUT)
        if p.stdout.rstrip("\n") != "\n".join(want):
            problems.append(f"$ {cmd}\nprinted:\n{p.stdout}wanted:\n" + "\n".join(want))
    return (1 if problems else 0), "\n".join(problems)


class Database:
    """A database of its own on the server of $DATABASE_URL, dropped after."""

    def __init__(self, admin):
        self.admin, self.name = admin, f"cairn_docs_{os.getpid()}_{secrets.token_hex(4)}"
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{self.name}"')
        self.url = make_conninfo(admin, dbname=self.name)

    def drop(self):
        with psycopg.connect(self.admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


class Worker:
    """cairn-worker with the built-ins on a free port, ready (/readyz 200)."""

    def __init__(self, env):
        self.log = open(f"/tmp/cairn-docs-worker-{os.getpid()}-{secrets.token_hex(4)}.log", "w+")
        self.proc = subprocess.Popen(["cairn-worker"], env=env, stdout=self.log, stderr=self.log)
        deadline, self.addr = time.time() + 60, None
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"cairn-worker started.*?http_port[\":=]+(\d+)", open(self.log.name).read())
            if m and not self.addr:
                self.addr = f"127.0.0.1:{m.group(1)}"
            if self.addr and self.ready():
                return
            time.sleep(0.05)
        raise RuntimeError("cairn-worker did not become ready:\n" + open(self.log.name).read()[-3000:])

    def ready(self):
        try:
            return urllib.request.urlopen(f"http://{self.addr}/readyz", timeout=2).status == 200
        except OSError:
            return False

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def main():
    todo = samples()
    if "--list" in sys.argv:
        for s in todo:
            print(f"{s['where']} ({s['kind']}, {s['lang']})")
        return 0
    admin = os.environ["DATABASE_URL"]
    bindir = os.environ.get("CAIRN_BIN_DIR") or os.path.abspath("bin")
    base = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], CAIRN_HTTP_ADDR="127.0.0.1:0")
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        base.pop(k, None)
    failed, groups = 0, {}
    for s in todo:
        groups.setdefault((s["page"], s["kind"]), []).append(s)
    for (page, kind), blocks in groups.items():
        db = Database(admin)
        env = dict(base, DATABASE_URL=db.url)
        worker = None
        try:
            if kind == "worker":
                subprocess.run(["cairn", "migrate"], env=env, check=True, capture_output=True)
                env["CAIRN_HTTP_TOKEN"] = secrets.token_hex(16)
                worker = Worker(env)
            for s in blocks:
                if worker:
                    s["body"] = s["body"].replace("127.0.0.1:8080", worker.addr)
                started = time.time()
                rc, out = run_block(s, env)
                took = time.time() - started
                if rc == 0:
                    print(f"docs-samples: ok {s['where']} ({kind}, {took:.1f} s)")
                else:
                    failed += 1
                    print(f"docs-samples: FAILED {s['where']} ({kind}, exit {rc}):\n{out}")
                    if worker:
                        print("docs-samples: the worker's log:\n" + open(worker.log.name).read()[-3000:])
        finally:
            if worker:
                worker.stop()
            db.drop()
    print(f"docs-samples: {len(todo)} blocks ran, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
