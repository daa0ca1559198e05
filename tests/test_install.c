/*
 * test_install.c - cairn installed as a user installs it: `make install
 * PREFIX=<scratch dir>` of the release build (which `make test` builds), a
 * program of one's own (workers/examples/embed.c) compiled through
 * pkg-config against the installed shared and static library, the man pages
 * rendered by man-db, and `make deb`'s three packages checked by lintian and
 * file by file, installed into a scratch root with dpkg, used (cairn
 * --version, man cairn, the demo, a program built against libcairn-dev) and
 * purged.
 *
 * The release build is shared by every test here and by a developer's own
 * make: each make runs under flock on build/.install.lock.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "support.h"

/* The checkout the tests were built from ($CAIRN_SRC_DIR, set by run.sh). */
static const char *top(void)
{
	const char *t = getenv("CAIRN_SRC_DIR");
	cr_assert(t && *t, "CAIRN_SRC_DIR is not set: run the suite through tests/run.sh");
	return t;
}

/* Runs the printf-built shell script with sh -c, outside of any make that
 * started the tests (its jobserver is not ours); out and err as trun. */
static int tsh(char **out, char **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tsh(char **out, char **err, const char *fmt, ...)
{
	char script[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(script, sizeof script, fmt, ap);
	va_end(ap);
	const char *argv[] = {"/bin/sh", "-c", script, NULL};
	const char *env[] = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", NULL};
	return trun(argv, env, out, err);
}

/* A scratch directory with cairn installed under it (PREFIX=dir). */
static void install_into(char dir[64])
{
	snprintf(dir, 64, "/tmp/cairn-install-XXXXXX");
	cr_assert(mkdtemp(dir));
	char *out, *err;
	int rc = tsh(&out, &err,
	             "flock '%s/build/.install.lock' make -C '%s' --no-print-directory install "
	             "PREFIX='%s' 2>&1",
	             top(), top(), dir);
	cr_assert_eq(rc, 0, "make install PREFIX=%s exited %d:\n%s%s", dir, rc, out, err);
	free(out);
	free(err);
}

static void remove_dir(const char *dir)
{
	tsh(NULL, NULL, "rm -rf '%s'", dir);
}

/* Compiles the embedding example against the installation in dir through
 * pkg-config module (cairn or cairn-static) into dir/embed-MODULE. */
static void build_example(const char *dir, const char *module)
{
	char *out, *err;
	int rc = tsh(&out, &err,
	             "export PKG_CONFIG_PATH='%s/lib/pkgconfig' && cc -std=c17 -Wall -Werror -o "
	             "'%s/embed-%s' '%s/workers/examples/embed.c' $(pkg-config --cflags --libs "
	             "%s libcjson) 2>&1",
	             dir, dir, module, top(), module);
	cr_assert_eq(rc, 0, "building the example with pkg-config %s exited %d:\n%s%s", module, rc,
	             out, err);
	free(out);
	free(err);
}

/* Starts dir/embed-cairn as a user would: LD_LIBRARY_PATH at the installed
 * library, settings in the environment, its log in log_path. */
static pid_t start_example(const char *dir, const char *db, const char *log_path)
{
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		FILE *f = freopen(log_path, "a", stderr);
		(void)f;
		char lib[128], path[128];
		snprintf(lib, sizeof lib, "%s/lib", dir);
		snprintf(path, sizeof path, "%s/embed-cairn", dir);
		setenv("LD_LIBRARY_PATH", lib, 1);
		setenv("DATABASE_URL", db, 1);
		setenv("CAIRN_HTTP_ADDR", "127.0.0.1:0", 1);
		setenv("CAIRN_SHUTDOWN_TIMEOUT", "10s", 1);
		execl(path, "embed", (char *)NULL);
		_exit(127);
	}
	return pid;
}

Test(install, embedding_example_links_the_installed_shared_library_and_runs_a_workflow)
{
	char dir[64];
	install_into(dir);
	build_example(dir, "cairn");
	char *out, *err;
	/* It needs libcairn.so.0 (the SONAME), which exports cairn_* only. */
	cr_assert_eq(tsh(&out, NULL, "readelf -d '%s/embed-cairn'", dir), 0);
	cr_assert(strstr(out, "[libcairn.so.0]"), "embed-cairn does not need libcairn.so.0:\n%s",
	          out);
	free(out);
	cr_assert_eq(
	    tsh(&out, NULL, "nm -D --defined-only '%s/lib/libcairn.so.0' | awk '{print $3}'", dir),
	    0);
	int n = 0;
	for (char *save, *s = strtok_r(out, "\n", &save); s; s = strtok_r(NULL, "\n", &save), n++)
		cr_assert(strncmp(s, "cairn_", 6) == 0, "libcairn.so exports %s", s);
	cr_assert_gt(n, 50, "libcairn.so exports only %d symbols", n);
	free(out);

	const char *db = tdb_new_migrated();
	char log[64];
	tlog_file(log);
	pid_t pid = start_example(dir, db, log);
	int rc = tcli(db, &out, &err, "enqueue", "shout", "--key", "k1", "--input",
	              "{\"text\": \"hi\"}", "--wait", "--timeout", "60s", NULL);
	char *text = tfile_read(log);
	cr_assert_eq(rc, 0, "enqueue --wait exited %d: %s%s; the example's log:\n%s", rc, out, err,
	             text);
	cr_assert(strstr(out, "\"shouted\"") && strstr(out, "HI!"), "result: %s", out);
	free(text);
	free(out);
	free(err);
	rc = tworker_stop(pid, SIGTERM, 30000);
	text = tfile_take(log);
	cr_assert_eq(rc, 0, "the example exited %d after SIGTERM; its log:\n%s", rc, text);
	cr_assert(strstr(text, "msg=\"stopped\""), "%s", text);
	free(text);
	remove_dir(dir);
}

Test(install, static_pkg_config_links_libcairn_a_into_the_program)
{
	char dir[64];
	install_into(dir);
	build_example(dir, "cairn-static");
	char *out, *err;
	cr_assert_eq(tsh(&out, NULL, "readelf -d '%s/embed-cairn-static'", dir), 0);
	cr_assert(!strstr(out, "libcairn"), "embed-cairn-static needs libcairn:\n%s", out);
	free(out);
	/* `pkg-config --static --libs cairn` links as well. */
	int rc = tsh(&out, &err,
	             "export PKG_CONFIG_PATH='%s/lib/pkgconfig' && cc -std=c17 -o '%s/embed-s' "
	             "'%s/workers/examples/embed.c' $(pkg-config --static --cflags --libs cairn "
	             "libcjson) 2>&1",
	             dir, dir, top());
	cr_assert_eq(rc, 0, "pkg-config --static --libs cairn does not link:\n%s%s", out, err);
	free(out);
	free(err);
	/* It runs: the library's validation answers (no database needed). */
	const char *argv[] = {NULL, NULL};
	char path[128];
	snprintf(path, sizeof path, "%s/embed-cairn-static", dir);
	argv[0] = path;
	const char *env[] = {"DATABASE_URL", NULL};
	rc = trun(argv, env, &out, &err);
	cr_assert_eq(rc, 2, "exit %d: %s%s", rc, out, err);
	cr_assert(strstr(err, "DATABASE_URL is not set"), "%s", err);
	free(out);
	free(err);
	remove_dir(dir);
}

/* Every word of list (one per line) is in text; the first missing, or NULL. */
static char *first_missing(char *list, const char *text)
{
	for (char *save, *s = strtok_r(list, "\n", &save); s; s = strtok_r(NULL, "\n", &save))
		if (!strstr(text, s))
			return s;
	return NULL;
}

Test(install, man_pages_render_and_name_every_command_setting_and_function)
{
	char dir[64];
	install_into(dir);
	char *page[3], *warn[3];
	const char *file[] = {"man1/cairn.1", "man8/cairn-worker.8", "man3/cairn.3"};
	for (int i = 0; i < 3; i++) {
		int rc = tsh(&page[i], &warn[i], "MANWIDTH=80 man --warnings -l '%s/share/man/%s'",
		             dir, file[i]);
		cr_assert_eq(rc, 0, "man -l %s exited %d: %s", file[i], rc, warn[i]);
		cr_assert_str_empty(warn[i], "man -l %s warns: %s", file[i], warn[i]);
		cr_assert_gt(strlen(page[i]), 2000, "%s renders to: %s", file[i], page[i]);
	}
	char *list, *miss;
	/* cairn(1): every command of `cairn --help` has its section. */
	cr_assert_eq(tsh(&list, NULL,
	                 "'%s/bin/cairn' --help | sed -n '/Commands:$/,/^$/s/^  \\([a-z-]*\\) "
	                 ".*/usage: cairn \\1/p'",
	                 dir),
	             0);
	cr_assert((miss = first_missing(list, page[0])) == NULL, "cairn(1) lacks \"%s\"", miss);
	free(list);
	/* cairn-worker(8): every setting of the worker's table. */
	cr_assert_eq(tsh(&list, NULL,
	                 "'%s/bin/cairn-worker' --check-config --db host=h | sed 's/=.*//'", dir),
	             0);
	cr_assert_gt(strlen(list), 500, "%s", list);
	cr_assert((miss = first_missing(list, page[1])) == NULL, "cairn-worker(8) lacks \"%s\"",
	          miss);
	free(list);
	/* cairn(3): every function of cairn.h. */
	cr_assert_eq(tsh(&list, NULL,
	                 "grep -o 'cairn_[a-z_0-9]*(' '%s/include/cairn.h' | tr -d '(' | sort -u",
	                 dir),
	             0);
	cr_assert_gt(strlen(list), 500, "%s", list);
	cr_assert((miss = first_missing(list, page[2])) == NULL, "cairn(3) lacks \"%s\"", miss);
	free(list);
	for (int i = 0; i < 3; i++) {
		free(page[i]);
		free(warn[i]);
	}
	remove_dir(dir);
}

/* The completion scripts are where bash-completion and zsh look under the
 * prefix, and the installed bash one completes. */
Test(install, completion_scripts_are_installed_where_bash_and_zsh_look)
{
	char dir[64];
	install_into(dir);
	char *out, *err;
	int rc =
	    tsh(&out, &err,
	        "bash -c 'source \"$0/share/bash-completion/completions/cairn\" && "
	        "COMP_WORDS=(cairn migrate --j); COMP_CWORD=2; _cairn; echo \"${COMPREPLY[*]}\"' "
	        "'%s' && head -n 1 '%s/share/zsh/vendor-completions/_cairn'",
	        dir, dir);
	cr_assert_eq(rc, 0, "exit %d: %s%s", rc, out, err);
	cr_assert_str_eq(out, "--json\n#compdef cairn\n", "%s%s", out, err);
	free(out);
	free(err);
	remove_dir(dir);
}

/* The packages of `make deb`, as it splits them. */
enum { DEB_LIB, DEB_DEV, DEB_CLI, NDEBS };
static const char *const DEB_NAME[NDEBS] = {"libcairn0", "libcairn-dev", "cairn"};

/* Runs `make deb` and copies its packages into dir (mkdtemp'ed here) while
 * it holds the lock, so that another test's `make deb` cannot replace them
 * under this one; deb[i] is the copy of DEB_NAME[i]'s package. */
static void make_debs(char dir[64], char deb[NDEBS][256])
{
	snprintf(dir, 64, "/tmp/cairn-deb-XXXXXX");
	cr_assert(mkdtemp(dir));
	char *out, *err;
	int rc = tsh(&out, &err,
	             "flock '%s/build/.install.lock' sh -c \"make -C '%s' --no-print-directory -s "
	             "deb >'%s/list' && xargs cp -t '%s' <'%s/list'\" 2>&1 && cat '%s/list'",
	             top(), top(), dir, dir, dir, dir);
	cr_assert_eq(rc, 0, "make deb exited %d: %s%s", rc, out, err);
	free(out);
	free(err);
	for (int i = 0; i < NDEBS; i++) {
		rc = tsh(&out, NULL, "ls '%s'/%s_*.deb", dir, DEB_NAME[i]);
		cr_assert_eq(rc, 0, "make deb built no %s package", DEB_NAME[i]);
		snprintf(deb[i], 256, "%.*s", (int)strcspn(out, "\n"), out);
		free(out);
	}
}

/* Debian's multiarch directory of this machine, e.g. x86_64-linux-gnu. */
static void multiarch(char out[64])
{
	char *s;
	cr_assert_eq(tsh(&s, NULL, "dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null"), 0);
	snprintf(out, 64, "%.*s", (int)strcspn(s, "\n"), s);
	free(s);
}

Test(install, deb_packages_are_lintian_clean_and_split_the_debian_way)
{
	char dir[64], deb[NDEBS][256];
	make_debs(dir, deb);
	char *out, *err;
	/* lintian, Debian's own checker, at its default level: no error and
	 * no warning (an override needs its reason, scripts/debian/). */
	int rc = tsh(&out, &err,
	             "command -v lintian >/dev/null || { echo 'lintian is not installed (make "
	             "deps)'; exit 1; }; t=$(mktemp) && lintian --fail-on error,warning '%s' '%s' "
	             "'%s' >\"$t\" 2>&1; s=$?; grep -v '^running with root privileges' \"$t\"; "
	             "rm -f \"$t\"; exit $s",
	             deb[0], deb[1], deb[2]);
	cr_assert(rc == 0 && !strstr(out, "E: ") && !strstr(out, "W: "),
	          "lintian exited %d and reports:\n%s%s", rc, out, err);
	free(out);
	free(err);

	/* Each file is in its package and in no other. */
	char ma[64], lib[128];
	multiarch(ma);
	snprintf(lib, sizeof lib, "./usr/lib/%s/", ma);
	static const struct {
		int deb;
		int in_lib; /* path is under ./usr/lib/MULTIARCH/ */
		const char *path;
	} files[] = {
	    {DEB_LIB, 1, "libcairn.so.0.1.0"},
	    {DEB_LIB, 1, "libcairn.so.0 -> libcairn.so.0.1.0"},
	    {DEB_LIB, 0, "./usr/share/doc/libcairn0/copyright"},
	    {DEB_LIB, 0, "./usr/share/doc/libcairn0/changelog.Debian.gz"},
	    {DEB_DEV, 0, "./usr/include/cairn.h"},
	    {DEB_DEV, 1, "libcairn.a"},
	    {DEB_DEV, 1, "libcairn.so -> libcairn.so.0"},
	    {DEB_DEV, 1, "pkgconfig/cairn.pc"},
	    {DEB_DEV, 1, "pkgconfig/cairn-static.pc"},
	    {DEB_DEV, 0, "./usr/share/man/man3/cairn.3.gz"},
	    {DEB_DEV, 0, "./usr/share/doc/libcairn-dev/copyright"},
	    {DEB_DEV, 0, "./usr/share/doc/libcairn-dev/changelog.Debian.gz"},
	    {DEB_CLI, 0, "./usr/bin/cairn"},
	    {DEB_CLI, 0, "./usr/bin/cairn-worker"},
	    {DEB_CLI, 0, "./usr/share/man/man1/cairn.1.gz"},
	    {DEB_CLI, 0, "./usr/share/man/man8/cairn-worker.8.gz"},
	    {DEB_CLI, 0, "./lib/systemd/system/cairn-worker.service"},
	    {DEB_CLI, 0, "./etc/cairn/cairn-worker.env"},
	    {DEB_CLI, 0, "./usr/share/bash-completion/completions/cairn"},
	    {DEB_CLI, 0, "./usr/share/zsh/vendor-completions/_cairn"},
	    {DEB_CLI, 0, "./usr/share/doc/cairn/copyright"},
	    {DEB_CLI, 0, "./usr/share/doc/cairn/changelog.Debian.gz"},
	};
	char *list[NDEBS];
	for (int i = 0; i < NDEBS; i++)
		/* "\n" PATH "\n" per entry, PATH with " -> TARGET" for a link. */
		cr_assert_eq(tsh(&list[i], NULL,
		                 "echo; dpkg-deb -c '%s' | awk '{ $1 = $2 = $3 = $4 = $5 = \"\"; "
		                 "sub(/^ +/, \"\"); print }'",
		                 deb[i]),
		             0);
	for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
		char want[256];
		snprintf(want, sizeof want, "\n%s%s\n", files[f].in_lib ? lib : "", files[f].path);
		for (int i = 0; i < NDEBS; i++)
			cr_assert((strstr(list[i], want) != NULL) == (i == files[f].deb),
			          "%s is %sin %s, which holds:%s", files[f].path,
			          i == files[f].deb ? "not " : "", DEB_NAME[i], list[i]);
	}
	for (int i = 0; i < NDEBS; i++)
		free(list[i]);

	/* The library's shlibs and symbols, the unit's environment file as a
	 * conffile, -dev tied to the library of its own version. */
	rc = tsh(&out, &err,
	         "dpkg-deb -I '%s' shlibs && dpkg-deb -I '%s' symbols | grep -c '@Base 0.1.0' && "
	         "dpkg-deb -I '%s' conffiles && dpkg-deb -f '%s' Depends",
	         deb[DEB_LIB], deb[DEB_LIB], deb[DEB_CLI], deb[DEB_DEV]);
	cr_assert_eq(rc, 0, "%s%s", out, err);
	cr_assert(strstr(out, "libcairn 0 libcairn0 (>= 0.1.0)\n"), "%s", out);
	cr_assert(strstr(out, "/etc/cairn/cairn-worker.env\n"), "%s", out);
	cr_assert(strstr(out, "libcairn0 (= 0.1.0-1)"), "%s", out);
	cr_assert_gt(atoi(strchr(out, '\n') + 1), 50, "symbols: %s", out);
	free(out);
	free(err);

	/* What the library and the binaries depend on is on this machine, at
	 * the version asked for; and it is the runtime list of scripts/deps.sh
	 * (the Dockerfile's runtime stage), no more and no fewer libraries. */
	for (int i = 0; i < NDEBS; i += 2) {
		rc = tsh(
		    &out, &err,
		    "deps=$(dpkg-deb -f '%s' Depends) && echo \"$deps\" | grep -q libpq5 && "
		    "echo \"$deps\" | tr ',' '\\n' | while read -r name op want; do "
		    "  have=$(dpkg-query -W -f '${Version}' \"$name\") || exit 1; "
		    "  [ -z \"$op\" ] || dpkg --compare-versions \"$have\" \"${op#(}\" "
		    "\"${want%%)}\" || { echo \"$name $have is not $op $want\"; exit 1; }; done",
		    deb[i]);
		cr_assert_eq(rc, 0, "%s: Depends not met on this machine: %s%s", DEB_NAME[i], out,
		             err);
		free(out);
		free(err);
	}
	rc = tsh(&out, &err,
	         "dpkg-deb -f '%s' Depends | tr ',' '\\n' | awk '{print $1}' | grep -v '^libc6$' | "
	         "sort >'%s/shlibdeps' && sh '%s/scripts/deps.sh' --runtime --list | grep '^lib' | "
	         "sort | diff '%s/shlibdeps' -",
	         deb[DEB_CLI], dir, top(), dir);
	cr_assert_eq(rc, 0,
	             "dpkg-shlibdeps (<) and scripts/deps.sh --runtime (>) name different "
	             "libraries:\n%s%s",
	             out, err);
	free(out);
	free(err);
	remove_dir(dir);
}

Test(install, deb_packages_install_into_a_scratch_root_run_the_demo_and_purge_cleanly)
{
	char pkgs[64], deb[NDEBS][256];
	make_debs(pkgs, deb);
	char *out, *err;
	/* Installed with dpkg into a root of its own (its own database), so the
	 * machine is left as it is and no root is needed; --path-include undoes
	 * the path-exclude of man pages that slim images configure. */
	char dir[64] = "/tmp/cairn-deb-XXXXXX";
	cr_assert(mkdtemp(dir));
	const char *dpkg = "dpkg --force-not-root --force-script-chrootless --path-include='*'";
	int rc = tsh(&out, &err,
	             "mkdir -p '%s/admin/updates' '%s/admin/info' '%s/root' && touch "
	             "'%s/admin/status' && %s --force-depends --admindir='%s/admin' "
	             "--instdir='%s/root' -i '%s' '%s' '%s' 2>&1",
	             dir, dir, dir, dir, dpkg, dir, dir, deb[0], deb[1], deb[2]);
	cr_assert_eq(rc, 0, "dpkg -i exited %d: %s%s", rc, out, err);
	free(out);
	free(err);
	rc = tsh(&out, &err, "'%s/root/usr/bin/cairn' --version", dir);
	cr_assert(rc == 0 && strcmp(out, "cairn 0.1.0\n") == 0, "cairn --version: %s%s", out, err);
	free(out);
	free(err);
	rc = tsh(&out, &err, "MANPAGER=cat man -M '%s/root/usr/share/man' cairn", dir);
	cr_assert(rc == 0 && strstr(out, "usage: cairn enqueue"), "man cairn: %s%s", out, err);
	free(out);
	free(err);
	const char *db = tdb_new();
	rc = tsh(&out, &err,
	         "CAIRN_DEMO_BIN='%s/root/usr/bin' DATABASE_URL='%s' sh '%s/scripts/demo.sh'", dir,
	         db, top());
	cr_assert_eq(rc, 0, "the demo with the installed binaries exited %d:\n%s%s", rc, out, err);
	cr_assert(strstr(out, "completed"), "%s", out);
	free(out);
	free(err);
	/* A program built against libcairn-dev needs libcairn.so.0 of
	 * libcairn0, and runs with it. */
	char ma[64];
	multiarch(ma);
	rc = tsh(&out, &err,
	         "r='%s/root' && export PKG_CONFIG_SYSROOT_DIR=\"$r\" "
	         "PKG_CONFIG_LIBDIR=\"$r/usr/lib/%s/pkgconfig\" && cc -std=c17 -Wall -Werror -o "
	         "'%s/embed' '%s/workers/examples/embed.c' $(pkg-config --cflags --libs cairn) "
	         "-lcjson && readelf -d '%s/embed' | grep NEEDED | grep libcairn && "
	         "env -u DATABASE_URL LD_LIBRARY_PATH=\"$r/usr/lib/%s\" '%s/embed' 2>&1; "
	         "echo \"exit $?\"",
	         dir, ma, dir, top(), dir, ma, dir);
	cr_assert(rc == 0 && strstr(out, "[libcairn.so.0]") &&
	              strstr(out, "DATABASE_URL is not set") && strstr(out, "exit 2"),
	          "building against libcairn-dev: %s%s", out, err);
	free(out);
	free(err);

	rc = tsh(&out, &err,
	         "%s --admindir='%s/admin' --instdir='%s/root' --purge cairn libcairn-dev "
	         "libcairn0 2>&1 && find '%s/root' -mindepth 1",
	         dpkg, dir, dir, dir);
	cr_assert(rc == 0 && strstr(out, "Purging") && !strstr(out, "/root/"),
	          "dpkg --purge left files behind (exit %d):\n%s%s", rc, out, err);
	free(out);
	free(err);
	remove_dir(dir);
	remove_dir(pkgs);
}
