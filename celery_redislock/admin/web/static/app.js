// The live web view of celery-redislock: polls the JSON every 2 s and
// re-renders in place.  Every key, task name, task id and argument is user
// data: it only ever becomes a text node (textContent / append(string)),
// never markup.  No inline script: the server's CSP forbids it.
'use strict';
(function () {
  const POLL_MS = 2000;
  const COUNT = 100; // parked tasks listed on a key's page
  const params = new URLSearchParams(window.location.search);
  const keyName = params.get('key');
  const $ = (id) => document.getElementById(id);
  let polls = 0;
  let actionsOn = false;
  let timer = null;

  // -- the action token: from #token=... (the URL printed at start), kept for the tab
  function takeToken() {
    const hash = new URLSearchParams(window.location.hash.slice(1));
    if (hash.get('token')) {
      sessionStorage.setItem('redislock-token', hash.get('token'));
      history.replaceState(null, '', window.location.pathname + window.location.search);
    }
  }
  const token = () => sessionStorage.getItem('redislock-token') || '';

  // -- building DOM: text only
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') node.className = v;
      else if (k === 'onclick') node.addEventListener('click', v);
      else node.setAttribute(k, String(v));
    }
    for (const kid of kids) {
      if (kid === null || kid === undefined) continue;
      node.append(kid instanceof Node ? kid : String(kid));
    }
    return node;
  }
  function table(headers, rows, rowClass) {
    const head = el('tr', null, ...headers.map((h) => el('th', null, h)));
    const body = rows.map((r, i) => el('tr', { class: rowClass ? rowClass(i) : null },
      ...r.map((c) => (c instanceof Node && c.tagName === 'TD' ? c : el('td', null, c)))));
    return el('table', null, el('thead', null, head), el('tbody', null, ...body));
  }
  const wrap = (text) => el('td', { class: 'wrap' }, text);
  const dash = (v) => (v === null || v === undefined || v === '' ? '-' : v);
  function secs(v) {
    if (v === null || v === undefined) return '-';
    const a = Math.abs(v);
    const s = a >= 3600 ? (v / 3600).toFixed(1) + 'h' : a >= 60 ? (v / 60).toFixed(1) + 'm' : v.toFixed(1) + 's';
    return s;
  }
  const keyLink = (name) => el('a', { href: '/?key=' + encodeURIComponent(name) }, name);
  const levelBadge = (lvl) => (lvl === 'at' || lvl === 'over' || lvl === 'near'
    ? el('span', { class: 'badge ' + lvl }, lvl === 'near' ? 'near cap' : lvl + ' cap') : '');
  function heldCell(k) {
    const text = k.limit ? k.held + ' / ' + k.limit : String(k.held);
    if (!k.limit) return text;
    return el('td', null, el('meter', { min: 0, max: k.limit, value: Math.min(k.held + k.reserved, k.limit),
      high: Math.max(k.limit * 0.8, 0.5), optimum: 0 }), ' ', text, ' ', levelBadge(k.level));
  }
  const rate = (k) => (k.rate ? k.rate + (k.burst > 1 ? ' burst ' + k.burst : '') : '-');
  const card = (label, value) => el('div', { class: 'card' }, el('b', null, value), label);

  // -- actions: POST with the token, after a confirmation
  async function act(action, body, question) {
    if (!window.confirm(question)) return;
    const message = $('message');
    try {
      const resp = await fetch('/api/action/' + action, {
        method: 'POST', cache: 'no-store',
        headers: { 'Content-Type': 'application/json', 'X-Redislock-Token': token() },
        body: JSON.stringify(body),
      });
      const data = await resp.json();
      if (!resp.ok) throw new Error(data.error || resp.statusText);
      message.className = 'message';
      message.textContent = 'done: ' + data.did;
    } catch (err) {
      message.className = 'message error';
      message.textContent = 'refused: ' + err.message;
    }
    poll();
  }
  function releaseButton(h) {
    if (!actionsOn || h.reserved) return '';
    return el('button', { type: 'button', onclick: () => act('release', { name: h.name, owner: h.owner },
      'Release token ' + h.token + ' of "' + h.name + '" held by task ' + dash(h.task_id) +
      '?\nThe task is NOT stopped; its heartbeat sees the lease lost.') }, 'release');
  }

  // -- the overview
  function holdersTable(holders, withKey) {
    const rows = holders.map((h) => [
      ...(withKey ? [wrap(keyLink(h.name))] : []),
      String(h.token), wrap(h.reserved ? dash(h.task_id) + ' (reserved: promoted, not yet started)' : dash(h.task_id)),
      dash(h.task), h.reserved ? '-' : dash(h.host) + ':' + dash(h.pid), secs(h.held_for),
      h.renewed_ago === null ? '-' : secs(h.renewed_ago) + ' ago',
      h.alive_ago === null ? '-' : (h.alive_silent ? '>' : '') + secs(h.alive_ago) + ' ago',
      secs(h.expires_in) + ' / ' + secs(h.ttl), releaseButton(h),
    ]);
    const headers = [...(withKey ? ['Key'] : []), 'Token', 'Task id', 'Task', 'Host:pid', 'Held for',
      'Last renewal', 'Alive', 'Lease left', ''];
    return table(headers, rows, (i) => (holders[i].suspect ? 'suspect' : null));
  }
  function renderOverview(d) {
    const out = [el('div', { class: 'cards' },
      card('busy keys', d.total), card('held', d.held), card('parked', d.parked),
      card('overdue promotions', d.overdue), card('holders', d.holders_total))];
    if (!d.keys.length) {
      out.push(el('p', { class: 'muted' }, 'Nothing held, waiting or parked.'));
      return out;
    }
    if (d.keys.length < d.total) out.push(el('p', { class: 'muted' }, 'The ' + d.keys.length + ' busiest of ' + d.total + ' keys.'));
    out.push(el('h2', null, 'Limiters (task names)'));
    out.push(table(['Task', 'Keys', 'At cap', 'Near cap', 'Held', 'Parked', 'Oldest parked'],
      d.limiters.map((l) => [wrap(l.task), String(l.keys), String(l.at_cap), String(l.near_cap),
        String(l.held), String(l.parked), secs(l.oldest_parked_age)])));
    out.push(el('h2', null, 'Keys, busiest first'));
    out.push(table(['Key', 'Kind', 'Held / limit', 'Reserved', 'Waiting', 'Parked', 'Oldest parked',
      'Overdue', 'Rate', 'Paused for', 'Next due', 'Tasks'],
    d.keys.map((k) => [wrap(keyLink(k.name)), k.kind, heldCell(k), String(k.reserved), String(k.waiting),
      String(k.parked), secs(k.oldest_parked_age), String(k.overdue), rate(k),
      k.paused_for ? secs(k.paused_for) : '-', k.next_due_in ? secs(k.next_due_in) : '-',
      wrap(k.tasks.join(', '))]),
    (i) => 'lvl-' + d.keys[i].level));
    out.push(el('h2', null, 'Holders'));
    out.push(d.holders.length ? holdersTable(d.holders, true) : el('p', { class: 'muted' }, 'none'));
    if (d.holders_total > d.holders.length) {
      out.push(el('p', { class: 'muted' }, (d.holders_total - d.holders.length) + ' more: see each key\'s page.'));
    }
    return out;
  }

  // -- one key
  function renderKey(d) {
    const out = [el('p', null, el('a', { href: '/' }, '← all keys')),
      el('h2', { id: 'key-name' }, 'Key ', el('code', null, d.name), ' ', levelBadge(d.level)),
      el('div', { class: 'cards' }, card('kind', d.kind), card('held / limit', d.limit ? d.held + ' / ' + d.limit : d.held),
        card('reserved', d.reserved), card('waiting', d.waiting), card('parked', d.parked),
        card('oldest parked', secs(d.oldest_parked_age)), card('overdue promotions', d.overdue),
        card('rate', rate(d)), card('paused for', d.paused_for ? secs(d.paused_for) : '-'),
        card('next due', d.next_due_in ? secs(d.next_due_in) : '-'), card('override', dash(d.override)),
        card('waits for limit', dash(d.waits_for)))];
    out.push(el('h2', null, 'Holders'));
    out.push(d.holders.length ? holdersTable(d.holders, false) : el('p', { class: 'muted' }, 'none'));
    out.push(el('h2', null, 'Waiters (policy wait), in order'));
    out.push(d.waiters.length ? table(['#', 'Task id', 'Task', 'Host:pid'],
      d.waiters.map((w) => [String(w.position), wrap(dash(w.task_id)), dash(w.task), dash(w.host) + ':' + dash(w.pid)]))
      : el('p', { class: 'muted' }, 'none'));
    out.push(el('h2', null, 'Parked tasks, in order' + (d.parked > d.entries.length ? ' (first ' + d.entries.length + ' of ' + d.parked + ')' : '')));
    out.push(d.entries.length ? table(['#', 'Task id', 'Task', 'Arguments', 'Parked for', 'Expires in', ''],
      d.entries.map((e) => [String(e.position), wrap(e.task_id), dash(e.task), wrap(dash(e.argsrepr)), secs(e.age),
        secs(e.expires_in), actionsOn ? el('button', { type: 'button', onclick: () => act('discard',
          { name: d.name, task_ids: [e.task_id] }, 'Discard parked task ' + e.task_id + ' of "' + d.name + '"? It never runs.') }, 'discard') : '']))
      : el('p', { class: 'muted' }, 'none'));
    out.push(el('h2', null, 'Promoted, message on its way'));
    out.push(d.promoted.length ? table(['Task id', 'Task', 'Arguments', 'Age', 'Deadline in', ''],
      d.promoted.map((e) => [wrap(e.task_id), dash(e.task), wrap(dash(e.argsrepr)), secs(e.age), secs(e.deadline_in),
        e.overdue ? el('span', { class: 'badge over' }, 'overdue') : '']))
      : el('p', { class: 'muted' }, 'none'));
    return out;
  }

  // -- polling
  function render(d) {
    polls += 1;
    actionsOn = Boolean(d.actions);
    $('where').textContent = 'prefix ' + d.prefix + ' on ' + d.url;
    document.title = (keyName === null ? '' : keyName + ' · ') + 'celery-redislock · ' + d.prefix;
    $('content').replaceChildren(...(keyName === null ? renderOverview(d) : renderKey(d)));
    $('token-box').hidden = !actionsOn;
    $('token-state').textContent = token() ? 'token set for this tab' : 'actions need the token printed at start';
    $('key-actions').hidden = !(actionsOn && keyName !== null);
    document.body.dataset.polls = String(polls);
  }
  async function poll() {
    clearTimeout(timer);
    const status = $('status');
    try {
      const url = keyName === null ? '/api/state'
        : '/api/key/' + encodeURIComponent(keyName) + '?count=' + COUNT;
      const resp = await fetch(url, { cache: 'no-store', headers: { Accept: 'application/json' } });
      const data = await resp.json();
      if (!resp.ok) throw new Error(data.error || resp.statusText);
      render(data);
      status.className = 'status';
      status.textContent = 'updated ' + new Date().toLocaleTimeString();
    } catch (err) {
      status.className = 'status error';
      status.textContent = 'cannot update: ' + err.message;
    }
    timer = setTimeout(poll, POLL_MS);
  }

  function start() {
    takeToken();
    $('token-save').addEventListener('click', () => {
      sessionStorage.setItem('redislock-token', $('token').value.trim());
      $('token').value = '';
      $('token-state').textContent = token() ? 'token set for this tab' : 'no token';
    });
    if (keyName !== null) {
      $('pause').addEventListener('click', () => {
        const seconds = Number($('pause-seconds').value);
        act('pause', { name: keyName, seconds }, 'Pause "' + keyName + '" for ' + seconds + ' s? No task of it starts meanwhile.');
      });
      $('resume').addEventListener('click', () => act('resume', { name: keyName }, 'Resume "' + keyName + '" now?'));
      $('discard-all').addEventListener('click', () => act('discard', { name: keyName, task_ids: [] },
        'Discard ALL parked tasks of "' + keyName + '"? They never run.'));
    }
    poll();
  }
  document.addEventListener('DOMContentLoaded', start);
}());
