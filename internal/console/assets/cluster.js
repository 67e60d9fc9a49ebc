// Cluster (DescribeCluster, docs/cluster.md): the mode, the live
// instances with what each owns, and who owns each partition and
// coordinates each share group, at which epoch; refreshed every few
// seconds, so a failover or a handover shows as it happens.
import * as api from './api.js';
import { h, table, field, setStatus, n } from './ui.js';

const POLL_MS = 2000;

const modeText = {
  single: 'single node (--store file): this instance owns everything',
  'active-standby': 'active-standby: the active instance owns every partition and group, the others forward to it',
  partitioned: 'partitioned: each instance owns a share of the partitions and groups',
};

export function clusterPage() {
  const out = h('div', {});
  const paused = h('input', { type: 'checkbox', name: 'paused' });
  let stopped = false, timer = null;
  const poll = async () => {
    const res = await api.get('/v1/cluster');
    const parts = res.partitions || [], groups = res.groups || [];
    const owned = {}, coord = {};
    for (const p of parts) owned[p.ownerId] = (owned[p.ownerId] || 0) + 1;
    for (const g of groups) coord[g.coordinatorId] = (coord[g.coordinatorId] || 0) + 1;
    const ids = new Set((res.instances || []).map((i) => i.instanceId));
    const unowned = parts.filter((p) => !p.ownerId || !ids.has(p.ownerId)).length;
    out.replaceChildren(
      h('p', { id: 'cluster-mode' }, 'Mode: ', h('strong', {}, res.mode || '?'), ' — ', modeText[res.mode] || ''),
      unowned ? h('p', { class: 'error', id: 'cluster-unowned' }, `${unowned} partition(s) without a live owner (an election is under way, or an owner is gone).`) : '',
      table('Instances', ['Instance', 'gRPC address', 'HTTP address', 'Partitions owned', 'Share groups coordinated'],
        (res.instances || []).map((i) => [h('code', {}, i.instanceId), i.grpcAddress, i.httpAddress || '', owned[i.instanceId] || 0, coord[i.instanceId] || 0]), [3, 4]),
      table('Partition owners', ['Topic', 'Partition', 'Owner', 'Epoch'],
        parts.map((p) => [p.topic, p.partition, p.ownerId ? h('code', {}, p.ownerId) : h('span', { class: 'muted' }, 'none'), n(p.epoch) || '']), [1, 3]),
      table('Share-group coordinators', ['Group', 'Coordinator', 'Epoch'],
        groups.map((g) => [h('a', { href: '#/groups/' + encodeURIComponent(g.groupId) }, g.groupId), g.coordinatorId ? h('code', {}, g.coordinatorId) : '', n(g.epoch) || '']), [2]));
  };
  const tick = async () => {
    if (stopped) return;
    if (!paused.checked) {
      try { await poll(); setStatus(''); } catch (e) { if (e.status === 401) { stopped = true; return; } setStatus(e.message, true); }
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  };
  return {
    title: 'Cluster',
    el: h('section', {}, h('h1', {}, 'Cluster'), h('form', { class: 'inline', 'aria-label': 'Refresh' }, field('Pause refresh', paused)), out),
    load: async () => { await poll(); timer = setTimeout(tick, POLL_MS); },
    stop: () => { stopped = true; clearTimeout(timer); },
  };
}
