// sharelog console: a small single-page app over the public REST API.
// Plain ES modules, no build step; routes are URL fragments (#/topics, ...).
import * as api from './api.js';
import { topicsPage, topicPage } from './topics.js';
import { recordsPage } from './records.js';
import { groupsPage, groupPage } from './groups.js';
import { consumerGroupsPage, consumerGroupPage } from './consumergroups.js';
import { changesPage } from './changes.js';
import { clusterPage } from './cluster.js';
import { setStatus, takeFlash } from './ui.js';

const main = document.getElementById('main');
const login = document.getElementById('login');
let page = null; // { stop() } of the page shown, to end its polls and streams

api.setUnauthorizedHandler(() => askToken(api.token() ? 'That token was refused.' : ''));

function askToken(msg) {
  if (page) { page.stop?.(); page = null; }
  main.replaceChildren();
  document.getElementById('login-error').textContent = msg;
  if (!login.open) login.showModal();
  document.getElementById('token').focus();
}

document.getElementById('login-form').addEventListener('submit', (ev) => {
  const t = document.getElementById('token').value.trim();
  if (!t) { ev.preventDefault(); return; }
  api.setToken(t);
  document.getElementById('token').value = '';
  render();
});
login.addEventListener('cancel', (ev) => ev.preventDefault()); // no data without a token

const signout = document.getElementById('signout');
signout.addEventListener('click', () => { api.setToken(''); location.hash = '#/topics'; render(); });

const routes = [
  [/^#\/topics\/(.+)$/, (m) => topicPage(decodeURIComponent(m[1])), 'topics'],
  [/^#\/topics$/, () => topicsPage(), 'topics'],
  [/^#\/records(?:\?(.*))?$/, (m) => recordsPage(new URLSearchParams(m[1] || '')), 'records'],
  [/^#\/groups\/(.+)$/, (m) => groupPage(decodeURIComponent(m[1])), 'groups'],
  [/^#\/groups$/, () => groupsPage(), 'groups'],
  [/^#\/consumer-groups\/(.+)$/, (m) => consumerGroupPage(decodeURIComponent(m[1])), 'consumer-groups'],
  [/^#\/consumer-groups$/, () => consumerGroupsPage(), 'consumer-groups'],
  [/^#\/changes(?:\?(.*))?$/, (m) => changesPage(new URLSearchParams(m[1] || '')), 'changes'],
  [/^#\/cluster$/, () => clusterPage(), 'cluster'],
];

async function render() {
  if (page) { page.stop?.(); page = null; }
  setStatus(takeFlash());
  signout.hidden = !api.token();
  const hash = location.hash || '#/topics';
  let found = routes.find(([re]) => re.test(hash));
  if (!found) { location.hash = '#/topics'; return; }
  const [re, make, nav] = found;
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === nav) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const p = make(hash.match(re));
  page = p;
  main.replaceChildren(p.el);
  document.title = (p.title ? p.title + ' · ' : '') + 'sharelog console';
  try {
    await p.load?.();
  } catch (e) {
    if (e.status !== 401) setStatus(e.message, true);
  }
}

window.addEventListener('hashchange', render);
render();
