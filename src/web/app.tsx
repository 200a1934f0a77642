import { Navigate, NavLink, Outlet, Route, Routes, useLocation } from 'react-router';
import { LiveEventsProvider } from './api/live-events';
import { useSession } from './api/session';
import { LiveIndicator } from './components/live-indicator';
import { JobPage } from './pages/job-page';
import { JobsPage } from './pages/jobs-page';
import { MachinesPage } from './pages/machines-page';
import { NotFoundPage } from './pages/not-found-page';
import { PoolsPage } from './pages/pools-page';
import { SignInPage } from './pages/sign-in-page';

export function App() {
  return (
    <Routes>
      <Route path="/signin" element={<SignInPage />} />
      <Route element={<SignedIn />}>
        <Route index element={<Navigate to="/jobs" replace />} />
        <Route path="jobs" element={<JobsPage />} />
        <Route path="jobs/:id" element={<JobPage />} />
        <Route path="pools" element={<PoolsPage />} />
        <Route path="machines" element={<MachinesPage />} />
        <Route path="*" element={<NotFoundPage />} />
      </Route>
    </Routes>
  );
}

/** Every page but the sign-in one: a token is needed, and the event stream runs while one is held. */
function SignedIn() {
  const { token, who, signOut } = useSession();
  const location = useLocation();
  if (!token) return <Navigate to={`/signin?next=${encodeURIComponent(location.pathname + location.search)}`} replace />;
  return (
    <LiveEventsProvider>
      <header className="topbar">
        <NavLink to="/jobs" className="brand" aria-label="Gantry: jobs">
          <img src="/favicon.svg" alt="" width={22} height={22} />
          Gantry
        </NavLink>
        <nav aria-label="Pages">
          <NavLink to="/jobs">Jobs</NavLink>
          <NavLink to="/pools">Pools</NavLink>
          <NavLink to="/machines">Machines</NavLink>
        </nav>
        <div className="topbar-end">
          <LiveIndicator />
          {who ? (
            <span className="who" title={`${who.kind === 'team' ? `team ${who.team}` : 'admin'} · ${who.name} (token ${who.tokenId})`}>
              {who.kind === 'team' ? `team ${who.team}` : 'admin'} · {who.name}
            </span>
          ) : null}
          <button type="button" className="button button-small button-quiet" onClick={() => signOut()}>
            Sign out
          </button>
        </div>
      </header>
      <main className="page">
        <Outlet />
      </main>
    </LiveEventsProvider>
  );
}
