# cairn - durable workflows in C on PostgreSQL.
#
#   make            build bin/cairn, bin/cairn-worker and lib/libcairn.a
#   make test       install missing Debian packages, build with ASan/UBSan,
#                   run every test against a private PostgreSQL, and every
#                   libFuzzer target for FUZZ_TEST_SECONDS (10) each
#   make demo       install missing Debian packages, build, run a demo
#                   workflow end to end
#   make deps       install missing Debian packages (scripts/deps.sh)
#   make bench      run the benchmarks
#   make bench-memory  1,000,000 noop runs through one worker, its RSS curve
#   make fuzz       libFuzzer targets (clang) for FUZZ_SECONDS (600) each;
#                   a crash is kept in build/fuzz/artifacts
#   make chaos      kill, stop and restart workers and PostgreSQL under load;
#                   prints runs, completed, poison, lost, re-executed, drain time
#   make examples   build the example plugins into build/examples/*.so
#   make install    PREFIX=/usr/local DESTDIR= (binaries, libcairn.so.0 and
#                   libcairn.a, cairn.h, pkg-config files, man pages, bash
#                   and zsh completion, the systemd unit and its environment
#                   file)
#   make deb        the same files as Debian packages (libcairn0,
#                   libcairn-dev, cairn) in build/deb/
#   make format     clang-format every C file
#   make docs       the guide in docs/ as a static site in build/site/ (mkdocs)
#   make sdk-ts     the TypeScript SDK, compiled into sdk/typescript/dist (tsc);
#                   part of make and of the test build

PREFIX  ?= /usr/local
DESTDIR ?=
CC      ?= cc
PKGS    := libpq libcjson libcurl libsodium libmicrohttpd

# libsystemd is optional: with its development files (libsystemd-dev) the
# worker tells systemd when it is ready, feeds its watchdog and says when it
# stops (engine/notify.c); without them it builds the same, minus that.
SYSTEMD := $(shell pkg-config --exists libsystemd 2>/dev/null && echo libsystemd)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) $(SYSTEMD) 2>/dev/null) \
	$(if $(SYSTEMD),-DCAIRN_HAVE_SYSTEMD)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) $(SYSTEMD) 2>/dev/null)
VERSION    := $(shell sed -n 's/^\#define CAIRN_VERSION "\(.*\)"/\1/p' include/cairn.h)
SOMAJOR    := $(firstword $(subst ., ,$(VERSION)))

# PKG_CFLAGS and PKG_LIBS are computed when this file is parsed, so `test` and
# `demo` install the dependencies first and then build in a sub-make, which
# parses it again. Any other goal that compiles stops here, before the
# compiler, with one line saying what to install when the libraries or the
# compiler (or tsc, for the TypeScript SDK) are missing.
NO_BUILD_GOALS := deps test demo clean format fuzz docs
ifneq ($(filter-out $(NO_BUILD_GOALS),$(or $(MAKECMDGOALS),all)),)
ifneq ($(shell command -v $(firstword $(CC)) >/dev/null 2>&1 && pkg-config --exists $(PKGS) 2>/dev/null && command -v tsc >/dev/null 2>&1 && echo ok),ok)
DEPS_MISSING := $(shell sh scripts/deps.sh --check 2>&1)
DEPS_MISSING := $(or $(DEPS_MISSING),cairn: $(firstword $(CC)), tsc or pkg-config modules $(PKGS) not found; run: make deps)
$(error $(DEPS_MISSING))
endif
endif

WARN    := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
CFLAGS  ?= -O2 -g
ALL_CFLAGS = -std=c17 -D_GNU_SOURCE -pthread $(WARN) -Iinclude -Iengine -Ibuild/gen $(PKG_CFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  = $(PKG_LIBS) -pthread -ldl -lm

# The sanitizer build used by `make test` lives under build/san, the
# libFuzzer build of `make fuzz` (clang) under build/fuzz.
ifeq ($(SAN),1)
OUT     := build/san
EXTRA_CFLAGS += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1
LDFLAGS += -fsanitize=address,undefined
else ifeq ($(FUZZ),1)
OUT     := build/fuzz
CC      := clang
EXTRA_CFLAGS += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1
LDFLAGS += -fsanitize=fuzzer,address,undefined
else
OUT     := build/rel
endif

ENGINE_SRC := $(wildcard engine/*.c)
ENGINE_OBJ := $(patsubst engine/%.c,$(OUT)/engine/%.o,$(ENGINE_SRC)) $(OUT)/gen/migrations.o
CLI_OBJ    := $(patsubst cli/%.c,$(OUT)/cli/%.o,$(wildcard cli/*.c)) $(OUT)/gen/ui_assets.o
WORKER_OBJ := $(patsubst workers/%.c,$(OUT)/workers/%.o,$(wildcard workers/*.c))
TEST_SRC   := $(wildcard tests/test_*.c)
TEST_BIN   := $(patsubst tests/%.c,$(OUT)/tests/%,$(TEST_SRC))
TEST_SUPPORT := $(OUT)/tests/support.o $(OUT)/tests/proxy.o $(OUT)/tests/slow.o

# Example plugins: shared objects loaded by cairn-worker --plugin. Not linked
# against libcairn (the worker executable provides cairn_*) and built without
# sanitizers, so the same .so loads into the release and the sanitizer worker.
# embed.c is not a plugin but a program of its own (see tests/test_install.c).
EXAMPLES   := $(patsubst workers/examples/%.c,build/examples/%.so,\
	$(filter-out workers/examples/embed.c,$(wildcard workers/examples/*.c)))
EX_CFLAGS  = -std=c17 -D_GNU_SOURCE $(WARN) -Iinclude $(PKG_CFLAGS) -O2 -g -fPIC -shared

ifneq ($(SAN)$(FUZZ),)
LIB := $(OUT)/lib/libcairn.a
BIN := $(OUT)/bin
else
LIB := lib/libcairn.a
BIN := bin
endif
SOLIB := $(dir $(LIB))libcairn.so.$(VERSION)

# The TypeScript SDK (sdk/typescript), compiled into sdk/typescript/dist.
TS_SDK := sdk/typescript/dist/index.js

# The man pages, generated from the --help texts of the built binaries and
# from include/cairn.h (scripts/man.sh), so they say what the code does.
MAN := build/man/cairn.1 build/man/cairn-worker.8 build/man/cairn.3
# The shell completion scripts, printed by the built cairn from its command
# table (cairn completion bash|zsh).
COMPLETION := build/completion/cairn build/completion/_cairn

.PHONY: all test test-build demo bench bench-memory chaos clean install format deps examples \
	fuzz fuzz-build deb sdk-ts
all: $(BIN)/cairn $(BIN)/cairn-worker $(LIB) $(if $(SAN)$(FUZZ),,$(SOLIB) $(MAN) $(COMPLETION)) \
	$(TS_SDK)

deps:
	@sh scripts/deps.sh

# The TypeScript SDK: compiled by Debian's tsc (node-typescript) into
# sdk/typescript/dist, which its examples, its tests and `npm pack` use; the
# same for every build. Compiled aside, then each file renamed into place
# and the files of modules that are gone removed: node processes (a test's,
# the bench's) may be loading dist/ while it is rebuilt.
$(TS_SDK): $(wildcard sdk/typescript/src/*.ts) sdk/typescript/tsconfig.json
	@command -v tsc >/dev/null 2>&1 || { echo "cairn: tsc not found (Debian's node-typescript); run: make deps" >&2; exit 1; }
	rm -rf sdk/typescript/dist.tmp
	tsc -p sdk/typescript --outDir sdk/typescript/dist.tmp
	mkdir -p sdk/typescript/dist
	for f in sdk/typescript/dist/*; do [ -e "sdk/typescript/dist.tmp/$${f##*/}" ] || rm -f "$$f"; done
	mv -f sdk/typescript/dist.tmp/* sdk/typescript/dist/ && rmdir sdk/typescript/dist.tmp
sdk-ts: $(TS_SDK)

# The folders too: a file removed from them changes their time, not the files'.
build/gen/migrations.c: sql/migrations $(wildcard sql/migrations/*.sql) scripts/embed-migrations.sh
	@mkdir -p $(@D)
	sh scripts/embed-migrations.sh sql/migrations > $@.tmp && mv $@.tmp $@

$(OUT)/gen/migrations.o: build/gen/migrations.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The console's page, script and style (cli/ui/), embedded in bin/cairn.
# No rule makes the folder: without this one, make's built-in rule would
# link cli/ui.c into cli/ui whenever that file is the newer.
cli/ui: ;
build/gen/ui_assets.c: cli/ui $(wildcard cli/ui/*) scripts/embed-ui.sh
	@mkdir -p $(@D)
	sh scripts/embed-ui.sh cli/ui > $@.tmp && mv $@.tmp $@

$(OUT)/gen/ui_assets.o: build/gen/ui_assets.c
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(OUT)/%.o: %.c $(wildcard include/*.h engine/*.h cli/*.h workers/*.h tests/*.h)
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The engine's objects go into both libraries, so they are position
# independent (the executables are PIE anyway).
$(ENGINE_OBJ): EXTRA_CFLAGS += -fPIC

$(LIB): $(ENGINE_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The shared library exports cairn_* only (engine/libcairn.map); the
# engine's internal modules stay inside it.
$(SOLIB): $(ENGINE_OBJ) engine/libcairn.map
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libcairn.so.$(SOMAJOR) \
		-Wl,--version-script=engine/libcairn.map -Wl,--no-undefined \
		-o $@ $(ENGINE_OBJ) $(LDLIBS)
	ln -sf $(@F) $(@D)/libcairn.so.$(SOMAJOR)
	ln -sf libcairn.so.$(SOMAJOR) $(@D)/libcairn.so

build/man/cairn.1: $(BIN)/cairn scripts/man.sh
	@mkdir -p $(@D)
	sh scripts/man.sh cli $(BIN)/cairn > $@.tmp && mv $@.tmp $@
build/man/cairn-worker.8: $(BIN)/cairn-worker scripts/man.sh
	@mkdir -p $(@D)
	sh scripts/man.sh worker $(BIN)/cairn-worker > $@.tmp && mv $@.tmp $@
build/man/cairn.3: include/cairn.h scripts/man.sh
	@mkdir -p $(@D)
	sh scripts/man.sh api include/cairn.h > $@.tmp && mv $@.tmp $@

build/completion/cairn: $(BIN)/cairn
	@mkdir -p $(@D)
	$(BIN)/cairn completion bash > $@.tmp && mv $@.tmp $@
build/completion/_cairn: $(BIN)/cairn
	@mkdir -p $(@D)
	$(BIN)/cairn completion zsh > $@.tmp && mv $@.tmp $@

$(BIN)/cairn: $(CLI_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

# -rdynamic and the whole archive: a plugin may call any cairn_* function,
# so all of them must be in the executable and exported to dlopen'ed objects.
$(BIN)/cairn-worker: $(WORKER_OBJ) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -rdynamic -o $@ $(WORKER_OBJ) -Wl,--whole-archive $(LIB) -Wl,--no-whole-archive $(LDLIBS)

examples: $(EXAMPLES)

build/examples/%.so: workers/examples/%.c include/cairn.h
	@mkdir -p $(@D)
	$(CC) $(EX_CFLAGS) -o $@ $< $(shell pkg-config --libs libcjson 2>/dev/null)

# The benchmark driver (scripts/bench.sh runs it); not a Criterion suite.
$(OUT)/bench: $(OUT)/tests/bench.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# What enqueues the bench's runs when it compares builds (BENCH_BASELINE);
# scripts/bench.sh compiles the same file against the older build too.
$(OUT)/bench_load: $(OUT)/tests/bench_load.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The chaos driver (`make chaos`, and short in test_chaos.c); not a Criterion suite.
$(OUT)/chaos: $(OUT)/tests/chaos.o $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(OUT)/tests/%: $(OUT)/tests/%.o $(TEST_SUPPORT) $(LIB)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT) $(LIB) $(LDLIBS) -lcriterion

# The plugin the singleton tests load into cairn-worker (--plugin); its
# cairn_* symbols resolve against the worker binary (-rdynamic).
TEST_PLUGIN := $(OUT)/tests/plugin_test.so
$(TEST_PLUGIN): tests/plugin_test.c include/cairn.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(shell pkg-config --libs libpq 2>/dev/null)

# The workflows of the execution tests (test_exec.c), loaded the same way.
TEST_FLOWS := $(OUT)/tests/plugin_flows.so
$(TEST_FLOWS): tests/plugin_flows.c tests/plugin_conn.h include/cairn.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(shell pkg-config --libs libpq libcjson 2>/dev/null)

# The workflows of the metrics and log tests (test_metrics.c, test_logs.c).
OBSERVE_PLUGIN := $(OUT)/tests/plugin_observe.so
$(OBSERVE_PLUGIN): tests/plugin_observe.c include/cairn.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(shell pkg-config --libs libcjson 2>/dev/null)

# The workload of the chaos driver, loaded the same way.
CHAOS_PLUGIN := $(OUT)/tests/plugin_chaos.so
$(CHAOS_PLUGIN): tests/plugin_chaos.c tests/plugin_conn.h include/cairn.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -fPIC -shared $(LDFLAGS) -o $@ $< $(shell pkg-config --libs libpq libcjson 2>/dev/null)

test-build: $(BIN)/cairn $(BIN)/cairn-worker $(TEST_BIN) $(EXAMPLES) $(TEST_PLUGIN) $(TEST_FLOWS) \
	$(OBSERVE_PLUGIN) $(OUT)/chaos $(CHAOS_PLUGIN) $(TS_SDK)

# `make test` = dependencies (clang too, for the fuzz targets, and what the
# vendored Citus needs), Citus built once per machine and installed
# (scripts/citus.sh), sanitizer build, then every suite against a private
# PostgreSQL (or $DATABASE_URL) started and stopped by tests/run.sh (the
# Citus suites against a private coordinator and two workers), and every
# fuzz target for FUZZ_TEST_SECONDS (10) each.
# The release build too: tests/test_install.c installs it, links the
# embedding example against it and packages it.
test:
	@sh scripts/deps.sh --fuzz --citus
	sh scripts/citus.sh build
	$(MAKE) SAN=1 test-build
	$(MAKE) all
	$(MAKE) FUZZ=1 fuzz-build
	sh tests/run.sh build/san

demo: deps
	$(MAKE) all
	sh scripts/demo.sh

bench: all examples build/rel/bench build/rel/bench_load
	sh scripts/bench.sh

bench-memory: all examples build/rel/bench build/rel/bench_load
	BENCH_MEMORY_RUNS=$${BENCH_MEMORY_RUNS:-1000000} sh scripts/bench.sh

# libFuzzer targets (tests/fuzz/fuzz_*.c), each run for FUZZ_SECONDS on a
# corpus seeded from tests/fuzz/seeds (scripts/fuzz.sh). Their inputs under
# tests/fuzz/seeds and tests/fuzz/regress replay in `make test` (test_fuzz.c).
FUZZ_BIN := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
build/fuzz/fuzz_%: build/fuzz/tests/fuzz/fuzz_%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

fuzz-build: $(FUZZ_BIN)

fuzz:
	@sh scripts/deps.sh --fuzz
	$(MAKE) FUZZ=1 fuzz-build
	sh scripts/fuzz.sh $(FUZZ_BIN)

# Release build, CHAOS_RUNS (10000) runs under kills, stops, PostgreSQL
# restarts (and, with CHAOS_FREEZE=1, frozen connections); see tests/chaos.c.
# CHAOS_CITUS=1: on a Citus cluster of its own (tests/citus.sh; Citus built
# once per machine).
chaos: all build/rel/chaos build/rel/tests/plugin_chaos.so
	if [ "$(CHAOS_CITUS)" = 1 ]; then \
		sh scripts/deps.sh --citus && sh scripts/citus.sh build && \
		build/rel/chaos --worker bin/cairn-worker --plugin build/rel/tests/plugin_chaos.so \
			--citus-sh tests/citus.sh; \
	else \
		build/rel/chaos --worker bin/cairn-worker --plugin build/rel/tests/plugin_chaos.so \
			--pg-sh tests/pg.sh; \
	fi

clean:
	rm -rf build bin lib sdk/typescript/dist sdk/typescript/dist.tmp

# LIBDIR and SYSCONFDIR follow PREFIX; the Debian package (make deb) sets
# PREFIX=/usr, which puts the environment file in /etc.
LIBDIR      ?= $(PREFIX)/lib
SYSCONFDIR  ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR     ?= $(PREFIX)/lib/systemd/system
PC_SUBST = -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@VERSION@|$(VERSION)|g' \
	-e 's|@LIBS_PRIVATE@|$(PKG_LIBS) -pthread -ldl -lm|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g'
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(PREFIX)/include \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man3 \
		$(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/cairn \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions
	install -m 755 bin/cairn bin/cairn-worker $(DESTDIR)$(PREFIX)/bin/
	install -m 644 lib/libcairn.a $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SOLIB) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SOLIB)) $(DESTDIR)$(LIBDIR)/libcairn.so.$(SOMAJOR)
	ln -sf libcairn.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libcairn.so
	install -m 644 include/cairn.h $(DESTDIR)$(PREFIX)/include/
	sed $(PC_SUBST) cairn.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/cairn.pc
	sed $(PC_SUBST) cairn-static.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/cairn-static.pc
	install -m 644 build/man/cairn.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 build/man/cairn.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 644 build/man/cairn-worker.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 644 build/completion/cairn $(DESTDIR)$(PREFIX)/share/bash-completion/completions/
	install -m 644 build/completion/_cairn $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/
	sed $(PC_SUBST) workers/systemd/cairn-worker.service > $(DESTDIR)$(UNITDIR)/cairn-worker.service
	install -m 644 workers/systemd/cairn-worker.env $(DESTDIR)$(SYSCONFDIR)/cairn/

# The .debs of `make install PREFIX=/usr` (libcairn0, libcairn-dev, cairn),
# their Depends computed by dpkg-shlibdeps (scripts/deb.sh); prints their paths.
deb: all
	sh scripts/deb.sh $(VERSION) $(PKGS) $(SYSTEMD)

# The guide (docs/, its navigation in mkdocs.yml) as a static site in
# build/site/: Debian's mkdocs and mkdocs-material (scripts/deps.sh) in strict
# mode, then what mkdocs 1.4 does not check (scripts/docs-check.py): pages
# left out of the nav, anchors, README.md's links. Silent when all is well;
# tests/test_docs.c runs it, and the guide's runnable samples
# (scripts/docs-samples.py), in `make test`.
.PHONY: docs
docs:
	@command -v mkdocs >/dev/null 2>&1 || { echo "cairn: mkdocs not found; run: make deps" >&2; exit 1; }
	@PYTHONWARNINGS=ignore::DeprecationWarning mkdocs build --strict --quiet
	@/usr/bin/python3 scripts/docs-check.py

format:
	clang-format -i $(wildcard include/*.h engine/*.[ch] cli/*.[ch] workers/*.[ch] workers/examples/*.[ch] tests/*.[ch])
