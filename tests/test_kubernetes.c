/*
 * test_kubernetes.c - deploy/kubernetes. The manifests are valid objects of
 * the pinned Kubernetes version with no unknown field (tests/kubernetes/
 * validate.js, its npm packages installed with `npm ci` from the committed
 * package-lock.json), and they agree with the code: every variable they set
 * is a setting of the program the container runs, the environment the
 * kubelet would build passes `cairn-worker --check-config` while the
 * Secret's placeholders do not, a worker with those settings answers the
 * probes, the scrape and the Service's host names, a drain with the
 * manifest's timeout ends before the kubelet's kill, and the worker and
 * `cairn migrate` run under the pods' security context.
 */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cairn.h"
#include "proxy.h"
#include "support.h"

/* What the kubelet would put where the manifests read the downward API and
 * the Secret, for the tests that resolve the pods' environment. */
#define POD_IP        "10.244.1.7"
#define POD_NAMESPACE "cairn"
#define POD_NAME      "cairn-worker-5d9c7b6f4-x2x7q"
#define TOKEN         "k8s-test-token-0123456789"
#define KEYS          "k1=MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="

static const char *src_dir(void)
{
	return getenv("CAIRN_SRC_DIR");
}

/* The npm packages of tests/kubernetes, installed with npm ci into the build
 * directory once per package-lock.json (under flock: suites run at once). */
static const char *node_modules(void)
{
	static char dir[1100];
	if (dir[0])
		return dir;
	char top[1024], cmd[4096];
	snprintf(top, sizeof top, "%s/../kubernetes-validate", getenv("CAIRN_BIN_DIR"));
	snprintf(cmd, sizeof cmd,
	         "set -e; mkdir -p '%s'; cd '%s'; exec 9>.lock; flock 9; "
	         "src='%s/tests/kubernetes'; "
	         "if ! cmp -s \"$src/package-lock.json\" package-lock.json || "
	         "[ ! -d node_modules/kubernetes-models ]; then rm -rf node_modules; "
	         "cp \"$src/package.json\" \"$src/package-lock.json\" .; "
	         "npm ci --no-audit --no-fund; fi",
	         top, top, src_dir());
	const char *sh[] = {"/bin/sh", "-c", cmd, NULL};
	char *out, *err;
	int rc = trun(sh, NULL, &out, &err);
	cr_assert_eq(rc, 0, "npm ci in %s failed:\n%s\n%s", top, out, err);
	free(out);
	free(err);
	snprintf(dir, sizeof dir, "%s/node_modules", top);
	return dir;
}

/* node tests/kubernetes/validate.js ARGS...; its exit code, output in out. */
static int validate(char **out, const char *a1, const char *a2)
{
	char script[1100], path[1200];
	snprintf(script, sizeof script, "%s/tests/kubernetes/validate.js", src_dir());
	snprintf(path, sizeof path, "NODE_PATH=%s", node_modules());
	const char *argv[] = {"/usr/bin/env", "node", script, a1, a2, NULL};
	const char *env[] = {path, NULL};
	char *err;
	int rc = trun(argv, env, out, &err);
	if (err[0]) {
		size_t n = strlen(*out) + strlen(err) + 2;
		char *both = malloc(n);
		snprintf(both, n, "%s\n%s", *out, err);
		free(*out);
		*out = both;
	}
	free(err);
	return rc;
}

static const char *manifests(void)
{
	static char dir[1100];
	snprintf(dir, sizeof dir, "%s/deploy/kubernetes", src_dir());
	return dir;
}

/* The objects `kubectl kustomize deploy/kubernetes` gives, and the
 * optional ServiceMonitor (caller deletes). */
static cJSON *rendered(void)
{
	char *out;
	int rc = validate(&out, "--render-all", manifests());
	cr_assert_eq(rc, 0, "validate.js --render-all failed:\n%s", out);
	cJSON *all = cJSON_Parse(out);
	cr_assert(all && cJSON_IsArray(all), "--render-all printed no JSON array:\n%s", out);
	free(out);
	return all;
}

static cJSON *at(const cJSON *o, const char *path)
{
	char key[128];
	const char *p = path;
	while (o && *p) {
		size_t n = strcspn(p, ".");
		snprintf(key, sizeof key, "%.*s", (int)n, p);
		o = cJSON_IsArray(o) ? cJSON_GetArrayItem(o, atoi(key))
		                     : cJSON_GetObjectItemCaseSensitive(o, key);
		p += n + (p[n] == '.');
	}
	return (cJSON *)o;
}

static const char *str_at(const cJSON *o, const char *path)
{
	const cJSON *v = at(o, path);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static cJSON *object(cJSON *all, const char *kind)
{
	cJSON *o;
	cJSON_ArrayForEach(o, all)
	{
		if (strcmp(str_at(o, "kind"), kind) == 0)
			return o;
	}
	cr_assert_fail("the manifests have no %s", kind);
	return NULL;
}

/* The worker's container and the migrate Job's. */
static cJSON *container(cJSON *all, const char *kind)
{
	cJSON *c = at(object(all, kind), "spec.template.spec.containers.0");
	cr_assert(c, "%s has no container", kind);
	return c;
}

/* The value of the Secret's key, as the manifest writes it; NULL for a
 * key it leaves out (pod_env allows that of an optional key only). */
static const char *secret_placeholder(cJSON *all, const char *key)
{
	return str_at(at(object(all, "Secret"), "stringData"), key);
}

typedef struct envlist {
	char *item[48]; /* NAME=value, as the kubelet would set them */
	int n;
} envlist;

static const char *env_get(const envlist *e, const char *name)
{
	size_t len = strlen(name);
	for (int i = 0; i < e->n; i++)
		if (strncmp(e->item[i], name, len) == 0 && e->item[i][len] == '=')
			return e->item[i] + len + 1;
	return NULL;
}

/* value with every $(NAME) of an earlier variable replaced, as the kubelet does. */
static char *expand(const envlist *e, const char *value)
{
	char out[4096];
	size_t o = 0;
	for (const char *p = value; *p && o < sizeof out - 1;) {
		const char *close = p[0] == '$' && p[1] == '(' ? strchr(p, ')') : NULL;
		if (close) {
			char name[128];
			snprintf(name, sizeof name, "%.*s", (int)(close - p - 2), p + 2);
			const char *v = env_get(e, name);
			if (v) {
				o += (size_t)snprintf(out + o, sizeof out - o, "%s", v);
				p = close + 1;
				continue;
			}
		}
		out[o++] = *p++;
	}
	out[o < sizeof out ? o : sizeof out - 1] = '\0';
	return strdup(out);
}

/* The environment of container c: downward API values as POD_IP, POD_NAME and
 * POD_NAMESPACE say, Secret keys from secret(key) (NULL: unset, which only
 * an optional key may be). */
static envlist pod_env(const cJSON *c, const char *(*secret)(const char *key))
{
	envlist e = {.n = 0};
	const cJSON *v;
	cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(c, "env"))
	{
		const char *name = str_at(v, "name"), *value = str_at(v, "value");
		char *x = NULL;
		if (value) {
			x = expand(&e, value);
		} else if (str_at(v, "valueFrom.fieldRef.fieldPath")) {
			const char *f = str_at(v, "valueFrom.fieldRef.fieldPath");
			cr_assert(strcmp(f, "status.podIP") == 0 ||
			              strcmp(f, "metadata.namespace") == 0 ||
			              strcmp(f, "metadata.name") == 0,
			          "%s: a field this test does not resolve: %s", name, f);
			x = strdup(strcmp(f, "status.podIP") == 0         ? POD_IP
			           : strcmp(f, "metadata.namespace") == 0 ? POD_NAMESPACE
			                                                  : POD_NAME);
		} else {
			const char *key = str_at(v, "valueFrom.secretKeyRef.key");
			cr_assert(key, "%s: neither a value, the downward API nor a Secret", name);
			const char *s = secret(key);
			cr_assert(s || cJSON_IsTrue(at(v, "valueFrom.secretKeyRef.optional")),
			          "%s: Secret key %s is not optional", name, key);
			if (s)
				x = strdup(s);
		}
		if (!x)
			continue;
		size_t n = strlen(name) + strlen(x) + 2;
		cr_assert_lt(e.n, 48);
		e.item[e.n] = malloc(n);
		snprintf(e.item[e.n++], n, "%s=%s", name, x);
		free(x);
	}
	return e;
}

static void env_free(envlist *e)
{
	for (int i = 0; i < e->n; i++)
		free(e->item[i]);
	e->n = 0;
}

static const char *test_secret(const char *key)
{
	if (strcmp(key, "DATABASE_URL") == 0)
		return "postgresql://cairn:secret@postgres:5432/cairn";
	if (strcmp(key, "CAIRN_HTTP_TOKEN") == 0)
		return TOKEN;
	if (strcmp(key, "CAIRN_ENCRYPTION_KEYS") == 0)
		return KEYS;
	return NULL;
}

static const char *no_keys(const char *key)
{
	return strcmp(key, "CAIRN_ENCRYPTION_KEYS") == 0 ? NULL : test_secret(key);
}

static cJSON *placeholders;
static const char *placeholder_secret(const char *key)
{
	return secret_placeholder(placeholders, key);
}

static const char *placeholder_keys_only(const char *key)
{
	return strcmp(key, "CAIRN_ENCRYPTION_KEYS") == 0 ? placeholder_secret(key)
	                                                 : test_secret(key);
}

/* cairn-worker --check-config with env (and nothing else of the settings). */
static int check_config(const envlist *e, char **out, char **err)
{
	const char *env[64];
	int n = 0;
	for (int i = 0; i < e->n && n < 63; i++)
		env[n++] = e->item[i];
	env[n] = NULL;
	const char *argv[] = {tbin("cairn-worker"), "--check-config", NULL};
	return trun(argv, env, out, err);
}

/* A line of --check-config's output: NAME=value (static storage). */
static const char *config_line(const char *out, const char *name)
{
	static char line[1024];
	char key[128];
	snprintf(key, sizeof key, "\n%s=", name);
	char padded[16384];
	snprintf(padded, sizeof padded, "\n%s", out);
	const char *p = strstr(padded, key);
	if (!p)
		return NULL;
	p += strlen(key);
	snprintf(line, sizeof line, "%.*s", (int)strcspn(p, "\n"), p);
	return line;
}

/* ------------------------------------------------------------- the schemas */

Test(kubernetes, the_manifests_are_valid_kubernetes_1_33_objects_with_no_unknown_field,
     .timeout = 240)
{
	char *out;
	int rc = validate(&out, manifests(), NULL);
	cr_assert_eq(rc, 0, "validate.js found problems:\n%s", out);
	cr_log_info("validate.js deploy/kubernetes:\n%s", out);
	cr_assert(strstr(out, "Kubernetes v1.33.0 (kubernetes-models 4.5.1)"), "%s", out);
	const char *want[] = {
	    "valid   secret.yaml: v1 Secret cairn",
	    "valid   migrate-job.yaml: batch/v1 Job cairn-migrate",
	    "valid   deployment.yaml: apps/v1 Deployment cairn-worker",
	    "valid   service.yaml: v1 Service cairn-worker",
	    "valid   pdb.yaml: policy/v1 PodDisruptionBudget cairn-worker",
	    "valid   servicemonitor.yaml: monitoring.coreos.com/v1 ServiceMonitor cairn-worker",
	    "6 valid, 0 problems",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		cr_assert(strstr(out, want[i]), "no \"%s\" in:\n%s", want[i], out);
	free(out);
}

Test(kubernetes, an_unknown_field_is_refused_in_every_object_of_every_manifest, .timeout = 240)
{
	/* validate.js --mutate puts a field into each object of each manifest in
	 * turn: only maps whose keys are free (labels, a Secret's data,
	 * resources, a Service's selector) may take it. */
	char *out;
	cr_assert_eq(validate(&out, "--mutate", manifests()), 0, "%s", out);
	const char *maps[] = {"/labels",           "/matchLabels",
	                      "Secret/stringData", "/resources/requests",
	                      "/resources/limits", "Service/spec/selector"};
	int caught = 0, accepted = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (strncmp(line, "caught ", 7) == 0) {
			caught++;
			continue;
		}
		cr_assert(strncmp(line, "accepted ", 9) == 0, "unexpected line: %s", line);
		accepted++;
		int map = 0;
		for (size_t i = 0; i < sizeof maps / sizeof maps[0]; i++) {
			size_t ll = strlen(line), ml = strlen(maps[i]);
			map |= ll >= ml && strcmp(line + ll - ml, maps[i]) == 0;
		}
		cr_assert(map, "an unknown field passed validation: %s", line);
	}
	cr_assert_geq(caught, 60, "only %d objects were tried", caught);
	cr_assert_gt(accepted, 0);
	free(out);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
}

Test(kubernetes, the_validator_refuses_bad_types_missing_fields_beta_apis_and_unknown_kinds,
     .timeout = 240)
{
	char dir[] = "/tmp/cairn-k8s-XXXXXX", file[128], kdir[160], kfile[200], dfile[200];
	cr_assert(mkdtemp(dir));
	snprintf(file, sizeof file, "%s/bad.yaml", dir);
	write_file(
	    file,
	    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\n"
	    "spec:\n  replicas: three\n  selector: {matchLabels: {a: b}}\n"
	    "  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n"
	    "        - name: c\n          image: cairn\n          imagePullPolicy: Sometimes\n"
	    "          readinessProbe: {httpGet: {paht: /readyz, port: 8080}}\n"
	    "---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec: {backoffLimit: 1}\n"
	    "---\napiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: p}\n"
	    "---\napiVersion: v1\nkind: Servise\nmetadata: {name: s}\n");
	char *out;
	cr_assert_eq(validate(&out, file, NULL), 1, "%s", out);
	const char *want[] = {
	    "/spec/replicas: must be integer",
	    "/spec/template/spec/containers/0/imagePullPolicy: must be equal to one of the "
	    "allowed values (Always, IfNotPresent, Never)",
	    "/spec/template/spec/containers/0/readinessProbe/httpGet/paht: unknown field",
	    "/spec: must have required property template",
	    "apiVersion \"policy/v1beta1\" is not a GA version",
	    "no schema for apiVersion \"v1\" kind \"Servise\"",
	    "0 valid, ",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		cr_assert(strstr(out, want[i]), "no \"%s\" in:\n%s", want[i], out);
	free(out);

	/* A kustomization field the renderer does not implement, and an image
	 * that is not named in its images, are refused too. */
	snprintf(kdir, sizeof kdir, "%s/k", dir);
	cr_assert_eq(mkdir(kdir, 0700), 0);
	snprintf(kfile, sizeof kfile, "%s/kustomization.yaml", kdir);
	snprintf(dfile, sizeof dfile, "%s/pod.yaml", kdir);
	write_file(kfile,
	           "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	           "namePrefix: x-\nresources: [pod.yaml]\nimages: [{name: cairn, newTag: '1'}]\n");
	write_file(dfile, "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n"
	                  "spec: {containers: [{name: c, image: nginx}]}\n");
	cr_assert_eq(validate(&out, kdir, NULL), 1, "%s", out);
	cr_assert(strstr(out, "field \"namePrefix\" is not one validate.js renders"), "%s", out);
	cr_assert(strstr(out, "image \"nginx\" of container c is not named in kustomization.yaml's "
	                      "images"),
	          "%s", out);
	free(out);
	unlink(kfile);
	unlink(dfile);
	rmdir(kdir);
	unlink(file);
	rmdir(dir);
}

/* ------------------------------------------------- agreement with the code */

/* 1 if NAME is a setting line of `cairn-worker --help` ("  NAME  --flag ..."). */
static int worker_setting(const char *help, const char *name)
{
	char key[160];
	snprintf(key, sizeof key, "\n  %s ", name);
	return strstr(help, key) != NULL;
}

/* 1 if text has name as a whole word. */
static int has_word(const char *text, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = text; (p = strstr(p, name)); p += n) {
		char before = p == text ? ' ' : p[-1], after = p[n];
		if (!(before == '_' || (before >= 'A' && before <= 'Z')) &&
		    !(after == '_' || (after >= 'A' && after <= 'Z')))
			return 1;
	}
	return 0;
}

Test(kubernetes, every_variable_the_manifests_set_is_a_setting_of_the_program_they_run,
     .timeout = 240)
{
	cJSON *all = rendered();
	char *help, *err;
	const char *wh[] = {tbin("cairn-worker"), "--help", NULL};
	cr_assert_eq(trun(wh, NULL, &help, &err), 0);
	free(err);

	/* The worker's container runs the image's entrypoint, cairn-worker. */
	cJSON *w = container(all, "Deployment");
	cr_assert_null(at(w, "command"), "the worker's container overrides the entrypoint");
	char dockerfile[1100];
	snprintf(dockerfile, sizeof dockerfile, "%s/Dockerfile", src_dir());
	char *df = tfile_read(dockerfile);
	cr_assert(strstr(df, "ENTRYPOINT [\"cairn-worker\"]"), "the image's entrypoint changed");
	free(df);
	int settings = 0;
	const cJSON *v;
	cJSON_ArrayForEach(v, at(w, "env"))
	{
		const char *name = str_at(v, "name");
		if (strncmp(name, "CAIRN_", 6) == 0 || strncmp(name, "OTEL_", 5) == 0 ||
		    strcmp(name, "DATABASE_URL") == 0) {
			cr_assert(
			    worker_setting(help, name),
			    "the Deployment sets %s, which is no setting of cairn-worker --help",
			    name);
			settings++;
			continue;
		}
		/* Anything else is there only to be used by a setting: $(NAME). */
		char ref[160];
		snprintf(ref, sizeof ref, "$(%s)", name);
		int used = 0;
		const cJSON *u;
		cJSON_ArrayForEach(u, at(w, "env"))
		{
			used |= str_at(u, "value") && strstr(str_at(u, "value"), ref) != NULL;
		}
		cr_assert(used, "the Deployment sets %s, which no setting uses", name);
	}
	cr_assert_geq(settings, 8);
	free(help);

	/* The Job runs `cairn migrate`, with variables the CLI reads. */
	cJSON *m = container(all, "Job");
	cr_assert_str_eq(str_at(m, "command.0"), "cairn");
	cr_assert_str_eq(str_at(m, "args.0"), "migrate");
	const char *mh[] = {tbin("cairn"), "migrate", "--help", NULL};
	cr_assert_eq(trun(mh, NULL, &help, &err), 0, "cairn migrate --help: %s", err);
	free(help);
	free(err);
	const char *ch[] = {tbin("cairn"), "--help", NULL};
	trun(ch, NULL, &help, &err);
	cJSON_ArrayForEach(v, at(m, "env"))
	{
		const char *name = str_at(v, "name");
		cr_assert(has_word(help, name),
		          "the Job sets %s, which `cairn --help` does not name", name);
	}
	free(help);
	free(err);
	cJSON_Delete(all);
}

Test(kubernetes, the_workers_environment_as_the_kubelet_builds_it_passes_check_config,
     .timeout = 240)
{
	cJSON *all = rendered();
	cJSON *w = container(all, "Deployment");
	envlist e = pod_env(w, test_secret);
	char *out, *err;
	int rc = check_config(&e, &out, &err);
	cr_assert_eq(rc, 0, "cairn-worker --check-config with the Deployment's environment:\n%s%s",
	             out, err);
	cr_assert_str_eq(config_line(out, "CAIRN_HTTP_ADDR"), "0.0.0.0:8080");
	cr_assert_str_eq(config_line(out, "CAIRN_ADVERTISE_ADDR"), POD_IP ":8080");
	cr_assert_str_eq(config_line(out, "CAIRN_HTTP_HOSTS"),
	                 "cairn-worker,cairn-worker." POD_NAMESPACE ",cairn-worker." POD_NAMESPACE
	                 ".svc,cairn-worker." POD_NAMESPACE ".svc.cluster.local");
	cr_assert_str_eq(config_line(out, "CAIRN_HTTP_TOKEN"), "****");
	cr_assert(config_line(out, "CAIRN_ENCRYPTION_KEYS") &&
	              strstr(config_line(out, "CAIRN_ENCRYPTION_KEYS"), "k1"),
	          "%s", out);
	free(out);
	free(err);
	env_free(&e);

	/* The keys are optional: without them the worker runs unencrypted. */
	e = pod_env(w, no_keys);
	cr_assert_eq(check_config(&e, &out, &err), 0, "%s%s", out, err);
	free(out);
	free(err);
	env_free(&e);

	/* The container listens where its port and probes say. */
	cr_assert_str_eq(str_at(w, "ports.0.name"), "http");
	cr_assert_eq(at(w, "ports.0.containerPort")->valueint, 8080);
	cr_assert_str_eq(str_at(w, "livenessProbe.httpGet.port"), "http");
	cr_assert_str_eq(str_at(w, "readinessProbe.httpGet.port"), "http");
	cr_assert_str_eq(str_at(object(all, "Service"), "spec.ports.0.targetPort"), "http");
	cJSON_Delete(all);
}

Test(kubernetes, the_secrets_placeholders_stop_a_worker_until_they_are_replaced, .timeout = 240)
{
	placeholders = rendered();
	cJSON *w = container(placeholders, "Deployment");
	envlist e = pod_env(w, placeholder_secret);
	char *out, *err;
	cr_assert_eq(check_config(&e, &out, &err), 2, "the placeholders were accepted:\n%s", out);
	cr_assert(strstr(err, "invalid value for CAIRN_HTTP_TOKEN"), "%s", err);
	cr_assert(!strstr(err, "CHANGE-ME: head"), "the error shows the token: %s", err);
	free(out);
	free(err);
	env_free(&e);
	e = pod_env(w, placeholder_keys_only);
	cr_assert_eq(check_config(&e, &out, &err), 2, "the placeholder keys were accepted");
	cr_assert(strstr(err, "invalid value for CAIRN_ENCRYPTION_KEYS"), "%s", err);
	free(out);
	free(err);
	env_free(&e);
	cJSON_Delete(placeholders);
}

/* The worker's settings of the manifest, for tworker_start: all but the
 * database (the test's) and the address (a free port on loopback). */
static const char **worker_settings(const envlist *e, const char *extra)
{
	static const char *s[40];
	memset(s, 0, sizeof s);
	int n = 0;
	for (int i = 0; i < e->n && n < 30; i++)
		if (strncmp(e->item[i], "DATABASE_URL=", 13) != 0 &&
		    strncmp(e->item[i], "CAIRN_HTTP_ADDR=", 16) != 0 &&
		    strncmp(e->item[i], "CAIRN_ADVERTISE_ADDR=", 21) != 0)
			s[n++] = e->item[i];
	s[n++] = extra;
	s[n] = NULL;
	return s;
}

#define SETTINGS(s)                                                                                \
	s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13],    \
	    s[14], s[15], s[16], s[17], s[18], s[19], s[20], s[21], s[22], s[23], s[24], s[25],    \
	    s[26], s[27], s[28], s[29], s[30]

Test(kubernetes, a_worker_with_the_manifests_settings_answers_probes_scrapes_and_service_names,
     .timeout = 240)
{
	cJSON *all = rendered();
	cJSON *w = container(all, "Deployment");
	envlist e = pod_env(w, test_secret);
	const char **s = worker_settings(&e, "CAIRN_POLL_INTERVAL=5s");
	const char *db = tdb_new_migrated_shards(16);
	int port;
	pid_t pid = tworker_start(db, &port, NULL, SETTINGS(s));

	const char *live = str_at(w, "livenessProbe.httpGet.path");
	const char *ready = str_at(w, "readinessProbe.httpGet.path");
	cr_assert_eq(thttp(port, "GET", live, NULL, NULL), 200, "liveness %s", live);
	cr_assert(thttp_wait(port, ready, 200, 60000), "readiness %s never answered 200", ready);

	/* What the ServiceMonitor scrapes, with the token it sends. */
	cJSON *sm = object(all, "ServiceMonitor");
	const char *mpath = str_at(sm, "spec.endpoints.0.path");
	const cJSON *v, *token = NULL;
	cJSON_ArrayForEach(v, at(w, "env"))
	{
		if (strcmp(str_at(v, "name"), "CAIRN_HTTP_TOKEN") == 0)
			token = v;
	}
	cr_assert(token, "the workers have no CAIRN_HTTP_TOKEN");
	cr_assert_str_eq(str_at(sm, "spec.endpoints.0.authorization.credentials.name"),
	                 str_at(token, "valueFrom.secretKeyRef.name"));
	cr_assert_str_eq(str_at(sm, "spec.endpoints.0.authorization.credentials.key"),
	                 str_at(token, "valueFrom.secretKeyRef.key"));
	char *body;
	cr_assert_eq(thttp_auth(port, "GET", mpath, NULL, NULL, NULL), 401,
	             "%s answered without the token", mpath);
	cr_assert_eq(thttp_auth(port, "GET", mpath, "Bearer " TOKEN, &body, NULL), 200, "%s",
	             mpath);
	cr_assert(strstr(body, "# TYPE cairn_"), "%s", body);
	free(body);

	/* Clients that call the Service by any of its names are answered;
	 * another name is refused (DNS rebinding). */
	char hosts[1024], hdr[300];
	snprintf(hosts, sizeof hosts, "%s", env_get(&e, "CAIRN_HTTP_HOSTS"));
	int names = 0;
	for (char *h = strtok(hosts, ","); h; h = strtok(NULL, ","), names++) {
		snprintf(hdr, sizeof hdr, "Host: %s:8080", h);
		const char *headers[] = {hdr, "Authorization: Bearer " TOKEN, NULL};
		cr_assert_eq(thttp_req(port, "GET", "/status", headers, NULL, NULL, NULL), 200,
		             "the Service's name %s was refused", h);
	}
	cr_assert_eq(names, 4);
	const char *other[] = {"Host: cairn-worker.elsewhere.example:8080", NULL};
	cr_assert_eq(thttp_req(port, "GET", "/healthz", other, NULL, NULL, NULL), 421);
	cr_assert_eq(tworker_stop(pid, SIGTERM, 30000), 0);
	env_free(&e);
	cJSON_Delete(all);
}

Test(kubernetes, a_drain_with_the_manifests_timeout_ends_before_the_kubelets_kill, .timeout = 240)
{
	cJSON *all = rendered();
	cJSON *w = container(all, "Deployment");
	envlist e = pod_env(w, test_secret);

	/* The kubelet runs preStop, then sends SIGTERM, and kills the container
	 * terminationGracePeriodSeconds after preStop began. */
	int grace =
	    at(object(all, "Deployment"), "spec.template.spec.terminationGracePeriodSeconds")
	        ->valueint;
	cr_assert_str_eq(str_at(w, "lifecycle.preStop.exec.command.0"), "sleep");
	int prestop = atoi(str_at(w, "lifecycle.preStop.exec.command.1"));
	char *out, *err;
	cr_assert_eq(check_config(&e, &out, &err), 0, "%s", err);
	int64_t timeout_ms = atoll(config_line(out, "CAIRN_SHUTDOWN_TIMEOUT"));
	free(out);
	free(err);
	int64_t budget_ms = (int64_t)(grace - prestop) * 1000;
	cr_assert_gt(budget_ms, timeout_ms + 2000,
	             "terminationGracePeriodSeconds %d leaves %" PRId64
	             " ms after preStop: not more than CAIRN_SHUTDOWN_TIMEOUT (%" PRId64
	             " ms) and the 2 s that releasing the shards takes",
	             grace, budget_ms, timeout_ms);

	/* A step that ignores the stop holds an executor past the timeout: the
	 * drain waits the whole timeout, cuts it off, releases, and exits
	 * within the budget. */
	char plugins[1100], hold[64], input[160];
	snprintf(plugins, sizeof plugins, "CAIRN_PLUGINS=%s", tflows_path());
	const char **s = worker_settings(&e, plugins);
	const char *db = tdb_new_migrated_shards(16);
	char log[64];
	tlog_file(log);
	int port;
	pid_t pid = tworker_start(db, &port, log, SETTINGS(s));
	cr_assert(thttp_wait(port, "/readyz", 200, 60000));
	tlog_file(hold);
	snprintf(input, sizeof input, "{\"ms\": 600000, \"log\": \"%s\"}", hold);
	char *id;
	cr_assert_eq(tcli(db, &id, &err, "enqueue", "t.hold", "--input", input, NULL), 0, "%s",
	             err);
	free(id);
	free(err);
	cr_assert(tfile_wait(hold, "S ", 30000), "the step never started");
	int64_t t0 = tnow_ms();
	int rc = tworker_stop(pid, SIGTERM, budget_ms);
	int64_t took = tnow_ms() - t0;
	cr_log_info("drain with CAIRN_SHUTDOWN_TIMEOUT %" PRId64 " ms and a step that ignores the "
	            "stop: exit %d after %" PRId64 " ms (budget after preStop %" PRId64 " ms)",
	            timeout_ms, rc, took, budget_ms);
	char *text = tfile_take(log);
	cr_assert_neq(rc, -1, "the worker was still draining %" PRId64 " ms after SIGTERM:\n%s",
	              budget_ms, text);
	cr_assert_eq(rc, 0, "the drain exited %d:\n%s", rc, text);
	cr_assert(strstr(text, "\"cut_off\":1"), "the step was not cut off:\n%s", text);
	cr_assert_geq(took, timeout_ms,
	              "the drain did not wait CAIRN_SHUTDOWN_TIMEOUT (%" PRId64 " ms):\n%s", took,
	              text);
	free(text);
	unlink(hold);
	env_free(&e);
	cJSON_Delete(all);
}

/* -------------------------------------------------- the security context */

/* Runs argv (a cairn binary and its arguments) as the pod's securityContext
 * has it, approximated with Linux tools: a mount namespace where every
 * mount but /proc, /sys and /dev is read-only (readOnlyRootFilesystem),
 * then setpriv with runAsUser and runAsGroup, no supplementary groups, no
 * capabilities in any set (drop: ALL) and no_new_privs
 * (allowPrivilegeEscalation: false). stderr goes to log_path. Returns the pid. */
static pid_t sandboxed(const cJSON *pod, const cJSON *c, const char *const *env,
                       const char *log_path, const char *const *argv)
{
	cr_assert(cJSON_IsTrue(at(pod, "securityContext.runAsNonRoot")));
	cr_assert(cJSON_IsTrue(at(c, "securityContext.readOnlyRootFilesystem")));
	cr_assert(cJSON_IsFalse(at(c, "securityContext.allowPrivilegeEscalation")));
	cr_assert_str_eq(str_at(c, "securityContext.capabilities.drop.0"), "ALL");
	cr_assert_null(at(c, "securityContext.capabilities.add"));
	int uid = at(pod, "securityContext.runAsUser")->valueint;
	int gid = at(pod, "securityContext.runAsGroup")->valueint;
	cr_assert_gt(uid, 0);
	char reuid[32], regid[32];
	snprintf(reuid, sizeof reuid, "--reuid=%d", uid);
	snprintf(regid, sizeof regid, "--regid=%d", gid);
	const char *script =
	    "set -e; findmnt -rn -o TARGET | while read -r m; do case $m in "
	    "/proc|/proc/*|/sys|/sys/*|/dev|/dev/*) ;; *) mount -o remount,bind,ro \"$m\" ;; esac; "
	    "done; if touch /.cairn-rw-check 2>/dev/null || touch /tmp/.cairn-rw-check "
	    "2>/dev/null; then echo 'a mount is still writable' >&2; exit 97; fi; exec \"$@\"";
	const char *args[40] = {"/usr/bin/unshare",
	                        "--mount",
	                        "--propagation",
	                        "private",
	                        "/bin/sh",
	                        "-c",
	                        script,
	                        "sh",
	                        "/usr/bin/setpriv",
	                        reuid,
	                        regid,
	                        "--clear-groups",
	                        "--inh-caps=-all",
	                        "--ambient-caps=-all",
	                        "--bounding-set=-all",
	                        "--no-new-privs",
	                        "--pdeathsig=KILL",
	                        "--"};
	int n = 18;
	for (int i = 0; argv[i] && n < 39; i++)
		args[n++] = argv[i];
	args[n] = NULL;
	pid_t pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		FILE *f = freopen(log_path, "a", stderr);
		(void)f;
		for (int i = 0; env[i]; i++)
			putenv((char *)env[i]);
		execv(args[0], (char *const *)args);
		_exit(127);
	}
	return pid;
}

static int exit_code(pid_t pid, int64_t timeout_ms)
{
	int64_t deadline = tnow_ms() + timeout_ms;
	int st;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (tnow_ms() > deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(10000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The HTTP port of the worker's JSON start line in the log, 0 if none yet. */
static int json_port(const char *log)
{
	char *text = tfile_read(log);
	/* JSON logs write numbers bare: "http_port":36991 */
	const char *p = strstr(text, "\"http_port\":");
	int port = p ? atoi(p + 12 + (p[12] == '"')) : 0;
	free(text);
	return port;
}

Test(kubernetes, the_worker_and_migrate_run_under_the_pods_security_context, .timeout = 240)
{
	if (geteuid() != 0 || access("/usr/bin/unshare", X_OK) || access("/usr/bin/setpriv", X_OK))
		cr_skip_test("needs root, unshare and setpriv to run as the pod's securityContext");
	cJSON *all = rendered();
	char log[64];
	tlog_file(log);

	/* The database over TCP, as a pod reaches it (the harness's socket
	 * directory is the postgres user's alone). */
	const char *db = tdb_new();
	tproxy *px = tproxy_start(db);
	char url[2100];
	snprintf(url, sizeof url, "DATABASE_URL=%s", tproxy_conninfo(px));

	cJSON *job = object(all, "Job");
	const char *menv[] = {url, NULL};
	const char *margv[] = {tbin("cairn"), "migrate", NULL};
	pid_t pid =
	    sandboxed(at(job, "spec.template.spec"), container(all, "Job"), menv, log, margv);
	int rc = exit_code(pid, 120000);
	char *text = tfile_read(log);
	cr_assert_eq(rc, 0, "cairn migrate under the Job's security context exited %d:\n%s", rc,
	             text);
	free(text);

	cJSON *dep = object(all, "Deployment");
	cJSON *w = container(all, "Deployment");
	envlist e = pod_env(w, test_secret);
	const char *wenv[40];
	int n = 0;
	for (int i = 0; i < e.n && n < 36; i++)
		if (strncmp(e.item[i], "DATABASE_URL=", 13) != 0 &&
		    strncmp(e.item[i], "CAIRN_HTTP_ADDR=", 16) != 0 &&
		    strncmp(e.item[i], "CAIRN_ADVERTISE_ADDR=", 21) != 0)
			wenv[n++] = e.item[i];
	wenv[n++] = url;
	wenv[n++] = "CAIRN_HTTP_ADDR=127.0.0.1:0";
	wenv[n++] = "CAIRN_ADVERTISE_ADDR=127.0.0.1:0";
	wenv[n] = NULL;
	const char *wargv[] = {tbin("cairn-worker"), NULL};
	pid = sandboxed(at(dep, "spec.template.spec"), w, wenv, log, wargv);
	int port = 0;
	for (int64_t end = tnow_ms() + 60000; !port && tnow_ms() < end; usleep(20000))
		port = json_port(log);
	text = tfile_read(log);
	cr_assert_gt(port, 0, "the worker did not start under the pod's security context:\n%s",
	             text);
	free(text);
	cr_assert(thttp_wait(port, "/readyz", 200, 60000), "never ready");
	/* The CLI reads the output the worker sealed with the Secret's keys. */
	setenv("CAIRN_ENCRYPTION_KEYS", KEYS, 1);
	char *out, *err;
	cr_assert_eq(tcli(db, &out, &err, "enqueue", "noop", "--input", "{\"k8s\": 1}", "--wait",
	                  "--timeout", "60s", NULL),
	             0, "%s", err);
	cr_assert(strstr(out, "\"k8s\""), "%s", out);
	free(out);
	free(err);
	kill(pid, SIGTERM);
	rc = exit_code(pid, 60000);
	text = tfile_take(log);
	cr_assert_eq(rc, 0, "the drain exited %d:\n%s", rc, text);
	free(text);
	tproxy_stop(px);
	env_free(&e);
	cJSON_Delete(all);
}

/* ------------------------------------------------------------ the image */

Test(kubernetes, the_pods_run_as_the_images_user_and_the_image_is_named_once, .timeout = 240)
{
	cJSON *all = rendered();
	char path[1100];
	snprintf(path, sizeof path, "%s/Dockerfile", src_dir());
	char *df = tfile_read(path);
	const char *kinds[] = {"Deployment", "Job"};
	for (int i = 0; i < 2; i++) {
		const cJSON *sc = at(object(all, kinds[i]), "spec.template.spec.securityContext");
		char user[64], add[96];
		snprintf(user, sizeof user, "USER %d:%d", at(sc, "runAsUser")->valueint,
		         at(sc, "runAsGroup")->valueint);
		snprintf(add, sizeof add, "--uid %d ", at(sc, "runAsUser")->valueint);
		cr_assert(strstr(df, user) && strstr(df, add),
		          "the %s runs as %d:%d, the Dockerfile's user is not that", kinds[i],
		          at(sc, "runAsUser")->valueint, at(sc, "runAsGroup")->valueint);
		/* kustomization.yaml's images named it: cairn:VERSION. */
		cr_assert_str_eq(str_at(container(all, kinds[i]), "image"), "cairn:" CAIRN_VERSION,
		                 "the image of the %s is not the kustomization's cairn:%s",
		                 kinds[i], CAIRN_VERSION);
	}
	free(df);
	cJSON_Delete(all);
}
