// MLX Service web UI: one page, no build step, nothing fetched from anywhere but this service.
// Every piece of text from the service goes into the page through textContent, never as HTML.
"use strict";

// ---- small helpers -------------------------------------------------------------------------------------------
const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

function count(n) {
  if (!n) return "";
  if (n >= 1e9) return `${(n / 1e9).toFixed(n >= 1e10 ? 0 : 1)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(0)}M`;
  return `${(n / 1e3).toFixed(0)}K`;
}

function tokens(n) { return n >= 1024 ? `${Math.round(n / 1024)}K` : String(n); }

function when(iso) {
  const date = new Date(iso);
  return isNaN(date) ? "" : date.toLocaleString();
}

function notice(message) {
  const box = $("notice");
  box.textContent = message || "";
  box.hidden = !message;
}

// ---- the API, with the key kept in this tab's session storage -------------------------------------------------
const KEY = "mlx-service-api-key";

let asking = null; // the one open question for a key: every refused call waits for the same answer

function askKey(reason) {
  asking = asking || new Promise((resolve) => {
    const dialog = $("key-dialog");
    $("key-error").textContent = reason;
    $("key-input").value = "";
    dialog.addEventListener("close", () => {
      sessionStorage.setItem(KEY, $("key-input").value.trim());
      asking = null;
      resolve();
    }, { once: true });
    dialog.showModal();
  });
  return asking;
}

// A refused call asks for a key (again, saying so, when the kept one was refused) and is sent again with it.
async function request(path, options = {}) {
  if (options.json !== undefined) options = { ...options, body: JSON.stringify(options.json) };
  for (;;) {
    const key = sessionStorage.getItem(KEY);
    const headers = { ...(options.headers || {}) };
    if (key) headers.Authorization = `Bearer ${key}`;
    if (options.json !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, { ...options, headers });
    if (response.status !== 401) return response;
    await askKey(key ? "That key was not accepted." : "");
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    const error = body.error;
    return typeof error === "string" ? error : (error && error.message) || JSON.stringify(body);
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// The frames of a streamed response as they arrive: NDJSON lines ("\n") or server-sent events ("\n\n").
async function* frames(response, separator) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf(separator)) >= 0) {
      yield buffer.slice(0, end);
      buffer = buffer.slice(end + separator.length);
    }
  }
}

async function getJSON(path) {
  const response = await request(path);
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

// ---- tabs (arrow keys move between them) ------------------------------------------------------------------------
const tabs = [...document.querySelectorAll('[role="tab"]')];
const views = { "tab-catalog": refreshCatalog, "tab-machine": refreshMachine, "tab-engine": refreshEngine,
  "tab-playground": refreshPlayground };

function select(tab) {
  for (const other of tabs) {
    const chosen = other === tab;
    other.setAttribute("aria-selected", String(chosen));
    other.tabIndex = chosen ? 0 : -1;
    $(other.getAttribute("aria-controls")).hidden = !chosen;
  }
  location.hash = tab.id.slice(4);
  views[tab.id]().catch((e) => notice(e.message));
}

tabs.forEach((tab, i) => {
  tab.addEventListener("click", () => select(tab));
  tab.addEventListener("keydown", (event) => {
    const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
    if (!step) return;
    const next = tabs[(i + step + tabs.length) % tabs.length];
    next.focus();
    select(next);
  });
});

function current() { return tabs.find((t) => t.getAttribute("aria-selected") === "true").id; }

// ---- theme --------------------------------------------------------------------------------------------------
const savedTheme = localStorage.getItem("mlx-service-theme");
if (savedTheme) document.documentElement.dataset.theme = savedTheme;
$("theme").addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : matchMedia("(prefers-color-scheme: dark)").matches;
  document.documentElement.dataset.theme = dark ? "light" : "dark";
  localStorage.setItem("mlx-service-theme", document.documentElement.dataset.theme);
});

// ---- catalog ------------------------------------------------------------------------------------------------
let catalog = null;

function fillSelect(select, values) {
  const kept = select.value;
  select.replaceChildren(el("option", { value: "" }, "any"), ...values.map((v) => el("option", { value: v }, v)));
  select.value = values.includes(kept) ? kept : "";
}

async function refreshCatalog() {
  catalog = await getJSON("/api/catalog");
  const uniq = (f) => [...new Set(catalog.entries.flatMap(f))].sort();
  fillSelect($("f-kind"), uniq((e) => [e.kind]));
  fillSelect($("f-ability"), uniq((e) => e.abilities));
  fillSelect($("f-quant"), uniq((e) => [e.quantization]));
  const problems = catalog.problems || [];
  $("problems").hidden = problems.length === 0;
  $("problem-list").replaceChildren(...problems.map((p) =>
    el("li", {}, el("code", {}, `${p.file}:${p.line}:${p.col}`), ` ${p.code}: ${p.message}`,
      p.json_path ? el("span", { class: "muted" }, ` (at ${p.json_path})`) : null)));
  renderCatalog();
}

function renderCatalog() {
  if (!catalog) return;
  const text = $("f-text").value.trim().toLowerCase();
  const [low, high] = ($("f-size").value || "0-1e9").split("-").map(Number);
  const families = Object.fromEntries(catalog.families.map((f) => [f.name, f]));
  const rows = catalog.entries.filter((e) => {
    const family = families[e.family] || {};
    const haystack = `${e.tag} ${e.repo || ""} ${family.description || ""}`.toLowerCase();
    return (!text || haystack.includes(text))
      && (!$("f-kind").value || e.kind === $("f-kind").value)
      && (!$("f-ability").value || e.abilities.includes($("f-ability").value))
      && (!$("f-quant").value || e.quantization === $("f-quant").value)
      && (!$("f-downloaded").checked || e.downloaded)
      && e.parameters / 1e9 >= low && e.parameters / 1e9 < high;
  });
  $("catalog-summary").textContent =
    `${rows.length} of ${catalog.entries.length} entries; memory estimated at ${tokens(catalog.context)} tokens of context.`;
  $("catalog-table").tBodies[0].replaceChildren(...rows.map((e) => {
    const family = families[e.family] || {};
    const status = [
      e.downloaded ? el("span", { class: "badge ok" }, "downloaded") : null,
      e.generated ? el("span", { class: "badge" }, "generated") : null,
      e.verified ? null : el("span", { class: "badge warn", title: "facts not verified upstream" }, "unverified"),
    ];
    const pull = e.downloaded ? null : el("button", { type: "button", onclick: () => startPull(e.tag) }, "Pull");
    const context = e.extended_context ? `${tokens(e.context)} (${tokens(e.extended_context)} ext.)` : tokens(e.context);
    return el("tr", { "data-tag": e.tag },
      el("td", {}, el("strong", {}, e.tag), el("span", { class: "desc" }, family.description || ""),
        e.repo ? el("span", { class: "desc" }, e.repo) : null),
      el("td", {}, e.kind, el("span", { class: "desc" }, e.abilities.join(", "))),
      el("td", { class: "num" }, count(e.parameters), e.active_parameters ? ` (${count(e.active_parameters)} active)` : "",
        el("span", { class: "desc" }, e.quantization)),
      el("td", { class: "num" }, context),
      el("td", { class: "num" }, bytes(e.estimate_bytes)),
      el("td", {}, e.license),
      el("td", {}, status),
      el("td", {}, pull));
  }));
}

for (const id of ["f-text", "f-kind", "f-ability", "f-size", "f-quant", "f-downloaded"]) {
  for (const kind of ["input", "change"]) $(id).addEventListener(kind, renderCatalog);
}

// ---- pulls and downloaded models ------------------------------------------------------------------------------
const pulls = new Map(); // model -> {status, completed, total, samples: [[time, completed]], controller, error}

async function startPull(tag) {
  if (pulls.has(tag)) return;
  const state = { status: "starting", completed: 0, total: 0, samples: [], controller: new AbortController() };
  pulls.set(tag, state);
  select($("tab-machine"));
  try {
    const response = await request("/api/pull", { method: "POST", json: { model: tag }, signal: state.controller.signal });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const frame of frames(response, "\n")) {
      const line = frame.trim();
      if (!line) continue;
      const event = JSON.parse(line);
      if (event.error) throw new Error(event.error);
      state.status = event.status;
      state.completed = event.overall_completed ?? state.completed;
      state.total = event.overall_total ?? state.total;
      state.samples.push([performance.now(), state.completed]);
      renderPulls();
    }
    pulls.delete(tag);
  } catch (error) {
    state.error = error.name === "AbortError" ? "cancelled" : error.message;
    state.status = "stopped";
    setTimeout(() => { pulls.delete(tag); renderPulls(); }, 8000);
  }
  renderPulls();
  if (current() === "tab-machine") refreshMachine().catch((e) => notice(e.message));
  catalog = null;
}

async function cancelPull(tag) {
  const mine = pulls.get(tag);
  if (mine && mine.controller) mine.controller.abort();
  const response = await request("/api/pull", { method: "DELETE", json: { model: tag } });
  if (!response.ok && response.status !== 404) notice(await errorText(response));
}

function speed(samples) {
  const recent = samples.filter(([t]) => t > performance.now() - 10000);
  if (recent.length < 2) return 0;
  const [[t0, c0], [t1, c1]] = [recent[0], recent[recent.length - 1]];
  return t1 > t0 ? ((c1 - c0) * 1000) / (t1 - t0) : 0;
}

// Pulls started elsewhere (another client, another tab) as /api/stats reports them, with their progress samples.
let elsewhere = [];
const elsewhereSamples = new Map();

function watchElsewhere(running) {
  const now = performance.now();
  for (const model of [...elsewhereSamples.keys()]) if (!running.some((p) => p.model === model)) elsewhereSamples.delete(model);
  for (const p of running) {
    const samples = elsewhereSamples.get(p.model) || [];
    samples.push([now, p.completed]);
    elsewhereSamples.set(p.model, samples.slice(-30));
  }
  elsewhere = running;
}

function renderPulls() {
  const items = [...pulls.entries()].map(([model, p]) => ({ model, ...p }));
  for (const other of elsewhere) {
    if (!pulls.has(other.model)) items.push({ ...other, samples: elsewhereSamples.get(other.model) || [] });
  }
  $("no-pulls").hidden = items.length > 0;
  $("pulls").replaceChildren(...items.map((p) => {
    const rate = speed(p.samples);
    const left = rate > 0 && p.total ? Math.round((p.total - p.completed) / rate) : null;
    const detail = p.error ? p.error
      : p.total ? `${bytes(p.completed)} of ${bytes(p.total)}${rate ? ` · ${bytes(rate)}/s` : ""}${left !== null ? ` · ${left} s left` : ""}`
      : p.status;
    return el("li", { "data-model": p.model },
      el("span", {}, el("strong", {}, p.model), " ", el("span", { class: "muted" }, p.status || "")),
      p.error ? el("span", { class: "error" }, "") : el("button", { type: "button", class: "danger", onclick: () => cancelPull(p.model) }, "Cancel"),
      el("progress", { max: p.total || 1, value: p.total ? p.completed : (p.status === "success" ? 1 : 0),
        "aria-label": `${p.model} progress` }),
      el("span", { class: p.error ? "error" : "muted" }, detail));
  }));
}

async function refreshMachine() {
  const [tags, stats] = await Promise.all([getJSON("/api/tags"), getJSON("/api/stats")]);
  watchElsewhere(stats.pulls || []);
  renderPulls();
  const none = el("tr", {}, el("td", { colspan: 5, class: "muted" }, "Nothing downloaded yet: pull a model from the catalog."));
  $("downloaded-table").tBodies[0].replaceChildren(...(tags.models.length ? [] : [none]), ...tags.models.map((m) => el("tr", { "data-model": m.name },
    el("td", {}, el("strong", {}, m.name), el("span", { class: "desc" },
      [m.details.family, m.details.parameter_size, m.details.quantization_level].filter(Boolean).join(" · "))),
    el("td", { class: "num" }, bytes(m.size)),
    el("td", {}, el("code", {}, (m.digest || "").slice(0, 12))),
    el("td", {}, when(m.modified_at)),
    el("td", {}, el("button", { type: "button", class: "danger", onclick: () => removeModel(m.name) }, "Delete")))));
}

async function removeModel(name) {
  if (!confirm(`Delete ${name} from this machine? Its files are removed; pull it again to use it.`)) return;
  const response = await request("/api/delete", { method: "DELETE", json: { model: name } });
  if (!response.ok) notice(await errorText(response));
  catalog = null;
  await refreshMachine();
}

// ---- engine -----------------------------------------------------------------------------------------------------
const history = []; // [time, {model: tps}, rss, mlxActive]
const WINDOW_MS = 5 * 60 * 1000;

function drawChart(canvas, series, unit) {
  const ctx = canvas.getContext("2d");
  const width = (canvas.width = canvas.clientWidth * devicePixelRatio || canvas.width);
  const height = (canvas.height = 120 * devicePixelRatio);
  ctx.clearRect(0, 0, width, height);
  const style = getComputedStyle(document.documentElement);
  const colors = [style.getPropertyValue("--accent"), style.getPropertyValue("--ok"), style.getPropertyValue("--warn"),
    style.getPropertyValue("--bad")];
  const now = performance.now();
  const max = Math.max(1, ...series.flatMap((s) => s.points.map(([, v]) => v)));
  ctx.font = `${11 * devicePixelRatio}px system-ui`;
  ctx.fillStyle = style.getPropertyValue("--muted");
  ctx.fillText(`${Math.round(max)} ${unit}`, 4, 12 * devicePixelRatio);
  series.forEach((s, i) => {
    ctx.strokeStyle = colors[i % colors.length];
    ctx.lineWidth = 2 * devicePixelRatio;
    ctx.beginPath();
    s.points.forEach(([t, v], j) => {
      const x = width - ((now - t) / WINDOW_MS) * width;
      const y = height - (v / max) * (height - 16 * devicePixelRatio) - 2;
      j ? ctx.lineTo(x, y) : ctx.moveTo(x, y);
    });
    ctx.stroke();
  });
}

function renderCharts() {
  const models = [...new Set(history.flatMap(([, tps]) => Object.keys(tps)))];
  drawChart($("chart-tps"), models.map((m) => ({ points: history.filter(([, tps]) => m in tps).map(([t, tps]) => [t, tps[m]]) })), "tok/s");
  drawChart($("chart-mem"), [{ points: history.map(([t, , rss]) => [t, rss / 2 ** 20]) },
    { points: history.map(([t, , , active]) => [t, active / 2 ** 20]) }], "MiB");
}

async function refreshEngine() {
  const [stats, ps, config, events, available] = await Promise.all([getJSON("/api/stats"), getJSON("/api/ps"),
    getJSON("/api/engine/config"), getJSON("/api/events?limit=40"), getJSON("/v1/models")]);
  const now = performance.now();
  const tps = {};
  for (const m of stats.models) if (m.usage) tps[m.name] = m.usage.decode_tokens_per_second.last;
  const mlx = stats.process.mlx || {};
  history.push([now, tps, stats.process.rss_bytes, mlx.active_bytes || 0]);
  while (history.length && history[0][0] < now - WINDOW_MS) history.shift();
  renderCharts();
  $("memory-now").textContent = `Process ${bytes(stats.process.rss_bytes)}` +
    (stats.process.mlx ? ` · MLX active ${bytes(mlx.active_bytes)}, peak ${bytes(mlx.peak_bytes)}, cache ${bytes(mlx.cache_bytes)}` : "");
  const expires = Object.fromEntries(ps.models.map((m) => [m.name, m.expires_at]));
  const idle = el("tr", {}, el("td", { colspan: 11, class: "muted" }, "No model is loaded: one loads on its first request, or here."));
  $("loaded-table").tBodies[0].replaceChildren(...(stats.models.length ? [] : [idle]), ...stats.models.map((m) => {
    const u = m.usage && m.usage.requests ? m.usage : {}; // nothing measured yet: empty cells, not zeros
    const cache = m.prefix_cache ? Object.entries(m.prefix_cache).map(([tier, c]) => `${tier} ${c.hits}/${c.hits + c.misses}`).join(", ") : "";
    const unload = m.state === "ready" ? el("button", { type: "button", class: "quiet", onclick: () => loadOrUnload(m.name, "unload") }, "Unload") : null;
    return el("tr", { "data-model": m.name },
      el("td", {}, el("strong", {}, m.name), m.error ? el("span", { class: "desc error" }, m.error) : null),
      el("td", {}, m.state),
      el("td", { class: "num" }, m.memory_bytes ? bytes(m.memory_bytes) : ""),
      el("td", {}, expires[m.name] ? when(expires[m.name]) : ""),
      el("td", { class: "num" }, m.usage ? m.usage.requests : ""),
      el("td", { class: "num" }, u.decode_tokens_per_second ? `${u.decode_tokens_per_second.last} (mean ${u.decode_tokens_per_second.mean})` : ""),
      el("td", { class: "num" }, u.ttft_seconds ? `${Math.round(u.ttft_seconds.mean * 1000)} ms` : ""),
      el("td", { class: "num" }, m.queue_depth ?? ""),
      el("td", { class: "num" }, m.batch_size ?? ""),
      el("td", {}, cache),
      el("td", {}, unload));
  }));
  const loaded = new Set(stats.models.map((m) => m.name));
  const choices = available.data.map((m) => m.id).filter((id) => !loaded.has(id));
  const keep = $("load-model").value;
  $("load-model").replaceChildren(...choices.map((id) => el("option", { value: id }, id)));
  if (choices.includes(keep)) $("load-model").value = keep;
  renderSettings(config);
  $("events").replaceChildren(...events.events.slice().reverse().map((e) => el("li", {},
    el("time", { datetime: e.time }, new Date(e.time).toLocaleTimeString()), " ",
    el("strong", {}, e.kind), e.model ? ` ${e.model}` : "",
    el("span", { class: "muted" }, ` ${Object.entries(e).filter(([k]) => !["time", "kind", "model", "id"].includes(k))
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ")}`))));
}

async function loadOrUnload(name, action) {
  const response = await request(`/v1/models/${encodeURIComponent(name)}/${action}`, { method: "POST" });
  if (!response.ok) notice(await errorText(response));
  await refreshEngine();
}

$("load-form").addEventListener("submit", () => {
  const name = $("load-model").value;
  if (name) loadOrUnload(name, "load").catch((e) => notice(e.message));
});

let settingsShown = null;

function renderSettings(config) {
  const shown = JSON.stringify(config.settings);
  if (shown === settingsShown || $("settings-form").contains(document.activeElement)) return;
  settingsShown = shown;
  $("settings-fields").replaceChildren(...Object.entries(config.settings).map(([name, value]) => {
    const input = typeof value === "boolean"
      ? el("input", { type: "checkbox", name, checked: value })
      : el("input", { type: "text", name, value: value === null ? "" : String(value), inputmode: "decimal" });
    return el("label", { class: typeof value === "boolean" ? "check" : "" }, name.replaceAll("_", " "), input);
  }));
  if (config.rebuilding && config.rebuilding.length) {
    $("settings-status").textContent = `Rebuilding: ${config.rebuilding.join(", ")}`;
  }
}

$("settings-form").addEventListener("submit", async () => {
  const changes = {};
  const before = JSON.parse(settingsShown || "{}");
  for (const input of $("settings-fields").querySelectorAll("input")) {
    const old = before[input.name];
    const value = input.type === "checkbox" ? input.checked : input.value.trim();
    if (input.type === "checkbox" ? value !== old : value !== String(old ?? "")) {
      changes[input.name] = input.type === "checkbox" ? value : (value === "" ? null : Number.isNaN(Number(value)) ? value : Number(value));
    }
  }
  if (!Object.keys(changes).length) { $("settings-status").textContent = "Nothing changed."; return; }
  const response = await request("/api/engine/config", { method: "POST", json: changes });
  if (!response.ok) {
    $("settings-status").textContent = await errorText(response);
    $("settings-status").className = "error";
    return;
  }
  const config = await response.json();
  $("settings-status").className = "";
  $("settings-status").textContent = `Applied: ${Object.keys(changes).join(", ")}` +
    (config.rebuilding.length ? `; rebuilding ${config.rebuilding.join(", ")}` : "");
  settingsShown = null;
  renderSettings(config);
});

// ---- playground ---------------------------------------------------------------------------------------------------
let models = [];
let conversation = [];
let streaming = null;

async function refreshPlayground() {
  const list = await getJSON("/v1/models");
  models = list.data.filter((m) => (m.capabilities || []).includes("completion"));
  const keep = $("chat-model").value;
  $("chat-model").replaceChildren(...models.map((m) => el("option", { value: m.id }, m.id)));
  if (models.some((m) => m.id === keep)) $("chat-model").value = keep;
  syncImageInput();
}

function syncImageInput() {
  const model = models.find((m) => m.id === $("chat-model").value);
  $("image-label").hidden = !(model && (model.capabilities || []).includes("vision"));
}

$("chat-model").addEventListener("change", syncImageInput);

function readImage(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function chatTools() {
  const text = $("chat-tools").value.trim();
  if (!text) return null;
  let tools;
  try { tools = JSON.parse(text); } catch (error) { throw new Error(`Tools are not JSON: ${error.message}`); }
  if (!Array.isArray(tools)) throw new Error("Tools must be a JSON array of {\"type\": \"function\", ...} objects.");
  return tools;
}

function chatBody(tools) {
  const stop = $("chat-stop").value.split(",").map((s) => s.trim()).filter(Boolean);
  const system = $("chat-system").value.trim();
  const reasoning = $("chat-reasoning").value;
  return {
    model: $("chat-model").value,
    messages: [...(system ? [{ role: "system", content: system }] : []), ...conversation],
    temperature: Number($("chat-temperature").value),
    max_tokens: Number($("chat-max-tokens").value),
    ...(stop.length ? { stop } : {}),
    ...(reasoning ? { reasoning_effort: reasoning } : {}),
    ...(tools ? { tools, tool_choice: $("chat-tool-choice").value } : {}),
    stream: true,
    stream_options: { include_usage: true },
  };
}

function showSnippet(body) {
  const plain = { ...body, stream: false };
  delete plain.stream_options;
  const json = JSON.stringify(plain, null, 2);
  $("snippet-curl").textContent = `curl ${location.origin}/v1/chat/completions \\\n  -H "Content-Type: application/json" \\\n` +
    (sessionStorage.getItem(KEY) ? `  -H "Authorization: Bearer $MLX_SERVICE_API_KEY" \\\n` : "") + `  -d '${json.replaceAll("'", "'\\''")}'`;
  const quoted = JSON.stringify(plain, null, 4).replaceAll("'", "\\u0027"); // no quote ends Python's raw string
  const key = sessionStorage.getItem(KEY) ? "YOUR_KEY" : "unused";
  $("snippet-python").textContent = `import json\n\nfrom openai import OpenAI\n\n` +
    `client = OpenAI(base_url="${location.origin}/v1", api_key="${key}")\n` +
    `request = json.loads(r'''${quoted}''')\nresponse = client.chat.completions.create(**request)\n` +
    `print(response.choices[0].message)`;
}

function messageView(role, text, image) {
  const body = el("span", { class: "text" }, text);
  const node = el("div", { class: `msg ${role}` }, el("span", { class: "who" }, role), body, image ? el("img", { src: image, alt: "attached image" }) : null);
  $("transcript").append(node);
  return { node, body };
}

$("chat-form").addEventListener("submit", async () => {
  const text = $("chat-input").value.trim();
  if (!text || streaming) return;
  let tools;
  try { tools = chatTools(); } catch (error) { $("chat-usage").textContent = error.message; $("chat-usage").className = "error"; return; }
  $("chat-usage").className = "muted";
  const file = $("chat-image").files[0];
  const image = file && !$("image-label").hidden ? await readImage(file) : null;
  const content = image ? [{ type: "text", text }, { type: "image_url", image_url: { url: image } }] : text;
  conversation.push({ role: "user", content });
  messageView("user", text, image);
  $("chat-input").value = "";
  $("chat-image").value = "";
  const body = chatBody(tools);
  showSnippet(body);
  const view = messageView("assistant", "");
  view.node.setAttribute("aria-busy", "true");
  let thinking = null;
  const calls = [];
  let answer = "";
  let usage = null;
  const started = performance.now();
  let first = null;
  streaming = new AbortController();
  $("chat-send").disabled = true;
  $("chat-stop-button").disabled = false;
  try {
    const response = await request("/v1/chat/completions", { method: "POST", json: body, signal: streaming.signal });
    if (!response.ok) throw new Error(await errorText(response));
    for await (const chunk of frames(response, "\n\n")) {
      const data = chunk.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("");
      if (!data || data === "[DONE]") continue;
      const event = JSON.parse(data);
      if (event.error) throw new Error(event.error.message || JSON.stringify(event.error));
      if (event.usage) usage = event.usage;
      const delta = event.choices && event.choices[0] && event.choices[0].delta;
      if (!delta) continue;
      if (first === null && (delta.content || delta.reasoning_content || delta.tool_calls)) first = performance.now();
      if (delta.reasoning_content) {
        if (!thinking) {
          thinking = el("pre", {});
          view.node.insertBefore(el("details", { open: true }, el("summary", {}, "Thinking"), thinking), view.body);
        }
        thinking.textContent += delta.reasoning_content;
      }
      for (const call of delta.tool_calls || []) {
        calls[call.index] = calls[call.index] || { id: call.id, name: "", arguments: "" };
        if (call.function && call.function.name) calls[call.index].name = call.function.name;
        if (call.function && call.function.arguments) calls[call.index].arguments += call.function.arguments;
      }
      if (delta.content) {
        answer += delta.content;
        view.body.textContent = answer;
      }
    }
    const made = calls.filter(Boolean);
    for (const call of made) view.node.append(el("pre", { class: "tool-call" }, `tool call: ${call.name}(${call.arguments})`));
    conversation.push({ role: "assistant", content: answer,
      ...(made.length ? { tool_calls: made.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } })) } : {}) });
    const elapsed = (performance.now() - started) / 1000;
    if (usage) {
      const decode = first ? (performance.now() - first) / 1000 : elapsed;
      $("chat-usage").textContent = `${usage.prompt_tokens} prompt tokens (${usage.prompt_tokens_details?.cached_tokens || 0} cached), ` +
        `${usage.completion_tokens} generated · first token ${first ? Math.round(first - started) : "-"} ms · ` +
        `${usage.completion_tokens > 1 && decode > 0 ? (usage.completion_tokens / decode).toFixed(1) : "-"} tokens/s · ${elapsed.toFixed(2)} s`;
    }
  } catch (error) {
    view.node.append(el("span", { class: "error" }, error.name === "AbortError" ? " (stopped)" : ` ${error.message}`));
    if (answer) conversation.push({ role: "assistant", content: answer });
  } finally {
    view.node.removeAttribute("aria-busy");
    streaming = null;
    $("chat-send").disabled = false;
    $("chat-stop-button").disabled = true;
  }
});

$("chat-stop-button").addEventListener("click", () => streaming && streaming.abort());
$("chat-clear").addEventListener("click", () => { conversation = []; $("transcript").replaceChildren(); $("chat-usage").textContent = ""; });
$("chat-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.metaKey || event.ctrlKey)) $("chat-form").requestSubmit();
});

// ---- start, and keep the live views fresh ---------------------------------------------------------------------
const start = tabs.find((t) => t.id === `tab-${location.hash.slice(1)}`) || tabs[0];
select(start);
setInterval(() => {
  const tab = current();
  const refresh = tab === "tab-engine" ? refreshEngine : tab === "tab-machine" ? refreshMachine
    : tab === "tab-catalog" && !catalog ? refreshCatalog : null;
  if (refresh && document.visibilityState === "visible") refresh().then(() => notice("")).catch((e) => notice(e.message));
}, 2000);
