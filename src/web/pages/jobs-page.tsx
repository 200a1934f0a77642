import { useEffect, useState } from 'react';
import { Link, useSearchParams } from 'react-router';
import type { JobSummaryView } from '../../api/contract/job-view';
import { PAGE, useJobs, useTeams, type JobFilters } from '../api/queries';
import { useSession } from '../api/session';
import { isTerminalJobState, JOB_STATES, STAGE_STATES } from '../../api/contract/states';
import { EmptyState, ErrorNote } from '../components/empty-state';
import { StateBadge } from '../components/state-badge';
import { Elapsed, RelativeTime } from '../components/time-text';
import { TableHead } from '../components/table-head';
import { jobPath } from './job-path';

/** Jobs, newest first, filtered by state, team and name (kept in the address, so a filtered list can be shared); live. */
export function JobsPage() {
  const [params, setParams] = useSearchParams();
  const { who } = useSession();
  const filters: JobFilters = { state: params.get('state') ?? undefined, team: params.get('team') ?? undefined, name: params.get('name') ?? undefined };
  const pages = Math.max(1, Number(params.get('pages') ?? 1) || 1);
  const jobs = useJobs(filters, pages);
  const set = (key: string, value: string | undefined) =>
    setParams(
      (p) => {
        const next = new URLSearchParams(p);
        if (value) next.set(key, value);
        else next.delete(key);
        if (key !== 'pages') next.delete('pages');
        return next;
      },
      { replace: true },
    );
  const filtered = Boolean(filters.state || filters.team || filters.name);
  return (
    <section>
      <div className="page-head">
        <h1>Jobs</h1>
        <Filters filters={filters} fixedTeam={who?.kind === 'team' ? who.team : null} set={set} />
      </div>
      {jobs.error ? <ErrorNote error={jobs.error} retry={() => void jobs.refetch()} /> : null}
      {jobs.data && jobs.data.length === 0 ? (
        filtered ? (
          <EmptyState title="No jobs match these filters.">
            <button type="button" className="button" onClick={() => setParams({}, { replace: true })}>
              Clear the filters
            </button>
          </EmptyState>
        ) : (
          <EmptyState title="No jobs yet.">
            Submit one: <code>gantry submit examples/pipeline.yaml</code>, or <code>POST /v1/jobs</code>. It shows here as soon as it is accepted.
          </EmptyState>
        )
      ) : null}
      {jobs.data && jobs.data.length > 0 ? (
        <>
          <div className="table-wrap">
            <table className="table jobs-table">
              <TableHead columns={['State', 'Job', 'Team', 'Stages', 'Priority', 'Submitted', 'Duration']} num={['Priority']} />
              <tbody>
                {jobs.data.map((j) => (
                  <JobRow key={j.id} job={j} />
                ))}
              </tbody>
            </table>
          </div>
          {jobs.data.length >= PAGE * pages && PAGE * pages < 1000 ? (
            <button type="button" className="button more" onClick={() => set('pages', String(pages + 1))}>
              Show {PAGE} more
            </button>
          ) : null}
        </>
      ) : null}
      {jobs.isPending ? <p className="muted">Loading jobs…</p> : null}
    </section>
  );
}

function JobRow({ job }: { job: JobSummaryView }) {
  return (
    <tr data-job={job.id}>
      <td>
        <StateBadge state={job.state} title={job.failureReason ?? undefined} />
      </td>
      <td>
        <Link to={`/jobs/${encodeURIComponent(job.id)}`} className="job-name">
          {job.name}
        </Link>
        <div className="id">{job.id}</div>
        {job.rerunOf ? (
          <div className="muted rerun-of">
            rerun of{' '}
            <Link to={jobPath(job.rerunOf)} className="id">
              {job.rerunOf}
            </Link>
          </div>
        ) : null}
      </td>
      <td>{job.team}</td>
      <td>
        <StageCounts counts={job.stageCounts} />
      </td>
      <td className="num">{job.priority}</td>
      <td>
        <RelativeTime at={job.createdAt} />
      </td>
      <td>
        <Elapsed from={job.createdAt} to={isTerminalJobState(job.state) ? (job.finishedAt ?? job.updatedAt) : null} />
      </td>
    </tr>
  );
}

/** A job's stages by state: a bar of coloured parts, and "2/3 done". */
function StageCounts({ counts }: { counts: Record<string, number> }) {
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  const parts = STAGE_STATES.filter((s) => counts[s]).map((s) => ({ state: s, n: counts[s]! }));
  const words = parts.map((p) => `${p.n} ${p.state}`).join(', ');
  return (
    <span className="stagecounts" title={words} aria-label={words}>
      <span className="stagebar">
        {parts.map((p) => (
          <span key={p.state} className={`stagebar-part fill-${p.state}`} style={{ flexGrow: p.n }} />
        ))}
      </span>
      <span className="muted">
        {counts.succeeded ?? 0}/{total}
      </span>
    </span>
  );
}

function Filters({ filters, fixedTeam, set }: { filters: JobFilters; fixedTeam: string | null; set: (k: string, v: string | undefined) => void }) {
  const teams = useTeams();
  const urlName = filters.name ?? '';
  const [name, setName] = useState(urlName);
  // The address changed under the field (the filters were cleared, or back was pressed): follow it.
  const [seen, setSeen] = useState(urlName);
  if (seen !== urlName) {
    setSeen(urlName);
    setName(urlName);
  }
  // The name goes into the address a moment after typing stops: one list request, not one per key.
  useEffect(() => {
    if (name.trim() === urlName) return;
    const t = setTimeout(() => set('name', name.trim() || undefined), 250);
    return () => clearTimeout(t);
  }, [name, urlName]);
  return (
    <form className="filters" role="search" onSubmit={(e) => e.preventDefault()}>
      <label>
        State
        <select value={filters.state ?? ''} onChange={(e) => set('state', e.target.value || undefined)}>
          <option value="">any</option>
          {JOB_STATES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </label>
      <label>
        Team
        {fixedTeam ? (
          <input value={fixedTeam} disabled title="a team token sees its own team's jobs only" />
        ) : (
          <>
            <input list="teams" value={filters.team ?? ''} placeholder="any" onChange={(e) => set('team', e.target.value.trim() || undefined)} />
            <datalist id="teams">
              {teams.data?.map((t) => (
                <option key={t.name} value={t.name} />
              ))}
            </datalist>
          </>
        )}
      </label>
      <label>
        Name
        <input type="search" value={name} placeholder="part of a name" onChange={(e) => setName(e.target.value)} />
      </label>
    </form>
  );
}
