#!/usr/bin/env python3
"""A mass loss's time split per stage (docs/failure-detection.md, "A loss batch READ COMMITTED").

Usage: python3 bench/mass-loss-split.py DIR SCHEMA, after
  GANTRY_BENCH_KEEP_SCHEMA=1 GANTRY_BENCH_MASSLOSS_OUT=DIR/massloss.json GANTRY_BENCH_PG_TXLOG=DIR/tx \
  GANTRY_BENCH_SERVER_FLAGS="--import tsx --import ./bench/pg-tx-log-preload.ts" \
  node --import tsx bench/fleet.ts --agents 5000 --stores postgres --lose 500 --out FILE
(SCHEMA: the name the bench prints as kept; drop it afterwards). Reads PostgreSQL at 127.0.0.1
(database `test`) with psql. For each lost stage, in seconds after the stop: its machine's last
heartbeat, the floor (that + lostAfterMs, 14 s at the 4 s period of 5,000 agents), its attempt
lost (the batch's time), the next attempt placed elsewhere, the fleet's receipt; and the reapers'
batches in the transaction log (committed, refused, durations).
"""
import json, subprocess, sys, glob, statistics as st
d = sys.argv[1]; schema = sys.argv[2]
ml = json.load(open(f'{d}/massloss.json')); t0 = ml['t0']; ids = ml['machines']
def q(sql):
    out = subprocess.run(['psql','-h','127.0.0.1','-d','test','-AtF','|','-c',f'set search_path={schema}; '+sql],capture_output=True,text=True,check=True).stdout
    return [l.split('|') for l in out.strip().split('\n') if l and l != 'SET']
idl = ','.join("'%s'" % i for i in ids)
mach = {r[0]: float(r[1]) for r in q(f"select id, last_heartbeat_at from machines where id in ({idl})")}
lost_ev = {r[0]: float(r[1]) for r in q(f"select machine_id, min(at) from events where type='machine:lost' and machine_id in ({idl}) group by machine_id")}
# the lost attempt (on a victim) and the next attempt of the same stage elsewhere
a1 = q(f"select stage_id, machine_id, finished_at, job_id from attempts where machine_id in ({idl}) and state='lost' and finished_at >= {t0 - 1000}")
st1 = {r[0]: (r[1], float(r[2])) for r in a1}
jobOf = {r[0]: r[3] for r in a1}
byJob = ml.get('elsewhereByJob', {})
sl = ','.join("'%s'" % s for s in st1)
a2 = {r[0]: (float(r[1]), float(r[2]) if r[2] else None) for r in q(f"select stage_id, min(scheduled_at), min(started_at) from attempts where stage_id in ({sl}) and machine_id not in ({idl}) and scheduled_at >= {t0} group by stage_id")}
# reaper transactions from the tx log: machine batches (update machines ... from (values) and lost-attempts batches
txs = [json.loads(l) for f in glob.glob(f'{d}/tx/*.jsonl') for l in open(f)]
def kind(t):
    s = ' || '.join(t['statements'])
    if 'update "machines" set "health" = v.column4' in s: return 'machine-batch'
    if 'update "attempts" set "state" = $1, "reason" = v.column4' in s: return 'attempt-batch'
    return None
rb = [t for t in txs if kind(t) and t['start'] >= t0 - 1000 and t['start'] <= t0 + 60000]
print(f"reaper batches in the loss: {len(rb)}; refused {sum(t['outcome']=='refused' for t in rb)}")
for k in ('machine-batch','attempt-batch'):
    b = [t for t in rb if kind(t)==k]
    if b:
        print(f"  {k}: {len(b)} tx, {sum(t['outcome']=='commit' for t in b)} committed, {sum(t['outcome']=='refused' for t in b)} refused; first start {(min(t['start'] for t in b)-t0)/1000:.2f} s, last end {(max(t['end'] for t in b)-t0)/1000:.2f} s; durations ms median {st.median(t['end']-t['start'] for t in b):.0f} max {max(t['end']-t['start'] for t in b):.0f}")
rows = []
for sid, (m, fin) in st1.items():
    hb = mach.get(m); lev = lost_ev.get(m, fin)
    p = a2.get(sid)
    rows.append(dict(hb=(hb-t0)/1000, floor=(hb+14000-t0)/1000, judged=(lev-t0)/1000, lostAt=(fin-t0)/1000, placed=((p[0]-t0)/1000 if p else None), started=((p[1]-t0)/1000 if p and p[1] else None), recv=(byJob[jobOf[sid]]/1000 if jobOf[sid] in byJob else None)))
def pr(name, xs):
    xs = [x for x in xs if x is not None]
    if not xs: print(name, 'none'); return
    xs.sort(); n=len(xs)
    print(f"  {name:38s} n={n} min {xs[0]:6.2f} p50 {xs[n//2]:6.2f} p90 {xs[int(n*0.9)]:6.2f} max {xs[-1]:6.2f}")
print(f"{len(rows)} stages lost; seconds after the stop:")
pr('last heartbeat written', [r['hb'] for r in rows])
pr('floor (heartbeat + 14 s)', [r['floor'] for r in rows])
pr('machine judged lost (its event)', [r['judged'] for r in rows])
pr('  judged past floor', [r['judged']-r['floor'] for r in rows])
pr('attempt lost (batch tx time)', [r['lostAt'] for r in rows])
pr('  wait past floor', [r['lostAt']-r['floor'] for r in rows])
pr('placed elsewhere (scheduled_at)', [r['placed'] for r in rows])
pr('  placed - lost', [r['placed']-r['lostAt'] if r['placed'] else None for r in rows])
pr('started (started_at)', [r['started'] for r in rows])
pr('  received - placed', [r['recv']-r['placed'] if r['recv'] is not None and r['placed'] else None for r in rows])
pr('received by fleet (bench)', [x/1000 for x in ml['elsewhereMs']])
pr('seen lost (bench)', [x/1000 for x in ml['lostMs']])
# The lost-machines duty's passes, from the machine:lost events' times (each batch's transaction time).
bt = {}
for r in rows: bt[round(r['judged'], 2)] = bt.get(round(r['judged'], 2), 0) + 1
print('machines judged lost by batch (s after the stop: machines): ' + ', '.join(f'{k:.2f}: {v}' for k, v in sorted(bt.items())))
# The scheduler loop's placing transactions (planApply from the loop: a leader's transaction, its
# term read first, that locks its machines): in the 30 s from the stop, how many, how many refused
# and why (branch `placing`: the plan in chunks, docs/failure-detection.md).
def placing(t):
    s = t['statements']
    return bool(s) and '"leader"' in s[0] and any(x.startswith('select * from "machines" where "id" in') for x in s)
pl = [t for t in txs if placing(t) and t0 <= t['start'] <= t0 + 30000]
if pl:
    ref = [t for t in pl if t['outcome'] == 'refused']
    why = {}
    for t in ref:
        k = t.get('refused', {}).get('detail', '')[:60]
        why[k] = why.get(k, 0) + 1
    print(f"loop's placing tx in 30 s from the stop: {len(pl)}, refused {len(ref)}; durations ms median {st.median(t['end']-t['start'] for t in pl):.0f} max {max(t['end']-t['start'] for t in pl):.0f}")
    for k, n in sorted(why.items(), key=lambda x: -x[1]): print(f"  refused {n}: {k}")
allpl = [t for t in txs if placing(t)]
if allpl: print(f"loop's placing tx over the whole run: {len(allpl)}, refused {sum(t['outcome']=='refused' for t in allpl)}")
