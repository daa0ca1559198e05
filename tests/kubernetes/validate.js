#!/usr/bin/env node
// validate.js - checks the Kubernetes manifests of deploy/kubernetes the way
// `kubectl apply --validate=strict` would, without a cluster, for one pinned
// Kubernetes version (tests/test_kubernetes.c runs it in `make test`).
//
//   node validate.js DIR            DIR/kustomization.yaml rendered (its
//                                   resources, its images), and every other
//                                   *.yaml of DIR (optional parts such as the
//                                   ServiceMonitor); exit 0 when all is valid
//   node validate.js FILE...        those files alone
//   node validate.js --render DIR   print the rendered objects as a JSON
//                                   array (what `kubectl kustomize DIR` gives)
//   node validate.js --render-all DIR   the same and the optional files' objects
//   node validate.js --mutate DIR   put an unknown field into each object of
//                                   each manifest in turn: "caught PATH", or
//                                   "accepted PATH" where any key is allowed
//
// Each object is validated against the schema of its apiVersion and kind:
// the published Kubernetes OpenAPI definitions as the npm package
// kubernetes-models compiles them (ajv), and the Prometheus Operator's CRD
// schemas as @kubernetes-models/prometheus-operator does. Those validators
// check types, required fields, enums and formats but let unknown fields
// through, as the API server did before strict field validation. So each
// object is validated through a proxy that records which fields the
// validator looked at: a field it never read is one its schema does not
// define, and is reported as unknown (kubectl's strict mode, kubeconform's
// -strict). Then what no single schema sees: selectors that match the pod
// template, named ports, the Secret keys the pods read, requests within
// limits, $(VAR) references, and one place naming each image.
"use strict";

const fs = require("fs");
const path = require("path");
const YAML = require("yaml");

// The Kubernetes version whose schemas kubernetes-models 4.5.x compiles
// (its changelog: "Update schema version to v1.33.0"), and the Prometheus
// Operator release of @kubernetes-models/prometheus-operator 4.4.x (CRDs
// v0.65.1). A change of either package must change these lines.
const PINNED = {
	"kubernetes-models": {version: "4.5.1", schema: "Kubernetes v1.33.0"},
	"@kubernetes-models/prometheus-operator": {version: "4.4.4", schema: "Prometheus Operator v0.65.1 CRDs"},
};

// API groups that are custom resources, and the package of their schemas.
const CRD_PACKAGES = {"monitoring.coreos.com": "@kubernetes-models/prometheus-operator"};

// The kustomization fields this renderer implements; any other is refused,
// so a rendering is never silently different from kustomize's.
const KUSTOMIZATION_FIELDS = ["apiVersion", "kind", "resources", "images"];
const IMAGE_FIELDS = ["name", "newName", "newTag", "digest"];

function packageVersion(name) {
	const file = require.resolve(`${name}/package.json`);
	return JSON.parse(fs.readFileSync(file, "utf8")).version;
}

function checkPins() {
	const problems = [];
	for (const [name, pin] of Object.entries(PINNED)) {
		const v = packageVersion(name);
		if (v !== pin.version)
			problems.push(`${name} is ${v}, but validate.js pins ${pin.version} (${pin.schema}): update PINNED`);
	}
	return problems;
}

// The YAML documents of a file, each an object; duplicate keys refused
// (the API server's strict decoding refuses them too).
function readObjects(file) {
	const text = fs.readFileSync(file, "utf8");
	const docs = YAML.parseAllDocuments(text, {uniqueKeys: true, prettyErrors: true});
	const out = [];
	for (const doc of docs) {
		if (doc.errors.length)
			throw new Error(`${file}: ${doc.errors.map((e) => e.message).join("; ")}`);
		const value = doc.toJS();
		if (value === null || value === undefined)
			continue;
		out.push({file: path.basename(file), object: value});
	}
	return out;
}

// Applies the kustomization's images to a container, as kustomize does;
// 0 when none names its image.
function setImage(container, images) {
	const [name, tag] = splitImage(container.image);
	const rule = images.find((i) => i.name === name);
	if (!rule)
		return 0;
	let image = rule.newName || name;
	if (rule.digest)
		image += `@${rule.digest}`;
	else if (rule.newTag || tag)
		image += `:${rule.newTag || tag}`;
	container.image = image;
	return 1;
}

function splitImage(image) {
	const at = image.indexOf("@");
	if (at >= 0)
		return [image.slice(0, at), null];
	const colon = image.lastIndexOf(":");
	if (colon > image.lastIndexOf("/"))
		return [image.slice(0, colon), image.slice(colon + 1)];
	return [image, null];
}

function podSpecOf(object) {
	if (object.kind === "Pod")
		return object.spec;
	if (object.kind === "CronJob")
		return object.spec && object.spec.jobTemplate && object.spec.jobTemplate.spec &&
		       object.spec.jobTemplate.spec.template && object.spec.jobTemplate.spec.template.spec;
	return object.spec && object.spec.template && object.spec.template.spec;
}

function podLabelsOf(object) {
	const meta = object.kind === "Pod" ? object.metadata
	                                   : object.kind === "CronJob" ? object.spec.jobTemplate.spec.template.metadata
	                                                               : object.spec.template.metadata;
	return (meta && meta.labels) || {};
}

function containersOf(object) {
	const spec = podSpecOf(object);
	if (!spec)
		return [];
	return [...(spec.initContainers || []), ...(spec.containers || [])];
}

// kustomization.yaml of dir: its resources in order with images applied,
// plus the other *.yaml files of dir (not rendered by kustomize: optional).
function render(dir) {
	const problems = [];
	const kfile = path.join(dir, "kustomization.yaml");
	const kust = YAML.parse(fs.readFileSync(kfile, "utf8"), {uniqueKeys: true});
	for (const k of Object.keys(kust))
		if (!KUSTOMIZATION_FIELDS.includes(k))
			problems.push(`kustomization.yaml: field "${k}" is not one validate.js renders (it knows ${KUSTOMIZATION_FIELDS.join(", ")})`);
	if (kust.apiVersion !== "kustomize.config.k8s.io/v1beta1" || kust.kind !== "Kustomization")
		problems.push("kustomization.yaml: expected apiVersion kustomize.config.k8s.io/v1beta1, kind Kustomization");
	const images = kust.images || [];
	for (const img of images)
		for (const k of Object.keys(img))
			if (!IMAGE_FIELDS.includes(k))
				problems.push(`kustomization.yaml: images: field "${k}" is not one of ${IMAGE_FIELDS.join(", ")}`);
	const rendered = [];
	for (const res of kust.resources || []) {
		const file = path.join(dir, res);
		if (path.dirname(path.normalize(res)) !== "." || !fs.existsSync(file)) {
			problems.push(`kustomization.yaml: resource "${res}" is not a file of ${dir}`);
			continue;
		}
		for (const o of readObjects(file)) {
			for (const c of containersOf(o.object))
				if (typeof c.image !== "string" || !setImage(c, images))
					problems.push(`${res}: image "${c.image}" of container ${c.name} is not named in kustomization.yaml's images (the one place that names it)`);
			rendered.push(o);
		}
	}
	const optional = [];
	for (const f of fs.readdirSync(dir).sort()) {
		if (!/\.ya?ml$/.test(f) || f === "kustomization.yaml" || (kust.resources || []).includes(f))
			continue;
		for (const o of readObjects(path.join(dir, f)))
			optional.push({...o, optional: true});
	}
	return {kust, rendered, optional, problems};
}

// ------------------------------------------------------------ the schemas

function modelFor(apiVersion, kind) {
	if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[A-Za-z0-9]+$/.test(kind))
		return {error: "apiVersion and kind must be strings"};
	const slash = apiVersion.indexOf("/");
	const group = slash >= 0 ? apiVersion.slice(0, slash) : "";
	const version = slash >= 0 ? apiVersion.slice(slash + 1) : apiVersion;
	if (!/^v[0-9]+((alpha|beta)[0-9]+)?$/.test(version) || !/^[a-z0-9.-]*$/.test(group))
		return {error: `apiVersion "${apiVersion}" is not GROUP/VERSION`};
	const pkg = CRD_PACKAGES[group] || "kubernetes-models";
	// Built-in kinds only at a GA version: a beta version may be removed by a
	// later release (policy/v1beta1 was in 1.25), a GA one never has been.
	if (pkg === "kubernetes-models" && !/^v[0-9]+$/.test(version))
		return {error: `apiVersion "${apiVersion}" is not a GA version: these manifests use only GA APIs, which every later Kubernetes serves`};
	const mod = group ? `${pkg}/${group}/${version}/${kind}` : `${pkg}/${version}/${kind}`;
	let exported;
	try {
		exported = require(mod)[kind];
	} catch (e) {
		return {error: `no schema for apiVersion "${apiVersion}" kind "${kind}" in ${pkg} ${packageVersion(pkg)}`};
	}
	if (!exported || exported.apiVersion !== apiVersion || exported.kind !== kind)
		return {error: `no schema for apiVersion "${apiVersion}" kind "${kind}" in ${pkg}`};
	return {model: exported, pkg};
}

// A proxy over value (and, as they are read, its objects and arrays) that
// records every field the validator reads of each object.
function tracked(value, where, records) {
	if (value === null || typeof value !== "object")
		return value;
	const rec = {where, read: new Set(), target: value};
	records.push(rec);
	const children = new Map();
	return new Proxy(value, {
		get(t, key, receiver) {
			const v = Reflect.get(t, key, receiver);
			if (typeof key !== "string")
				return v;
			rec.read.add(key);
			if (v === null || typeof v !== "object")
				return v;
			if (!children.has(key))
				children.set(key, tracked(v, `${where}/${key}`, records));
			return children.get(key);
		},
		has(t, key) {
			if (typeof key === "string")
				rec.read.add(key);
			return Reflect.has(t, key);
		},
	});
}

function validateObject(object) {
	const errors = [];
	const found = modelFor(object.apiVersion, object.kind);
	if (found.error)
		return {errors: [found.error]};
	const records = [];
	try {
		found.model.prototype.validate.call(tracked(object, "", records));
	} catch (e) {
		for (const err of e.errors || [{instancePath: "", message: e.message}])
			errors.push(`${err.instancePath || "/"}: ${err.message}${paramsOf(err)}`);
	}
	for (const rec of records) {
		if (Array.isArray(rec.target))
			continue;
		for (const key of Object.keys(rec.target))
			if (!rec.read.has(key))
				errors.push(`${rec.where}/${key}: unknown field (the schema of ${object.apiVersion} ${object.kind} has no such field here)`);
	}
	return {errors, pkg: found.pkg};
}

function paramsOf(err) {
	if (err.params && err.params.allowedValues)
		return ` (${err.params.allowedValues.join(", ")})`;
	return "";
}

// ------------------------------------------------ what no schema sees alone

function labelsMatch(selector, labels) {
	return Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v);
}

function crossCheck(objects) {
	const problems = [];
	const byKind = (kind) => objects.filter((o) => o.object.kind === kind).map((o) => o.object);
	const name = (o) => `${o.kind} ${o.metadata && o.metadata.name}`;
	const workloads = objects.map((o) => o.object).filter((o) => podSpecOf(o));
	const podLabels = workloads.map(podLabelsOf);
	const secrets = byKind("Secret");

	for (const w of workloads) {
		const spec = podSpecOf(w);
		if (w.spec.selector && w.spec.selector.matchLabels && !labelsMatch(w.spec.selector.matchLabels, podLabelsOf(w)))
			problems.push(`${name(w)}: spec.selector does not match the pod template's labels`);
		for (const c of containersOf(w)) {
			const where = `${name(w)} container ${c.name}`;
			const ports = (c.ports || []).map((p) => p.name).filter(Boolean);
			for (const probe of ["livenessProbe", "readinessProbe", "startupProbe"]) {
				const get = c[probe] && c[probe].httpGet;
				if (get && typeof get.port === "string" && !ports.includes(get.port))
					problems.push(`${where}: ${probe} port "${get.port}" is not a named port of the container`);
			}
			const defined = new Set();
			for (const e of c.env || []) {
				for (const m of String(e.value || "").matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g))
					if (!defined.has(m[1]))
						problems.push(`${where}: env ${e.name} refers to $(${m[1]}), which no earlier env entry defines (the kubelet would leave it as is)`);
				defined.add(e.name);
				const ref = e.valueFrom && e.valueFrom.secretKeyRef;
				if (ref && !ref.optional) {
					const s = secrets.find((x) => x.metadata.name === ref.name);
					const keys = s ? Object.keys({...(s.data || {}), ...(s.stringData || {})}) : [];
					if (!s || !keys.includes(ref.key))
						problems.push(`${where}: env ${e.name} reads key "${ref.key}" of Secret "${ref.name}", which the manifests do not define`);
				}
			}
			const r = c.resources || {};
			for (const kind of ["requests", "limits"])
				for (const [res, q] of Object.entries(r[kind] || {}))
					if (Number.isNaN(quantity(q)))
						problems.push(`${where}: ${kind}.${res} "${q}" is not a quantity (the schema takes any string here; the API server does not)`);
			for (const res of Object.keys(r.requests || {}))
				if (r.limits && r.limits[res] !== undefined && quantity(r.requests[res]) > quantity(r.limits[res]))
					problems.push(`${where}: requests.${res} ${r.requests[res]} is above limits.${res} ${r.limits[res]}`);
			const volumes = (spec.volumes || []).map((v) => v.name);
			for (const m of c.volumeMounts || [])
				if (!volumes.includes(m.name))
					problems.push(`${where}: volumeMount "${m.name}" names no volume of the pod`);
		}
	}
	for (const svc of byKind("Service")) {
		const sel = svc.spec && svc.spec.selector;
		const idx = podLabels.findIndex((l) => labelsMatch(sel, l));
		if (!sel || idx < 0) {
			problems.push(`${name(svc)}: its selector matches no pod template`);
			continue;
		}
		const pods = workloads.filter((w, i) => labelsMatch(sel, podLabels[i]));
		const portNames = pods.flatMap((w) => containersOf(w).flatMap((c) => (c.ports || []).map((p) => p.name)));
		for (const p of svc.spec.ports || [])
			if (typeof p.targetPort === "string" && !portNames.includes(p.targetPort))
				problems.push(`${name(svc)}: targetPort "${p.targetPort}" is no named port of the pods it selects`);
	}
	for (const pdb of byKind("PodDisruptionBudget")) {
		const sel = pdb.spec && pdb.spec.selector && pdb.spec.selector.matchLabels;
		if (!sel || !podLabels.some((l) => labelsMatch(sel, l)))
			problems.push(`${name(pdb)}: its selector matches no pod template`);
	}
	for (const sm of byKind("ServiceMonitor")) {
		const sel = sm.spec && sm.spec.selector && sm.spec.selector.matchLabels;
		const svcs = byKind("Service").filter((s) => labelsMatch(sel, s.metadata.labels));
		if (!svcs.length) {
			problems.push(`${name(sm)}: its selector matches no Service's labels`);
			continue;
		}
		const names = svcs.flatMap((s) => s.spec.ports.map((p) => p.name));
		for (const ep of sm.spec.endpoints || []) {
			if (ep.port && !names.includes(ep.port))
				problems.push(`${name(sm)}: endpoint port "${ep.port}" is no port name of the Services it selects`);
			const ref = ep.authorization && ep.authorization.credentials;
			if (ref && !secrets.some((s) => s.metadata.name === ref.name &&
			    Object.keys({...(s.data || {}), ...(s.stringData || {})}).includes(ref.key)))
				problems.push(`${name(sm)}: authorization reads key "${ref.key}" of Secret "${ref.name}", which the manifests do not define`);
		}
	}
	return problems;
}

// Kubernetes quantities ("256Mi", "500m", "1.5G") as numbers, to compare.
function quantity(q) {
	const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(String(q));
	if (!m)
		return NaN;
	const units = {"": 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4};
	return parseFloat(m[1]) * (units[m[2]] === undefined ? NaN : units[m[2]]);
}

// Puts an unknown field into every object of every manifest, one at a time,
// and says for each whether validation caught it: "caught PATH" or, where
// the schema takes any key (labels, a Secret's data), "accepted PATH".
function mutate(objects) {
	const lines = [];
	for (const o of objects) {
		const paths = [];
		(function walk(v, p) {
			if (v === null || typeof v !== "object")
				return;
			if (!Array.isArray(v))
				paths.push(p);
			for (const [k, c] of Object.entries(v))
				walk(c, `${p}/${k}`);
		})(o.object, "");
		for (const p of paths) {
			const copy = JSON.parse(JSON.stringify(o.object));
			const node = p.split("/").slice(1).reduce((n, k) => n[k], copy);
			node.xUnknownField = "x";
			const {errors} = validateObject(copy);
			const caught = errors.some((e) => e.startsWith(`${p}/xUnknownField: unknown field`));
			lines.push(`${caught ? "caught  " : "accepted"} ${o.file} ${o.object.kind}${p || "/"}`);
		}
	}
	return lines;
}

// ------------------------------------------------------------------- main

function main(argv) {
	if (argv[0] === "--mutate") {
		const r = render(argv[1]);
		mutate([...r.rendered, ...r.optional]).forEach((l) => console.log(l));
		return 0;
	}
	if (argv[0] === "--render" || argv[0] === "--render-all") {
		const r = render(argv[1]);
		if (r.problems.length) {
			r.problems.forEach((p) => console.error(p));
			return 1;
		}
		const objects = argv[0] === "--render" ? r.rendered : [...r.rendered, ...r.optional];
		process.stdout.write(JSON.stringify(objects.map((o) => o.object), null, 1) + "\n");
		return 0;
	}
	if (!argv.length) {
		console.error("usage: node validate.js DIR | FILE... | --render DIR | --render-all DIR | --mutate DIR");
		return 2;
	}
	const problems = checkPins();
	let objects = [];
	if (argv.length === 1 && fs.statSync(argv[0]).isDirectory()) {
		const r = render(argv[0]);
		problems.push(...r.problems);
		objects = [...r.rendered, ...r.optional];
	} else {
		for (const f of argv)
			objects.push(...readObjects(f));
	}
	console.log(`validating against ${Object.entries(PINNED).map(([n, p]) => `${p.schema} (${n} ${packageVersion(n)})`).join(", ")}; unknown fields are errors`);
	let invalid = 0;
	for (const o of objects) {
		const {errors, pkg} = validateObject(o.object);
		const label = `${o.file}: ${o.object.apiVersion} ${o.object.kind} ${o.object.metadata && o.object.metadata.name}${o.optional ? " (optional: not in kustomization.yaml)" : ""}`;
		if (errors.length) {
			invalid++;
			console.log(`INVALID ${label}`);
			errors.forEach((e) => console.log(`  ${e}`));
		} else {
			console.log(`valid   ${label} [${pkg}]`);
		}
	}
	const cross = crossCheck(objects);
	cross.forEach((p) => console.log(`INVALID ${p}`));
	problems.forEach((p) => console.log(`INVALID ${p}`));
	const failed = invalid + cross.length + problems.length;
	console.log(`${objects.length - invalid} valid, ${failed} problems`);
	return failed ? 1 : 0;
}

try {
	process.exitCode = main(process.argv.slice(2));
} catch (e) {
	console.error(`validate.js: ${e.message}`);
	process.exitCode = 2;
}
