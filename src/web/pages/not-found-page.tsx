import { Link, useLocation } from 'react-router';

export function NotFoundPage() {
  const { pathname } = useLocation();
  return (
    <section className="notfound">
      <h1>Nothing here</h1>
      <p>
        There is no page at <code>{pathname}</code>.
      </p>
      <p>
        Try the <Link to="/jobs">jobs</Link>, the <Link to="/pools">pools</Link> or the <Link to="/machines">machines</Link>.
      </p>
    </section>
  );
}
