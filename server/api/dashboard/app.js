// The kvatlas dashboard (docs/operations.md §Dashboard): polls this server's read routes and
// draws what they say. Hand-written, no library: the charts are SVG polylines.
//
// Everything a server returns is text from engines and operators (model names, stream keys):
// it reaches the page through textContent only, never as HTML.
'use strict';

(() => {
  const HISTORY = 90;  // samples kept per chart (3 minutes at the default interval)
  const TOKEN_KEY = 'kvatlas-token';
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // ?interval=MS (250 ... 60000) sets the polling period; 2 s by default.
  const requested = Number(new URLSearchParams(location.search).get('interval'));
  const intervalMs = Number.isFinite(requested) && requested >= 250 ?
      Math.min(requested, 60000) : 2000;

  const $ = (id) => document.getElementById(id);

  // ---- formatting ----------------------------------------------------------------------
  const fmtInt = (v) => (v === null || v === undefined || !Number.isFinite(Number(v))) ?
      '—' : Math.round(Number(v)).toLocaleString('en-US');
  const fmtRate = (v) => {
    if (v === null || !Number.isFinite(v)) return '—';
    if (v >= 100) return fmtInt(v);
    return v.toFixed(v >= 10 ? 1 : 2);
  };
  const fmtBytes = (v) => {
    if (v === null || v === undefined || !Number.isFinite(Number(v))) return '—';
    let n = Number(v);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 ? String(n) : n.toFixed(n >= 100 ? 0 : 1)) + ' ' + units[i];
  };
  const fmtPercent = (v) => (v === null || !Number.isFinite(v)) ? '—' : (100 * v).toFixed(1) + ' %';
  const fmtSeconds = (v) => {
    if (v === null || v === undefined || !Number.isFinite(Number(v))) return '—';
    const s = Number(v);
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
    if (s < 86400) return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
    return Math.floor(s / 86400) + ' d ' + Math.floor((s % 86400) / 3600) + ' h';
  };

  // ---- DOM helpers ---------------------------------------------------------------------
  const setText = (id, text) => {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
  };
  // A table cell holding `content`: a string (as text) or a node.
  const cell = (content, className) => {
    const td = document.createElement('td');
    if (content instanceof Node) td.appendChild(content); else td.textContent = content;
    if (className) td.className = className;
    return td;
  };
  const fillTable = (id, rows) => {
    const body = $(id).tBodies[0];
    body.replaceChildren(...rows);
  };
  const svg = (name, attrs) => {
    const el = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  };

  // A sparkline of `values` (nulls are gaps: drawn as 0) in a W x H box, scaled to the
  // largest value (at least `floor`), its maximum written in the corner when `label`.
  const sparkline = (values, opts) => {
    const W = opts.width || 240;
    const H = opts.height || 48;
    const el = svg('svg', {class: opts.className || 'spark', viewBox: `0 0 ${W} ${H}`,
                           preserveAspectRatio: 'none', role: 'img'});
    const finite = values.map((v) => (v === null || !Number.isFinite(v)) ? 0 : v);
    const max = Math.max(opts.floor || 0, ...finite);
    if (finite.length >= 2 && max > 0) {
      const step = W / (HISTORY - 1);
      const x0 = W - step * (finite.length - 1);
      const pts = finite.map((v, i) =>
        `${(x0 + i * step).toFixed(1)},${(H - 2 - (v / max) * (H - 4)).toFixed(1)}`);
      el.appendChild(svg('path', {d: `M${x0.toFixed(1)},${H} L${pts.join(' L')} L${W},${H} Z`}));
      el.appendChild(svg('polyline', {points: pts.join(' ')}));
    }
    if (opts.label) {
      const t = svg('text', {x: 2, y: 9});
      t.textContent = 'max ' + opts.label(max);
      el.appendChild(t);
    }
    return el;
  };
  const bar = (share) => {
    const el = svg('svg', {class: 'bar', viewBox: '0 0 120 10', role: 'img'});
    el.appendChild(svg('rect', {class: 'back', width: 120, height: 10, rx: 2}));
    el.appendChild(svg('rect', {class: 'front', width: (120 * Math.min(1, share)).toFixed(1),
                                height: 10, rx: 2}));
    return el;
  };

  // ---- charts --------------------------------------------------------------------------
  // A card: its current value (formatted) above a sparkline of the last HISTORY samples.
  class Chart {
    constructor(id, format, floor) {
      this.card = $(id);
      this.format = format;
      this.floor = floor || 0;
      this.values = [];
      this.value = document.createElement('div');
      this.value.className = 'value';
      this.value.textContent = '—';
      this.card.appendChild(this.value);
      this.plot = document.createElement('div');
      this.card.appendChild(this.plot);
    }
    push(v) {
      this.values.push(v);
      if (this.values.length > HISTORY) this.values.shift();
      this.value.textContent = this.format(v);
      this.plot.replaceChildren(sparkline(this.values, {floor: this.floor, label: this.format}));
    }
  }
  const charts = {
    ingest: new Chart('chart-ingest', fmtRate, 1),
    lookups: new Chart('chart-lookups', fmtRate, 1),
    hits: new Chart('chart-hits', fmtPercent, 1),
    memory: new Chart('chart-memory', fmtBytes, 1024),
    entries: new Chart('chart-entries', fmtInt, 1),
    applyLag: new Chart('chart-apply-lag', fmtInt, 1),
  };
  const streamLag = new Map();  // stream key -> lag_seconds history

  // ---- Prometheus text -----------------------------------------------------------------
  // {name: [{labels: {k: v}, value}]} of the sample lines of a /metrics answer.
  const parseMetrics = (text) => {
    const out = {};
    const line = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)/;
    const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (const l of text.split('\n')) {
      if (l === '' || l[0] === '#') continue;
      const m = line.exec(l);
      if (!m) continue;
      const labels = {};
      for (const lm of (m[2] || '').matchAll(label)) {
        labels[lm[1]] = lm[2].replace(/\\n/g, '\n').replace(/\\(.)/g, '$1');
      }
      (out[m[1]] = out[m[1]] || []).push({labels, value: Number(m[3])});
    }
    return out;
  };
  const metricSum = (metrics, name) =>
    (metrics[name] || []).reduce((sum, s) => sum + s.value, 0);

  // ---- fetching ------------------------------------------------------------------------
  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';
  class HttpError extends Error {
    constructor(path, status, message) {
      super(`${path}: ${status} ${message}`);
      this.status = status;
    }
  }
  const get = async (path, asText) => {
    const headers = {};
    if (token()) headers.Authorization = 'Bearer ' + token();
    let response;
    try {
      response = await fetch(path, {headers, cache: 'no-store'});
    } catch (e) {
      throw new HttpError(path, 0, 'unreachable (' + e.message + ')');
    }
    if (!response.ok) {
      let message = response.statusText;
      try {
        message = (await response.json()).message || message;
      } catch (e) {
        // not a JSON error body: the status text says enough
      }
      throw new HttpError(path, response.status, message);
    }
    return asText ? response.text() : response.json();
  };

  // ---- rendering -----------------------------------------------------------------------
  const renderCluster = (c) => {
    const leader = c.members.find((m) => m.id === c.leader_id);
    setText('self', `server ${c.id} · ${c.state}`);
    setText('leader', c.leader_id ? `server ${c.leader_id}` : 'none (election)');
    setText('term', fmtInt(c.term));
    setText('commit-index', fmtInt(c.commit_index));
    setText('applied-index', fmtInt(c.applied_index));
    setText('revision', fmtInt(c.revision));
    setText('member-count', `${c.members.length} member${c.members.length === 1 ? '' : 's'}`);
    fillTable('members', c.members.map((m) => {
      const tr = document.createElement('tr');
      if (m.id === c.leader_id) tr.className = 'leader';
      const state = m.state || (m.id === c.leader_id ? 'leader' : 'follower');
      let http = m.http_address || '—';
      if (m.http_address && m.id !== c.id) {
        http = document.createElement('a');
        http.href = `${location.protocol}//${m.http_address}/`;
        http.textContent = m.http_address;
      }
      const lag = m.lag_entries;
      // Known on the leader for the other members: when it last heard from them.
      let contact = '—';
      if (m.reachable === false) contact = m.last_contact_ms === null ? 'never' :
          `${fmtSeconds(m.last_contact_ms / 1000)} ago`;
      else if (m.reachable === true) contact = `${fmtInt(m.last_contact_ms)} ms ago`;
      tr.append(cell(String(m.id) + (m.id === c.id ? ' (this)' : '')), cell(m.role),
                cell(state, state === 'unreachable' ? 'bad' : undefined), cell(m.raft_address),
                cell(http), cell(fmtInt(m.applied_index), 'num'), cell(fmtInt(m.match_index), 'num'),
                cell(fmtInt(lag), 'num' + (lag > 0 ? ' bad' : '')),
                cell(contact, 'num' + (m.reachable === false ? ' bad' : '')));
      return tr;
    }));
    const note = $('lag-note');
    note.hidden = c.state === 'leader';
    if (!note.hidden) {
      note.replaceChildren('Match index, lag and last contact are known on the leader only' +
                           (leader && leader.http_address ? ': ' : '.'));
      if (leader && leader.http_address) {
        const a = document.createElement('a');
        a.href = `${location.protocol}//${leader.http_address}/`;
        a.textContent = `open server ${leader.id}'s dashboard`;
        note.appendChild(a);
      }
    }
  };

  const renderStats = (s) => {
    setText('stat-contexts', fmtInt(s.index.contexts));
    setText('stat-holders', fmtInt(s.index.holders));
    setText('stat-blocks', fmtInt(s.index.blocks));
    setText('stat-entries', fmtInt(s.index.entries));
    setText('stat-events', fmtInt(s.applied.stored + s.applied.removed + s.applied.cleared));
    setText('stat-evicted', fmtInt(s.index.evicted_blocks));
    setText('stat-storage', fmtBytes(s.storage.approximate_bytes));
    setText('stat-uptime', fmtSeconds(s.uptime_seconds));
  };

  const renderStreams = (streams) => {
    const keys = new Set();
    setText('stream-count', `(${streams.length})`);
    fillTable('streams', streams.map((s) => {
      keys.add(s.key);
      const history = streamLag.get(s.key) || [];
      history.push(s.lag_seconds === null ? null : Number(s.lag_seconds));
      if (history.length > HISTORY) history.shift();
      streamLag.set(s.key, history);
      const tr = document.createElement('tr');
      const bad = (v) => 'num' + (v > 0 ? ' bad' : '');
      const mode = s.report_mode ? `${s.type} (${s.report_mode})` : s.type;
      // Connecting: nothing confirmed at the endpoint yet (since registration or a lost
      // connection); past 10 s /readyz warns about it too.
      const connecting = s.state === 'connecting';
      const state = connecting ? `connecting ${fmtSeconds(s.connecting_for_ms / 1000)}` : s.state;
      const problem = s.error || s.report_mode_warning ||
          (connecting && s.connecting_for_ms >= 10000 ? `no publisher answers at ${s.endpoint}` : '');
      tr.append(cell(s.key), cell(mode), cell(s.model), cell(state, s.state === 'live' ? 'good' : 'bad'),
                cell(fmtSeconds(s.lag_seconds), 'num'),
                cell(sparkline(history, {className: 'spark mini', width: 120, height: 20, floor: 1})),
                cell(fmtInt(s.batches), 'num'), cell(fmtInt(s.gaps), bad(s.gaps)),
                cell(fmtInt(s.lost_batches), bad(s.lost_batches)), cell(fmtInt(s.replays), 'num'),
                cell(fmtInt(s.restarts), bad(s.restarts)),
                cell(fmtInt(s.repeated_stores), 'num'), cell(fmtInt(s.unheld_removes), 'num'),
                cell(problem || (s.last_error ? `(was: ${s.last_error})` : ''), problem ? 'bad' : 'muted'));
      return tr;
    }));
    for (const key of streamLag.keys()) {
      if (!keys.has(key)) streamLag.delete(key);
    }
    if (streams.length === 0) {
      const tr = document.createElement('tr');
      const td = cell('No engine streams (POST /register, or zmq_listen).', 'muted');
      td.colSpan = 12;
      tr.appendChild(td);
      fillTable('streams', [tr]);
    }
  };

  const MAX_CONTEXTS = 50;
  // GET /v1/groups: one row per raft group, its leader's row marked as in #members.
  const renderGroups = (doc) => {
    setText('group-epoch', `directory epoch ${fmtInt(doc.epoch)}`);
    fillTable('groups', doc.groups.map((g) => {
      const tr = document.createElement('tr');
      tr.append(cell(String(g.id)), cell(g.leader_id ? `server ${g.leader_id}` : 'none (election)',
                                         g.leader_id ? undefined : 'bad'),
                cell(g.members.map((m) => m.id).join(', ')), cell(fmtInt(g.contexts), 'num'),
                cell(fmtInt(g.entries), 'num'), cell(fmtBytes(g.snapshot_bytes), 'num'),
                cell(fmtInt(g.applied_index), 'num'),
                cell(g.accepting ? 'taken' : 'refused', g.accepting ? undefined : 'bad'));
      return tr;
    }));
  };

  const renderContexts = (contexts) => {
    const sorted = [...contexts].sort((a, b) => b.entries - a.entries);
    const total = sorted.reduce((sum, c) => sum + c.entries, 0);
    setText('context-count', `(${contexts.length}` +
            (contexts.length > MAX_CONTEXTS ? `, the ${MAX_CONTEXTS} largest shown)` : ')'));
    fillTable('contexts', sorted.slice(0, MAX_CONTEXTS).map((c) => {
      const tr = document.createElement('tr');
      tr.append(cell(c.tenant_id), cell(c.model_name), cell(c.lora_name || '—'),
                cell(fmtInt(c.block_size), 'num'), cell(fmtInt(c.blocks), 'num'),
                cell(fmtInt(c.entries), 'num'), cell(bar(total > 0 ? c.entries / total : 0)),
                cell(fmtInt(c.evicted_blocks), 'num'));
      return tr;
    }));
  };

  // ---- the polling loop ----------------------------------------------------------------
  let previous = null;  // {time, events, lookups, queried, matched} of the last sample
  let updates = 0;

  // Per second since the previous sample; null without one, or when the counter went back
  // (the server restarted).
  const delta = (now, key) => {
    const d = previous ? now[key] - previous[key] : -1;
    return d >= 0 ? d : null;
  };
  const rate = (now, key) => {
    const d = delta(now, key);
    return d === null ? null : d / Math.max(0.001, (now.time - previous.time) / 1000);
  };

  const refresh = async () => {
    const [cluster, groups, stats, streams, contexts, metricsText] = await Promise.all([
      get('/v1/cluster'), get('/v1/groups'), get('/v1/stats'), get('/v1/streams'),
      get('/v1/contexts'), get('/metrics', true)]);
    const metrics = parseMetrics(metricsText);
    const now = {
      time: performance.now(),
      events: stats.applied.stored + stats.applied.removed + stats.applied.cleared,
      lookups: metricSum(metrics, 'kvatlas_lookups_total'),
      queried: metricSum(metrics, 'kvatlas_lookup_blocks_queried_total'),
      matched: metricSum(metrics, 'kvatlas_lookup_blocks_matched_total'),
    };
    renderCluster(cluster);
    renderGroups(groups);
    renderStats(stats);
    renderStreams(streams.streams);
    renderContexts(contexts.contexts);
    charts.ingest.push(rate(now, 'events'));
    charts.lookups.push(rate(now, 'lookups'));
    const queried = delta(now, 'queried');
    const matched = delta(now, 'matched');
    charts.hits.push(queried > 0 && matched !== null ? matched / queried : null);
    charts.memory.push(stats.index.memory_bytes);
    charts.entries.push(stats.index.entries);
    charts.applyLag.push(metricSum(metrics, 'kvatlas_raft_apply_lag_entries'));
    // A snapshot libraft did not write leaves the log uncompacted: say so until one is.
    const snapshotNote = $('snapshot-note');
    snapshotNote.hidden = !(metricSum(metrics, 'kvatlas_raft_snapshot_failed') > 0);
    if (!snapshotNote.hidden) {
      const failures = metricSum(metrics, 'kvatlas_raft_snapshot_failures_total');
      snapshotNote.textContent = `The last raft snapshot was not written (${fmtInt(failures)} ` +
          'failed since start): the raft log is not compacted and grows until one succeeds. ' +
          'See the server log.';
    }
    previous = now;
  };

  const status = $('status');
  const tick = async () => {
    if (!document.hidden) {
      try {
        await refresh();
        updates++;
        document.body.dataset.updates = String(updates);
        status.className = 'muted';
        status.textContent = 'updated ' + new Date().toLocaleTimeString();
      } catch (e) {
        status.className = 'bad';
        status.textContent = (e instanceof HttpError && e.status === 401) ?
            'This server needs a token (read role): enter it above.' :
            'Cannot read the server: ' + e.message;
        // Anything but an HTTP answer or an unreachable server is a bug of this page.
        if (!(e instanceof HttpError)) console.error(e);
      }
    }
    setTimeout(tick, intervalMs);
  };

  // ---- the token -----------------------------------------------------------------------
  $('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const value = $('token').value.trim();
    if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
    $('token').value = '';
    $('token').placeholder = value ? 'set (kept for this tab)' : 'none (access control off)';
    previous = null;
  });
  $('token-forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $('token').placeholder = 'none (access control off)';
  });
  if (token()) $('token').placeholder = 'set (kept for this tab)';

  setText('interval', String(intervalMs / 1000));
  tick();
})();
